"""Every verb that reports on hosts or an endpoint ends with the same last line as deploy and status
(``glmops.runner.finish``: ``exit 0: glmops VERB ok ...`` / ``exit N: glmops VERB FAILED ...: why``):
``history``, ``logs`` and ``smoke`` through click's CliRunner, with ``glmops.runner.run`` (and the
smoke checks) as fakes that succeed or fail."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from glmops import runner
from glmops import smoke as sm
from glmops.cli import main
from glmops.planning import plan_view

sys.path.insert(0, str(Path(__file__).resolve().parent))
from day2_fakes import day2_runner, history_of  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
LAB_INV = str(REPO / "inventories" / "lab")


def _last(res) -> str:
    return res.stdout.rstrip("\n").splitlines()[-1]


@pytest.mark.parametrize("unread", [False, True])
def test_history_ends_with_the_exit_line(monkeypatch, unread):
    hist = history_of(plan_view(LAB_INV, "agg"))
    _, run = day2_runner(hist)

    def fake(verb, playbook, inventory, extravars=None, **kw):
        res = run(verb, playbook, inventory, extravars, **kw)
        if unread:
            res.hosts["lab-2"] = runner.HostStats(unreachable=1, failed_task="Read the recorded generations")
            res.rc, res.status = 1, "failed"
        return res

    monkeypatch.setattr(runner, "run", fake)
    res = CliRunner().invoke(main, ["history", "-i", LAB_INV, "--topology", "agg"])
    assert res.exit_code == (1 if unread else 0), res.output
    assert _last(res) == ("exit 1: glmops history FAILED after 0.1 s: lab-2 (UNREACHABLE)" if unread
                          else "exit 0: glmops history ok in 0.1 s")


@pytest.mark.parametrize("ok", [True, False])
def test_logs_ends_with_the_exit_line(monkeypatch, ok):
    def fake(verb, playbook, inventory, extravars=None, **kw):
        res = runner.RunResult(verb=verb, rc=0 if ok else 1, status="successful" if ok else "failed",
                               artifacts=Path("."), seconds=0.2)
        res.hosts = {"lab-1": runner.HostStats(ok=1), "lab-3": runner.HostStats(ok=1) if ok else
                     runner.HostStats(failed=1, failed_task="Read the journal")}
        res.outputs = [{"host": "lab-1", "res": {"stdout": "Dec 02 engine started"}}]
        return res

    monkeypatch.setattr(runner, "run", fake)
    res = CliRunner().invoke(main, ["logs", "-i", LAB_INV, "--topology", "agg"])
    assert res.exit_code == (0 if ok else 1), res.output
    assert "Dec 02 engine started" in res.stdout
    assert _last(res) == ("exit 0: glmops logs ok in 0.2 s" if ok
                          else "exit 1: glmops logs FAILED after 0.2 s: lab-3 (failed at Read the journal)")


@pytest.mark.parametrize("statuses,code,line", [
    ((sm.PASS, sm.SKIP), 0, "exit 0: glmops smoke ok: 2 check(s) passed or skipped"),
    ((sm.PASS, sm.FAIL, sm.FAIL), 1, "exit 1: glmops smoke FAILED: failed: completion, stream"),
])
def test_smoke_ends_with_the_exit_line(monkeypatch, statuses, code, line):
    names = ("models", "completion", "stream")
    checks = [sm.CheckResult(name=n, status=s, seconds=0.1, reason="" if s == sm.PASS else "why")
              for n, s in zip(names, statuses)]
    monkeypatch.setattr(sm, "run", lambda target, **kw: sm.SmokeReport(target.endpoint, target.model, checks))
    res = CliRunner().invoke(main, ["smoke", "--endpoint", "http://127.0.0.1:9", "--model", "m"])
    assert res.exit_code == code, res.output
    assert _last(res) == line


@pytest.mark.parametrize("argv,fake,line", [
    (["upgrade", "-i", "inventories/lab", "--topology", "agg", "--set", "max_batch_size=3"], {},
     "exit 0: glmops upgrade ok in 0.1 s: new generation recorded"),
    (["upgrade", "-i", "inventories/lab", "--topology", "agg"], {},
     "exit 0: glmops upgrade ok in 0.1 s: nothing to upgrade (generation 1 serves)"),
    (["upgrade", "-i", "inventories/lab", "--topology", "agg", "--set", "max_batch_size=3"],
     {"fail_at": "agg replica 0"}, "exit 1: glmops upgrade FAILED: stopped at agg replica 0: "),
    (["rollback", "-i", "inventories/lab"], {}, "exit 0: glmops rollback ok in 0.1 s: generation 1 serves"),
])
def test_upgrade_and_rollback_end_with_the_exit_line(monkeypatch, argv, fake, line):
    monkeypatch.chdir(REPO)
    g1 = history_of(plan_view("inventories/lab", "agg"), 1)
    if argv[0] == "rollback":
        g2 = history_of(plan_view("inventories/lab", "agg", {"glmops_max_batch_size": 3}), 2)
        hist = {h: {"current": 2, "generations": g1[h]["generations"] + g2[h]["generations"]} for h in g1}
    else:
        hist = g1
    _, run = day2_runner(hist, **fake)
    monkeypatch.setattr(runner, "run", run)
    res = CliRunner().invoke(main, argv)
    assert _last(res).startswith(line), res.output


@pytest.mark.parametrize("changed, tail", [
    (4, ": check mode, 4 change(s) would be made"),
    (0, ": check mode, nothing would change"),
])
def test_a_check_run_says_so_in_its_last_line(changed, tail):
    """A fresh-user trial read ``exit 0: glmops deploy ok in 19.0 s`` after ``--check`` with drift:
    the last line of a dry run names it, and whether anything would change (a CI drift check)."""
    res = runner.RunResult(verb="deploy", rc=0, status="successful", artifacts=Path("/tmp/x"), seconds=19.0,
                           check=True)
    res.hosts["lab-1"] = runner.HostStats(changed=changed)
    assert runner.exit_line(res, 0) == "exit 0: glmops deploy ok in 19.0 s" + tail
    res.check = False
    assert runner.exit_line(res, 0) == "exit 0: glmops deploy ok in 19.0 s"


def test_the_plans_warnings_are_repeated_under_the_summary(tmp_path):
    """API_KEY_OPEN_FRONT_DOOR was printed by validate and plan but not by deploy: the plan play's
    summary carries the rules' warnings and the run's summary prints them under the table."""
    import importlib.util
    import json

    from rich.console import Console

    from glmops import planning

    spec = importlib.util.spec_from_file_location("glmops_plan_action",
                                                  REPO / "glmops/ansible/action_plugins/glmops_plan.py")
    action = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(action)
    planned = planning.load(LAB_INV, "disagg", {"glmops_api_key": "abcdefgh12345678"})
    lines = [str(w) for w in planned.warnings]
    assert any("[API_KEY_OPEN_FRONT_DOOR]" in w for w in lines)
    action.write_summary(str(tmp_path / "summary.json"), planned.view(), None, "", lines)
    plan = json.loads((tmp_path / "summary.json").read_text())
    assert plan["warnings"] == lines and "abcdefgh12345678" not in json.dumps(plan)
    res = runner.RunResult(verb="deploy", rc=0, status="successful", artifacts=tmp_path, seconds=1.0)
    console = Console(record=True, width=200)
    runner.print_summary(res, console, plan)
    out = console.export_text()
    assert "1 warning(s) of the Plan (validate --strict refuses them):" in out
    assert "warning [API_KEY_OPEN_FRONT_DOOR]" in out and "serves clients without a key" in out
