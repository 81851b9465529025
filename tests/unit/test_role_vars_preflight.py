"""Role inputs set in the inventory are checked before any host is touched (glmops.inventory
``_role_variables``): with Ansible's own ``ArgumentSpecValidator`` against each role's
``meta/argument_specs.yml``, so a bad ``checkpoint_relay_fanout`` is a clear error of
``glmops validate`` and not a failed argument validation in the middle of a deploy.

Inputs are minimal inventories as a user writes them; the accepted types and choices are
read from the roles' spec files, never restated here.
"""
from __future__ import annotations

import time
from pathlib import Path

import yaml
from click.testing import CliRunner
from inventory_factory import vllm_b200_disagg, write_inventory

from glmops import rules
from glmops.cli import main
from glmops.inventory import load_deployment, role_options

REPO = Path(__file__).resolve().parents[2]


def _spec(role: str, name: str) -> dict:
    doc = yaml.safe_load((REPO / "roles" / role / "meta/argument_specs.yml").read_text())
    return doc["argument_specs"]["main"]["options"][name]


def test_every_role_option_is_known_with_its_role_and_type():
    opts = role_options()
    assert opts["checkpoint_relay_fanout"] == ("checkpoint", {"type": _spec("checkpoint", "checkpoint_relay_fanout")["type"]})
    assert opts["engine_runtime_image_fanout"][0] == "engine_runtime"
    for f in (REPO / "roles").glob("*/meta/argument_specs.yml"):
        main_opts = yaml.safe_load(f.read_text())["argument_specs"]["main"].get("options") or {}
        for name, opt in main_opts.items():
            assert opts[name][0] == f.parent.parent.name and opts[name][1].get("type") == opt.get("type"), name


def _problems(tmp_path, **extra):
    inv = write_inventory(tmp_path / "i", {**vllm_b200_disagg(), **extra})
    return inv, [p for p in rules.check(load_deployment(inv)) if p.code == "ROLE_VAR"]


def test_bad_role_inputs_are_all_reported_naming_key_value_role_and_accepted(tmp_path):
    choice_opt = next((n, o) for n, o in yaml.safe_load((REPO / "roles/checkpoint/meta/argument_specs.yml").read_text())
                      ["argument_specs"]["main"]["options"].items() if o.get("choices"))
    name, opt = choice_opt
    inv, probs = _problems(tmp_path, checkpoint_relay_fanout="two", engine_runtime_image_fanout="maybe",
                           **{name: "no-such-choice"})
    by_key = {p.path.rsplit(":", 1)[-1]: p for p in probs}
    assert set(by_key) == {"checkpoint_relay_fanout", "engine_runtime_image_fanout", name}, probs
    p = by_key["checkpoint_relay_fanout"]
    assert "'two'" in p.message and "role checkpoint" in p.message and "accepted: an int" in p.message
    assert p.hint == "see roles/checkpoint/meta/argument_specs.yml"
    assert "'maybe'" in by_key["engine_runtime_image_fanout"].message
    assert "accepted: a bool" in by_key["engine_runtime_image_fanout"].message
    assert all(str(c) in by_key[name].message for c in opt["choices"])


def test_good_and_templated_role_inputs_pass(tmp_path):
    _, probs = _problems(tmp_path, checkpoint_relay_fanout="3", engine_runtime_image_fanout="yes",
                         checkpoint_relay_idle_s="{{ 60 * 30 }}")
    assert probs == []


def test_validate_exits_nonzero_fast_and_names_the_file(tmp_path):
    inv = write_inventory(tmp_path / "i", {**vllm_b200_disagg(), "checkpoint_relay_fanout": [2]})
    t0 = time.monotonic()
    res = CliRunner().invoke(main, ["validate", "-i", str(inv)])
    assert time.monotonic() - t0 < 10
    assert res.exit_code != 0 and "Traceback" not in res.output
    assert "group_vars/all.yml:checkpoint_relay_fanout" in res.output and "role checkpoint" in res.output
