"""F25 (issue 14 item 7): the memory-fit rule counts the configured memory fraction (vLLM
``--gpu-memory-utilization``, SGLang ``--mem-fraction-static`` of the GPU; TensorRT-LLM
``kv_cache_config.free_gpu_memory_fraction`` of what the weights leave) and the KV cache of one
sequence of the configured maximum length (catalog ``models.<m>.kv_cache``: GLM-5.x MLA, 78 layers x
576 elements per token)."""
from __future__ import annotations

from inventory_factory import REV, agg, write_inventory

from glmops import rules
from glmops.inventory import load_deployment


def problems(tmp_path, gv, name="inv"):
    gv = {"glmops_checkpoint": {"revision": REV}, **gv}
    return rules.validate(load_deployment(write_inventory(tmp_path / name, gv)))[1]


def f25(**over):
    """glm-5.3 fp8 on 8x H200, tp 8, max_seq_len 1048576, gpu-memory-utilization 0.62 (field case F25)."""
    gv = agg("glm-5.3", "vllm", "h200", 8, glmops_max_seq_len=1048576,
             glmops_engine_args={"gpu-memory-utilization": 0.62})
    gv.update(over)
    return gv


def test_f25_is_refused_naming_weights_budget_and_flag(tmp_path):
    (p,) = problems(tmp_path, f25())
    assert p.code == "MEMORY_FIT" and p.severity == "error"
    assert p.path.endswith("glmops_engine_args.gpu-memory-utilization")
    m = p.message
    assert "86.5 GiB per GPU" in m                                  # 692 GiB / 8
    assert "gpu-memory-utilization 0.62 x 141 GiB (H200) = a budget of 87.4 GiB" in m
    assert "leaves 0.9 GiB" in m                                    # "about 0.9 GiB per GPU left after weights"
    assert "1,048,576-token sequence" in m and "78 layers x 576" in m
    assert "accepted: gpu-memory-utilization >= " in m and "max_seq_len <= " in m


def test_f25_passes_with_a_fraction_or_length_that_fits(tmp_path):
    assert problems(tmp_path, f25(glmops_engine_args={"gpu-memory-utilization": 0.95}), "hi") == []
    assert problems(tmp_path, f25(glmops_max_seq_len=16384), "short") == []


def test_the_fraction_alone_below_the_weights_is_refused_without_a_length(tmp_path):
    gv = f25(glmops_engine_args={"gpu-memory-utilization": 0.5})
    del gv["glmops_max_seq_len"]
    (p,) = problems(tmp_path, gv)
    assert p.code == "MEMORY_FIT" and "nothing for the KV cache" in p.message and "70.5 GiB" in p.message


def test_a_pool_override_names_the_pool_key(tmp_path):
    gv = f25(glmops_engine_args={})
    gv["glmops_topologies"]["agg"]["pools"]["agg"]["engine_args"] = {"gpu_memory_utilization": 0.62}
    (p,) = problems(tmp_path, gv)
    assert p.code == "MEMORY_FIT" and p.path.endswith("pools.agg.engine_args.gpu_memory_utilization")


def test_sglang_mem_fraction_static_counts(tmp_path):
    gv = agg("glm-5.3", "sglang", "h200", 8, glmops_max_seq_len=1048576, glmops_kv_cache_dtype="fp8",
             glmops_engine_args={"mem-fraction-static": 0.62})
    (p,) = problems(tmp_path, gv)
    assert p.code == "MEMORY_FIT" and "mem-fraction-static 0.62" in p.message


def test_trtllm_free_fraction_is_of_what_the_weights_leave(tmp_path):
    gv = agg("glm-5.3", "trtllm", "b200", 8, glmops_max_seq_len=1048576, glmops_kv_cache_dtype="fp8",
             glmops_engine_config={"kv_cache_config": {"free_gpu_memory_fraction": 0.3}})
    (p,) = problems(tmp_path, gv)
    assert p.code == "MEMORY_FIT" and "free_gpu_memory_fraction 0.3 of the 93.5 GiB left" in p.message
    gv["glmops_engine_config"] = {"kv_cache_config": {"free_gpu_memory_fraction": 0.6}}
    assert [x.code for x in problems(tmp_path, gv, "ok")] == []
