"""vllm-router: the front door of several vLLM or TensorRT-LLM workers (kind ``vllm-router``).

Not an engine (no ``SPEC``): the vLLM and TensorRT-LLM modules both build it, so it lives
apart and neither imports the other. Source: seed 002 (PD command), the router's option list
(glmops/catalog/flags/vllm-router).
"""
from __future__ import annotations

from glmops.engines import base
from glmops.engines.base import CATALOG, Ctx
from glmops.model import Service

# Flags this module sets itself -> what sets them ({router} = glmops_topologies.<topology>.router);
# glmops.rules refuses them in router args (ENGINE_FLAG_OWNED).
ROUTER_OWNED = {
    "host": "{router}.host (else the first glmops_routers / worker host)",
    "port": "{router}.port",
    "policy": "{router}.policy",
    "worker-urls": "the plan (the workers' addresses and ports)",
    "prefill": "the plan (the prefill workers)",
    "decode": "the plan (the decode workers)",
    "vllm-pd-disaggregation": "glmops_topology (disagg)",
    "intra-node-data-parallel-size": "glmops (one router entry per worker)",
    "prometheus-port": "the plan (catalog engines.vllm_router.ports.prometheus)",
    "prometheus-host": "{router}.host's address (its metrics listen on the inventory address only)",
}


def router_service(ctx: Ctx, workers: list[Service], *, name_role: str = "router") -> Service:
    """vllm-router in front of ``workers``: PD mode when there are prefill/decode
    workers (seed 002 command), else round robin over ``--worker-urls``."""
    dep = ctx.dep
    host = base.router_host(ctx, workers)
    rport = ctx.front_port
    rs = dep.router
    policy = rs.policy or "round_robin"
    heads = [w for w in workers if w.node_rank == 0 and w.port]
    prefill = [w for w in heads if w.role == "prefill"]
    decode = [w for w in heads if w.role == "decode"]
    argv = base.command(dep, "vllm_router", runtime="venv") + ["--policy", policy]
    if prefill and decode:
        argv.append("--vllm-pd-disaggregation")
        for w in prefill:
            argv += ["--prefill", base.url(w.address, w.port)]
        for w in decode:
            argv += ["--decode", base.url(w.address, w.port)]
    else:
        argv += ["--worker-urls"] + [base.url(w.address, w.port) for w in heads]
    argv += ["--host", host.address, "--port", str(rport), "--intra-node-data-parallel-size", "1"]
    prom = (CATALOG.engine("vllm_router").get("ports") or {}).get("prometheus", 29000)
    ports = {"http": [rport], "metrics": ctx.alloc(host.name).take(int(prom))}
    # its Prometheus listener defaults to 127.0.0.1:29000 (option list): bind the inventory address
    argv += ["--prometheus-host", host.address, "--prometheus-port", str(ports["metrics"][0])]
    extra = {k: v for k, v in rs.args.items() if k not in ("backend",)}
    argv += base.render_flags(extra)
    env = base.front_env(dep)
    return Service(
        name=base.service_name(dep, name_role), host=host.name, role="router", engine="vllm_router",
        address=host.address, port=rport, ports=ports, argv=argv, env=env,
        health_url=base.url(host.address, rport, "/health"),
        ready_url=base.url(host.address, rport, "/v1/completions"),
        metrics_url=base.metrics_url("vllm_router", host.address, ports),
        start_order=base.ORDER_FRONT, depends_on=[w.name for w in heads], runtime="venv",
    )


def router(ctx: Ctx, workers: list[Service]) -> list[Service]:
    """The vllm-router front door, as a list (``FrontDoor.router``)."""
    return [router_service(ctx, workers)]
