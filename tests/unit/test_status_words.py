"""``glmops status`` against hosts that are not there or hold nothing: every cell says in words what
is known (unreachable, not deployed, no answer, unknown), never ``None``/``-1``/``?``, and the last
line is ``exit 1: ...`` naming the hosts. ``glmops.runner.run`` is a fake that answers as the status
run does (unreachable hosts: no rows; a host without the units: the host script's rows for units
systemd does not know, LoadState ``not-found``, health -1); the Plan is inventories/lab's."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from glmops import runner
from glmops.planning import plan_view

REPO = Path(__file__).resolve().parents[2]
LAB_INV = str(REPO / "inventories" / "lab")
HOSTS = ("lab-1", "lab-2", "lab-3")


def _fake(monkeypatch, tmp_path, unreachable=(), undeployed=(), failed=()):
    def run(verb, playbook, inventory, extravars=None, **kw):
        res = runner.RunResult(verb=verb, rc=0, status="successful", artifacts=tmp_path, seconds=0.5)
        for s in plan_view(inventory, "disagg")["services"]:
            host = s["host"]
            if host in unreachable:
                res.hosts[host] = runner.HostStats(unreachable=1, failed_task="Read units and health")
            elif host in failed:
                res.hosts[host] = runner.HostStats(failed=1, failed_task="Read service status")
            else:
                res.hosts[host] = runner.HostStats(ok=1)
                gone = host in undeployed
                res.services.append({"host": host, "unit": s["unit"], "active": "inactive" if gone else "active",
                                     "sub": "dead" if gone else "running", "loaded": "not-found" if gone else "loaded",
                                     "pid": 0 if gone else 7, "restarts": 0, "uptime_s": None if gone else 5.0,
                                     "health": -1 if gone else 200})
        if unreachable or failed:
            res.rc, res.status = 1, "failed"
        return res

    monkeypatch.setattr(runner, "run", run)
    monkeypatch.setattr("glmops.commands.status.read_live", lambda services: {})


def _status(*extra):
    from glmops.cli import main

    return CliRunner().invoke(main, ["status", "-i", LAB_INV, "--topology", "disagg", *extra])


def _no_raw_values(out: str) -> None:
    assert not re.search(r"\bNone\b|(?<![\w.])-1\b|\?", out), out


def test_status_of_unreachable_hosts_says_unreachable_and_exits_1(tmp_path, monkeypatch):
    _fake(monkeypatch, tmp_path, unreachable=HOSTS)
    res = _status()
    assert res.exit_code == 1, res.output
    _no_raw_values(res.stdout)
    rows = [line for line in res.stdout.splitlines() if "glm-lab-" in line and "│" in line]
    assert len(rows) == 3 and all("unreachable" in r and "unknown" in r for r in rows), res.stdout
    last = res.stdout.strip().splitlines()[-1]
    assert last.startswith("exit 1: glmops status FAILED after 0.5 s: ")
    assert last.endswith("lab-1, lab-2, lab-3 unreachable (3 service(s) unknown)"), last


def test_status_where_nothing_is_deployed_says_not_deployed(tmp_path, monkeypatch):
    _fake(monkeypatch, tmp_path, undeployed=HOSTS)
    res = _status()
    assert res.exit_code == 1, res.output
    _no_raw_values(res.stdout)
    assert res.stdout.count("not deployed") == 3, res.stdout
    last = res.stdout.strip().splitlines()[-1]
    assert last == ("exit 1: glmops status FAILED after 0.5 s: nothing deployed on lab-1, lab-2, lab-3 "
                    "(3 service(s) of the Plan not installed)"), last


def test_status_mixed_hosts_name_each_one(tmp_path, monkeypatch):
    _fake(monkeypatch, tmp_path, unreachable=("lab-1",), undeployed=("lab-2",), failed=("lab-3",))
    res = _status()
    assert res.exit_code == 1, res.output
    _no_raw_values(res.stdout)
    last = res.stdout.strip().splitlines()[-1]
    assert "lab-1 unreachable (1 service(s) unknown)" in last
    assert "nothing deployed on lab-2 (1 service(s) of the Plan not installed)" in last
    assert "lab-3 glm-lab-router (unknown (the read failed at Read service status), health unknown)" in last


@pytest.mark.parametrize("health,shown", [(-1, "no answer"), (503, "503"), (None, "unknown")])
def test_health_text_in_words(health, shown):
    from glmops.commands.status import health_text

    assert health_text({"state": "active", "health": health}) == shown
    assert health_text({"state": "not deployed", "health": health}) == "-"


def test_serving_hosts_still_exit_0(tmp_path, monkeypatch):
    _fake(monkeypatch, tmp_path)
    res = _status()
    assert res.exit_code == 0, res.output
    assert res.stdout.strip().splitlines()[-1].startswith("exit 0: glmops status ok in 0.5 s")


def test_host_script_reports_a_unit_systemd_does_not_know_as_not_found(monkeypatch, capsys):
    """The fake's rows are the host script's: ``systemctl show`` of a unit that is not installed
    (LoadState=not-found, as systemd 252 prints it) -> ``loaded: not-found``; nothing on its port -> -1."""
    import importlib.util
    import json
    import socket
    import subprocess

    spec = importlib.util.spec_from_file_location(
        "glmops_hostctl_words", REPO / "roles" / "engine_service" / "files" / "glmops_hostctl.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    shown = ("Id=glm-x-agg-0.service\nActiveState=inactive\nSubState=dead\nUnitFileState=\nMainPID=0\nNRestarts=0\n"
             "ExecMainStartTimestampMonotonic=0\nLoadState=not-found\nResult=success\n")
    monkeypatch.setattr(mod.subprocess, "run", lambda argv, **kw: subprocess.CompletedProcess(argv, 0, shown, ""))
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    assert mod.main(["status", "--service", f"glm-x-agg-0.service|http://127.0.0.1:{port}/health"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["services"]
    assert row["loaded"] == "not-found" and row["health"] == -1 and row["active"] == "inactive"
