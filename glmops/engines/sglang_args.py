"""An SGLang worker's flags, ports and env: what ``sglang.launch_server`` and Dynamo's
``dynamo.sglang`` workers share.

Not an engine (no ``SPEC``): ``glmops.engines.sglang`` and ``glmops.engines.dynamo`` both build
workers from these pieces, so neither imports the other. Sources: see ``glmops.engines.sglang``.
"""
from __future__ import annotations

from typing import Any

from glmops.engines import base
from glmops.engines.base import CATALOG, Ctx, Placement, Settings
from glmops.model import PoolSpec

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
    derived.update(base.setting_flags(st, {"max_seq_len": "context-length", "max_batch_size": "max-running-requests",
                                            "max_num_tokens": "chunked-prefill-size"}))
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
    return base.without_rdma_devices(env, dep, pool) if dep.topology == "disagg" and pool.role != "agg" else env
