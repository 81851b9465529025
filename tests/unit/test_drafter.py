"""Issue 14 item 9: seed 004's opt-in DSpark drafter through ``glmops_speculative``.

A minimal inventory on disk (``hosts.yml`` + ``group_vars/all.yml``) goes through the one door
(``glmops.planning.load``): the unit names the drafter's local snapshot (never the hub id: units
serve with HF_HUB_OFFLINE=1, F12), the download plan lists the model's and the drafter's repos at
their revisions with the hosts that load each, and every refusal is coded and names its key.

The seed's command is read from /work/shared/seeds/004_*.txt ("#### DSpark (opt-in)", lines
173-182), never retyped.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from seed_text import command_after, seed

from glmops import planning, render
from glmops.model import ValidationError

sys.path.insert(0, str(Path(__file__).resolve().parent))
from inventory_factory import REV, write_inventory  # noqa: E402
from plan_helpers import seed_cmd  # noqa: E402

DRAFT_REV = "fedcba9876543210fedcba9876543210fedcba98"
SEED_CMD, SEED_LINE = command_after(seed("004"), "#### DSpark (opt-in)", "vllm ")
SEED_WORDS = seed_cmd(SEED_CMD)[1]
SEED_SPEC = json.loads(SEED_WORDS[SEED_WORDS.index("--speculative-config") + 1])
DRAFT_REPO = SEED_SPEC["model"]
MAIN_DIR = f"/models/zai-org/GLM-5.3/{REV}"
DRAFT_DIR = f"/models/{DRAFT_REPO}/{DRAFT_REV}"


def gv(**over):
    """GLM-5.3 on one B300 node with vLLM (seed 004's rendered configuration) and the drafter."""
    base = {"glmops_model": "glm-5.3", "glmops_engine": "vllm", "glmops_hardware": "b300",
            "glmops_checkpoint": {"revision": REV},
            "glmops_speculative": {"method": "dspark", "revision": DRAFT_REV}}
    base.update(over)
    return base


def load(tmp_path, name="inv", hosts=None, **over):
    return planning.load(str(write_inventory(tmp_path / name, gv(**over), hosts=hosts)))


def refused(tmp_path, **over) -> dict[str, list]:
    with pytest.raises(ValidationError) as err:
        load(tmp_path, **over)
    out: dict[str, list] = {}
    for p in err.value.problems:
        out.setdefault(p.code, []).append(p)
    return out


def spec_of(argv: list[str]) -> dict:
    return json.loads(argv[argv.index("--speculative-config") + 1])


def test_seed_command_is_the_one_read():
    assert SEED_LINE == 180 and DRAFT_REPO == "RedHatAI/GLM-5.3-speculator.dspark"
    assert SEED_SPEC == {"method": "dspark", "model": DRAFT_REPO, "num_speculative_tokens": 8}


def test_unit_names_the_drafters_local_snapshot_offline(tmp_path):
    planned = load(tmp_path)
    [svc] = [s for s in planned.plan.services if s.role == "agg"]
    assert svc.argv[2] == MAIN_DIR and svc.env["HF_HUB_OFFLINE"] == "1"
    # the seed's speculative config word for word, but the drafter is its local snapshot
    assert spec_of(svc.argv) == {**SEED_SPEC, "model": DRAFT_DIR}
    unit = render.unit_text(planned.deployment, svc, planned.plan)
    assert DRAFT_DIR in unit and MAIN_DIR in unit
    assert DRAFT_REPO not in " ".join(svc.argv).replace(DRAFT_DIR, "")  # no hub id left anywhere


def test_download_plan_lists_both_repos_at_their_revisions(tmp_path):
    ck = load(tmp_path).checkpoint()
    rows = [(c["kind"], c["repo"], c["revision"], c["local_dir"], c["hosts"]) for c in ck["checkpoints"]]
    assert rows == [("model", "zai-org/GLM-5.3", REV, MAIN_DIR, ["gpu-a"]),
                    ("drafter", DRAFT_REPO, DRAFT_REV, DRAFT_DIR, ["gpu-a"])]
    assert ck["repo"] == "zai-org/GLM-5.3" and ck["local_dir"] == MAIN_DIR  # the model's, as before
    assert all(c["offline"] for c in ck["checkpoints"])


def test_disagg_pools_share_one_drafter_on_both_hosts(tmp_path):
    hosts = {h: {"ansible_host": f"10.0.0.{11 + i}", "glmops_rdma_devices": ["mlx5_0"]} for i, h in enumerate(["gpu-a", "gpu-b"])}
    planned = load(tmp_path, hosts=hosts, glmops_topology="disagg", glmops_topologies={"disagg": {"pools": {
        "prefill": {"tp": 8, "hosts": ["gpu-a"]}, "decode": {"tp": 8, "hosts": ["gpu-b"]}}}})
    workers = [s for s in planned.plan.services if s.role in ("prefill", "decode")]
    assert {spec_of(s.argv)["model"] for s in workers} == {DRAFT_DIR}
    ck = planned.checkpoint()["checkpoints"]
    assert [(c["repo"], c["hosts"], c["mode"]) for c in ck] == [
        ("zai-org/GLM-5.3", ["gpu-a", "gpu-b"], "fanout"), (DRAFT_REPO, ["gpu-a", "gpu-b"], "fanout")]


def test_inventory_values_win_over_the_catalogs(tmp_path):
    planned = load(tmp_path, glmops_speculative={"method": "dspark", "model": "acme/own-dspark",
                                                 "revision": DRAFT_REV, "num_speculative_tokens": 9})
    [svc] = [s for s in planned.plan.services if s.role == "agg"]
    assert spec_of(svc.argv) == {"method": "dspark", "model": f"/models/acme/own-dspark/{DRAFT_REV}",
                                 "num_speculative_tokens": 9}
    assert [c["repo"] for c in planned.checkpoint()["checkpoints"]] == ["zai-org/GLM-5.3", "acme/own-dspark"]


def test_a_directory_on_the_hosts_is_served_as_is_and_not_downloaded(tmp_path):
    planned = load(tmp_path, glmops_speculative={"method": "dspark", "model": "/opt/drafters/dspark"})
    [svc] = [s for s in planned.plan.services if s.role == "agg"]
    assert spec_of(svc.argv)["model"] == "/opt/drafters/dspark"
    assert [c["kind"] for c in planned.checkpoint()["checkpoints"]] == ["model"]


def test_without_a_drafter_the_plan_has_one_checkpoint(tmp_path):
    planned = load(tmp_path, glmops_speculative={"method": "mtp", "num_speculative_tokens": 5})
    assert [c["repo"] for c in planned.checkpoint()["checkpoints"]] == ["zai-org/GLM-5.3"]


@pytest.mark.parametrize("revision,found", [(None, "is unset"), ("main", "'main' is not a commit")])
def test_unpinned_drafter_is_refused_offline_naming_the_key(tmp_path, revision, found):
    spec = {"method": "dspark", **({"revision": revision} if revision else {})}
    codes = refused(tmp_path, glmops_speculative=spec)
    assert list(codes) == ["F12_REVISION"]
    [p] = codes["F12_REVISION"]
    assert p.path.endswith("group_vars/all.yml:glmops_speculative.revision")
    assert f"glmops_speculative.revision of drafter {DRAFT_REPO} {found}" in p.message and "40-hex" in p.message


def test_pool_level_drafter_names_the_pool_key(tmp_path):
    codes = refused(tmp_path, glmops_speculative=None, glmops_topologies={"agg": {"pools": {
        "agg": {"tp": 8, "speculative": {"method": "dspark"}}}}})
    [p] = codes["F12_REVISION"]
    assert p.path.endswith(":glmops_topologies.agg.pools.agg.speculative.revision"), p.path


def test_unpinned_drafter_is_accepted_when_serving_online(tmp_path):
    planned = load(tmp_path, glmops_checkpoint={"revision": REV, "offline": False},
                   glmops_speculative={"method": "dspark"})
    drafter = planned.checkpoint()["checkpoints"][1]
    assert drafter["revision"] == "" and drafter["local_dir"] == f"/models/{DRAFT_REPO}" and not drafter["offline"]


def test_model_on_a_method_without_a_drafter_is_refused(tmp_path):
    codes = refused(tmp_path, glmops_speculative={"method": "mtp", "num_speculative_tokens": 5, "model": "a/b"})
    [p] = codes["SPECULATIVE"]
    assert "'mtp' loads no draft checkpoint" in p.message and "dspark" in p.message


def test_model_that_is_no_repo_id_is_refused(tmp_path):
    codes = refused(tmp_path, glmops_speculative={"method": "dspark", "model": "dspark", "revision": DRAFT_REV})
    assert list(codes) == ["SPECULATIVE"] and codes["SPECULATIVE"][0].path.endswith("glmops_speculative.model")


def test_dspark_on_an_engine_the_seed_does_not_serve_it_with(tmp_path):
    codes = refused(tmp_path, glmops_engine="sglang", glmops_runtime="venv",
                    glmops_topologies={"agg": {"pools": {"agg": {"tp": 8}}}})
    assert [p.message for p in codes["SPECULATIVE"]] == [
        "speculative method 'dspark' is not accepted on sglang; accepted: eagle, mtp, none"]


def test_hub_id_through_raw_engine_args_is_refused_offline(tmp_path):
    codes = refused(tmp_path, glmops_speculative=None, glmops_engine_args={"speculative-config": SEED_SPEC})
    [p] = codes["F12_HUB_ID"]
    assert p.path.endswith("group_vars/all.yml:glmops_engine_args.speculative-config")
    assert repr(DRAFT_REPO) in p.message and "HF_HUB_OFFLINE=1" in p.message and "glmops_speculative" in p.message
    # a directory through engine_args is the user's own copy
    ok = load(tmp_path, name="dir", glmops_speculative=None,
              glmops_engine_args={"speculative-config": {**SEED_SPEC, "model": "/opt/drafters/dspark"}})
    assert [c["kind"] for c in ok.checkpoint()["checkpoints"]] == ["model"]
