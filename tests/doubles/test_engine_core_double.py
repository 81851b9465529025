"""The shared engine-double core: the stdlib YAML subset parser (used on lab hosts without
PyYAML) agrees with PyYAML, and refuses what it cannot read."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml

from conftest import HERE
from engine_http_double import YamlError, _example_for, parse_option_list, parse_yaml_subset
from test_trtllm_serve_double import SEED000_CTX, SEED000_DISAGG, SEED000_GEN

DOCS = [
    SEED000_CTX, SEED000_GEN, SEED000_DISAGG,
    "a: 1\nb: -2.5\nc: 'x: y'\nd: \"q#\"  # comment\ne: [1, 2, 'three']\nf: {g: 1, h: null}\n",
    "list:\n- a\n- b: 1\n  c: [x]\n-\n  - nested\nempty:\nt: True\nn: ~\n",
    "top:\n  urls:\n    - \"localhost:8001\"\n    - localhost:8002\n  num: 2\n",
]


@pytest.mark.parametrize("doc", DOCS)
def test_subset_parser_matches_pyyaml(doc):
    assert parse_yaml_subset(doc) == yaml.safe_load(doc)


@pytest.mark.parametrize("doc", ["a: &x 1\nb: *x\n", "a: |\n  text\n", "a: 1\na: 2\n",
                                 "a:\n\tb: 1\n"])
def test_subset_parser_refuses_what_it_cannot_read(doc):
    with pytest.raises(YamlError):
        parse_yaml_subset(doc)


def test_double_without_pyyaml_reads_seed_config(tmp_path):
    """`python -S`: no site-packages, so no PyYAML, as on a bare lab host."""
    cfg = tmp_path / "gen.yml"
    cfg.write_text(SEED000_GEN)
    r = subprocess.run([sys.executable, "-S", HERE / "trtllm_serve_double.py", str(tmp_path),
                        "--config", cfg], capture_output=True, text=True, timeout=30,
                       env={"DOUBLE_DRY_RUN": "1", "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["llm_args"] == yaml.safe_load(SEED000_GEN)


def test_option_list_parser_fields():
    specs = parse_option_list("--ep-size --expert-parallel-size --ep | action=_StoreAction "
                              "nargs=None type=int default=1 choices=None\n"
                              "--policy | nargs=None default='cache_aware' choices=['random', "
                              "'round_robin']\n")
    assert specs[0]["names"] == ["--ep-size", "--expert-parallel-size", "--ep"]
    assert (specs[0]["type"], specs[0]["default"]) == ("int", 1)
    assert specs[1]["choices"] == ["random", "round_robin"] and specs[1]["action"] is None


def test_schema_examples_satisfy_types():
    schema = {"type": "object", "properties": {
        "n": {"type": "integer", "minimum": 3}, "tags": {"type": "array", "items": {"type": "string"},
                                                          "minItems": 2},
        "mode": {"enum": ["fast", "slow"]}, "opt": {"type": ["null", "boolean"]}}}
    assert _example_for(schema) == {"n": 3, "tags": ["tags-1", "tags-1"], "mode": "fast",
                                    "opt": True}
