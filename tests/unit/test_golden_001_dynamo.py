"""Golden (f) and (g): seed 001 (NVIDIA Dynamo recipes for GLM-5.3-Flash).

Seed 001 gives its targets as tables, not commands, so the expected flags are each table
value, quoted, turned into the flag the worker takes (vLLM / SGLang option lists under
/work/shared/reference/option-lists). Values the seed leaves open name our choice.
Deliberate differences from the Kubernetes recipe (asserted): the model path is the local
snapshot (the seed reads the hub cache from a PVC with HF_HUB_OFFLINE=1); discovery uses a
file store on one host and etcd across hosts instead of the Kubernetes backend; workers
advertise their own host address (DYN_*_HOST) and serve /health on DYN_SYSTEM_PORT; SGLang
workers turn metrics on (``--enable-metrics``: Dynamo's SGLang metrics guide launches
``DYN_SYSTEM_PORT=8081 python -m dynamo.sglang ... --enable-metrics``).
"""
from __future__ import annotations

import re
from pathlib import Path

from plan_helpers import REV, dep, flags

from glmops import plan
from glmops.model import PoolSpec, RouterSpec

NVFP4_REPO = "RadixArk/GLM-5.3-Flash-NVFP4"
NVFP4_SNAPSHOT = f"/models/{NVFP4_REPO}/{REV}"
FP8_SNAPSHOT = f"/models/zai-org/GLM-5.3-Flash/{REV}"
DYN = "/opt/glmops/venvs/dynamo-1.6.1/bin/python"
SEED_001 = Path("/work/shared/seeds/001_45b716f972606a07.txt")


def _seed_match_unit() -> int:
    """The "match unit" of seed 001's sentence "The H200 targets enable prefix caching with a
    match unit of 128", read from the seed when it is here (else that sentence's number)."""
    text = SEED_001.read_text(encoding="utf-8") if SEED_001.exists() else "prefix caching with a match unit of 128"
    found = re.search(r"prefix caching with a match unit of (\d+)", text)
    assert found, "seed 001 no longer names a prefix-cache match unit"
    return int(found.group(1))


SEED_MATCH_UNIT = _seed_match_unit()


def test_f_h200_vllm_aggregated_table_values():
    d = dep(engine="dynamo", hardware="h200", pools=[PoolSpec(role="agg", tp=8)],
            extra={"dynamo_backend": "vllm"}, router=RouterSpec(policy="round_robin"))
    p = plan.build(d)
    worker = next(s for s in p.services if s.role == "agg")
    front = next(s for s in p.services if s.role == "frontend")
    got = flags(worker.argv, 3)
    assert got.pop("_pos") == [DYN, "-m", "dynamo.vllm"]
    assert got == {
        "model": FP8_SNAPSHOT,                       # "Checkpoint zai-org/GLM-5.3-Flash" (local snapshot)
        "served-model-name": "zai-org/GLM-5.3-Flash",  # "All vLLM targets serve under the same model name"
        "tensor-parallel-size": 8.0,                 # "Parallelism TP8"
        "speculative-config": {"method": "mtp", "num_speculative_tokens": 7.0},  # "Speculation MTP7"
        "max-num-seqs": 32.0,                        # "Maximum sequences ... 32"
        "max-num-batched-tokens": 8192.0,            # "Maximum batched tokens ... 8,192"
        "gpu-memory-utilization": 0.8,               # "GPU memory utilization ... 0.80"
        "max-model-len": 1048576.0,                  # "Maximum context 1,048,576"
        "enable-prefix-caching": True,               # "both H200 targets enable prefix caching"
        # seed 001: "The H200 targets enable prefix caching with a match unit of 128". vLLM's flag
        # for it is --prefix-match-unit (reference/option-lists/vllm-0.33.0-serve.txt; "a public
        # prefix_match_unit that selects prefix-match granularity independently from physical
        # KV-cache block sizes", https://github.com/vllm-project/vllm/pull/46384; used with
        # --enable-prefix-caching in https://docs.vllm.ai/en/v0.30.0/features/automatic_prefix_caching/).
        # This assertion was "block-size": 128.0, which changed the physical KV block: wrong.
        "prefix-match-unit": float(SEED_MATCH_UNIT),
        "attention-backend": "FLASHMLA_SPARSE",      # "DeepGEMM, and FLASHMLA_SPARSE attention"
        # "the glm45 reasoning and glm47 tool-call parsers" (dynamo.vllm spells them --dyn-*)
        "dyn-tool-call-parser": "glm47",
        "dyn-reasoning-parser": "glm45",
        # ours: discovery on one host without etcd/NATS (lab-recipe/FINDINGS.md)
        "discovery-backend": "file", "request-plane": "tcp", "event-plane": "zmq",
    }
    # "FP8-quantized checkpoint + BF16 KV cache": no --kv-cache-dtype (auto = model dtype, BF16)
    assert "kv-cache-dtype" not in got
    assert worker.env["VLLM_USE_DEEP_GEMM"] == "1"    # "DeepGEMM"
    assert worker.env["CUDA_VISIBLE_DEVICES"] == "0,1,2,3,4,5,6,7"  # "GPUs 8x H200, one worker"
    assert worker.env["HF_HUB_OFFLINE"] == "1"        # "read the checkpoint ... with HF_HUB_OFFLINE=1"
    # "Routing Round-robin"
    f = flags(front.argv, 3)
    assert f["router-mode"] == "round-robin" and f["http-port"] == 8000.0 and f["http-host"] == "10.0.0.11"
    assert worker.health_url == f"http://10.0.0.11:{worker.ports['system'][0]}/health"
    assert p.endpoint_url == "http://10.0.0.11:8000"


def test_f_h200_vllm_disaggregated_8_plus_8():
    # "GPUs 8x H200 prefill + 8x H200 decode", "TP8 prefill / TP8 decode", "KV-aware", "NIXL",
    # "16 prefill / 128 decode" seqs, "8,192 prefill / 2,048 decode" tokens, "0.80 / 0.85";
    # "the same MTP configuration, VLLM_SSM_CONV_STATE_LAYOUT=DS, and VLLM_KV_CACHE_LAYOUT=HND on
    # prefill and decode"
    d = dep(engine="dynamo", hardware="h200", topology="disagg", n_hosts=2, rdma=["mlx5_0", "mlx5_1"],
            pools=[PoolSpec(role="prefill", tp=8), PoolSpec(role="decode", tp=8)],
            extra={"dynamo_backend": "vllm"}, router=RouterSpec(policy="kv_aware"))
    p = plan.build(d)
    pre = next(s for s in p.services if s.role == "prefill")
    dec = next(s for s in p.services if s.role == "decode")
    assert (pre.host, dec.host) == ("gpu-1", "gpu-2")
    fp, fd = flags(pre.argv, 3), flags(dec.argv, 3)
    assert (fp["max-num-seqs"], fp["max-num-batched-tokens"], fp["gpu-memory-utilization"]) == (16.0, 8192.0, 0.8)
    assert (fd["max-num-seqs"], fd["max-num-batched-tokens"], fd["gpu-memory-utilization"]) == (128.0, 2048.0, 0.85)
    assert fp["speculative-config"] == fd["speculative-config"] == {"method": "mtp", "num_speculative_tokens": 7.0}
    assert fp["disaggregation-mode"] == "prefill" and fd["disaggregation-mode"] == "decode"
    # "NIXL with GPU buffers" -> kv_buffer_device cuda; Dynamo's disagg example uses kv_both
    assert fp["kv-transfer-config"] == {"kv_connector": "NixlConnector", "kv_role": "kv_both", "kv_buffer_device": "cuda"}
    for svc in (pre, dec):
        assert svc.env["VLLM_SSM_CONV_STATE_LAYOUT"] == "DS" and svc.env["VLLM_KV_CACHE_LAYOUT"] == "HND"
        assert svc.env["UCX_NET_DEVICES"] == "mlx5_0:1,mlx5_1:1"
        assert svc.env["ETCD_ENDPOINTS"] == "http://10.0.0.11:2379"  # two hosts: etcd discovery
    assert dec.env["VLLM_NIXL_SIDE_CHANNEL_HOST"] == "10.0.0.12"
    front = next(s for s in p.services if s.role == "frontend")
    f = flags(front.argv, 3)
    assert f["router-mode"] == "kv" and f["discovery-backend"] == "etcd"
    # no worker --block-size (vLLM sizes the hybrid model's block itself), so no router override:
    # the dynamo.vllm worker registers the block it runs with (components/src/dynamo/vllm/main.py,
    # register_model(..., kv_cache_block_size=...)) and the frontend's KV router uses the card's
    # kv_cache_block_size (catalog engines.dynamo.sources.router_block_size)
    assert "block-size" not in fp and "block-size" not in fd and "kv-cache-block-size" not in f
    assert fp["prefix-match-unit"] == fd["prefix-match-unit"] == float(SEED_MATCH_UNIT)
    # KV-aware routing needs worker KV events
    assert fp["kv-events-config"]["endpoint"].startswith("tcp://*:")


def test_f_b200_sglang_aggregated_table_values():
    d = dep(engine="dynamo", hardware="b200", variant="nvfp4", repo=NVFP4_REPO, size_gib=168, gpus=8,
            pools=[PoolSpec(role="agg", tp=4)], extra={"dynamo_backend": "sglang"},
            router=RouterSpec(policy="round_robin"))
    p = plan.build(d)
    worker = next(s for s in p.services if s.role == "agg")
    got = flags(worker.argv, 3)
    assert got.pop("_pos") == [DYN, "-m", "dynamo.sglang"]
    assert got == {
        # "All SGLang workers resolve --model-path RadixArk/GLM-5.3-Flash-NVFP4 and the pinned
        #  --revision" (ours: the local snapshot of that revision)
        "model-path": NVFP4_SNAPSHOT,
        "served-model-name": NVFP4_REPO,         # "using the SGLang served model name"
        "tp-size": 4.0,                          # "Parallelism TP4"
        "kv-cache-dtype": "fp8_e4m3",            # "FP8 E4M3 KV cache"
        "max-running-requests": 64.0,            # "Maximum running requests 64"
        "chunked-prefill-size": 16384.0,         # "Chunked prefill size 16,384 tokens"
        # "EAGLE, 3 steps / 4 draft tokens, ReplaySSM": top-k 1 chosen (a chain: 4 drafts = 3 steps + 1)
        "speculative-algorithm": "EAGLE", "speculative-num-steps": 3.0,
        "speculative-eagle-topk": 1.0, "speculative-num-draft-tokens": 4.0,
        "enable-linear-replayssm-spec": True,    # ReplaySSM for speculative steps (sglang 0.5.23 flag)
        "enable-hierarchical-cache": True,       # "HiCache CPU capacity 100 GB per TP rank"
        "hicache-size": 100.0,
        "cuda-graph-max-bs-decode": 64.0,        # "Maximum decode CUDA graph batch size 64"
        "mem-fraction-static": 0.7,              # "Static memory fraction 0.70"
        # "All three recipes enable --enable-multimodal and --mm-enable-dp-encoder. Aggregated
        #  workers enable --frontend-decoding"
        "enable-multimodal": True, "mm-enable-dp-encoder": True, "frontend-decoding": True,
        "dyn-tool-call-parser": "glm47",         # "glm45 reasoning parser and glm47 tool-call parser"
        "dyn-reasoning-parser": "glm45",
        "discovery-backend": "file", "request-plane": "tcp", "event-plane": "zmq",
        "enable-metrics": True,                  # not in the seed: see the module docstring
    }
    # "All worker bases set DYN_HEALTH_CHECK_REQUEST_TIMEOUT=300"
    assert worker.env["DYN_HEALTH_CHECK_REQUEST_TIMEOUT"] == "300"
    assert worker.env["CUDA_VISIBLE_DEVICES"] == "0,1,2,3"  # "4x B200 on one amd64 node"
    front = next(s for s in p.services if s.role == "frontend")
    assert flags(front.argv, 3)["router-mode"] == "round-robin"  # "Routing Round-robin"


def gb200_2p1d():
    # "GPUs 8x GB200 prefill + 4x GB200 decode", "2x prefill TP4/EP4 + 1x decode TP4",
    # 4 GPUs per GB200 tray -> three hosts
    return dep(engine="dynamo", hardware="gb200", topology="disagg", variant="nvfp4", repo=NVFP4_REPO,
               size_gib=168, n_hosts=3, gpus=4,
               pools=[PoolSpec(role="prefill", tp=4, ep=4, replicas=2), PoolSpec(role="decode", tp=4)],
               extra={"dynamo_backend": "sglang"}, router=RouterSpec(policy="kv_aware"))


def test_g_gb200_2p1d_layout_and_flags():
    p = plan.build(gb200_2p1d())
    prefill = [s for s in p.services if s.role == "prefill"]
    [decode] = [s for s in p.services if s.role == "decode"]
    [front] = [s for s in p.services if s.role == "frontend"]
    assert [(s.host, s.gpus) for s in prefill] == [("gpu-1", [0, 1, 2, 3]), ("gpu-2", [0, 1, 2, 3])]
    assert (decode.host, decode.gpus) == ("gpu-3", [0, 1, 2, 3])
    kv_events = {"publisher": "zmq", "endpoint": "tcp://*:5557", "topic": "kv-events"}
    for svc in prefill:
        got = flags(svc.argv, 3)
        assert (got["tp-size"], got["ep-size"]) == (4.0, 4.0)           # "prefill TP4/EP4"
        assert got["disaggregation-mode"] == "prefill"
        assert got["disaggregation-transfer-backend"] == "mooncake"   # "Mooncake NVLink transfer"
        # "Both prefill and decode workers set --kv-events-config to a ZMQ publisher on tcp://*:5557
        #  with topic kv-events"; "SGLang page size ... 64"
        assert got["kv-events-config"] == kv_events and got["page-size"] == 64.0
        assert got["max-running-requests"] == 64.0                    # "64 per prefill worker"
        assert got["enable-hierarchical-cache"] is True and got["hicache-size"] == 100.0  # "100 GB per prefill TP rank"
        assert got["mem-fraction-static"] == 0.7                      # "Prefill 0.70"
        assert "speculative-algorithm" not in got                     # "Same, decode only"
        assert "frontend-decoding" not in got                         # "Disaggregated workers omit --frontend-decoding"
        assert got["disaggregation-bootstrap-port"] == 8998.0
    got = flags(decode.argv, 3)
    assert got["tp-size"] == 4.0 and "ep-size" not in got              # "decode TP4"
    assert got["disaggregation-mode"] == "decode" and got["disaggregation-transfer-backend"] == "mooncake"
    assert got["kv-events-config"] == kv_events and got["page-size"] == 64.0
    assert got["max-running-requests"] == 128.0                       # "128 decode"
    assert got["cuda-graph-max-bs-decode"] == 128.0                   # "128 on decode"
    assert got["mem-fraction-static"] == 0.82                         # "decode 0.82"
    assert "enable-hierarchical-cache" not in got                     # "none on decode"
    assert (got["speculative-algorithm"], got["speculative-num-steps"], got["speculative-num-draft-tokens"]) == \
        ("EAGLE", 3.0, 4.0)
    assert got["enable-linear-replayssm-spec"] is True
    assert "frontend-decoding" not in got
    # "KV-aware routing with worker events"; "The router block size and SGLang page size are both 64"
    f = flags(front.argv, 3)
    assert f["router-mode"] == "kv" and f["kv-cache-block-size"] == 64.0
    assert f["discovery-backend"] == "etcd"
    assert front.host == "gpu-1" and p.endpoint_url == "http://10.0.0.11:8000"
    # every worker advertises its own address and reaches etcd on the frontend host
    for svc in prefill + [decode]:
        assert svc.env["DYN_TCP_RPC_HOST"] == svc.address
        assert svc.env["ETCD_ENDPOINTS"] == "http://10.0.0.11:2379"
        assert svc.ports["kv_events"] == [5557]


def test_g_same_on_standalone_sglang_with_its_router():
    # engine sglang: the same SGLang flags, front door = sglang-router in PD mode
    d = gb200_2p1d()
    d.engine = "sglang"
    d.engine_version = "0.5.23"
    d.router = RouterSpec(policy="cache_aware")
    p = plan.build(d)
    [router] = [s for s in p.services if s.role == "router"]
    got = flags(router.argv, 3)
    assert got["_pos"] == ["/opt/glmops/venvs/sglang-router-0.3.2/bin/python", "-m", "sglang_router.launch_router"]
    assert got["pd-disaggregation"] is True
    assert got["prefill"] == [["http://10.0.0.11:8001", 8998.0], ["http://10.0.0.12:8001", 8998.0]]
    assert got["decode"] == "http://10.0.0.13:8001"
    assert got["policy"] == "cache_aware"
    worker = next(s for s in p.services if s.role == "prefill")
    wf = flags(worker.argv, 3)
    assert wf["tool-call-parser"] == "glm47" and wf["reasoning-parser"] == "glm45"
    assert "kv-events-config" not in wf  # only published when the front door routes on them
