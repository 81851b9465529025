"""Results travel from the playbooks to the CLI as an explicit event key (``glmops_event``), not
as task names: a task renamed in a playbook still reports (glmops.runner.event_of)."""
from __future__ import annotations

import json
import re
from pathlib import Path

from glmops import runner

REPO = Path(__file__).resolve().parents[2]


def _ok(task: str, res: dict, host: str = "lab-1") -> dict:
    return {"event": "runner_on_ok", "event_data": {"host": host, "task": task, "res": res}}


def _result() -> runner.RunResult:
    return runner.RunResult(verb="deploy", rc=0, status="successful", artifacts=Path("/tmp/x"), seconds=1.0)


def test_results_are_recognised_by_their_key_whatever_the_task_is_named():
    result = _result()
    gate = {"glmops_event": "ready", "done": True, "services": [{"unit": "a.service", "ready": True}]}
    runner._collect(result, _ok("A renamed gate", {"stdout": json.dumps(gate)}))
    runner._collect(result, _ok("A renamed check", {"glmops_event": "endpoint", "msg": "answered"}, "localhost"))
    runner._collect(result, _ok("A renamed report", {"msg": {"glmops_event": "journal", "stdout": "line 1"}}))
    runner._collect(result, _ok("A renamed report", {"msg": {"glmops_event": "pruned"}}, "lab-2"))
    runner._collect(result, _ok("A renamed decision", {"ansible_facts": {"glmops_departed": {"prune": []}}}, "localhost"))
    assert [(s["unit"], s["event"]) for s in result.services] == [("a.service", "ready")]
    assert result.endpoint_answered and result.endpoint_msg == "answered"
    assert result.outputs[0]["res"]["stdout"] == "line 1"
    assert result.pruned == ["lab-2"] and result.departed == {"prune": []}
    failed = {"event": "runner_on_failed", "event_data": {"host": "localhost", "task": "A renamed plan", "res": {
        "glmops_event": "plan", "failed": True, "msg": "glmops_plan: 1 problem(s) in inv, no host contacted:\n[A] a"}}}
    runner._collect(result, failed)
    assert result.plan_problems.endswith("[A] a")


def test_a_task_without_a_key_reports_nothing():
    result = _result()
    runner._collect(result, _ok("Some task", {"stdout": json.dumps({"services": [{"unit": "a.service"}]})}))
    runner._collect(result, _ok("Some task", {"msg": "answered"}, "localhost"))
    assert not result.services and not result.endpoint_answered and not result.outputs


def test_the_tasks_the_cli_reads_carry_their_key():
    sources = {
        "roles/engine_service/files/glmops_hostctl.py": ['"glmops_event": "state"', '"glmops_event": "ready"',
                                                         '"glmops_event": "status"'],
        "roles/generation/files/glmops_generation.py": ['"glmops_event": "generations"'],
        "glmops/ansible/action_plugins/glmops_plan.py": ['result["glmops_event"] = "plan"'],
        "glmops/ansible/action_plugins/glmops_endpoint.py": ['result["glmops_event"] = "endpoint"'],
        "glmops/ansible/action_plugins/glmops_deploy_read.py": ['result["glmops_event"] = "read"'],
        "roles/prechecks/action_plugins/glmops_prechecks.py": ['result["glmops_event"] = "precheck_report"'],
        "glmops/ansible/library/glmops_checkpoint.py": ['glmops_event="download_progress"'],
        "roles/engine_service/tasks/logs.yml": ["glmops_event: journal"],
        "playbooks/plays/prune.yml": ["glmops_event: pruned"],
        "playbooks/tasks/restart_step.yml": ["glmops_event: restart_step"],
        "playbooks/upgrade.yml": ["'glmops_event': 'day2_plan'", "glmops_event: day2_step", "'glmops_event': 'day2_result'"],
        "playbooks/rollback.yml": ["'glmops_event': 'day2_plan'", "glmops_event: day2_step", "'glmops_event': 'day2_result'"],
        "playbooks/tasks/upgrade_step.yml": ["glmops_event: day2_step"],
        "playbooks/tasks/restore_step.yml": ["glmops_event: day2_step"],
    }
    for path, needles in sources.items():
        text = (REPO / path).read_text()
        assert all(n in text for n in needles), (path, [n for n in needles if n not in text])


def test_no_cli_code_matches_a_task_name():
    """Nothing compares task names: a result is recognised by its key alone (no legacy fallback)."""
    bad = []
    for path in [*(REPO / "glmops" / "commands").glob("*.py"), REPO / "glmops" / "runner.py"]:
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(r"""(get\(["']task["']\)|\[["']task["']\])\s*(==|!=|in\b)""", line):
                bad.append(f"{path.name}:{n}: {line.strip()}")
    assert not bad, bad


def test_there_is_no_task_name_fallback():
    """A result without its key is not recognised by what its task was once called (the
    runner's old LEGACY_EVENTS table is gone), and the day-2 playbooks' endpoint checks are the
    glmops_endpoint action, which carries its key."""
    assert not hasattr(runner, "LEGACY_EVENTS")
    for name in ("Wait for readiness", "One-token request through the endpoint", "Validate and plan",
                 "Read the recorded generations", "glmops output prechecks"):
        assert runner.event_of({"task": name, "res": {"msg": "x", "stdout": "{}"}}) == ""
    for path in ("playbooks/tasks/day2_step_end.yml", "playbooks/tasks/upgrade_step.yml",
                 "playbooks/tasks/restore_step.yml", "playbooks/upgrade.yml", "playbooks/rollback.yml"):
        assert "ansible.builtin.uri:" not in (REPO / path).read_text(), path
