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

from glmops.engines import base
from glmops.engines.base import CATALOG, Ctx, Placement, Settings
from glmops.catalog import flags as F
from glmops.engines.registry import EngineSpec, FrontDoor
from glmops.model import Deployment, PoolSpec, Service

ENGINE = "sglang"

# Flags this module sets itself -> what sets them (see glmops.engines.vllm.WORKER_OWNED).
WORKER_OWNED = {
    "model-path": "glmops_checkpoint (the snapshot's local directory)",
    "served-model-name": "glmops_served_model_name",
    "host": "the host's glmops_address (else ansible_host)",
    "port": "{pool}.port (the plan picks one per replica and host)",
    "tp-size": "{pool}.tp",
    "pp-size": "{pool}.pp",
    "dp-size": "{pool}.dp",
    "ep-size": "{pool}.ep",
    "attn-dp-size": "{pool}.attention_dp",
    "nnodes": "the plan (nodes a replica spans: {pool}.tp x pp x dp over the hosts' GPUs)",
    "node-rank": "the plan (multi-node placement)",
    "dist-init-addr": "the plan (the replica's head host and dist-init port)",
    "disaggregation-mode": "glmops_topology and the pool's role",
    "disaggregation-bootstrap-port": "the plan (bootstrap port the router is given)",
}
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


def speculative_args(st: Settings) -> dict[str, Any]:
    """Engine-neutral speculative settings -> SGLang flags.

    ``{method: eagle, num_steps: S, num_draft_tokens: D, topk: K}`` as seed 001 names it;
    ``{method: mtp, num_speculative_tokens: N}`` -> NEXTN (= EAGLE on the model's MTP
    layer) with N steps, top-k 1 and N+1 draft tokens (a chain: drafts = steps + 1).
    """
    spec = st.speculative
    if not spec:
        return {}
    method = str(spec.get("method", "eagle")).lower()
    if method == "mtp":
        n = int(spec.get("num_speculative_tokens", 1))
        return {"speculative-algorithm": "NEXTN", "speculative-num-steps": n,
                "speculative-eagle-topk": 1, "speculative-num-draft-tokens": n + 1}
    steps = int(spec.get("num_steps", spec.get("num_speculative_tokens", 3)))
    topk = int(spec.get("topk", 1))
    drafts = int(spec.get("num_draft_tokens", steps + 1))
    return {"speculative-algorithm": method.upper(), "speculative-num-steps": steps,
            "speculative-eagle-topk": topk, "speculative-num-draft-tokens": drafts}


def kv_events_wanted(ctx: Ctx) -> bool:
    """KV events are published when the front door routes on them (Dynamo ``kv``)."""
    return ctx.kv_events


def engine_args(ctx: Ctx, pool: PoolSpec, pl: Placement, st: Settings, ports: dict[str, list[int]],
                *, dynamo: bool = False) -> dict[str, Any]:
    """SGLang server flags for one replica (no model path, host, port, multi-node).

    Precedence (low -> high): derived, recipe args, ``glmops_engine_args``, pool
    ``engine_args``.
    """
    dep = ctx.dep
    # metrics on (catalog engines.sglang.metrics.args: --enable-metrics; off by default upstream)
    derived: dict[str, Any] = dict((CATALOG.engine(ENGINE).get("metrics") or {}).get("args") or {})
    derived["tp-size"] = pool.tp
    if pool.ep > 1:
        derived["ep-size"] = pool.ep
    if pool.dp > 1:
        derived["dp-size"] = pool.dp
    if pool.attention_dp:
        derived["attn-dp-size"] = pool.dp if pool.dp > 1 else pool.tp
    if pool.pp > 1:
        derived["pp-size"] = pool.pp
    kv = base.engine_kv_dtype(ENGINE, st.kv_cache_dtype)
    if kv != "auto":
        derived["kv-cache-dtype"] = kv
    if st.max_seq_len is not None:
        derived["context-length"] = st.max_seq_len
    if st.max_batch_size is not None:
        derived["max-running-requests"] = st.max_batch_size
    if st.max_num_tokens is not None:
        derived["chunked-prefill-size"] = st.max_num_tokens
    derived.update(speculative_args(st))
    if st.parsers:
        parsers = CATALOG.parsers(dep.model, "dynamo" if dynamo else ENGINE)
        prefix = "dyn-" if dynamo else ""
        if parsers.get("tool"):
            derived[f"{prefix}tool-call-parser"] = parsers["tool"]
        if parsers.get("reasoning"):
            derived[f"{prefix}reasoning-parser"] = parsers["reasoning"]
    if dep.topology == "disagg" and pool.role != "agg":
        derived["disaggregation-mode"] = pool.role
        backend = st.recipe.kv_transfer.get("backend", "mooncake")
        derived["disaggregation-transfer-backend"] = backend
        if "bootstrap" in ports:
            derived["disaggregation-bootstrap-port"] = ports["bootstrap"][0]
        devs = [d.split(":")[0] for d in pl.head.host.rdma_devices]
        if devs and backend.startswith("mooncake"):
            derived["disaggregation-ib-device"] = ",".join(devs)
    if "kv_events" in ports:
        derived["kv-events-config"] = {"publisher": "zmq", "endpoint": f"tcp://*:{ports['kv_events'][0]}",
                                       "topic": "kv-events"}
        page = CATALOG.engine(ENGINE).get("page_size")
        if page:
            derived["page-size"] = page
    return base.merge_args(derived, st.recipe.args, dep.engine_args, pool.engine_args)


def node_ports(ctx: Ctx, pool: PoolSpec, pl: Placement, rank: int, *, http: bool = True) -> dict[str, list[int]]:
    """HTTP (every node: ranks >= 1 answer /health there), bootstrap (prefill),
    KV events (when routed on them), dist-init (head of a multi-node replica)."""
    node = pl.nodes[rank]
    alloc = ctx.alloc(node.host.name)
    eng_ports = CATALOG.engine(ENGINE).get("ports") or {}
    ports: dict[str, list[int]] = {}
    if http:
        ports["http"] = alloc.take(base.PORT_BASES["http"], 1, want=pl.http_want if rank == 0 else None)
    if rank == 0 and ctx.dep.topology == "disagg" and pool.role == "prefill":
        ports["bootstrap"] = alloc.take(int(eng_ports.get("bootstrap", 8998)))
    if rank == 0 and kv_events_wanted(ctx):
        ports["kv_events"] = alloc.take(int(eng_ports.get("kv_events", 5557)))
    if pl.nnodes > 1 and rank == 0:
        ports["dist_init"] = alloc.take(base.PORT_BASES["dist_init"])
    return ports


def multinode_args(pl: Placement, rank: int, head_ports: dict[str, list[int]]) -> dict[str, Any]:
    """``--nnodes N --node-rank k --dist-init-addr HEAD:PORT`` for a replica spanning nodes."""
    if pl.nnodes == 1:
        return {}
    return {"nnodes": pl.nnodes, "node-rank": rank,
            "dist-init-addr": f"{pl.head.host.address}:{head_ports['dist_init'][0]}"}


def worker_env(ctx: Ctx, pool: PoolSpec, pl: Placement, rank: int, st: Settings, engine_key: str = ENGINE) -> dict[str, str]:
    """Devices, KV transport env identical on both disagg pools (F04/F06), catalog and
    inventory env, offline flags (F12); ``engine_key`` adds that engine's pins (Dynamo)."""
    dep = ctx.dep
    node = pl.nodes[rank]
    env: dict[str, str] = {}
    env.update(base.visible_devices(dep, node.gpus))
    if dep.topology == "disagg" and pool.role != "agg":
        env.update(base.transport_env(dep, [node.host], ("UCX_", "NIXL_", "MC_")))
    env.update(base.base_env(dep, pool, st.recipe, ENGINE))
    if engine_key != ENGINE:
        env.update({k: str(v) for k, v in (CATALOG.engine(engine_key).get("env") or {}).items()})
    return env


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
    spec_gauges=("sglang:spec_accept_length",),
)
