"""The secret patterns of glmops.model run in linear time on any value (the adversarial probe:
a 20,000-character served model name took 7 s in SECRET_VALUE, 100,000 characters timed out),
still match what they matched, and a huge value is shortened in a problem."""
from __future__ import annotations

import time

import pytest
from inventory_factory import vllm_b200_disagg, write_inventory
from test_probe_hardening import _problems

from glmops.model import SECRET_NAME, SECRET_VALUE, Problem, _SECRET_VALUE_TOKEN


def _timed(fn, limit_s: float):
    start = time.monotonic()
    out = fn()
    assert time.monotonic() - start < limit_s, f"took {time.monotonic() - start:.1f} s"
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
