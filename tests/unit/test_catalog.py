"""The catalog: every entry names its source, lookups fail clearly, the seed facts are there."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from glmops import catalog

SEEDS = {
    "seeds/000_02b3db4c668ba297.txt",
    "seeds/001_45b716f972606a07.txt",
    "seeds/002_5e664c6e94ff2f6a.txt",
    "seeds/004_1623a49a49212f9f.txt",
}
SHARED = Path("/work/shared")


def _entries(cat: catalog.Catalog):
    for key, entry in cat.models.items():
        yield f"models.{key}", entry
        for vkey, variant in entry["variants"].items():
            yield f"models.{key}.variants.{vkey}", variant
        for dkey, drafter in (entry.get("drafters") or {}).items():
            yield f"models.{key}.drafters.{dkey}", drafter
    for key, entry in cat.hardware.items():
        yield f"hardware.{key}", entry
    yield "hardware.policy", cat.policy
    for key, entry in cat.engines.items():
        yield f"engines.{key}", entry
    for entry in cat.layouts:
        yield f"layouts.{entry.get('id')}", entry
    for entry in cat.recipes:
        yield f"engine_recipes.{entry.get('id')}", entry


def test_every_entry_has_a_source():
    cat = catalog.load()
    entries = list(_entries(cat))
    assert len(entries) > 40
    missing = [name for name, entry in entries if not str(entry.get("source") or "").strip()]
    assert missing == []


def test_sources_name_real_seed_files_or_upstream_docs():
    cat = catalog.load()
    texts = []
    for _name, entry in _entries(cat):
        texts.append(str(entry["source"]))
        texts += [str(v) for v in (entry.get("sources") or {}).values()]
    named = {m for t in texts for m in re.findall(r"seeds/\d{3}_[0-9a-f]{16}\.txt", t)}
    assert named and named <= SEEDS, named - SEEDS
    if (SHARED / "seeds").is_dir():  # the read-only seed dir exists on the dev machine
        for name in named:
            assert (SHARED / name).is_file(), name
    for t in texts:
        assert re.search(r"seeds/|reference/|lab-recipe/|vendor spec|glmops policy|none:", t), t


def test_per_field_sources_name_existing_fields():
    cat = catalog.load()
    for name, entry in _entries(cat):
        for field in entry.get("sources") or {}:
            top = field.split(".")[0]
            assert top in entry, f"{name}: sources names {field!r} but the entry has no {top!r}"


def test_load_is_cached():
    assert catalog.load() is catalog.load()


@pytest.mark.parametrize("call,kind,key", [
    (lambda c: c.hw("h300"), "hardware", "h300"),
    (lambda c: c.engine("tgi"), "engine", "tgi"),
    (lambda c: c.model("glm-4"), "model", "glm-4"),
    (lambda c: c.variant("glm-5.3-flash", "w4a8"), "variant of glm-5.3-flash", "w4a8"),
])
def test_unknown_keys_list_accepted(call, kind, key):
    with pytest.raises(catalog.CatalogKeyError) as err:
        call(catalog.load())
    text = str(err.value)
    assert f"unknown {kind} {key!r}" in text
    assert "accepted:" in text
    assert err.value.accepted  # and the list is not empty
    for accepted in err.value.accepted:
        assert accepted in text


def test_models_hold_the_seed_facts():
    cat = catalog.load()
    flash = cat.model("glm-5.3-flash")
    assert (flash["params_total_b"], flash["params_active_b"], flash["layers"]) == (321, 18, 45)
    assert (flash["experts"], flash["experts_per_token"], flash["mtp_layers"]) == (288, 8, 1)
    assert flash["max_context"] == 1_048_576
    assert cat.variant("glm-5.3-flash", "fp8")["repo"] == "zai-org/GLM-5.3-Flash"
    assert cat.variant("glm-5.3-flash", "fp8")["weight_gib"] == 306
    assert cat.variant("glm-5.3-flash", "bf16")["weight_gib"] == 2 * 306
    nv = cat.variant("glm-5.3-flash", "nvfp4")
    assert nv["repo"] == "RadixArk/GLM-5.3-Flash-NVFP4"
    assert nv["revision"] == "f46cf340d35a22d0d83d0c1dac8957cf2b1bcd35"
    glm = cat.model("glm-5.3")
    assert (glm["params_total_b"], glm["params_active_b"]) == (743, 39)
    assert set(glm["variants"]) == {"fp8", "bf16", "nvfp4", "w4a8"}
    assert cat.variant("glm-5.3", "bf16")["multi_node_only"] is True
    assert cat.variant("glm-5.3", "nvfp4")["repo"] == "Inferact/GLM-5.3-NVFP4"
    assert cat.variant("glm-5.3", "nvfp4")["requires_arch_family"] == "blackwell"
    assert flash["parsers"]["trtllm"] == {"tool": "glm47", "reasoning": "deepseek-r1"}
    assert flash["parsers"]["vllm"] == {"tool": "glm47", "reasoning": "glm45"}
    assert glm["parsers"]["vllm"] == {"tool": "glm47", "reasoning": "glm47"}


def test_hardware_covers_seed_004_and_the_lab():
    cat = catalog.load()
    seed_004 = "h100 h200 b200 gb200 b300 gb300 dgx_station_gb300 mi300x mi325x mi350x mi355x ascend_950pr_8x".split()
    for key in seed_004 + ["h20", "cpu"]:
        hw = cat.hw(key)
        for field in ("arch", "arch_family", "gpu_memory_gib", "gpus_per_node", "cpu_arch", "nvswitch", "mnnvl", "imex", "vendor"):
            assert field in hw, (key, field)
    assert cat.hw("h200")["arch"] == "sm90" and cat.hw("b200")["arch"] == "sm100"
    assert cat.hw("gb200")["gpus_per_node"] == 4 and cat.hw("gb200")["mnnvl"] is True
    assert cat.hw("mi355x")["arch"] == "gfx950" and cat.hw("mi300x")["arch"] == "gfx942"
    assert cat.hw("cpu")["gpus_per_node"] == 0


def test_engines_hold_versions_images_and_pins():
    cat = catalog.load()
    trt = cat.engine("trtllm")
    assert trt["min_version"] == "1.3.0rc29"
    assert trt["default_image"] == "nvcr.io/nvidia/tensorrt-llm/release:1.3.0rc29"
    assert trt["driver_min"] == 575
    assert "transformers==5.17.0" in trt["multimodal_pip"]
    assert {"fla-core", "einops"} <= set(trt["pip"])
    vllm = cat.engine("vllm")
    assert vllm["min_version_by_model"]["glm-5.3"] == "0.29.0"
    assert (vllm["flashinfer_min"], vllm["flashinfer_recommended"]) == ("0.6.17", "0.6.18")
    assert vllm["disagg_env"]["VLLM_SSM_CONV_STATE_LAYOUT"] == "DS"
    assert vllm["disagg_env"]["VLLM_KV_CACHE_LAYOUT"] == "HND"
    assert vllm["env_by_model"]["glm-5.3"]["VLLM_USE_RUST_FRONTEND"] == "1"
    assert vllm["rocm_env"]["VLLM_ROCM_USE_AITER"] == "1"
    assert vllm["image_by_model"]["glm-5.3-flash"] == "vllm/vllm-openai:glm53-flash"
    assert "fp8" not in cat.engine("sglang")["kv_cache_dtype"]["accepted"]


def test_layout_lookup():
    cat = catalog.load()
    layout = cat.layout("trtllm", "b200", "disagg")
    assert layout["pools"]["prefill"]["gpus"] == [0, 1, 2, 3]
    assert layout["pools"]["decode"]["gpus"] == [4, 5, 6, 7]
    assert cat.layout("vllm", "h200", "agg", "glm-5.3-flash")["pools"]["agg"]["tp"] == 8
    assert cat.layout("trtllm", "mi355x", "agg") is None
