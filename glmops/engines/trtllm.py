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

from typing import Any

from glmops.engines import base
from glmops.engines.base import CATALOG, Ctx, Placement, Settings
from glmops.model import ConfigFile, PoolSpec, Service

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
        from glmops.engines import vllm
        return [vllm.router_service(ctx, workers)]
    from glmops.engines.vllm import router_host
    host = router_host(ctx, workers)
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
