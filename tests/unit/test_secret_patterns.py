"""The secret patterns of glmops.model run in linear time on any value (the adversarial probe:
a 20,000-character served model name took 7 s in SECRET_VALUE, 100,000 characters timed out),
still match what they matched, and a huge value is shortened in a problem."""
from __future__ import annotations

import time

import pytest
from inventory_factory import vllm_b200_disagg, write_inventory
from test_probe_hardening import _problems

from glmops.model import SECRET_NAME, SECRET_VALUE, Problem, _SECRET_VALUE_TOKEN, is_secret, secret_paths


def _timed(fn, limit_s: float):
    """``fn()``, asserting it used under ``limit_s`` seconds of this process's CPU (not wall
    time: a loaded CI machine stretched a 0.1 s search to 2.3 s of wall time; a backtracking
    pattern burns CPU, which the load does not change)."""
    start = time.process_time()
    out = fn()
    used = time.process_time() - start
    assert used < limit_s, f"took {used:.1f} s of CPU"
    return out


# ------------------------------------------------------------ 3. linear secret patterns


@pytest.mark.parametrize("text", ["a" * 100_000, "a:" * 50_000, "x://" + "a" * 100_000, "-----BEGIN " + "A" * 100_000,
                                  "a-" * 50_000, "x://a:b" * 15_000])
def test_the_secret_patterns_are_linear(text):
    for pattern in (SECRET_VALUE, _SECRET_VALUE_TOKEN, SECRET_NAME):
        _timed(lambda: pattern.search(text), 1.0)


def test_the_secret_patterns_still_match_what_they_did():
    for text in ("https://u:p@h/x", "postgres://user:pw@db", "-hf_" + "a" * 30, "sk-" + "a" * 20,
                 "-----BEGIN RSA PRIVATE KEY-----", "-----BEGIN PRIVATE KEY-----"):
        assert SECRET_VALUE.search(text), text
    for text in ("http://host:8000/x", "xhf_" + "a" * 30, "-----BEGIN PUBLIC KEY-----", "tiny-llama"):
        assert not SECRET_VALUE.search(text), text


def test_a_huge_value_is_quick_and_shortened_in_its_problem(tmp_path):
    gv = vllm_b200_disagg(glmops_served_model_name="a" * 100_000 + "\n")
    problems = _timed(lambda: _problems(write_inventory(tmp_path / "inv", gv)), 10)
    assert problems and all(len(str(p)) < 2_000 for p in problems), [len(str(p)) for p in problems]
    assert any("chars)" in str(p) for p in problems), problems
    assert all("accepted" in p.message for p in problems), problems
    assert len(str(Problem("X", "p", f"value {'b' * 5000!r} is bad"))) < 300


# ------------------------------------------------------------ D8: a key name is not a secret


@pytest.mark.parametrize("name", ["prefix_key", "kv_cache_key", "kv-cache-key-prefix", "routing-key", "partition_key",
                                  "lookup_keys", "disagg-config-key"])
def test_a_config_key_whose_name_merely_ends_in_key_is_not_a_secret(name):
    # D8: SECRET_IN_ARGV refused `prefix_key` (a lookup key's name, not a credential)
    data = {"kv-transfer-config": {"kv_connector_extra_config": {name: "glm53"}}, name: "glm53"}
    assert secret_paths(data) == []


@pytest.mark.parametrize("data,found", [
    ({"api-key": "x"}, ["api-key"]), ({"admin-api-key": "x"}, ["admin-api-key"]),
    ({"control-plane-api-keys": ["a"]}, ["control-plane-api-keys"]), ({"key": "x"}, ["key"]),
    ({"ssl-keyfile-password": "x"}, ["ssl-keyfile-password"]), ({"hf-token": "x"}, ["hf-token"]),
    ({"auth": {"key": "x"}}, ["auth", "auth.key"]), ({"cfg": {"private_key": "x"}}, ["cfg", "cfg.private_key"]),
    ({"cfg": [{"api_key": "x"}]}, ["cfg"]),
    ({"prefix_key": "hf_" + "a" * 32}, ["prefix_key"]),   # a secret value is one whatever its key's name
])
def test_secret_option_names_still_found(data, found):
    assert secret_paths(data) == found


def test_env_names_keep_the_broad_pattern():
    for name in ("OPENAI_KEY", "SSH_KEY", "PRIVATE_KEY"):
        assert is_secret(name)


def test_secret_in_argv_passes_a_prefix_key_and_refuses_an_api_key(tmp_path):
    from glmops import rules
    from glmops.inventory import load_deployment

    gv = vllm_b200_disagg(glmops_engine_args={"hf-overrides": {"prefix_key": "glm", "kv_cache_key": "k"}})
    dep = load_deployment(write_inventory(tmp_path / "ok", gv))
    assert [p for p in rules.check(dep) if p.code == "SECRET_IN_ARGV"] == []
    gv = vllm_b200_disagg(glmops_engine_args={"hf-overrides": {"prefix_key": "glm"}, "api-key": "x"})
    dep = load_deployment(write_inventory(tmp_path / "bad", gv))
    bad = [p for p in rules.check(dep) if p.code == "SECRET_IN_ARGV"]
    assert len(bad) == 1 and "'api-key'" in bad[0].message
