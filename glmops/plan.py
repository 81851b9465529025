"""Deployment -> Plan: which services run where, with which flags.

:func:`build` is pure (no I/O besides the packaged catalog): it places every pool's
replicas on GPUs, assigns ports per host, asks the engine module
(``glmops/engines/<engine>.py``) for each worker's argv/env/config files and for the
front door (router, orchestrator or frontend), and returns a :class:`~glmops.model.Plan`.

Placement rules:

* Pools are placed in order (agg, or prefill then decode). Each replica needs
  ``tp * pp * dp`` GPUs. Candidate hosts: the pool's ``hosts``, else group
  ``glmops_workers``, else every host, in inventory order. ``PoolSpec.gpus`` restricts
  the GPU indices usable on each host (seed 000: context 0-3, generation 4-7).
* A replica that fits on one host takes the lowest free allowed GPUs of the first host
  with room. A wider replica spans whole nodes (``world / gpus_per_node`` hosts whose
  allowed GPUs are all free); each node gets its own service with the engine's
  multi-node launch flags (see the engine modules).
* CPU hardware (the lab) has no GPUs: each replica takes one whole host.

Ports are assigned per host by a deterministic allocator: the front door first
(``RouterSpec.port``, 8000), then per worker HTTP from the pool ``port`` or 8001 up,
then the engine's side ports (NIXL side channel per DP rank, KV events, bootstrap,
dist-init). Every port is listed in ``Service.ports`` so ``glmops.rules`` can check
collisions (F05).
"""
from __future__ import annotations

from typing import Any

from glmops import netif, strategies
from glmops.engines import base, registry
from glmops.engines.base import CATALOG, Ctx, NodeSlot, Placement
from glmops.engines.registry import engine_module, router_kind  # noqa: F401  (old names, now the registry's)
from glmops.model import Deployment, PoolSpec, Plan, Problem, Service, ValidationError

#: the engines shipped in glmops/engines/ (the old name; glmops.engines.registry.names() also
#: lists engines registered at run time)
ENGINES = registry.names()
POOL_ORDER = {"agg": 0, "prefill": 1, "decode": 2}

#: seed 004's strategies (catalog ``recipes.yaml:strategies``; the inventory lays them out for ``glmops_strategy``)
STRATEGIES = strategies.names()


def strategy_pools(strategy: str, nodes: int, gpus_per_node: int) -> list[PoolSpec]:
    """Seed 004's strategies as pools (:func:`glmops.strategies.pools`): single_node_tp TP=g;
    single_node_tep TP=g + EP; multi_node_tp TP=g*n; multi_node_tp_pp TP=g, PP=n; multi_node_tep
    TP=g*n + EP; multi_node_dep DP=g*n with EP and attention DP (TP 1); pd_cluster n//2 prefill
    and n - n//2 decode replicas of TP=g. Raises ValueError for an unknown strategy or a node
    count it does not take."""
    return strategies.pools(strategy, nodes, gpus_per_node)


def _host_gpus(dep: Deployment, host: str) -> list[int]:
    spec = dep.hosts[host]
    if spec.gpus:
        return list(spec.gpus)
    per = int(CATALOG.hardware(spec.hardware or dep.hardware).get("gpus_per_node") or 0)
    return list(range(per))


def _candidate_hosts(dep: Deployment, pool: PoolSpec) -> list[str]:
    if pool.hosts:
        return [h for h in pool.hosts if h in dep.hosts]
    workers = [h for h, s in dep.hosts.items() if "glmops_workers" in s.groups]
    return workers or list(dep.hosts)


def place(dep: Deployment, pools: list[PoolSpec]) -> list[Placement]:
    """Assign GPUs (and nodes) to every replica of every pool; raises ValidationError
    naming each pool/replica that does not fit (all at once)."""
    cpu = CATALOG.hardware(dep.hardware).get("vendor") in (None, "none")
    free = {h: ([0] if cpu else _host_gpus(dep, h)) for h in dep.hosts}
    problems: list[Problem] = []
    out: list[Placement] = []
    for pool in sorted(pools, key=lambda p: POOL_ORDER.get(p.role, 9)):
        hosts = _candidate_hosts(dep, pool)
        world = 1 if cpu else pool.world_size
        path = dep.source(f"glmops_topologies.{dep.topology}.pools.{pool.role}")
        cursor = 0
        for replica in range(pool.replicas):
            def allowed(h: str) -> list[int]:
                if cpu:
                    return free[h]
                return [g for g in free[h] if not pool.gpus or g in pool.gpus]

            nodes: list[NodeSlot] = []
            # free GPUs only shrink while a pool is placed, so hosts before the cursor that
            # were too full for one replica stay too full: same result, linear time
            while cursor < len(hosts):
                av = allowed(hosts[cursor])
                if len(av) >= world:
                    nodes = [NodeSlot(dep.hosts[hosts[cursor]], av[:world], 0)]
                    break
                cursor += 1
            if not nodes and not cpu:
                full = [h for h in hosts if allowed(h) and len(allowed(h)) == len(
                    [g for g in _host_gpus(dep, h) if not pool.gpus or g in pool.gpus])]
                per = len(allowed(full[0])) if full else 0
                if per and world % per == 0 and len(full) >= world // per:
                    nodes = [NodeSlot(dep.hosts[h], allowed(h)[:per], i) for i, h in enumerate(full[: world // per])]
            if not nodes:
                avail = {h: len(allowed(h)) for h in hosts}
                problems.append(Problem(
                    "PLACEMENT", path,
                    f"{pool.role} replica {replica} needs {world} GPU(s) (tp {pool.tp} x pp {pool.pp} x dp {pool.dp}); "
                    f"free per host: {avail or 'no hosts'}",
                    "add hosts, lower replicas or parallelism, or widen the pool's gpus/hosts",
                ))
                continue
            for node in nodes:
                free[node.host.name] = [g for g in free[node.host.name] if g not in node.gpus]
                if cpu:
                    node.gpus = []  # the host is taken; no GPU indices to show or pin
            out.append(Placement(pool=pool, replica=replica, nodes=nodes,
                                 name=base.service_name(dep, pool.role, replica)))
    if problems:
        raise ValidationError(problems)
    return out


def _http_wants(dep: Deployment, placements: list[Placement], single_front: bool, front_port: int,
                front_host: str, notes: list[str]) -> None:
    seen: dict[tuple[str, str], int] = {}
    moved: set[tuple[str, str]] = set()
    for pl in placements:
        if single_front:  # no front door: the one worker is the endpoint, on the endpoint's (router) port
            pl.http_want = front_port
            if pl.pool.port is not None and int(pl.pool.port) != front_port:
                notes.append(f"no front door: the one {pl.pool.role} worker is the endpoint on the router port "
                             f"{front_port}; pool {pl.pool.role} port {pl.pool.port} is not used")
        elif pl.pool.port is not None:
            key = (pl.pool.role, pl.head.host.name)
            start = int(pl.pool.port)
            if start == front_port and pl.head.host.name == front_host:
                # the pool's port is the endpoint's on the same host (a one-replica layout grown
                # to several): the front door keeps it and the replicas take the ports after it
                start += 1
                if key not in moved:
                    moved.add(key)
                    notes.append(f"pool {pl.pool.role} port {front_port} is the router's port on {front_host}: "
                                 f"its replicas there listen from {start}")
            pl.http_want = start + seen.get(key, 0)
            seen[key] = seen.get(key, 0) + 1


def build(dep: Deployment) -> Plan:
    """Plan every service of ``dep`` (see module doc). Raises ValidationError when the
    engine is unknown, a pool does not fit, or the topology has the wrong pools."""
    base.SETTINGS_CACHE.clear()
    try:
        return _build(dep)
    finally:
        base.SETTINGS_CACHE.clear()


def _build(dep: Deployment) -> Plan:
    mod = registry.engine_module(dep.engine)
    pools = list(dep.pools)
    roles = sorted({p.role for p in pools})
    want = ["agg"] if dep.topology == "agg" else ["decode", "prefill"]
    if roles != want:
        raise ValidationError([Problem(
            "POOLS", dep.source(f"glmops_topologies.{dep.topology}.pools"),
            f"topology {dep.topology} needs pools {want}, got {roles or 'none'}",
            "define the pools under glmops_topologies or pick a topology a catalog layout covers")])
    placements = place(dep, pools)
    kind, policy = registry.router_kind(dep)
    front_host = dep.router.host or placements[0].head.host.name
    if front_host not in dep.hosts:
        raise ValidationError([Problem("ROUTER_HOST", dep.source("glmops_topologies.router.host"),
                                       f"router host {front_host!r} is not in the inventory; hosts: {', '.join(dep.hosts)}")])
    door = registry.front_door(kind)
    ctx = Ctx(dep=dep, ports={}, front_port=int(dep.router.port), front_host=front_host,
              front_kind=kind, front_policy=policy, kv_events=bool(door and door.kv_events(policy)))
    hosts_used = []
    for pl in placements:
        for n in pl.nodes:
            if n.host.name not in hosts_used:
                hosts_used.append(n.host.name)
    if front_host not in hosts_used:
        hosts_used.append(front_host)
    ctx.hosts_used = hosts_used
    single_front = kind == "none"
    if not single_front:
        ctx.alloc(front_host).take(ctx.front_port, 1, want=ctx.front_port)
    _http_wants(dep, placements, single_front, ctx.front_port, front_host, ctx.notes)

    workers: list[Service] = []
    for pl in placements:
        workers += mod.worker(ctx, pl.pool, pl.replica, pl)
    front: list[Service] = []
    if not single_front:
        if door is None:
            kinds = ", ".join(["none"] + [d.kind for d in registry.front_doors()])
            raise ValidationError([Problem("ROUTER_KIND", dep.source("glmops_topologies.router.kind"),
                                           f"router kind {kind!r} unknown; accepted: {kinds}")])
        front = door.router(ctx, workers)
    # services the workers need before they start (Dynamo's discovery store): start order 1,
    # each worker and front door starts after the ones on its own host (After=)
    stores: list[Service] = mod.stores(ctx, workers) if hasattr(mod, "stores") else []
    for svc in workers + front:
        svc.depends_on += [s.name for s in stores]
    if front:
        endpoint = base.url(front[0].address, front[0].port)
    else:
        head = next(w for w in workers if w.node_rank == 0)
        endpoint = base.url(head.address, head.port)
    notes = list(ctx.notes)
    notes.append(base.start_timeout_note(dep))
    missing = sorted({s.engine for s in workers + front if s.runtime == "container" and not s.image})  # stores: Debian packages
    if missing:
        notes.append(f"container runtime but no image for {', '.join(missing)}: set glmops_image "
                     "(the seeds name none) or use glmops_runtime: venv; rendering the units will fail")
    if dep.api_key:  # a front door that checks no client key: rules' API_KEY_OPEN_FRONT_DOOR warning
        _give_api_key(dep.api_key, workers + front)
    netif.apply(dep, stores + workers + front)  # F17: a host's glmops_socket_ifname across hosts
    for svc in stores + workers + front:
        _plain_service(svc)
    return Plan(
        deployment=str(dep.name), model=str(dep.model), served_model_name=str(dep.served_model_name),
        engine=str(dep.engine),
        topology=dep.topology, endpoint_url=endpoint, services=stores + workers + front,
        smoke=[f"{endpoint}/v1/completions", f"{endpoint}/v1/chat/completions", f"{endpoint}/health"],
        notes=notes,
    )


def _give_api_key(key: str, services: list[Service]) -> None:
    """Each service that serves HTTP gets the deployment's API key in its env (its 0600 env file) under
    the variable its engine or front door reads (catalog ``api_key.env``; none: glmops.rules refuses),
    and names that variable in ``auth_env`` for the gate and status. Never in argv."""
    for svc in services:
        var = base.api_key_env(svc.engine)
        if var and (svc.health_url or svc.ready_url):
            svc.env[var] = key
            svc.auth_env = var


def _plain(value: Any) -> Any:
    """Inventory strings may be Ansible's str subclasses; the Plan holds plain data."""
    if isinstance(value, str):
        return str(value) if type(value) is not str else value
    if isinstance(value, dict):
        return {_plain(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _plain_service(svc: Service) -> None:
    svc.host, svc.address, svc.name = str(svc.host), str(svc.address), str(svc.name)
    svc.argv = [str(w) for w in svc.argv]
    svc.env = {str(k): str(v) for k, v in svc.env.items()}
    svc.ports = {str(k): [int(p) for p in v] for k, v in svc.ports.items()}
    svc.depends_on = [str(d) for d in svc.depends_on]
    for cf in svc.files:
        cf.content = _plain(cf.content)


def summary_rows(plan: Plan) -> list[dict[str, Any]]:
    """One row per service in start order per host: host, service, role (the engine's own
    role names in brackets, ``EngineSpec.role_labels``), GPUs, ports, health URL."""
    rows = []
    for host in plan.hosts:
        for svc in plan.on_host(host):
            role = registry.role_label(svc.engine, svc.role)
            if svc.nnodes > 1:
                role += f" [node {svc.node_rank}/{svc.nnodes}]"
            ports = " ".join(f"{k}={_span(v)}" for k, v in svc.ports.items())
            rows.append({"host": host, "service": svc.unit, "role": role,
                         "gpus": ",".join(str(g) for g in svc.gpus) or "-", "ports": ports,
                         "health": svc.health_url or "-"})
    return rows


def _span(ports: list[int]) -> str:
    if len(ports) > 1 and ports == list(range(ports[0], ports[0] + len(ports))):
        return f"{ports[0]}-{ports[-1]}"
    return ",".join(str(p) for p in ports)
