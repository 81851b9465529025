"""Issue 14 item 5 (part): combinations the pinned engines refuse or break on, from the catalog's
per-engine table (``engines.<engine>.compat``, glmops/engines/compat.py), rule ENGINE_COMBINATION.

Sources of the expectations: /work/shared/cases/field-cases.md F02 ("engine vllm, disagg with NIXL,
prefill tp 4, decode tp 1, at the pinned vLLM version. Expect: validate fails naming both TP values and
the engine version ...; tp 4 / tp 4 passes"), https://github.com/vllm-project/vllm/issues/43523 (closed by
the maintainers: prefill TP above decode TP landed in vllm#27274, before every pinned version) and
https://github.com/vllm-project/vllm/pull/49297 (the same split for hybrid MLA + SSM-state models such as
GLM-5.3-Flash, fixed on main 2026-07-22, first release not verified);
MTP + pipeline parallelism for GLM-5.x: https://github.com/vllm-project/recipes/issues/875; seed 001
("Video input is unavailable in the SGLang disaggregated recipe because frontend decoding is unsupported
on this path").
"""
from __future__ import annotations

from click.testing import CliRunner
from inventory_factory import REV, vllm_b200_disagg, write_inventory

from glmops import catalog, rules
from glmops.cli import main
from glmops.inventory import load_deployment

PINNED_VLLM = str(catalog.load().engines["vllm"]["version"])        # catalog engines.vllm.version
DYNAMO_VLLM = str(catalog.load().engines["dynamo"]["backend_versions"]["vllm"])  # "Dynamo 1.6.1 pins vllm==0.31.0"


def combos(gv, tmp_path, hosts=None):
    dep = load_deployment(write_inventory(tmp_path / "inv", gv, hosts=hosts))
    return [p for p in rules.check(dep) if p.code == "ENGINE_COMBINATION"]


def f02(prefill_tp: int, decode_tp: int, **over) -> dict:
    gv = vllm_b200_disagg(**over)
    pools = gv["glmops_topologies"]["disagg"]["pools"]
    pools["prefill"].update(tp=prefill_tp, gpus=list(range(prefill_tp)))
    pools["decode"].update(tp=decode_tp, gpus=list(range(4, 4 + decode_tp)))
    return gv


def test_f02_vllm_nixl_prefill_tp4_decode_tp1_fails_naming_both_and_the_version(tmp_path):
    inv = write_inventory(tmp_path / "inv", f02(4, 1))
    res = CliRunner().invoke(main, ["validate", "-i", str(inv)])
    assert res.exit_code == 2, res.output
    (line,) = [ln for ln in res.output.splitlines() if "[ENGINE_COMBINATION]" in ln]
    assert "prefill tp 4 with decode tp 1" in line and f"vLLM {PINNED_VLLM} for glm-5.3-flash" in line
    assert "vllm-project/vllm/pull/49297" in line and "vllm-project/vllm/issues/43523" in line
    assert "accepted: prefill tp <= decode tp" in line


def test_f02_a_pure_mla_model_is_not_refused_at_the_pinned_version(tmp_path):
    # vllm#43523 was an old llm-d build; P TP > D TP is supported since vllm#27274 for MLA/dense models
    gv = f02(4, 1, glmops_model="glm-5.3", glmops_variant="fp8")
    assert combos(gv, tmp_path) == []


def test_f02_equal_tp_passes(tmp_path):
    assert combos(f02(4, 4), tmp_path) == []


def test_f02_decode_wider_than_prefill_is_not_the_reported_crash(tmp_path):
    assert combos(f02(2, 4), tmp_path) == []


def test_f02_a_version_outside_the_reported_range_is_not_refused(tmp_path):
    # the table entry's specifier "<=0.33.0": a later release is not covered by the report
    assert combos(f02(4, 1, glmops_engine_version="0.34.0"), tmp_path) == []


def test_f02_under_dynamo_names_dynamos_vllm(tmp_path):
    gv = f02(4, 1, glmops_engine="dynamo", glmops_dynamo_backend="vllm")
    (p,) = combos(gv, tmp_path)
    assert "prefill tp 4 with decode tp 1" in p.message and f"vLLM {DYNAMO_VLLM}" in p.message


def _glm53_pp(speculative=None) -> dict:
    gv = {"glmops_model": "glm-5.3", "glmops_variant": "fp8", "glmops_engine": "vllm", "glmops_hardware": "h200",
          "glmops_topology": "agg", "glmops_runtime": "venv", "glmops_checkpoint": {"revision": REV},
          "glmops_topologies": {"agg": {"pools": {"agg": {"tp": 8, "pp": 2}}}}}
    if speculative:
        gv["glmops_speculative"] = speculative
    return gv


HOSTS2 = {"gpu-a": {"ansible_host": "10.0.0.11"}, "gpu-b": {"ansible_host": "10.0.0.12"}}


def test_mtp_with_pipeline_parallel_is_refused_for_glm(tmp_path):
    # seed 004 "FP8 on 8xH200 (standard): ... MTP 5" is the recipe default; pp 2 over two nodes
    (p,) = combos(_glm53_pp(), tmp_path, hosts=HOSTS2)
    assert "pp 2" in p.message and "'mtp'" in p.message and f"vLLM {PINNED_VLLM}" in p.message
    assert "vllm-project/recipes/issues/875" in p.message


def test_pipeline_parallel_without_speculation_passes(tmp_path):
    assert combos(_glm53_pp({"method": "none"}), tmp_path, hosts=HOSTS2) == []


def test_sglang_disaggregated_frontend_decoding_is_refused(tmp_path):
    gv = {"glmops_model": "glm-5.3-flash", "glmops_variant": "nvfp4", "glmops_engine": "dynamo",
          "glmops_dynamo_backend": "sglang", "glmops_hardware": "b200", "glmops_topology": "disagg",
          "glmops_runtime": "venv", "glmops_checkpoint": {"revision": REV},
          "glmops_engine_args": {"frontend-decoding": True},
          "glmops_topologies": {"disagg": {"pools": {"prefill": {"tp": 4, "gpus": [0, 1, 2, 3]},
                                                     "decode": {"tp": 4, "gpus": [4, 5, 6, 7]}}}}}
    found = combos(gv, tmp_path)
    assert found and all("frontend-decoding" in p.message and "seeds/001" in p.message for p in found)
    gv["glmops_topology"] = "agg"
    gv["glmops_topologies"] = {"agg": {"pools": {"agg": {"tp": 4}}}}
    assert combos(gv, tmp_path / "agg") == []        # "Aggregated workers enable --frontend-decoding"


def test_trtllm_attention_dp_with_other_max_num_tokens_is_noted_not_refused(tmp_path):
    # seed 000 enable_attention_dp: "When enabled, use --max_num_tokens 4096 for the configuration above"
    # (a recommendation: the plan says it, validate passes)
    import re
    from pathlib import Path

    from glmops import plan
    seed = Path("/work/shared/seeds/000_02b3db4c668ba297.txt")
    text = seed.read_text(encoding="utf-8") if seed.exists() else "When enabled, use --max_num_tokens 4096"
    want = int(re.search(r"When enabled, use --max_num_tokens (\d+)", text).group(1))
    gv = {"glmops_model": "glm-5.3-flash", "glmops_engine": "trtllm", "glmops_hardware": "b200",
          "glmops_topology": "agg", "glmops_runtime": "venv", "glmops_checkpoint": {"revision": REV},
          "glmops_max_num_tokens": 8192,
          "glmops_topologies": {"agg": {"pools": {"agg": {"tp": 4, "ep": 4, "attention_dp": True}}}}}
    dep = load_deployment(write_inventory(tmp_path / "inv", gv))
    assert not [p for p in rules.check(dep) if p.code == "ENGINE_COMBINATION"]
    notes = [n for n in plan.build(dep).notes if "attention DP" in n]
    assert len(notes) == 1 and "max_num_tokens 8192" in notes[0] and f"says {want}" in notes[0]
    gv["glmops_max_num_tokens"] = want
    dep = load_deployment(write_inventory(tmp_path / "inv2", gv))
    assert not [n for n in plan.build(dep).notes if "attention DP" in n]


def test_every_compat_entry_has_a_known_kind_its_own_keys_and_a_source():
    from glmops.engines import compat
    common = {"id", "kind", "specifier", "says", "accepted", "source"}
    entries = [(name, e) for name, eng in catalog.load().engines.items() for e in eng.get("compat") or []]
    assert {e["kind"] for _, e in entries} == set(compat.KINDS)       # every kind is used and checked
    for name, entry in entries:
        assert entry["kind"] in compat.KINDS, (name, entry)
        assert set(entry) - common <= compat.KINDS[entry["kind"]], (name, entry["id"])
        assert all(str(entry.get(k) or "").strip() for k in ("id", "says", "accepted", "source")), (name, entry)
        assert "seeds/" in entry["source"] or "https://github.com/" in entry["source"], (name, entry["id"])
        if entry["kind"] == "not_rendered":
            assert str(entry.get("why") or "").strip(), (name, entry["id"])
