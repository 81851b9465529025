"""Issue 18: a day-2 verb only chooses a playbook. ``glmops upgrade`` and ``glmops rollback``
are one ansible-runner run each (the playbook reads the generations, decides, rolls the steps
and, when a step fails, puts the serving generation back in the same run); ``--check`` is the
one read-only run of ``glmops history``. The runs are counted with a double of
``glmops.runner.run`` that answers as the playbooks would (tests/unit/day2_fakes.py)."""
from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from day2_fakes import day2_runner, history_of
from glmops import runner
from glmops.cli import main
from glmops.planning import plan_view

REPO = Path(__file__).resolve().parents[2]
INV = "inventories/lab"


def _invoke(monkeypatch, hist: dict, argv: list[str], **fake):
    monkeypatch.chdir(REPO)
    calls, run = day2_runner(hist, **fake)
    monkeypatch.setattr(runner, "run", run)
    res = CliRunner().invoke(main, argv, env={"COLUMNS": "250"})
    return res, [playbook for playbook, _ in calls]


def _deployed(topology: str = "agg") -> dict:
    return history_of(plan_view(INV, topology), 1)


def _two_generations() -> dict:
    g1 = history_of(plan_view(INV, "agg"), 1)
    g2 = history_of(plan_view(INV, "agg", {"glmops_max_batch_size": 3}), 2)
    return {h: {"current": 2, "generations": g1[h]["generations"] + g2[h]["generations"]} for h in g1}


UPGRADE = ["upgrade", "-i", INV, "--topology", "agg", "--set", "max_batch_size=3"]


@pytest.mark.parametrize("argv,hist,fake,playbooks,code", [
    (UPGRADE, "deployed", {}, ["upgrade.yml"], 0),
    (UPGRADE, "deployed", {"fail_at": "agg replica 0"}, ["upgrade.yml"], 1),
    (UPGRADE, "deployed", {"fail_at": "agg replica 1", "put_back": False}, ["upgrade.yml"], 1),
    (["upgrade", "-i", INV, "--topology", "agg"], "deployed", {}, ["upgrade.yml"], 0),  # nothing to upgrade
    ([*UPGRADE, "--check"], "deployed", {}, ["history.yml"], 0),
    (["rollback", "-i", INV], "two", {}, ["rollback.yml"], 0),
    (["rollback", "-i", INV], "two", {"fail_at": "agg replica 1"}, ["rollback.yml"], 1),
    (["rollback", "-i", INV, "--to", "7"], "two", {}, ["rollback.yml"], 2),
    (["rollback", "-i", INV, "--check"], "two", {}, ["history.yml"], 0),
])
def test_a_day2_verb_runs_one_playbook(monkeypatch, argv, hist, fake, playbooks, code):
    res, ran = _invoke(monkeypatch, _deployed() if hist == "deployed" else _two_generations(), argv, **fake)
    assert res.exit_code == code, res.output
    assert ran == playbooks, f"glmops {' '.join(argv)} ran {ran}"


def test_upgrade_in_one_run_prints_the_steps_in_order(monkeypatch):
    res, ran = _invoke(monkeypatch, _deployed(), UPGRADE)
    assert ran == ["upgrade.yml"]
    assert "generation 1 serves; changed units: glm-lab-agg-0.service, glm-lab-agg-1.service" in res.output
    assert res.output.index("step agg replica 0") < res.output.index("step agg replica 1") \
        < res.output.index("step router")
    assert "upgrade done: agg replica 0, agg replica 1, router; new generation recorded" in res.output


def test_a_failed_upgrade_step_is_put_back_in_the_same_run_and_says_what_is_down(monkeypatch):
    res, ran = _invoke(monkeypatch, _deployed(), UPGRADE, fail_at="agg replica 0")
    assert ran == ["upgrade.yml"]  # no second run puts the generation back
    assert "upgrade FAILED at agg replica 0: glm-lab-agg-0.service not ready" in res.output
    assert "glm-lab-agg-0.service on lab-1: exited (code 1)" in res.output  # the gate's row before the put-back
    assert "agg replica 0: generation 1 put back and serving" in res.output
    assert "still on generation 1 (untouched): agg replica 1, router" in res.output
    res, _ = _invoke(monkeypatch, _deployed(), UPGRADE, fail_at="agg replica 1", put_back=False)
    assert "already on the new settings: agg replica 0" in res.output
    assert "agg replica 1: DOWN: putting generation 1 back failed; run `glmops rollback -i inventories/lab --to 1`" \
        in res.output


def test_upgrade_refused_by_the_run_exits_2(monkeypatch):
    hist = _deployed()
    hist["lab-2"] = {"current": None, "generations": []}
    res, ran = _invoke(monkeypatch, hist, UPGRADE)
    assert ran == ["upgrade.yml"] and res.exit_code == 2
    assert "no current generation on lab-2" in res.output


def test_rollback_in_one_run(monkeypatch):
    res, ran = _invoke(monkeypatch, _two_generations(), ["rollback", "-i", INV])
    assert ran == ["rollback.yml"]
    assert "rolling back to generation 1; changed units: glm-lab-agg-0.service, glm-lab-agg-1.service" in res.output
    assert res.output.index("step agg replica 0") < res.output.index("step agg replica 1") \
        < res.output.index("step finish: generation 1 becomes current")
    assert "rollback done: generation 1 is current and the endpoint serves" in res.output
    res, _ = _invoke(monkeypatch, _two_generations(), ["rollback", "-i", INV], fail_at="agg replica 1")
    assert "rollback FAILED at agg replica 1: glm-lab-agg-1.service on lab-2: exited (code 1)" in res.output
    assert "on generation 1: agg replica 0" in res.output and "untouched): finish" in res.output


@pytest.mark.parametrize("argv", [[*UPGRADE, "--check"], ["rollback", "-i", INV, "--check"]])
def test_check_reads_the_generations_within_the_limit(monkeypatch, argv):
    """``upgrade|rollback --check --limit H`` reads the generations on H only, as the real run's
    read does (so --check shows the decision the run would make)."""
    monkeypatch.chdir(REPO)
    _, run = day2_runner(_two_generations() if argv[0] == "rollback" else _deployed())
    limits = []

    def spy(verb, playbook, inventory, extravars=None, **kw):
        limits.append((playbook, kw.get("limit")))
        return run(verb, playbook, inventory, extravars, **kw)

    monkeypatch.setattr(runner, "run", spy)
    CliRunner().invoke(main, [*argv, "--limit", "lab-1"], env={"COLUMNS": "250"})
    assert limits == [("history.yml", "lab-1")]
