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


def _write_handoff(tmp_path: Path, planned: planning.Planned, run_extravars: dict | None = None,
                   monkeypatch=None) -> Path:
    """The handoff the runner writes for ``planned`` (its key named in the environment)."""
    private = tmp_path / "private"
    private.mkdir(mode=0o700, exist_ok=True)
    for old in private.iterdir():
        old.unlink()
    path, key = planning.write_handoff(str(private), planned, run_extravars)
    if monkeypatch is not None:
        monkeypatch.setenv(planning.KEY_ENV, key)
    return Path(path)


def test_a_handoff_planned_with_other_extra_vars_is_not_taken(tmp_path, monkeypatch):
    """-e values are inputs of the Plan: a handoff planned with -e glmops_max_seq_len=1000 is not
    used by a run with 2000 (nor without it); run-control variables do not count."""
    with using(AnsibleOptions(extra_vars=("glmops_max_seq_len=1000",))):
        planned = planning.load(str(LAB))
    path = _write_handoff(tmp_path, planned, {"glmops_plan_summary": "/x/plan-summary.json"}, monkeypatch)
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


def _forged(planned: planning.Planned, **change) -> dict:
    """A handoff document as anyone can compute it (version, recomputed digest), units renamed."""
    import copy

    doc = copy.deepcopy(planning.handoff(planned))
    for svc in doc["plan"]["services"]:
        svc["unit"] = svc["unit"].replace("glm", "glm-FORGED", 1)
    doc.update(change)
    return doc


def test_only_an_authenticated_well_formed_handoff_is_taken(tmp_path, monkeypatch):
    """A forged handoff (any content with the right digest, the old unauthenticated format, an
    HMAC with another key, altered after its HMAC, plan null) is ignored with one line why, as
    is a handoff or key file others can write (or read, the key) or a symlink; the runner's is
    taken."""
    import hashlib
    import hmac
    import json
    import os

    planned = planning.load(str(LAB))
    path = _write_handoff(tmp_path, planned, None, monkeypatch)
    key_path = Path(os.environ[planning.KEY_ENV])
    said: list[str] = []

    def take(p=path):
        said.clear()
        got = planning.take_handoff(str(p), str(LAB), None, None, {}, say=said.append)
        assert got is not None or len(said) == 1, said
        return got

    assert take()["plan"]["services"] == planned.view()["services"] and not said
    good = path.read_bytes()
    key = bytes.fromhex(key_path.read_text())

    def write(data: bytes, where: Path = path) -> Path:
        where.chmod(0o600)
        where.write_bytes(data)
        return where

    def signed(doc, k=key) -> bytes:
        payload = json.dumps(doc).encode()
        return b"glmops-plan-handoff-v2 " + hmac.new(k, payload, hashlib.sha256).hexdigest().encode() + b"\n" + payload

    forged = tmp_path / "forged.json"
    forged.write_text(json.dumps(_forged(planned)))  # what take_handoff trusted before
    assert take(forged) is None and "HMAC" in said[0]
    write(signed(_forged(planned, version=planning.HANDOFF_VERSION), k=b"k" * 32))
    assert take() is None and "HMAC" in said[0]
    write(good.replace(b"glm-", b"glm-FORGED-"))
    assert take() is None and "HMAC" in said[0]
    for change in ({"plan": None}, {"plan": {"services": "x"}}, {"precheck_needs": []}, {"digest": 1}):
        write(signed(_forged(planned, **change)))
        assert take() is None and "malformed" in said[0], change
    write(good)
    assert take() is not None
    path.chmod(0o620)
    assert take() is None and "writable by group or others" in said[0]
    path.chmod(0o600)
    key_path.chmod(0o640)
    assert take() is None and "accessible by group or others" in said[0]
    key_path.chmod(0o600)
    link = tmp_path / "private" / "link.json"
    link.symlink_to(path)
    assert take(link) is None and "cannot open" in said[0]
    monkeypatch.delenv(planning.KEY_ENV)
    assert take() is None and planning.KEY_ENV in said[0]


def _plan_play(tmp_path: Path, inv: Path, *args: str, **env: str):
    """ansible-playbook: the plan play, then the planned units and served model name printed."""
    import os
    import subprocess
    import sys

    play = tmp_path / "show.yml"
    play.write_text(f"- import_playbook: {REPO / 'playbooks' / 'plays' / 'plan.yml'}\n"
                    "- hosts: localhost\n  connection: local\n  gather_facts: false\n  tasks:\n"
                    "    - ansible.builtin.debug:\n"
                    "        msg: \"UNITS {{ glmops_plan_result.plan.services | map(attribute='unit') | join(',') }}"
                    " NAME {{ glmops_plan_result.plan.served_model_name }}\"\n")
    full = {k: v for k, v in os.environ.items() if not k.startswith(("ANSIBLE_", "GLMOPS_"))}
    full.update(ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), PYTHONPATH=str(REPO), ANSIBLE_NOCOLOR="1", **env)
    return subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inv), str(play), *args],
                          capture_output=True, text=True, timeout=300, env=full, cwd=tmp_path)


def test_the_plan_play_ignores_a_forged_handoff(tmp_path):
    """ansible-playbook -e glmops_plan_handoff=forged.json (the -e the CLI now refuses): the plan
    play plans itself (no FORGED unit), says why in one line; plan: null is no Jinja error."""
    import json

    planned = planning.load(str(LAB))
    forged = tmp_path / "forged.json"
    forged.write_text(json.dumps(_forged(planned)))
    null = tmp_path / "null.json"
    null.write_text(json.dumps(_forged(planned, plan=None)))
    for path in (forged, null):
        proc = _plan_play(tmp_path, LAB, "-e", f"glmops_plan_handoff={path}")
        out = proc.stdout + proc.stderr
        assert proc.returncode == 0, out[-3000:]
        assert "FORGED" not in proc.stdout.split("PLAY [localhost]")[-1], out[-3000:]
        assert "UNITS glm-lab-" in out and out.count("not using the plan handoff") == 1, out[-3000:]


def test_the_plan_play_takes_the_runners_handoff_only_for_the_same_extra_vars(tmp_path, monkeypatch):
    """An authenticated handoff planned with -e glmops_served_model_name=from-handoff: taken by a
    run with that -e (no second Plan), not by one with another value (it plans, from-e)."""
    monkeypatch.chdir(tmp_path)
    with using(AnsibleOptions(extra_vars=("glmops_served_model_name=from-handoff",))):
        planned = planning.load(str(LAB))
    path = _write_handoff(tmp_path, planned, {"glmops_plan_handoff": "x"}, monkeypatch)
    import os

    builds = tmp_path / "builds"
    for value, taken in (("from-handoff", True), ("from-e", False)):
        builds.write_text("")
        proc = _plan_play(tmp_path, LAB, "-e", f"glmops_served_model_name={value}",
                          "-e", f"glmops_plan_handoff={path}",
                          **{planning.KEY_ENV: os.environ[planning.KEY_ENV], planning.BUILDS_ENV: str(builds)})
        out = proc.stdout + proc.stderr
        assert proc.returncode == 0, out[-3000:]
        assert f"NAME {value}" in out, out[-3000:]
        assert (builds.read_text() == "") is taken, (value, builds.read_text(), out[-2000:])


def test_a_handoff_carries_the_other_topologies_for_a_run_that_reads_the_deployed_one(tmp_path, monkeypatch):
    """A day-2 run without --topology hands the Plans of every topology the inventory plans
    (``alternatives``); its plan play takes the one the hosts record (here agg, the lab's default
    being disagg) and still refuses a topology nobody planned or a tampered alternative."""
    inv = _lab(tmp_path)
    default, agg = planning.load(str(inv)), planning.load(str(inv), "agg")
    assert (default.plan.topology, agg.plan.topology) == ("disagg", "agg")  # inventories/lab's glmops_topology
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    path, key = planning.write_handoff(str(private), default, None, [agg])
    monkeypatch.setenv(planning.KEY_ENV, key)
    said = []
    took = planning.take_handoff(path, str(inv), "agg", None, {}, say=said.append)
    assert took is not None and took["plan"]["topology"] == "agg", said
    assert {s["unit"] for s in took["plan"]["services"]} == {s["unit"] for s in agg.view()["services"]}
    assert planning.take_handoff(path, str(inv), None, None, {})["plan"]["topology"] == "disagg"
    # without the alternative, the same run plans itself and says why
    private2 = tmp_path / "private2"
    private2.mkdir(mode=0o700)
    path2, key2 = planning.write_handoff(str(private2), default, None)
    monkeypatch.setenv(planning.KEY_ENV, key2)
    said.clear()
    assert planning.take_handoff(path2, str(inv), "agg", None, {}, say=said.append) is None
    assert "planned for topology 'disagg', this run is 'agg'" in said[0]
