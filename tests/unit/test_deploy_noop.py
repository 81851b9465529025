"""The pieces that make a no-op redeploy cheap (issue 4) still detect and report change:
the engine_service host read's /health look, the engine_runtime probe, the controller-side
endpoint check (glmops_endpoint), the runner's changed count, and ansible.cfg's host key
checking. The lab e2e (tests/e2e/test_deploy_b200sim.py) proves the whole run: a second
deploy reports changed=0, a changed Plan restarts what changed."""
from __future__ import annotations

import configparser
import http.server
import importlib.util
import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import ClassVar

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
       "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class _Server(http.server.BaseHTTPRequestHandler):
    health = 200
    post_status = 200
    post_body = b'{"choices": [{"text": "x"}]}'
    seen: ClassVar[list] = []

    def do_GET(self):
        self.seen.append(("GET", self.path))
        self.send_response(self.health if self.path == "/health" else 404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.seen.append(("POST", self.path, body))
        self.send_response(self.post_status)
        self.send_header("Content-Length", str(len(self.post_body)))
        self.end_headers()
        self.wfile.write(self.post_body)

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Server)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    _Server.seen, _Server.health, _Server.post_status = [], 200, 200
    _Server.post_body = b'{"choices": [{"text": "x"}]}'
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()


# ------------------------------------------------------------ engine_service host read
def test_state_looks_at_health_of_the_units_it_leaves_running(server, monkeypatch, capsys):
    hc = _load(REPO / "roles" / "engine_service" / "files" / "glmops_hostctl.py", "glmops_hostctl")
    props = {"up.service": {"ActiveState": "active", "UnitFileState": "enabled"},
             "down.service": {"ActiveState": "inactive", "UnitFileState": "enabled"}}
    monkeypatch.setattr(hc, "unit_show", lambda units: {u: props[u] for u in units})
    args = ["state", "--unit", "up.service=", "down.service=",
            "--health", f"up.service|{server}/health", f"down.service|{server}/health"]
    assert hc.main(args) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["restart"] == ["down.service"] and out["unhealthy"] == []
    assert out["services"] == [{"unit": "up.service", "ready": True, "fresh": False, "reason": ""}]
    assert _Server.seen == [("GET", "/health")]  # the unit to restart is not probed
    _Server.health = 503  # running but not serving: the caller must run the readiness gate
    hc.main(args)
    out = json.loads(capsys.readouterr().out)
    assert out["unhealthy"] == ["up.service"] and out["services"] == []


# ------------------------------------------------------------ engine_runtime probe
def test_runtime_probe_reads_manifest_marker_and_packages(tmp_path):
    probe = REPO / "roles" / "engine_runtime" / "files" / "glmops_runtime_probe.py"
    wh, venv = tmp_path / "wh", tmp_path / "venv"
    wh.mkdir()
    venv.mkdir()

    def run(*extra):
        proc = subprocess.run([sys.executable, str(probe), "--wheelhouse", str(wh), "--venv", str(venv), *extra],
                              capture_output=True, text=True, check=True)
        return json.loads(proc.stdout)

    assert run() == {"manifest": None, "marker": None, "packages": {}}
    (wh / "wheelhouse.json").write_text(json.dumps({"key": "k1", "lock": ["a==1"],
                                                    "system_packages": ["glmops-no-such-package"]}))
    (venv / ".glmops-runtime.json").write_text(json.dumps({"hash": "h1"}))
    out = run()
    assert out["manifest"]["key"] == "k1" and out["marker"] == {"hash": "h1"}
    assert out["packages"] == {"glmops-no-such-package": "not-installed"}
    # an explicit list wins over the manifest's; a broken marker reads as none (reinstall)
    (venv / ".glmops-runtime.json").write_text("{not json")
    out = run("--packages", "glmops-other-missing")
    assert out["marker"] is None and out["packages"] == {"glmops-other-missing": "not-installed"}


# ------------------------------------------------------------ glmops_endpoint action plugin
def _endpoint_play(tmp_path: Path, url: str, check: bool = False) -> subprocess.CompletedProcess:
    play = tmp_path / "endpoint.yml"
    play.write_text(yaml.safe_dump([{
        "name": "endpoint", "hosts": "localhost", "connection": "local", "gather_facts": False,
        "tasks": [{"name": "One-token request", "register": "r",
                   "glmops_endpoint": {"url": url, "model": "m", "timeout": 5, "retries": 1, "delay": 0}},
                  {"name": "Show", "ansible.builtin.debug": {"msg": "status={{ r.status | default('none') }} "
                                                                    "attempts={{ r.attempts | default(0) }}"}}]}]))
    argv = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", str(play)]
    return subprocess.run(argv + (["--check"] if check else []), capture_output=True, text=True, env=ENV,
                          cwd=REPO, timeout=120, check=False)


def test_endpoint_check_posts_one_token_and_fails_without_a_choice(tmp_path, server):
    proc = _endpoint_play(tmp_path, f"{server}/v1/completions")
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "status=200 attempts=1" in proc.stdout
    assert _Server.seen == [("POST", "/v1/completions", {"model": "m", "prompt": "hi", "max_tokens": 1})]
    _Server.seen = []
    proc = _endpoint_play(tmp_path, f"{server}/v1/chat/completions")
    assert proc.returncode == 0 and _Server.seen[0][2]["messages"][0]["content"] == "hi"
    _Server.post_status, _Server.post_body = 503, b"no workers"
    _Server.seen = []
    proc = _endpoint_play(tmp_path, f"{server}/v1/completions")
    assert proc.returncode != 0
    assert "answered 503 after 2 attempt(s): no workers" in proc.stdout, proc.stdout[-3000:]
    assert len(_Server.seen) == 2
    _Server.post_status, _Server.post_body = 200, b'{"choices": []}'  # 200 without a choice is no answer
    assert _endpoint_play(tmp_path, f"{server}/v1/completions").returncode != 0


def test_endpoint_check_sends_nothing_in_check_mode(tmp_path, server):
    proc = _endpoint_play(tmp_path, f"{server}/v1/completions", check=True)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert _Server.seen == []


# ------------------------------------------------------------ runner: changed count
def test_runner_counts_changes_hidden_by_no_log_from_the_recap(tmp_path):
    from glmops import runner

    result = runner.RunResult(verb="deploy", rc=0, status="successful", artifacts=tmp_path, seconds=0.0)
    censored = {"censored": "the output has been hidden due to the fact that 'no_log: true' was specified"}
    runner._collect(result, {"event": "runner_on_ok", "event_data": {"host": "lab-1", "task": "Place env files (0600)",
                                                                     "res": censored}})
    assert result.changed == 0  # the per-task event cannot tell
    runner._collect(result, {"event": "playbook_on_stats", "event_data": {"changed": {"lab-1": 2, "lab-2": 0}}})
    assert result.changed == 2 and result.hosts["lab-1"].changed == 2


# ------------------------------------------------------------ ansible.cfg: host keys
def test_ansible_cfg_keeps_host_key_checking():
    cfg = configparser.ConfigParser()
    cfg.read(REPO / "ansible.cfg")
    assert cfg.getboolean("defaults", "host_key_checking", fallback=True) is True
    ssh_args = cfg.get("ssh_connection", "ssh_args", fallback="")
    assert "StrictHostKeyChecking" not in ssh_args and "UserKnownHostsFile" not in ssh_args
    assert "ControlPersist" in ssh_args and cfg.getboolean("ssh_connection", "pipelining")
    # the lab inventories bring their own known_hosts and insist on it
    for inv in ("lab", "lab-b200sim", "lab-b200sim-sglang"):
        common = yaml.safe_load((REPO / "inventories" / inv / "hosts.yml").read_text())["all"]["vars"][
            "ansible_ssh_common_args"]
        assert "StrictHostKeyChecking=yes" in common and "UserKnownHostsFile=/var/lib/glmops-lab/" in common
