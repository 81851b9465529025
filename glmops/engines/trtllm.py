"""TensorRT-LLM workers (``trtllm-serve``) and the disaggregated orchestrator.

Sources: seeds/000 (the serve command, the LLM-API YAML options, disaggregated
serving: NIXL/PYTHON cache transceiver on both workers, context worker
``disable_overlap_scheduler: true`` + ``cuda_graph_config: null``, the
``disagg_config.yaml`` with hostname/port/context_servers/generation_servers),
reference/trtllm-serve.md (snake_case flags, ``--config`` YAML keys, ``disaggregated
-c``, multi-node via ``mpirun`` + ``trtllm-llmapi-launch``).

TensorRT-LLM names the pools context (prefill) and generation (decode); Service roles
keep the engine-neutral names and the table shows both.
"""
from __future__ import annotations

import sys
from typing import Any

from glmops import catalog as catalog_mod
from glmops.catalog import flags as F
from glmops.engines import base, vllm_router
from glmops.engines.base import CATALOG, Ctx, Placement, Settings
from glmops.engines.problems import (argv_value, as_int, canon, dig, int_range, pool_args, pool_config, pool_env,
                                     problem, src, warning)
from glmops.engines.registry import EngineSpec, FrontDoor, KvTransfer, RuleFacts
from glmops.model import ConfigFile, Deployment, Plan, PoolSpec, Problem, Service

ENGINE = "trtllm"
TRT_ROLE = {"prefill": "context", "decode": "generation", "agg": "agg"}

# Flags / config keys this module sets itself -> what sets them (see glmops.engines.vllm.WORKER_OWNED).
WORKER_OWNED = {
    "served_model_name": "glmops_served_model_name",
    "host": "the host's glmops_address (else ansible_host)",
    "port": "{pool}.port (the plan picks one per replica and host)",
    "tp_size": "{pool}.tp",
    "pp_size": "{pool}.pp",
    "ep_size": "{pool}.ep",
    "enable_attention_dp": "{pool}.attention_dp",
    "config": "glmops_engine_config / {pool}.engine_config (glmops writes the --config YAML)",
}
CONFIG_OWNED = {
    "tensor_parallel_size": "{pool}.tp",
    "pipeline_parallel_size": "{pool}.pp",
    "moe_expert_parallel_size": "{pool}.ep",
    "enable_attention_dp": "{pool}.attention_dp",
}
ROUTER_OWNED = {
    "hostname": "{router}.host (else the first glmops_routers / worker host)",
    "port": "{router}.port",
    "context_servers": "the plan (the context workers' URLs)",
    "generation_servers": "the plan (the generation workers' URLs)",
}


def config_dir(ctx: Ctx) -> str:
    """``/etc/glmops/<dep>``: where the --config YAMLs and disagg_config.yaml live."""
    return f"{ctx.dep.config_dir}/{ctx.dep.name}"


def llm_api_config(ctx: Ctx, pool: PoolSpec, st: Settings) -> dict[str, Any]:
    """The ``--config`` YAML (LLM-API args) for one pool, as a dict.

    Layers (low -> high): recipe ``config``; catalog ``disagg_config`` (both disagg
    workers) and ``context_worker`` (prefill only); derived keys (KV dtype,
    ``cuda_graph_config.max_batch_size`` = ``--max_batch_size``, MTP
    ``speculative_config``, ``enable_attention_dp``); ``glmops_engine_config``; pool
    ``engine_config``.
    """
    dep = ctx.dep
    eng = CATALOG.engine(ENGINE)
    # Prometheus text on /prometheus/metrics (catalog engines.trtllm.metrics.config), lowest layer
    cfg: dict[str, Any] = base.deep_merge(dict((eng.get("metrics") or {}).get("config") or {}), st.recipe.config)
    if dep.topology == "disagg" and pool.role != "agg":
        cfg = base.deep_merge(cfg, eng.get("disagg_config") or {})
        if pool.role == "prefill":
            cfg = base.deep_merge(cfg, eng.get("context_worker") or {})
    kv = base.engine_kv_dtype(ENGINE, st.kv_cache_dtype)
    if kv != "auto":
        cfg = base.deep_merge(cfg, {"kv_cache_config": {"dtype": kv}})
    if isinstance(cfg.get("cuda_graph_config"), dict) and st.max_batch_size is not None:
        cfg["cuda_graph_config"]["max_batch_size"] = st.max_batch_size
    if st.speculative:
        spec = st.speculative
        n = spec.get("max_draft_len", spec.get("num_speculative_tokens",
                                               st.recipe.settings.get("mtp_max_draft_len", 3)))
        cfg["speculative_config"] = {"decoding_type": "MTP", "max_draft_len": int(n)}
    if pool.attention_dp:
        cfg["enable_attention_dp"] = True
    cfg = base.deep_merge(cfg, dep.engine_config)
    cfg = base.deep_merge(cfg, pool.engine_config)
    return cfg


def attention_dp_tokens(dep: Deployment, pool: PoolSpec) -> tuple[int, int, str, str] | None:
    """Seed 000, ``enable_attention_dp``: "When enabled, use --max_num_tokens 4096 for the
    configuration above". ``(value, seed value, source, inventory path)`` when an attention-DP pool
    runs another max_num_tokens than the recipe entry that matches ``attention_dp: true``
    (``glmops_max_num_tokens`` or an engine_args override), else None. TensorRT-LLM accepts any
    value: a warning (:func:`_check_recipe_deviation`) and a plan note, never a refusal."""
    if not pool.attention_dp:
        return None
    args = pool_args(dep, pool)
    if args.get("max-num-tokens") is not None:
        got: Any = args["max-num-tokens"]
        key = next((k for k in pool.engine_args if canon(k) == "max-num-tokens"), None)
        where = src(dep, f"pools.{pool.role}.engine_args.{key}" if key else "engine_args.max_num_tokens",
                    "engine_args.max-num-tokens", f"pools.{pool.role}.engine_args", "engine_args")
    elif dep.max_num_tokens is not None:
        got, where = dep.max_num_tokens, src(dep, "max_num_tokens", "glmops_max_num_tokens")
    else:
        return None  # the recipe's value is used
    st = base.settings_for(dep, pool)
    for entry in CATALOG.recipes():
        if entry.get("id") in st.recipe.ids and (entry.get("match") or {}).get("attention_dp") is True:
            want = (entry.get("settings") or {}).get("max_num_tokens")
            if want is not None and as_int(got) is not None and as_int(got) != int(want):
                return int(got), int(want), str(entry.get("source")), where
    return None


def _note_attention_dp_tokens(ctx: Ctx, pool: PoolSpec) -> None:
    """The plan note of :func:`attention_dp_tokens`."""
    found = attention_dp_tokens(ctx.dep, pool)
    if found:
        got, want, source, _where = found
        ctx.notes.append(f"pool {pool.role}: attention DP with max_num_tokens {got}; the recipe says "
                         f"{want} ({source}: 'When enabled, use --max_num_tokens {want}')")


def _check_recipe_deviation(dep: Deployment, _facts: RuleFacts, out: list[Problem]) -> None:
    """RECIPE_DEVIATION warnings: settings TensorRT-LLM accepts that differ from the seed's
    recipe (attention DP with a max_num_tokens other than seed 000's)."""
    for pool in dep.pools:
        found = attention_dp_tokens(dep, pool)
        if found:
            got, want, source, where = found
            warning(out, "RECIPE_DEVIATION", where,
                    f"pool {pool.role} runs attention DP with max_num_tokens {got}; the seed's value: {want} "
                    f"({source}: 'When enabled, use --max_num_tokens {want}'); TensorRT-LLM accepts it",
                    f"set glmops_max_num_tokens: {want}, or keep {got} knowingly (glmops validate --strict refuses it)")


def serve_args(ctx: Ctx, pool: PoolSpec, st: Settings) -> dict[str, Any]:
    """``trtllm-serve`` flags (snake_case) apart from model, host, port and --config."""
    dep = ctx.dep
    args: dict[str, Any] = {}
    if st.max_batch_size is not None:
        args["max_batch_size"] = st.max_batch_size
    if st.max_num_tokens is not None:
        args["max_num_tokens"] = st.max_num_tokens
    if st.max_seq_len is not None:
        args["max_seq_len"] = st.max_seq_len
    args["tp_size"] = pool.tp
    args["ep_size"] = pool.ep
    args["pp_size"] = pool.pp
    if st.parsers:
        parsers = CATALOG.parsers(dep.model, ENGINE)
        if parsers.get("tool"):
            args["tool_parser"] = parsers["tool"]
        if parsers.get("reasoning"):
            args["reasoning_parser"] = parsers["reasoning"]
    return base.merge_args(args, st.recipe.args, dep.engine_args, pool.engine_args)


def worker(ctx: Ctx, pool: PoolSpec, replica: int, pl: Placement) -> list[Service]:
    """One ``trtllm-serve`` Service for the replica.

    A replica wider than a node is launched from its head node with ``mpirun -np
    <world> -H host:gpus,...`` around ``trtllm-llmapi-launch trtllm-serve`` (reference
    §5); the other nodes run no unit of their own (mpirun reaches them over SSH), which
    the plan notes.
    """
    dep = ctx.dep
    st = base.settings_for(dep, pool)
    if replica == 0:
        _note_attention_dp_tokens(ctx, pool)
    head = pl.head
    alloc = ctx.alloc(head.host.name)
    http = alloc.take(base.PORT_BASES["http"], 1, want=pl.http_want)[0]
    name = base.service_name(dep, pool.role, replica)
    cfg_path = f"{config_dir(ctx)}/{name}.yml"
    serve = base.command(dep, ENGINE) + [dep.checkpoint.local_dir,
                                         "--served_model_name", dep.served_model_name,
                                         "--host", head.host.address, "--port", str(http)]
    serve += base.render_flags(serve_args(ctx, pool, st))
    serve += ["--config", cfg_path]
    env: dict[str, str] = {}
    env.update(base.visible_devices(dep, head.gpus))
    if dep.topology == "disagg" and pool.role != "agg":
        # identical NIXL_*/UCX_* lines on context and generation (F04), NIC pinned (F06)
        env.update(base.transport_env(dep, [head.host], ("UCX_", "NIXL_", "TRTLLM_NIXL_", "TRTLLM_UCX_")))
    env.update(base.base_env(dep, pool, st.recipe, ENGINE))
    if dep.topology == "disagg" and pool.role != "agg":
        env = base.without_rdma_devices(env, dep, pool)
    argv = serve
    if pl.nnodes > 1:
        hosts = ",".join(f"{n.host.address}:{len(n.gpus)}" for n in pl.nodes)
        mpirun = "mpirun" if dep.runtime == "container" else "/usr/bin/mpirun"
        launch = base.command(dep, ENGINE, "trtllm-llmapi-launch")
        argv = [mpirun, "-np", str(pool.world_size), "-H", hosts, "--bind-to", "none"]
        for key in sorted(env):
            argv += ["-x", key]
        argv += launch + serve
        ctx.notes.append(
            f"{name}: spans {pl.nnodes} nodes ({', '.join(n.host.name for n in pl.nodes)}); "
            "launched by mpirun from the head node, which needs SSH to the others"
        )
    files = [ConfigFile(path=cfg_path, content=llm_api_config(ctx, pool, st), format="yaml")]
    svc = Service(
        name=name, host=head.host.name, role=pool.role, engine=ENGINE, address=head.host.address,
        port=http, gpus=[g for n in pl.nodes for g in n.gpus] if pl.nnodes > 1 else list(head.gpus),
        ports={"http": [http]}, argv=argv, env=env, files=files,
        health_url=base.url(head.host.address, http, "/health"),
        ready_url=base.url(head.host.address, http, "/v1/completions"),
        metrics_url=base.metrics_url(ENGINE, head.host.address, {"http": [http]}),
        start_order=base.ORDER_WORKER, replica=replica, node_rank=0, nnodes=pl.nnodes,
        runtime=dep.runtime, image=base.image_for(dep, ENGINE),
    )
    return [svc]


def disagg_config(ctx: Ctx, workers: list[Service], host_address: str, port: int) -> dict[str, Any]:
    """``disagg_config.yaml`` (seed 000): URLs are ``host:port`` without a scheme
    (reference §2: the proxy splits on ':')."""
    def servers(role: str) -> dict[str, Any]:
        urls = [f"{w.address}:{w.port}" for w in workers if w.role == role and w.node_rank == 0]
        return {"num_instances": len(urls), "urls": urls}

    cfg: dict[str, Any] = {
        "hostname": host_address,
        "port": port,
        "context_servers": servers("prefill"),
        "generation_servers": servers("decode"),
    }
    return base.deep_merge(cfg, {k: v for k, v in ctx.dep.router.args.items() if k != "backend"})


def router(ctx: Ctx, workers: list[Service]) -> list[Service]:
    """Disagg: ``trtllm-serve disaggregated -c disagg_config.yaml`` (the orchestrator).
    Several aggregated replicas: vllm-router round robin over them (TRT-LLM has no
    aggregated router of its own)."""
    dep = ctx.dep
    if dep.topology != "disagg":
        return [vllm_router.router_service(ctx, workers)]
    host = base.router_host(ctx, workers)
    port = ctx.front_port
    path = f"{config_dir(ctx)}/disagg_config.yaml"
    argv = base.command(dep, ENGINE) + ["disaggregated", "-c", path]
    env = base.front_env(dep)
    return [Service(
        name=base.service_name(dep, "orchestrator"), host=host.name, role="orchestrator", engine=ENGINE,
        address=host.address, port=port, ports={"http": [port]}, argv=argv, env=env,
        files=[ConfigFile(path=path, content=disagg_config(ctx, workers, host.address, port), format="yaml")],
        health_url=base.url(host.address, port, "/health"),
        ready_url=base.url(host.address, port, "/v1/completions"),
        start_order=base.ORDER_FRONT, depends_on=[w.name for w in workers],
        runtime=dep.runtime, image=base.image_for(dep, ENGINE),
    )]


# --------------------------------------------------------------------------- rules


def _flag_sets(dep: Deployment, _cat: Any) -> tuple[list, dict[str, str], str]:
    """trtllm-serve's option list, the flags this module sets, the version in use."""
    return [(F.load("trtllm-serve"), None)], WORKER_OWNED, dep.engine_version


def _transport(args: dict, config: dict) -> str:
    """KV transfer backend of a disaggregated pool (``cache_transceiver_config.backend``), lower case."""
    found, be = dig(config, "cache_transceiver_config.backend")
    return str(be if found and be else "NIXL").lower()


def mtp_draft_range() -> tuple[int, int]:
    """(min, max) MTP ``max_draft_len``: catalog ``engines.trtllm.speculative.mtp_max_draft_len`` (seed 000)."""
    return int_range((CATALOG.engine(ENGINE).get("speculative") or {}).get("mtp_max_draft_len"), (1, 5))


def _draft_len(spec: dict | None) -> tuple[bool, Any]:
    if not spec:
        return False, None
    for key in ("num_speculative_tokens", "max_draft_len"):
        if key in spec:
            return True, spec[key]
    cfg = spec.get("engine_config.speculative_config")
    if isinstance(cfg, dict) and "max_draft_len" in cfg:
        return True, cfg["max_draft_len"]
    return False, None


def _bad_draft_len(n: Any, lo: int, hi: int) -> bool:
    return isinstance(n, bool) or not isinstance(n, int) or not lo <= n <= hi


def _speculative_pool(dep: Deployment, model: dict, spec: dict, where: str, method: str, out: list[Problem]) -> None:
    """MTP only; ``max_draft_len`` (``num_speculative_tokens``) within the catalog's range. Left
    out, the recipe's ``mtp_max_draft_len`` (seed 000: "The example uses 3") is what
    :func:`llm_api_config` renders, so it is missing only when no recipe gives one."""
    lo, hi = mtp_draft_range()
    found, n = _draft_len(spec)
    if not found:
        n = _recipe_draft_len(dep)
        found = n is not None
    if method != "mtp":
        problem(out, "SPECULATIVE", where,
                f"speculative method {spec.get('method')!r} on TensorRT-LLM is not accepted for {model.get('name')}; accepted: mtp")
    if not found:
        problem(out, "MTP_DRAFT_LEN", where,
                f"speculative num_speculative_tokens is missing; accepted: {lo}..{hi} (TensorRT-LLM max_draft_len)")
    elif _bad_draft_len(n, lo, hi):
        problem(out, "MTP_DRAFT_LEN", where,
                f"MTP max_draft_len (num_speculative_tokens) {n!r} is not accepted on TensorRT-LLM; accepted: {lo}..{hi}",
                f"seed 000: max_draft_len {lo} to {hi}; the example uses 3")


def _recipe_draft_len(dep: Deployment) -> Any:
    """The recipe's ``mtp_max_draft_len`` for the Deployment's first pool, None when none (or when
    no recipe resolves: another rule names that)."""
    try:
        return base.settings_for(dep, dep.pools[0]).recipe.settings.get("mtp_max_draft_len") if dep.pools else None
    except Exception:  # noqa: BLE001 - an unresolved recipe is reported by its own rule
        return None


def _speculative_config(dep: Deployment, out: list[Problem]) -> None:
    """``engine_config.speculative_config.max_draft_len`` within the catalog's range."""
    lo, hi = mtp_draft_range()
    for pool in dep.pools:
        found, cfg = dig(pool_config(dep, pool), "speculative_config")
        if found and isinstance(cfg, dict) and "max_draft_len" in cfg:
            n = cfg["max_draft_len"]
            if _bad_draft_len(n, lo, hi):
                problem(out, "MTP_DRAFT_LEN",
                        src(dep, f"pools.{pool.role}.engine_config.speculative_config", "engine_config.speculative_config"),
                        f"speculative_config.max_draft_len {n!r} is not accepted; accepted: {lo}..{hi} (seed 000)")


def _check_config(dep: Deployment, facts: RuleFacts, out: list[Problem]) -> None:
    """Seed 000's engine_config rules: block reuse needs a Mamba snapshot interval, the CUDA
    graph batch equals max_batch_size, context workers run without overlap scheduler and CUDA graphs."""
    model, engine = facts.model or {}, facts.engine or {}
    snap = engine.get("mamba_snapshot") or {}
    for pool in dep.pools:
        cfg = pool_config(dep, pool)
        cpath = src(dep, f"pools.{pool.role}.engine_config", "engine_config", "glmops_engine_config")
        # block reuse needs a periodic Mamba snapshot interval (seed 000)
        if model.get("block_reuse_needs_mamba_snapshot"):
            found, reuse = dig(cfg, snap.get("reuse_key", "kv_cache_config.enable_block_reuse"))
            has_new, interval = dig(cfg, snap.get("interval_key", "kv_cache_config.mamba_state_config.periodic_snapshot_interval"))
            has_old, old = dig(cfg, snap.get("deprecated_interval_key", "kv_cache_config.mamba_state_cache_interval"))
            if found and reuse is True and not ((has_new and interval) or (has_old and old)):
                problem(out, "BLOCK_REUSE_SNAPSHOT", cpath,
                        f"pool {pool.role} kv_cache_config.enable_block_reuse is true without "
                        f"kv_cache_config.mamba_state_config.periodic_snapshot_interval; accepted: an interval > 0 "
                        f"(e.g. {snap.get('example_interval', 256)}) or enable_block_reuse false",
                        "seed 000: without the snapshot policy reuse is disabled")
        _check_cuda_graph(dep, pool, cfg, cpath, out)
        # context workers: disable_overlap_scheduler true, cuda_graph_config null (seed 000)
        if dep.topology == "disagg" and pool.role == "prefill":
            want = engine.get("context_worker") or {"disable_overlap_scheduler": True, "cuda_graph_config": None}
            for key, value in want.items():
                has, got = dig(cfg, key)
                if has and got != value:
                    problem(out, "CONTEXT_WORKER_CONFIG", src(dep, f"pools.prefill.engine_config.{key}", cpath),
                            f"context worker {key} is {got!r}; accepted: {value!r}",
                            "seed 000: set disable_overlap_scheduler: true and cuda_graph_config: null on the context worker")
    _check_recipe_deviation(dep, facts, out)


def _check_cuda_graph(dep: Deployment, pool: PoolSpec, cfg: dict, cpath: str, out: list[Problem]) -> None:
    """cuda_graph_config.max_batch_size == max_batch_size == max(batch_sizes) (seed 000)."""
    found, cg = dig(cfg, "cuda_graph_config")
    mbs = pool_args(dep, pool).get("max-batch-size", dep.max_batch_size)
    if "max_batch_size" in cfg:
        mbs = cfg["max_batch_size"]
    if found and isinstance(cg, dict) and "max_batch_size" in cg and mbs is not None and cg["max_batch_size"] != mbs:
        problem(out, "CUDA_GRAPH_BATCH", cpath,
                f"pool {pool.role} cuda_graph_config.max_batch_size {cg['max_batch_size']!r} differs from max_batch_size "
                f"{mbs!r}; accepted: {mbs!r}", "seed 000: set it to match --max_batch_size")
    if found and isinstance(cg, dict) and cg.get("batch_sizes") and "max_batch_size" in cg:
        if cg["max_batch_size"] != max(cg["batch_sizes"]):
            problem(out, "CUDA_GRAPH_BATCH", cpath,
                    f"pool {pool.role} cuda_graph_config.max_batch_size {cg['max_batch_size']!r} is not "
                    f"max(batch_sizes) {max(cg['batch_sizes'])}; accepted: {max(cg['batch_sizes'])}")


def _check_transport_env(dep: Deployment, facts: RuleFacts, out: list[Problem]) -> None:
    """F04, for any TensorRT-LLM deployment (the variables conflict in one environment):
    only the catalog's ``transport_env.backend_var`` with one of its ``backend_values``."""
    tenv = ((facts.backend or {}).get("transport_env") or {})
    var = tenv.get("backend_var", "TRTLLM_NIXL_KVCACHE_BACKEND")
    for pool in dep.pools:
        env = pool_env(dep, pool)
        for other in tenv.get("conflicting_vars") or ["NIXL_BACKEND"]:
            if other in env and var in env:
                problem(out, "F04_TRANSPORT_ENV",
                        src(dep, f"pools.{pool.role}.env.{other}", f"env.{other}", f"pools.{pool.role}.env.{var}", f"env.{var}"),
                        f"pool {pool.role} env sets both {other}={env[other]!r} and {var}={env[var]!r}; accepted: only "
                        f"{var} ({', '.join(tenv.get('backend_values') or ['UCX', 'LIBFABRIC'])})",
                        f"TensorRT-LLM reads {var}; drop {other}")
        if var in env and env[var] not in (tenv.get("backend_values") or ["UCX", "LIBFABRIC"]):
            problem(out, "F04_TRANSPORT_ENV", src(dep, f"pools.{pool.role}.env.{var}", f"env.{var}"),
                    f"{var} {env[var]!r} is not accepted; accepted: {', '.join(tenv.get('backend_values') or [])}")


def check_files(plan: Plan, dep: Deployment | None) -> list[Problem]:
    """The LLM-API YAML files as rendered: CUDA graph batch, context worker settings, block
    reuse without a Mamba snapshot interval (seed 000)."""
    out: list[Problem] = []
    for svc in plan.services:
        if svc.role not in ("agg", "prefill", "decode"):
            continue
        for f in svc.files:
            if f.format != "yaml" or not isinstance(f.content, dict) or "hostname" in f.content:
                continue
            cfg = f.content
            cg = cfg.get("cuda_graph_config")
            mbs = cfg.get("max_batch_size") or argv_value(svc.argv, "--max_batch_size")
            if isinstance(cg, dict) and cg.get("max_batch_size") is not None and mbs is not None \
                    and as_int(cg["max_batch_size"]) is not None and as_int(mbs) is not None \
                    and as_int(cg["max_batch_size"]) != as_int(mbs):
                problem(out, "CUDA_GRAPH_BATCH", f"{svc.name}: {f.path}",
                        f"cuda_graph_config.max_batch_size {cg['max_batch_size']} differs from --max_batch_size {mbs}; accepted: {mbs}")
            if svc.role == "prefill" and plan.topology == "disagg":
                if cfg.get("disable_overlap_scheduler") is not True or cfg.get("cuda_graph_config", "missing") is not None:
                    problem(out, "CONTEXT_WORKER_CONFIG", f"{svc.name}: {f.path}",
                            f"context worker has disable_overlap_scheduler {cfg.get('disable_overlap_scheduler')!r} and "
                            f"cuda_graph_config {cfg.get('cuda_graph_config', '(unset)')!r}; accepted: true and null (seed 000)")
            kv = cfg.get("kv_cache_config") or {}
            if kv.get("enable_block_reuse") is True and not ((kv.get("mamba_state_config") or {}).get("periodic_snapshot_interval")
                                                             or kv.get("mamba_state_cache_interval")):
                if dep is None or (catalog_mod.load().models.get(dep.model) or {}).get("block_reuse_needs_mamba_snapshot"):
                    problem(out, "BLOCK_REUSE_SNAPSHOT", f"{svc.name}: {f.path}",
                            "kv_cache_config.enable_block_reuse true without mamba_state_config.periodic_snapshot_interval; "
                            "accepted: an interval > 0 (e.g. 256)")
    return out


# --------------------------------------------------------------------------- bench


def bench_client_argv(python: str, model: str, host: str, port: int, tokenizer: str, cfg: Any,
                      concurrency: int, result_dir: str, result_file: str) -> list[str]:
    """``benchmark_serving`` argv for one point (seed 000 bench.sh, with ``--save-result
    --result-dir --result-filename``); ``cfg`` is a ``glmops.bench.SweepConfig``."""
    argv = [python, "-m", "tensorrt_llm.serve.scripts.benchmark_serving", "--model", model,
            "--tokenizer", tokenizer, "--host", host, "--port", str(port),
            "--backend", "openai", "--dataset-name", "random",
            "--random-input-len", str(cfg.isl), "--random-output-len", str(cfg.osl),
            "--random-prefix-len", "0", "--random-ids",
            "--num-prompts", str(cfg.num_prompts(concurrency)), "--max-concurrency", str(concurrency)]
    if cfg.ignore_eos:
        argv.append("--ignore-eos")
    return argv + ["--tokenize-on-client", "--seed", str(cfg.seed),
                   "--percentile-metrics", "ttft,tpot,itl,e2el",
                   "--save-result", "--result-dir", result_dir, "--result-filename", result_file]


SPEC = EngineSpec(
    name=ENGINE, module=sys.modules[__name__], order=10,
    front_doors=(FrontDoor("trtllm-disaggregated", router,
                           ("trtllm-disagg", "trtllm-llm-api"),  # other top-level keys: LLM-API args
                           ROUTER_OWNED, order=20, args_noun="disagg config key"),),
    agg_front="vllm-router", disagg_front="trtllm-disaggregated",
    flag_sets=_flag_sets, config_flags=("trtllm-llm-api",), config_owned=CONFIG_OWNED,
    rules={"engine": _check_config, "transport": _check_transport_env},
    transport=_transport,
    speculative_own_keys=frozenset({"max_draft_len", "num_speculative_tokens"}),
    speculative_pool_rule=_speculative_pool, speculative_config_rule=_speculative_config,
    plan_rules=check_files,
    metrics_paths=("/prometheus/metrics", "/metrics"),
    work_counters=("trtllm_request_success_total", "trtllm_prompt_tokens_total", "trtllm_generation_tokens_total"),
    success_counters=("trtllm_request_success_total",),
    # F23: TensorRT-LLM exports no KV-transfer counter in Prometheus (tensorrt_llm/metrics/collector.py
    # MetricsCollector list); each request's perf metrics carry timing_metrics.kv_cache_transfer_start/_end
    # and kv_cache_size on the generation worker (RequestPerfMetrics.TimingMetrics bindings), served as a
    # JSON list by /perf_metrics with return_perf_metrics: true (openai_server.py@e7f7345e; S4 route not
    # verified, reference/trtllm-serve.md); the disaggregated proxy pairs them as ctx/gen_perf_metrics.
    kv_transfer=KvTransfer(
        perf_path="/perf_metrics",
        enable="return_perf_metrics: true in the generation worker's config (glmops sets it): /perf_metrics",
        source="tensorrt_llm RequestPerfMetrics.TimingMetrics (kv_cache_size); serve/openai_server.py get_perf_metrics"),
    spec_gauges=("trtllm_spec_decode_acceptance_length",),
    models_from_workers=lambda topology: topology == "disagg",
    models_note="the trtllm-serve disaggregated front door has no /v1/models",
    bench_client=bench_client_argv,
    role_labels={"prefill": "prefill (context)", "decode": "decode (generation)"},
)
