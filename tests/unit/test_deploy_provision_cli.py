"""`glmops deploy` provisions first: the CLI hands deploy.yml ``glmops_provision`` (false only
with --skip-provision) and prints the per-host precheck report when a precheck stopped the run.
deploy.yml imports provision.yml (gated on the Plan's hosts, any_errors_fatal) before any
runtime or unit play. The lab proof is tests/e2e/test_deploy_provision.py."""
from __future__ import annotations

from pathlib import Path

import yaml
from click.testing import CliRunner

from glmops import runner
from glmops.cli import main
from glmops.commands import deploy as cmd
from glmops.commands.provision import PRECHECK_EVENT

REPO = Path(__file__).resolve().parents[2]
PLAN = {"deployment": "d", "services": [], "endpoint_url": "http://x:8000", "served_model_name": "m"}


def _fake_run(calls, reports, rc=1):
    def run(verb, playbook, inventory, extravars=None, **kw):
        calls.append((playbook, dict(extravars or {})))
        for host, rep in reports.items():
            kw["on_event"]({"event": "runner_on_ok",
                            "event_data": {"host": host, "task": "glmops output prechecks",
                                           "res": {"glmops_event": PRECHECK_EVENT, "report": rep}}})
        res = runner.RunResult(verb=verb, rc=rc, status="failed" if rc else "successful",
                               artifacts=Path("/tmp/x"), seconds=1.0)
        res.hosts = {h: runner.HostStats(ok=2, failed=0 if r["ok"] else 1) for h, r in reports.items()}
        return res
    return run


def test_skip_provision_is_the_only_way_to_skip(monkeypatch, tmp_path):
    calls = []
    monkeypatch.setattr(cmd, "load_plan", lambda inv, topo: PLAN)
    monkeypatch.setattr(runner, "run", _fake_run(calls, {}, rc=0))
    for extra in ([], ["--skip-provision"]):
        r = CliRunner().invoke(main, ["deploy", "-i", str(tmp_path), "--skip-smoke", *extra])
        assert r.exit_code == 0, r.output
    assert calls[0] == ("deploy.yml", {})  # deploy.yml defaults glmops_provision to true
    assert calls[1] == ("deploy.yml", {"glmops_provision": False})


def test_deploy_passes_the_provision_and_full_switches(monkeypatch, tmp_path):
    calls = []
    monkeypatch.setattr(runner, "run", _fake_run(calls, {}, rc=0))
    r = CliRunner().invoke(main, ["deploy", "-i", str(tmp_path), "--skip-smoke", "--no-reboot", "--upgrade-driver",
                                  "--full"])
    assert r.exit_code == 0, r.output
    assert calls == [("deploy.yml", {"glmops_fast": False, "nvidia_driver_reboot": False,
                                     "nvidia_driver_upgrade": True})]
    # provisioning switches without provisioning: refused before any run
    r = CliRunner().invoke(main, ["deploy", "-i", str(tmp_path), "--skip-provision", "--no-reboot", "--upgrade-driver"])
    assert r.exit_code == 2 and len(calls) == 1
    assert "--no-reboot and --upgrade-driver are provisioning options and --skip-provision skips" in r.output


def test_failed_precheck_prints_every_host_report_and_exits_1(monkeypatch, tmp_path):
    good = {"host": "lab-1", "ok": True, "failed": [], "warnings": [],
            "checks": [{"check": "shm", "ok": True, "found": "2411 MiB", "needed": "1024 MiB"}]}
    bad = {"host": "lab-2", "ok": False, "warnings": [],
           "failed": ["lab-2: /dev/shm is smaller than the floor for NCCL (F08) (found 64 MiB, needed 1024 MiB)"],
           "checks": [{"check": "shm", "ok": False, "found": "64 MiB", "needed": "1024 MiB"}]}
    smoked = []
    monkeypatch.setattr(cmd, "load_plan", lambda inv, topo: PLAN)
    monkeypatch.setattr(runner, "run", _fake_run([], {"lab-1": good, "lab-2": bad}))
    monkeypatch.setattr("glmops.smoke.smoke_after_deploy", lambda *a: smoked.append(a) or True)
    r = CliRunner().invoke(main, ["deploy", "-i", str(tmp_path)], env={"COLUMNS": "300"})
    assert r.exit_code == 1
    assert "FAILED lab-2: /dev/shm is smaller than the floor for NCCL (F08) (found 64 MiB, needed 1024 MiB)" in r.output
    assert "lab-1" in r.output and "2411 MiB" in r.output  # every host's report, not only the failing one
    assert smoked == []


def test_no_precheck_table_when_every_host_passed(monkeypatch, tmp_path):
    good = {"host": "lab-1", "ok": True, "failed": [], "warnings": [], "checks": []}
    monkeypatch.setattr(cmd, "load_plan", lambda inv, topo: PLAN)
    monkeypatch.setattr(runner, "run", _fake_run([], {"lab-1": good}, rc=0))
    r = CliRunner().invoke(main, ["deploy", "-i", str(tmp_path), "--skip-smoke"])
    assert r.exit_code == 0 and "glmops check" not in r.output


def test_deploy_playbook_provisions_before_any_runtime_or_unit_play():
    plays = yaml.safe_load((REPO / "playbooks/deploy.yml").read_text())
    names = [p.get("ansible.builtin.import_playbook") or p.get("hosts") for p in plays]
    # the Plan, the one read per host and the read of the hosts that left the Plan (both change
    # nothing; --no-prune stops there), then provision before anything else
    assert names[:4] == ["plays/plan.yml", "plays/read.yml", "plays/departed.yml", "provision.yml"], names
    imp = plays[3]["vars"]
    assert imp["glmops_provision_fatal"] is True
    assert "groups['glmops_provision']" in imp["glmops_provision_hosts"]
    for book in ("provision.yml", "check.yml"):
        for play in yaml.safe_load((REPO / "playbooks" / book).read_text()):
            if "hosts" in play:
                assert "glmops_provision_hosts" in play["hosts"] and "glmops_provision_fatal" in play["any_errors_fatal"]
