"""Issue 14 item 3 / field case F14: a flag or config value outside the closed set the pinned
engine's parser accepts is refused by ``glmops validate`` (exit 2), naming the key, the value and
every accepted name, with a did-you-mean.

Expected lists are parsed here from the reference files the catalog was made from, not retyped:
/work/shared/reference/option-lists/*.txt (``choices=[...]``, Dynamo's ``choices [...]``, vLLM's
``metavar={...}``), reference/serving-clis.md (vLLM's ``--reasoning-parser`` names: no choices in the
dump) and reference/trtllm-serve.md §1 (TensorRT-LLM's Click choices: "From S3 on, `auto` is added").
"""
from __future__ import annotations

import ast
import difflib
import re
from pathlib import Path

import pytest
from click.testing import CliRunner
from inventory_factory import REV, write_inventory

from glmops import catalog, rules
from glmops.catalog import flags as F
from glmops.cli import main
from glmops.inventory import load_deployment

REF = Path("/work/shared/reference")
LISTS = REF / "option-lists"
pytestmark = pytest.mark.skipif(not LISTS.is_dir(), reason="the shared reference option lists are not here")


def dump_set(file: str, flag: str) -> list[str]:
    """The value set of ``flag`` in one option-list dump: ``choices=[...]``/``choices [...]``,
    else a ``metavar={a,b}`` set (parsed independently of glmops.catalog.flags)."""
    for line in (LISTS / file).read_text(encoding="utf-8").splitlines():
        head = line.split(" | ", 1)[0]
        names = ast.literal_eval(head) if head.startswith("[") else head.split()
        if flag not in names:
            continue
        rest = line.split(" | ", 1)[1]
        found = re.search(r"choices[= ](\[[^\]]*\]|\([^)]*\))", rest)
        if found:
            return [str(v) for v in ast.literal_eval(found.group(1))]
        found = re.search(r"metavar=\{([^}]*)\}", rest)
        if found:
            return found.group(1).split(",")
        found = re.search(r"metavar=(\[[^\]]*\])", rest)
        if found:
            return [str(v) for v in ast.literal_eval(found.group(1))]
        raise AssertionError(f"{flag} in {file} has no value set")
    raise AssertionError(f"{flag} not in {file}")


def vllm_reasoning_names() -> list[str]:
    """serving-clis.md: "**`--reasoning-parser`** (`vllm/reasoning/__init__.py`): `a b c`"."""
    text = (REF / "serving-clis.md").read_text(encoding="utf-8")
    found = re.search(r"\*\*`--reasoning-parser`\*\* \(`vllm/reasoning/__init__\.py`\): `([^`]+)`\. `none` = unset", text)
    return [*found.group(1).split(), "none"]  # "`none` = unset": vLLM takes it


def trtllm_names(kind: str) -> list[str]:
    """trtllm-serve.md §1: "- S3 <kind>: `a b c`." plus "From S3 on, `auto` is added"."""
    text = (REF / "trtllm-serve.md").read_text(encoding="utf-8")
    assert "From S3 on, `auto` is added" in text
    found = re.search(rf"- S3 {kind}: `([^`]+)`", text)
    return ["auto", *found.group(1).split()]


def minimal(engine: str, **over) -> dict:
    """Model, variant, engine, hardware, topology and one host, as a user writes them."""
    gv = {"glmops_model": "glm-5.3-flash", "glmops_variant": "fp8", "glmops_engine": engine,
          "glmops_hardware": "b200", "glmops_topology": "agg", "glmops_runtime": "venv",
          "glmops_checkpoint": {"revision": REV}}
    gv.update(over)
    return gv


# (engine, dynamo backend, engine_args key, the key's accepted names from the reference files)
CASES = [
    ("vllm", None, "tool-call-parser", lambda: dump_set("vllm-0.33.0-serve.txt", "--tool-call-parser")),
    ("vllm", None, "reasoning-parser", vllm_reasoning_names),
    ("sglang", None, "tool-call-parser", lambda: dump_set("sglang-0.5.23-serve.txt", "--tool-call-parser")),
    ("sglang", None, "reasoning-parser", lambda: dump_set("sglang-0.5.23-serve.txt", "--reasoning-parser")),
    ("dynamo", "vllm", "dyn-tool-call-parser", lambda: dump_set("dynamo-1.6.1-vllm-worker.txt", "--dyn-tool-call-parser")),
    ("dynamo", "vllm", "dyn-reasoning-parser", lambda: dump_set("dynamo-1.6.1-vllm-worker.txt", "--dyn-reasoning-parser")),
    ("dynamo", "sglang", "dyn-tool-call-parser",
     lambda: dump_set("dynamo-1.6.1-sglang-worker-dynamo-flags.txt", "--dyn-tool-call-parser")),
    ("dynamo", "sglang", "dyn-reasoning-parser",
     lambda: dump_set("dynamo-1.6.1-sglang-worker-dynamo-flags.txt", "--dyn-reasoning-parser")),
    ("trtllm", None, "tool_parser", lambda: trtllm_names("tool")),
    ("trtllm", None, "reasoning_parser", lambda: trtllm_names("reasoning")),
]


@pytest.mark.parametrize("engine,backend,key,accepted", CASES, ids=[f"{c[0]}-{c[1] or ''}-{c[2]}" for c in CASES])
def test_f14_unknown_parser_name_is_refused_by_validate(tmp_path, engine, backend, key, accepted):
    extra = {"glmops_dynamo_backend": backend} if backend else {}
    inv = write_inventory(tmp_path / "inv", minimal(engine, glmops_engine_args={key: "glm99"}, **extra))
    res = CliRunner().invoke(main, ["validate", "-i", str(inv)])
    assert res.exit_code == 2, res.output
    lines = [ln for ln in res.output.splitlines() if "[ENGINE_FLAG_VALUE]" in ln]
    assert len(lines) == 1, res.output
    line = lines[0]
    assert f"group_vars/all.yml:glmops_engine_args.{key}:" in line      # the inventory path
    assert f"'{key}' = 'glm99'" in line                                 # the key and the value
    names = accepted()
    assert names and all(name in line for name in names)                # every accepted name
    close = difflib.get_close_matches("glm99", names, n=1, cutoff=0.6)
    assert (f"did you mean {close[0]!r}?" if close else "pick one of the accepted values") in line


@pytest.mark.parametrize("engine,backend,key,accepted", CASES, ids=[f"{c[0]}-{c[1] or ''}-{c[2]}" for c in CASES])
def test_the_catalog_sets_equal_the_reference_files(tmp_path, engine, backend, key, accepted):
    """The catalog's value set of each parser flag is the reference set, name for name."""
    dep = load_deployment(write_inventory(tmp_path / "inv", minimal(engine)))
    dep.extra["dynamo_backend"] = backend or dep.extra.get("dynamo_backend")
    parsers, _owned, _version = rules._flag_sets(dep, catalog.load())
    flags, name = rules._resolve_flag(parsers, key)
    assert sorted(flags.accepted_values(name)) == sorted(accepted())


def test_a_good_parser_name_passes(tmp_path):
    # seed 001: "the glm45 reasoning and glm47 tool-call parsers"
    inv = write_inventory(tmp_path / "inv", minimal("sglang", glmops_engine_args={
        "tool-call-parser": "glm47", "reasoning-parser": "glm45"}))
    res = CliRunner().invoke(main, ["validate", "-i", str(inv)])
    assert "ENGINE_FLAG_VALUE" not in res.output and res.exit_code == 0, res.output


def test_sglang_reasoning_parser_the_catalog_says_sglang_rejects_is_refused(tmp_path):
    # catalog models.yaml glm-5.3 sources.parsers.sglang: "SGLang rejects reasoning parser glm47"
    text = catalog.load().models["glm-5.3"]["sources"]["parsers.sglang"]
    rejected = re.search(r"SGLang rejects reasoning parser (\S+?)[;)]", text).group(1)
    assert rejected not in dump_set("sglang-0.5.23-serve.txt", "--reasoning-parser")
    dep = load_deployment(write_inventory(tmp_path / "inv", minimal(
        "sglang", glmops_model="glm-5.3", glmops_engine_args={"reasoning-parser": rejected})))
    (p,) = [p for p in rules.check(dep) if p.code == "ENGINE_FLAG_VALUE"]
    assert f"'reasoning-parser' = '{rejected}'" in p.message and "glm45" in p.message


def test_catalog_parsers_of_every_model_are_accepted_by_their_engine():
    """The parser names glmops renders by itself (models.yaml ``parsers``) are in the engine's set."""
    cat = catalog.load()
    keys = {"vllm": [("vllm-serve", "tool-call-parser", "reasoning-parser")],
            "sglang": [("sglang-serve", "tool-call-parser", "reasoning-parser")],
            "trtllm": [("trtllm-serve", "tool_parser", "reasoning_parser")],
            "dynamo": [("dynamo-vllm-worker", "dyn-tool-call-parser", "dyn-reasoning-parser"),
                       ("dynamo-sglang-worker", "dyn-tool-call-parser", "dyn-reasoning-parser")]}
    checked = 0
    for model, entry in cat.models.items():
        for engine, parsers in (entry.get("parsers") or {}).items():
            for parser_key, tool_flag, reasoning_flag in keys[engine]:
                flags = F.load(parser_key)
                for kind, flag in (("tool", tool_flag), ("reasoning", reasoning_flag)):
                    if parsers.get(kind):
                        assert parsers[kind] in flags.accepted_values(flags.resolve(flag)), (model, engine, kind)
                        checked += 1
    assert checked >= 12


def test_vllm_parser_plugin_opens_the_set(tmp_path):
    # serving-clis.md: vLLM's parser flags are free strings a plugin can extend (--reasoning-parser-plugin)
    inv = write_inventory(tmp_path / "inv", minimal("vllm", glmops_engine_args={
        "reasoning-parser": "my_parser", "reasoning-parser-plugin": "/opt/plugins/my_parser.py"}))
    assert not [p for p in rules.check(load_deployment(inv)) if p.code == "ENGINE_FLAG_VALUE"]


def test_trtllm_nested_config_value_is_checked(tmp_path):
    # reference/trtllm-serve.md §3: moe_config.backend `AUTO` `CUTLASS` ...; seed 000 uses AUTO
    gv = minimal("trtllm", glmops_engine_config={"moe_config": {"backend": "AUTOO"}})
    (p,) = [p for p in rules.check(load_deployment(write_inventory(tmp_path / "inv", gv)))
            if p.code == "ENGINE_FLAG_VALUE"]
    assert p.path.endswith("glmops_engine_config.moe_config.backend")
    assert "'AUTOO'" in p.message and "CUTLASS" in p.message and "did you mean 'AUTO'" in p.hint


def test_router_flag_value_is_checked(tmp_path):
    # reference/option-lists/vllm-router-0.1.17.txt: --kv-connector choices ['nixl', 'mooncake', 'moriio']
    gv = minimal("vllm", glmops_topology="disagg", glmops_topologies={"disagg": {
        "pools": {"prefill": {"tp": 4, "gpus": [0, 1, 2, 3]}, "decode": {"tp": 4, "gpus": [4, 5, 6, 7]}},
        "router": {"args": {"kv-connector": "nixel"}}}})
    (p,) = [p for p in rules.check(load_deployment(write_inventory(tmp_path / "inv", gv)))
            if p.code == "ENGINE_FLAG_VALUE"]
    assert all(v in p.message for v in dump_set("vllm-router-0.1.17.txt", "--kv-connector"))
    assert "did you mean 'nixl'" in p.hint
