"""Golden (e): seed 004 (vLLM, GLM-5.3) serve commands for B300, H200 FP8, the MI series
(AITER env and backends) and the B200 1M context; plus its strategies placed on hosts.

Expectations come from /work/shared/seeds/004_1623a49a49212f9f.txt (quoted). Deliberate
differences, asserted explicitly:
  * model = local snapshot dir (seed: ``zai-org/GLM-5.3``) with offline env; when the seed
    sets no ``--served-model-name`` we pass the hub id so clients keep the same name (F12);
  * ``--host <inventory address> --port 8000`` (seed: defaults);
  * ``VLLM_USE_RUST_FRONTEND=1`` everywhere for GLM-5.3: the catalog pins it from the rendered
    Serve section ("frontend `rust`", ``export VLLM_USE_RUST_FRONTEND=1``), which "take[s]
    precedence over any example in the guide".
"""
from __future__ import annotations

import pytest
from plan_helpers import REV, dep, flags, seed_cmd

from glmops import plan
from glmops.model import PoolSpec

SNAPSHOT = f"/models/zai-org/GLM-5.3/{REV}"
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
RUST = {"VLLM_USE_RUST_FRONTEND": "1"}
ALL8 = "0,1,2,3,4,5,6,7"

# "## Serve" (b300, single_node_tp, default FP8)
SEED_B300 = """vllm serve zai-org/GLM-5.3 \\
  --kv-cache-dtype fp8_e4m3 \\
  --tensor-parallel-size 8 \\
  --tool-call-parser glm47 \\
  --enable-auto-tool-choice \\
  --reasoning-parser glm47"""

# "#### FP8 on 8xH200 (standard)"
SEED_H200 = """vllm serve zai-org/GLM-5.3 \\
  --kv-cache-dtype fp8 \\
  --tensor-parallel-size 8 \\
  --speculative-config.method mtp \\
  --speculative-config.num_speculative_tokens 5 \\
  --tool-call-parser glm47 \\
  --reasoning-parser glm47 \\
  --enable-auto-tool-choice \\
  --served-model-name glm-5.3"""

# "#### FP8 on AMD MI300X/MI325X/MI350X/MI355X"
SEED_MI = """VLLM_ROCM_USE_AITER=1 \\
VLLM_ROCM_USE_AITER_FUSION_SHARED_EXPERTS=1 \\
vllm serve zai-org/GLM-5.3 \\
  --kv-cache-dtype fp8_e4m3 \\
  --tensor-parallel-size 8 \\
  --speculative-config.method mtp \\
  --speculative-config.num_speculative_tokens 5 \\
  --tool-call-parser glm47 \\
  --enable-auto-tool-choice \\
  --reasoning-parser glm47 \\
  --gpu-memory-utilization 0.80 \\
  --max-model-len 524288 \\
  --max-num-seqs 32 \\
  --linear-backend aiter \\
  --moe-backend aiter"""

# "#### FP8 on 8xB200 (full 1M context)"
SEED_B200_1M = """vllm serve zai-org/GLM-5.3 \\
  --kv-cache-dtype fp8_e4m3 \\
  --tensor-parallel-size 8 \\
  --speculative-config.method mtp \\
  --speculative-config.num_speculative_tokens 5 \\
  --max-num-seqs 32 \\
  --tool-call-parser glm47 \\
  --reasoning-parser glm47 \\
  --enable-auto-tool-choice \\
  --served-model-name glm-5.3"""


def glm53(hardware: str, served: str | None = None, **kw):
    return dep(engine="vllm", hardware=hardware, model="glm-5.3", repo="zai-org/GLM-5.3", size_gib=692,
               served=served, pools=[PoolSpec(role="agg", tp=8)], **kw)


def check(hardware: str, seed: str, served: str | None, extra_env: dict[str, str]):
    svc = plan.build(glm53(hardware, served)).services[0]
    env, words = seed_cmd(seed)
    exp = flags(words, 3)
    exp["_pos"][2] = SNAPSHOT
    exp["host"], exp["port"] = "10.0.0.11", 8000.0
    if "served-model-name" not in exp:
        exp["served-model-name"] = "zai-org/GLM-5.3"  # deliberate (F12): keep the hub id as the name
    got = flags(svc.argv, 3)
    got["_pos"][0] = "vllm"
    assert got == exp
    assert svc.env == {**env, **extra_env, **RUST, **OFFLINE}
    return svc


def test_e_b300_serve_section():
    # the seed itself exports VLLM_USE_RUST_FRONTEND=1 here
    check("b300", SEED_B300, None, {"CUDA_VISIBLE_DEVICES": ALL8})


def test_e_h200_fp8_standard():
    # FP8 KV on Hopper is fine for GLM-5.3 (F03 is a GLM-5.3-Flash rule)
    check("h200", SEED_H200, "glm-5.3", {"CUDA_VISIBLE_DEVICES": ALL8})


@pytest.mark.parametrize("hardware", ["mi300x", "mi325x", "mi350x", "mi355x"])
def test_e_mi_series_aiter_env_and_backends(hardware):
    # AMD devices are selected with HIP_VISIBLE_DEVICES (no CUDA_VISIBLE_DEVICES)
    svc = check(hardware, SEED_MI, None, {"HIP_VISIBLE_DEVICES": ALL8})
    assert "CUDA_VISIBLE_DEVICES" not in svc.env


def test_e_b200_full_1m_context():
    # "the lever is --max-num-seqs ... Start at 32"; no --max-model-len: the native 1M window
    check("b200", SEED_B200_1M, "glm-5.3", {"CUDA_VISIBLE_DEVICES": ALL8})


def test_e_nvfp4_adds_expert_parallel():
    # "#### NVFP4 on Blackwell (B200/B300)": --enable-expert-parallel, fp8_e4m3, glm-5.3-nvfp4
    d = dep(engine="vllm", hardware="b300", model="glm-5.3", variant="nvfp4", repo="Inferact/GLM-5.3-NVFP4",
            size_gib=433, served="glm-5.3-nvfp4", pools=[PoolSpec(role="agg", tp=8)])
    got = flags(plan.build(d).services[0].argv, 3)
    assert got["enable-expert-parallel"] is True
    assert got["kv-cache-dtype"] == "fp8_e4m3" and got["served-model-name"] == "glm-5.3-nvfp4"


# ---------------------------------------------------------------- strategies on hosts

def strategy_plan(strategy: str, nodes: int, hardware: str = "b200"):
    pools = plan.strategy_pools(strategy, nodes, 8)
    topo = "disagg" if strategy == "pd_cluster" else "agg"
    d = dep(engine="vllm", hardware=hardware, model="glm-5.3", repo="zai-org/GLM-5.3", size_gib=692,
            served="glm-5.3", topology=topo, n_hosts=nodes, pools=pools)
    return plan.build(d)


def test_strategy_single_node_tp_and_tep():
    [svc] = strategy_plan("single_node_tp", 1).services
    assert flags(svc.argv, 3)["tensor-parallel-size"] == 8.0 and "enable-expert-parallel" not in flags(svc.argv, 3)
    [svc] = strategy_plan("single_node_tep", 1).services
    assert flags(svc.argv, 3)["enable-expert-parallel"] is True


@pytest.mark.parametrize("strategy,extra", [
    ("multi_node_tp", {"tensor-parallel-size": 16.0}),
    ("multi_node_tep", {"tensor-parallel-size": 16.0, "enable-expert-parallel": True}),
    ("multi_node_tp_pp", {"tensor-parallel-size": 8.0, "pipeline-parallel-size": 2.0}),
])
def test_strategy_multi_node_tp_spans_whole_nodes(strategy, extra):
    # reference/serving-clis.md: node 0 `--nnodes 2 --node-rank 0 --master-addr IP0`; others the
    # same + `--node-rank k --headless`
    p = strategy_plan(strategy, 2)
    head, follower = sorted(p.services, key=lambda s: s.node_rank)
    assert (head.host, follower.host) == ("gpu-1", "gpu-2")
    h, f = flags(head.argv, 3), flags(follower.argv, 3)
    for key, value in extra.items():
        assert h[key] == f[key] == value
    assert (h["nnodes"], h["node-rank"], h["master-addr"], h["master-port"]) == (2.0, 0.0, "10.0.0.11", 29501.0)
    assert (f["nnodes"], f["node-rank"], f["master-addr"], f["master-port"]) == (2.0, 1.0, "10.0.0.11", 29501.0)
    assert f["headless"] is True and "headless" not in h
    assert "host" not in f and "port" not in f  # headless nodes serve no HTTP
    assert head.env["CUDA_VISIBLE_DEVICES"] == follower.env["CUDA_VISIBLE_DEVICES"] == ALL8
    assert follower.env["VLLM_HOST_IP"] == "10.0.0.12"
    assert follower.start_order == 5 < head.start_order == 10
    assert head.ports["dist_init"] == [29501]
    assert p.endpoint_url == "http://10.0.0.11:8000"


def test_strategy_multi_node_dep():
    # DP/wide-EP: head `-dp N -dpl n -dpa HEAD -dpp PORT -ep`; others + `-dpr k --headless`
    p = strategy_plan("multi_node_dep", 2)
    head, follower = sorted(p.services, key=lambda s: s.node_rank)
    h, f = flags(head.argv, 3), flags(follower.argv, 3)
    for got in (h, f):
        assert got["data-parallel-size"] == 16.0 and got["data-parallel-size-local"] == 8.0
        assert got["data-parallel-address"] == "10.0.0.11" and got["data-parallel-rpc-port"] == 29550.0
        assert got["enable-expert-parallel"] is True and got["tensor-parallel-size"] == 1.0
    assert f["data-parallel-start-rank"] == 8.0 and f["headless"] is True
    assert "data-parallel-start-rank" not in h


def test_strategy_pd_cluster_4_nodes():
    p = strategy_plan("pd_cluster", 4)
    roles = sorted((s.role, s.host) for s in p.services if s.role != "router")
    assert roles == [("decode", "gpu-3"), ("decode", "gpu-4"), ("prefill", "gpu-1"), ("prefill", "gpu-2")]
    router = next(s for s in p.services if s.role == "router")
    got = flags(router.argv, 1)
    assert got["prefill"] == ["http://10.0.0.11:8001", "http://10.0.0.12:8001"]
    assert got["decode"] == ["http://10.0.0.13:8001", "http://10.0.0.14:8001"]


def test_strategy_unknown_or_too_few_nodes():
    with pytest.raises(ValueError, match="accepted"):
        plan.strategy_pools("multi_node_xx", 2, 8)
    with pytest.raises(ValueError, match="nodes >= 2"):
        plan.strategy_pools("pd_cluster", 1, 8)
