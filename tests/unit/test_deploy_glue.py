"""The deploy glue without hosts: the plan view the playbooks get, the glmops_plan plugin
(bad input fails before any host is contacted), the runner, the host helper's change
detection and readiness rules, rolling restart steps, playbook syntax."""
from __future__ import annotations

import http.server
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import yaml
from local_http import reply

from glmops.planning import PlanProblems, plan_view

REPO = Path(__file__).resolve().parents[2]
LAB_INV = REPO / "inventories" / "lab"
API_KEY = "sk-unit-test-SECRET-0001"
ENV = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
       "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}


def _copy_inventory(tmp_path: Path, **group_vars) -> Path:
    out = tmp_path / "lab"
    shutil.copytree(LAB_INV, out)
    gv = out / "group_vars" / "all.yml"
    data = yaml.safe_load(gv.read_text())
    data.update(group_vars)
    gv.write_text(yaml.safe_dump(data, sort_keys=False))
    return out


@pytest.mark.parametrize("topology,units", [
    ("disagg", {"lab-1": ["glm-lab-prefill-0.service"], "lab-2": ["glm-lab-decode-0.service"],
                "lab-3": ["glm-lab-router.service"]}),
    ("agg", {"lab-1": ["glm-lab-agg-0.service"], "lab-2": ["glm-lab-agg-1.service"],
             "lab-3": ["glm-lab-router.service"]}),
])
def test_lab_plan_view_places_workers_and_router(topology, units):
    view = plan_view(str(LAB_INV), topology)
    assert {h: v["units"] for h, v in view["hosts"].items()} == units
    assert view["worker_hosts"] == ["lab-1", "lab-2"] and view["router_hosts"] == ["lab-3"]
    assert view["endpoint_url"] == "http://10.77.0.13:8000"
    assert view["endpoint_ready_url"] == "http://10.77.0.13:8000/v1/completions"
    assert view["unit_glob"] == "glm-lab-*.service"
    for host, hv in view["hosts"].items():
        assert hv["target"]["path"] == "/etc/systemd/system/glm-lab.target"
        for kind in ("workers", "routers"):
            bundle = hv[kind]
            for svc in bundle["services"]:
                assert svc["health_url"].endswith("/health") and "/v1/models" not in svc["ready_url"]
                paths = {f["path"] for f in bundle["files"] + bundle["secret_files"]}
                assert set(svc["paths"]) <= paths and svc["paths"][0] == f"/etc/systemd/system/{svc['unit']}"
                assert "content" not in svc
            for f in bundle["secret_files"]:
                assert f["mode"] == "0600" and f["owner"] == "root" and f["path"].endswith(".env")
    workers = [s for s in view["services"] if s["pool"] != "router"]
    assert all(s["start_order"] < 50 for s in workers)
    assert view["services"][-1]["pool"] == "router"
    assert view["hosts"]["lab-1"]["runtimes"] == [
        {"engine": "vllm", "version": "0.32.0", "venv": "/opt/glmops/venvs/vllm-0.32.0", "pins": []}]
    assert view["hosts"]["lab-3"]["runtimes"][0]["engine"] == "vllm_router"


def test_secrets_only_in_secret_files(tmp_path):
    inv = _copy_inventory(tmp_path, glmops_env={"GLMOPS_API_KEY": API_KEY})
    view = plan_view(str(inv), "disagg")
    secret_texts = [f["content"] for hv in view["hosts"].values() for k in ("workers", "routers")
                    for f in hv[k]["secret_files"]]
    assert sum(API_KEY in t for t in secret_texts) == 3
    public = json.loads(json.dumps(view))
    for hv in public["hosts"].values():
        for k in ("workers", "routers"):
            hv[k]["secret_files"] = []
    assert API_KEY not in json.dumps(public)


def test_plan_view_raises_every_problem(tmp_path):
    inv = _copy_inventory(tmp_path, glmops_engine="vllmm", glmops_kv_cache_dtype="fp4x")
    with pytest.raises(PlanProblems) as exc:
        plan_view(str(inv))
    text = str(exc.value)
    assert "glmops_engine" in text and "vllmm" in text


def _unroutable_inventory(tmp_path: Path, **group_vars) -> Path:
    """The lab inventory with hosts on TEST-NET-1 (nothing answers): contacting one fails."""
    inv = _copy_inventory(tmp_path, **group_vars)
    hosts = yaml.safe_load((inv / "hosts.yml").read_text())
    for group in hosts["all"]["children"].values():
        for i, h in enumerate(group["hosts"].values()):
            h["ansible_host"] = f"192.0.2.{50 + i}"
    (inv / "hosts.yml").write_text(yaml.safe_dump(hosts))
    return inv


def test_plugin_fails_with_every_problem_and_contacts_no_host(tmp_path):
    inv = _unroutable_inventory(tmp_path, glmops_engine="vllmm", glmops_topology="sideways")
    proc = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inv),
                           str(REPO / "playbooks" / "deploy.yml")],
                          capture_output=True, text=True, env=ENV, cwd=REPO, timeout=120)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "glmops_engine" in out and "vllmm" in out and "glmops_topology" in out, out[-3000:]
    assert "no host contacted" in out
    for host in ("lab-1", "lab-2", "lab-3"):
        assert f"{host}  " not in out.split("PLAY RECAP")[-1], out[-2000:]
    assert "UNREACHABLE" not in out


def test_plugin_returns_the_plan_without_showing_it(tmp_path):
    inv = _unroutable_inventory(tmp_path, glmops_env={"GLMOPS_API_KEY": API_KEY})
    play = tmp_path / "plan_only.yml"
    play.write_text(yaml.safe_dump([{
        "name": "plan", "hosts": "localhost", "connection": "local", "gather_facts": False,
        "tasks": [
            {"name": "Plan", "glmops_plan": {"topology": "agg"}, "register": "p"},
            {"name": "Show", "ansible.builtin.debug": {
                "msg": "{{ p.plan.hosts | dictsort | map('first') | join(',') }} {{ p.plan.topology }}"}},
        ]}]))
    proc = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inv), str(play)],
                          capture_output=True, text=True, env=ENV, cwd=REPO, timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "lab-1,lab-2,lab-3 agg" in proc.stdout
    assert API_KEY not in proc.stdout + proc.stderr


def test_runner_and_cli_on_bad_input(tmp_path, monkeypatch):
    from glmops import runner

    monkeypatch.setenv("GLMOPS_RUNS_DIR", str(tmp_path / "runs"))
    inv = _unroutable_inventory(tmp_path, glmops_engine="vllmm")
    result = runner.run("deploy", "deploy.yml", inv, quiet=True)
    assert result.rc == 1 and not result.ok
    assert any("vllmm" in f for f in result.failures), result.failures
    assert result.artifacts.parent == tmp_path / "runs" and result.artifacts.name.endswith("-deploy")
    assert (result.artifacts / "artifacts" / "run" / "job_events").is_dir()
    assert set(result.hosts) == {"localhost"}  # no lab host was contacted
    proc = subprocess.run([sys.executable, "-m", "glmops.cli", "deploy", "-i", str(inv)],
                          capture_output=True, text=True, cwd=REPO, timeout=120,
                          env={**ENV, "GLMOPS_RUNS_DIR": str(tmp_path / "runs2")})
    assert proc.returncode == 2 and "vllmm" in proc.stderr
    assert "problem(s) in" in proc.stderr and "no host contacted" in proc.stderr
    # bad input: the run stopped in its plan play, on the controller: no lab host in any event
    events = " ".join(p.read_text() for p in (tmp_path / "runs2").glob("*/artifacts/run/job_events/*.json"))
    assert events and "lab-1" not in events and "192.0.2." not in events


def test_cli_verbs_are_registered():
    proc = subprocess.run([sys.executable, "-m", "glmops.cli", "--help"], capture_output=True, text=True,
                          cwd=REPO, timeout=60)
    for verb in ("deploy", "serve", "status", "logs", "restart", "stop", "destroy"):
        assert f"  {verb} " in proc.stdout
    proc = subprocess.run([sys.executable, "-m", "glmops.cli", "destroy", "-i", str(LAB_INV)],
                          capture_output=True, text=True, cwd=REPO, timeout=60)
    assert proc.returncode == 2 and "--yes" in proc.stderr


def test_rolling_steps_one_replica_or_pool_at_a_time():
    from glmops.commands.lifecycle import rolling_steps

    agg = rolling_steps(plan_view(str(LAB_INV), "agg"))
    assert agg == [("agg replica 0", ["glm-lab-agg-0.service"]), ("agg replica 1", ["glm-lab-agg-1.service"]),
                   ("router", ["glm-lab-router.service"])]
    disagg = rolling_steps(plan_view(str(LAB_INV), "disagg"))
    assert [s for s, _ in disagg] == ["prefill pool", "decode pool", "router"]


def test_playbook_syntax():
    books = [str(REPO / "playbooks" / f"{verb}.yml")
             for verb in ("deploy", "serve", "status", "stop", "restart", "logs", "destroy")]
    proc = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "--syntax-check", "-i",
                           str(LAB_INV), *books], capture_output=True, text=True, env=ENV, cwd=REPO, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("playbook: ") == len(books)


# ----------------------------------------------------------------------------- host helper
def _hostctl():
    path = REPO / "roles" / "engine_service" / "files" / "glmops_hostctl.py"
    spec = importlib.util.spec_from_file_location("glmops_hostctl", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_hostctl_state_finds_drift_and_what_to_restart(tmp_path, monkeypatch, capsys):
    import grp
    import hashlib
    import pwd

    hc = _hostctl()
    me, group = pwd.getpwuid(os.getuid()).pw_name, grp.getgrgid(os.getgid()).gr_name
    unit = tmp_path / "a.service"
    unit.write_text("[Service]\n")
    unit.chmod(0o644)
    env = tmp_path / "a.env"
    env.write_text("K=v\n")
    env.chmod(0o644)  # wrong mode: drift
    want = [f"{unit}={hashlib.sha256(b'[Service]' + bytes([10])).hexdigest()}:0644:{me}:{group}",
            f"{env}={hashlib.sha256(b'K=v' + bytes([10])).hexdigest()}:0600:{me}:{group}",
            f"{tmp_path}=dir:{os.stat(tmp_path).st_mode & 0o7777:04o}:{me}:{group}",
            f"{tmp_path / 'missing.yml'}=00:0644:root:root"]
    active = {"a.service": {"Id": "a.service", "ActiveState": "active", "UnitFileState": "enabled"},
              "b.service": {"Id": "b.service", "ActiveState": "active", "UnitFileState": "enabled"},
              "c.service": {"Id": "c.service", "ActiveState": "failed", "UnitFileState": "enabled"}}
    monkeypatch.setattr(hc, "unit_show", lambda units: {u: active[u] for u in units})
    rc = hc.main(["state", "--want", *want, "--unit", f"a.service={unit},{env}", f"b.service={unit}",
                  "c.service=", "--user", "root"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0
    assert out["drifted"] == [str(env), str(tmp_path / "missing.yml")]
    assert out["restart"] == ["a.service", "c.service"]  # a: env drifted; c: not active
    assert out["user"] is True


class _Engine(http.server.BaseHTTPRequestHandler):
    health = 503
    seen: list = []

    def do_GET(self):
        self.seen.append(self.path)
        code = self.health if self.path == "/health" else 200  # /v1/models answers at once
        body = b'{"data": [{"id": "m"}]}' if self.path == "/v1/models" else b""
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        self.seen.append(self.path)
        self.rfile.read(int(self.headers["Content-Length"]))
        reply(self, 200, json.dumps({"choices": [{"text": "x"}]}).encode())

    def log_message(self, *args):
        pass


@pytest.fixture
def engine():
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Engine)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    _Engine.seen = []
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()


def test_hostctl_ready_needs_health_200_then_one_token(engine, monkeypatch, capsys):
    hc = _hostctl()
    monkeypatch.setattr(hc, "unit_show", lambda units: {u: {"ActiveState": "active", "MainPID": "7"} for u in units})
    monkeypatch.setattr(hc, "journal", lambda unit, lines=100: f"journal of {unit}")
    monkeypatch.setattr(hc.time, "sleep", lambda s: None)
    spec = f"u.service|{engine}/health|{engine}/v1/completions"
    _Engine.health = 503  # loading; /v1/models already answers (F13)
    rc = hc.main(["ready", "--timeout", "0.5", "--model", "m", "--service", spec, "--fresh", "u.service"])
    out = json.loads(capsys.readouterr().out)["services"][0]
    assert rc == 1 and not out["ready"] and "503" in out["reason"] and out["journal"] == "journal of u.service"
    assert "/v1/models" not in _Engine.seen and "/v1/completions" not in _Engine.seen
    _Engine.health = 200
    rc = hc.main(["ready", "--timeout", "5", "--model", "m", "--service", spec, "--fresh", "u.service"])
    out = json.loads(capsys.readouterr().out)["services"][0]
    assert rc == 0 and out["ready"] and out["fresh"] and "journal" not in out
    assert _Engine.seen[-1] == "/v1/completions"
    # left running (not fresh): its own /health suffices, no generation request
    _Engine.seen = []
    rc = hc.main(["ready", "--timeout", "5", "--model", "m", "--service", spec])
    assert rc == 0 and _Engine.seen == ["/health"]


def test_hostctl_ready_fails_fast_on_a_failed_unit(monkeypatch, capsys):
    hc = _hostctl()
    monkeypatch.setattr(hc, "unit_show", lambda units: {u: {"ActiveState": "failed", "SubState": "failed",
                                                             "Result": "exit-code", "NRestarts": "3"} for u in units})
    monkeypatch.setattr(hc, "journal", lambda unit, lines=100: "boom")
    rc = hc.main(["ready", "--timeout", "600", "--service", "u.service|http://127.0.0.1:9/health|"])
    out = json.loads(capsys.readouterr().out)["services"][0]
    assert rc == 1 and "failed" in out["reason"] and out["seconds"] < 30


def test_hostctl_ready_stops_on_a_client_error(engine, monkeypatch, capsys):
    """A 4xx to the one-token request will not change by waiting: fail at once, with the body."""
    hc = _hostctl()
    monkeypatch.setattr(hc, "unit_show", lambda units: {u: {"ActiveState": "active"} for u in units})
    monkeypatch.setattr(hc, "journal", lambda unit, lines=100: "")
    monkeypatch.setattr(hc, "one_token", lambda *a, **k: (_ for _ in ()).throw(hc.Refused("answered 400: needs bootstrap", 400)))
    _Engine.health = 200
    rc = hc.main(["ready", "--timeout", "600", "--service", f"u.service|{engine}/health|{engine}/v1/completions",
                  "--fresh", "u.service"])
    out = json.loads(capsys.readouterr().out)["services"][0]
    assert rc == 1 and "400" in out["reason"] and out["seconds"] < 30


def test_hostctl_ready_waits_out_a_short_404_of_a_front_door(engine, monkeypatch, capsys):
    """Dynamo's frontend answers 404 for the model until it has discovered its workers, a few
    ms after its /health turns 200: a 404 is final only when it lasts NOT_FOUND_GRACE_S."""
    hc = _hostctl()
    monkeypatch.setattr(hc, "unit_show", lambda units: {u: {"ActiveState": "active"} for u in units})
    monkeypatch.setattr(hc, "journal", lambda unit, lines=100: "")
    monkeypatch.setattr(hc, "NOT_FOUND_GRACE_S", 1.5)
    calls = []

    def not_found_twice(*a, **k):
        calls.append(1)
        if len(calls) <= 2:
            raise hc.Refused("answered 404: model not found", 404)
        return True, ""

    monkeypatch.setattr(hc, "one_token", not_found_twice)
    _Engine.health = 200
    spec = f"u.service|{engine}/health|{engine}/v1/completions"
    rc = hc.main(["ready", "--timeout", "60", "--service", spec, "--fresh", "u.service"])
    out = json.loads(capsys.readouterr().out)["services"][0]
    assert rc == 0 and out["ready"] and len(calls) == 3
    # a 404 that lasts (a wrong served model name) still fails long before the timeout
    monkeypatch.setattr(hc, "one_token", lambda *a, **k: (_ for _ in ()).throw(hc.Refused("answered 404: x", 404)))
    rc = hc.main(["ready", "--timeout", "600", "--service", spec, "--fresh", "u.service"])
    out = json.loads(capsys.readouterr().out)["services"][0]
    assert rc == 1 and "404" in out["reason"] and 1.5 <= out["seconds"] < 30


def test_hostctl_stale_units_must_belong_to_the_deployment(tmp_path, monkeypatch, capsys):
    """glm-flash-b200-*.service also matches deployment flash-b200-sglang's units: only
    units PartOf= this deployment's target are stale."""
    hc = _hostctl()
    monkeypatch.setattr(hc, "UNIT_DIR", str(tmp_path))
    monkeypatch.setattr(hc, "unit_show", lambda units: {u: {"ActiveState": "active"} for u in units})
    (tmp_path / "glm-flash-b200-agg-0.service").write_text("[Unit]\nPartOf=glm-flash-b200.target\n")
    (tmp_path / "glm-flash-b200-agg-1.service").write_text("[Unit]\nPartOf=glm-flash-b200.target\n")
    (tmp_path / "glm-flash-b200-sglang-agg-0.service").write_text("[Unit]\nPartOf=glm-flash-b200-sglang.target\n")
    hc.main(["state", "--glob", "glm-flash-b200-*.service", "--target", "glm-flash-b200.target",
             "--unit", "glm-flash-b200-agg-0.service="])
    assert json.loads(capsys.readouterr().out)["stale"] == ["glm-flash-b200-agg-1.service"]


def test_logs_follow_ssh_command_uses_the_inventory_connection():
    from glmops.ssh import ssh_command

    argv = ssh_command(str(LAB_INV), "lab-2", ["journalctl", "-f", "--unit=glm-lab-decode-0.service"])
    assert argv[:3] == ["ssh", "-o", "BatchMode=yes"]
    assert argv[argv.index("-i") + 1] == "/var/lib/glmops-lab/glmops/id_ed25519"
    assert "UserKnownHostsFile=/var/lib/glmops-lab/glmops/known_hosts" in argv
    assert argv[-3:] == ["--", "root@10.77.0.12", "journalctl -f --unit=glm-lab-decode-0.service"]
