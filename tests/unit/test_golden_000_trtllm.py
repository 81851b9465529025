"""Golden: seed 000 (TensorRT-LLM on B200), aggregated (a) and disaggregated (b).

Expectations are written from /work/shared/seeds/000_02b3db4c668ba297.txt; the seed lines
are quoted beside them. Deliberate differences from the seed are asserted explicitly:
  * MODEL is the local snapshot dir (/models/<repo>/<revision>) with HF_HUB_OFFLINE=1 and
    TRANSFORMERS_OFFLINE=1, keeping ``--served_model_name zai-org/GLM-5.3-Flash`` (F12);
  * ``--host`` is the inventory address instead of 0.0.0.0, and the orchestrator config
    names the host's address instead of ``localhost`` (F05);
  * ``--config`` points at /etc/glmops/<dep>/<service>.yml instead of /tmp/config.yml;
  * the config turns Prometheus metrics on (``return_perf_metrics: true`` for
    /prometheus/metrics, ``enable_iter_perf_stats: true`` for the iteration gauges), as
    reference/trtllm-serve.md ("S4 routes") says they are served.
"""
from __future__ import annotations

import shlex

import yaml
from plan_helpers import REV, dep, flags, seed_cmd

from glmops import plan, render
from glmops.model import PoolSpec

SNAPSHOT = f"/models/zai-org/GLM-5.3-Flash/{REV}"

# seed 000, "Launch the TensorRT LLM Server"
SEED_SERVE = """trtllm-serve \\
  /models/GLM-5.3-Flash \\
  --served_model_name zai-org/GLM-5.3-Flash \\
  --host 0.0.0.0 \\
  --port 8000 \\
  --max_batch_size 64 \\
  --max_num_tokens 16384 \\
  --max_seq_len 16384 \\
  --tp_size 4 \\
  --ep_size 4 \\
  --pp_size 1 \\
  --config /tmp/config.yml"""

# The seed gives the YAML keys as recommendations (section "LLM API Options"), not as a file.
# Each key below is the recommendation quoted next to it; where the seed leaves a value
# open the comment says which default we chose and why.
AGG_CONFIG = {
    # "free_gpu_memory_fraction ... Recommendation: 0.5"
    "kv_cache_config": {"free_gpu_memory_fraction": 0.5},
    # "enable_padding: If true ... can significantly improve performance" -> chosen: true;
    # "max_batch_size ... Recommendation: Set this to match the --max_batch_size" -> 64
    "cuda_graph_config": {"enable_padding": True, "max_batch_size": 64},
    # "Use AUTO (resolves to TRTLLM) or DEEPGEMM on B200" -> chosen: AUTO (the default, stated)
    "moe_config": {"backend": "AUTO"},
    # "Recommendation: true for prompts of several thousand tokens" -> chosen: true
    "enable_chunked_prefill": True,
    # kv_cache_config.dtype: "Default: auto" -> left unset (the performance chart uses BF16 KV);
    # enable_block_reuse: left at the engine default, no Mamba snapshot interval set (the seed
    # gives 256 only "for example"); speculative_config only when MTP is asked for.
    # Not in the seed (see the module docstring): reference/trtllm-serve.md "Prometheus metrics are at
    # /prometheus/metrics, and only when return_perf_metrics: true", "/metrics ... needs enable_iter_perf_stats: true"
    "return_perf_metrics": True,
    "enable_iter_perf_stats": True,
}


def agg_dep(**kw):
    # "GPU: 4x NVIDIA B200 (SM100) for aggregated serving"
    return dep(engine="trtllm", hardware="b200", gpus=4, pools=[PoolSpec(role="agg", tp=4, ep=4, pp=1)], **kw)


def disagg_dep(**kw):
    # "On an 8-GPU node, use GPUs 0–3 for the context worker and GPUs 4–7 for the generation
    #  worker, each with --tp_size 4 --ep_size 4."
    return dep(engine="trtllm", hardware="b200", topology="disagg", pools=[
        PoolSpec(role="prefill", tp=4, ep=4, gpus=[0, 1, 2, 3]),
        PoolSpec(role="decode", tp=4, ep=4, gpus=[4, 5, 6, 7]),
    ], **kw)


def expected_serve(port: int, cfg_path: str) -> dict:
    _, words = seed_cmd(SEED_SERVE)
    exp = flags(words, 2)
    # deliberate: local snapshot, own address, our config path
    exp["_pos"] = [exp["_pos"][0], SNAPSHOT]
    exp["host"] = "10.0.0.11"
    exp["port"] = float(port)
    exp["config"] = cfg_path
    return exp


def test_a_aggregated_serve_command_flag_for_flag():
    d = agg_dep()
    p = plan.build(d)
    [svc] = p.services
    assert svc.argv[0] == "/opt/glmops/venvs/trtllm-1.3.0rc29/bin/trtllm-serve"
    cfg_path = "/etc/glmops/t/glm-t-agg-0.yml"
    got = flags(svc.argv, 2)
    got["_pos"][0] = "trtllm-serve"
    assert got == expected_serve(8000, cfg_path)
    assert svc.gpus == [0, 1, 2, 3] and svc.env["CUDA_VISIBLE_DEVICES"] == "0,1,2,3"
    # F12: offline serving from the snapshot
    assert svc.env["HF_HUB_OFFLINE"] == "1" and svc.env["TRANSFORMERS_OFFLINE"] == "1"
    # one worker: it is the endpoint ("Clients send requests to ... localhost:8000")
    assert p.endpoint_url == "http://10.0.0.11:8000"
    assert svc.health_url == "http://10.0.0.11:8000/health"
    assert svc.ready_url == "http://10.0.0.11:8000/v1/completions"


def test_a_aggregated_config_key_for_key_as_rendered():
    d = agg_dep()
    p = plan.build(d)
    [svc] = p.services
    [cf] = svc.files
    assert cf.path == "/etc/glmops/t/glm-t-agg-0.yml"
    assert yaml.safe_load(render.config_text(cf)) == AGG_CONFIG
    # the rendered unit runs exactly the planned argv
    unit = render.unit_text(d, svc, p)
    exec_line = next(line for line in unit.splitlines() if line.startswith("ExecStart="))
    assert shlex.split(exec_line[len("ExecStart="):]) == svc.argv


def test_a_mtp_renders_speculative_config_with_the_seed_example_draft_len():
    # "decoding_type: Set to MTP" / "max_draft_len ... (1 to 5). The example uses 3."
    # Chosen default when the inventory asks for MTP without a count: 3 (the seed's example).
    p = plan.build(agg_dep(speculative={"method": "mtp"}))
    cfg = p.services[0].files[0].content
    assert cfg["speculative_config"] == {"decoding_type": "MTP", "max_draft_len": 3}
    p = plan.build(agg_dep(speculative={"method": "mtp", "num_speculative_tokens": 5}))
    assert p.services[0].files[0].content["speculative_config"] == {"decoding_type": "MTP", "max_draft_len": 5}


def test_a_attention_dp_uses_4096_tokens():
    # "enable_attention_dp ... When enabled, use --max_num_tokens 4096"
    d = dep(engine="trtllm", hardware="b200", gpus=4, pools=[PoolSpec(role="agg", tp=4, ep=4, attention_dp=True)])
    svc = plan.build(d).services[0]
    assert flags(svc.argv, 2)["max_num_tokens"] == 4096.0
    assert svc.files[0].content["enable_attention_dp"] is True


def test_a_long_context_1m_uses_the_validated_config():
    # "Set --max_seq_len 1048576 ... a validated config is --max_batch_size 16, --max_num_tokens 8192,
    #  CUDA graph batch limit 16, and kv_cache_config.free_gpu_memory_fraction: 0.6"
    svc = plan.build(agg_dep(max_seq_len=1048576)).services[0]
    got = flags(svc.argv, 2)
    assert (got["max_seq_len"], got["max_batch_size"], got["max_num_tokens"]) == (1048576.0, 16.0, 8192.0)
    cfg = svc.files[0].content
    assert cfg["cuda_graph_config"]["max_batch_size"] == 16
    assert cfg["kv_cache_config"]["free_gpu_memory_fraction"] == 0.6
    assert cfg["enable_chunked_prefill"] is True  # "keep chunked prefill enabled"


def test_b_disaggregated_workers_configs_and_orchestrator():
    d = disagg_dep()
    p = plan.build(d)
    by_role = {s.role: s for s in p.services}
    ctx, gen, orch = by_role["prefill"], by_role["decode"], by_role["orchestrator"]
    # workers: the seed's serve command on 8001/8002 ("urls: localhost:8001 / localhost:8002")
    for svc, port, gpus in ((ctx, 8001, "0,1,2,3"), (gen, 8002, "4,5,6,7")):
        got = flags(svc.argv, 2)
        got["_pos"][0] = "trtllm-serve"
        assert got == expected_serve(port, svc.files[0].path)
        assert svc.env["CUDA_VISIBLE_DEVICES"] == gpus
    # "cache_transceiver_config: backend: NIXL transceiver_runtime: PYTHON" on both workers;
    # "Set disable_overlap_scheduler: true and cuda_graph_config: null on the context worker."
    transceiver = {"backend": "NIXL", "transceiver_runtime": "PYTHON"}
    ctx_cfg = yaml.safe_load(render.config_text(ctx.files[0]))
    gen_cfg = yaml.safe_load(render.config_text(gen.files[0]))
    assert ctx_cfg == {**AGG_CONFIG, "cuda_graph_config": None, "disable_overlap_scheduler": True,
                       "cache_transceiver_config": transceiver}
    assert "cuda_graph_config: null" in render.config_text(ctx.files[0])
    assert gen_cfg == {**AGG_CONFIG, "cache_transceiver_config": transceiver}
    # "trtllm-serve disaggregated -c disagg_config.yaml"
    assert orch.argv[1:] == ["disaggregated", "-c", "/etc/glmops/t/disagg_config.yaml"]
    [cf] = orch.files
    # seed: hostname: localhost / port: 8000 / context_servers: {num_instances: 1, urls: ["localhost:8001"]}
    #       / generation_servers: {num_instances: 1, urls: ["localhost:8002"]}
    # deliberate: the host's own address instead of localhost (F05)
    assert yaml.safe_load(render.config_text(cf)) == {
        "hostname": "10.0.0.11", "port": 8000,
        "context_servers": {"num_instances": 1, "urls": ["10.0.0.11:8001"]},
        "generation_servers": {"num_instances": 1, "urls": ["10.0.0.11:8002"]},
    }
    assert orch.start_order > ctx.start_order and orch.start_order > gen.start_order
    assert p.endpoint_url == "http://10.0.0.11:8000"


def test_b_mtp_is_identical_on_both_workers():
    # "with matching speculative_config settings on both workers when using MTP"
    p = plan.build(disagg_dep(speculative={"method": "mtp", "num_speculative_tokens": 3}))
    specs = [s.files[0].content["speculative_config"] for s in p.services if s.role in ("prefill", "decode")]
    assert specs == [{"decoding_type": "MTP", "max_draft_len": 3}] * 2


def test_b_nixl_ucx_env_identical_on_context_and_generation():
    # F04/F06: both env files carry the same NIXL_*/UCX_* lines; the NIC comes from rdma_devices
    d = disagg_dep(rdma=["mlx5_0", "mlx5_1"], env={"TRTLLM_NIXL_KVCACHE_BACKEND": "UCX", "UCX_MAX_RNDV_RAILS": "1"})
    p = plan.build(d)
    ctx, gen = (s for s in p.services if s.role in ("prefill", "decode"))

    def transport(svc):
        text = render.env_text(d, svc)
        return [line for line in text.splitlines() if line.startswith(("NIXL_", "UCX_", "TRTLLM_NIXL_"))]

    assert transport(ctx) == transport(gen) == [
        "TRTLLM_NIXL_KVCACHE_BACKEND=UCX", "UCX_MAX_RNDV_RAILS=1", "UCX_NET_DEVICES=mlx5_0:1,mlx5_1:1"]
