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
import shutil
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


def test_state_restarts_a_unit_whose_engine_venv_was_reinstalled_after_it_started(monkeypatch, capsys, tmp_path):
    """A reinstalled venv replaces the files the running engine mapped: the unit restarts
    (its own files did not change), so the next deploy does not call it in state."""
    import time

    hc = _load(REPO / "roles" / "engine_service" / "files" / "glmops_hostctl.py", "glmops_hostctl_rt")
    # this test's own process stands in for the unit's main process
    monkeypatch.setattr(hc, "unit_show", lambda units: {u: {"ActiveState": "active", "UnitFileState": "enabled",
                                                            "MainPID": str(os.getpid())} for u in units})
    marker = tmp_path / ".glmops-runtime.json"
    marker.write_text("{}")
    started = hc.process_started(os.getpid())
    assert started is not None and abs(started - time.time()) < 3600 * 24 * 365
    os.utime(marker, (started - 60, started - 60))  # installed before the process started
    args = ["state", "--unit", "w.service=", "--runtime", f"w.service={marker}"]
    hc.main(args)
    out = json.loads(capsys.readouterr().out)
    assert out["restart"] == [] and out["reinstalled"] == []
    os.utime(marker, (time.time(), time.time()))  # reinstalled while it runs
    hc.main(args)
    out = json.loads(capsys.readouterr().out)
    assert out["restart"] == ["w.service"] and out["reinstalled"] == ["w.service"]
    from glmops.deploystate import services_in_state

    out["units"]["w.service"]["enabled"] = "enabled"
    assert services_in_state(out) == ["w.service restarts: its engine runtime was reinstalled after it started"]
    hc.main(["state", "--unit", "w.service=", "--runtime", f"w.service={tmp_path / 'missing'}"])
    assert json.loads(capsys.readouterr().out)["restart"] == []  # no marker: nothing to compare


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

    assert run() == {"manifest": None, "marker": None, "packages": {}, "platform": None, "zstd": shutil.which("zstd")}
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
    # --python: what a packed venv depends on besides its wheels (roles/engine_runtime, the archive)
    os_release = {k: v.strip('"') for k, v in (line.split("=", 1) for line in
                                                Path("/etc/os-release").read_text().splitlines() if "=" in line)}
    want = (f"{os_release['ID']}-{os_release['VERSION_ID']}-{os.uname().machine}-cpython-"
            + ".".join(map(str, sys.version_info[:3])))
    assert run("--python", sys.executable)["platform"] == want
    assert run("--python", str(tmp_path / "no-such-python"))["platform"] is None


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


# ------------------------------------------------------------ the Plan is built once per deploy
API_KEY = "sk-unit-noop-SECRET-0002"


def _unroutable_lab_inventory(tmp_path: Path, **group_vars) -> Path:
    """inventories/lab with its hosts on TEST-NET-1 (nothing answers) and ``group_vars``."""
    import shutil

    out = tmp_path / "lab"
    shutil.copytree(REPO / "inventories" / "lab", out)
    gv = out / "group_vars" / "all.yml"
    gv.write_text(yaml.safe_dump({**yaml.safe_load(gv.read_text()), **group_vars}, sort_keys=False))
    hosts = yaml.safe_load((out / "hosts.yml").read_text())
    for group in hosts["all"]["children"].values():
        for i, h in enumerate(group["hosts"].values()):
            h["ansible_host"] = f"192.0.2.{60 + i}"
    (out / "hosts.yml").write_text(yaml.safe_dump(hosts))
    return out


def test_plan_play_writes_a_secret_free_summary_and_each_hosts_precheck_needs(tmp_path):
    inv = _unroutable_lab_inventory(tmp_path, glmops_env={"GLMOPS_API_KEY": API_KEY})
    summary = tmp_path / "plan-summary.json"
    play = tmp_path / "plan_only.yml"
    play.write_text(yaml.safe_dump([
        {"ansible.builtin.import_playbook": str(REPO / "playbooks" / "plays" / "plan.yml")},
        {"name": "show", "hosts": "localhost", "gather_facts": False, "tasks": [
            {"name": "Show", "ansible.builtin.debug": {"msg": "needs {{ glmops_plan_result.precheck_needs"
                                                               "['lab-3'].ports | dictsort | map('first') | list }}"}},
            {"name": "Keys", "ansible.builtin.debug": {"msg": "IN_PLAN {{ 'precheck_needs' in glmops_plan_result.plan }}"}},
        ]}]))
    proc = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inv), str(play),
                           "-e", f"glmops_plan_summary={summary}", "-e", "glmops_topology=disagg"],
                          capture_output=True, text=True, env=ENV, cwd=REPO, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "needs [8000, 29000]" in proc.stdout  # the router host: its http and metrics ports
    text = summary.read_text()
    assert API_KEY not in text and API_KEY not in proc.stdout
    got = json.loads(text)
    from glmops.planning import plan_view

    view = plan_view(str(inv), "disagg")
    assert got["endpoint_url"] == view["endpoint_url"] and got["deployment"] == view["deployment"]
    assert [(s["host"], s["unit"]) for s in got["services"]] == [(s["host"], s["unit"]) for s in view["services"]]
    assert all("paths" not in s for s in got["services"])
    assert "IN_PLAN False" in proc.stdout  # the needs ride beside the plan (its hash stays as it was)


def test_runner_keeps_the_plan_plays_problems():
    from glmops import runner

    result = runner.RunResult(verb="deploy", rc=1, status="failed", artifacts=Path("/tmp/x"), seconds=0.0)
    runner._collect(result, {"event": "runner_on_failed", "event_data": {
        "host": "localhost", "task": "Validate and plan",
        "res": {"glmops_event": runner.PLAN, "msg": "glmops_plan: 2 problem(s) in inv, no host contacted:\n[A] a\n[B] b"}}})
    assert result.plan_problems.splitlines()[1:] == ["[A] a", "[B] b"]
    runner._collect(result, {"event": "runner_on_failed", "event_data": {
        "host": "lab-1", "task": "Other", "res": {"msg": "boom"}}})
    assert "boom" not in result.plan_problems


def _run_returning(plan=None, problems=""):
    from glmops import runner

    def run(verb, playbook, inventory, extravars=None, **kw):
        res = runner.RunResult(verb=verb, rc=1 if problems else 0, status="failed" if problems else "successful",
                               artifacts=Path("/tmp/x"), seconds=1.0)
        res.plan, res.plan_problems = plan, problems
        res.endpoint_answered = not problems  # the run's endpoint check answered (event runner.ENDPOINT)
        return res
    return run


def test_deploy_cli_plans_only_inside_the_run(monkeypatch, tmp_path):
    from click.testing import CliRunner

    from glmops import runner
    from glmops.cli import main
    from glmops.commands import deploy as cmd

    def no_second_plan(*a, **kw):
        raise AssertionError("glmops deploy planned on the controller before the run")
    monkeypatch.setattr(cmd, "load_plan", no_second_plan)
    monkeypatch.setattr("glmops.planning.plan_view", no_second_plan)
    plan = {"deployment": "d", "endpoint_url": "http://10.0.0.9:8000", "served_model_name": "m",
            "services": [{"host": "h1", "unit": "glm-d-agg-0.service"}]}
    monkeypatch.setattr(runner, "run", _run_returning(plan))
    r = CliRunner().invoke(main, ["deploy", "-i", str(tmp_path), "--skip-smoke"], env={"COLUMNS": "300"})
    assert r.exit_code == 0, r.output
    assert "endpoint: http://10.0.0.9:8000" in r.output and "glm-d-agg-0.service" in r.output
    monkeypatch.setattr(runner, "run", _run_returning(
        None, "glmops_plan: 2 problem(s) in inv, no host contacted:\n[CATALOG] glmops_engine: x\n[TYPE] y: z"))
    r = CliRunner().invoke(main, ["deploy", "-i", str(tmp_path)], env={"COLUMNS": "300"})
    assert r.exit_code == 2
    assert "2 problem(s) in inv, no host contacted:" in r.output and "  [TYPE] y: z" in r.output


# ------------------------------------------------------------ prechecks take the plan play's needs
def test_prechecks_use_the_needs_the_plan_play_worked_out(tmp_path):
    play = tmp_path / "pre.yml"
    needs = {"ports": {65431: "unit-test http"}, "disk_path": str(tmp_path), "disk_gib": 0.0}
    play.write_text(yaml.safe_dump([{
        "name": "pre", "hosts": "localhost", "connection": "local", "gather_facts": False,
        "vars": {"glmops_model": "glm-5.3-flash"},
        "tasks": [{"name": "Pre", "register": "r",
                   "glmops_prechecks": {"deployment_needs": needs, "inventory": "/nonexistent/inventory"}},
                  {"name": "Show", "ansible.builtin.debug": {"msg": "ports={{ r.report.needs.ports }}"}}]}]))
    env = {**ENV, "ANSIBLE_ACTION_PLUGINS": f"{REPO}/roles/prechecks/action_plugins:{REPO}/glmops/ansible/action_plugins",
           "ANSIBLE_LIBRARY": f"{REPO}/roles/prechecks/library:{REPO}/glmops/ansible/library"}
    proc = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", str(play),
                           "-e", f"ansible_python_interpreter={sys.executable}"],
                          capture_output=True, text=True, env=env, cwd=REPO, timeout=120, check=False)
    # the given needs are used as they are: no planning of the (missing) inventory
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "ports=[65431]" in proc.stdout


# ------------------------------------------------------------ provision: one play, roles skipped as one
def _provision_play() -> dict:
    plays = yaml.safe_load((REPO / "playbooks" / "provision.yml").read_text())
    assert len(plays) == 1
    return plays[0]


def test_provision_decides_the_nvidia_roles_before_reading_facts(tmp_path):
    play = _provision_play()
    assert play["gather_facts"] is False
    tasks = play["tasks"]
    names = [t.get("ansible.builtin.include_role", {}).get("name") for t in tasks]
    assert names.index("nvidia_driver") < names.index("container_toolkit") < names.index("prechecks")
    assert "ansible.builtin.setup" in tasks[0] and tasks[0]["when"]
    assert tasks[names.index("prechecks") - 1].get("ansible.builtin.meta") == "flush_handlers"
    # the play's decision with the real expressions, per kind of host
    hosts = {
        "cpu": {},
        "b200-container": {"glmops_hardware": "b200"},
        "b200-venv": {"glmops_hardware": "b200", "glmops_runtime": "venv"},
        "b200-nodriver": {"glmops_hardware": "b200", "nvidia_driver_enabled": False},
        "cpu-forced": {"nvidia_driver_enabled": True},
    }
    inv = tmp_path / "hosts.yml"
    inv.write_text(yaml.safe_dump({"all": {"vars": {"ansible_connection": "local",
                                                    "ansible_python_interpreter": sys.executable},
                                           "hosts": hosts}}))
    book = tmp_path / "decide.yml"
    book.write_text(yaml.safe_dump([{"name": "decide", "hosts": "all", "gather_facts": False, "vars": play["vars"],
                                     "tasks": [{"name": "Show", "ansible.builtin.debug": {
                                         "msg": "DECIDE {{ inventory_hostname }} {{ glmops_provision_driver | bool }} "
                                                "{{ glmops_provision_toolkit | bool }}"}}]}]))
    proc = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inv), str(book)],
                          capture_output=True, text=True, env=ENV, cwd=REPO, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:]
    import re
    got = {h: (d, t) for h, d, t in re.findall(r"DECIDE (\S+) (\w+) (\w+)", proc.stdout)}
    assert got == {"cpu": ("False", "False"), "b200-container": ("True", "True"), "b200-venv": ("True", "False"),
                   "b200-nodriver": ("False", "True"), "cpu-forced": ("True", "False")}


def test_provision_on_a_cpu_host_reads_no_facts_and_only_runs_the_prechecks(tmp_path):
    inv = tmp_path / "hosts.yml"
    inv.write_text(yaml.safe_dump({"all": {"hosts": {"localhost": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}}))
    proc = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inv),
                           str(REPO / "playbooks" / "provision.yml"), "-e", "glmops_provision_hosts=localhost",
                           "-e", "prechecks_fail=false"],
                          capture_output=True, text=True, env=ENV, cwd=REPO, timeout=180, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:]
    out = proc.stdout
    for task in ("Read the distribution and architecture", "Install the NVIDIA driver stack",
                 "Install Docker and the NVIDIA Container Toolkit"):
        section = out.split(f"TASK [{task}")[1].split("TASK [")[0]
        assert "skipping: [localhost]" in section, section
    assert "TASK [nvidia_driver" not in out and "TASK [container_toolkit" not in out
    assert "TASK [prechecks : glmops output prechecks]" in out
    assert "ok=" in out.split("PLAY RECAP")[1] and "changed=0" in out.split("PLAY RECAP")[1]


# ------------------------------------------------------------ engine_runtime: a no-op skips the install as one
def _runtime_role(tmp: Path, wheelhouse: Path) -> subprocess.CompletedProcess:
    book = tmp / "runtime.yml"
    book.write_text("- hosts: localhost\n  gather_facts: false\n  roles:\n    - role: engine_runtime\n")
    extra = tmp / "runtime-vars.json"
    extra.write_text(json.dumps({
        "engine_runtime_engine": "engine", "engine_runtime_version": "1.0.0",
        "engine_runtime_venv": str(tmp / "venvs" / "engine-1.0.0"), "engine_runtime_wheelhouse": str(wheelhouse),
        "engine_runtime_python": sys.executable if not Path("/usr/bin/python3").exists() else "/usr/bin/python3",
        "engine_runtime_archive_dir": str(tmp / "runtimes")}))
    env = {k: v for k, v in ENV.items() if k not in ("PIP_INDEX_URL", "PIP_FIND_LINKS", "PIP_EXTRA_INDEX_URL")}
    return subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", "-c", "local",
                           "-e", f"ansible_python_interpreter={sys.executable}", "-e", f"@{extra}", str(book)],
                          capture_output=True, text=True, cwd=REPO, env={**env, "ANSIBLE_NOCOLOR": "1"}, timeout=300,
                          check=False)


def test_runtime_noop_is_one_skipped_include_and_a_new_wheel_set_reinstalls(tmp_path):
    from wheels import make_wheel, make_wheelhouse

    empty = tmp_path / "nowh" / "engine"
    empty.mkdir(parents=True)
    refused = _runtime_role(tmp_path, empty)
    assert refused.returncode == 2 and "has no wheelhouse.json: build the set on the controller" in refused.stdout
    wh = make_wheelhouse(tmp_path / "wh" / "engine", [("engine", "1.0.0")], ["engine==1.0.0"], key="k1")
    venv = tmp_path / "venvs" / "engine-1.0.0"
    first = _runtime_role(tmp_path, wh)
    assert first.returncode == 0, first.stdout[-3000:]
    assert "TASK [engine_runtime : Install the requirements]" in first.stdout
    marker = json.loads((venv / ".glmops-runtime.json").read_text())
    assert marker["want"]["wheelhouse_key"] == "k1" and marker["want"]["requirements"] == ["engine==1.0.0"]
    # the deploy's one read per host asks the probe with the wheelhouse the marker names
    from glmops.deploystate import runtime_in_state

    probe = REPO / "roles" / "engine_runtime" / "files" / "glmops_runtime_probe.py"

    def read():
        return json.loads(subprocess.run([sys.executable, str(probe), "--venv", str(venv)], capture_output=True,
                                         text=True, check=True).stdout)

    runtime = {"engine": "engine", "version": "1.0.0", "venv": str(venv)}
    assert marker["want"]["wheelhouse"] == str(wh) and runtime_in_state(runtime, read()) == []

    again = _runtime_role(tmp_path, wh)
    recap = again.stdout.split("PLAY RECAP")[1]
    assert again.returncode == 0 and "changed=0" in recap, again.stdout[-3000:]
    assert "TASK [engine_runtime : Remove an outdated venv]" not in again.stdout
    section = again.stdout.split("TASK [engine_runtime : Install the venv]")[1].split("PLAY RECAP")[0]
    assert "skipping: [localhost]" in section
    # a task per step of the no-op: argument check, inputs, probe, wheelhouse check, the
    # skipped resolve, system packages and install, and the mode include: no set_fact
    assert again.stdout.count("TASK [") <= 8, again.stdout
    assert "set_fact" not in (REPO / "roles" / "engine_runtime" / "tasks" / "venv.yml").read_text()

    # a new wheel set (another key and lock) is a real change: the venv is replaced
    make_wheel(wh, "engine", "1.0.1")
    make_wheelhouse(wh, [], ["engine==1.0.1"], key="k2")
    assert runtime_in_state(runtime, read()) == [f"engine 1.0.0: the wheel set at {wh} is not the one installed"]
    changed = _runtime_role(tmp_path, wh)
    assert changed.returncode == 0, changed.stdout[-3000:]
    assert "changed=0" not in changed.stdout.split("PLAY RECAP")[1]
    assert json.loads((venv / ".glmops-runtime.json").read_text())["want"]["wheelhouse_key"] == "k2"
    version = subprocess.run([str(venv / "bin" / "python"), "-c", "import engine; print(engine.__version__)"],
                             capture_output=True, text=True, check=True).stdout.strip()
    assert version == "1.0.1"
