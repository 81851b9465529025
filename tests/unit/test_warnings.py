"""Warnings as a class (issue 14 item 6): a rule may report a deviation from a seed's recipe that
the engine accepts as a Problem with severity ``warning`` (code, key path, the value, the seed's
value and source). ``glmops validate`` / ``glmops plan`` print it and exit 0; ``--strict`` makes
it an error (exit 2). First user: seed 000's attention DP with ``--max_num_tokens 4096``."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from inventory_factory import REV, write_inventory

from glmops import planning, rules
from glmops.cli import main
from glmops.inventory import load_deployment
from glmops.model import Problem, ValidationError, split_problems


def attention_dp(tokens: int | None, **pool) -> dict:
    gv = {"glmops_model": "glm-5.3-flash", "glmops_engine": "trtllm", "glmops_hardware": "b200",
          "glmops_topology": "agg", "glmops_runtime": "venv", "glmops_checkpoint": {"revision": REV},
          "glmops_topologies": {"agg": {"pools": {"agg": {"tp": 4, "ep": 4, "attention_dp": True, **pool}}}}}
    if tokens is not None:
        gv["glmops_max_num_tokens"] = tokens
    return gv


def test_attention_dp_with_other_max_num_tokens_is_a_warning_naming_the_seed_value(tmp_path):
    dep = load_deployment(write_inventory(tmp_path / "inv", attention_dp(8192)))
    plan, problems = rules.validate(dep)
    assert plan is not None
    (p,) = problems
    assert (p.code, p.severity, p.is_warning) == ("RECIPE_DEVIATION", "warning", True)
    assert p.path.endswith("glmops_max_num_tokens")
    assert "max_num_tokens 8192" in p.message and "the seed's value: 4096" in p.message
    assert "seeds/000_02b3db4c668ba297.txt" in p.message
    assert str(p).startswith("warning [RECIPE_DEVIATION]")


@pytest.mark.parametrize("gv", [attention_dp(4096), attention_dp(None), attention_dp(8192, attention_dp=False)])
def test_the_seed_value_or_no_attention_dp_gives_no_warning(tmp_path, gv):
    dep = load_deployment(write_inventory(tmp_path / "inv", gv))
    assert rules.validate(dep)[1] == []


def test_a_pool_engine_args_override_is_the_value_checked(tmp_path):
    gv = attention_dp(None, engine_args={"max_num_tokens": 2048})
    dep = load_deployment(write_inventory(tmp_path / "inv", gv))
    (p,) = rules.validate(dep)[1]
    assert p.is_warning and "max_num_tokens 2048" in p.message and "engine_args" in p.path


def test_planning_load_carries_warnings_and_strict_refuses_them(tmp_path):
    inv = str(write_inventory(tmp_path / "inv", attention_dp(8192)))
    planned = planning.load(inv)
    assert [w.code for w in planned.warnings] == ["RECIPE_DEVIATION"]
    with pytest.raises(ValidationError) as exc:
        planning.load(inv, strict=True)
    assert [p.code for p in exc.value.problems] == ["RECIPE_DEVIATION"]


def test_split_problems():
    err, warn = Problem("A", "p", "m"), Problem("B", "p", "m", severity="warning")
    assert split_problems([err, warn]) == ([err], [warn])
    assert split_problems([err, warn], strict=True) == ([err, warn], [])


def test_validate_prints_warnings_exit_0_and_strict_exit_2(tmp_path):
    inv = str(write_inventory(tmp_path / "inv", attention_dp(8192)))
    ok = CliRunner().invoke(main, ["validate", "-i", inv])
    assert ok.exit_code == 0, ok.output
    assert "valid" in ok.output and "1 warning(s)" in ok.output and "warning [RECIPE_DEVIATION]" in ok.output
    strict = CliRunner().invoke(main, ["validate", "-i", inv, "--strict"])
    assert strict.exit_code == 2, strict.output
    assert "1 problem(s)" in strict.output and "RECIPE_DEVIATION" in strict.output and "Traceback" not in strict.output
    data = json.loads(CliRunner().invoke(main, ["validate", "-i", inv, "--json"]).output)
    assert data["valid"] is True and data["problems"] == []
    assert [(w["code"], w["severity"]) for w in data["warnings"]] == [("RECIPE_DEVIATION", "warning")]
    data = json.loads(CliRunner().invoke(main, ["validate", "-i", inv, "--json", "--strict"]).output)
    assert data["valid"] is False and [p["code"] for p in data["problems"]] == ["RECIPE_DEVIATION"]


def test_plan_prints_warnings_exit_0_and_strict_exit_2(tmp_path):
    inv = str(write_inventory(tmp_path / "inv", attention_dp(8192)))
    ok = CliRunner().invoke(main, ["plan", "-i", inv])
    assert ok.exit_code == 0, ok.output
    assert "warning [RECIPE_DEVIATION]" in ok.output
    strict = CliRunner().invoke(main, ["plan", "-i", inv, "--strict"])
    assert strict.exit_code == 2 and "RECIPE_DEVIATION" in strict.output
