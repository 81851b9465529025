"""Facts once (issue 18, item 4, the engines' part): the rules read the catalog's facts, so
changing the catalog changes what is accepted; one home for what counts as a secret."""
from __future__ import annotations

from pathlib import Path

from inventory_factory import trtllm_b200, write_inventory

from glmops import catalog, model, rules
from glmops.engines import base
from glmops.inventory import load_deployment


def _problems(tmp_path: Path, gv: dict, name: str = "inv"):
    return rules.validate(load_deployment(write_inventory(tmp_path / name, gv)))[1]


def test_the_mtp_draft_length_range_is_the_catalogs(tmp_path, monkeypatch):
    spec = catalog.load().engines["trtllm"]["speculative"]
    assert spec["mtp_max_draft_len"] == {"min": 1, "max": 5}
    monkeypatch.setitem(spec, "mtp_max_draft_len", {"min": 2, "max": 3})
    for n, ok in ((1, False), (2, True), (3, True), (4, False)):
        gv = trtllm_b200("agg", glmops_speculative={"method": "mtp", "num_speculative_tokens": n})
        problems = _problems(tmp_path, gv, name=f"n{n}")
        assert ([p.code for p in problems] == []) is ok, (n, problems)
        if not ok:
            assert "accepted: 2..3" in problems[0].message
    gv = trtllm_b200("agg", glmops_engine_config={"speculative_config": {"decoding_type": "MTP", "max_draft_len": 4}})
    assert "accepted: 2..3" in _problems(tmp_path, gv, name="cfg")[0].message


def test_the_transformers_pin_is_the_catalogs(tmp_path, monkeypatch):
    entry = catalog.load().engines["trtllm"]
    assert "transformers==5.17.0" in entry["multimodal_pip"]
    monkeypatch.setitem(entry, "multimodal_pip", ["transformers==9.9.9"])
    gv = trtllm_b200("agg", glmops_multimodal=True, glmops_pip_extra=["transformers==5.17.0"])
    problems = _problems(tmp_path, gv)
    assert [p.code for p in problems] == ["TRANSFORMERS_PIN"] and "accepted: transformers==9.9.9" in problems[0].message


def test_one_home_for_secrets():
    assert base.HUB_TOKEN_VARS is model.HUB_TOKEN_VARS
    data = {"api-key": "x", "nested": {"url": "https://u:p@host/x", "n": 3}, "list": ["hf_" + "a" * 34]}
    assert model.secret_paths(data) == ["api-key", "nested", "nested.url", "list"]
    assert not hasattr(rules, "_secret_keys")
