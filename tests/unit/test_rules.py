"""glmops.rules: each rule fails on its bad input and passes on the good one; the field cases
F01, F03, F04, F05, F06, F12 and F16 (validation parts) with their inputs and outcomes."""
from __future__ import annotations

import copy
from pathlib import Path

import pytest
from inventory_factory import REV, agg, trtllm_b200, vllm_b200_disagg, without_venv_advice, write_inventory

from glmops import rules
from glmops.inventory import load_deployment
from glmops.model import ConfigFile, Plan, Service

ROOT = Path(__file__).resolve().parents[2]
TWO_HOSTS = {"gpu-a": {"ansible_host": "10.0.0.11"}, "gpu-b": {"ansible_host": "10.0.0.12"}}


def run(tmp_path: Path, gv: dict, name: str = "inv", **kw):
    """(deployment, plan, problems) for an inventory written under tmp_path."""
    dep = load_deployment(write_inventory(tmp_path / name, gv, **kw))
    plan, problems = rules.validate(dep)
    return dep, plan, without_venv_advice(problems)


def codes(problems) -> list[str]:
    return [p.code for p in problems]


def pools(gv: dict, topology: str = "disagg") -> dict:
    return gv["glmops_topologies"][topology]["pools"]


# ---------------------------------------------------------------------------- baselines


@pytest.mark.parametrize("inv,topology", [
    ("b200", "agg"), ("b200", "disagg"), ("h200", "agg"), ("h200-multinode", "agg"),
    ("h200-multinode", "disagg"), ("gb200", "agg"), ("gb200", "disagg"), ("b300", "agg"),
])
def test_repo_inventories_are_valid(inv, topology):
    dep = load_deployment(ROOT / "inventories" / inv, topology=topology)
    plan, problems = rules.validate(dep)
    # the seed parts a shipped inventory's plan does not render, as warnings (catalog
    # engines.sglang.compat): gb200-computedomain-mnnvl (seed 001 line 33: no ComputeDomain on bare
    # hosts) on both GB200 topologies, gb200-mooncake-nvlink-env (no variable for Mooncake over
    # NVLink) on the disaggregated one
    expected = {("gb200", "agg"): ["RECIPE_NOT_RENDERED"],
                ("gb200", "disagg"): ["RECIPE_NOT_RENDERED", "RECIPE_NOT_RENDERED"]}.get((inv, topology), [])
    assert codes(problems) == expected, problems
    assert all(p.severity == "warning" for p in problems)
    assert plan is not None and plan.services


def test_single_h200_node_cannot_hold_the_disagg_layout():
    dep = load_deployment(ROOT / "inventories/h200", topology="disagg")
    _plan, problems = rules.validate(dep)
    assert codes(problems) == ["GPU_COUNT"]
    assert "16 GPUs" in problems[0].message and "accepted: <= 8" in problems[0].message


def test_baselines_pass(tmp_path):
    for i, gv in enumerate([vllm_b200_disagg(), trtllm_b200("agg"), trtllm_b200("disagg")]):
        _dep, _plan, problems = run(tmp_path, gv, name=f"i{i}")
        assert problems == [], problems


# ---------------------------------------------------------------------------- GPUs and memory


def test_gpu_count_per_pool(tmp_path):
    gv = vllm_b200_disagg()
    pools(gv)["prefill"]["tp"] = 8  # 8 ranks on the 4 pinned GPUs 0-3
    _d, _p, problems = run(tmp_path, gv)
    bad = [p for p in problems if p.code == "GPU_COUNT"]
    assert bad and "tp 8" in bad[0].message and "[0, 1, 2, 3]" in bad[0].message
    assert bad[0].path.endswith("pools.prefill.tp")


def test_gpu_count_replicas(tmp_path):
    gv = trtllm_b200("agg")
    pools(gv, "agg")["agg"].update(replicas=3, port=8001)  # the router takes 8000
    _d, _p, problems = run(tmp_path, gv, name="three")
    assert codes(problems) == ["GPU_COUNT"]
    assert "3 x 4 = 12 GPUs" in problems[0].message and problems[0].path.endswith("pools.agg.replicas") and "accepted: <= 8" in problems[0].message
    pools(gv, "agg")["agg"]["replicas"] = 2
    assert run(tmp_path, gv, name="two")[2] == []


def test_gpu_indices(tmp_path):
    gv = vllm_b200_disagg()
    pools(gv)["decode"]["gpus"] = [4, 5, 6, 9]
    _d, _p, problems = run(tmp_path, gv, name="pool", host_vars={"gpu-a": {"glmops_gpus": [0, 1, 2, 3, 4, 5, 6, 8]}})
    msgs = [p.message for p in problems if p.code == "GPU_INDEX"]
    assert any("glmops_gpus" in m and "[8]" in m and "0..7" in m for m in msgs), msgs
    assert any("decode gpus [4, 5, 6, 9]" in m for m in msgs), msgs


def test_gpu_overlap_between_pinned_pools(tmp_path):
    gv = vllm_b200_disagg()
    pools(gv)["decode"]["gpus"] = [2, 3, 4, 5]
    _d, _p, problems = run(tmp_path, gv)
    assert "GPU_OVERLAP" in codes(problems)
    assert "[2, 3]" in next(p.message for p in problems if p.code == "GPU_OVERLAP")


def test_parallelism_ep_must_divide(tmp_path):
    gv = trtllm_b200("agg")
    pools(gv, "agg")["agg"]["ep"] = 3
    _d, _p, problems = run(tmp_path, gv)
    assert codes(problems) == ["PARALLELISM"]
    assert "ep 3" in problems[0].message and "divisor of 4" in problems[0].message


def test_parallelism_reports_every_pool(tmp_path):
    gv = vllm_b200_disagg()
    pools(gv)["prefill"]["tp"] = 0
    pools(gv)["decode"]["replicas"] = 0
    _d, _p, problems = run(tmp_path, gv)
    bad = [p for p in problems if p.code == "PARALLELISM"]
    assert [p.path.rsplit(".", 2)[-2:] for p in bad] == [["prefill", "tp"], ["decode", "replicas"]]


def test_memory_fit_flash_fp8_on_4x_h100_is_refused(tmp_path):
    _d, _p, problems = run(tmp_path, agg("glm-5.3-flash", "vllm", "h100", 4), name="tp4")
    assert codes(problems) == ["MEMORY_FIT"]
    msg = problems[0].message
    assert "306 GiB" in msg and "76.5 GiB per GPU" in msg and "H100" in msg and "accepted: >= 5 GPUs" in msg
    assert run(tmp_path, agg("glm-5.3-flash", "vllm", "h100", 8), name="tp8")[2] == []


# ---------------------------------------------------------------------------- seed constraints


@pytest.mark.parametrize("n,ok", [(0, False), (1, True), (3, True), (5, True), (6, False)])
def test_mtp_max_draft_len_on_trtllm(tmp_path, n, ok):
    gv = trtllm_b200("agg", glmops_speculative={"method": "mtp", "num_speculative_tokens": n})
    _d, _p, problems = run(tmp_path, gv)
    if ok:
        assert problems == []
    else:
        assert codes(problems) == ["MTP_DRAFT_LEN"]
        assert repr(n) in problems[0].message and "accepted: 1..5" in problems[0].message


def test_mtp_without_a_draft_len_on_trtllm_takes_the_recipes(tmp_path):
    """Seed 000: "max_draft_len ... (1 to 5). The example uses 3." Left out, that default (read
    from the seed's text here) is what renders; an independent audit found it refused as
    missing, so it could never be used."""
    import re

    from seed_text import seed

    want = int(re.search(r"max_draft_len: .*The example uses (\d+)\.", seed("000")).group(1))
    gv = trtllm_b200("agg", glmops_speculative={"method": "mtp"})
    _d, plan, problems = run(tmp_path, gv)
    assert problems == []
    specs = [f.content["speculative_config"] for s in plan.services for f in s.files
             if isinstance(f.content, dict) and "speculative_config" in f.content]
    assert specs and all(sc == {"decoding_type": "MTP", "max_draft_len": want} for sc in specs)


@pytest.mark.parametrize("spec,needle", [
    ({"method": "medusa", "num_speculative_tokens": 3}, "'medusa' is not accepted on vllm; accepted: mtp, dspark, none"),
    ({"method": "mtp", "num_speculative_tokens": -2}, "num_speculative_tokens -2 is not accepted; accepted: an integer >= 1"),
    ({"method": "mtp", "num_speculative_tokens": "3"}, "num_speculative_tokens '3' is not accepted"),
    ({"method": "mtp", "num_speculative_tokns": 3}, "key(s) 'num_speculative_tokns' are not accepted"),
])
def test_bad_speculative_settings_on_vllm_are_refused(tmp_path, spec, needle):
    """Every engine checks the engine-neutral speculative mapping: method against the backend's
    catalog ``speculative.methods``, counts as integers >= 1, no unknown key (a typo is not ignored)."""
    gv = vllm_b200_disagg(glmops_speculative=spec)
    _d, _p, problems = run(tmp_path, gv)
    spec_problems = [p for p in problems if p.code == "SPECULATIVE"]
    assert spec_problems, problems
    assert any(needle in p.message for p in spec_problems), [p.message for p in spec_problems]
    assert all("glmops_speculative" in p.path for p in spec_problems)


def test_speculative_that_is_not_a_mapping_names_plain_types(tmp_path):
    _d, _p, problems = run(tmp_path, vllm_b200_disagg(glmops_speculative="mtp"))
    assert codes(problems) == ["TYPE"]
    assert "value 'mtp' is str; accepted: a mapping" in problems[0].message
    assert "Ansible" not in problems[0].message and "Tagged" not in problems[0].message


def test_every_speculative_problem_is_reported_at_once(tmp_path):
    gv = vllm_b200_disagg(glmops_speculative={"method": "medusa", "num_speculative_tokens": 0, "depth": 2})
    _d, _p, problems = run(tmp_path, gv)
    msgs = " | ".join(p.message for p in problems if p.code == "SPECULATIVE")
    assert "'medusa'" in msgs and "num_speculative_tokens 0" in msgs and "'depth'" in msgs


def test_mtp_max_draft_len_in_engine_config(tmp_path):
    gv = trtllm_b200("agg", glmops_engine_config={"speculative_config": {"decoding_type": "MTP", "max_draft_len": 7}})
    _d, _p, problems = run(tmp_path, gv)
    assert codes(problems) == ["MTP_DRAFT_LEN"] and "7" in problems[0].message


def test_f16_speculative_mismatch(tmp_path):
    """F16: prefill MTP with 3 speculative tokens, decode MTP with 1 -> validate fails."""
    gv = vllm_b200_disagg()
    pools(gv)["prefill"]["speculative"] = {"method": "mtp", "num_speculative_tokens": 3}
    pools(gv)["decode"]["speculative"] = {"method": "mtp", "num_speculative_tokens": 1}
    _d, _p, problems = run(tmp_path, gv, name="bad")
    assert codes(problems) == ["F16_SPECULATIVE_MISMATCH"]
    msg = problems[0].message
    assert "'num_speculative_tokens': 3" in msg and "'num_speculative_tokens': 1" in msg and "accepted:" in msg
    # the same settings once for both pools passes
    good = vllm_b200_disagg(glmops_speculative={"method": "mtp", "num_speculative_tokens": 3})
    assert run(tmp_path, good, name="good")[2] == []


def test_f16_on_trtllm_speculative_config(tmp_path):
    gv = trtllm_b200("disagg")
    pools(gv)["generation"]["engine_config"] = {"speculative_config": {"decoding_type": "MTP", "max_draft_len": 1}}
    pools(gv)["context"]["engine_config"] = {"speculative_config": {"decoding_type": "MTP", "max_draft_len": 3}}
    _d, _p, problems = run(tmp_path, gv)
    assert "F16_SPECULATIVE_MISMATCH" in codes(problems)


def test_sglang_decode_only_speculation_is_allowed(tmp_path):
    """Seed 001 runs EAGLE on the SGLang decode workers only: no F16 there."""
    dep = load_deployment(ROOT / "inventories/gb200", topology="disagg")
    dep.pool("decode").speculative = {"method": "eagle", "num_steps": 3}
    assert "F16_SPECULATIVE_MISMATCH" not in codes(rules.check(dep))


def test_f03_fp8_kv_cache_on_hopper(tmp_path):
    """F03: hardware h200 (8 GPUs), engine vllm, kv_cache_dtype fp8 -> fails; b200 passes."""
    gv = agg("glm-5.3-flash", "vllm", "h200", 8, glmops_kv_cache_dtype="fp8")
    dep, _p, problems = run(tmp_path, gv, name="h200")
    assert codes(problems) == ["F03_FP8_KV_HOPPER"]
    msg = problems[0].message
    for word in ("H200", "sm90", "'fp8'", "accepted: bf16, auto"):
        assert word in msg, (word, msg)
    assert problems[0].path.endswith("group_vars/all.yml:glmops_kv_cache_dtype")
    gv["glmops_hardware"] = "b200"
    assert run(tmp_path, gv, name="b200")[2] == []
    # the engine spelling is caught too, and a per-pool override names the pool's key
    gv = agg("glm-5.3-flash", "vllm", "h200", 8)
    pools(gv, "agg")["agg"]["engine_args"] = {"kv-cache-dtype": "fp8_e4m3"}
    _d, _p, problems = run(tmp_path, gv, name="pool")
    assert codes(problems) == ["F03_FP8_KV_HOPPER"]
    assert problems[0].path.endswith("pools.agg.engine_args.kv-cache-dtype")
    # GLM-5.3 (not Flash) may use FP8 KV on Hopper (seed 004: --kv-cache-dtype fp8 on 8xH200)
    gv = agg("glm-5.3", "vllm", "h200", 8, glmops_kv_cache_dtype="fp8", glmops_engine_version="0.29.0")
    assert run(tmp_path, gv, name="glm53")[2] == []


def test_kv_cache_dtype_must_be_accepted_by_the_engine(tmp_path):
    gv = agg("glm-5.3-flash", "sglang", "b200", 4, glmops_kv_cache_dtype="fp9")
    _d, _p, problems = run(tmp_path, gv, name="bad")
    assert codes(problems) == ["KV_CACHE_DTYPE"]
    assert "'fp9'" in problems[0].message and "fp8_e4m3" in problems[0].message
    gv["glmops_kv_cache_dtype"] = "fp8"  # engine-neutral name, mapped to fp8_e4m3 for SGLang
    assert run(tmp_path, gv, name="ok")[2] == []


def test_nvfp4_is_blackwell_only(tmp_path):
    gv = agg("glm-5.3-flash", "vllm", "h200", 8, glmops_variant="nvfp4")
    _d, _p, problems = run(tmp_path, gv, name="h200")
    assert codes(problems) == ["NVFP4_BLACKWELL"]
    assert "H200" in problems[0].message and "sm90" in problems[0].message and "Blackwell" in problems[0].message
    gv["glmops_hardware"] = "b200"
    gv["glmops_topologies"]["agg"]["pools"]["agg"]["tp"] = 4
    assert run(tmp_path, gv, name="b200")[2] == []


def test_bf16_glm53_needs_multiple_nodes(tmp_path):
    gv = agg("glm-5.3", "vllm", "b300", 8, glmops_variant="bf16")
    _d, _p, problems = run(tmp_path, gv, name="one")
    assert codes(problems) == ["BF16_MULTI_NODE"]
    assert "8 GPUs" in problems[0].message and "accepted: > 8 GPUs per replica" in problems[0].message
    pools(gv, "agg")["agg"]["pp"] = 2
    assert run(tmp_path, gv, name="two", hosts=TWO_HOSTS)[2] == []


def test_block_reuse_needs_a_mamba_snapshot_interval(tmp_path):
    gv = trtllm_b200("agg", glmops_engine_config={"kv_cache_config": {"enable_block_reuse": True}})
    _d, _p, problems = run(tmp_path, gv, name="bad")
    assert codes(problems) == ["BLOCK_REUSE_SNAPSHOT"]
    assert "periodic_snapshot_interval" in problems[0].message and "256" in problems[0].message
    gv["glmops_engine_config"]["kv_cache_config"]["mamba_state_config"] = {"periodic_snapshot_interval": 256}
    assert run(tmp_path, gv, name="ok")[2] == []


def test_cuda_graph_batch_matches_max_batch_size(tmp_path):
    gv = trtllm_b200("agg", glmops_engine_config={"cuda_graph_config": {"enable_padding": True, "max_batch_size": 32}})
    _d, _p, problems = run(tmp_path, gv, name="bad")
    assert codes(problems) == ["CUDA_GRAPH_BATCH"]
    assert "32" in problems[0].message and "accepted: 64" in problems[0].message
    gv["glmops_engine_config"]["cuda_graph_config"]["max_batch_size"] = 64
    assert run(tmp_path, gv, name="ok")[2] == []


def test_context_worker_settings(tmp_path):
    gv = trtllm_b200("disagg")
    pools(gv)["context"]["engine_config"] = {"disable_overlap_scheduler": False, "cuda_graph_config": {"max_batch_size": 64}}
    _d, _p, problems = run(tmp_path, gv, name="bad")
    assert sorted(codes(problems)) == ["CONTEXT_WORKER_CONFIG", "CONTEXT_WORKER_CONFIG"]
    assert all("accepted:" in p.message for p in problems)
    # without overrides the planned context config carries both (checked on the rendered file)
    _d, plan, problems = run(tmp_path, trtllm_b200("disagg"), name="ok")
    assert problems == []
    ctx = next(s for s in plan.services if s.role == "prefill")
    cfg = next(f.content for f in ctx.files if isinstance(f.content, dict) and "hostname" not in f.content)
    assert cfg["disable_overlap_scheduler"] is True and cfg["cuda_graph_config"] is None


def test_check_plan_reads_the_rendered_trtllm_configs():
    svc = Service(name="glm-t-prefill-0", host="h", role="prefill", engine="trtllm", address="10.0.0.1", port=8001,
                  argv=["trtllm-serve", "/m", "--max_batch_size", "64"],
                  files=[ConfigFile(path="/etc/glmops/t/prefill-0.yaml", content={
                      "cuda_graph_config": {"max_batch_size": 16},
                      "kv_cache_config": {"enable_block_reuse": True}})])
    plan = Plan(deployment="t", model="glm-5.3-flash", served_model_name="m", engine="trtllm", topology="disagg",
                endpoint_url="http://h:8000", services=[svc])
    got = sorted(codes(rules.check_plan(plan)))
    assert got == ["BLOCK_REUSE_SNAPSHOT", "CONTEXT_WORKER_CONFIG", "CUDA_GRAPH_BATCH"]


@pytest.mark.parametrize("value,ok", [(1_048_576, True), (1_048_577, False), (0, False)])
def test_max_seq_len(tmp_path, value, ok):
    _d, _p, problems = run(tmp_path, trtllm_b200("agg", glmops_max_seq_len=value))
    if ok:
        assert problems == []
    else:
        assert codes(problems) == ["MAX_SEQ_LEN"]
        assert "accepted: 1..1,048,576" in problems[0].message


@pytest.mark.parametrize("engine,model,version,ok", [
    ("trtllm", "glm-5.3-flash", "1.3.0rc29", True),
    ("trtllm", "glm-5.3-flash", "1.3.0rc28", False),
    ("trtllm", "glm-5.3-flash", "1.3.0", True),
    ("vllm", "glm-5.3", "0.29.0", True),
    ("vllm", "glm-5.3", "0.28.0", False),
    ("vllm", "glm-5.3", "banana", False),
])
def test_minimum_engine_versions(tmp_path, engine, model, version, ok):
    hw, tp = ("b200", 4) if engine == "trtllm" else ("b300", 8)
    gv = agg(model, engine, hw, tp, glmops_engine_version=version)
    _d, _p, problems = run(tmp_path, gv)
    if ok:
        assert problems == []
    else:
        assert codes(problems) == ["ENGINE_VERSION"]
        assert repr(version) in problems[0].message


def test_multimodal_needs_transformers_5_17(tmp_path):
    gv = trtllm_b200("agg", glmops_multimodal=True, glmops_pip_extra=["transformers==5.16.0"])
    _d, _p, problems = run(tmp_path, gv, name="bad")
    assert codes(problems) == ["TRANSFORMERS_PIN"]
    assert "'transformers==5.16.0'" in problems[0].message and "accepted: transformers==5.17.0" in problems[0].message
    gv["glmops_pip_extra"] = ["transformers==5.17.0"]
    assert run(tmp_path, gv, name="ok")[2] == []
    gv = agg("glm-5.3", "vllm", "b300", 8, glmops_multimodal=True)
    assert codes(run(tmp_path, gv, name="text")[2]) == ["MULTIMODAL"]


def test_arch_and_engine_hardware(tmp_path):
    _d, _p, problems = run(tmp_path, agg("glm-5.3-flash", "vllm", "mi355x", 8), name="amd")
    assert codes(problems) == ["ARCH"] and "MI355X" in problems[0].message
    _d, _p, problems = run(tmp_path, agg("glm-5.3", "trtllm", "mi355x", 8), name="trt")
    assert "ENGINE_HARDWARE" in codes(problems)
    assert run(tmp_path, agg("glm-5.3", "vllm", "mi355x", 8), name="ok")[2] == []


def test_catalog_keys_and_choices(tmp_path):
    gv = agg("glm-5.3-flash", "vllm", "h300", 8, glmops_runtime="docker")
    _d, _p, problems = run(tmp_path, gv)
    assert sorted(codes(problems)) == ["CATALOG_KEY", "CHOICE"]
    hw = next(p for p in problems if p.code == "CATALOG_KEY")
    assert "'h300'" in hw.message and "b200" in hw.message and hw.path.endswith("glmops_hardware")


def test_pools_must_match_the_topology(tmp_path):
    gv = vllm_b200_disagg()
    gv["glmops_topologies"]["disagg"]["pools"] = {"agg": {"tp": 4}}
    _d, _p, problems = run(tmp_path, gv)
    assert codes(problems) == ["POOLS"]
    assert "accepted: exactly prefill + decode" in problems[0].message


@pytest.mark.parametrize("change,code,words", [
    (lambda gv: gv.update(glmops_speculative={"method": "eagle", "num_speculative_tokens": 3}), "SPECULATIVE", ["'eagle'", "accepted: mtp"]),
    (lambda gv: gv.update(glmops_max_batch_size=0), "LIMIT", ["glmops_max_batch_size 0", "accepted: an integer >= 1"]),
    (lambda gv: pools(gv, "agg")["agg"].update(port=70000), "PORT", ["70000", "accepted: 1..65535"]),
    (lambda gv: pools(gv, "agg")["agg"].update(hosts=["gpu-z"]), "UNKNOWN_HOST", ["'gpu-z'", "accepted: host or group names"]),
    (lambda gv: gv.update(glmops_hardware="h200", glmops_kv_cache_dtype="nvfp4"), "NVFP4_BLACKWELL", ["'nvfp4'", "H200"]),
    (lambda gv: gv.update(glmops_checkpoint={"mode": "rsync"}), "CHOICE", ["'rsync'", "per_node, fanout, shared"]),
    (lambda gv: gv.update(glmops_engine="sglang", glmops_runtime="container"), "IMAGE", ["'container'", "accepted: glmops_image set"]),
])
def test_more_rules_fail_with_key_value_and_accepted(tmp_path, change, code, words):
    gv = trtllm_b200("agg")
    change(gv)
    _d, _p, problems = run(tmp_path, gv)
    assert code in codes(problems), problems
    msg = " ".join(p.message for p in problems if p.code == code)
    for word in words:
        assert word in msg, (word, msg)


# ---------------------------------------------------------------------------- field cases


def f01_input() -> dict:
    gv = vllm_b200_disagg()
    pools(gv)["prefill"]["engine_args"] = {"disable_hybrid_kv_cache_manager": True, "block_size": 64}
    pools(gv)["decode"]["engine_args"] = {"block_size": 64}
    return gv


def test_f01_layout_mismatch_names_setting_and_both_values(tmp_path):
    """F01: prefill overrides disable_hybrid_kv_cache_manager: true + block_size: 64, decode only
    block_size: 64 -> validate fails naming the setting and both values."""
    _d, _p, problems = run(tmp_path, f01_input())
    assert codes(problems) == ["F01_LAYOUT_MISMATCH"]
    msg = problems[0].message
    assert "hybrid KV cache manager" in msg and "prefill 'disabled'" in msg and "decode '(default)'" in msg
    assert "accepted: the same value on prefill and decode" in msg


@pytest.mark.parametrize("setting,pre,dec,word", [
    ("engine_args", {"block-size": 64}, {"block-size": 128}, "block-size"),
    ("engine_args", {"kv-cache-dtype": "fp8"}, {}, "kv_cache_dtype"),
    ("env", {"VLLM_KV_CACHE_LAYOUT": "NHD"}, {}, "VLLM_KV_CACHE_LAYOUT"),
    ("env", {"VLLM_SSM_CONV_STATE_LAYOUT": "SD"}, {"VLLM_SSM_CONV_STATE_LAYOUT": "DS"}, "VLLM_SSM_CONV_STATE_LAYOUT"),
    ("engine_args", {"kv-transfer-config": {"kv_connector": "NixlConnector", "kv_connector_extra_config": {"backends": ["UCX"]}}},
     {"kv-transfer-config": {"kv_connector": "NixlConnector"}}, "kv_connector_extra_config"),
])
def test_f01_every_layout_setting(tmp_path, setting, pre, dec, word):
    gv = vllm_b200_disagg()
    pools(gv)["prefill"][setting] = pre
    pools(gv)["decode"][setting] = dec
    _d, _p, problems = run(tmp_path, gv)
    assert codes(problems) == ["F01_LAYOUT_MISMATCH"], problems
    assert word in problems[0].message


def test_f01_shared_source_passes(tmp_path):
    gv = vllm_b200_disagg(glmops_engine_args={"block-size": 64, "disable-hybrid-kv-cache-manager": True})
    assert run(tmp_path, gv)[2] == []


def test_f04_conflicting_transport_variables(tmp_path):
    """F04: trtllm disagg with NIXL_BACKEND and TRTLLM_NIXL_KVCACHE_BACKEND both LIBFABRIC -> fails
    naming both; valid input gives context and generation identical NIXL_*/UCX_* env lines."""
    gv = trtllm_b200("disagg", glmops_env={"NIXL_BACKEND": "LIBFABRIC", "TRTLLM_NIXL_KVCACHE_BACKEND": "LIBFABRIC"})
    _d, _p, problems = run(tmp_path, gv, name="bad")
    assert set(codes(problems)) == {"F04_TRANSPORT_ENV"}
    assert "NIXL_BACKEND" in problems[0].message and "TRTLLM_NIXL_KVCACHE_BACKEND" in problems[0].message
    # transport env set per pool so that the pools differ is refused as well
    gv = trtllm_b200("disagg")
    pools(gv)["context"]["env"] = {"UCX_TLS": "rc,cuda_copy"}
    _d, _p, problems = run(tmp_path, gv, name="diff")
    assert codes(problems) == ["F04_TRANSPORT_ENV"] and "UCX_TLS" in problems[0].message
    # valid: one backend variable, given once
    gv = trtllm_b200("disagg", glmops_env={"TRTLLM_NIXL_KVCACHE_BACKEND": "LIBFABRIC", "UCX_TLS": "rc,cuda_copy"})
    _d, plan, problems = run(tmp_path, gv, name="ok", host_vars={"gpu-a": {"glmops_rdma_devices": ["mlx5_0"]}})
    assert problems == []
    workers = [s for s in plan.services if s.role in ("prefill", "decode")]
    assert len(workers) == 2

    def transport(svc):
        return {k: v for k, v in svc.env.items() if k.startswith(("NIXL_", "UCX_", "TRTLLM_NIXL_"))}

    assert transport(workers[0]) == transport(workers[1])
    assert transport(workers[0])["TRTLLM_NIXL_KVCACHE_BACKEND"] == "LIBFABRIC"


def f05_input(decode_host: str = "gpu-a") -> dict:
    gv = vllm_b200_disagg()
    pre, dec = pools(gv)["prefill"], pools(gv)["decode"]
    pre.update(hosts=["gpu-a"], env={"VLLM_NIXL_SIDE_CHANNEL_PORT": 5600})
    dec.update(hosts=[decode_host], env={"VLLM_NIXL_SIDE_CHANNEL_PORT": 5602})
    return gv


def test_f05_side_channel_collision(tmp_path):
    """F05: prefill gpu-a GPUs 0-3 TP4 side-channel base 5600, decode gpu-a GPUs 4-7 TP4 base 5602
    -> fails (5600-5603 overlaps 5602-5605 on gpu-a)."""
    hosts = {h: dict(v, glmops_rdma_devices=["mlx5_0"]) for h, v in TWO_HOSTS.items()}
    _d, _p, problems = run(tmp_path, f05_input("gpu-a"), name="same", hosts=hosts)
    assert codes(problems) == ["F05_PORT_COLLISION"]
    msg = problems[0].message
    assert "gpu-a" in msg and "5600-5603" in msg and "5602-5605" in msg and "accepted:" in msg
    assert problems[0].path.endswith("pools.decode.env.VLLM_NIXL_SIDE_CHANNEL_PORT")


def test_f05_decode_on_other_host_advertises_its_own_address(tmp_path):
    hosts = {h: dict(v, glmops_rdma_devices=["mlx5_0"]) for h, v in TWO_HOSTS.items()}
    _d, plan, problems = run(tmp_path, f05_input("gpu-b"), name="other", hosts=hosts)
    assert problems == []
    by_role = {s.role: s for s in plan.services}
    assert by_role["decode"].host == "gpu-b"
    assert by_role["decode"].env["VLLM_NIXL_SIDE_CHANNEL_HOST"] == "10.0.0.12"
    assert by_role["prefill"].env["VLLM_NIXL_SIDE_CHANNEL_HOST"] == "10.0.0.11"


def test_f05_unpinned_pools_spread_over_hosts_do_not_collide(tmp_path):
    """TP8 prefill fills gpu-a, so TP8 decode lands on gpu-b: 5600 and 5602 are on different hosts."""
    gv = vllm_b200_disagg()
    gv["glmops_topologies"]["disagg"]["pools"] = {
        "prefill": {"tp": 8, "env": {"VLLM_NIXL_SIDE_CHANNEL_PORT": 5600}},
        "decode": {"tp": 8, "env": {"VLLM_NIXL_SIDE_CHANNEL_PORT": 5602}}}
    hosts = {h: dict(v, glmops_rdma_devices=["mlx5_0"]) for h, v in TWO_HOSTS.items()}
    _d, plan, problems = run(tmp_path, gv, hosts=hosts)
    assert problems == []
    assert {s.role: s.host for s in plan.services if s.role != "router"} == {"prefill": "gpu-a", "decode": "gpu-b"}


def test_f05_every_port_of_a_plan_is_checked_per_host():
    def svc(name, role, host, ports):
        return Service(name=name, host=host, role=role, engine="vllm", address=host, port=ports["http"][0], ports=ports)

    plan = Plan(deployment="t", model="m", served_model_name="m", engine="vllm", topology="disagg", endpoint_url="",
                services=[
                    svc("p", "prefill", "gpu-a", {"http": [8001], "nixl_side_channel": [5600, 5601, 5602, 5603]}),
                    svc("d", "decode", "gpu-a", {"http": [8002], "nixl_side_channel": [5602, 5603, 5604, 5605]}),
                    svc("r", "router", "gpu-a", {"http": [8000], "metrics": [8002]}),
                    svc("d2", "decode", "gpu-b", {"http": [8001], "kv_events": [5600]}),
                ])
    problems = rules.check_plan(plan)
    assert codes(problems) == ["F05_PORT_COLLISION", "F05_PORT_COLLISION"]
    text = " ".join(p.message for p in problems)
    assert "5602-5603" in text and "metrics 8002" in text and "gpu-b" not in text


def test_advertised_localhost_on_multi_host_plan_is_refused():
    a = Service(name="p", host="gpu-a", role="prefill", engine="vllm", address="10.0.0.11", port=8001,
                env={"VLLM_NIXL_SIDE_CHANNEL_HOST": "localhost"})
    b = Service(name="d", host="gpu-b", role="decode", engine="vllm", address="10.0.0.12", port=8001)
    plan = Plan(deployment="t", model="m", served_model_name="m", engine="vllm", topology="disagg", endpoint_url="",
                services=[a, b])
    assert codes(rules.check_plan(plan)) == ["ADVERTISE_ADDRESS"]


def f06_input(rdma_b: list[str] | None) -> tuple[dict, dict]:
    gv = {
        "glmops_model": "glm-5.3-flash", "glmops_variant": "nvfp4", "glmops_engine": "sglang",
        "glmops_hardware": "b200", "glmops_runtime": "venv", "glmops_topology": "disagg",
        "glmops_engine_args": {"disaggregation-transfer-backend": "nixl"},
        "glmops_topologies": {"disagg": {"pools": {
            "prefill": {"tp": 4, "hosts": ["gpu-a"]}, "decode": {"tp": 4, "hosts": ["gpu-b"]}}}},
    }
    hosts = {"gpu-a": {"ansible_host": "10.0.0.11", "glmops_rdma_devices": ["mlx5_0", "mlx5_1"]},
             "gpu-b": {"ansible_host": "10.0.0.12"}}
    if rdma_b:
        hosts["gpu-b"]["glmops_rdma_devices"] = rdma_b
    return gv, hosts


def test_f06_cross_host_nixl_needs_rdma_devices(tmp_path):
    """F06: sglang disagg across two hosts over NIXL; a host without rdma_devices -> fails."""
    gv, hosts = f06_input(None)
    _d, _p, problems = run(tmp_path, gv, name="bad", hosts=hosts)
    assert codes(problems) == ["F06_RDMA_DEVICES"]
    assert "gpu-b" in problems[0].message and "accepted: a list of RDMA NICs" in problems[0].message
    gv, hosts = f06_input(["mlx5_0", "mlx5_1"])
    _d, plan, problems = run(tmp_path, gv, name="ok", hosts=hosts)
    assert problems == []
    workers = [s for s in plan.services if s.role in ("prefill", "decode")]
    assert {s.env.get("UCX_NET_DEVICES") for s in workers} == {"mlx5_0:1,mlx5_1:1"}


def test_f06_mooncake_or_single_host_needs_no_rdma(tmp_path):
    gv, hosts = f06_input(None)
    del gv["glmops_engine_args"]  # SGLang's default transfer backend is mooncake
    assert "F06_RDMA_DEVICES" not in codes(run(tmp_path, gv, name="mc", hosts=hosts)[2])


@pytest.mark.parametrize("revision,offline,ok", [
    ("main", True, False),
    ("v1.0", True, False),
    (REV, True, True),
    (REV.upper(), True, False),
    ("main", False, True),
    (None, True, True),
])
def test_f12_revision_must_be_a_commit_when_offline(tmp_path, revision, offline, ok):
    """F12: revision: main with offline serving -> fails: revision must be a 40-hex commit."""
    ck = {"offline": offline}
    if revision is not None:
        ck["revision"] = revision
    _d, _p, problems = run(tmp_path, trtllm_b200("agg", glmops_checkpoint=ck))
    if ok:
        assert problems == []
    else:
        assert codes(problems) == ["F12_REVISION"]
        assert repr(revision) in problems[0].message and "accepted: a 40-hex commit" in problems[0].message
        assert problems[0].path.endswith("glmops_checkpoint.revision")


def test_f12_with_a_commit_serves_offline_from_the_local_snapshot(tmp_path):
    gv = trtllm_b200("agg", glmops_checkpoint={"revision": REV, "model_dir": "/srv/models"})
    _d, plan, problems = run(tmp_path, gv)
    assert problems == []
    worker = next(s for s in plan.services if s.role == "agg")
    assert f"/srv/models/zai-org/GLM-5.3-Flash/{REV}" in worker.argv
    assert worker.env["HF_HUB_OFFLINE"] == "1" and worker.env["TRANSFORMERS_OFFLINE"] == "1"
    assert not any("token" in k.lower() for k in worker.env)


def test_variant_without_repo_needs_one(tmp_path):
    gv = agg("glm-5.3", "vllm", "b300", 8, glmops_variant="w4a8")
    _d, _p, problems = run(tmp_path, gv, name="bad")
    assert codes(problems) == ["CHECKPOINT_REPO"]
    gv["glmops_checkpoint"] = {"repo": "example/GLM-5.3-W4A8"}
    assert run(tmp_path, gv, name="ok")[2] == []


# ---------------------------------------------------------------------------- all at once


def test_all_problems_are_reported_together(tmp_path):
    gv = f01_input()
    gv.update(glmops_max_seq_len=2_000_000, glmops_engine_version="0.20.0",
              glmops_checkpoint={"revision": "main"}, glmops_kv_cache_dtyp="fp8")
    pools(gv)["prefill"]["speculative"] = {"method": "mtp", "num_speculative_tokens": 3}
    _d, _p, problems = run(tmp_path, gv)
    assert set(codes(problems)) >= {"UNKNOWN_KEY", "MAX_SEQ_LEN", "ENGINE_VERSION", "F12_REVISION",
                                    "F01_LAYOUT_MISMATCH", "F16_SPECULATIVE_MISMATCH"}
    for p in problems:
        assert p.path and p.message and "accepted" in p.message, p


def test_check_is_pure_and_repeatable(tmp_path):
    dep = load_deployment(write_inventory(tmp_path / "inv", f01_input()))
    before = copy.deepcopy(dep)
    assert rules.check(dep) == rules.check(dep)
    assert dep == before


# ---------------------------------------------------------------------------- router policy


@pytest.mark.parametrize("engine,policy,ok", [
    ("sglang", "kv_aware", False),   # sglang-router 0.3.2 --policy has no kv_aware
    ("sglang", "cache_aware", True),
    ("vllm", "kv_aware", True),      # vllm-router 0.1.17 accepts it
    ("vllm", "least_busy", False),
])
def test_router_policy_must_be_one_the_router_accepts(tmp_path, engine, policy, ok):
    gv = vllm_b200_disagg(glmops_engine=engine)
    gv["glmops_topologies"]["disagg"]["router"]["policy"] = policy
    _dep, _plan, problems = run(tmp_path, gv)
    found = [p for p in problems if p.code == "ROUTER_POLICY"]
    if ok:
        assert found == []
    else:
        assert len(found) == 1
        msg = found[0].message
        assert repr(policy) in msg and "accepted:" in msg and "round_robin" in msg
        assert found[0].path.endswith("router.policy")


# ---------------------------------------------------------------------------- names and secrets


@pytest.mark.parametrize("name", ["bad name/../x", "../../tmp/ESCAPED", "Upper", ""])
def test_deployment_name_must_be_safe_for_unit_and_file_names(tmp_path, name):
    _dep, _plan, problems = run(tmp_path, vllm_b200_disagg(glmops_deployment=name or "-"))
    found = [p for p in problems if p.code == "DEPLOYMENT_NAME"]
    assert len(found) == 1 and "glmops_deployment" in found[0].path
    assert "a-z, 0-9" in found[0].message


def test_secret_engine_flags_are_refused_with_every_other_problem(tmp_path):
    gv = vllm_b200_disagg(glmops_engine_args={"api-key": "sk-NOT-IN-ARGV", "max-num-batched-tokens": 4096},
                          glmops_deployment="ok-name")
    gv["glmops_topologies"]["disagg"]["pools"]["decode"]["engine_args"] = {"hf_token": "hf_x"}
    _dep, _plan, problems = run(tmp_path, gv)
    found = sorted(p.message.split("'")[1] for p in problems if p.code == "SECRET_IN_ARGV")
    assert found == ["api-key", "hf_token"]  # token-count flags are not secrets
    assert all("sk-NOT-IN-ARGV" not in str(p) for p in problems)


def test_secrets_in_router_args_config_keys_and_underscore_flags_are_refused(tmp_path):
    gv = vllm_b200_disagg(glmops_engine_args={"API_KEY": "sk-A"},
                          glmops_engine_config={"auth": {"hf_token": "hf_B"}})
    gv["glmops_topologies"]["disagg"]["router"]["args"] = {"api-key": "sk-C"}
    _dep, _plan, problems = run(tmp_path, gv)
    secret = [p for p in problems if p.code == "SECRET_IN_ARGV"]
    text = "\n".join(p.message for p in secret)
    assert "engine flag 'API_KEY'" in text and "router flag 'api-key'" in text
    assert "engine config key 'auth.hf_token'" in text and "YAML config" in text
    assert not any(v in str(p) for p in problems for v in ("sk-A", "hf_B", "sk-C"))
    assert not any("pools.pools" in p.path for p in problems)


def test_an_unknown_engine_does_not_hide_the_other_problems(tmp_path):
    """Every problem at once: with glmops_engine unknown, the checks that need only the model,
    variant and hardware still run (pools vs GPUs, max_seq_len)."""
    gv = trtllm_b200("agg", glmops_engine="trtlm", glmops_max_seq_len=2_000_000)
    gv["glmops_topologies"]["agg"]["pools"]["agg"]["tp"] = 16
    _d, _p, problems = run(tmp_path, gv)
    got = codes(problems)
    assert {"CATALOG_KEY", "GPU_COUNT", "MAX_SEQ_LEN"} <= set(got), problems
    assert any("trtlm" in p.message and "accepted:" in p.message for p in problems)


def test_an_empty_gpu_list_says_what_to_set(tmp_path):
    hosts = {"gpu-a": {"ansible_host": "10.0.0.11", "glmops_gpus": []}}
    _d, _p, problems = run(tmp_path, trtllm_b200("agg"), hosts=hosts)
    assert codes(problems) == ["GPU_INDEX"], problems
    msg = problems[0].message
    assert "glmops_gpus [] lists no GPU" in msg and "0..7" in msg and "unset for all 8" in msg
    assert "<= 0" not in msg


def test_a_huge_replica_count_is_refused_at_once_not_planned(tmp_path):
    import time as _t

    gv = trtllm_b200("agg")
    gv["glmops_topologies"]["agg"]["pools"]["agg"]["replicas"] = 1_000_000_000
    start = _t.monotonic()
    _d, plan, problems = run(tmp_path, gv)
    assert _t.monotonic() - start < 10
    assert plan is None and codes(problems) == ["PARALLELISM"]
    assert "replicas 1000000000 is not accepted; accepted: an integer 1..65536" in problems[0].message


@pytest.mark.parametrize("where,port,needle", [
    ("router", -1, "[-1]"), ("router", 22, "[22]"), ("pool", 65535, "[65536]"),
])
def test_ports_outside_the_unprivileged_range_are_refused(tmp_path, where, port, needle):
    gv = trtllm_b200("disagg")
    topo = gv["glmops_topologies"]["disagg"]
    if where == "router":
        topo["router"]["port"] = port
    else:  # 2 context replicas on one host: the second takes port + 1
        topo["pools"]["context"].update(tp=2, ep=2, replicas=2, port=port)
    _d, _p, problems = run(tmp_path, gv)
    msgs = [p.message for p in problems if p.code == "PORT"]
    assert any(needle in m and "accepted: 1024..65535" in m for m in msgs), problems


def test_an_unknown_topology_is_one_choice_problem_and_no_pools_problem(tmp_path):
    """A fresh-user trial: `plan -e glmops_topology=disag` also got a POOLS problem pointing at
    group_vars/all.yml's glmops_topologies.disag.pools, a file the user never touched."""
    dep, plan, problems = run(tmp_path, vllm_b200_disagg(glmops_topology="disag"))
    assert plan is None and codes(problems) == ["CHOICE"], problems
    assert "glmops_topology 'disag' is not accepted; accepted: agg, disagg" in problems[0].message
