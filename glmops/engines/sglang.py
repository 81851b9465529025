"""SGLang workers (``python -m sglang.launch_server``) and the SGLang router.

Sources: seeds/001 (GB200/B200 recipes: TP4/EP4 prefill x2 + TP4 decode, Mooncake
transfer, ``--kv-events-config`` ZMQ publisher ``tcp://*:5557`` topic ``kv-events``,
page size 64, EAGLE 3 steps / 4 draft tokens with ReplaySSM, HiCache 100 GB per TP rank,
FP8 E4M3 KV, glm45/glm47 parsers), reference/serving-clis.md §3 (flags; multi-node
``--nnodes --node-rank --dist-init-addr``; ``--disaggregation-*``; sglang-router
``--pd-disaggregation --prefill URL BOOTSTRAP --decode URL``),
reference/option-lists/sglang-0.5.23-serve.txt (``--enable-linear-replayssm-spec``,
``--cuda-graph-max-bs-decode``, ``--attn-dp-size``).
"""
from __future__ import annotations

import sys
from typing import Any

from glmops.catalog import flags as F
from glmops.engines import base
from glmops.engines.base import CATALOG, Ctx, Placement
from glmops.engines.registry import EngineSpec, FrontDoor, KvTransfer
from glmops.engines.sglang_args import (  # noqa: F401  (the worker pieces, shared with Dynamo; old names)
    ENGINE, WORKER_OWNED, engine_args, kv_events_wanted, multinode_args, node_ports, speculative_args, worker_env)
from glmops.model import Deployment, PoolSpec, Service


ROUTER_OWNED = {
    "host": "{router}.host (else the first glmops_routers / worker host)",
    "port": "{router}.port",
    "policy": "{router}.policy",
    "worker-urls": "the plan (the workers' addresses and ports)",
    "pd-disaggregation": "glmops_topology (disagg)",
    "prefill": "the plan (the prefill workers and bootstrap ports)",
    "decode": "the plan (the decode workers)",
    "prometheus-port": "the plan (catalog engines.sglang_router.ports.prometheus)",
    "prometheus-host": "{router}.host's address (its metrics listen on the inventory address only)",
}


def worker(ctx: Ctx, pool: PoolSpec, replica: int, pl: Placement) -> list[Service]:
    """One ``sglang.launch_server`` Service per node of the replica."""
    dep = ctx.dep
    st = base.settings_for(dep, pool)
    services: list[Service] = []
    head_ports: dict[str, list[int]] = {}
    for rank, node in enumerate(pl.nodes):
        ports = node_ports(ctx, pool, pl, rank)
        if rank == 0:
            head_ports = ports
        args = engine_args(ctx, pool, pl, st, head_ports)
        http = ports["http"][0]
        argv = base.command(dep, ENGINE) + ["--model-path", dep.checkpoint.local_dir,
                                            "--served-model-name", dep.served_model_name,
                                            "--host", node.host.address, "--port", str(http)]
        argv += base.render_flags(args) + base.render_flags(multinode_args(pl, rank, head_ports))
        services.append(Service(
            name=base.service_name(dep, pool.role, replica, rank), host=node.host.name, role=pool.role,
            engine=ENGINE, address=node.host.address, port=http, gpus=list(node.gpus), ports=ports,
            argv=argv, env=worker_env(ctx, pool, pl, rank, st),
            health_url=base.url(node.host.address, http, "/health"),
            # a PD worker answers a plain request 400 (it needs the router's bootstrap fields);
            # its /health runs a one-token generate itself (serving-clis.md), the deploy's
            # one-token request goes through the router
            ready_url=base.url(node.host.address, http, "/v1/completions")
            if rank == 0 and pool.role == "agg" else "",
            metrics_url=base.metrics_url(ENGINE, node.host.address, ports) if rank == 0 else "",
            start_order=base.ORDER_FOLLOWER if rank else base.ORDER_WORKER,
            replica=replica, node_rank=rank, nnodes=pl.nnodes, runtime=dep.runtime,
            image=base.image_for(dep, ENGINE),
        ))
    services[0].depends_on = [s.name for s in services[1:]]
    return services


def router(ctx: Ctx, workers: list[Service]) -> list[Service]:
    """sglang-router: PD (``--pd-disaggregation --prefill URL BOOTSTRAP --decode URL``)
    or ``--worker-urls``. Policy: RouterSpec.policy (round_robin unless set)."""
    dep = ctx.dep
    host = base.router_host(ctx, workers)
    port = ctx.front_port
    heads = [w for w in workers if w.node_rank == 0]
    policy = dep.router.policy or "round_robin"
    argv = base.command(dep, "sglang_router", runtime="venv")
    prefill = [w for w in heads if w.role == "prefill"]
    decode = [w for w in heads if w.role == "decode"]
    if prefill and decode:
        argv.append("--pd-disaggregation")
        for w in prefill:
            argv += ["--prefill", base.url(w.address, w.port), str(w.ports.get("bootstrap", ["none"])[0])]
        for w in decode:
            argv += ["--decode", base.url(w.address, w.port)]
    else:
        argv += ["--worker-urls"] + [base.url(w.address, w.port) for w in heads]
    argv += ["--policy", policy, "--host", host.address, "--port", str(port)]
    prom = (CATALOG.engine("sglang_router").get("ports") or {}).get("prometheus", 29000)
    prom_port = ctx.alloc(host.name).take(int(prom))
    # its Prometheus listener defaults to 0.0.0.0 (option list): bind the inventory address
    argv += ["--prometheus-host", host.address, "--prometheus-port", str(prom_port[0])]
    argv += base.render_flags({k: v for k, v in dep.router.args.items() if k != "backend"})
    return [Service(
        name=base.service_name(dep, "router"), host=host.name, role="router", engine="sglang_router",
        address=host.address, port=port, ports={"http": [port], "metrics": prom_port}, argv=argv,
        env=base.front_env(dep),
        health_url=base.url(host.address, port, "/health"),
        ready_url=base.url(host.address, port, "/v1/completions"),
        metrics_url=base.metrics_url("sglang_router", host.address, {"metrics": prom_port}),
        start_order=base.ORDER_FRONT, depends_on=[w.name for w in heads], runtime="venv",
    )]



# --------------------------------------------------------------------------- spec


def _flag_sets(dep: Deployment, _cat: Any) -> tuple[list, dict[str, str], str]:
    """sglang.launch_server's option list, the flags this module sets, the version in use."""
    return [(F.load("sglang-serve"), None)], WORKER_OWNED, dep.engine_version


def transport(args: dict, _config: dict) -> str:
    """KV transfer backend of a disaggregated pool (``disaggregation-transfer-backend``, mooncake by default)."""
    return str(args.get("disaggregation-transfer-backend") or "mooncake").lower()


SPEC = EngineSpec(
    name=ENGINE, module=sys.modules[__name__], order=30,
    front_doors=(FrontDoor("sglang-router", router, ("sglang-router",), ROUTER_OWNED, order=30,
                           policy_key="sglang_router"),),
    agg_front="sglang-router", disagg_front="sglang-router",
    flag_sets=_flag_sets, transport=transport,
    work_counters=("sglang:num_requests_total", "sglang:prompt_tokens_total", "sglang:generation_tokens_total"),
    success_counters=("sglang:num_requests_total",),
    # F23: sglang python/sglang/srt/metrics/collector.py: per_stage_req_latency_seconds (label "stage";
    # the decode stage "decode_transferred" is observed once per request whose KV arrived, the prefill one
    # "prefill_transfer_kv_cache"), num_transfer_failed_reqs_total / num_bootstrap_failed_reqs_total.
    # kv_transfer_latency_ms/_speed_gb_s are prefill-side gauges (scheduler stats), so not used here.
    kv_transfer=KvTransfer(
        counters=('sglang:per_stage_req_latency_seconds_count{stage="decode_transferred"}',),
        failures=("sglang:num_transfer_failed_reqs_total", "sglang:num_bootstrap_failed_reqs_total"),
        enable="--enable-metrics on the decode server (glmops renders it)",
        source="sglang python/sglang/srt/metrics/collector.py (SchedulerMetricsCollector)"),
    spec_gauges=("sglang:spec_accept_length",),
)
