"""Golden: seed 002 (vLLM, GLM-5.3-Flash): the TP4 MTP5 command (c) and the
prefill/decode pools with their env plus the vllm-router command (d).

Expectations come from /work/shared/seeds/002_5e664c6e94ff2f6a.txt (quoted). Deliberate
differences, asserted explicitly:
  * the model is the local snapshot dir (seed: hub id ``zai-org/GLM-5.3-Flash``), with
    HF_HUB_OFFLINE=1 / TRANSFORMERS_OFFLINE=1 and the seed's served model name (F12);
  * ``--host <inventory address>`` and an explicit ``--port`` (seed: all interfaces, default 8000);
  * the router's worker URLs use the host address, not 127.0.0.1, and it binds that address
    instead of 0.0.0.0, its metrics too (``--prometheus-host``, F05); workers also get VLLM_NIXL_SIDE_CHANNEL_HOST=<own address> (F05).
"""
from __future__ import annotations

from plan_helpers import REV, dep, flags, seed_cmd

from glmops import plan, render
from glmops.model import PoolSpec, RouterSpec

SNAPSHOT = f"/models/zai-org/GLM-5.3-Flash/{REV}"
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
MTP5 = {"method": "mtp", "num_speculative_tokens": 5}

# "FP8 with TP4 and MTP on one GB200 tray"
SEED_TP4_MTP5 = """vllm serve zai-org/GLM-5.3-Flash \\
  --tensor-parallel-size 4 \\
  --kv-cache-dtype fp8 \\
  --speculative-config '{"method":"mtp","num_speculative_tokens":5}' \\
  --tool-call-parser glm47 \\
  --reasoning-parser glm45 \\
  --enable-auto-tool-choice \\
  --served-model-name zai-org/GLM-5.3-Flash"""

SEED_PREFILL = """CUDA_VISIBLE_DEVICES=0,1,2,3 \\
VLLM_SSM_CONV_STATE_LAYOUT=DS \\
VLLM_KV_CACHE_LAYOUT=HND \\
UCX_NET_DEVICES=all \\
VLLM_NIXL_SIDE_CHANNEL_PORT=5557 \\
vllm serve zai-org/GLM-5.3-Flash \\
  --port 8001 \\
  --tensor-parallel-size 4 \\
  --kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_producer"}' \\
  --speculative-config '{"method":"mtp","num_speculative_tokens":5}' \\
  --compilation-config '{"cudagraph_mm_encoder": true}' \\
  --enforce-eager \\
  --no-disable-hybrid-kv-cache-manager \\
  --served-model-name zai-org/GLM-5.3-Flash"""

SEED_DECODE = """CUDA_VISIBLE_DEVICES=4,5,6,7 \\
VLLM_SSM_CONV_STATE_LAYOUT=DS \\
VLLM_KV_CACHE_LAYOUT=HND \\
UCX_NET_DEVICES=all \\
VLLM_NIXL_SIDE_CHANNEL_PORT=5558 \\
vllm serve zai-org/GLM-5.3-Flash \\
  --port 8002 \\
  --tensor-parallel-size 4 \\
  --kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_consumer"}' \\
  --speculative-config '{"method":"mtp","num_speculative_tokens":5}' \\
  --max-num-seqs 512 \\
  --no-disable-hybrid-kv-cache-manager \\
  --served-model-name zai-org/GLM-5.3-Flash"""

SEED_ROUTER = """vllm-router --policy round_robin --vllm-pd-disaggregation \\
  --prefill http://127.0.0.1:8001 \\
  --decode http://127.0.0.1:8002 \\
  --host 0.0.0.0 --port 8000 \\
  --intra-node-data-parallel-size 1"""


def ours(svc) -> dict:
    got = flags(svc.argv, 3)
    assert got["_pos"][0] == "/opt/glmops/venvs/vllm-0.29.0/bin/vllm"
    got["_pos"][0] = "vllm"
    return got


def seeds(text: str, **deliberate) -> tuple[dict, dict]:
    env, words = seed_cmd(text)
    exp = flags(words, 3)
    exp["_pos"][2] = SNAPSHOT  # deliberate: local snapshot
    exp.update({k.replace("_", "-"): v for k, v in deliberate.items()})
    return env, exp


def test_c_tp4_mtp5_command_flag_for_flag():
    # one GB200 tray = 4 GPUs; the seed's --kv-cache-dtype fp8 and MTP5 come from the inventory
    d = dep(engine="vllm", hardware="gb200", gpus=4, pools=[PoolSpec(role="agg", tp=4)],
            kv_cache_dtype="fp8", speculative=MTP5)
    p = plan.build(d)
    [svc] = p.services
    _, exp = seeds(SEED_TP4_MTP5, host="10.0.0.11", port=8000.0)
    assert ours(svc) == exp
    assert svc.env == {"CUDA_VISIBLE_DEVICES": "0,1,2,3", **OFFLINE}
    assert p.endpoint_url == "http://10.0.0.11:8000"


def disagg_dep(**kw):
    # "Split one 8-GPU node into a prefill pool (GPUs 0-3) and a decode pool (GPUs 4-7)";
    # ports 8001/8002 as the seed's --port; "num_speculative_tokens must be the same in prefill
    # and decode instance" -> one deployment-level speculative setting
    return dep(engine="vllm", hardware="b200", topology="disagg", speculative=MTP5, pools=[
        PoolSpec(role="prefill", tp=4, gpus=[0, 1, 2, 3], port=8001),
        PoolSpec(role="decode", tp=4, gpus=[4, 5, 6, 7], port=8002),
    ], router=RouterSpec(port=8000, policy="round_robin"), **kw)


def test_d_prefill_and_decode_pools_with_env():
    d = disagg_dep()
    p = plan.build(d)
    by_role = {s.role: s for s in p.services}
    for role, text in (("prefill", SEED_PREFILL), ("decode", SEED_DECODE)):
        svc = by_role[role]
        env, exp = seeds(text, host="10.0.0.11")
        assert ours(svc) == exp, role
        # the seed's env lines, plus (deliberate) the side-channel host (F05) and offline flags (F12)
        assert svc.env == {**env, "VLLM_NIXL_SIDE_CHANNEL_HOST": "10.0.0.11", **OFFLINE}, role
    # the KV layout pins are identical on both pools (seed: "must be pinned identically")
    pins = ("VLLM_SSM_CONV_STATE_LAYOUT", "VLLM_KV_CACHE_LAYOUT", "UCX_NET_DEVICES")
    assert {k: by_role["prefill"].env[k] for k in pins} == {k: by_role["decode"].env[k] for k in pins}
    # one side-channel port per DP rank (vLLM >= 0.29: base + DP index) -> 5557 and 5558 do not collide
    assert by_role["prefill"].ports["nixl_side_channel"] == [5557]
    assert by_role["decode"].ports["nixl_side_channel"] == [5558]


def test_d_vllm_router_command():
    d = disagg_dep()
    p = plan.build(d)
    router = next(s for s in p.services if s.role == "router")
    got = flags(router.argv, 1)
    assert got["_pos"] == ["/opt/glmops/venvs/vllm-router-0.1.17/bin/vllm-router"]
    _, words = seed_cmd(SEED_ROUTER)
    exp = flags(words, 1)
    exp["_pos"] = got["_pos"]
    # deliberate: the workers' and the router's own inventory address (F05)
    exp.update({"prefill": "http://10.0.0.11:8001", "decode": "http://10.0.0.11:8002", "host": "10.0.0.11"})
    # deliberate: its Prometheus listener on the inventory address too, at the default port
    # (reference/option-lists/vllm-router-0.1.17.txt: --prometheus-host '127.0.0.1', --prometheus-port 29000)
    exp.update({"prometheus-host": "10.0.0.11", "prometheus-port": 29000.0})
    assert got == exp
    assert router.metrics_url == "http://10.0.0.11:29000/metrics"
    assert router.start_order == 50 and set(router.depends_on) == {"glm-t-prefill-0", "glm-t-decode-0"}
    assert p.endpoint_url == "http://10.0.0.11:8000"
    # the router's env file carries no worker transport settings
    assert "UCX_NET_DEVICES" not in render.env_text(d, router)


def test_d_decode_on_second_host_advertises_its_own_address():
    # F05: prefill on gpu-1, decode on gpu-2: each side channel advertises its own host
    d = dep(engine="vllm", hardware="b200", topology="disagg", n_hosts=2, speculative=MTP5, pools=[
        PoolSpec(role="prefill", tp=4, hosts=["gpu-1"]), PoolSpec(role="decode", tp=4, hosts=["gpu-2"])],
        rdma=["mlx5_0", "mlx5_1"])
    p = plan.build(d)
    by_role = {s.role: s for s in p.services}
    assert by_role["decode"].host == "gpu-2"
    assert by_role["decode"].env["VLLM_NIXL_SIDE_CHANNEL_HOST"] == "10.0.0.12"
    assert by_role["prefill"].env["VLLM_NIXL_SIDE_CHANNEL_HOST"] == "10.0.0.11"
    # F06: the NIC is pinned on both pools instead of the seed's single-node "all"
    assert by_role["decode"].env["UCX_NET_DEVICES"] == by_role["prefill"].env["UCX_NET_DEVICES"] == "mlx5_0:1,mlx5_1:1"
    router = by_role["router"]
    assert flags(router.argv, 1)["decode"] == "http://10.0.0.12:8001"
    for svc in p.services:
        assert "127.0.0.1" not in " ".join(svc.argv) and "localhost" not in " ".join(svc.argv)
