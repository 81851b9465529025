"""The engine boundary: which engines and front doors exist, and what each declares.

Every module in ``glmops/engines/`` that defines ``SPEC`` (an :class:`EngineSpec`) is an
engine; nothing outside ``glmops/engines/`` names one. ``glmops.plan``, ``glmops.rules``,
``glmops.smoke``, ``glmops.bench`` and the verbs ask this module instead:

* :func:`get` / :func:`find` / :func:`names`: the spec of an engine key (``glmops_engine``);
* :func:`router_kind`: the deployment's front door ``(kind, policy)``; :func:`front_door` the
  :class:`FrontDoor` of a kind (its ``router(ctx, workers)``, flag lists, owned flags);
* :func:`register`: add an engine at run time (tests register a toy engine this way).

Adding an engine = one module here with a ``SPEC`` plus its catalog entries
(``glmops/catalog/engines.yaml``, flag lists under ``glmops/catalog/flags/``).
"""
from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass, field
from typing import Any, Callable

from glmops.model import Deployment, Problem, ValidationError

RuleFn = Callable[..., Any]


def _never(_policy: str) -> bool:
    return False


def _no_flags(_dep: Deployment, _cat: Any) -> tuple[list, dict[str, str], str]:
    return [], {}, ""


@dataclass(frozen=True)
class RuleFacts:
    """What an engine rule gets besides the deployment: the loaded catalog (``cat``, a
    ``glmops.catalog.Catalog``) and the catalog entries of the model, hardware, engine and
    the engine's backend (``None`` while the keys are not checked yet: stage ``keys``)."""

    cat: Any
    model: dict | None = None
    hw: dict | None = None
    engine: dict | None = None
    backend: dict | None = None


@dataclass(frozen=True)
class FrontDoor:
    """A front-door kind (``RouterSpec.kind``) and what it needs.

    ``router(ctx, workers) -> list[Service]`` builds it; ``flag_lists`` name the catalog flag
    lists (``glmops/catalog/flags/<name>``) its ``router.args`` are checked against, ``owned``
    the flags glmops sets itself; ``policy_key`` the catalog engine entry listing its
    ``policies`` (empty: not checked); ``args_noun`` how a router.args key is called in
    problems; ``kv_events(policy)`` whether workers publish KV events for it; ``instances(doc)``
    the workers a discovering front door lists in its ``/health`` document (None: it lists none).
    """

    kind: str
    router: Callable[..., list]
    flag_lists: tuple[str, ...] = ()
    owned: dict[str, str] = field(default_factory=dict)
    order: int = 100
    policy_key: str = ""
    args_noun: str = "router flag"
    kv_events: Callable[[str], bool] = _never
    kv_routing: bool = False
    instances: Callable[[dict], list] | None = None


@dataclass(frozen=True)
class KvTransfer:
    """How a disaggregated deployment's decode side shows that it served from KV the prefill
    side transferred (F23), in the engine's own terms; the smoke's disagg check reads it.

    ``counters``: Prometheus selectors (``name`` or ``name{label="value"}``) on a decode worker
    that grow with each hand-off; ``failures``: selectors on any worker that grow when one
    failed; ``perf_path``: a per-request JSON list on the decode worker whose entries carry
    ``perf_metrics.timing_metrics.kv_cache_size`` (> 0: KV arrived); ``log_lines``: regexes of
    decode journal lines that show a hand-off (used when a worker exports none of the above);
    ``enable``: what makes the evidence visible, named when none is; ``source``: where the
    names come from."""

    counters: tuple[str, ...] = ()
    failures: tuple[str, ...] = ()
    perf_path: str = ""
    log_lines: tuple[str, ...] = ()
    enable: str = ""
    source: str = ""


@dataclass(frozen=True)
class EngineSpec:
    """What one engine module declares (see the module doc).

    Planning: ``module`` has ``worker(ctx, pool, replica, placement) -> list[Service]`` and
    optionally ``stores(ctx, workers)``; ``front_doors`` the kinds it builds; ``agg_front`` /
    ``disagg_front`` the default kind for several aggregated replicas / a disaggregated
    topology; ``front_always`` a front door even for one aggregated replica.

    Rules: ``backend(dep)`` the engine that runs the model as rules see it (default: itself);
    ``flag_sets(dep, cat) -> (parsers, owned, version)`` its workers' flag lists;
    ``config_flags``/``config_owned`` for ``engine_config`` keys (empty: it reads no config);
    ``rules`` maps a stage of ``glmops.rules.check`` (``keys``, ``hardware``, ``engine``,
    ``transport``, ``planes``, ``absent``) to ``fn(dep, facts: RuleFacts, out: list[Problem])``
    (``keys`` returns False when later rules cannot run); ``transport(args, config)`` its KV
    transfer backend as a disaggregated backend; ``side_channel_env`` the env var of a per-rank
    side-channel base port; ``speculative_own_keys`` / ``speculative_pool_rule`` /
    ``speculative_config_rule`` its own speculative-decoding checks; ``plan_rules(plan, dep)``
    checks on the planned services.

    Smoke and bench: ``metrics_paths``; ``work_counters``, ``spec_counters`` (drafts, draft
    tokens, accepted tokens, label) and ``spec_gauges`` (Prometheus names);
    ``models_from_workers(topology)`` plus ``models_note`` when its front door has no
    ``/v1/models``; ``bench_client(python, model, host, port, tokenizer, cfg, concurrency,
    result_dir, result_file) -> argv`` its own benchmark client; ``role_labels`` for the plan table;
    ``success_counters`` (Prometheus counters of requests that ended well; empty: ``work_counters``)
    decide which worker served, ``kv_transfer`` (:class:`KvTransfer`) whether KV was handed over.
    """

    name: str
    module: Any
    order: int = 100
    front_doors: tuple[FrontDoor, ...] = ()
    agg_front: str = ""
    disagg_front: str = ""
    front_always: bool = False
    backend: Callable[[Deployment], str] | None = None
    flag_sets: Callable[[Deployment, Any], tuple[list, dict[str, str], str]] = _no_flags
    config_flags: tuple[str, ...] = ()
    config_owned: dict[str, str] = field(default_factory=dict)
    rules: dict[str, RuleFn] = field(default_factory=dict)
    transport: Callable[[dict, dict], str] | None = None
    side_channel_env: str = ""
    speculative_own_keys: frozenset = frozenset()
    speculative_pool_rule: RuleFn | None = None
    speculative_config_rule: RuleFn | None = None
    plan_rules: Callable[..., list[Problem]] | None = None
    metrics_paths: tuple[str, ...] = ("/metrics",)
    work_counters: tuple[str, ...] = ()
    spec_counters: tuple[str, str, str, str] | None = None
    spec_gauges: tuple[str, ...] = ()
    models_from_workers: Callable[[str], bool] = _never
    models_note: str = ""
    bench_client: Callable[..., list[str]] | None = None
    role_labels: dict[str, str] = field(default_factory=dict)
    success_counters: tuple[str, ...] = ()
    kv_transfer: KvTransfer | None = None


_SPECS: dict[str, EngineSpec] = {}
_DISCOVERED = False


def _discover() -> None:
    """Import every module of ``glmops.engines`` once and keep those with a ``SPEC``. The
    imports are inside this function: engine modules import this one for the spec types."""
    global _DISCOVERED
    if _DISCOVERED:
        return
    _DISCOVERED = True
    package = importlib.import_module("glmops.engines")
    for info in pkgutil.iter_modules(package.__path__):
        mod = importlib.import_module(f"glmops.engines.{info.name}")
        spec = getattr(mod, "SPEC", None)
        if isinstance(spec, EngineSpec):
            _SPECS.setdefault(spec.name, spec)


def register(spec: EngineSpec) -> EngineSpec:
    """Add (or replace) an engine; returns ``spec``. Its catalog entries must exist."""
    _discover()
    _SPECS[spec.name] = spec
    return spec


def unregister(name: str) -> None:
    """Remove an engine added by :func:`register` (tests)."""
    _SPECS.pop(name, None)


def specs() -> list[EngineSpec]:
    """Every engine spec, in the order engines are listed to the user."""
    _discover()
    return sorted(_SPECS.values(), key=lambda s: (s.order, s.name))


def names() -> tuple[str, ...]:
    """Every engine key (``glmops_engine`` values), in order."""
    return tuple(s.name for s in specs())


def find(name: Any) -> EngineSpec | None:
    """The spec of engine ``name``, or None (a router, a store or an unknown name)."""
    _discover()
    return _SPECS.get(name) if isinstance(name, str) else None


def get(name: Any) -> EngineSpec:
    """The spec of engine ``name``; ValidationError (code ``ENGINE``) for an unknown one."""
    spec = find(name)
    if spec is None:
        raise ValidationError([Problem("ENGINE", "glmops_engine",
                                       f"engine {name!r} unknown; accepted: {', '.join(names())}")])
    return spec


def engine_module(name: str) -> Any:
    """The module that plans engine ``name`` (``worker``, ``stores``); ValidationError when unknown."""
    return get(name).module


def front_doors() -> list[FrontDoor]:
    """Every front-door kind any engine builds, in order."""
    seen: dict[str, FrontDoor] = {}
    for spec in specs():
        for door in spec.front_doors:
            seen.setdefault(door.kind, door)
    return sorted(seen.values(), key=lambda d: (d.order, d.kind))


def front_door(kind: str) -> FrontDoor | None:
    """The :class:`FrontDoor` of ``kind``, or None (``none`` or unknown)."""
    return next((d for d in front_doors() if d.kind == kind), None)


def router_kind(dep: Deployment) -> tuple[str, str]:
    """(kind, policy) of the deployment's front door.

    kind: ``RouterSpec.kind`` when set (``none`` = no front door), else the engine's
    ``disagg_front`` for a disaggregated topology, ``none`` for one aggregated replica (the
    worker is the endpoint, as in seeds 000/002/004) unless ``front_always``, else its
    ``agg_front``. policy: RouterSpec.policy (engine-neutral name, ``round_robin`` when
    empty; the engine module spells it). An unknown engine gets ``none``.
    """
    kind = dep.router.kind or ""
    policy = dep.router.policy or "round_robin"
    if not kind:
        spec = find(dep.engine)
        if spec is None:
            kind = "none"
        elif spec.front_always:
            kind = spec.disagg_front if dep.topology == "disagg" else spec.agg_front
        elif dep.topology == "disagg":
            kind = spec.disagg_front
        elif sum(p.replicas for p in dep.pools) <= 1:
            kind = "none"
        else:
            kind = spec.agg_front
    return kind, policy


def backend_name(dep: Deployment) -> str:
    """The engine key that runs the model as the rules read it: the engine's ``backend(dep)``
    (Dynamo: ``glmops_dynamo_backend``), else ``dep.engine``."""
    spec = find(dep.engine)
    return spec.backend(dep) if spec is not None and spec.backend is not None else str(dep.engine)


def config_engines() -> list[str]:
    """Engines that read ``engine_config`` (a config file of their own)."""
    return [s.name for s in specs() if s.config_flags]


def kv_routing_engines() -> list[str]:
    """Engines whose front door routes on KV cache state."""
    return [s.name for s in specs() if any(d.kv_routing for d in s.front_doors)]


def work_counters() -> tuple[str, ...]:
    """Prometheus counters that grow when a worker of any engine serves a request."""
    return tuple(n for s in specs() for n in s.work_counters)


def success_counters() -> tuple[str, ...]:
    """Prometheus counters that grow only when a worker of any engine finished a request well
    (each engine's ``success_counters``, else its ``work_counters``)."""
    return tuple(n for s in specs() for n in (s.success_counters or s.work_counters))


def kv_transfers() -> list[tuple[str, KvTransfer]]:
    """``(engine, KvTransfer)`` of every engine that declares its hand-off evidence (a front
    door of another engine may pass its backend's metrics through: Dynamo's workers)."""
    return [(s.name, s.kv_transfer) for s in specs() if s.kv_transfer is not None]


def metrics_paths(engine: str) -> list[str]:
    """Metrics paths of a worker of ``engine`` in the order tried (``/metrics`` unless declared)."""
    spec = find(engine)
    return list(spec.metrics_paths) if spec is not None else ["/metrics"]


def role_label(engine: str, role: str) -> str:
    """The engine's own name for a pool role in the plan table (``role`` when it has none)."""
    spec = find(engine)
    return (spec.role_labels if spec is not None else {}).get(role, role)


def instances_in(doc: dict) -> list:
    """Workers a discovering front door lists in its ``/health`` document ``doc`` (the first
    front door that declares ``instances``); ``[]`` when none does."""
    for door in front_doors():
        if door.instances is not None:
            return list(door.instances(doc))
    return []
