"""`glmops provision` / `glmops check`: bad input exits 2 before any host, reports per node, diffs."""
from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from glmops import runner
from glmops.cli import main
from glmops.commands import provision as cmd

from inventory_factory import vllm_b200_disagg, write_inventory


def test_verbs_are_registered():
    r = CliRunner().invoke(main, ["--help"])
    assert "provision" in r.output and "check" in r.output
    r = CliRunner().invoke(main, ["provision", "--help"])
    assert "--no-reboot" in r.output and "--upgrade-driver" in r.output and "--check" in r.output


def test_bad_deployment_exits_2_before_any_host(tmp_path, monkeypatch):
    gv = vllm_b200_disagg(glmops_engine="nonesuch")
    inv = write_inventory(tmp_path / "inv", gv)
    called = []
    monkeypatch.setattr(runner, "run", lambda *a, **k: called.append(a))
    for verb in (["check", "--json"], ["provision"]):
        r = CliRunner().invoke(main, [verb[0], "-i", str(inv), *verb[1:]])
        assert r.exit_code == 2, r.output
        assert "nonesuch" in r.output
    assert called == []


def test_has_deployment(tmp_path):
    assert cmd.has_deployment(str(write_inventory(tmp_path / "a", vllm_b200_disagg())))
    bare = tmp_path / "bare.yml"
    bare.write_text("all:\n  hosts:\n    lab-1:\n      glmops_hardware: b200\n")
    assert not cmd.has_deployment(str(bare))


def _result(outputs, hosts) -> runner.RunResult:
    r = runner.RunResult(verb="check", rc=1, status="failed", artifacts=Path("/tmp/x"), seconds=1.0)
    r.outputs = outputs
    r.hosts = hosts
    return r


def test_reports_take_the_precheck_output_and_mark_unreachable_hosts():
    rep = {"host": "a", "ok": False, "failed": ["a: wrong GPU count (found 7, needed 8)"], "checks": []}
    unreachable = runner.HostStats(unreachable=1, messages=["ssh: connect to host b port 22: No route"])
    collector = cmd.ReportCollector()
    collector({"event": "runner_on_ok", "event_data": {"host": "a", "task": "glmops output prechecks", "res": {"glmops_event": cmd.PRECHECK_EVENT, "report": rep}}})
    collector({"event": "runner_on_ok", "event_data": {"host": "a", "task": "other", "res": {"report": {}}}})
    res = _result([], {"a": runner.HostStats(ok=3, failed=1), "b": unreachable})
    nodes = cmd.reports(res, collector.reports)
    assert nodes["a"] is rep
    assert nodes["b"]["ok"] is False and nodes["b"]["failed"] == ["b: ssh: connect to host b port 22: No route"]


def test_check_json_exit_code_follows_the_reports(tmp_path, monkeypatch):
    bare = tmp_path / "bare.yml"
    bare.write_text("all:\n  hosts:\n    lab-1:\n      glmops_hardware: b200\n")
    good = {"host": "lab-1", "ok": True, "failed": [], "warnings": [], "checks": [
        {"check": "gpu_count", "ok": True, "found": 8, "needed": 8, "message": ""}]}

    def fake_run(verb, playbook, inventory, extravars, **kw):
        assert (verb, playbook) == ("check", "check.yml")
        kw["on_event"]({"event": "runner_on_ok",
                        "event_data": {"host": "lab-1", "task": "glmops output prechecks",
                                       "res": {"glmops_event": cmd.PRECHECK_EVENT, "report": good}}})
        r = _result([], {"lab-1": runner.HostStats(ok=2)})
        r.rc = 0
        return r

    monkeypatch.setattr(runner, "run", fake_run)
    r = CliRunner().invoke(main, ["check", "-i", str(bare), "--json"])
    assert r.exit_code == 0, r.output
    assert '"ok": true' in r.output
    good["ok"] = False
    r = CliRunner().invoke(main, ["check", "-i", str(bare), "--json"])
    assert r.exit_code == 1


def test_diff_text_renders_file_diffs():
    res = {"diff": [{"before": "", "after": "Types: deb\nSuites: /\n", "before_header": "/etc/apt/x.sources",
                     "after_header": "/etc/apt/x.sources"}]}
    text = runner.diff_text(res)
    assert "+Types: deb" in text and "+Suites: /" in text and text.startswith("--- /etc/apt/x.sources")
    assert runner.diff_text({"diff": {"prepared": "hold nvlsm"}}) == "hold nvlsm"
    assert runner.diff_text({}) == ""
