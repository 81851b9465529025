"""Output for logs and CI (issue 12, items 4 and 7): a failed run never reads like success,
piped output cuts and wraps nothing, progress lines carry the time, a long install shows
progress.

The piped test runs the real CLI (``glmops deploy``) as a user would, its stdout a pipe (not a
TTY, no COLUMNS), against the lab inventory copied with a 40-character deployment name and
hosts whose ssh port refuses: the plan play runs, every host is unreachable, the run fails."""
from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import yaml
from rich.console import Console

from glmops import runner

REPO = Path(__file__).resolve().parents[2]
GLMOPS = Path(sys.executable).parent / "glmops"
STAMP = re.compile(r"^\d\d:\d\d:\d\d ")
# the longest name glmops_deployment accepts (rules: 1-40 characters)
LONG_DEPLOYMENT = "lab-a-long-deployment-name-for-piped-log"


def _unreachable_lab(tmp_path: Path) -> Path:
    """inventories/lab as a user copies it: the deployment renamed, every host at a closed port."""
    inv = tmp_path / "inv"
    shutil.copytree(REPO / "inventories" / "lab", inv)
    gv = inv / "group_vars" / "all.yml"
    data = yaml.safe_load(gv.read_text())
    data["glmops_deployment"] = LONG_DEPLOYMENT
    gv.write_text(yaml.safe_dump(data, sort_keys=False))
    hosts = yaml.safe_load((inv / "hosts.yml").read_text())
    for group in hosts["all"]["children"].values():
        for name, hv in group["hosts"].items():
            # lab-N on port N: connection refused at once (one port each: one machine listed three
            # times on one address and port would be DUPLICATE_HOST)
            hv.update(ansible_host="127.0.0.1", ansible_port=int(name.rsplit("-", 1)[1]))
    (inv / "hosts.yml").write_text(yaml.safe_dump(hosts, sort_keys=False))
    return inv


def test_piped_failed_deploy_cuts_nothing_stamps_progress_and_ends_with_the_failure(tmp_path):
    inv = _unreachable_lab(tmp_path)
    runs = tmp_path / ("a-runs-directory-with-a-long-name-so-the-artifacts-path-is-wider-than-eighty-columns")
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "FORCE_COLOR", "TTY_COMPATIBLE")}
    env["GLMOPS_RUNS_DIR"] = str(runs)
    proc = subprocess.run([str(GLMOPS), "deploy", "-i", str(inv), "--skip-provision"], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, env=env, timeout=600, cwd=tmp_path)
    out = proc.stdout
    lines = out.splitlines()
    assert proc.returncode == 1, out + proc.stderr
    # nothing cut or wrapped: every long value is whole on one line
    (artifacts,) = list(runs.iterdir())
    assert any(str(artifacts) in line for line in lines), out
    units = [f"glm-{LONG_DEPLOYMENT}-prefill-0.service", f"glm-{LONG_DEPLOYMENT}-decode-0.service",
             f"glm-{LONG_DEPLOYMENT}-router.service"]
    for host, unit in zip(("lab-1", "lab-2", "lab-3"), units):
        refused = f"ssh: connect to host 127.0.0.1 port {host[-1]}: Connection refused"
        # the table row is one line: host, the whole unit name and the whole reason
        assert any(host in line and unit in line and refused in line for line in lines), out
    # a wrapped table cell would add a row line with an empty host cell
    body = [line for line in lines if line.startswith("│")]
    assert len([line for line in body if line.startswith("│ lab-")]) == 3, out
    assert all(not line.startswith("│  ") for line in body), out
    # every progress line (all lines before the summary) starts with the time
    summary_at = next(i for i, line in enumerate(lines) if line.startswith("changed: "))
    progress = lines[:summary_at]
    assert progress and all(STAMP.match(line) for line in progress), progress
    assert any("PLAY Read every host of the Plan once" in line for line in progress)
    # a failed run never reads like success: no endpoint line, the summary and the exit status last
    assert not any(line.startswith("endpoint:") for line in lines), out
    assert lines[summary_at] == f"changed: 0   run artifacts: {artifacts}"
    assert lines[-1].startswith("exit 1: glmops deploy FAILED after "), lines[-1]
    assert all(f"{h} (UNREACHABLE)" in lines[-1] for h in ("lab-1", "lab-2", "lab-3")), lines[-1]
    assert lines[-2].startswith("└"), lines[-2]  # the per-host table just above the exit status


def _result(ok: bool, answered: bool) -> runner.RunResult:
    result = runner.RunResult(verb="deploy", rc=0 if ok else 1, status="", artifacts=Path("/runs/x"), seconds=1.0)
    for ev in [
        {"event": "runner_on_ok", "event_data": {"host": "lab-1", "task": "Place the units", "res": {"changed": True}}},
        {"event": "runner_on_ok" if answered else "runner_on_failed",
         "event_data": {"host": "localhost", "task": "One-token request through the endpoint",
                        "res": {"glmops_event": runner.ENDPOINT, "msg": "endpoint http://10.77.0.13:8000/v1/completions (tiny-llama) answered"
                                if answered else "answered nothing after 4 attempt(s)"}}},
    ]:
        runner._collect(result, ev)
    return result


@pytest.mark.parametrize("ok,answered", [(True, True), (True, False), (False, False)])
def test_endpoint_line_only_when_the_endpoint_answered(ok, answered):
    console = Console(record=True, width=400, file=io.StringIO())
    plan = {"endpoint_url": "http://10.77.0.13:8000", "served_model_name": "tiny-llama", "services": []}
    result = _result(ok, answered)
    assert result.endpoint_answered is answered
    runner.print_summary(result, console, plan)
    with pytest.raises(SystemExit) as exc:
        runner.finish(console, result)
    assert exc.value.code == (0 if ok else 1)
    lines = console.export_text().splitlines()
    has_endpoint = any(line == "endpoint: http://10.77.0.13:8000  (model tiny-llama)" for line in lines)
    assert has_endpoint is (ok and answered)
    assert lines[-1].startswith("exit 0: glmops deploy ok" if ok else "exit 1: glmops deploy FAILED")
    if not ok:
        assert "localhost (failed at One-token request through the endpoint)" in lines[-1]
        assert not lines[-2].startswith("changed:")  # the table, not the change count, above the exit line


def _events_view(events: list[dict]) -> str:
    console = Console(record=True, width=400, file=io.StringIO(), force_terminal=False)
    view = runner._Progress(console, quiet=False)
    result = runner.RunResult(verb="deploy", rc=0, status="", artifacts=Path("."), seconds=0.0)
    for ev in events:
        runner._collect(result, ev)
        view.event(ev, result)
    return console.export_text()


def test_retry_events_print_a_stamped_waiting_line_per_retry():
    """ansible-runner's runner_retry events (a task with until/retries): one stamped line each,
    with the attempt's msg, or its stdout's last line, or the attempt count."""
    retry = "runner_retry"
    out = _events_view([
        {"event": "playbook_on_play_start", "event_data": {"play": "Install the engine runtimes the Plan uses"}},
        {"event": retry, "event_data": {"host": "lab-1", "task": "Install progress", "res": {
            "msg": "installing 12/57 packages, now torch (35 s)", "attempts": 4, "retries": 721}}},
        {"event": retry, "event_data": {"host": "lab-2", "task": "Wait for the port", "res": {
            "stdout": "{}\nwaiting for glm-lab-prefill-0.service: /health 503 for 31 s", "attempts": 2}}},
        {"event": retry, "event_data": {"host": "lab-3", "task": "Some poll", "res": {"attempts": 3, "retries": 9}}},
        {"event": retry, "event_data": {"host": "lab-1", "task": "Download progress", "res": {
            "glmops_event": runner.DOWNLOAD_PROGRESS, "msg": "own printer"}}},
    ])
    lines = out.splitlines()
    assert STAMP.match(lines[0]) and "PLAY Install the engine runtimes the Plan uses" in lines[0]
    assert STAMP.match(lines[1]) and re.search(r"lab-1 +Install progress +waiting: installing 12/57 packages, "
                                               r"now torch \(35 s\)$", lines[1]), lines
    assert re.search(r"lab-2 +Wait for the port +waiting: waiting for glm-lab-prefill-0.service: /health 503 "
                     r"for 31 s$", lines[2]), lines
    assert re.search(r"lab-3 +Some poll +waiting: attempt 3 of 9$", lines[3]), lines
    assert "own printer" not in out and len(lines) == 4  # glmops download prints its own progress


def test_download_progress_task_is_left_to_its_printer():
    from glmops.commands.download import PROGRESS_TASK

    assert PROGRESS_TASK in runner.RETRY_SILENT


def test_retry_lines_at_most_every_n_seconds_when_a_task_asks(monkeypatch):
    monkeypatch.setitem(runner.RETRY_EVERY_S, "Wait for the port", 3600)
    ev = {"event": "runner_retry", "event_data": {"host": "lab-1", "task": "Wait for the port",
                                                  "res": {"msg": "waiting"}}}
    out = _events_view([ev, ev, ev])
    assert out.count("waiting: waiting") == 1


def test_consoles_off_a_terminal_cut_and_wrap_nothing():
    from glmops.output import WIDE, console

    path = "/var/lib/glmops/" + "a-very-long-directory-name/" * 12 + "glm-x-prefill-0.service"
    buf = io.StringIO()
    con = console(file=buf)
    assert not con.is_terminal and con.width == WIDE
    from rich.table import Table

    t = Table(title="t")
    t.add_column("host")
    t.add_column("path")
    t.add_row("lab-1", path)
    con.print(t)
    con.print(f"hint: ssh -o BatchMode=yes root@10.77.0.11 journalctl -u {path}")
    lines = buf.getvalue().splitlines()
    assert any("lab-1" in line and path in line for line in lines)
    assert any(line.endswith(path) and line.startswith("hint: ssh") for line in lines)
    assert console(width=50, file=io.StringIO()).width == 50  # an explicit width stays


# ------------------------------------------------------------------ the install heartbeat
PROGRESS_MODULE = REPO / "roles" / "engine_runtime" / "library" / "glmops_pip_progress.py"


def _progress_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("glmops_pip_progress", PROGRESS_MODULE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_pip_progress_reads_packages_done_and_the_package_in_hand(tmp_path):
    """As pip 23.0.1 leaves a venv mid-install: the collected set logged, RECORD of the
    installed ones written, the async job started (results file without ``finished``)."""
    mod = _progress_module()
    venv = tmp_path / "venv"
    site = venv / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    (venv / "glmops-requirements.txt").write_text("MarkupSafe==3.0.2\ntorch==2.9.0+cpu\nvllm==0.32.0\n")
    job = tmp_path / "job"
    job.write_text(json.dumps({"started": 1, "finished": 0, "ansible_job_id": "j1"}))
    os.utime(job, (time.time() - 35, time.time() - 35))
    log = venv / "glmops-pip.log"
    log.write_text("2026-12-01T20:41:00,1 Looking in links: /opt/glmops/wheelhouse/vllm\n"
                   "2026-12-01T20:41:01,2 Processing /opt/glmops/wheelhouse/vllm/MarkupSafe-3.0.2-cp311.whl\n"
                   "2026-12-01T20:41:02,3 Processing /opt/glmops/wheelhouse/vllm/torch-2.9.0+cpu-cp311.whl\n")
    got = mod.progress(str(venv), str(venv / "glmops-requirements.txt"), str(log), str(job))
    assert got["phase"] == "collecting" and got["packages_total"] == 3 and got["packages_done"] == 0
    assert re.fullmatch(r"collecting 3 packages, now torch-2.9.0\+cpu-cp311.whl \(3\d s\)", got["msg"]), got
    with log.open("a") as fh:
        fh.write("2026-12-01T20:41:03,4 Installing collected packages: MarkupSafe, torch, vllm\n")
    (site / "markupsafe-3.0.2.dist-info").mkdir()
    (site / "markupsafe-3.0.2.dist-info" / "RECORD").write_text("")
    (site / "torch-2.9.0+cpu.dist-info").mkdir()  # being installed: no RECORD yet
    got = mod.progress(str(venv), str(venv / "glmops-requirements.txt"), str(log), str(job))
    assert (got["phase"], got["packages_done"], got["packages_total"], got["current"]) == ("installing", 1, 3, "torch")
    assert re.fullmatch(r"installing 1/3 packages, now torch \(3\d s\)", got["msg"]), got
    (site / "torch-2.9.0+cpu.dist-info" / "RECORD").write_text("")
    (site / "vllm-0.32.0.dist-info").mkdir()
    (site / "vllm-0.32.0.dist-info" / "RECORD").write_text("")
    got = mod.progress(str(venv), str(venv / "glmops-requirements.txt"), str(log), str(job))
    assert re.fullmatch(r"installing 3/3 packages, finishing \(3\d s\)", got["msg"]), got
    job.write_text(json.dumps({"finished": 1, "rc": 0, "changed": True}))
    got = mod.progress(str(venv), str(venv / "glmops-requirements.txt"), str(log), str(job))
    assert got["finished"] and got["phase"] == "finished" and got["msg"] == "pip finished: 3/3 packages installed"


SITECUSTOMIZE = textwrap.dedent('''
    # test_output.py: hold `pip install --log ...` at its start until the test releases it
    import os, sys, time
    gate = os.environ.get("GLMOPS_TEST_PIP_GATE")
    if gate and "install" in sys.argv and "--log" in sys.argv:
        deadline = time.time() + 600
        while not os.path.exists(gate) and time.time() < deadline:
            time.sleep(0.05)
''')


def test_install_heartbeat_through_the_real_role_and_runner(tmp_path, monkeypatch):
    """The engine_runtime role with real pip, real async, real ansible-runner events and the
    real progress view: while pip runs (held at its start until the first heartbeat arrived,
    so the test waits on a condition, not on pip being slow), the view prints stamped
    ``Install progress ... waiting: collecting N packages`` lines; then the install finishes."""
    from wheels import make_wheelhouse

    wh = make_wheelhouse(tmp_path / "wh" / "engine", [("engine", "1.0.0"), ("engine-dep", "2.0")],
                         ["engine==1.0.0", "engine-dep==2.0"], key="k1")
    hold = tmp_path / "hold"
    hold.mkdir()
    (hold / "sitecustomize.py").write_text(SITECUSTOMIZE)
    gate = tmp_path / "gate"
    monkeypatch.setenv("PYTHONPATH", str(hold))
    monkeypatch.setenv("GLMOPS_TEST_PIP_GATE", str(gate))
    monkeypatch.setenv("GLMOPS_RUNS_DIR", str(tmp_path / "runs"))
    for key in ("PIP_INDEX_URL", "PIP_FIND_LINKS", "PIP_EXTRA_INDEX_URL"):
        monkeypatch.delenv(key, raising=False)
    book = tmp_path / "runtime.yml"
    book.write_text("- hosts: localhost\n  gather_facts: false\n  roles:\n    - role: engine_runtime\n")
    inv = tmp_path / "hosts.yml"
    inv.write_text(yaml.safe_dump({"all": {"hosts": {"localhost": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}}))
    python = "/usr/bin/python3" if Path("/usr/bin/python3").exists() else sys.executable
    extra = {"engine_runtime_engine": "engine", "engine_runtime_version": "1.0.0",
             "engine_runtime_venv": str(tmp_path / "venvs" / "engine-1.0.0"),
             "engine_runtime_wheelhouse": str(wh), "engine_runtime_python": python, "engine_runtime_poll_s": 1,
             "engine_runtime_archive_dir": str(tmp_path / "runtimes")}
    beats = []

    def on_event(event):
        data = event.get("event_data") or {}
        if event.get("event") == "runner_retry" and data.get("task") == "Install progress":
            beats.append(data["res"])
            gate.touch()  # pip may go on now

    buf = io.StringIO()
    console = Console(file=buf, width=400, force_terminal=False)
    result = runner.run("runtime", str(book), inv, extra, console=console, on_event=on_event)
    out = buf.getvalue()
    assert result.ok, out + "\n".join(result.failures)
    assert beats and beats[0]["phase"] == "collecting" and beats[0]["packages_total"] == 2, beats
    beat_lines = [line for line in out.splitlines() if "Install progress" in line and "waiting:" in line]
    assert beat_lines and all(STAMP.match(line) for line in beat_lines), out
    assert re.search(r"waiting: collecting 2 packages, now \S+ \(\d+ s\)$", beat_lines[0]), beat_lines
    assert any(re.search(r"localhost +Install the requirements +changed$", line) for line in out.splitlines()), out
    venv = tmp_path / "venvs" / "engine-1.0.0"
    assert "Installing collected packages: engine, engine-dep" in (venv / "glmops-pip.log").read_text() or \
        "Installing collected packages: engine-dep, engine" in (venv / "glmops-pip.log").read_text()
    assert json.loads((venv / ".glmops-runtime.json").read_text())["want"]["wheelhouse_key"] == "k1"


def test_restart_prints_the_endpoint_when_its_gate_passed_the_front_door():
    """glmops restart has no separate endpoint check: the gate's one-token request to the front
    door whose ready URL is the endpoint's counts; a worker's ready row or the read's does not."""
    plan = {"endpoint_url": "http://10.77.0.13:8000", "served_model_name": "tiny-llama",
            "endpoint_ready_url": "http://10.77.0.13:8000/v1/completions",
            "services": [{"host": "lab-3", "unit": "glm-lab-router.service",
                          "ready_url": "http://10.77.0.13:8000/v1/completions"},
                         {"host": "lab-1", "unit": "glm-lab-prefill-0.service",
                          "ready_url": "http://10.77.0.11:8001/v1/completions"}]}

    def printed(rows: list[dict]) -> bool:
        result = runner.RunResult(verb="restart", rc=0, status="successful", artifacts=Path("/r"), seconds=1.0)
        for host, unit, key in rows:  # key: the result's glmops_event (its task's name does not matter)
            runner._collect(result, {"event": "runner_on_ok", "event_data": {"host": host, "task": "a task", "res": {
                "stdout": json.dumps({"glmops_event": key, "services": [{"unit": unit, "ready": True}]})}}})
        console = Console(record=True, width=400, file=io.StringIO())
        runner.print_summary(result, console, plan)
        return "endpoint: http://10.77.0.13:8000  (model tiny-llama)" in console.export_text()

    assert printed([("lab-3", "glm-lab-router.service", runner.READY)])
    assert not printed([("lab-1", "glm-lab-prefill-0.service", runner.READY)])
    assert not printed([("lab-3", "glm-lab-router.service", runner.STATE)])  # the read: not this run's answer
