"""Engine flags and config keys (rules ENGINE_FLAG, ENGINE_FLAG_OWNED, ENGINE_CONFIG, TYPE for a
flag hidden in a value): a typo or a glmops-owned flag in engine_args / router args / TensorRT-LLM
engine_config is refused by ``glmops validate`` before any host, every problem at once.

The accepted names are catalog facts (glmops/catalog/flags/*.txt, from
/work/shared/reference/option-lists and reference/trtllm-serve.md); the owned ones are the engine
modules' ``*_OWNED`` tables, checked here against what the modules render."""
from __future__ import annotations

import copy
import functools
import importlib.util
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from inventory_factory import trtllm_b200, vllm_b200_disagg, without_venv_advice, write_inventory
from plan_helpers import dep as make_dep
from plan_helpers import hosts as make_hosts

from glmops import catalog, plan, rules
from glmops.catalog import flags as F
from glmops.engines import base, dynamo, sglang, trtllm, vllm
from glmops.inventory import load_deployment
from glmops.model import PoolSpec, RouterSpec

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = Path("/work/shared/reference/option-lists")
DOUBLES = ROOT / "tests" / "doubles"


def run(tmp_path: Path, gv: dict, name: str = "inv", **kw):
    dep = load_deployment(write_inventory(tmp_path / name, gv, **kw))
    plan, problems = rules.validate(dep)
    return plan, without_venv_advice(problems)


def by_code(problems, code):
    return [p for p in problems if p.code == code]


def pools(gv, topology="disagg"):
    return gv["glmops_topologies"][topology]["pools"]


# ---------------------------------------------------------------------------- the catalog lists


@pytest.mark.skipif(not REFERENCE.is_dir(), reason="needs /work/shared/reference")
@pytest.mark.parametrize("key", [k for k, p in F.PARSERS.items() if p.dump])
def test_catalog_flag_files_are_the_reference_dumps(key):
    """Each generated file is exactly what the reference dump gives (names, sections, bools)."""
    parser = F.PARSERS[key]
    want = F.render(parser, (REFERENCE / parser.dump).read_text(encoding="utf-8"))
    assert (F.FLAGS_DIR / parser.file).read_text(encoding="utf-8") == want
    assert "help" not in want.split("# format", 1)[1].replace("--help", "")  # no help text copied


def test_every_catalog_file_names_its_source():
    for parser in F.PARSERS.values():
        head = (F.FLAGS_DIR / parser.file).read_text(encoding="utf-8").splitlines()[:4]
        assert any(line.startswith("# source: reference/") for line in head), parser.file
        assert F.load(parser.key).count > 0


def test_flag_lists_resolve_as_the_parsers_do():
    v = F.load("vllm-serve")
    assert v.resolve("tensor_parallel_size") == "tensor-parallel-size"      # vLLM: _ == -
    assert v.resolve("--max-num-seqs") == "max-num-seqs"
    assert v.resolve("speculative-config.method") == "speculative-config"   # dotted JSON field
    assert v.resolve("no-disable-hybrid-kv-cache-manager") == "disable-hybrid-kv-cache-manager"
    assert v.resolve("disable-prefix-caching") == "enable-prefix-caching"
    assert v.resolve("no-headless") is None                                 # store_true: no --no-
    assert v.resolve("tensor-paralel-size") is None
    assert v.resolve("tp") is None                                          # -tp is a short alias
    assert v.resolve("port", ("engine",)) is None                           # a frontend flag
    assert v.resolve("block-size", ("engine",)) == "block-size"
    s = F.load("sglang-serve")
    assert s.resolve("tensor-parallel-size") == "tp-size"                   # alias -> canonical
    assert s.resolve("tp_size") is None                                     # argparse: exact
    t = F.load("trtllm-serve")
    assert t.resolve("tp_size") == "tensor_parallel_size"
    assert t.resolve("tp-size") is None                                     # Click: exact
    assert F.load("trtllm-llm-api").resolve("kv_cache_config") == "kv_cache_config"
    assert F.load("trtllm-llm-api").resolve("kv_cache_dtype") is None       # PR #18901


def _double(name: str):
    spec = importlib.util.spec_from_file_location(name, DOUBLES / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(DOUBLES))
    try:
        spec.loader.exec_module(mod)
    finally:
        sys.path.remove(str(DOUBLES))
    return mod


def test_trtllm_double_accepts_exactly_the_catalog_names():
    """The strict trtllm-serve double keeps its own copy (it is installed on lab hosts without
    glmops); it must accept what the catalog accepts, no more, no less."""
    d = _double("trtllm_serve_double")
    serve = {n.lstrip("-") for o in d.SERVE_OPTIONS for name in o["names"] for n in name.split("/")}
    cat = set(F.load("trtllm-serve").primary)
    assert serve == cat
    assert set(d.LLM_ARGS) == set(F.load("trtllm-llm-api").primary)
    assert set(d.DISAGG_TOP) == set(F.load("trtllm-disagg").primary)


def test_recipe_args_are_accepted_by_their_engines():
    """Every flag the catalog recipes render is one the engine's parser accepts."""
    cat = catalog.load()
    lists = {"vllm": [("vllm-serve", None)], "sglang": [("sglang-serve", None)], "trtllm": [("trtllm-serve", None)]}
    for entry in cat.recipes:
        match = entry.get("match") or {}
        engine = match.get("engine")
        backend = match.get("backend")
        if engine == "dynamo" and backend == "vllm":
            parsers = [(F.load("dynamo-vllm-worker"), None), (F.load("vllm-serve"), ("engine",))]
        elif engine == "dynamo" and backend == "sglang":
            parsers = [(F.load("dynamo-sglang-worker"), None), (F.load("sglang-serve"), None)]
        elif engine == "dynamo":
            continue  # mocker: checked against catalog engines.mocker.flags in test_dynamo_mocker
        else:
            # a backend-only match (sglang-flash) reaches plain SGLang too: its own parser must accept it
            parsers = [(F.load(p), s) for p, s in lists[engine or backend]]
        for flag, value in (entry.get("args") or {}).items():
            if value is None:
                continue  # removes a flag
            assert rules._resolve_flag(parsers, flag)[1], f"{entry['id']}: {flag}"
    for key in ("trtllm",):
        for k in (cat.engine(key).get("disagg_config") or {}) | (cat.engine(key).get("context_worker") or {}):
            assert F.load("trtllm-llm-api").resolve(k), k


@pytest.mark.parametrize("owned,parsers", [
    (vllm.WORKER_OWNED, ["vllm-serve"]), (vllm.ROUTER_OWNED, ["vllm-router"]),
    (sglang.WORKER_OWNED, ["sglang-serve"]), (sglang.ROUTER_OWNED, ["sglang-router"]),
    (trtllm.WORKER_OWNED, ["trtllm-serve"]), (trtllm.CONFIG_OWNED, ["trtllm-llm-api"]),
    (trtllm.ROUTER_OWNED, ["trtllm-disagg"]), (dynamo.FRONTEND_OWNED, ["dynamo-frontend"]),
    (dynamo.WORKER_OWNED, ["dynamo-vllm-worker", "vllm-serve"]),
])
def test_owned_flags_are_real_options(owned, parsers):
    """An owned flag with a typo would never match: each resolves in its parser's list."""
    for flag in owned:
        assert any(F.load(p).resolve(flag) for p in parsers), flag
    mocker = set(catalog.load().engine("mocker")["flags"])
    assert set(dynamo.MOCKER_OWNED) <= mocker


# ---------------------------------------------------------------------------- owned = rendered


def _flags(argv: list[str]) -> set[str]:
    return {w[2:].split("=", 1)[0] for w in argv if w.startswith("--") and len(w) > 2}


LAB = make_hosts(3, gpus=0, prefix="lab", hardware="cpu")
DEPLOYMENTS = {
    "vllm-agg-2-replicas": lambda: make_dep(engine="vllm", hardware="b200", n_hosts=2,
                                            pools=[PoolSpec(role="agg", tp=4, ep=4, replicas=4)]),
    "vllm-disagg": lambda: make_dep(engine="vllm", hardware="b200", topology="disagg", pools=[
        PoolSpec(role="prefill", tp=4, gpus=[0, 1, 2, 3]), PoolSpec(role="decode", tp=4, gpus=[4, 5, 6, 7])]),
    "vllm-tp-2-nodes": lambda: make_dep(engine="vllm", hardware="b200", n_hosts=2, pools=[PoolSpec(role="agg", tp=8, pp=2)]),
    "vllm-dp-2-nodes": lambda: make_dep(engine="vllm", hardware="b200", n_hosts=2, pools=[PoolSpec(role="agg", tp=8, dp=2, ep=16)]),
    "sglang-disagg-2-nodes": lambda: make_dep(engine="sglang", hardware="b200", topology="disagg", n_hosts=3,
                                              variant="nvfp4", repo="RadixArk/GLM-5.3-Flash-NVFP4", rdma=["mlx5_0"], pools=[
        PoolSpec(role="prefill", tp=16, ep=16, attention_dp=True), PoolSpec(role="decode", tp=8, dp=1)]),
    "trtllm-disagg": lambda: make_dep(engine="trtllm", hardware="b200", topology="disagg", pools=[
        PoolSpec(role="prefill", tp=4, ep=4, gpus=[0, 1, 2, 3]), PoolSpec(role="decode", tp=4, ep=4, gpus=[4, 5, 6, 7])]),
    "trtllm-agg-2-replicas": lambda: make_dep(engine="trtllm", hardware="b200", pools=[PoolSpec(role="agg", tp=4, ep=4, replicas=2)]),
    "dynamo-vllm-disagg-kv": lambda: make_dep(engine="dynamo", hardware="h200", topology="disagg", n_hosts=2,
                                              router=RouterSpec(policy="kv_aware"), pools=[
        PoolSpec(role="prefill", tp=8, hosts=["gpu-1"]), PoolSpec(role="decode", tp=8, hosts=["gpu-2"])]),
    "dynamo-vllm-2-nodes": lambda: make_dep(engine="dynamo", hardware="h200", n_hosts=2, pools=[PoolSpec(role="agg", tp=16)]),
    "dynamo-sglang-disagg-kv": lambda: make_dep(engine="dynamo", hardware="b200", topology="disagg", n_hosts=2,
                                                variant="nvfp4", repo="RadixArk/GLM-5.3-Flash-NVFP4",
                                                router=RouterSpec(policy="kv_aware"), extra={"dynamo_backend": "sglang"}, pools=[
        PoolSpec(role="prefill", tp=8, hosts=["gpu-1"]), PoolSpec(role="decode", tp=8, hosts=["gpu-2"])]),
    "dynamo-mocker-disagg": lambda: make_dep(engine="dynamo", hardware="cpu", topology="disagg", hosts=dict(LAB),
                                             repo="glmops-lab/tiny", served="tiny", size_gib=0,
                                             extra={"dynamo_backend": "mocker"}, pools=[
        PoolSpec(role="prefill", hosts=["lab-1"]), PoolSpec(role="decode", dp=2, hosts=["lab-2"])]),
}


def _owned_for(d, svc) -> dict[str, str]:
    if svc.role == "store":  # Dynamo's discovery store: no engine_args reach it
        return dynamo.STORE_OWNED
    if svc.role in ("router", "orchestrator", "frontend"):
        return {"vllm_router": vllm.ROUTER_OWNED, "sglang_router": sglang.ROUTER_OWNED,
                "dynamo": dynamo.FRONTEND_OWNED, "trtllm": {}}[svc.engine]
    if d.engine == "dynamo":
        back = base.backend_of(d)
        return dynamo.MOCKER_OWNED if back == "mocker" else \
            {**(vllm.WORKER_OWNED if back == "vllm" else sglang.WORKER_OWNED), **dynamo.WORKER_OWNED}
    return {"vllm": vllm.WORKER_OWNED, "sglang": sglang.WORKER_OWNED, "trtllm": trtllm.WORKER_OWNED}[d.engine]


@pytest.mark.parametrize("name", list(DEPLOYMENTS))
def test_flags_rendered_outside_engine_args_are_owned(name, monkeypatch):
    """Every flag an engine module puts on a command line without going through the
    overridable engine-args merge (``base.merge_args``: recipe < derived < glmops_engine_args <
    pool engine_args) is one glmops owns, so rules refuse it in engine_args. A new fixed flag
    in an engine module fails here until it is added to the module's ``*_OWNED``."""
    merged: set[str] = set()
    real = base.merge_args

    def spy(*layers):
        out = real(*layers)
        merged.update(out)
        return out

    monkeypatch.setattr(base, "merge_args", spy)
    d = DEPLOYMENTS[name]()
    built = plan.build(d)
    seen_owned = set()
    for svc in built.services:
        owned = _owned_for(d, svc)
        if svc.engine == "trtllm" and svc.role == "orchestrator":
            cfg = svc.files[0].content
            assert set(cfg) - set(d.router.args) <= set(trtllm.ROUTER_OWNED), cfg
            continue
        words = svc.argv
        if words and words[0].endswith("mpirun"):
            words = words[words.index("--bind-to"):]
        fixed = _flags(words) - merged
        assert fixed <= set(owned), f"{svc.name}: {sorted(fixed - set(owned))} are rendered but not *_OWNED"
        seen_owned |= fixed
    assert seen_owned, "the test saw no fixed flag at all"


# ---------------------------------------------------------------------------- the rule


def test_typo_in_pool_engine_args_is_refused_with_a_close_match(tmp_path):
    gv = vllm_b200_disagg()
    pools(gv)["prefill"]["engine_args"] = {"tensor-paralel-size": 4}
    _plan, problems = run(tmp_path, gv)
    (p,) = by_code(problems, "ENGINE_FLAG")
    assert p.path.endswith("glmops_topologies.disagg.pools.prefill.engine_args.tensor-paralel-size")
    assert "'tensor-paralel-size'" in p.message and "vllm serve 0.33.0" in p.message
    assert "vllm-0.33.0-serve.txt" in p.message and "accepted:" in p.message
    assert "did you mean 'tensor-parallel-size'?" in p.hint
    # the catalog's vLLM is 0.29.0: checked anyway, and the hint says the list is 0.33.0's
    assert "0.33.0" in p.hint and "0.29.0" in p.hint


def test_every_bad_flag_is_reported_at_once(tmp_path):
    gv = vllm_b200_disagg(glmops_engine_args={"max-num-seq": 4, "enforce-eager": True})
    pools(gv)["prefill"]["engine_args"] = {"block-sise": 16, "port": 9999, "max_num_seqs": 8}
    pools(gv)["decode"]["engine_args"] = {"gpu-memory-utilisation": 0.9, "no-enable-prefix-caching": True}
    _plan, problems = run(tmp_path, gv)
    assert sorted(p.path.rsplit(".", 1)[1] for p in by_code(problems, "ENGINE_FLAG")) == \
        ["block-sise", "gpu-memory-utilisation", "max-num-seq"]
    (owned,) = by_code(problems, "ENGINE_FLAG_OWNED")
    assert owned.path.endswith("pools.prefill.engine_args.port")


def test_port_in_engine_args_names_the_variable_that_sets_it(tmp_path):
    gv = vllm_b200_disagg()
    pools(gv)["decode"]["engine_args"] = {"port": 9999}
    _plan, problems = run(tmp_path, gv)
    (p,) = problems
    assert p.code == "ENGINE_FLAG_OWNED"
    assert "set by glmops from glmops_topologies.disagg.pools.decode.port" in p.message
    assert p.hint == "set glmops_topologies.disagg.pools.decode.port instead"


@pytest.mark.parametrize("flag,var", [
    ("tensor_parallel_size", "pools.<role>.tp"), ("served-model-name", "glmops_served_model_name"),
    ("host", "glmops_address"), ("model", "glmops_checkpoint"), ("disable-expert-parallel", "pools.<role>.ep"),
    ("data-parallel-size", "pools.<role>.dp"), ("nnodes", "the plan"),
])
def test_deployment_wide_owned_vllm_flags(tmp_path, flag, var):
    gv = vllm_b200_disagg(glmops_engine_args={flag: 2})
    _plan, problems = run(tmp_path, gv)
    (p,) = problems
    assert p.code == "ENGINE_FLAG_OWNED" and p.path.endswith(f"glmops_engine_args.{flag}")
    assert var in p.message


def test_sglang_flags_are_spelled_exactly_and_aliases_are_owned(tmp_path):
    gv = vllm_b200_disagg(glmops_engine="sglang", glmops_variant="nvfp4",
                          glmops_engine_args={"tensor-parallel-size": 4, "mem_fraction_static": 0.8,
                                              "page-size": 64})
    _plan, problems = run(tmp_path, gv)
    assert [(p.code, p.path.rsplit(".", 1)[1]) for p in problems] == [
        ("ENGINE_FLAG_OWNED", "tensor-parallel-size"), ("ENGINE_FLAG", "mem_fraction_static")]
    assert "did you mean 'mem-fraction-static'?" in problems[1].hint
    assert "sglang serve 0.5.23" in problems[1].message


def test_trtllm_flags_config_keys_and_a_flag_inside_a_value(tmp_path):
    gv = trtllm_b200("agg")
    agg = pools(gv, "agg")["agg"]
    agg["engine_args"] = {"max_batch_size": "64 --evil", "tp-size": 4, "ep_size": 4}
    agg["engine_config"] = {"kv_cache_dtype": "fp8", "tensor_parallel_size": 4, "kv_cache_config": {"dtype": "fp8"}}
    _plan, problems = run(tmp_path, gv)  # no PLAN crash on '64 --evil'
    got = [(p.code, p.path.split("pools.agg.", 1)[1]) for p in problems]
    assert got == [
        ("TYPE", "engine_args.max_batch_size"),
        ("ENGINE_FLAG", "engine_args.tp-size"),
        ("ENGINE_FLAG_OWNED", "engine_args.ep_size"),
        ("ENGINE_FLAG", "engine_config.kv_cache_dtype"),
        ("ENGINE_FLAG_OWNED", "engine_config.tensor_parallel_size"),
    ], problems
    assert "'64 --evil'" in problems[0].message and "max_batch_size" in problems[0].message
    assert "did you mean 'tp_size'?" in problems[1].hint
    assert "pools.agg.ep" in problems[2].message
    assert "trtllm-llm-api.txt" in problems[3].message
    assert "pools.agg.tp" in problems[4].message


def test_trtllm_orchestrator_config_keys(tmp_path):
    gv = trtllm_b200("disagg")
    gv["glmops_topologies"]["disagg"]["router"] = {"port": 8000, "args": {
        "max_retries": 3, "backend": "pytorch", "hostnme": "x", "context_servers": {}}}
    _plan, problems = run(tmp_path, gv)
    assert [(p.code, p.path.rsplit(".", 1)[1]) for p in problems] == [
        ("ENGINE_FLAG", "hostnme"), ("ENGINE_FLAG_OWNED", "context_servers")]
    assert "did you mean 'hostname'?" in problems[0].hint


def test_router_args_per_front_door(tmp_path):
    gv = vllm_b200_disagg()
    gv["glmops_topologies"]["disagg"]["router"]["args"] = {"polcy": "random", "worker-urls": ["x"],
                                                           "request-timeout-secs": 60}
    _plan, problems = run(tmp_path, gv)
    assert [(p.code, p.path.rsplit(".", 1)[1]) for p in problems] == [
        ("ENGINE_FLAG", "polcy"), ("ENGINE_FLAG_OWNED", "worker-urls")]
    assert "vllm-router 0.1.17" in problems[0].message and "did you mean 'policy'?" in problems[0].hint


def test_dynamo_vllm_workers_take_engine_flags_only(tmp_path):
    gv = vllm_b200_disagg(glmops_engine="dynamo", glmops_hardware="h200", glmops_topology="agg",
                          glmops_topologies={"agg": {"pools": {"agg": {"tp": 8}},
                                                     "router": {"args": {"router-mode": "kv", "migration-limit": 2}}}},
                          glmops_engine_args={"tool-call-parser": "glm47", "enable-prefix-caching": True,
                                              "dyn-reasoning-parser": "glm45", "namespace": "glm"})
    _plan, problems = run(tmp_path, gv)
    assert [(p.code, p.path.rsplit(".", 1)[1]) for p in problems] == [
        ("ENGINE_FLAG", "tool-call-parser"), ("ENGINE_FLAG_OWNED", "router-mode")]
    # vLLM's frontend flags are not dynamo.vllm's; the list versions are named
    assert "engine arguments" in problems[0].message
    assert "0.31.0" in problems[0].hint  # Dynamo 1.6.1 pins vllm 0.31.0; the list is 0.33.0's


def test_engine_config_on_an_engine_that_reads_none(tmp_path):
    gv = vllm_b200_disagg(glmops_engine_config={"kv_cache_config": {"dtype": "fp8"}})
    _plan, problems = run(tmp_path, gv)
    (p,) = problems
    assert p.code == "ENGINE_CONFIG" and p.path.endswith("glmops_engine_config")
    assert "vllm reads no engine config" in p.message


def test_valid_flags_pass_on_every_engine(tmp_path):
    gv = vllm_b200_disagg(glmops_engine_args={"max_num_seqs": 8, "no-disable-hybrid-kv-cache-manager": True,
                                              "compilation-config.mode": 3})
    assert run(tmp_path, gv, "a")[1] == []
    gv = trtllm_b200("disagg", glmops_engine_args={"kv_cache_free_gpu_memory_fraction": 0.8, "trust_remote_code": True},
                     glmops_engine_config={"print_iter_log": True, "return_perf_metrics": True})
    assert run(tmp_path, gv, "b")[1] == []


def test_lab_dynamo_mocker_args_are_checked(tmp_path):
    dep = load_deployment(ROOT / "inventories" / "lab-dynamo")
    assert rules.check(dep) == []
    dep.engine_args = dict(dep.engine_args, **{"reasonin": {}, "model-name": "x"})
    got = [(p.code, p.message.split("'")[1]) for p in rules.check(dep)]
    assert got == [("ENGINE_FLAG", "reasonin"), ("ENGINE_FLAG_OWNED", "model-name")]


def test_validate_cli_exits_2_listing_the_flag(tmp_path):
    from glmops.cli import main

    gv = vllm_b200_disagg()
    pools(gv)["prefill"]["engine_args"] = {"tensor-paralel-size": 4}
    inv = write_inventory(tmp_path / "inv", gv)
    res = CliRunner().invoke(main, ["validate", "-i", str(inv)])
    assert res.exit_code == 2
    assert "[ENGINE_FLAG]" in res.output and "tensor-paralel-size" in res.output


def test_flag_files_are_read_only_for_the_engine_in_use(tmp_path, monkeypatch):
    """Lazy: a vLLM deployment reads the vLLM and vllm-router lists, not SGLang's 500 lines."""
    opened = []
    real = F.load.__wrapped__

    def counting(key):
        opened.append(key)
        return real(key)

    monkeypatch.setattr(F, "load", functools.cache(counting))
    gv = vllm_b200_disagg(glmops_engine_args={"max-num-seqs": 8})
    gv["glmops_topologies"]["disagg"]["router"]["args"] = {"request-timeout-secs": 60}
    assert run(tmp_path, copy.deepcopy(gv))[1] == []
    assert sorted(set(opened)) == ["vllm-router", "vllm-serve"]
