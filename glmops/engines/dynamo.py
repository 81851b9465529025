"""NVIDIA Dynamo: ``python -m dynamo.frontend`` over ``python -m dynamo.vllm``,
``python -m dynamo.sglang`` or (the CPU lab) ``python -m dynamo.mocker`` workers.

Sources: seeds/001 (the Dynamo recipes: vLLM on H200/GB200, SGLang on B200/GB200,
KV-aware or round-robin routing, worker KV events, ``DYN_HEALTH_CHECK_REQUEST_TIMEOUT``),
reference/serving-clis.md §4 (frontend ``--http-host --http-port --router-mode
--kv-cache-block-size --discovery-backend --request-plane --event-plane``; workers take
Dynamo flags plus the engine's own; ``dynamo.vllm`` rejects vLLM frontend flags, so
parsers are ``--dyn-tool-call-parser``/``--dyn-reasoning-parser``; ``--headless`` for
secondary nodes; ``DYN_SYSTEM_PORT`` serves a worker's ``/health``; etcd is the default
discovery store, ``file`` works on one host), lab-recipe/FINDINGS.md (``DYN_*_HOST``
advertise addresses, ``DYN_FILE_KV``). The mocker (``glmops_dynamo_backend: mocker``):
Dynamo's simulated worker, flags from its 1.6.1 parser (catalog ``engines.mocker.flags``);
measured on lab hosts: file discovery spans hosts when ``DYN_FILE_KV`` is one directory they
all mount (entries are files kept alive by mtime, expired ones are removed), and a worker's
``/health`` turns 200 only with ``DYN_HEALTH_CHECK_ENABLED=true`` (catalog env pin).
"""
from __future__ import annotations

import sys
from typing import Any

from glmops.catalog import flags as F
from glmops.engines import base
from glmops.engines import sglang_args as sglang  # the SGLang worker pieces (not the sglang engine module)
from glmops.engines import vllm_args as vllm  # the vLLM worker pieces (not the vllm engine module)
from glmops.engines.base import CATALOG, Ctx, Placement
from glmops.engines.problems import problem, src
from glmops.engines.registry import EngineSpec, FrontDoor, RuleFacts
from glmops.model import ConfigFile, Deployment, PoolSpec, Problem, Service
from glmops.variables import VARIABLES

ENGINE = "dynamo"
# Flags this module sets itself -> what sets them (see glmops.engines.vllm.WORKER_OWNED). Workers
# also own their backend's (vllm/sglang WORKER_OWNED); discovery flags must match the frontend's.
_DISCOVERY = "glmops (discovery: DYN_FILE_KV in glmops_env, else a file store on one host or etcd)"
FRONTEND_OWNED = {
    "http-host": "{router}.host (else the first glmops_routers / worker host)",
    "http-port": "{router}.port",
    "router-mode": "{router}.policy",
    "kv-cache-block-size": "the workers' KV block size (vLLM block-size, SGLang page size, mocker block-size)",
    "discovery-backend": _DISCOVERY,
    "request-plane": _DISCOVERY,
    "event-plane": _DISCOVERY,
}
WORKER_OWNED = {
    "discovery-backend": _DISCOVERY,
    "request-plane": _DISCOVERY,
    "event-plane": _DISCOVERY,
    "disaggregation-mode": "glmops_topology and the pool's role",
    "kv-events-config": "the plan (KV events port, when the frontend routes on KV)",
}
MOCKER_OWNED = {
    "model-path": "glmops_checkpoint (the snapshot's local directory)",
    "model-name": "glmops_served_model_name",
    "data-parallel-size": "{pool}.dp",
    **{k: v for k, v in WORKER_OWNED.items() if k != "kv-events-config"},
}
#: every flag of the store units (etcd 3.4, nats-server 2.9): glmops's own, no user input reaches them
STORE_OWNED = {f: "the Plan's discovery store member (glmops_dynamo_etcd_hosts, inventory address)" for f in (
    "name", "data-dir", "listen-client-urls", "advertise-client-urls", "listen-peer-urls",
    "initial-advertise-peer-urls", "initial-cluster", "initial-cluster-token", "initial-cluster-state",
    "addr", "port", "http_port", "jetstream", "store_dir")}
ADVERTISE_VARS = ("DYN_TCP_RPC_HOST", "DYN_EVENT_PLANE_HOST", "DYN_TCP_RESPONSE_STREAM_HOST",
                  "DYN_HTTP_RPC_HOST", "DYN_SYSTEM_HOST")


#: the plane flags set once for the whole deployment (frontend and every worker) and their env twins
#: (ai-dynamo 1.6.1 dynamo/common/configuration/groups/runtime_args.py: each flag's ``env_var``; catalog
#: ``engines.etcd``/``engines.nats`` sources); "as flags or env, never both" (F20): glmops renders flags
PLANE_ENV = {"DYN_DISCOVERY_BACKEND": "discovery-backend", "DYN_REQUEST_PLANE": "request-plane",
             "DYN_EVENT_PLANE": "event-plane", "DYN_RESPONSE_PLANE": "response-plane"}
#: where the stores are: glmops sets these from the Plan's store members
STORE_ENV = ("ETCD_ENDPOINTS", "NATS_SERVER")
ROLE_STORE = "store"


def planes(dep) -> dict[str, str]:
    """``{request-plane, event-plane}`` for the whole deployment: ``glmops_dynamo_request_plane``
    (tcp | nats, default tcp) and ``glmops_dynamo_event_plane`` (zmq | nats, default zmq)."""
    return {"request-plane": str(dep.dynamo_request_plane or "tcp"),
            "event-plane": str(dep.dynamo_event_plane or "zmq")}


def uses_nats(dep) -> bool:
    """True when a plane the user selected is NATS (then the Plan deploys ``nats-server``)."""
    return "nats" in planes(dep).values()


def store_hosts(ctx: Ctx) -> list[str]:
    """The etcd members' hosts: ``glmops_dynamo_etcd_hosts`` (inventory order), else the front door's host."""
    named = [str(h) for h in ctx.dep.dynamo_etcd_hosts or [] if str(h) in ctx.dep.hosts]
    return named or [ctx.front_host]


def _store_port(key: str, purpose: str) -> int:
    return int(CATALOG.engine(key)["ports"][purpose])


def backend_kind(ctx: Ctx) -> str:
    """``file`` or ``etcd`` (see :func:`discovery`)."""
    if ctx.dep.env.get("DYN_FILE_KV"):
        return "file"
    if len(ctx.hosts_used) <= 1 and not ctx.dep.dynamo_etcd_hosts:
        return "file"
    return "etcd"


def etcd_endpoints(ctx: Ctx) -> str:
    """``ETCD_ENDPOINTS``: every planned member's client URL, comma separated."""
    return ",".join(base.url(ctx.dep.hosts[h].address, _store_port("etcd", "client")) for h in store_hosts(ctx))


def nats_server(ctx: Ctx) -> str:
    """``NATS_SERVER``: the NATS broker on the front door's host."""
    return f"nats://{ctx.dep.hosts[ctx.front_host].address}:{_store_port('nats', 'client')}"


def discovery(ctx: Ctx) -> tuple[dict[str, Any], dict[str, str]]:
    """Flags and env for the planes, decided once for the frontend and every worker (F20).
    ``DYN_FILE_KV`` in ``glmops_env``: ``file`` in that directory, which must be one directory
    every host mounts (the lab's shared bind); else ``file`` under the state dir when every
    service is on one host and no store host is named; otherwise etcd (``ETCD_ENDPOINTS``
    naming every member of the Plan's store, :func:`stores`). Request and event planes from
    :func:`planes` (1.6.1 defaults tcp and zmq need no NATS); ``NATS_SERVER`` only when one is nats."""
    dep = ctx.dep
    flags: dict[str, Any] = dict(planes(dep))
    kind = backend_kind(ctx)
    flags["discovery-backend"] = kind
    if kind == "file":
        env = {"DYN_FILE_KV": str(dep.env.get("DYN_FILE_KV") or f"{dep.state_dir}/{dep.name}/dynamo-kv")}
    else:
        env = {"ETCD_ENDPOINTS": etcd_endpoints(ctx)}
    if uses_nats(dep):
        env["NATS_SERVER"] = nats_server(ctx)
    return flags, env


def discovery_note(ctx: Ctx) -> list[str]:
    """Plan notes: where workers and frontend meet, which planes and why no NATS, who may reach the store."""
    flags, env = discovery(ctx)
    pl = planes(ctx.dep)
    notes = []
    if flags["discovery-backend"] == "file":
        shared = " (one directory shared by every host)" if len(ctx.hosts_used) > 1 else ""
        notes.append(f"dynamo discovery: file store {env['DYN_FILE_KV']}{shared}")
    else:
        members = ", ".join(f"{h}:{_store_port('etcd', 'client')}" for h in store_hosts(ctx))
        notes.append(f"dynamo discovery: etcd ({len(store_hosts(ctx))} member(s): {members}), started and "
                     "gated before any worker; ETCD_ENDPOINTS names every member")
        clients = sorted({ctx.dep.hosts[h].address for h in ctx.hosts_used})
        notes.append("dynamo store access: etcd listens only on its members' inventory addresses (client "
                     f"{_store_port('etcd', 'client')}, peer {_store_port('etcd', 'peer')}, no TLS); only "
                     f"these hosts need to reach it: {', '.join(clients)} - firewall the ports for every other "
                     "address (README: Dynamo across hosts)")
    if uses_nats(ctx.dep):
        notes.append(f"dynamo planes: request {pl['request-plane']}, event {pl['event-plane']}: NATS "
                     f"({env['NATS_SERVER']}) deployed and gated before any worker")
    else:
        notes.append(f"dynamo planes: request {pl['request-plane']}, event {pl['event-plane']} "
                     "(set once for the frontend and every worker): no NATS needed")
    return notes


def stores(ctx: Ctx, workers: list[Service]) -> list[Service]:
    """The discovery store's services (start order 1, before every worker): one etcd
    member per :func:`store_hosts` host when discovery is etcd, plus ``nats-server`` on the
    front door's host when a plane is NATS. Each binds its client and peer ports to the
    host's inventory address only (never 0.0.0.0), keeps its data in the deployment's state
    dir (``<state_dir>/<dep>/etcd-<member>``) and is gated on its own health URL (etcd
    ``/health``, NATS ``/healthz``); an etcd member's ``metrics_url`` is its client URL's
    ``/metrics`` (catalog ``engines.etcd.metrics``), a scrape target. Debian packages ``etcd-server`` / ``nats-server``
    (catalog ``engines.etcd`` / ``engines.nats``)."""
    dep = ctx.dep
    out: list[Service] = []
    if backend_kind(ctx) == "etcd":
        etcd = CATALOG.engine("etcd")
        client, peer = _store_port("etcd", "client"), _store_port("etcd", "peer")
        members = store_hosts(ctx)
        names = {h: base.service_name(dep, "etcd", i) for i, h in enumerate(members)}
        cluster = ",".join(f"{names[h]}={base.url(dep.hosts[h].address, peer)}" for h in members)
        for i, h in enumerate(members):
            addr = dep.hosts[h].address
            ports = {"client": ctx.alloc(h).take(client, 1, want=client),
                     "peer": ctx.alloc(h).take(peer, 1, want=peer)}
            argv = [str(etcd["binary"]), "--name", names[h], "--data-dir", f"{dep.state_dir}/{dep.name}/{names[h]}",
                    "--listen-client-urls", base.url(addr, client), "--advertise-client-urls", base.url(addr, client),
                    "--listen-peer-urls", base.url(addr, peer), "--initial-advertise-peer-urls", base.url(addr, peer),
                    "--initial-cluster", cluster, "--initial-cluster-token", f"glm-{dep.name}",
                    "--initial-cluster-state", "new"]
            out.append(Service(
                name=names[h], host=h, role=ROLE_STORE, engine="etcd", address=addr, port=client, ports=ports,
                argv=argv, env={}, health_url=base.url(addr, client, str(etcd.get("health_path") or "/health")),
                ready_url="", metrics_url=base.metrics_url("etcd", addr, ports),
                start_order=base.ORDER_STORE, replica=i, runtime="venv"))
    if uses_nats(dep):
        nats = CATALOG.engine("nats")
        h = ctx.front_host
        addr = dep.hosts[h].address
        client, monitor = _store_port("nats", "client"), _store_port("nats", "monitor")
        ports = {"client": ctx.alloc(h).take(client, 1, want=client),
                 "monitor": ctx.alloc(h).take(monitor, 1, want=monitor)}
        out.append(Service(
            name=base.service_name(dep, "nats"), host=h, role=ROLE_STORE, engine="nats", address=addr, port=client,
            ports=ports, argv=[str(nats["binary"]), "--addr", addr, "--port", str(client), "--http_port",
                               str(monitor), "--jetstream", "--store_dir", f"{dep.state_dir}/{dep.name}/nats"],
            env={}, health_url=base.url(addr, monitor, str(nats.get("health_path") or "/healthz")),
            ready_url="", start_order=base.ORDER_STORE, runtime="venv"))
    return out


def registered(health: dict, endpoint: str = "generate") -> list[dict]:
    """The worker instances Dynamo's frontend lists in its ``/health`` document (1.6.1: an
    ``instances`` array of ``{namespace, component, endpoint, instance_id, transport}``, one per
    registered endpoint of a worker process; measured on the lab), the ``endpoint`` ones, once
    per ``instance_id``. The host-side twin is roles/discovery_store/files/glmops_store_check.py."""
    seen: dict[Any, dict] = {}
    for inst in (health or {}).get("instances") or []:
        if isinstance(inst, dict) and inst.get("endpoint") == endpoint:
            seen.setdefault(inst.get("instance_id"), inst)
    return list(seen.values())


def plane_problems(dep) -> list[tuple[str, str, str]]:
    """(path, key, value) of every per-pool or deployment-wide override of a plane or a store
    address (``env`` ``DYN_REQUEST_PLANE``/``DYN_EVENT_PLANE``/``DYN_DISCOVERY_BACKEND``/
    ``DYN_RESPONSE_PLANE``/``ETCD_ENDPOINTS``/``NATS_SERVER``, or the plane flags in
    ``engine_args``): glmops decides the planes once (F20)."""
    found = []
    scopes = [("glmops_env", dep.env, "glmops_engine_args", dep.engine_args)]
    for pool in dep.pools:
        where = f"glmops_topologies.{dep.topology}.pools.{pool.role}"
        scopes.append((f"{where}.env", pool.env, f"{where}.engine_args", pool.engine_args))
    for env_path, env, args_path, args in scopes:
        per_pool = env_path != "glmops_env"
        for key in sorted(env or {}):
            if key in PLANE_ENV or key in STORE_ENV or (per_pool and key == "DYN_FILE_KV"):
                found.append((dep.source(env_path), key, str(env[key])))
        for key in sorted(args or {}):
            # the other plane flags are glmops's own (WORKER_OWNED: ENGINE_FLAG_OWNED names them)
            if str(key).lstrip("-") == "response-plane":
                found.append((dep.source(args_path), str(key), str(args[key])))
    return found


# engine-neutral policy names (recipes.yaml layouts, RouterSpec.policy) -> --router-mode
ROUTER_MODES = {"kv_aware": "kv", "cache_aware": "kv", "kv": "kv", "round_robin": "round-robin",
                "power_of_two": "power-of-two", "least_loaded": "least-loaded", "random": "random",
                "direct": "direct", "device_aware_weighted": "device-aware-weighted"}


def router_mode(dep) -> str:
    """Dynamo ``--router-mode`` for the deployment's router policy (hyphenated; the
    frontend rejects ``round_robin``). Unknown names pass through hyphenated."""
    return policy_mode(dep.router.policy or "round_robin")


def policy_mode(policy: str) -> str:
    """``--router-mode`` for an engine-neutral policy name (see :data:`ROUTER_MODES`)."""
    key = (policy or "round_robin").replace("-", "_")
    return ROUTER_MODES.get(key, key.replace("_", "-"))


def router_policy(ctx: Ctx) -> str:
    """:func:`router_mode` for the context's deployment."""
    return router_mode(ctx.dep)


def mocker_args(ctx: Ctx, pool: PoolSpec, st: base.Settings) -> dict[str, Any]:
    """``dynamo.mocker`` flags (names without dashes) for one pool: recipe args < the
    Deployment's limits (``--max-model-len``, ``--max-num-seqs``,
    ``--max-num-batched-tokens``, ``--kv-cache-dtype`` unless auto, ``--data-parallel-size``,
    ``--disaggregation-mode`` for disagg pools; ``--block-size`` from the catalog so the KV
    router hashes with the same block) < ``glmops_engine_args`` < pool ``engine_args``.
    Source: ``python -m dynamo.mocker --help`` (1.6.1); every name is in catalog
    ``engines.mocker.flags``."""
    dep = ctx.dep
    eng = CATALOG.engine("mocker")
    derived: dict[str, Any] = {"block-size": eng.get("block_size")}
    if st.max_seq_len:
        derived["max-model-len"] = st.max_seq_len
    if st.max_batch_size:
        derived["max-num-seqs"] = st.max_batch_size
    if st.max_num_tokens:
        derived["max-num-batched-tokens"] = st.max_num_tokens
    kv = base.engine_kv_dtype("mocker", st.kv_cache_dtype)
    if kv and kv != "auto":
        derived["kv-cache-dtype"] = kv
    if pool.dp > 1:
        derived["data-parallel-size"] = pool.dp
    if dep.topology == "disagg" and pool.role != "agg":
        derived["disaggregation-mode"] = pool.role
    return base.merge_args(st.recipe.args, derived, dep.engine_args, pool.engine_args)


def worker(ctx: Ctx, pool: PoolSpec, replica: int, pl: Placement) -> list[Service]:
    """One Dynamo worker Service per node (backend from ``glmops_dynamo_backend``)."""
    dep = ctx.dep
    backend = base.backend_of(dep)
    st = base.settings_for(dep, pool)
    disc_flags, disc_env = discovery(ctx)
    kv_route = router_policy(ctx) == "kv"
    services: list[Service] = []
    head_ports: dict[str, list[int]] = {}
    for rank, node in enumerate(pl.nodes):
        alloc = ctx.alloc(node.host.name)
        overlay: list[ConfigFile] = []
        if backend == "mocker":
            ports = {}
            argv = base.command(dep, ENGINE, CATALOG.engine("mocker").get("binary")) + [
                "--model-path", dep.checkpoint.local_dir, "--model-name", dep.served_model_name]
            argv += base.render_flags(mocker_args(ctx, pool, st))
            env = base.base_env(dep, pool, st.recipe, ENGINE)
        elif backend == "sglang":
            ports = sglang.node_ports(ctx, pool, pl, rank, http=False)
            if rank == 0:
                head_ports = ports
            args = sglang.engine_args(ctx, pool, pl, st, head_ports, dynamo=True)
            argv = base.command(dep, ENGINE, "python -m dynamo.sglang") + [
                "--model-path", dep.checkpoint.local_dir, "--served-model-name", dep.served_model_name]
            argv += base.render_flags(args) + base.render_flags(sglang.multinode_args(pl, rank, head_ports))
            env = sglang.worker_env(ctx, pool, pl, rank, st, engine_key=ENGINE)
        else:
            ports = vllm.node_ports(ctx, pool, pl, rank, st, None, kv_events=kv_route and rank == 0, http=False)
            if rank == 0:
                head_ports = ports
            args = vllm.engine_args(ctx, pool, pl, st, dynamo=True)
            if dep.topology == "disagg" and pool.role != "agg":
                args["disaggregation-mode"] = pool.role
            if "kv_events" in ports:
                args["kv-events-config"] = {"enable_kv_cache_events": True, "publisher": "zmq",
                                            "endpoint": f"tcp://*:{ports['kv_events'][0]}", "topic": "kv-events"}
            argv = base.command(dep, ENGINE, "python -m dynamo.vllm") + [
                "--model", dep.checkpoint.local_dir, "--served-model-name", dep.served_model_name]
            argv += base.render_flags(args)
            argv += base.render_flags(vllm.multinode_args(ctx, pool, pl, rank, head_ports))
            env = vllm.worker_env(ctx, pool, pl, rank, st, ports, engine_key=ENGINE)
            overlay, overlay_env = base.image_overlay(dep, "vllm")
            env.update(overlay_env)
        if rank == 0 or backend == "sglang":
            argv += base.render_flags(disc_flags)
        system = alloc.take(base.PORT_BASES["system"])
        ports["system"] = system
        env.update(disc_env)
        env["DYN_SYSTEM_PORT"] = str(system[0])
        for var in ADVERTISE_VARS:
            env[var] = node.host.address
        services.append(Service(
            name=base.service_name(dep, pool.role, replica, rank), host=node.host.name, role=pool.role,
            engine=ENGINE, address=node.host.address, port=system[0], gpus=list(node.gpus), ports=ports,
            argv=argv, env=env, files=overlay,
            health_url=base.url(node.host.address, system[0], "/health"),
            # a Dynamo worker has no OpenAI endpoint: its /health runs the canary request
            # (DYN_HEALTH_CHECK_REQUEST_TIMEOUT); the one-token request goes through the frontend
            ready_url="",
            # DYN_SYSTEM_PORT serves /metrics beside /health, bound to DYN_SYSTEM_HOST (the address)
            metrics_url=base.metrics_url(ENGINE, node.host.address, ports, "worker_port"),
            start_order=base.ORDER_FOLLOWER if rank else base.ORDER_WORKER,
            replica=replica, node_rank=rank, nnodes=pl.nnodes, runtime=dep.runtime,
            image=base.image_for(dep, "vllm" if backend == "vllm" else ENGINE),
        ))
    services[0].depends_on = [s.name for s in services[1:]]
    return services


def block_size(ctx: Ctx) -> int | None:
    """KV block size the KV router hashes with: SGLang page size (seed 001: 64), the
    mocker's ``--block-size`` (catalog default 64) or the vLLM ``block-size`` flag when a
    layer sets it. None (no ``--kv-cache-block-size``) for a vLLM worker without one: vLLM
    picks the block at start-up from the checkpoint's config and the attention backend (for a
    hybrid model the attention page must cover the linear-attention state page,
    ``HybridAttentionMambaModelConfig.verify_and_update_config``), which no static plan knows;
    the ``dynamo.vllm`` worker registers the block it got (``register_model(...,
    kv_cache_block_size=...)``, ``cache_info.get_configured_kv_event_block_size``) and the
    frontend builds the KV router with the card's ``kv_cache_block_size``. Catalog
    ``engines.dynamo.sources.router_block_size``."""
    dep = ctx.dep
    if base.backend_of(dep) == "sglang":
        return CATALOG.engine("sglang").get("page_size")
    if base.backend_of(dep) == "mocker":
        for pool in dep.pools:
            return int(mocker_args(ctx, pool, base.settings_for(dep, pool))["block-size"])
        return None
    sizes = []
    for pool in dep.pools:
        st = base.settings_for(dep, pool)
        args = base.merge_args(st.recipe.args, dep.engine_args, pool.engine_args)
        if args.get("block-size") is not None:
            sizes.append(int(args["block-size"]))
    if not sizes and CATALOG.engine(ENGINE).get("router_block_size") != "registered":
        return 16  # vLLM's CUDA default, for a catalog that says the router cannot learn it
    return sizes[0] if sizes else None


def router(ctx: Ctx, workers: list[Service]) -> list[Service]:
    """The Dynamo frontend on the front door host."""
    dep = ctx.dep
    host = dep.hosts[ctx.front_host]
    port = ctx.front_port
    mode = router_policy(ctx)
    flags: dict[str, Any] = {"http-host": host.address, "http-port": port, "router-mode": mode}
    if mode == "kv" and block_size(ctx) is not None:
        flags["kv-cache-block-size"] = block_size(ctx)
    disc_flags, disc_env = discovery(ctx)
    flags.update(disc_flags)
    flags.update({k: v for k, v in dep.router.args.items() if k != "backend"})
    ctx.notes.extend(discovery_note(ctx))
    image = base.image_for(dep, ENGINE)
    argv = base.command(dep, ENGINE, runtime=dep.runtime if image else "venv") + base.render_flags(flags)
    env = base.front_env(dep)
    env.update(disc_env)
    for var in ADVERTISE_VARS:
        env[var] = host.address
    env.update(base.offline_env(dep))
    return [Service(
        name=base.service_name(dep, "frontend"), host=host.name, role="frontend", engine=ENGINE,
        address=host.address, port=port, ports={"http": [port]}, argv=argv, env=env,
        health_url=base.url(host.address, port, "/health"),
        ready_url=base.url(host.address, port, "/v1/completions"),
        metrics_url=base.metrics_url(ENGINE, host.address, {"http": [port]}),
        start_order=base.ORDER_FRONT, depends_on=[w.name for w in workers if w.node_rank == 0],
        runtime=dep.runtime if image else "venv", image=image,
        # every planned worker registered (its /health lists each worker process once)
        instances=len([w for w in workers if w.node_rank == 0 and w.role != ROLE_STORE]),
    )]


# --------------------------------------------------------------------------- spec

BACKENDS = VARIABLES["glmops_dynamo_backend"].choices or ()


def rules_backend(dep: Deployment) -> str:
    """The worker backend as the rules read it: ``glmops_dynamo_backend``, vllm when unset."""
    return str(dep.dynamo_backend or "vllm")


def mocker_flags(cat: Any) -> Any:
    """The mocker's option names (catalog ``engines.mocker.flags``) as a FlagList."""
    entry = cat.engines.get("mocker") or {}
    parser = F.Parser("mocker", str(entry.get("binary") or "python -m dynamo.mocker"), str(entry.get("version") or ""),
                      "", "catalog engines.yaml:engines.mocker.flags")
    names = [str(n) for n in entry.get("flags") or []]
    return F.FlagList(parser, primary={n: n for n in names}, section={n: "" for n in names}, count=len(names))


def _flag_sets(dep: Deployment, cat: Any) -> tuple[list, dict[str, str], str]:
    """The worker's flag lists per backend: dynamo.vllm's own flags then vLLM's engine
    arguments (frontend flags are rejected); dynamo.sglang's then SGLang's; the mocker's."""
    backend = rules_backend(dep)
    pinned = str((cat.engines.get(ENGINE, {}).get("backend_versions") or {}).get(backend) or "")
    if backend == "vllm":
        owned = {k: v for k, v in vllm.WORKER_OWNED.items() if k not in ("host", "port")}
        return ([(F.load("dynamo-vllm-worker"), None), (F.load("vllm-serve"), ("engine",))],
                {**owned, **WORKER_OWNED}, pinned)
    if backend == "sglang":
        return ([(F.load("dynamo-sglang-worker"), None), (F.load("sglang-serve"), None)],
                {**sglang.WORKER_OWNED, **WORKER_OWNED}, pinned)
    if backend == "mocker":
        return [(mocker_flags(cat), None)], MOCKER_OWNED, dep.engine_version
    return [], {}, ""


def _check_backend_choice(dep: Deployment, facts: RuleFacts, out: list[Problem]) -> bool:
    """``glmops_dynamo_backend`` one of the accepted backends (later rules read its catalog entry)."""
    if dep.dynamo_backend not in BACKENDS:
        problem(out, "CHOICE", src(dep, "glmops_dynamo_backend"),
                f"glmops_dynamo_backend {dep.dynamo_backend!r} is not accepted; accepted: {', '.join(BACKENDS)}")
        return False
    return True


def _check_backend_hardware(dep: Deployment, facts: RuleFacts, out: list[Problem]) -> None:
    """A worker backend whose catalog entry names its hardware (``hardware:``; the mocker:
    ``cpu``, a simulated engine for the lab) runs on that hardware only."""
    backend = rules_backend(dep)
    hw = facts.hw or {}
    allowed = (facts.cat.engines.get(backend) or {}).get("hardware")
    if allowed and dep.hardware not in allowed:
        problem(out, "ENGINE_HARDWARE", src(dep, "dynamo_backend", "glmops_dynamo_backend"),
                f"glmops_dynamo_backend {backend!r} does not run on {hw.get('name')} ({dep.hardware}); "
                f"accepted hardware: {', '.join(allowed)}",
                "the mocker simulates an engine for the CPU lab; on GPU nodes use glmops_dynamo_backend vllm or sglang")


def _check_planes(dep: Deployment, facts: RuleFacts, out: list[Problem]) -> None:
    """F20: the planes and discovery are set once, by glmops, for the frontend and every
    worker: an env override (``DYN_REQUEST_PLANE`` ... ``ETCD_ENDPOINTS``, per pool also
    ``DYN_FILE_KV``) or a ``response-plane`` flag is refused; ``glmops_dynamo_etcd_hosts``
    names an accepted member count (catalog ``engines.etcd.members``) of distinct hosts."""
    for path, key, value in plane_problems(dep):
        what = "flag" if key.lstrip("-") == "response-plane" else "env"
        problem(out, "F20_DYNAMO_PLANES", f"{path}.{key}",
                f"{what} {key}={value!r} would set a Dynamo plane or store address for part of the deployment; "
                "accepted: none (glmops renders --request-plane/--event-plane/--discovery-backend and "
                "ETCD_ENDPOINTS once, the same on the frontend and every worker)",
                "choose planes with glmops_dynamo_request_plane (tcp, nats) and glmops_dynamo_event_plane "
                "(zmq, nats), store hosts with glmops_dynamo_etcd_hosts")
    hosts = [str(h) for h in dep.dynamo_etcd_hosts or []]
    if hosts:
        accepted = [int(n) for n in (facts.cat.engines.get("etcd") or {}).get("members") or [1, 3, 5]]
        if len(hosts) not in accepted or len(set(hosts)) != len(hosts):
            problem(out, "DYNAMO_ETCD_HOSTS", src(dep, "dynamo_etcd_hosts", "glmops_dynamo_etcd_hosts"),
                    f"glmops_dynamo_etcd_hosts names {len(hosts)} host(s) {hosts}; accepted: "
                    f"{', '.join(map(str, accepted))} distinct hosts (an odd etcd cluster: 3 survive one failed host)")


def _check_absent(dep: Deployment, facts: RuleFacts, out: list[Problem]) -> None:
    """Dynamo-only variables on another engine."""
    if dep.dynamo_etcd_hosts:
        problem(out, "DYNAMO_ONLY", src(dep, "dynamo_etcd_hosts", "glmops_dynamo_etcd_hosts"),
                f"glmops_dynamo_etcd_hosts is set but glmops_engine is {dep.engine!r}; accepted: only with engine dynamo")


SPEC = EngineSpec(
    name=ENGINE, module=sys.modules[__name__], order=40,
    front_doors=(FrontDoor(ENGINE, router, ("dynamo-frontend",), FRONTEND_OWNED, order=40,
                           kv_events=lambda policy: policy_mode(policy) == "kv", kv_routing=True, policy_key=ENGINE,
                           instances=registered),),
    agg_front=ENGINE, disagg_front=ENGINE, front_always=True,
    backend=rules_backend, flag_sets=_flag_sets,
    rules={"keys": _check_backend_choice, "hardware": _check_backend_hardware,
           "planes": _check_planes, "absent": _check_absent},
    work_counters=("dynamo_component_requests_total",),
)
