"""glmops_api_key (issue 15 item 4): each engine/front door gets the key its own way, only in its
0600 env file (never argv, unit files, the plan view); engines without such a mechanism are refused
(API_KEY_UNSUPPORTED, naming the engine); the gate, status, the endpoint check, smoke and bench
send ``Authorization: Bearer`` (against a local server that answers 401 without it)."""
from __future__ import annotations

import http.server
import importlib.util
import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from glmops import bench as b
from glmops import planning, render
from glmops import smoke as sm
from glmops.model import ValidationError
from local_http import serve

REPO = Path(__file__).resolve().parents[2]
KEY = "sk-unit-apikey-SECRET-7a1c9e0b42"


def _inventory(tmp_path: Path, base: str, key: str = KEY) -> Path:
    out = tmp_path / base
    shutil.copytree(REPO / "inventories" / base, out)
    with open(out / "group_vars" / "all.yml", "a") as fh:
        fh.write(f"\nglmops_api_key: {json.dumps(key)}\n")
    return out


# ------------------------------------------------------------------ plan: env files only


@pytest.mark.parametrize("topology", ["disagg", "agg"])
def test_the_key_is_only_in_the_0600_env_files(tmp_path, topology):
    planned = planning.load(str(_inventory(tmp_path, "lab")), topology)
    dep, plan = planned.deployment, planned.plan
    assert KEY not in repr(dep)
    want = {"vllm": "VLLM_API_KEY", "vllm_router": "OPENAI_API_KEY"}
    for svc in plan.services:
        assert not any(KEY in w for w in svc.argv), svc.name
        assert KEY not in render.unit_text(dep, svc, plan)
        assert svc.auth_env == want[svc.engine] and svc.env[svc.auth_env] == KEY
        assert f"{want[svc.engine]}={KEY}" in render.env_text(dep, svc).splitlines()
    view = planned.view()
    secret = [f for h in view["hosts"].values() for kind in ("workers", "routers")
              for f in h[kind]["secret_files"] if KEY in f["content"]]
    assert len(secret) == len(plan.services) and {f["mode"] for f in secret} == {"0600"}
    assert all(f["path"].endswith(".env") for f in secret)
    public = json.dumps({k: v for k, v in view.items() if k != "hosts"}) + json.dumps(
        [f for h in view["hosts"].values() for kind in ("workers", "routers") for f in h[kind]["files"]])
    assert KEY not in public
    # the gate/status read it on the host: VAR@env file, never the value
    assert {s["auth"] for s in view["services"]} == {
        f"{want[s.engine]}@{render.env_path(dep, s)}" for s in plan.services}
    # the smoke target (written into run summaries) knows a key is needed, never the key
    target = planned.smoke_target()
    assert target.api_key_required and KEY not in json.dumps(target.__dict__, default=str)


def test_no_key_no_auth(tmp_path):
    inv = tmp_path / "lab"
    shutil.copytree(REPO / "inventories" / "lab", inv)
    planned = planning.load(str(inv), "disagg")
    assert all(not s.auth_env and "VLLM_API_KEY" not in s.env for s in planned.plan.services)
    assert {s["auth"] for s in planned.view()["services"]} == {""}
    assert not planned.smoke_target().api_key_required


@pytest.mark.parametrize("base,engines", [
    ("lab-b200sim-sglang", {"sglang"}),
    ("lab-dynamo", {"dynamo"}),
    ("b200", {"trtllm"}),
])
def test_engines_without_an_env_key_mechanism_are_refused(tmp_path, base, engines):
    with pytest.raises(ValidationError) as exc:
        planning.load(str(_inventory(tmp_path, base)))
    found = [p for p in exc.value.problems if p.code == "API_KEY_UNSUPPORTED"]
    assert found, [str(p) for p in exc.value.problems]
    named = {p.message.split(" ", 1)[0] for p in found}
    assert engines <= named, named
    assert all("glmops_api_key" in p.path and KEY not in str(p) for p in found)


def test_a_key_unusable_in_an_env_file_is_refused(tmp_path):
    with pytest.raises(ValidationError) as exc:
        planning.load(str(_inventory(tmp_path, "lab", key='has space "and" $dollar')), "disagg")
    codes = [p.code for p in exc.value.problems]
    assert "API_KEY" in codes, codes


# ------------------------------------------------------------------ a server that wants the key


class _Auth(http.server.BaseHTTPRequestHandler):
    seen: list[str | None] = []

    def _answer(self, body: dict | None = None):
        self.seen.append(self.headers.get("Authorization"))
        if self.headers.get("Authorization") != f"Bearer {KEY}":
            data, code = b'{"error": "Unauthorized"}', 401
        else:
            code = 200
            if self.path.startswith("/v1/models"):
                data = json.dumps({"object": "list", "data": [{"id": "m", "object": "model"}]}).encode()
            elif self.path.startswith("/v1/"):
                data = json.dumps({"choices": [{"text": "x", "index": 0}], "usage": {"completion_tokens": 1}}).encode()
            else:
                data = b""
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):  # noqa: N802
        self._answer()

    def do_POST(self):  # noqa: N802
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self._answer()

    def log_message(self, *a):
        pass


@pytest.fixture
def server():
    _Auth.seen = []
    with serve(_Auth) as url:
        yield url


@pytest.fixture
def hostctl(monkeypatch, tmp_path):
    path = REPO / "roles" / "engine_service" / "files" / "glmops_hostctl.py"
    spec = importlib.util.spec_from_file_location("glmops_hostctl_apikey", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    monkeypatch.setattr(mod, "GATE_DIR", str(tmp_path / "gate"))
    monkeypatch.setattr(mod, "journal", lambda unit, lines=100: "")
    active = {"Id": "u.service", "ActiveState": "active", "SubState": "running", "MainPID": "42",
              "NRestarts": "0", "ExecMainStartTimestampMonotonic": "1", "UnitFileState": "enabled"}
    monkeypatch.setattr(mod, "unit_show", lambda units: {u: dict(active, Id=u) for u in units})
    return mod


def _env_file(tmp_path: Path, name: str = "VLLM_API_KEY", value: str = KEY) -> Path:
    """An env file as glmops.render writes it (a value with other characters is double-quoted)."""
    env = tmp_path / "svc.env"
    env.write_text(f"# Managed by glmops\nA=1\n{name}={value}\nZ=\"two words\"\n")
    env.chmod(0o600)
    return env


def test_hostctl_reads_the_key_from_the_env_file(hostctl, tmp_path):
    env = _env_file(tmp_path)
    assert hostctl.api_key(f"VLLM_API_KEY@{env}") == KEY
    assert hostctl.api_key("") == "" and hostctl.api_key(f"OTHER@{env}") == ""
    assert hostctl.env_value(str(env), "Z") == "two words"
    assert hostctl.api_key(f"VLLM_API_KEY@{tmp_path / 'missing.env'}") == ""


def test_gate_sends_the_key_and_is_refused_without_it(hostctl, server, tmp_path, capsys):
    env = _env_file(tmp_path)
    spec = f"u.service|{server}/health|{server}/v1/completions|VLLM_API_KEY@{env}"
    assert hostctl.main(["ready", "--timeout", "20", "--model", "m", "--service", spec, "--fresh", "u.service"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["services"][0]["ready"], out
    assert _Auth.seen and set(_Auth.seen) == {f"Bearer {KEY}"}
    assert KEY not in json.dumps(out)
    # without the key the one-token request answers 401: a permanent refusal, at once
    spec = f"u.service|{server}/health|{server}/v1/completions"
    assert hostctl.main(["ready", "--timeout", "20", "--model", "m", "--service", spec, "--fresh", "u.service"]) == 1
    res = json.loads(capsys.readouterr().out)["services"][0]
    assert not res["ready"] and "401" in res["reason"], res


def test_status_sends_the_key(hostctl, server, tmp_path, capsys):
    env = _env_file(tmp_path, "OPENAI_API_KEY")
    hostctl.main(["status", "--service", f"u.service|{server}/health|OPENAI_API_KEY@{env}", f"v.service|{server}/health"])
    rows = {r["unit"]: r for r in json.loads(capsys.readouterr().out)["services"]}
    assert rows["u.service"]["health"] == 200 and rows["v.service"]["health"] == 401


def test_endpoint_check_sends_the_key(server):
    sys.path.insert(0, str(REPO / "glmops" / "ansible" / "action_plugins"))
    try:
        import glmops_endpoint as ep
    finally:
        sys.path.pop(0)
    assert ep.one_token(f"{server}/v1/completions", "m", 5)[0] == 401
    key = ep.api_key(None, {"glmops_api_key": KEY})
    assert key == KEY and ep.api_key(None, {}) == ""
    status, raw = ep.one_token(f"{server}/v1/completions", "m", 5, key)
    assert status == 200 and ep.has_choice(raw)


def test_smoke_sends_the_key(server, tmp_path):
    target = sm.SmokeTarget(endpoint=server, model="m", api_key_required=True)
    bad = sm.run(target, only=["models"])
    assert not bad.ok and "401" in bad.checks[0].reason
    ok = sm.run(target, only=["models"], headers=sm.auth_headers(KEY))
    assert ok.ok, ok.to_dict()
    # from the inventory (the loader decrypts Vault values); GLMOPS_API_KEY without one
    assert sm.api_key_headers(str(_inventory(tmp_path, "lab"))) == {"Authorization": f"Bearer {KEY}"}
    os.environ["GLMOPS_API_KEY"] = KEY
    try:
        assert sm.api_key_headers(None) == {"Authorization": f"Bearer {KEY}"}
    finally:
        del os.environ["GLMOPS_API_KEY"]


def test_bench_hands_aiperf_the_key_on_stdin_not_in_argv(tmp_path):
    """aiperf gets ``--api-key`` inside its process (its sys.argv), never as an argv word of the
    process (/proc/<pid>/cmdline) or in command.txt."""
    script = tmp_path / "bin" / "aiperf"
    script.parent.mkdir()
    report = tmp_path / "seen.json"
    script.write_text(
        f"#!{sys.executable}\nimport json, sys\n"
        f"cmdline = open('/proc/self/cmdline', 'rb').read().decode()\n"
        f"json.dump({{'argv': sys.argv, 'cmdline': cmdline}}, open({str(report)!r}, 'w'))\n"
        "sys.exit(3)\n")
    script.chmod(0o755)
    target = b.BenchTarget(endpoint="http://127.0.0.1:9", model="m", tokenizer="builtin", gpus=1, gpu_basis="GPU")
    cfg = b.SweepConfig(concurrency=[1])
    run = b.aiperf_point_runner(str(script), target, cfg, 60, api_key=KEY)
    raw = tmp_path / "run" / "raw" / "c0001"
    raw.mkdir(parents=True)
    with pytest.raises(b.BenchError):
        run(1, raw)
    seen = json.loads(report.read_text())
    assert seen["argv"][-2:] == ["--api-key", KEY]
    assert KEY not in seen["cmdline"] and KEY not in (raw / "command.txt").read_text()
    assert b.keyed_argv(["/opt/v/bin/aiperf", "profile"], remote=True)[0] == "/opt/v/bin/python3"


# ------------------------------------------------------------------ destructive verbs confirm


@pytest.mark.parametrize("tty,answer,code", [(False, "", 2), (True, "n\n", 1), (True, "\n", 1)])
def test_destroy_asks_on_a_terminal_and_needs_yes_without_one(monkeypatch, tty, answer, code):
    """``glmops destroy`` without --yes: on a terminal it asks (default no), without one it refuses
    naming --yes (exit 2); either way nothing is run (the input is checked, on the controller, first)."""
    from click.testing import CliRunner

    from glmops import runner
    from glmops.cli import main

    monkeypatch.setattr(runner, "run", lambda *a, **k: pytest.fail("ran without confirmation"))
    monkeypatch.setattr("glmops.commands.common.interactive", lambda: tty)
    res = CliRunner().invoke(main, ["destroy", "-i", str(REPO / "inventories" / "lab")], input=answer)
    assert res.exit_code == code, res.output
    assert ("--yes" in res.output) == (not tty)
    assert ("Go on?" in res.output) == tty


def test_a_pd_front_door_that_checks_no_key_is_a_warning_strict_refuses(tmp_path):
    """vllm-router 0.1.17 in PD mode authenticates to the workers itself and checks no client key
    (catalog engines.yaml vllm_router.api_key, its source: vllm_pd_router.rs): the disagg lab plan
    with a key warns API_KEY_OPEN_FRONT_DOOR (exit 0), --strict refuses it (exit 2); the agg plan,
    whose router forwards the client's header, does not warn."""
    inv = tmp_path / "lab"
    shutil.copytree(REPO / "inventories" / "lab", inv)
    gv = inv / "group_vars" / "all.yml"
    gv.write_text(gv.read_text() + "\nglmops_api_key: k3y-0123456789abcdef\n")
    for topology, warned in (("disagg", True), ("agg", False)):
        proc = _glmops("validate", "-i", str(inv), "--topology", topology)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert ("API_KEY_OPEN_FRONT_DOOR" in proc.stdout + proc.stderr) is warned, (topology, proc.stdout + proc.stderr)
        assert "k3y-0123456789abcdef" not in proc.stdout + proc.stderr
    strict = _glmops("validate", "-i", str(inv), "--topology", "disagg", "--strict")
    assert strict.returncode == 2 and "API_KEY_OPEN_FRONT_DOOR" in strict.stdout + strict.stderr


def _glmops(*args: str):
    import subprocess
    return subprocess.run([sys.executable, "-m", "glmops.cli", *args], capture_output=True, text=True, timeout=120,
                          cwd=REPO, stdin=subprocess.DEVNULL)
