"""Acceptance: seed 004's whole matrix (hardware x variant x strategy) from minimal inventories.

The three lists are parsed from /work/shared/seeds/004_*.txt at test time (its "Other
configurations" lines 16-18), never retyped. Each cell is written the way a user writes it: a
``hosts.yml`` (one host, or ``nodes=2`` hosts for a multi-node strategy, seed 004 line 18) and a
``group_vars/all.yml`` with model, variant, engine, hardware and strategy only, and goes through the
one door into planning (``glmops.planning.load`` -> ``rules.validate``). Every cell plans or is refused
with the codes :func:`expected_codes` names, each rule citing its seed line or upstream source. The
seed's named commands are compared argv word for word and env, parsed from the seed's own text.

Deliberate differences to the seed's commands (as tests/unit/test_golden_004_vllm.py): the positional
model is the local snapshot directory, ``--host <address> --port 8000`` are explicit, the hub id is the
served name when the seed sets none (F12), HF_HUB_OFFLINE/TRANSFORMERS_OFFLINE, the device list
(CUDA_VISIBLE_DEVICES / HIP_VISIBLE_DEVICES), and VLLM_USE_RUST_FRONTEND=1 on every GLM-5.3 worker (the
rendered Serve section exports it and "take[s] precedence over any example in the guide", line 10).
"""
from __future__ import annotations

import functools

import pytest
import yaml
from plan_helpers import flags, seed_cmd
from seed_text import command_after, option_list, seed

from glmops import catalog, planning
from glmops.model import ValidationError

TEXT = seed("004")
HARDWARE = option_list(TEXT, "hardware")   # line 16
VARIANTS = option_list(TEXT, "variant")    # line 17
STRATEGIES = option_list(TEXT, "strategy")  # line 18
CAT = catalog.load()
MULTI_NODE = [s for s in STRATEGIES if s.startswith("multi_node") or s == "pd_cluster"]  # line 18: "also need nodes=<n>"
NODES = 2
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
RUST = {"VLLM_USE_RUST_FRONTEND": "1"}
CELLS = [(h, v, s) for h in HARDWARE for v in VARIANTS for s in STRATEGIES]


def write_inventory(root, hardware: str, variant: str, strategy: str, nics: bool = True):
    """hosts.yml + group_vars/all.yml as a user writes them for one cell. Multi-node hosts list their RDMA
    NICs (seed 001 line 37: "Eight RDMA resource claims on each GPU node for disaggregated serving"; F06)."""
    n = NODES if strategy in MULTI_NODE else 1
    (root / "group_vars").mkdir(parents=True)
    hosts = {f"node-{i}": {"ansible_host": f"10.0.0.{11 + i}", **({"glmops_rdma_devices": ["mlx5_0"]} if n > 1 and nics else {})}
             for i in range(n)}
    (root / "hosts.yml").write_text(yaml.safe_dump({"all": {"hosts": hosts}}))
    (root / "group_vars" / "all.yml").write_text(yaml.safe_dump({
        "glmops_model": "glm-5.3",
        # the seed's `default` is the native FP8 checkpoint (line 5 "variant `default` (FP8)", line 68)
        "glmops_variant": "fp8" if variant == "default" else variant,
        "glmops_engine": "vllm",
        "glmops_hardware": hardware,
        "glmops_strategy": strategy,
    }))
    return root


@functools.lru_cache(maxsize=None)
def outcome(tmp_root: str, hardware: str, variant: str, strategy: str):
    """(Planned or None, sorted problem codes) of one cell."""
    from pathlib import Path

    root = write_inventory(Path(tmp_root) / f"c{CELLS.index((hardware, variant, strategy))}", hardware, variant, strategy)
    try:
        return planning.load(str(root)), []
    except ValidationError as err:
        return None, sorted({p.code for p in err.problems})


@pytest.fixture(scope="module")
def tmp_root(tmp_path_factory):
    return str(tmp_path_factory.mktemp("seed004"))


def _fits(weight_gib: float, hardware: str, gpus: int) -> bool:
    """Weights per GPU within (1 - headroom) of its memory (catalog hardware.policy, issue 2)."""
    hw = CAT.hardware[hardware]
    return weight_gib / gpus <= hw["gpu_memory_gib"] * (1 - CAT.policy["memory_headroom_fraction"])


def expected_codes(hardware: str, variant: str, strategy: str) -> list[str]:
    """The refusal codes of a cell, one rule per reason, each with its source."""
    hw = CAT.hardware[hardware]
    var = "fp8" if variant == "default" else variant
    g = hw["gpus_per_node"]
    replica_nodes = NODES if strategy in MULTI_NODE and strategy != "pd_cluster" else 1  # pd_cluster: one node per replica
    codes = set()
    if hw["vendor"] == "huawei":
        # line 16 lists ascend_950pr_8x, but no command, image, device selection or env for it (vLLM needs the
        # vllm-ascend plugin, github.com/vllm-project/vllm-ascend): catalog engines.vllm.vendors
        codes.add("ENGINE_HARDWARE")
    if var == "w4a8":
        codes.add("CHECKPOINT_REPO")  # line 17 lists w4a8; the seed names no checkpoint for it
    if var == "nvfp4" and hw["arch_family"] != "blackwell":
        codes.add("NVFP4_BLACKWELL")  # line 156/160: "NVFP4 on Blackwell (B200/B300)", "Blackwell-only"
    if var == "bf16" and replica_nodes == 1:
        codes.add("BF16_MULTI_NODE")  # line 154: "BF16 weights ... need multi-node deployment"
    weights = CAT.models["glm-5.3"]["variants"][var]["weight_gib"]
    if not _fits(weights, hardware, g * replica_nodes):
        codes.add("MEMORY_FIT")  # line 70/76: FP8 fits one 8xH200 (141 GB each); estimated sizes in models.yaml
    mtp = hardware in ("h200", "h20") or (hardware == "b200" and var == "fp8") or hw["vendor"] == "amd"
    if strategy == "multi_node_tp_pp" and mtp and hw["vendor"] != "huawei":
        # lines 95-96, 111-112, 143-144: these recipes serve MTP 5; MTP with PP cannot start for GLM-5.x
        # (https://github.com/vllm-project/recipes/issues/875, catalog engines.vllm.compat)
        codes.add("ENGINE_COMBINATION")
    return sorted(codes)


@pytest.mark.parametrize("hardware,variant,strategy", CELLS, ids=["-".join(c) for c in CELLS])
def test_every_cell_plans_or_is_refused_with_its_codes(tmp_root, hardware, variant, strategy):
    planned, codes = outcome(tmp_root, hardware, variant, strategy)
    assert codes == expected_codes(hardware, variant, strategy)
    if planned is None:
        return
    assert planned.deployment.strategy == strategy and planned.deployment.layout is None
    g = CAT.hardware[hardware]["gpus_per_node"]
    workers = [s for s in planned.plan.services if s.role != "router"]
    head = flags(workers[0].argv, 3)
    ep = head.get("enable-expert-parallel") is True
    # reference/serving-clis.md "Multi-node (0.33.0)": TP/PP `--nnodes 2 --node-rank k --headless`; DP/wide-EP
    # `-dp N -dpl n ... -ep`; seed 004: single_node_tp = "Tensor Parallel" (line 5)
    if strategy == "single_node_tp":
        assert len(workers) == 1 and head["tensor-parallel-size"] == g
        assert ep == (variant == "nvfp4")  # line 165: the NVFP4 recipe adds --enable-expert-parallel
    elif strategy == "single_node_tep":
        assert len(workers) == 1 and head["tensor-parallel-size"] == g and ep
    elif strategy in ("multi_node_tp", "multi_node_tep"):
        assert len(workers) == NODES and head["tensor-parallel-size"] == g * NODES and head["nnodes"] == NODES
        assert ep == (strategy == "multi_node_tep" or variant == "nvfp4")
    elif strategy == "multi_node_tp_pp":
        assert len(workers) == NODES and head["tensor-parallel-size"] == g and head["pipeline-parallel-size"] == NODES
    elif strategy == "multi_node_dep":
        assert len(workers) == NODES and head["data-parallel-size"] == g * NODES
        assert head["data-parallel-size-local"] == g and head["tensor-parallel-size"] == 1 and ep
    else:  # pd_cluster: half the nodes prefill, half decode, one TP=node replica each, vllm-router in front
        assert [(s.role, s.host) for s in workers] == [("prefill", "node-0"), ("decode", "node-1")]
        assert all(flags(s.argv, 3)["tensor-parallel-size"] == g for s in workers)
        [router] = [s for s in planned.plan.services if s.role == "router"]
        assert flags(router.argv, 1)["vllm-pd-disaggregation"] is True


def test_matrix_counts(tmp_root):
    """The matrix as a whole (every cell is asserted above; this pins the totals)."""
    counts: dict[str, int] = {}
    for cell in CELLS:
        planned, codes = outcome(tmp_root, *cell)
        key = "planned" if planned is not None else "+".join(codes)
        counts[key] = counts.get(key, 0) + 1
    assert len(CELLS) == len(HARDWARE) * len(VARIANTS) * len(STRATEGIES) == 12 * 4 * 7
    assert sum(counts.values()) == len(CELLS) and counts["planned"] > 0


# ------------------------------------------------------------------ the seed's named commands

def _seed_block(marker: str) -> tuple[dict[str, str], dict]:
    cmd, _line = command_after(TEXT, marker, "")
    env, words = seed_cmd(cmd)
    if cmd.startswith("export "):  # the Serve section: `export X=1` on its own line, then the command
        name, value = cmd.split(None, 1)[1].split("=", 1)
        cmd, _line = command_after(TEXT, marker, "vllm")
        env, words = seed_cmd(cmd)
        env[name] = value
    return env, flags(words, 3)


# The served name: the rendered Serve section (lines 37-42, which "take[s] precedence over any example in the
# guide", line 10) sets no --served-model-name, so a minimal inventory serves the hub id `zai-org/GLM-5.3` on
# every hardware (one name for clients of a deployment; the FP8 guide examples at lines 100 and 149 name
# `glm-5.3`, which glmops_served_model_name sets). The NVFP4 variant's own name `glm-5.3-nvfp4` (line 170) is
# the catalog's.
HUB = "zai-org/GLM-5.3"
NAMED = [
    # (seed section marker, cell, served name the plan uses instead of the seed's, device env)
    ("## Serve", ("b300", "default", "single_node_tp"), HUB, "CUDA_VISIBLE_DEVICES"),  # lines 35-43
    ("#### FP8 on 8xH200 (standard)", ("h200", "default", "single_node_tp"), HUB, "CUDA_VISIBLE_DEVICES"),  # 91-101
    ("#### FP8 on 8xB200 (full 1M context)", ("b200", "default", "single_node_tp"), HUB, "CUDA_VISIBLE_DEVICES"),  # 139-150
    *[("#### FP8 on AMD MI300X/MI325X/MI350X/MI355X", (h, "default", "single_node_tp"), HUB,
       "HIP_VISIBLE_DEVICES") for h in HARDWARE if CAT.hardware[h]["vendor"] == "amd"],  # lines 105-121
    # lines 162-171: "NVFP4 on Blackwell (B200/B300)": --tensor-parallel-size 8 --enable-expert-parallel
    *[("#### NVFP4 on Blackwell (B200/B300)", (h, "nvfp4", "single_node_tep"), None, "CUDA_VISIBLE_DEVICES")
      for h in ("b200", "b300")],
]


@pytest.mark.parametrize("marker,cell,served,devices", NAMED, ids=[f"{c[0]}-{c[1]}-{c[2]}" for _m, c, _s, _d in NAMED])
def test_named_commands_argv_and_env(tmp_root, marker, cell, served, devices):
    planned, codes = outcome(tmp_root, *cell)
    assert codes == []
    [svc] = planned.plan.services
    env, exp = _seed_block(marker)
    got = flags(svc.argv, 3)
    repo = planned.deployment.checkpoint.repo
    assert got["_pos"][1:] == ["serve", f"/models/{repo}"] and exp["_pos"][1:] == ["serve", repo]
    exp["_pos"] = got["_pos"]
    exp.update({"host": "10.0.0.11", "port": 8000.0})
    if served:
        exp["served-model-name"] = served
    assert got == exp
    assert svc.env == {**env, **RUST, **OFFLINE, devices: "0,1,2,3,4,5,6,7"}


def test_pd_cluster_without_nics_is_refused_f06(tmp_path):
    root = write_inventory(tmp_path / "pd", "b300", "default", "pd_cluster", nics=False)
    with pytest.raises(ValidationError) as err:
        planning.load(str(root))
    assert [p.code for p in err.value.problems] == ["F06_RDMA_DEVICES"]


@pytest.mark.parametrize("strategy,hosts,nodes,code", [
    ("multi_node_tp", 1, None, "STRATEGY"),     # line 18: multi-node strategies need nodes=<n> >= 2
    ("single_node_tp", 2, 2, "STRATEGY"),       # a single-node strategy on 2 nodes
    ("multi_node_tp", 2, 3, "STRATEGY"),        # more nodes than hosts
    ("multi_node_xx", 2, None, "CHOICE"),       # not one of line 18's names
])
def test_strategy_node_problems(tmp_path, strategy, hosts, nodes, code):
    root = tmp_path / "inv"
    (root / "group_vars").mkdir(parents=True)
    (root / "hosts.yml").write_text(yaml.safe_dump({"all": {"hosts": {
        f"node-{i}": {"ansible_host": f"10.0.0.{11 + i}"} for i in range(hosts)}}}))
    gv = {"glmops_model": "glm-5.3", "glmops_engine": "vllm", "glmops_hardware": "b300", "glmops_strategy": strategy}
    if nodes:
        gv["glmops_nodes"] = nodes
    (root / "group_vars" / "all.yml").write_text(yaml.safe_dump(gv))
    with pytest.raises(ValidationError) as err:
        planning.load(str(root))
    assert [p.code for p in err.value.problems] == [code]
    assert "accepted" in err.value.problems[0].message


def test_explicit_pools_win_over_the_strategy(tmp_path):
    root = write_inventory(tmp_path / "own", "b300", "default", "single_node_tp")
    gv = yaml.safe_load((root / "group_vars" / "all.yml").read_text())
    gv["glmops_topologies"] = {"agg": {"pools": {"agg": {"tp": 4, "replicas": 2}}}}
    (root / "group_vars" / "all.yml").write_text(yaml.safe_dump(gv))
    plan = planning.load(str(root)).plan
    workers = [s for s in plan.services if s.role == "agg"]
    assert [flags(s.argv, 3)["tensor-parallel-size"] for s in workers] == [4.0, 4.0]


def test_pd_cluster_sets_the_topology_and_a_conflicting_one_is_refused(tmp_path):
    root = write_inventory(tmp_path / "pd", "b300", "default", "pd_cluster")
    assert planning.load(str(root)).plan.topology == "disagg"
    with pytest.raises(ValidationError) as err:
        planning.load(str(root), topology="agg")
    assert [p.code for p in err.value.problems] == ["STRATEGY"]
