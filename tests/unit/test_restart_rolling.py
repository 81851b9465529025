"""``glmops restart --rolling`` is one run of restart.yml (glmops_restart_steps: one step per
store member, agg replica or disagg pool, then the front door); the CLI prints each step's line
from the step's ``glmops_event: restart_step`` result."""
from __future__ import annotations

from pathlib import Path

import yaml
from click.testing import CliRunner

from glmops import runner
from glmops.cli import main

REPO = Path(__file__).resolve().parents[2]
LAB_INV = REPO / "inventories" / "lab"


def test_rolling_restart_is_one_run_with_ordered_steps(monkeypatch):
    calls = []

    def run(verb, playbook, inventory, extravars=None, *, on_event=None, **kw):
        calls.append((playbook, extravars))
        for step in (extravars or {}).get("glmops_restart_steps", []):
            on_event({"event": "runner_on_ok", "event_data": {"host": "lab-1", "task": "any name", "res": {
                "msg": {"glmops_event": "restart_step", "step": step["name"], "units": step["units"]}}}})
        return runner.RunResult(verb=verb, rc=0, status="successful", artifacts=Path("/tmp/x"), seconds=1.0)

    monkeypatch.setattr(runner, "run", run)
    res = CliRunner().invoke(main, ["restart", "-i", str(LAB_INV), "--topology", "agg", "--rolling"],
                             env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    assert [c[0] for c in calls] == ["restart.yml"]
    steps = calls[0][1]["glmops_restart_steps"]
    assert [(s["name"], s["bundle"]) for s in steps] == [("agg replica 0", "workers"), ("agg replica 1", "workers"),
                                                         ("router", "routers")]
    lines = [line.split("restart step ", 1)[1] for line in res.output.splitlines() if "restart step " in line]
    assert lines == ["agg replica 0: glm-lab-agg-0.service", "agg replica 1: glm-lab-agg-1.service",
                     "router: glm-lab-router.service"]


def test_restart_playbook_runs_the_steps_in_one_play_only_when_rolling():
    plays = yaml.safe_load((REPO / "playbooks" / "restart.yml").read_text())
    rolling = [p for p in plays if "glmops_restart_steps }}" in str(p.get("tasks", ""))]
    assert len(rolling) == 1 and rolling[0]["any_errors_fatal"] is True
    # the endpoint check from the controller ends both kinds of restart
    others = [p for p in plays if "hosts" in p and p is not rolling[0] and p["hosts"] != "localhost"]
    # the non-rolling plays have no host when the steps are set (by -e, or by the plan play for the
    # deployed topology, hence hostvars['localhost'], which sees both)
    assert others and all("hostvars['localhost']['glmops_restart_steps'] | default(none) is not none" in p["hosts"]
                          for p in others)
    [check] = [p for p in plays if p.get("hosts") == "localhost"]
    assert "glmops_endpoint" in str(check["tasks"]) and plays[-1] is check
