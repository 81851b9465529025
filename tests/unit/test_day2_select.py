"""The day-2 verbs' ``--service`` (only those units; an unknown name exits 2 listing the
accepted ones, no run), ``--limit`` (reaches the run) and ``--yes`` (``stop`` and a restart that
is not ``--rolling`` take the endpoint down: without a terminal they need it, exit 2 naming it)."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from day2_fakes import calls  # noqa: F401  (the fixture)
from glmops.cli import main

REPO = Path(__file__).resolve().parents[2]
LAB_INV = REPO / "inventories" / "lab"
AGG_UNITS = ["glm-lab-agg-0.service", "glm-lab-agg-1.service", "glm-lab-router.service"]


def _invoke(*args: str):
    return CliRunner().invoke(main, [args[0], "-i", str(LAB_INV), "--topology", "agg", *args[1:]],
                              env={"COLUMNS": "200"})


@pytest.mark.parametrize("verb", [["stop", "--yes"], ["restart", "--yes"], ["restart", "--rolling"], ["status"],
                                  ["logs"]])
def test_unknown_service_exits_2_listing_the_accepted_names_before_any_run(calls, verb):
    res = _invoke(*verb, "--service", "glm-lab-agg-0", "--service", "nope")
    assert res.exit_code == 2, res.output
    assert "'nope'" in res.stderr and "glm-lab-agg-0.service" in res.stderr
    assert all(u in res.stderr for u in AGG_UNITS)
    assert calls == []


@pytest.mark.parametrize("verb,playbook", [(["stop", "--yes"], "stop.yml"), (["restart", "--yes"], "restart.yml"),
                                           (["status"], "status.yml")])
def test_known_service_reaches_the_run_as_glmops_units(calls, verb, playbook):
    res = _invoke(*verb, "--service", "glm-lab-agg-1", "--service", "glm-lab-router.service")
    assert [c[0] for c in calls] == [playbook], res.output
    assert calls[0][1]["glmops_units"] == ["glm-lab-agg-1.service", "glm-lab-router.service"]
    assert calls[0][2] is None


def test_without_service_no_selection_is_passed(calls):
    _invoke("stop", "--yes")
    assert "glmops_units" not in calls[0][1]


def test_rolling_restart_of_selected_services_has_only_their_steps(calls):
    res = _invoke("restart", "--rolling", "--service", "glm-lab-agg-1")
    assert res.exit_code == 0, res.output
    extra = calls[0][1]
    assert extra["glmops_units"] == ["glm-lab-agg-1.service"]
    assert [(s["name"], s["units"]) for s in extra["glmops_restart_steps"]] == [
        ("agg replica 1", ["glm-lab-agg-1.service"])]


def test_logs_service_narrows_the_units_read(calls):
    res = _invoke("logs", "--service", "glm-lab-router")
    assert res.exit_code == 0, res.output
    assert calls[0][1]["glmops_log_units"] == ["glm-lab-router.service"]


@pytest.mark.parametrize("verb,playbook", [
    (["stop", "--yes"], "stop.yml"), (["restart", "--yes"], "restart.yml"), (["restart", "--rolling"], "restart.yml"),
    (["destroy", "--yes"], "destroy.yml"), (["status"], "status.yml"), (["logs"], "logs.yml"),
    (["history"], "history.yml")])
def test_limit_reaches_the_run(calls, verb, playbook):
    _invoke(*verb, "--limit", "lab-1")
    assert calls and calls[-1][0] == playbook and calls[-1][2] == "lab-1", calls


@pytest.mark.parametrize("verb", ["upgrade", "rollback"])
def test_upgrade_and_rollback_take_limit(verb):
    res = CliRunner().invoke(main, [verb, "--help"])
    assert "--limit" in res.output


@pytest.mark.parametrize("verb", [["stop"], ["restart"]])
def test_endpoint_down_verbs_without_a_terminal_need_yes(calls, verb):
    res = _invoke(*verb)
    assert res.exit_code == 2 and "--yes" in res.stderr, res.output
    assert calls == []


def test_endpoint_down_verbs_on_a_terminal_ask_default_no(calls, monkeypatch):
    from glmops.commands import common

    monkeypatch.setattr(common, "interactive", lambda: True)
    res = CliRunner().invoke(main, ["stop", "-i", str(LAB_INV), "--topology", "agg"], input="\n")
    assert res.exit_code == 1 and calls == [], res.output
    res = CliRunner().invoke(main, ["restart", "-i", str(LAB_INV), "--topology", "agg"], input="y\n")
    assert res.exit_code == 0 and [c[0] for c in calls] == ["restart.yml"], res.output


def test_rolling_restart_does_not_ask(calls, monkeypatch):
    from glmops.commands import common

    monkeypatch.setattr(common, "interactive", lambda: True)
    res = _invoke("restart", "--rolling")
    assert res.exit_code == 0 and "Go on?" not in res.output and [c[0] for c in calls] == ["restart.yml"]


def test_the_role_acts_only_on_glmops_units():
    """The one place the selection applies on the hosts: engine_service's units (stop, restart,
    logs) and services (status) keep only ``engine_service_only_units`` (``glmops_units``)."""
    defaults = yaml.safe_load((REPO / "roles" / "engine_service" / "defaults" / "main.yml").read_text())
    assert defaults["engine_service_only_units"] == "{{ glmops_units | default([]) }}"
    role_vars = yaml.safe_load((REPO / "roles" / "engine_service" / "vars" / "main.yml").read_text())
    assert "engine_service_only_units" in role_vars["engine_service__services"]
    assert role_vars["engine_service__units"].startswith("{{ engine_service__services")
    status = (REPO / "roles" / "engine_service" / "tasks" / "status.yml").read_text()
    assert "engine_service__services" in status and "engine_service_bundle.services" not in status


def test_rolling_restart_asks_when_a_step_holds_every_replica_of_a_role(calls):
    """inventories/lab disagg: one prefill and one decode replica, each pool one step: the
    endpoint is down while each restarts (measured on the lab: ~2 min of 503 "No available
    workers" for the prefill step), so --rolling asks too (exit 2 naming --yes without a
    terminal); agg with two replicas keeps one serving and does not ask."""
    res = CliRunner().invoke(main, ["restart", "-i", str(LAB_INV), "--topology", "disagg", "--rolling"],
                             env={"COLUMNS": "200"})
    assert res.exit_code == 2 and calls == [], res.output
    assert "(disagg: prefill pool, decode pool)" in res.stderr and "pass --yes" in res.stderr
    res = CliRunner().invoke(main, ["restart", "-i", str(LAB_INV), "--topology", "disagg", "--rolling", "--yes"],
                             env={"COLUMNS": "200"})
    assert res.exit_code == 0 and [c[0] for c in calls] == ["restart.yml"], res.output
    calls.clear()
    assert _invoke("restart", "--rolling").exit_code == 0 and [c[0] for c in calls] == ["restart.yml"]


@pytest.mark.parametrize("verb", [["stop"], ["restart"], ["destroy"]])
@pytest.mark.parametrize("bad", [["--service", "nope"], ["--limit", "no-such-host"], ["--topology", "disagg", "-e",
                                                                                          "glmops_engine=trtlm"]])
def test_input_problems_come_before_the_question(calls, monkeypatch, verb, bad):
    """On a terminal, a verb that asks (no --yes) first reports every input problem (exit 2) and
    only asks about valid input: the prompt never appears for a bad --service, --limit or inventory."""
    from glmops.commands import common

    monkeypatch.setattr(common, "interactive", lambda: True)
    args = [*verb, "-i", str(LAB_INV), *(["--topology", "agg"] if "--topology" not in bad else []), *bad]
    res = CliRunner().invoke(main, args, input="y\n")
    assert res.exit_code == 2, res.output
    assert "Go on?" not in res.output and calls == [], res.output
