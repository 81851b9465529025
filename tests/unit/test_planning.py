"""One door into a Plan (issue 18): ``glmops.planning.load`` is the only caller of
``glmops.rules.validate``, which is the only caller of ``glmops.plan.build``; a verb builds the
Plan once per run and hands it to its playbook's plan play (``glmops_plan_handoff``)."""
from __future__ import annotations

import ast
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from glmops import planning, runner, smoke
from glmops.cli import main

REPO = Path(__file__).resolve().parents[2]


def _sources() -> list[Path]:
    return sorted([*(REPO / "glmops").rglob("*.py"), *(REPO / "roles").glob("*/action_plugins/*.py"),
                   *(REPO / "roles").glob("*/library/*.py")])


def _calls(path: Path) -> list[tuple[str, str, str]]:
    """(callee, enclosing function, file) for calls of rules.validate and glmops.plan.build."""
    tree = ast.parse(path.read_text(), str(path))
    plan_names, rules_names, direct = set(), set(), {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "glmops":
            for a in node.names:
                (plan_names if a.name == "plan" else rules_names if a.name == "rules" else set()).add(a.asname or a.name)
        elif isinstance(node, ast.ImportFrom) and node.module in ("glmops.plan", "glmops.rules"):
            for a in node.names:
                if a.name in ("build", "validate"):
                    direct[a.asname or a.name] = f"{node.module.split('.')[1]}.{a.name}"
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name in ("glmops.plan", "glmops.rules") and a.asname:
                    (plan_names if a.name == "glmops.plan" else rules_names).add(a.asname)
    if path == REPO / "glmops" / "rules.py":
        direct["validate"] = "rules.validate"
    found = []

    def visit(node, where):
        for child in ast.iter_child_nodes(node):
            inner = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else where
            if isinstance(child, ast.Call):
                f = child.func
                if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name):
                    if f.attr == "build" and f.value.id in plan_names:
                        found.append(("plan.build", where, str(path.relative_to(REPO))))
                    if f.attr == "validate" and f.value.id in rules_names:
                        found.append(("rules.validate", where, str(path.relative_to(REPO))))
                elif isinstance(f, ast.Name) and f.id in direct and path.name != "plan.py":
                    found.append((direct[f.id], where, str(path.relative_to(REPO))))
            visit(child, inner)

    visit(tree, "<module>")
    return found


def test_one_planning_entry_point():
    calls = [c for p in _sources() for c in _calls(p)]
    validate = sorted({(where, f) for callee, where, f in calls if callee == "rules.validate"})
    build = sorted({(where, f) for callee, where, f in calls if callee == "plan.build"})
    assert validate == [("load", "glmops/planning.py")], validate
    assert build == [("validate", "glmops/rules.py")], build


def _plan_play_only(monkeypatch):
    """runner.run runs only the playbook's plan play (localhost: no host contacted)."""
    real = runner.run
    playbooks = []

    def run(verb, playbook, inventory, extravars=None, **kw):
        playbooks.append(playbook)
        kw = {k: v for k, v in kw.items() if k not in ("check", "diff", "limit")}
        return real(verb, "plays/plan.yml", inventory, extravars, **kw)

    monkeypatch.setattr(runner, "run", run)
    monkeypatch.setattr(smoke, "run", lambda target, **kw: smoke.SmokeReport(endpoint=target.endpoint,
                                                                             model=target.model, checks=[]))
    return playbooks


def _builds(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


@pytest.mark.parametrize("argv", [["deploy"], ["serve"], ["download"],
                                  ["serve", "-e", "glmops_served_model_name=from-e", "--topology", "agg"],
                                  ["download", "-e", '{"glmops_served_model_name": "from-e"}']])
def test_a_run_builds_the_plan_once(tmp_path, monkeypatch, argv):
    """deploy: once, in its run's plan play (the smoke checks after it take the run's target);
    serve, download: once on the controller, handed to the plan play (which does not plan), also
    with -e (the plan play's digest of the run's -e, the operator's and the runner's, is the CLI's)."""
    builds = tmp_path / "builds"
    monkeypatch.setenv(planning.BUILDS_ENV, str(builds))
    monkeypatch.setenv("GLMOPS_RUNS_DIR", str(tmp_path / "runs"))
    monkeypatch.chdir(REPO)
    _plan_play_only(monkeypatch)
    key = bytes(range(32))  # the run's handoff key: in no file of the run dir
    monkeypatch.setattr(planning.secrets, "token_bytes", lambda n: key)
    res = CliRunner().invoke(main, [*argv, "-i", "inventories/lab"], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    assert len(_builds(builds)) == 1, _builds(builds)
    for f in (tmp_path / "runs").rglob("*"):
        assert not f.is_file() or key.hex().encode() not in f.read_bytes(), f
    if argv == ["deploy"]:  # planned inside the run, not by the CLI process
        import os

        assert _builds(builds)[0].split()[0] != str(os.getpid())


def test_plan_play_plans_again_when_the_inventory_changed_after_the_handoff(tmp_path, monkeypatch):
    inv = tmp_path / "lab"
    shutil.copytree(REPO / "inventories" / "lab", inv)
    planned = planning.load(str(inv), "agg")
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    handoff, key = planning.write_handoff(str(private), planned)  # as glmops.runner writes it
    monkeypatch.setenv(planning.KEY_ENV, key)
    assert planning.take_handoff(str(handoff), str(inv), None, None) is not None
    assert planning.take_handoff(str(handoff), str(inv), "agg", None) is not None
    assert planning.take_handoff(str(handoff), str(inv), "disagg", None) is None  # another topology
    assert planning.take_handoff(str(handoff), str(inv), None, {"glmops_max_batch_size": 3}) is None
    (inv / "group_vars" / "all.yml").write_text((inv / "group_vars" / "all.yml").read_text() + "\n# changed\n")
    assert planning.take_handoff(str(handoff), str(inv), None, None) is None
    assert planning.take_handoff(str(tmp_path / "missing.json"), str(inv), None, None) is None


def test_download_asks_only_for_the_checkpoint_part():
    planned = planning.load(str(REPO / "inventories" / "lab"), None)
    ck = planned.checkpoint()
    assert ck["hosts"] and "view" not in planned._parts
