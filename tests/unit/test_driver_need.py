"""F30 (issue 14 item 7): each engine build the catalog pins has its CUDA major and minimum NVIDIA driver
(with source); the deployment's highest need is computed in planning, handed to roles/nvidia_driver as its
default branch, checked by the prechecks against the loaded driver, and a configured branch below it is
refused at validate (DRIVER_BRANCH)."""
from __future__ import annotations

from pathlib import Path

import yaml
from inventory_factory import trtllm_b200, vllm_b200_disagg, without_venv_advice, write_inventory

from glmops import catalog, planning, prechecks, rules
from glmops.commands.provision import planned_driver_branch
from glmops.inventory import load_deployment
from glmops.plan import build

ROOT = Path(__file__).resolve().parents[2]
HOST = "gpu-a"


def needs_of(tmp_path, gv, name="inv"):
    dep = load_deployment(write_inventory(tmp_path / name, gv))
    return prechecks.needs_for_deployment(dep, build(dep))[HOST]


def test_every_pinned_build_has_cuda_and_a_source():
    cat = catalog.load()
    by_major = cat.data["engines"]["cuda"]["driver_min_by_major"]
    assert by_major[13] == 580 and by_major[12] == 525
    for name, entry in cat.engines.items():
        for b in entry.get("builds") or []:
            assert b["runtime"] in ("venv", "container") and b["cuda"] in by_major and b["source"], (name, b)
    vllm = cat.engines["vllm"]["builds"]
    wheel = next(b for b in vllm if b["runtime"] == "venv" and b["specifier"] == ">=0.20.0")
    assert wheel["cuda"] == 13 and "vllm-project/vllm/pull/39878" in wheel["source"] and wheel["verified"] is True


def test_f30_vllm_venv_needs_r580_and_575_fails_naming_driver_need_and_build(tmp_path):
    needs = needs_of(tmp_path, vllm_b200_disagg())
    assert needs["driver_min"] == 580
    assert needs["driver_builds"] == ["vLLM 0.29.0 vllm (PyPI default wheel, unsuffixed) (CUDA 13: >= R580)"]
    facts = {"gpu": {"gpus": [{"index": i, "name": "NVIDIA B200"} for i in range(8)], "driver_version": "575.57.08"}}
    (bad,) = [r for r in prechecks.evaluate(HOST, facts, needs) if r["check"] == "driver"]
    assert not bad["ok"] and bad["found"] == "575.57.08" and bad["needed"] == ">= 580"
    assert "575.57.08" in bad["message"] and "580" in bad["message"] and "vLLM 0.29.0" in bad["message"] \
        and "CUDA 13" in bad["message"]
    facts["gpu"]["driver_version"] = "580.95.05"
    assert [r for r in prechecks.evaluate(HOST, facts, needs) if r["check"] == "driver"][0]["ok"]


def test_trtllm_keeps_the_seeds_575(tmp_path):
    needs = needs_of(tmp_path, trtllm_b200("agg"))
    assert needs["driver_min"] == 575 and "TensorRT-LLM 1.3.0rc29" in needs["driver_builds"][0]


def test_dynamo_counts_its_vllm_backend_at_the_pinned_version():
    dep = load_deployment(ROOT / "inventories/h200")
    need, builds = prechecks.driver_need(dep, ["dynamo", "vllm"])
    assert need == 580 and builds == ["vLLM 0.31.0 vllm/vllm-openai:glm53-flash (CUDA 13: >= R580)"]


def test_a_configured_branch_below_the_need_is_refused_at_validate(tmp_path):
    gv = vllm_b200_disagg(nvidia_driver_branch="575")
    problems = without_venv_advice(rules.validate(load_deployment(write_inventory(tmp_path / "low", gv)))[1])
    (p,) = problems
    assert p.code == "DRIVER_BRANCH" and p.path.endswith("nvidia_driver_branch")
    assert "575" in p.message and "accepted: >= 580" in p.message and "CUDA 13" in p.message
    for branch, name in (("580", "ok"), (None, "unset")):
        gv = vllm_b200_disagg(**({"nvidia_driver_branch": branch} if branch else {}))
        assert without_venv_advice(rules.validate(load_deployment(write_inventory(tmp_path / name, gv)))[1]) == []
    gv = trtllm_b200("agg", nvidia_driver_branch="575")
    assert rules.validate(load_deployment(write_inventory(tmp_path / "trt", gv)))[1] == []


def test_the_role_default_branch_follows_the_planned_need(tmp_path):
    planned = planning.load(str(write_inventory(tmp_path / "inv", vllm_b200_disagg())))
    assert planned_driver_branch(planned) == "580"
    assert planned_driver_branch(None) is None
    defaults = yaml.safe_load((ROOT / "roles/nvidia_driver/defaults/main.yml").read_text())
    assert defaults["nvidia_driver_branch"] == "{{ nvidia_driver_planned_branch | string }}"
    assert "driver_release" in defaults["nvidia_driver_version"]
    assert defaults["nvidia_driver_min_branch"] == "{{ nvidia_driver_planned_branch }}"
    play = yaml.safe_load((ROOT / "playbooks/provision.yml").read_text())[0]
    assert "precheck_needs" in play["vars"]["nvidia_driver_planned_branch"]
    spec = yaml.safe_load((ROOT / "roles/nvidia_driver/meta/argument_specs.yml").read_text())
    assert "nvidia_driver_planned_branch" in spec["argument_specs"]["main"]["options"]


def test_the_lookup_gives_the_release_of_a_branch():
    from glmops.ansible.lookup_plugins.glmops_catalog import LookupModule

    assert LookupModule().run(["driver_release", "580"]) == ["580.95.05"]
    assert LookupModule().run(["driver_release", "575"]) == ["575.57.08"]
    assert LookupModule().run(["driver_min"]) == [575]
