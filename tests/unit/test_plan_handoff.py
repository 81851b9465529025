"""The CLI's plan handoff (``glmops_plan_handoff``, ``glmops.planning``): taken only when it was
planned from the same inputs (inventory files Ansible reads, catalog, overrides, ``-e``) and, when
the runner wrote it, authenticated; a run-control variable cannot be set with ``-e``."""
from __future__ import annotations

import shutil
from pathlib import Path

from glmops import planning
from glmops.ansible_options import AnsibleOptions, using

REPO = Path(__file__).resolve().parents[2]
LAB = REPO / "inventories" / "lab"


def _lab(tmp_path: Path) -> Path:
    inv = tmp_path / "lab"
    shutil.copytree(LAB, inv)
    return inv


def test_replanning_accepts_the_runners_handoff_variable(tmp_path):
    """ansible-playbook -e glmops_plan_handoff=... with no usable handoff: the plugin plans itself,
    and the runner's own variable is no UNKNOWN_KEY."""
    with using(AnsibleOptions(extra_vars=(f"glmops_plan_handoff={tmp_path / 'none.json'}",
                                          "glmops_restart_steps=[]", "glmops_day2_hosts=a"))):
        planned = planning.load(str(LAB))
    assert planned.plan.services


def test_the_digest_covers_only_files_ansible_reads(tmp_path):
    """A run's artifacts under <inventory>/.glmops/runs (cwd = the inventory), editor backups and
    ignored extensions do not change the digest; a vars file Ansible reads does."""
    inv = _lab(tmp_path)
    before = planning.inputs_digest(str(inv), None)
    runs = inv / ".glmops" / "runs" / "20260101T000000Z-deploy" / "artifacts"
    runs.mkdir(parents=True)
    (runs / "stdout").write_text("old run\n")
    (inv / "group_vars" / "all.yml~").write_text("glmops_model: x\n")
    (inv / "group_vars" / ".all.yml.swp").write_text("x")
    (inv / "notes.md").write_text("# notes\n")
    (inv / "hosts.yml.bak").write_text("x")
    assert planning.inputs_digest(str(inv), None) == before
    (inv / "group_vars" / "all.yml").write_text((inv / "group_vars" / "all.yml").read_text() + "\n# changed\n")
    assert planning.inputs_digest(str(inv), None) != before


def _write_handoff(tmp_path: Path, planned: planning.Planned, run_extravars: dict | None = None) -> Path:
    """The handoff the runner writes for ``planned``."""
    import json

    path = tmp_path / "plan.json"
    path.write_text(json.dumps(planning.handoff(planned, run_extravars)))
    return path


def test_a_handoff_planned_with_other_extra_vars_is_not_taken(tmp_path):
    """-e values are inputs of the Plan: a handoff planned with -e glmops_max_seq_len=1000 is not
    used by a run with 2000 (nor without it); run-control variables do not count."""
    with using(AnsibleOptions(extra_vars=("glmops_max_seq_len=1000",))):
        planned = planning.load(str(LAB))
    path = _write_handoff(tmp_path, planned, {"glmops_plan_summary": "/x/plan-summary.json"})
    take = planning.take_handoff
    assert take(str(path), str(LAB), None, None, {"glmops_max_seq_len": "1000"}) is not None
    assert take(str(path), str(LAB), None, None, {"glmops_max_seq_len": "1000", "glmops_plan_summary": "/y",
                                                  "glmops_plan_handoff": str(path)}) is not None
    assert take(str(path), str(LAB), None, None, {"glmops_max_seq_len": "2000"}) is None
    assert take(str(path), str(LAB), None, None, {}) is None
    assert take(str(path), str(LAB), None, None, {"glmops_max_seq_len": "1000", "model_root": "/elsewhere"}) is None


def _no_run(monkeypatch) -> list:
    """runner.run's playbook start records instead of running (nothing must run)."""
    from glmops import runner

    started: list = []
    monkeypatch.setattr(runner.ansible_runner, "run", lambda **kw: started.append(kw) or (_ for _ in ()).throw(
        AssertionError("a playbook ran")))
    return started


def test_the_cli_refuses_run_control_variables_in_extra_vars(tmp_path, monkeypatch):
    """glmops deploy -e glmops_plan_handoff=/tmp/forged.json: exit 2 naming it, no run (also as
    JSON and @file, and for the other run-control variables)."""
    from click.testing import CliRunner

    from glmops.cli import main

    started = _no_run(monkeypatch)
    monkeypatch.setenv("GLMOPS_RUNS_DIR", str(tmp_path / "runs"))
    forged = tmp_path / "forged.json"
    forged.write_text("{}")
    vars_file = tmp_path / "vars.yml"
    vars_file.write_text(f"glmops_plan_summary: {tmp_path / 's.json'}\nglmops_max_seq_len: 1000\n")
    for extra, name in ((f"glmops_plan_handoff={forged}", "glmops_plan_handoff"),
                        ('{"glmops_prune": false}', "glmops_prune"),
                        (f"@{vars_file}", "glmops_plan_summary")):
        for verb in (["deploy", "--check"], ["serve"], ["validate"]):
            res = CliRunner().invoke(main, [*verb, "-i", str(LAB), "-e", extra], env={"COLUMNS": "200"})
            assert res.exit_code == 2, (verb, extra, res.output)
            assert f"-e:{name}" in res.output and "run-control variable" in res.output, res.output
    assert not started


def test_runner_refuses_run_control_variables_before_any_run(tmp_path, monkeypatch):
    import pytest

    from glmops import runner
    from glmops.model import ValidationError

    started = _no_run(monkeypatch)
    monkeypatch.setenv("GLMOPS_RUNS_DIR", str(tmp_path / "runs"))
    with using(AnsibleOptions(extra_vars=("glmops_plan_handoff=/tmp/forged.json",))):
        with pytest.raises(ValidationError, match="glmops_plan_handoff"):
            runner.run("deploy", "deploy.yml", str(LAB), check=True)
    assert not started
