"""recipes.yaml:engine_recipes: every entry names its source and uses only known keys/facts,
and the merge order gives later, more specific entries the last word."""
from __future__ import annotations

from plan_helpers import dep

from glmops.engines import base
from glmops.model import PoolSpec

KEYS = {"id", "source", "match", "settings", "args", "config", "env", "kv_transfer"}
FACTS = {"engine", "backend", "model", "variant", "hardware", "vendor", "topology", "runtime",
         "max_seq_len", "role", "attention_dp"}


def test_every_entry_has_a_source_and_known_keys():
    entries = base.CATALOG.recipes()
    assert entries
    ids = [e["id"] for e in entries]
    assert len(ids) == len(set(ids))
    for e in entries:
        assert set(e) <= KEYS, (e["id"], set(e) - KEYS)
        assert str(e.get("source", "")).startswith(("seeds/", "lab-recipe/", "reference/")), e["id"]
        assert set(e["match"]) <= FACTS, (e["id"], set(e["match"]) - FACTS)


def test_role_entries_override_pool_wide_ones():
    d = dep(engine="dynamo", hardware="gb200", topology="disagg", variant="nvfp4", repo="RadixArk/GLM-5.3-Flash-NVFP4",
            n_hosts=3, gpus=4, extra={"dynamo_backend": "sglang"},
            pools=[PoolSpec(role="prefill", tp=4, ep=4, replicas=2), PoolSpec(role="decode", tp=4)])
    pre = base.settings_for(d, d.pools[0])
    dec = base.settings_for(d, d.pools[1])
    assert pre.speculative is None and dec.speculative["method"] == "eagle"
    assert pre.recipe.args["mem-fraction-static"] == 0.70 and dec.recipe.args["mem-fraction-static"] == 0.82
    assert dec.recipe.args["hicache-size"] is None  # removed on decode
    assert pre.recipe.ids[0] == "sglang-flash" and pre.recipe.ids[-1] == "sglang-flash-disagg-prefill"


def test_inventory_values_win_over_recipe_settings():
    d = dep(engine="trtllm", hardware="b200", gpus=4, pools=[PoolSpec(role="agg", tp=4, ep=4)], max_batch_size=32,
            kv_cache_dtype="fp8")
    st = base.settings_for(d, d.pools[0])
    assert (st.max_batch_size, st.max_num_tokens, st.kv_cache_dtype) == (32, 16384, "fp8")
