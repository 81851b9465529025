"""Rules: every problem with a Deployment (and its Plan) before any host is touched.

``check(deployment)`` returns all problems of the deployment itself; ``check_plan(plan,
deployment)`` those only visible once services are placed (GPU overlap, port collisions per
host, advertised addresses, the TensorRT-LLM configs as rendered); ``validate(deployment)``
runs both around ``glmops.plan.build`` and is what ``glmops validate``, ``glmops plan`` and the
playbooks' first play call. Nothing here does I/O besides reading the packaged catalog.

Each :class:`~glmops.model.Problem` has a stable ``code``, the inventory ``path`` of the key,
a ``message`` naming the value and what is accepted, and a ``hint``. Facts come from the
catalog (``glmops/catalog/*.yaml``, each with its seed source); codes named after field cases
(``F01_...``) implement /work/shared/cases/field-cases.md.
"""
from __future__ import annotations

import difflib
import ipaddress
import re
from typing import Any, Iterable

from packaging.version import InvalidVersion, Version

from glmops import catalog as catalog_mod
from glmops import monitoring, netif, prechecks
from glmops import plan as plan_mod
from glmops.catalog import flags as F
from glmops.engines import base as engine_base
from glmops.engines import compat, registry
from glmops.engines.problems import (  # noqa: F401  (the old private names stay importable)
    argv_value as _argv_value, as_int as _as_int, canon as _canon, deep_merge as _deep_merge, dig as _dig,
    few as _few, pool_args as _args, pool_config as _config, pool_env as _env, problem as _problem, src as _src,
    warning)
from glmops.engines.registry import RuleFacts
from glmops.model import (REPO_ID, SECRET_VALUE, Deployment, Plan, PoolSpec, Problem, Service, ValidationError, secret_paths,
                          set_in)
from glmops.variables import CHECKPOINT_KEYS, MAX_PARALLEL, VARIABLES  # noqa: F401  (one source)

HEX40 = re.compile(r"^[0-9a-f]{40}\Z")
TOPOLOGIES = VARIABLES["glmops_topology"].choices or ()
RUNTIMES = VARIABLES["glmops_runtime"].choices or ()
CHECKPOINT_MODES = CHECKPOINT_KEYS["mode"].choices or ()
# Engine-neutral KV cache dtype names glmops accepts for every engine (mapped by the engine module).
NEUTRAL_KV_DTYPES = ("auto", "bf16", "fp8", "nvfp4")
LOCALHOSTS = ("localhost", "127.0.0.1", "::1", "0.0.0.0")


# ----------------------------------------------------------------------------- helpers


def _short(value: Any) -> str:
    """``repr(value)``, a huge integer shortened to its first digits and length."""
    text = repr(value)
    return text if len(text) <= 24 else f"{text[:12]}... ({len(text)} characters)"


def _backend(dep: Deployment) -> str:
    """The engine that runs the model (``glmops.engines.registry.backend_name``)."""
    return registry.backend_name(dep)


def _engine_rules(dep: Deployment, stage: str, facts: RuleFacts, out: list[Problem]) -> bool:
    """Run the engine's own rules of ``stage`` (``EngineSpec.rules``); at stage ``planes`` also
    every other engine's ``absent`` rules. False when a ``keys`` rule says later rules cannot run."""
    ok = True
    spec = registry.find(dep.engine)
    if spec is not None and stage in spec.rules:
        ok = spec.rules[stage](dep, facts, out) is not False
    if stage == "planes":
        for other in registry.specs():
            if other is not spec and "absent" in other.rules:
                other.rules["absent"](dep, facts, out)
    return ok


def _version(text: str) -> Any:
    try:
        return Version(str(text))
    except InvalidVersion:
        return None


def _kv_dtype(dep: Deployment, pool: PoolSpec) -> tuple[str, str]:
    """(value, inventory path) of the effective KV cache dtype of a pool."""
    args = _args(dep, pool)
    if "kv-cache-dtype" in args and args["kv-cache-dtype"] is not None:
        key = next((k for k in pool.engine_args if _canon(k) == "kv-cache-dtype"), None)
        where = f"pools.{pool.role}.engine_args.{key}" if key else "engine_args.kv_cache_dtype"
        return str(args["kv-cache-dtype"]), _src(dep, where, "engine_args.kv-cache-dtype", "kv_cache_dtype")
    found, value = _dig(_config(dep, pool), "kv_cache_config.dtype")
    if found and value is not None:
        return str(value), _src(dep, f"pools.{pool.role}.engine_config.kv_cache_config", "engine_config.kv_cache_config", "kv_cache_dtype")
    return str(dep.kv_cache_dtype or "auto"), _src(dep, "kv_cache_dtype")


def _speculative(dep: Deployment, pool: PoolSpec) -> Any:
    """Effective speculative settings of a pool, in one comparable shape: the engine-neutral
    dict (``pool.speculative``) plus any engine-level override (TRT-LLM ``speculative_config``
    key, vLLM/SGLang ``speculative-*`` flags)."""
    spec = dict(pool.speculative or {})
    found, cfg = _dig(_config(dep, pool), "speculative_config")
    if found:
        spec["engine_config.speculative_config"] = cfg
    for key, value in _args(dep, pool).items():
        if key.startswith("speculative") or key in ("spec-method", "spec-tokens", "spec-model"):
            spec[f"engine_args.{key}"] = value
    return spec or None


# ----------------------------------------------------------------------------- check


def check(dep: Deployment) -> list[Problem]:
    """Every problem of ``dep`` found without planning, in a stable order: first the
    inventory's type/shape problems (``dep.problems``), then catalog keys, pools and
    GPUs, memory, the seeds' constraints and the field cases. Empty list = valid."""
    cat = catalog_mod.load()
    out: list[Problem] = list(dep.problems or [])
    _check_names(dep, out)
    known = _check_keys(dep, cat, out)
    if not known:
        # the checks that need only the parts that are known still run: every problem at once
        model = cat.models.get(dep.model) if isinstance(dep.model, str) else None
        variant = (model or {}).get("variants", {}).get(dep.variant) if isinstance(dep.variant, str) else None
        hw = cat.hardware.get(dep.hardware) if isinstance(dep.hardware, str) else None
        for needs, run in (
            (hw, lambda: _check_pools(dep, hw, out)),
            (variant and hw, lambda: _check_memory(dep, variant, hw, cat, out)),
            (model, lambda: _check_limits(dep, model, out)),
            (model, lambda: _check_multimodal(dep, model, out)),
            (variant, lambda: _check_checkpoint(dep, variant, out)),
        ):
            if needs:
                try:
                    run()
                except (KeyError, TypeError, ValueError, catalog_mod.CatalogKeyError):
                    pass  # a check that also needs the unknown part: the CATALOG_KEY problem says why
        return _dedupe(out)
    model = cat.model(dep.model)
    variant = cat.variant(dep.model, dep.variant)
    hw = cat.hw(dep.hardware)
    engine = cat.engine(dep.engine)
    backend = cat.engine(_backend(dep))
    facts = RuleFacts(cat=cat, model=model, hw=hw, engine=engine, backend=backend)
    _check_pools(dep, hw, out)
    _check_memory(dep, variant, hw, cat, out)
    _check_memory_fraction(dep, model, variant, hw, cat, backend, out)
    _check_arch(dep, model, variant, hw, engine, out)
    _engine_rules(dep, "hardware", facts, out)
    _check_kv_dtype(dep, model, hw, backend, out)
    _check_speculative(dep, model, out)
    _engine_rules(dep, "engine", facts, out)
    _check_limits(dep, model, out)
    _check_versions(dep, engine, out)
    _check_driver_branch(dep, cat, out)
    _check_socket_ifname(dep, cat, out)
    _check_image(dep, engine, backend, hw, out)
    _check_multimodal(dep, model, out)
    _check_checkpoint(dep, variant, out)
    _check_disagg(dep, facts, out)
    _check_side_channels(dep, out)
    _check_router_policy(dep, cat, out)
    _check_engine_flags(dep, cat, out)
    _check_cluster_flags(dep, backend, out)
    compat.check(dep, cat, out)
    _engine_rules(dep, "planes", facts, out)
    return _dedupe(out)


# The deployment name goes into unit, env and config file names on every host: keep it a plain
# name (no '/', '..', spaces), like a systemd unit name component.
_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,39}\Z")


def _check_names(dep: Deployment, out: list[Problem]) -> None:
    """Deployment name safe for file and unit names; no secret-bearing engine flags."""
    if not _NAME_RE.match(dep.name or ""):
        out.append(Problem(
            "DEPLOYMENT_NAME", dep.source("name"),
            f"deployment name {dep.name!r} is not accepted: use 1-40 characters a-z, 0-9 and '-', "
            "starting with a letter or digit (it names units and files on every host)",
            "set glmops_deployment, e.g. flash-b200"))
    scopes = [("engine_args", dep.engine_args, "engine flag", "the command line (argv, unit file)"),
              ("router.args", dep.router.args, "router flag", "the command line (argv, unit file)"),
              ("engine_config", dep.engine_config, "engine config key", "the engine's YAML config (0644)")]
    scopes += [(f"pools.{p.role}.engine_args", p.engine_args, "engine flag", "the command line (argv, unit file)")
               for p in dep.pools]
    scopes += [(f"pools.{p.role}.engine_config", p.engine_config, "engine config key", "the engine's YAML config (0644)")
               for p in dep.pools]
    for where, data, what, lands in scopes:
        # engine flags that would put a secret on the command line (argv is world-readable in /proc
        # and lands in unit files); secrets belong in glmops_env (0600 env file) or Ansible Vault
        for key in secret_paths(data or {}, secret_values=dep.secret_values or frozenset()):
            out.append(Problem(
                "SECRET_IN_ARGV", _key_src(dep, where, key),
                f"{what} {key!r} would put a secret into {lands}; accepted: secrets only through the environment",
                "put it in glmops_env (written to a 0600 env file), e.g. VLLM_API_KEY, from Ansible Vault"))


def _key_src(dep: Deployment, where: str, key: str) -> str:
    """Inventory path of ``key`` (dotted: ``auth.hf_token``) inside the mapping at ``where``
    (``router.args``, ``pools.decode.engine_config``): the source of its first segment when the
    inventory set that one, else the mapping's, with the rest of the key written out."""
    first, _, rest = key.partition(".")
    own = dep.sources.get(f"{where}.{first}")
    if own:
        return f"{own}.{rest}" if rest else own
    return f"{_src(dep, where, 'pools')}.{key}"


def _check_router_policy(dep: Deployment, cat, out: list[Problem]) -> None:
    """The router's policy must be one its CLI accepts (catalog ``policies``, taken from the
    routers' option lists, ``FrontDoor.policy_key``): sglang-router 0.3.2 has no ``kv_aware``,
    vllm-router 0.1.17 has; the Dynamo frontend takes the names its ``--router-mode`` choices spell."""
    kind, policy = registry.router_kind(dep)
    door = registry.front_door(kind)
    key = door.policy_key if door is not None else ""
    if not key:
        return
    accepted = cat.engine(key).get("policies") or []
    if accepted and policy not in accepted:
        out.append(Problem(
            "ROUTER_POLICY", dep.source("router.policy"),
            f"router policy {policy!r} is not accepted by {kind}; accepted: {', '.join(accepted)}",
            "set glmops_topologies.<topology>.router.policy to one of those"
            + ("" if door.kv_routing else
               f", or use engine {' or '.join(registry.kv_routing_engines())} for KV-aware routing")))


# --- engine flags and config keys (ENGINE_FLAG, ENGINE_FLAG_OWNED, ENGINE_CONFIG) -------------

#: an argv value holding a second flag: whitespace (or nothing) then ``--`` and a letter
_FLAG_IN_VALUE = re.compile(r"(^|\s)--[A-Za-z]")


def _flag_sets(dep: Deployment, cat: Any) -> tuple[list, dict[str, str], str]:
    """(parsers, owned, version in use) for the workers of ``dep`` (``EngineSpec.flag_sets``):
    ``parsers`` is a list of (FlagList, sections or None) tried in order; ``owned`` maps flag ->
    what glmops sets it from (the engine modules' ``WORKER_OWNED``); the version is the one the
    worker runs."""
    spec = registry.find(dep.engine)
    return spec.flag_sets(dep, cat) if spec is not None else ([], {}, "")


def _router_flag_sets(dep: Deployment) -> tuple[list, dict[str, str], str, str]:
    """(parsers, owned, kind, what a key is called) for ``router.args`` of the deployment's
    front door (``FrontDoor.flag_lists`` / ``owned`` / ``args_noun``)."""
    kind, _ = registry.router_kind(dep)
    door = registry.front_door(kind)
    if door is None:
        return [], {}, kind, "router flag"
    return [(F.load(name), None) for name in door.flag_lists], door.owned, kind, door.args_noun


def _resolve_flag(parsers: list, key: str) -> tuple[Any, str | None]:
    """(FlagList, canonical name) of the first parser accepting ``key``, else (None, None)."""
    for flags, sections in parsers:
        name = flags.resolve(key, sections)
        if name is not None:
            return flags, name
    return None, None


def _owned_name(parsers: list, owned: dict[str, str], flags: Any, name: str) -> str | None:
    """What sets option ``name`` (canonical in ``flags``) when glmops owns it, else None. Owned
    keys are resolved through the same list, so an alias (SGLang ``tensor-parallel-size`` for
    ``tp-size``) is owned too."""
    for key, why in owned.items():
        if flags.resolve(key) == name:
            return why
    return None


def _accepted_text(parsers: list) -> str:
    parts = []
    for flags, sections in parsers:
        p = flags.parser
        where = f"glmops/catalog/flags/{p.file}, from {p.source}" if p.file else p.source
        scope = f" ({'/'.join(sections)} arguments)" if sections else ""
        parts.append(f"the {flags.count} options of {p.label}{scope} ({where})")
    return " or ".join(parts)


def _version_note(parsers: list, version: str) -> str:
    """Hint text when the lists come from another version than the one that runs."""
    notes = [f"{f.parser.label}" for f, _ in parsers if f.parser.version and version and f.parser.version != version]
    if not notes:
        return ""
    return (f"; the accepted list is from {', '.join(notes)} and this deployment runs {version}: "
            "it was checked against that list anyway")


def _check_flag_keys(dep: Deployment, data: dict, parsers: list, owned: dict[str, str], version: str,
                     where: str, path_of, what: str, fmt: dict[str, str], out: list[Problem]) -> None:
    """Every key of ``data`` must be accepted by one of ``parsers`` and not owned by glmops;
    every value must be one argv word's worth (no ``' --flag'`` inside)."""
    if not parsers:
        return
    for key, value in data.items():
        path = path_of(key)
        flags, name = _resolve_flag(parsers, key)
        if flags is None:
            spellings = [s for f, sec in parsers for s in f.spellings(sec)]
            close = difflib.get_close_matches(F.canon(parsers[0][0].parser, key), spellings, n=1, cutoff=0.7)
            hint = (f"did you mean {close[0]!r}?" if close else f"see the {what} list named above") + \
                _version_note(parsers, version)
            _problem(out, "ENGINE_FLAG", path,
                     f"{what} {key!r} in {where} is not accepted by {parsers[0][0].parser.label}"
                     f"{' / ' + parsers[1][0].parser.label if len(parsers) > 1 else ''}; accepted: "
                     f"{_accepted_text(parsers)}", hint)
            continue
        why = _owned_name(parsers, owned, flags, name)
        if why is not None:
            why = why.format(**fmt)
            derived = why.startswith(("the plan", "glmops (", "the workers"))
            _problem(out, "ENGINE_FLAG_OWNED", path,
                     f"{what} {key!r} in {where} is set by glmops from {why}; accepted: leave it out of {where}",
                     "remove the key: glmops derives it" if derived else f"set {why.split(' (')[0]} instead")
        else:
            _check_flag_value(dep, data, key, value, flags, name, version, where, path, what, out)
        for item in (value if isinstance(value, list) else [value]):
            if isinstance(item, str) and _FLAG_IN_VALUE.search(item):
                _problem(out, "TYPE", path,
                         f"value {item!r} of {what} {key!r} holds ' --' (a second flag inside one value); "
                         "accepted: one value without whitespace followed by '--'",
                         "give each flag its own key")


def _value_words(value: Any) -> list[str] | None:
    """The words of a flag value compared with a closed set (a list = nargs words), or None when
    the value is not a plain scalar (a dict is a JSON flag; True/False a bare flag)."""
    items = value if isinstance(value, list) else [value]
    words = []
    for item in items:
        if isinstance(item, bool) or item is None or isinstance(item, (dict, list)):
            return None
        if isinstance(item, float) and item.is_integer():
            item = int(item)
        words.append(str(item))
    return words


def _check_flag_value(dep: Deployment, data: dict, key: str, value: Any, flags: Any, name: str, version: str,
                      where: str, path: str, what: str, out: list[Problem]) -> None:
    """ENGINE_FLAG_VALUE: a value of an option with a closed set (the parser's ``choices``, a vLLM
    metavar set, or ``glmops/catalog/flags/choices.yaml``) must be one of them; a YAML key's nested
    keys with a set (``moe_config.backend``) too. Sets a plugin can extend are skipped when the
    plugin option is set (``open_with``)."""
    checks: list[tuple[str, str, Any]] = []
    if "." not in str(key) or flags.parser.yaml:
        checks.append((name, key, value))
    if flags.parser.yaml and isinstance(value, dict):
        for dotted in flags.choices:
            head, _, tail = dotted.partition(".")
            if head == name and tail:
                found, sub = _dig(value, tail)
                if found:
                    checks.append((dotted, f"{key}.{tail}", sub))
    given = {flags.resolve(k) for k in {**(dep.engine_args or {}), **data}} if not flags.parser.yaml else set()
    for option, shown, val in checks:
        accepted = flags.accepted_values(option)
        words = _value_words(val)
        if not accepted or words is None:
            continue
        if any(o in given for o in flags.choice_open_with.get(option, ())):
            continue
        bad = [w for w in words if w not in accepted]
        if not bad:
            continue
        close = difflib.get_close_matches(bad[0], list(accepted), n=1, cutoff=0.6)
        source = flags.choice_source.get(option, flags.parser.source)
        note = _version_note([(flags, None)], version)
        _problem(out, "ENGINE_FLAG_VALUE", path if shown == key else f"{path}.{shown.split('.', 1)[1]}",
                 f"{what} {shown!r} = {', '.join(map(repr, bad))} in {where} is not accepted by "
                 f"{flags.parser.label}; accepted: {', '.join(accepted)} (glmops/catalog/flags, from {source})",
                 (f"did you mean {close[0]!r}?" if close else "pick one of the accepted values") + note)


def _check_cluster_flags(dep: Deployment, backend: dict, out: list[Problem]) -> None:
    """CLUSTER_LAUNCHER (F18): an engine flag that hands launch to a cluster glmops does not set up
    (catalog ``engines.<backend>.cluster_flags``: vLLM ``distributed-executor-backend: ray``,
    SGLang ``use-ray``) is refused, naming the flag; glmops launches every node itself."""
    table = backend.get("cluster_flags") or {}
    if not table:
        return
    layers = [("glmops_engine_args", "engine_args", dep.engine_args)]
    layers += [(f"glmops_topologies.{dep.topology}.pools.{p.role}.engine_args", f"pools.{p.role}.engine_args",
                p.engine_args) for p in dep.pools]
    for where, key_base, data in layers:
        for key, value in (data or {}).items():
            flag = next((f for f in table if _canon(f) == _canon(key)), None)
            if flag is None:
                continue
            entry = table[flag]
            refused = [str(v).lower() for v in entry.get("refused") or []]
            if str(value).lower() not in refused:
                continue
            _problem(out, "CLUSTER_LAUNCHER", _src(dep, f"{key_base}.{key}", key_base),
                     f"engine flag {key!r} = {value!r} in {where} needs {entry.get('needs')}, which glmops does not "
                     f"set up (it launches every node of a multi-node replica itself); accepted: "
                     f"{', '.join(map(str, entry.get('accepted') or []))} or leave it unset ({entry.get('source')})",
                     f"remove {key!r}: glmops renders the head address, start rank and --headless itself")


def _check_engine_flags(dep: Deployment, cat: Any, out: list[Problem]) -> None:
    """``engine_args`` keys (deployment-wide and per pool) must be options the engine's parser
    accepts (catalog ``glmops/catalog/flags/``, from the real parsers' option lists) and not ones
    glmops sets itself (the engine modules' ``*_OWNED``: model, host, port, parallelism, ...);
    the same for ``router.args`` of the front door and the top-level keys of TensorRT-LLM's
    ``engine_config``. Engines other than TensorRT-LLM read no ``engine_config``."""
    topo = dep.topology
    rpath = f"glmops_topologies.{topo}.router"
    parsers, owned, version = _flag_sets(dep, cat)
    layers = [("glmops_engine_args", "engine_args", dep.engine_args, f"glmops_topologies.{topo}.pools.<role>")]
    layers += [(f"glmops_topologies.{topo}.pools.{p.role}.engine_args", f"pools.{p.role}.engine_args", p.engine_args,
                f"glmops_topologies.{topo}.pools.{p.role}") for p in dep.pools]
    for where, key_base, data, pool_var in layers:
        if isinstance(data, dict) and data:
            _check_flag_keys(dep, data, parsers, owned, version, where,
                             lambda k, b=key_base: _src(dep, f"{b}.{k}", b),
                             "engine flag", {"pool": pool_var, "router": rpath}, out)
    rparsers, rowned, _kind, noun = _router_flag_sets(dep)
    args = {k: v for k, v in (dep.router.args or {}).items() if k != "backend"}
    if args:
        base = _src(dep, "router.args")
        _check_flag_keys(dep, args, rparsers, rowned, "", f"{rpath}.args",
                         lambda k: f"{base}.{k}", noun,
                         {"pool": f"glmops_topologies.{topo}.pools.<role>", "router": rpath}, out)
    spec = registry.find(dep.engine)
    configs = [("glmops_engine_config", "engine_config", dep.engine_config, f"glmops_topologies.{topo}.pools.<role>")]
    configs += [(f"glmops_topologies.{topo}.pools.{p.role}.engine_config", f"pools.{p.role}.engine_config",
                 p.engine_config, f"glmops_topologies.{topo}.pools.{p.role}") for p in dep.pools]
    for where, key_base, data, pool_var in configs:
        if not isinstance(data, dict) or not data:
            continue
        if spec is None or not spec.config_flags:
            _problem(out, "ENGINE_CONFIG", _src(dep, key_base),
                     f"{where} is set but {dep.engine} reads no engine config file (keys "
                     f"{', '.join(map(repr, data))}); accepted: engine_config only with glmops_engine "
                     f"{' or '.join(registry.config_engines())}",
                     "put the settings in engine_args (command-line flags) instead")
            continue
        _check_flag_keys(dep, data, [(F.load(n), None) for n in spec.config_flags], spec.config_owned, dep.engine_version,
                         where, lambda k, b=key_base: _src(dep, f"{b}.{k}", b), "engine config key",
                         {"pool": pool_var, "router": rpath}, out)


def _dedupe(problems: Iterable[Problem]) -> list[Problem]:
    seen: set[tuple[str, str, str]] = set()
    out: list[Problem] = []
    for p in problems:
        key = (p.code, p.path, p.message)
        if key not in seen:
            seen.add(key)
            out.append(p)
    return out


def _check_keys(dep: Deployment, cat: Any, out: list[Problem]) -> bool:
    """Catalog keys and plain choices. Returns False when model/variant/engine/hardware is
    unusable (later rules need them)."""
    ok = True
    # glmops_engine: a catalog entry without a kind; a router, a Dynamo backend or a discovery store
    # (etcd, nats) is a part glmops runs beside an engine, never one
    engines = [k for k, e in cat.engines.items() if e.get("kind", "engine") == "engine"]
    for field, var, accepted in (
        ("model", "glmops_model", list(cat.models)),
        ("engine", "glmops_engine", engines),
        ("hardware", "glmops_hardware", list(cat.hardware)),
    ):
        value = getattr(dep, field)
        if value not in accepted:
            part = cat.engines.get(value) if field == "engine" and isinstance(value, str) else None
            what = "missing" if not value else \
                f"{value!r} is not an engine but the catalog's {part['kind']} {part.get('name') or value!r}, " \
                "a part of a deployment" if part else f"{value!r} is unknown"
            where = _src(dep, field, var)
            _problem(out, "CATALOG_KEY", where, f"{var} {what}; accepted: {', '.join(accepted)}",
                     f"fix {var} {set_in(where)}" if value else f"set {var} in group_vars/all.yml")
            ok = False
    if dep.model in cat.models:
        variants = list(cat.models[dep.model]["variants"])
        if dep.variant not in variants:
            _problem(out, "CATALOG_KEY", _src(dep, "variant", "glmops_variant"),
                     f"glmops_variant {dep.variant!r} is unknown for {dep.model}; accepted: {', '.join(variants)}")
            ok = False
    for field, var, accepted in (
        ("topology", "glmops_topology", TOPOLOGIES),
        ("runtime", "glmops_runtime", RUNTIMES),
    ):
        value = getattr(dep, field)
        if value not in accepted:
            _problem(out, "CHOICE", _src(dep, field, var), f"{var} {value!r} is not accepted; accepted: {', '.join(accepted)}")
    if not _engine_rules(dep, "keys", RuleFacts(cat=cat), out):
        ok = False  # e.g. an unknown worker backend: later rules read the backend's catalog entry
    if dep.checkpoint.mode not in CHECKPOINT_MODES:
        _problem(out, "CHOICE", _src(dep, "checkpoint.mode"),
                 f"glmops_checkpoint.mode {dep.checkpoint.mode!r} is not accepted; accepted: {', '.join(CHECKPOINT_MODES)}")
    return ok


# --- pools and GPUs ------------------------------------------------------------------------


def _pool_hosts(dep: Deployment, pool: PoolSpec) -> list[str]:
    if pool.hosts:
        return [h for h in pool.hosts if h in dep.hosts]
    workers = dep.worker_hosts or []
    return [h for h in workers if h in dep.hosts] or list(dep.hosts)


def _strategy_said(dep: Deployment, problems: list[Problem]) -> bool:
    """True when a ``glmops_strategy`` gave no pools and a problem already says why (STRATEGY, CHOICE)."""
    return bool(dep.strategy) and not dep.pools and any(
        p.code in ("STRATEGY", "CHOICE") and "glmops_strategy" in p.message for p in problems)


def _bad_sizes(pool: PoolSpec) -> list[str]:
    """The pool's tp/pp/ep/dp/replicas that are not integers 1..MAX_PARALLEL."""
    return [k for k in ("tp", "pp", "ep", "dp", "replicas")
            if not isinstance(getattr(pool, k), int) or not 1 <= getattr(pool, k) <= MAX_PARALLEL]


def _check_pools(dep: Deployment, hw: dict, out: list[Problem]) -> None:
    """The topology's pools, the hosts' GPU indices, each pool's sizes and GPUs, and the
    pools' total GPU demand on shared hosts."""
    roles = [p.role for p in dep.pools]
    want = ["agg"] if dep.topology == "agg" else ["prefill", "decode"]
    # a topology outside glmops_topology's choices is the loader's CHOICE problem already: no
    # second problem pointing at pools the user never meant to write
    known = dep.topology in TOPOLOGIES
    if known and sorted(roles) != sorted(want) and not _strategy_said(dep, out):
        _problem(out, "POOLS", _src(dep, "pools", "glmops_topologies"),
                 f"topology {dep.topology} has pools {roles or 'none'}; accepted: exactly {' + '.join(want)}"
                 + (" (TensorRT-LLM: context + generation)" if dep.topology == "disagg" else ""),
                 f"define glmops_topologies.{dep.topology}.pools, or use a hardware/engine with a catalog layout")
    gpn = int(hw.get("gpus_per_node") or 0)
    cpu = gpn == 0
    _check_host_gpus(dep, hw, gpn, cpu, out)
    _check_duplicate_hosts(dep, cpu, out)
    for pool in dep.pools:
        _check_pool(dep, hw, pool, gpn, cpu, out)
    _check_pool_demand(dep, cpu, out)


def ssh_target(dep: Deployment, name: str) -> str:
    """The machine inventory host ``name`` stands for: ``ansible_host`` (else the name, as ssh
    uses it) in one spelling (an IP address in its canonical form, dotted quads without leading
    zeros; a DNS name lower-cased without its final dot), with ``:<ansible_port>`` when the
    inventory sets a port."""
    host = dep.hosts[name]
    address = str(host.vars.get("ansible_host") or name).strip().lower().rstrip(".")
    quad = address.split(".")
    if len(quad) == 4 and all(p.isdigit() for p in quad):
        address = ".".join(str(int(p)) for p in quad)
    try:
        address = ipaddress.ip_address(address.strip("[]")).compressed
    except ValueError:
        pass
    port = host.vars.get("ansible_port")
    return f"{address}:{port}" if port not in (None, "", "22", 22) else address


def _booked_gpus(dep: Deployment, cpu: bool) -> dict[str, set[int]]:
    """Host -> the GPU indices the pools may place replicas on there (each pool's ``gpus``
    within the host's ``glmops_gpus``, or all of them); hosts of no pool are left out. On
    ``cpu`` hardware every pool host maps to an empty set (a replica takes the whole host)."""
    booked: dict[str, set[int]] = {}
    for pool in dep.pools:
        for h in _pool_hosts(dep, pool):
            gpus = set() if cpu else {g for g in dep.hosts[h].gpus if not pool.gpus or g in pool.gpus}
            booked.setdefault(h, set()).update(gpus)
    return booked


def _check_duplicate_hosts(dep: Deployment, cpu: bool, out: list[Problem]) -> None:
    """DUPLICATE_HOST: two inventory hosts that reach the same machine (:func:`ssh_target`) and
    that pools may both place replicas on. The plan counts each name as its own node: the
    same GPU would serve two replicas, each name's services take the same ports (a pool's port,
    NIXL side channels) on the one address, and each name's deploy removes the other's units
    there as not its own. So even disjoint ``glmops_gpus`` under two names are refused: list the
    machine once (pools share a host's GPUs). One problem per machine, naming both entries
    (their inventory places), the address and the GPU ids both book, if any."""
    booked = _booked_gpus(dep, cpu)
    machines: dict[str, list[str]] = {}
    for name in dep.hosts:  # inventory order
        if name in booked:
            machines.setdefault(ssh_target(dep, name), []).append(name)
    for target, names in machines.items():
        if len(names) < 2:
            continue
        first, second = names[0], names[1]
        shared = sorted(booked[first] & booked[second])
        what = (f"both book GPUs {shared} there" if shared else
                "each takes the whole machine for a replica (cpu hardware)" if cpu else
                "each name's services would take the same ports there and remove the other's units")
        more = f"; also {_few(names[2:], 5)}" if names[2:] else ""
        _problem(out, "DUPLICATE_HOST", _src(dep, f"hosts.{second}"),
                 f"hosts {first} ({_src(dep, f'hosts.{first}')}) and {second} ({_src(dep, f'hosts.{second}')}) "
                 f"are one machine, address {target}, and {what}{more}; accepted: one inventory host per machine "
                 "(pools share its GPUs through their gpus lists)",
                 f"remove {second} or give it its own ansible_host")


def _check_host_gpus(dep: Deployment, hw: dict, gpn: int, cpu: bool, out: list[Problem]) -> None:
    """Each host's ``glmops_gpus``: distinct indices below the hardware's GPUs per node. On
    ``cpu`` hardware (``gpus_per_node`` 0: the lab's) there is no index to give: a listed one is
    out of range (a replica takes the whole host; ``glmops.plan.place``)."""
    for name, host in dep.hosts.items():
        if cpu:
            if host.gpus:
                dup = sorted({g for g in host.gpus if host.gpus.count(g) > 1})
                _problem(out, "GPU_INDEX", _src(dep, f"hosts.{name}.gpus", f"hosts.{name}"),
                         f"host {name} glmops_gpus {host.gpus} has indices {sorted(set(host.gpus))} outside "
                         f"{hw.get('name')}'s GPUs (it has none)" + (f", duplicates {dup}" if dup else "")
                         + "; accepted: no glmops_gpus (unset or []) on cpu hardware",
                         "a replica on cpu hardware takes its whole host")
            continue
        if not host.gpus:
            _problem(out, "GPU_INDEX", _src(dep, f"hosts.{name}.gpus", f"hosts.{name}"),
                     f"host {name} glmops_gpus [] lists no GPU; accepted: distinct indices 0..{gpn - 1}, "
                     f"or leave glmops_gpus unset for all {gpn} GPUs of a {hw.get('name')} node")
            continue
        bad = [g for g in host.gpus if not isinstance(g, int) or g < 0 or g >= gpn]
        dup = sorted({g for g in host.gpus if host.gpus.count(g) > 1})
        if bad or dup:
            _problem(out, "GPU_INDEX", _src(dep, f"hosts.{name}.gpus", f"hosts.{name}"),
                     f"host {name} glmops_gpus {host.gpus} has " + (f"indices {bad} outside " if bad else f"duplicates {dup} of ")
                     + f"{hw.get('name')}'s GPUs; accepted: distinct indices 0..{gpn - 1}")


def _check_pool(dep: Deployment, hw: dict, pool: PoolSpec, gpn: int, cpu: bool, out: list[Problem]) -> None:
    """One pool: sizes, EP dividing the world size, port, its ``gpus`` against the hosts', and
    enough GPUs per host and in total for its replicas (``gpn``: GPUs per node, 0 on CPU)."""
    ppath = _src(dep, f"pools.{pool.role}")
    bad_keys = _bad_sizes(pool)
    for key in bad_keys:
        _problem(out, "PARALLELISM", _src(dep, f"pools.{pool.role}.{key}", f"pools.{pool.role}"),
                 f"pool {pool.role} {key} {getattr(pool, key)!r} is not accepted; accepted: an integer 1..{MAX_PARALLEL}")
    if bad_keys:
        return
    world = pool.world_size
    if pool.ep > world or world % pool.ep:
        _problem(out, "PARALLELISM", _src(dep, f"pools.{pool.role}.ep", ppath),
                 f"pool {pool.role} ep {pool.ep} does not divide tp x pp x dp = {world}; accepted: a divisor of {world}",
                 "expert parallelism reuses the replica's GPUs")
    if pool.port is not None and not 1 <= pool.port <= 65535:
        _problem(out, "PORT", _src(dep, f"pools.{pool.role}.port", ppath),
                 f"pool {pool.role} port {pool.port} is not accepted; accepted: 1..65535")
    hosts = _pool_hosts(dep, pool)
    if cpu:
        _check_cpu_pool(dep, hw, pool, hosts, out)
        return
    if pool.gpus:
        bad = [g for g in pool.gpus if g < 0 or g >= gpn]
        dup = sorted({g for g in pool.gpus if pool.gpus.count(g) > 1})
        if bad or dup:
            _problem(out, "GPU_INDEX", _src(dep, f"pools.{pool.role}.gpus", ppath),
                     f"pool {pool.role} gpus {pool.gpus}: " + (f"indices {bad} outside" if bad else f"duplicates {dup} of")
                     + f" {hw.get('name')}'s GPUs; accepted: distinct indices 0..{gpn - 1}")
            return
        for h in hosts:
            missing = [g for g in pool.gpus if g not in dep.hosts[h].gpus]
            if missing:
                _problem(out, "GPU_INDEX", _src(dep, f"pools.{pool.role}.gpus", ppath),
                         f"pool {pool.role} gpus {pool.gpus} include {missing}, not in host {h}'s glmops_gpus "
                         f"{dep.hosts[h].gpus}; accepted: a subset of {dep.hosts[h].gpus}")
        per_host = len(pool.gpus)
        if world <= per_host and per_host % world:
            _problem(out, "GPU_COUNT", _src(dep, f"pools.{pool.role}.gpus", ppath),
                     f"pool {pool.role} gpus {pool.gpus} ({per_host} GPUs) is not a multiple of "
                     f"tp {pool.tp} x pp {pool.pp} x dp {pool.dp} = {world}; accepted: {world} x k GPUs per host",
                     "match the pool's gpus to its parallelism")
            return
        if world > per_host and world % per_host:
            _problem(out, "GPU_COUNT", _src(dep, f"pools.{pool.role}.gpus", ppath),
                     f"pool {pool.role} needs {world} GPUs per replica (tp {pool.tp} x pp {pool.pp} x dp {pool.dp}) "
                     f"but gpus {pool.gpus} gives {per_host} per host and {world} is not a multiple of it; "
                     f"accepted: a replica of whole hosts ({per_host} x n GPUs)")
            return
    per_host_counts = {h: len([g for g in dep.hosts[h].gpus if not pool.gpus or g in pool.gpus]) for h in hosts}
    if not hosts:
        _problem(out, "GPU_COUNT", ppath, f"pool {pool.role} has no hosts; accepted: inventory hosts or groups")
        return
    max_per_host = max(per_host_counts.values())
    if max_per_host == 0 and not cpu and all(not dep.hosts[h].gpus for h in hosts):
        return  # every host lists no GPU: GPU_INDEX above says so
    if world > max_per_host and (max_per_host == 0 or world % max_per_host):
        _problem(out, "GPU_COUNT", _src(dep, f"pools.{pool.role}.tp", ppath),
                 f"pool {pool.role} needs {world} GPUs per replica (tp {pool.tp} x pp {pool.pp} x dp {pool.dp}); "
                 f"hosts have {max_per_host} usable GPUs each; accepted: <= {max_per_host}, or a multiple of it "
                 f"spanning whole hosts", "change tp/pp/dp or the hosts' glmops_gpus")
        return
    total = sum(per_host_counts.values())
    need = world * pool.replicas
    if need > total:
        _problem(out, "GPU_COUNT", _src(dep, f"pools.{pool.role}.replicas", f"pools.{pool.role}.tp", ppath),
                 f"pool {pool.role} needs {pool.replicas} x {world} = {need} GPUs (replicas {pool.replicas} x tp {pool.tp} "
                 f"x pp {pool.pp} x dp {pool.dp}) but its hosts {_few(hosts)} have {total}"
                 + (f" within the pool's gpus {pool.gpus}" if pool.gpus else "") + f"; accepted: <= {total}",
                 "add hosts, lower replicas or parallelism")


def _check_cpu_pool(dep: Deployment, hw: dict, pool: PoolSpec, hosts: list[str], out: list[Problem]) -> None:
    """A pool on ``cpu`` hardware: no ``gpus`` to pin (none exist), and a whole host per replica
    (``glmops.plan.place``), so ``replicas`` <= its hosts."""
    ppath = _src(dep, f"pools.{pool.role}")
    if pool.gpus:
        _problem(out, "GPU_INDEX", _src(dep, f"pools.{pool.role}.gpus", ppath),
                 f"pool {pool.role} gpus {pool.gpus}: indices {sorted(set(pool.gpus))} outside {hw.get('name')}'s GPUs "
                 "(it has none); accepted: no gpus on cpu hardware", "a replica on cpu hardware takes its whole host")
    if not hosts:
        _problem(out, "GPU_COUNT", ppath, f"pool {pool.role} has no hosts; accepted: inventory hosts or groups")
    elif pool.replicas > len(hosts):
        _problem(out, "GPU_COUNT", _src(dep, f"pools.{pool.role}.replicas", ppath),
                 f"pool {pool.role} replicas {pool.replicas} need {pool.replicas} hosts (on {hw.get('name')} hardware a "
                 f"replica takes a whole host) but its hosts {_few(hosts)} are {len(hosts)}; accepted: replicas <= {len(hosts)}",
                 "add hosts or lower replicas")


def _check_pool_demand(dep: Deployment, cpu: bool, out: list[Problem]) -> None:
    """Total demand of all pools on shared hosts (pools pinned to disjoint gpus are fine). On
    ``cpu`` hardware: pools sharing hosts need a whole host per replica among them."""
    if cpu and len(dep.pools) > 1:
        hosts_of = {p.role: _pool_hosts(dep, p) for p in dep.pools}
        shared = sorted({h for p in dep.pools for h in hosts_of[p.role]
                         if sum(h in hosts_of[q.role] for q in dep.pools) > 1})
        union = {h for hs in hosts_of.values() for h in hs}
        need = sum(p.replicas for p in dep.pools)
        if shared and need > len(union) and all(p.replicas <= len(hosts_of[p.role]) for p in dep.pools):
            roles = " + ".join(f"{p.role} {p.replicas}" for p in dep.pools)
            _problem(out, "GPU_COUNT", _src(dep, f"pools.{dep.pools[-1].role}.hosts", "pools", "glmops_topologies"),
                     f"pools need {need} hosts ({roles} replicas; on cpu hardware a replica takes a whole host) and share "
                     f"{_few(shared)}, but their hosts {_few(sorted(union))} are {len(union)}; accepted: <= {len(union)} replicas",
                     "give each pool its own hosts")
    if not cpu and len(dep.pools) > 1:
        shared = set(_pool_hosts(dep, dep.pools[0]))
        for pool in dep.pools[1:]:
            shared &= set(_pool_hosts(dep, pool))
        if shared and not all(p.gpus for p in dep.pools):
            total = sum(len(dep.hosts[h].gpus) for h in set().union(*(_pool_hosts(dep, p) for p in dep.pools)))
            need = sum(p.world_size * p.replicas for p in dep.pools)
            if need > total:
                roles = " + ".join(f"{p.role} {p.replicas}x{p.world_size}" for p in dep.pools)
                _problem(out, "GPU_COUNT", _src(dep, "pools", "glmops_topologies"),
                         f"pools need {need} GPUs ({roles}) but their hosts have {total}; accepted: <= {total}",
                         "add hosts or pin each pool to its own hosts/gpus")
        elif all(p.gpus for p in dep.pools):
            first, *rest = dep.pools
            for other in rest:
                both = set(first.gpus) & set(other.gpus)
                hosts_both = set(_pool_hosts(dep, first)) & set(_pool_hosts(dep, other))
                if both and hosts_both:
                    _problem(out, "GPU_OVERLAP", _src(dep, f"pools.{other.role}.gpus"),
                             f"pools {first.role} and {other.role} both use GPUs {sorted(both)} on {sorted(hosts_both)}; "
                             f"accepted: disjoint gpus per host", "seed 000: context 0-3, generation 4-7")


def _shards(pool: PoolSpec) -> int:
    """GPUs one copy of the weights is split over: tp x pp, times dp when experts are spread
    over the data-parallel ranks too (ep > 1 or attention DP)."""
    shards = pool.tp * pool.pp
    if pool.dp > 1 and (pool.ep > 1 or pool.attention_dp):
        shards *= pool.dp
    return max(shards, 1)


def _check_memory(dep: Deployment, variant: dict, hw: dict, cat: Any, out: list[Problem]) -> None:
    mem = float(hw.get("gpu_memory_gib") or 0)
    size = float(dep.checkpoint.size_gib or variant.get("weight_gib") or 0)
    if mem <= 0 or size <= 0:
        return  # cpu lab hardware, or a checkpoint without a known size
    headroom = float(cat.policy.get("memory_headroom_fraction", 0.10))
    usable = mem * (1 - headroom)
    for pool in dep.pools:
        if pool.tp < 1 or pool.pp < 1 or pool.dp < 1:
            continue
        per_gpu = size / _shards(pool)
        if per_gpu > usable:
            need = size / usable
            given = dep.checkpoint.size_gib and dep.checkpoint.size_from == "inventory"
            _problem(out, "MEMORY_FIT", _src(dep, f"pools.{pool.role}.tp", f"pools.{pool.role}"),
                     f"{dep.model} {dep.variant} weights {size:g} GiB"
                     f"{' (from ' + _src(dep, 'checkpoint.size_gib') + ')' if given else ''} over {_shards(pool)} GPUs (pool {pool.role} tp {pool.tp} x pp {pool.pp}"
                     f"{f' x dp {pool.dp}' if _shards(pool) != pool.tp * pool.pp else ''}) = {per_gpu:.1f} GiB per GPU, more than "
                     f"{usable:.1f} GiB usable of {mem:g} GiB on {hw.get('name')} ({int(headroom * 100)}% headroom for KV cache and "
                     f"activations); accepted: >= {int(-(-need // 1))} GPUs per copy of the weights",
                     "raise tp/pp (more GPUs per replica), use larger GPUs or a smaller variant"
                     + (", or correct glmops_checkpoint.size_gib" if given else ""))


#: bytes per cached element of a KV cache dtype (``fp8*`` one byte, ``*fp4*`` half, else BF16/FP16 two)
def _kv_bytes(dtype: str) -> float:
    text = str(dtype).lower()
    return 0.5 if "fp4" in text else 1.0 if "fp8" in text else 2.0


def _memory_setting(dep: Deployment, pool: PoolSpec, spec: dict) -> tuple[float | None, str, str]:
    """(fraction, what sets it, inventory path) of the engine's memory fraction for ``pool``
    (catalog ``memory_fraction``: a flag or a config key): engine_args / engine_config of the pool,
    then of the deployment, then the catalog recipe, then the engine's default."""
    rec = engine_base.settings_for(dep, pool).recipe
    flag, key = spec.get("flag"), spec.get("config")
    layers = [(pool.engine_args, pool.engine_config, f"pools.{pool.role}"), (dep.engine_args, dep.engine_config, ""),
              (rec.args, rec.config, None)]
    for args, config, scope in layers:
        found = None
        if flag:
            hit = next((k for k in args or {} if _canon(k) == _canon(flag) and args[k] is not None), None)
            found = (args[hit], f"engine_args.{hit}") if hit else None
        if found is None and key:
            has, value = _dig(config or {}, key)
            found = (value, f"engine_config.{key.split('.')[0]}") if has and value is not None else None
        if found is not None:
            value, where = found
            shown = f"{flag or key} {value}"
            if scope is None:
                return _as_float(value), f"{shown} (catalog recipe {', '.join(rec.ids)})", _src(dep, "engine_args")
            return _as_float(value), shown, _src(dep, f"{scope}.{where}" if scope else where, where)
    default = spec.get("default")
    return (None if default is None else float(default)), f"{flag or key} {default} (the engine's default)", \
        _src(dep, "engine_args")


def _as_float(value: Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _max_len(dep: Deployment, pool: PoolSpec) -> tuple[int | None, str]:
    """(max sequence length, inventory path) a pool is configured for: engine flags, else
    ``glmops_max_seq_len``, else the recipe's; None when nothing sets one (the engine takes the
    checkpoint's, which the seeds run without counting)."""
    args = _args(dep, pool)
    for flag in ("max-model-len", "context-length", "max-seq-len"):
        if _as_int(args.get(flag)) is not None:
            return _as_int(args[flag]), _src(dep, f"pools.{pool.role}.engine_args", "engine_args")
    found, value = _dig(_config(dep, pool), "max_seq_len")
    if found and _as_int(value) is not None:
        return _as_int(value), _src(dep, f"pools.{pool.role}.engine_config", "engine_config")
    value = engine_base.settings_for(dep, pool).max_seq_len
    return (_as_int(value) if _as_int(value) and _as_int(value) > 0 else None), _src(dep, "max_seq_len", "glmops_max_seq_len")


def _check_memory_fraction(dep: Deployment, model: dict, variant: dict, hw: dict, cat: Any, backend: dict,
                           out: list[Problem]) -> None:
    """MEMORY_FIT at the configured memory fraction (F25): the engine's fraction (catalog
    ``memory_fraction`` of the backend: vLLM ``gpu-memory-utilization``, SGLang ``mem-fraction-static``
    of the whole GPU; TensorRT-LLM ``kv_cache_config.free_gpu_memory_fraction`` of what is free after
    the weights) must hold the weights per GPU and the KV cache of at least one sequence of the
    configured maximum length (catalog ``models.<m>.kv_cache``; not counted when the model has no
    figures or no length is configured). Pools whose weights alone do not fit are
    :func:`_check_memory`'s."""
    spec = backend.get("memory_fraction") or {}
    mem = float(hw.get("gpu_memory_gib") or 0)
    size = float(dep.checkpoint.size_gib or variant.get("weight_gib") or 0)
    if not spec or mem <= 0 or size <= 0:
        return
    usable = mem * (1 - float(cat.policy.get("memory_headroom_fraction", 0.10)))
    geometry = model.get("kv_cache") or {}
    for pool in dep.pools:
        if _bad_sizes(pool) or size / _shards(pool) > usable:
            continue  # PARALLELISM / the weights-only MEMORY_FIT says it
        weights = size / _shards(pool)
        frac, shown, where = _memory_setting(dep, pool, spec)
        if frac is None or not 0 < frac <= 1:
            continue  # unset (computed by the engine) or a value ENGINE_FLAG/TYPE reports
        length, len_where = _max_len(dep, pool)
        kv = 0.0
        kv_text = ""
        if geometry and length:
            layers = int(geometry.get("layers") or 0) / max(int(pool.pp or 1), 1)
            per_token = int(geometry.get("elements_per_token_per_layer") or 0) * _kv_bytes(
                _kv_dtype_effective(dep, pool)) * layers
            if not geometry.get("replicated_over_tp", True):
                per_token /= max(pool.tp, 1)
            kv = length * per_token / 2**30
            kv_text = (f"the KV cache of one {length:,}-token sequence ({length:,} x {layers:g} layers x "
                       f"{geometry.get('elements_per_token_per_layer')} x {_kv_bytes(_kv_dtype_effective(dep, pool)):g} byte "
                       f"({_kv_dtype_effective(dep, pool)}) = {kv:.1f} GiB per GPU)")
        head = (f"pool {pool.role}: {dep.model} {dep.variant} weights {size:g} GiB over {_shards(pool)} GPUs = "
                f"{weights:.1f} GiB per GPU")
        if spec.get("of") == "free":
            budget = frac * (mem - weights)
            if kv and kv > budget:
                _problem(out, "MEMORY_FIT", where if "the engine's default" not in shown else len_where,
                         f"{head}; {shown} of the {mem - weights:.1f} GiB left on {hw.get('name')} ({mem:g} GiB) = "
                         f"{budget:.1f} GiB for the KV cache, less than {kv_text}; accepted: a fraction >= "
                         f"{kv / (mem - weights):.2f} or max_seq_len <= {int(budget / kv * length):,}",
                         "raise the fraction, shorten max_seq_len, or use more GPUs per replica (pp)")
            continue
        budget = frac * mem
        left = budget - weights
        if left >= kv and left > 0:
            continue
        need = min((weights + kv) / mem, 1.0)
        shorter = f" or max_seq_len <= {int(left / kv * length):,}" if kv and left > 0 else ""
        _problem(out, "MEMORY_FIT", where,
                 f"{head}; {shown} x {mem:g} GiB ({hw.get('name')}) = a budget of {budget:.1f} GiB per GPU leaves "
                 f"{left:.1f} GiB after the weights, " + (f"less than {kv_text}" if kv_text and left > 0 else
                                                          "nothing for the KV cache")
                 + f"; accepted: {spec.get('flag') or spec.get('config')} >= {need:.2f}" + shorter
                 + " (at this parallelism)",
                 "raise the memory fraction, shorten max_seq_len, or use more GPUs per copy of the weights")


def _kv_dtype_effective(dep: Deployment, pool: PoolSpec) -> str:
    """The KV cache dtype a pool runs: the inventory's (:func:`_kv_dtype`), else the recipe's."""
    value, _where = _kv_dtype(dep, pool)
    return value if value not in ("", "auto") else str(engine_base.settings_for(dep, pool).kv_cache_dtype or "auto")


def _arch_rank(arch: str) -> int:
    m = re.match(r"sm(\d+)", arch or "")
    return int(m.group(1)) if m else -1


def _check_arch(dep: Deployment, model: dict, variant: dict, hw: dict, engine: dict, out: list[Problem]) -> None:
    family = hw.get("arch_family")
    if family == "cpu":
        return  # the lab: engines (or their doubles) run on the CPU
    vendors = engine.get("vendors")
    if vendors and hw.get("vendor") not in vendors:
        why = (engine.get("sources") or {}).get("vendors")
        _problem(out, "ENGINE_HARDWARE", _src(dep, "engine", "glmops_engine"),
                 f"engine {dep.engine} does not run on {hw.get('name')} ({hw.get('vendor')}); accepted vendors: {', '.join(vendors)}",
                 f"catalog engines.yaml: {why}" if why else "")
    need_family = variant.get("requires_arch_family")
    if need_family and family != need_family:
        _problem(out, "NVFP4_BLACKWELL", _src(dep, "variant", "glmops_variant"),
                 f"variant {dep.variant} of {dep.model} ({variant.get('repo')}) needs {need_family} GPUs; hardware "
                 f"{hw.get('name')} is {hw.get('arch')} ({family}); accepted hardware: Blackwell (b200, gb200, b300, gb300)",
                 "pick the fp8 variant on this hardware")
    model_vendors = model.get("vendors")
    if model_vendors and hw.get("vendor") not in model_vendors:
        _problem(out, "ARCH", _src(dep, "hardware", "glmops_hardware"),
                 f"{model.get('name')} runs on {', '.join(model_vendors)} GPUs only; hardware {hw.get('name')} is {hw.get('vendor')} "
                 f"{hw.get('arch')}; accepted: {', '.join(model_vendors)} {model.get('min_arch')} or newer")
    elif hw.get("vendor") == "nvidia" and _arch_rank(hw.get("arch", "")) < _arch_rank(model.get("min_arch", "")):
        _problem(out, "ARCH", _src(dep, "hardware", "glmops_hardware"),
                 f"{model.get('name')} needs {model.get('min_arch')} or newer; hardware {hw.get('name')} is {hw.get('arch')}")
    if variant.get("multi_node_only"):
        gpn = int(hw.get("gpus_per_node") or 0)
        for pool in dep.pools:
            per_host = len(pool.gpus) if pool.gpus else gpn
            if pool.world_size <= per_host:
                _problem(out, "BF16_MULTI_NODE", _src(dep, f"pools.{pool.role}.tp", "variant", "glmops_variant"),
                         f"{model.get('name')} {dep.variant} needs multiple nodes per replica; pool {pool.role} uses "
                         f"tp {pool.tp} x pp {pool.pp} x dp {pool.dp} = {pool.world_size} GPUs, one {hw.get('name')} node "
                         f"({per_host} GPUs); accepted: > {per_host} GPUs per replica (e.g. tp {per_host} pp 2 over 2 nodes)",
                         "seed 004: BF16 weights need multi-node deployment; or pick fp8/nvfp4")


def _is_fp8(value: str) -> bool:
    return str(value).lower().startswith("fp8")


def _check_kv_dtype(dep: Deployment, model: dict, hw: dict, backend: dict, out: list[Problem]) -> None:
    accepted = list(NEUTRAL_KV_DTYPES) + [v for v in ((backend.get("kv_cache_dtype") or {}).get("accepted") or []) if v not in NEUTRAL_KV_DTYPES]
    min_arch = model.get("fp8_kv_cache_min_arch")
    for pool in dep.pools or [PoolSpec(role="agg")]:
        value, where = _kv_dtype(dep, pool)
        if value not in accepted:
            _problem(out, "KV_CACHE_DTYPE", where,
                     f"kv_cache_dtype {value!r} is not accepted by {backend.get('name')}; accepted: {', '.join(accepted)}")
            continue
        if (min_arch and _is_fp8(value) and hw.get("vendor") == "nvidia"
                and _arch_rank(hw.get("arch", "")) < _arch_rank(min_arch)):
            _problem(out, "F03_FP8_KV_HOPPER", where,
                     f"kv_cache_dtype {value!r} (FP8 KV cache) is not supported for {model.get('name')} on "
                     f"{hw.get('name')} ({hw.get('arch')}, {hw.get('arch_family')}); accepted: bf16, auto",
                     f"seed 002: Hopper must run BF16 KV for this model; FP8 KV needs {min_arch} (Blackwell)")
        if str(value).startswith("nvfp4") and hw.get("arch_family") not in ("blackwell",):
            _problem(out, "NVFP4_BLACKWELL", where,
                     f"kv_cache_dtype {value!r} needs Blackwell; {hw.get('name')} is {hw.get('arch')}; accepted: auto, bf16, fp8")


#: keys of the engine-neutral speculative mapping (``glmops_speculative``); engines/vllm.py passes
#: method + num_speculative_tokens through, engines/sglang.py also reads the EAGLE names of seed 001;
#: ``model`` + ``revision``: a drafter's own checkpoint (catalog ``speculative.drafter_methods``)
SPECULATIVE_KEYS = frozenset({"method", "num_speculative_tokens", "num_steps", "num_draft_tokens", "topk",
                              "model", "revision"})


def _check_speculative(dep: Deployment, model: dict, out: list[Problem]) -> None:
    """Speculative decoding per pool: known keys, a method the backend accepts (catalog
    ``speculative.methods``; an engine with ``speculative_own_keys`` checks its own), positive
    counts, MTP only on a model with MTP layers, the engine's own rules, and F16 (equal
    settings on both pools)."""
    espec = registry.find(dep.engine)
    own = espec.speculative_own_keys if espec is not None else frozenset()
    backend = catalog_mod.load().engines.get(_backend(dep)) or {}
    for pool in dep.pools:
        spec = pool.speculative
        if not spec:
            continue
        where = _src(dep, f"pools.{pool.role}.speculative", "speculative", "glmops_speculative")
        if not isinstance(spec, dict):
            _problem(out, "SPECULATIVE", where, f"speculative {spec!r} is not a mapping; accepted: "
                     "{method: <method>, num_speculative_tokens: <int>} or {method: none}")
            continue
        method = str(spec.get("method", "")).lower()
        if method in ("none", "off"):
            continue
        accepted = [str(m) for m in (backend.get("speculative") or {}).get("methods", [])]
        keys = SPECULATIVE_KEYS | own
        unknown = sorted(map(str, set(spec) - keys))
        if unknown:
            _problem(out, "SPECULATIVE", where, f"speculative key(s) {', '.join(map(repr, unknown))} are not accepted; "
                     f"accepted: {', '.join(sorted(keys))}")
        if method not in accepted and not own:
            _problem(out, "SPECULATIVE", where,
                     f"speculative method {spec.get('method')!r} is not accepted on {_backend(dep)}; "
                     f"accepted: {', '.join(accepted + ['none'])}")
        for key in sorted(keys - {"method", "max_draft_len", "model", "revision"} - own):
            if key in spec and (isinstance(spec[key], bool) or not isinstance(spec[key], int) or spec[key] < 1):
                _problem(out, "SPECULATIVE", where, f"speculative {key} {spec[key]!r} is not accepted; accepted: an integer >= 1")
        if method == "":
            continue
        if method == "mtp" and int(model.get("mtp_layers", 1) or 0) < 1:
            _problem(out, "SPECULATIVE", where, f"{model.get('name')} has no MTP layer; accepted: method none")
        if method in accepted:  # another method is refused above (or by the engine's own rule)
            _check_drafter(dep, spec, method, [str(m) for m in (backend.get("speculative") or {}).get("drafter_methods", [])],
                           where, out)
        if espec is not None and espec.speculative_pool_rule is not None:
            espec.speculative_pool_rule(dep, model, spec, where, method, out)
    if espec is not None and espec.speculative_config_rule is not None:
        espec.speculative_config_rule(dep, out)
    if dep.topology == "disagg" and (backend.get("speculative") or {}).get("equal_on_both_pools", True):
        pre, dec = dep.pool("prefill"), dep.pool("decode")
        if pre and dec:
            a, b = _speculative(dep, pre), _speculative(dep, dec)
            if a != b:
                _problem(out, "F16_SPECULATIVE_MISMATCH", _src(dep, "pools.decode.speculative", "pools.prefill.speculative", "speculative"),
                         f"speculative settings differ: prefill {a!r}, decode {b!r}; accepted: the same settings on both pools "
                         "(equal num_speculative_tokens / matching speculative_config)",
                         "set glmops_speculative once for both pools (seeds 000, 001, 002)")


def _check_drafter(dep: Deployment, spec: dict, method: str, drafter_methods: list[str], where: str,
                   out: list[Problem]) -> None:
    """A drafter's own checkpoint (``model`` + ``revision``, catalog ``speculative.drafter_methods``,
    defaults from ``models.<m>.drafters``): only for such a method, a repo id glmops downloads, and a
    40-hex commit while serving offline (F12, as ``glmops_checkpoint.revision``)."""
    name = where.split(":", 1)[-1]  # the variable path: glmops_speculative, glmops_topologies.<t>.pools.<role>.speculative
    repo, revision = spec.get("model"), spec.get("revision")
    if method not in drafter_methods:
        if repo is not None or revision is not None:
            _problem(out, "SPECULATIVE", where,
                     f"speculative method {method!r} loads no draft checkpoint of its own, but {name}.model/revision are set; "
                     f"accepted: model and revision only with {', '.join(drafter_methods) or 'a drafter method (none on ' + _backend(dep) + ')'}")
        return
    if isinstance(repo, str) and repo.startswith("/") and ".." not in repo.split("/"):
        return  # the user's own copy on every host: nothing to download or pin
    if not isinstance(repo, str) or not REPO_ID.match(repo):
        _problem(out, "SPECULATIVE", f"{where}.model",
                 f"{name}.model {repo!r} is not a Hugging Face repo id; accepted: owner/name of the {method} drafter "
                 "(glmops downloads it and serves its local snapshot) or an absolute directory present on every host",
                 f"catalog models.yaml drafters.{method} names none for {dep.model}: set {name}.model")
        return
    if dep.checkpoint.offline and (revision is None or not HEX40.match(str(revision))):
        found = "is unset" if revision is None else f"{str(revision)!r} is not a commit"
        _problem(out, "F12_REVISION", f"{where}.revision",
                 f"{name}.revision of drafter {repo} {found} while serving offline; accepted: a 40-hex commit sha of {repo}",
                 "pin the drafter's commit so serving never depends on the hub (HF_HUB_OFFLINE=1); "
                 "no seed names one (catalog models.yaml drafters)")


def _check_limits(dep: Deployment, model: dict, out: list[Problem]) -> None:
    limit = int(model.get("max_context") or 0) or (VARIABLES["glmops_max_seq_len"].bounds or (0, 0))[1]
    candidates: list[tuple[Any, str]] = [(dep.max_seq_len, _src(dep, "max_seq_len", "glmops_max_seq_len"))]
    for pool in dep.pools:
        args = _args(dep, pool)
        for flag in ("max-seq-len", "max-model-len", "context-length"):
            if flag in args:
                candidates.append((args[flag], _src(dep, f"pools.{pool.role}.engine_args", "engine_args")))
        if "max_seq_len" in _config(dep, pool):
            candidates.append((_config(dep, pool)["max_seq_len"], _src(dep, f"pools.{pool.role}.engine_config", "engine_config")))
    for value, where in candidates:
        if value is None or str(value) in ("auto", "-1"):
            continue
        try:
            n = int(value)
        except (TypeError, ValueError):
            _problem(out, "MAX_SEQ_LEN", where, f"max_seq_len {value!r} is not an integer; accepted: 1..{limit:,}")
            continue
        if n < 1 or (limit and n > limit):
            _problem(out, "MAX_SEQ_LEN", where,
                     f"max_seq_len {n:,} is not accepted for {model.get('name')}; accepted: 1..{limit:,}",
                     "seed 000/002: the checkpoint's maximum context is 1,048,576 tokens")
    for field, var in (("max_batch_size", "glmops_max_batch_size"), ("max_num_tokens", "glmops_max_num_tokens")):
        value = getattr(dep, field)
        high = (VARIABLES[var].bounds or (1, 0))[1]
        if value is not None and value < 1:
            _problem(out, "LIMIT", _src(dep, field, var), f"{var} {value!r} is not accepted; accepted: an integer >= 1")
        elif value is not None and high and value > high:
            _problem(out, "LIMIT", _src(dep, field, var),
                     f"{var} {_short(value)} is not accepted; accepted: an integer 1..{high:,} (docs/variables.md)")


def _check_versions(dep: Deployment, engine: dict, out: list[Problem]) -> None:
    where = _src(dep, "engine_version", "glmops_engine_version")
    have = _version(dep.engine_version)
    if have is None:
        _problem(out, "ENGINE_VERSION", where,
                 f"glmops_engine_version {dep.engine_version!r} is not a version; accepted: e.g. {engine.get('version')}")
        return
    floor = engine.get("min_version")
    by_model = (engine.get("min_version_by_model") or {}).get(dep.model)
    candidates = [(m, w) for m, w in ((floor, f"{engine.get('name')}"), (by_model, f"{engine.get('name')} for {dep.model}")) if m]
    if candidates:
        candidates = [max(candidates, key=lambda c: _version(c[0]))]
    for minimum, why in candidates:
        if minimum and have < _version(minimum):
            _problem(out, "ENGINE_VERSION", where,
                     f"glmops_engine_version {dep.engine_version!r} is older than the minimum for {why}; accepted: >= {minimum}",
                     f"catalog engines.yaml ({engine.get('source')})")


def _check_driver_branch(dep: Deployment, cat: Any, out: list[Problem]) -> None:
    """DRIVER_BRANCH (F30): a host's configured ``nvidia_driver_branch`` (roles/nvidia_driver) must be at
    least what the deployment's engine builds need (:func:`glmops.prechecks.driver_need`: CUDA 13
    builds need R580); one problem naming every such host."""
    need, builds = prechecks.driver_need(dep, [dep.engine, _backend(dep)], cat)
    if not need:
        return
    low = []
    for name, host in dep.hosts.items():
        hw = cat.hardware.get(host.hardware or dep.hardware) or {}
        branch = _as_int(str(host.vars.get("nvidia_driver_branch", "")).split(".")[0])
        if hw.get("vendor") == "nvidia" and branch is not None and branch < need:
            low.append((name, branch))
    if low:
        name, branch = low[0]
        _problem(out, "DRIVER_BRANCH", _src(dep, f"hosts.{name}.nvidia_driver_branch", f"hosts.{name}"),
                 f"nvidia_driver_branch {branch} on {_few([n for n, _ in low])} is below what {'; '.join(builds)} "
                 f"need{'s' if len(builds) == 1 else ''}; accepted: >= {need}",
                 f"set nvidia_driver_branch: \"{need}\" (or leave it unset: provisioning installs the deployment's "
                 "need), or pin an engine build for an older CUDA")


def _check_socket_ifname(dep: Deployment, cat: Any, out: list[Problem]) -> None:
    """F17_SOCKET_IFNAME: a host's ``glmops_socket_ifname`` (NCCL/Gloo between hosts) must not be
    an interface other hosts cannot reach (catalog ``prechecks.yaml`` ``interface.refused``)."""
    patterns = netif.refused_patterns(cat)
    for name, host in dep.hosts.items():
        hit = netif.refused(host.socket_ifname, patterns) if host.socket_ifname else None
        if hit:
            _problem(out, netif.CODE, _src(dep, f"hosts.{name}.socket_ifname", f"hosts.{name}"),
                     f"glmops_socket_ifname {host.socket_ifname!r} of host {name} matches the refused pattern "
                     f"{hit!r}: other hosts cannot reach NCCL/Gloo there; accepted: an interface matching none of "
                     f"{', '.join(patterns)} (the one that holds the host's address)",
                     "name the host's cluster network interface, or leave it unset: the deploy names the "
                     "interface that holds the host's address")


def _check_image(dep: Deployment, engine: dict, backend: dict, hw: dict, out: list[Problem]) -> None:
    """Container runtime needs an image for the workers: ``glmops_image`` or the catalog's for the engine that
    runs the model (Dynamo: its backend's, e.g. seed 001's vLLM image) x model x vendor. A front door without an
    image of its own runs from its venv (glmops.engines)."""
    if dep.runtime != "container" or dep.image:
        return
    image = next((found for entry in (backend, engine) if (found := (
        (entry.get("image_by_model") or {}).get(dep.model) or (entry.get("image_by_vendor") or {}).get(hw.get("vendor"))
        or entry.get("default_image")))), None)
    if not image:
        _problem(out, "IMAGE", _src(dep, "runtime", "glmops_runtime"),
                 f"glmops_runtime 'container' but the catalog names no {engine.get('name')} image for {dep.model} "
                 f"and glmops_image is unset; accepted: glmops_image set, or glmops_runtime 'venv'",
                 "the seeds name no image for this engine")


def _check_multimodal(dep: Deployment, model: dict, out: list[Problem]) -> None:
    if dep.video and not dep.multimodal:
        _problem(out, "MULTIMODAL", _src(dep, "video", "glmops_video"),
                 "glmops_video true needs image/video input on; "
                 "accepted: glmops_multimodal true, or glmops_video false")
    elif dep.video and "video" not in (model.get("modalities") or []):
        _problem(out, "MULTIMODAL", _src(dep, "video", "glmops_video"),
                 f"{model.get('name')} takes {model.get('modalities')} input; accepted: glmops_video false")
    if not dep.multimodal:
        return
    where = _src(dep, "multimodal", "glmops_multimodal")
    if not {"image", "video"} & set(model.get("modalities") or []):
        _problem(out, "MULTIMODAL", where, f"{model.get('name')} takes {model.get('modalities')} input; accepted: glmops_multimodal false")
    pin = transformers_pin(dep)
    for spec in dep.pip_extra or []:
        name = re.split(r"[<>=!~\[ ;]", str(spec), maxsplit=1)[0].strip().lower()
        if pin and name == "transformers" and str(spec).replace(" ", "") != pin:
            _problem(out, "TRANSFORMERS_PIN", _src(dep, "pip_extra", "glmops_pip_extra"),
                     f"glmops_pip_extra has {spec!r} while image/video input is on; accepted: {pin}",
                     f"seed 000: image and video inputs need the native Glm5NextProcessor from {pin}")


def transformers_pin(dep: Deployment) -> str:
    """The ``transformers==X`` pin image/video input needs: the first ``transformers`` entry of
    the catalog's ``multimodal_pip`` for the engine that runs the model, else of any engine
    (glmops/catalog/engines.yaml, seed 000); ``""`` when the catalog names none."""
    cat = catalog_mod.load()
    entries = [cat.engines.get(_backend(dep)) or {}] + list(cat.engines.values())
    for entry in entries:
        for spec in entry.get("multimodal_pip") or []:
            if re.split(r"[<>=!~\[ ;]", str(spec), maxsplit=1)[0].strip().lower() == "transformers":
                return str(spec).replace(" ", "")
    return ""


def _check_checkpoint(dep: Deployment, variant: dict, out: list[Problem]) -> None:
    ck = dep.checkpoint
    if not ck.repo:
        missing = variant.get("missing") or {}
        needs = "; ".join(f"{k}: {v}" for k, v in missing.items())
        _problem(out, "CHECKPOINT_REPO", _src(dep, "checkpoint.repo", "checkpoint", "glmops_checkpoint"),
                 f"variant {dep.variant} of {dep.model} has no repo in the catalog and glmops_checkpoint.repo is unset; "
                 "accepted: a Hugging Face repo id (owner/name)" + (f"; the catalog lacks these checkpoint facts: {needs}" if needs else ""),
                 f"catalog models.yaml ({variant.get('source')}): set glmops_checkpoint.repo (and .revision) to the checkpoint")
    if ck.revision is not None and ck.offline and not HEX40.match(str(ck.revision)):
        _problem(out, "F12_REVISION", _src(dep, "checkpoint.revision", "checkpoint", "glmops_checkpoint"),
                 f"glmops_checkpoint.revision {ck.revision!r} is not a commit while serving offline; accepted: a 40-hex commit "
                 "sha (e.g. f46cf340d35a22d0d83d0c1dac8957cf2b1bcd35)",
                 "pin the commit so serving never depends on the hub (HF_HUB_OFFLINE=1), or unset it to pin at download")


def _transport(dep: Deployment, pool: PoolSpec) -> str:
    """KV transfer backend of a disagg pool, lower case: nixl | mooncake | ucx | ... (the
    backend engine's ``EngineSpec.transport``; ``""`` when it declares none)."""
    spec = registry.find(_backend(dep))
    if spec is None or spec.transport is None:
        return ""
    return spec.transport(_args(dep, pool), _config(dep, pool))


def _layout_settings(dep: Deployment, pool: PoolSpec, layout_keys: dict) -> dict[str, Any]:
    """Layout-affecting settings of a pool: name -> effective value (``None`` = default)."""
    args = _args(dep, pool)
    cfg = _config(dep, pool)
    env = _env(dep, pool)
    out: dict[str, Any] = {}
    hybrid = None
    for key in layout_keys.get("engine_args") or []:
        c = _canon(key)
        if c in ("disable-hybrid-kv-cache-manager", "no-disable-hybrid-kv-cache-manager", "enable-hybrid-kv-cache-manager"):
            if c in args and args[c] is not None:
                enabled = bool(args[c]) if c != "disable-hybrid-kv-cache-manager" else not bool(args[c])
                hybrid = "enabled" if enabled else "disabled"
            continue
        if c.startswith("speculative") or c == "kv-cache-dtype":
            continue  # compared by F16 / as kv_cache_dtype below
        found, value = _dig(args, key)
        out[f"engine_args.{key}"] = value if found else None
    if any(_canon(k) in ("disable-hybrid-kv-cache-manager",) for k in layout_keys.get("engine_args") or []):
        out["hybrid KV cache manager"] = hybrid
    for key in layout_keys.get("engine_config") or []:
        if key.startswith("speculative"):
            continue
        found, value = _dig(cfg, key)
        out[f"engine_config.{key}"] = value if found else None
    out["kv_cache_dtype"] = _kv_dtype(dep, pool)[0]
    for name in layout_keys.get("env") or []:
        out[f"env {name}"] = env.get(name)
    for name, value in env.items():
        if any(name.startswith(prefix) for prefix in layout_keys.get("env_prefixes") or []):
            out[f"env {name}"] = value
    return out


def _check_disagg(dep: Deployment, facts: RuleFacts, out: list[Problem]) -> None:
    """The engine's (and its backend's) own transport rules (stage ``transport``, e.g. F04),
    then for a disaggregated topology F01 (layout-affecting settings equal on both pools) and
    F06 (cross-host NIXL needs RDMA devices on every host)."""
    backend = facts.backend or {}
    for name in dict.fromkeys([dep.engine, _backend(dep)]):
        spec = registry.find(name)
        if spec is not None and "transport" in spec.rules:
            spec.rules["transport"](dep, facts, out)
    if dep.topology != "disagg":
        return
    pre, dec = dep.pool("prefill"), dep.pool("decode")
    if not (pre and dec):
        return
    # F01: layout-affecting settings (and transport env, F04) equal on both pools
    a = _layout_settings(dep, pre, backend.get("layout_keys") or {})
    b = _layout_settings(dep, dec, backend.get("layout_keys") or {})
    for key in sorted(set(a) | set(b)):
        va, vb = a.get(key), b.get(key)
        if va != vb:
            code = "F04_TRANSPORT_ENV" if key.startswith("env ") and not key.startswith("env VLLM_") else "F01_LAYOUT_MISMATCH"
            leaf = key.split(" ", 1)[-1] if key.startswith("env ") else key.split(".", 1)[-1]
            section = "env" if key.startswith("env ") else key.split(".", 1)[0]
            _problem(out, code,
                     _src(dep, f"pools.prefill.{section}.{leaf}", f"pools.decode.{section}.{leaf}", "pools.prefill", "pools"),
                     f"{key} differs between pools: prefill {va if va is not None else '(default)'!r}, decode "
                     f"{vb if vb is not None else '(default)'!r}; accepted: the same value on prefill and decode",
                     "set layout-affecting settings once (glmops_engine_args / glmops_env), not per pool")
    # F06: cross-host NIXL over RDMA needs RDMA devices pinned on every host; a UCX_TLS without RDMA
    # transports (seed 001 GB200: cuda_copy,tcp) needs none (D3)
    transports = {_transport(dep, pre), _transport(dep, dec)}
    if "nixl" in transports and any(engine_base.pool_ucx_rdma(dep, p) for p in (pre, dec)):
        hosts_pre, hosts_dec = _placed_hosts(dep, pre), _placed_hosts(dep, dec)
        cross = len(hosts_pre | hosts_dec) > 1
        if cross and (dep.hardware != "cpu"):
            placed = sorted(hosts_pre | hosts_dec, key=list(dep.hosts).index)
            missing = [h for h in placed if not dep.hosts[h].rdma_devices]
            if missing:  # one problem for the one cause, naming every host (a few shown in full)
                h = missing[0]
                names = ", ".join(missing[:8]) + (f" and {len(missing) - 8} more" if len(missing) > 8 else "")
                _problem(out, "F06_RDMA_DEVICES", _src(dep, f"hosts.{h}.rdma_devices", f"hosts.{h}"),
                         f"host{'s' if len(missing) > 1 else ''} {names} ha{'ve' if len(missing) > 1 else 's'} no "
                         f"glmops_rdma_devices but NIXL transfers KV across {len(placed)} hosts; accepted: a list of "
                         "RDMA NICs on every host, e.g. [mlx5_0, mlx5_1]",
                         "pin the NICs so UCX_NET_DEVICES is rendered; unpinned cross-host transfers hang (a TCP "
                         "path, UCX_TLS without rc/ud/dc/ib such as cuda_copy,tcp, needs none)")


def _check_side_channels(dep: Deployment, out: list[Problem]) -> None:
    """F05 (validation part) for user-chosen NIXL side-channel base ports on vLLM.

    Which ports a vLLM worker binds for ``VLLM_NIXL_SIDE_CHANNEL_PORT`` depends on the build:
    base + DP index (reference/serving-clis.md, vLLM 0.33) or base + DP rank x TP + TP rank
    (earlier NixlConnector, the layout field case F05 describes). For a base port the user sets,
    glmops reserves the wider range, one port per local rank (TP x PP x DP on the node), and
    checks it against every other explicit side-channel range and HTTP/router port on the same
    host. Ports glmops picks itself are checked on the plan (:func:`check_plan`).
    """
    spec = registry.find(_backend(dep))
    var = spec.side_channel_env if spec is not None else ""
    if not var or dep.topology != "disagg":
        return
    claims: dict[str, list[tuple[str, str, list[int], str]]] = {}
    for pool in dep.pools:
        env = _env(dep, pool)
        base = env.get(var)
        hosts = _placed_hosts(dep, pool)
        if base is not None:
            try:
                start = int(base)
            except ValueError:
                _problem(out, "PORT", _src(dep, f"pools.{pool.role}.env.{var}", f"env.{var}"),
                         f"{var} {base!r} is not a port; accepted: 1..65535")
                continue
            per_node = pool.world_size
            gpn = max((len(dep.hosts[h].gpus) for h in hosts), default=0) or per_node
            ranks = min(per_node, gpn)
            where = _src(dep, f"pools.{pool.role}.env.{var}", f"env.{var}")
            for h in hosts:
                claims.setdefault(h, []).append((pool.role, "nixl_side_channel", list(range(start, start + ranks)), where))
        if pool.port is not None:
            for h in hosts:
                claims.setdefault(h, []).append((pool.role, "http", [pool.port], _src(dep, f"pools.{pool.role}.port")))
    if dep.router.host:
        claims.setdefault(dep.router.host, []).append(("router", "http", [dep.router.port], _src(dep, "router.port")))
    for host, items in claims.items():
        for i, (role_a, what_a, ports_a, where_a) in enumerate(items):
            for role_b, what_b, ports_b, where_b in items[i + 1:]:
                if "nixl_side_channel" not in (what_a, what_b):
                    continue  # HTTP vs HTTP is the plan's to check
                both = sorted(set(ports_a) & set(ports_b))
                if both:
                    _problem(out, "F05_PORT_COLLISION", where_b if what_b == "nixl_side_channel" else where_a,
                             f"on host {host} {role_a} {what_a} {_span(ports_a)} overlaps {role_b} {what_b} {_span(ports_b)} "
                             f"(port {_span(both)}); accepted: disjoint ports per host, one NIXL side-channel port per rank",
                             f"e.g. {var} {max(ports_a + ports_b) + 1} for {role_b}, or place it on another host")


_ROLE_ORDER = {"agg": 0, "prefill": 1, "decode": 2}


def _placement(dep: Deployment) -> dict[str, set[str]]:
    """Role -> hosts its replicas land on, simulated the way glmops.plan places (pools in order
    agg, prefill, decode; each replica on the first candidate host with enough free allowed
    GPUs, else on whole hosts). Best effort: a pool that does not fit gets its candidate hosts."""
    free = {h: list(spec.gpus) for h, spec in dep.hosts.items()}
    cpu_taken: set[str] = set()
    out: dict[str, set[str]] = {}
    for pool in sorted(dep.pools, key=lambda p: _ROLE_ORDER.get(p.role, 9)):
        hosts = _pool_hosts(dep, pool)
        used: set[str] = set()
        world = max(pool.world_size, 1)
        gpu_less = not any(free.get(h) for h in hosts)
        first = 0  # hosts before this index have no room for a replica (free GPUs only shrink)
        for _replica in range(max(pool.replicas, 0)):
            def allowed(h: str) -> list[int]:
                return [g for g in free.get(h, []) if not pool.gpus or g in pool.gpus]

            if gpu_less:  # no GPUs (cpu lab): each replica takes a whole host, as glmops.plan does
                spare = next((h for h in hosts if h not in cpu_taken), None)
                if spare is not None:
                    cpu_taken.add(spare)
                    used.add(spare)
                continue
            while first < len(hosts) and len(allowed(hosts[first])) < world:
                first += 1
            host = hosts[first] if first < len(hosts) else None
            if host is not None:
                take = allowed(host)[:world]
                free[host] = [g for g in free[host] if g not in take]
                used.add(host)
                continue
            whole = [h for h in hosts if allowed(h)]
            per = len(allowed(whole[0])) if whole else 0
            if per and world % per == 0 and len(whole) >= world // per:
                for h in whole[: world // per]:
                    take = allowed(h)
                    free[h] = [g for g in free[h] if g not in take]
                    used.add(h)
            else:
                used.update(hosts)
        out[pool.role] = used or set(hosts)
    return out


def _placed_hosts(dep: Deployment, pool: PoolSpec) -> set[str]:
    """Hosts ``pool`` lands on (see :func:`_placement`)."""
    return _placement(dep).get(pool.role, set(_pool_hosts(dep, pool)))


# ----------------------------------------------------------------------------- check_plan


def _span(ports: list[int]) -> str:
    ports = sorted(ports)
    return f"{ports[0]}-{ports[-1]}" if len(ports) > 1 and ports[-1] - ports[0] == len(ports) - 1 else ",".join(map(str, ports))


def _service_ports(svc: Service) -> dict[str, list[int]]:
    ports = {k: list(v) for k, v in (svc.ports or {}).items()}
    if svc.port and not any(svc.port in v for v in ports.values()):
        ports.setdefault("http", []).insert(0, svc.port)
    return ports


def _service_path(dep: Deployment | None, svc: Service, purpose: str) -> str:
    if dep is None:
        return f"service {svc.name}"
    if svc.role in ("router", "orchestrator", "frontend"):
        return _src(dep, "router.port", "glmops_topologies.router.port", "router")
    role = svc.role
    keys = {
        "http": [f"pools.{role}.port"],
        "nixl_side_channel": [f"pools.{role}.env.VLLM_NIXL_SIDE_CHANNEL_PORT", "env.VLLM_NIXL_SIDE_CHANNEL_PORT"],
    }.get(purpose, [])
    return _src(dep, *keys, f"pools.{role}.env", f"pools.{role}", "pools")


def check_plan(plan: Plan, dep: Deployment | None = None) -> list[Problem]:
    """Problems visible on the planned services: every port a service binds (``Service.port``
    plus ``Service.ports``, per rank) used twice on one host (F05), a GPU used twice on one
    host, a GPU index outside the host's ``glmops_gpus``, an advertised localhost address on
    a multi-host plan, and the engine's own checks of the services as rendered
    (``EngineSpec.plan_rules``: TensorRT-LLM's configs)."""
    out: list[Problem] = []
    by_host: dict[str, list[Service]] = {}
    for svc in plan.services:
        by_host.setdefault(svc.host, []).append(svc)
    multi_host = len(by_host) > 1
    for host, services in by_host.items():
        owners: dict[int, tuple[Service, str]] = {}
        reported: set[tuple[str, str]] = set()
        for svc in services:
            for purpose, ports in _service_ports(svc).items():
                outside = [p for p in ports if not isinstance(p, int) or not 1024 <= p <= 65535]
                if outside:
                    _problem(out, "PORT", _service_path(dep, svc, purpose),
                             f"{svc.name} on host {host} would listen on {purpose} port(s) {outside}; "
                             "accepted: 1024..65535 (the services run as the unprivileged service user; "
                             "each replica or rank takes the next port)")
                for port in ports:
                    if port in owners:
                        other, other_purpose = owners[port]
                        pair = tuple(sorted((f"{other.name}/{other_purpose}", f"{svc.name}/{purpose}")))
                        if pair in reported:
                            continue
                        reported.add(pair)  # type: ignore[arg-type]
                        mine = _service_ports(svc)[purpose]
                        theirs = _service_ports(other)[other_purpose]
                        overlap = sorted(set(mine) & set(theirs)) or [port]
                        code = "F05_PORT_COLLISION"
                        _problem(out, code, _service_path(dep, svc, purpose),
                                 f"port {_span(overlap)} on host {host} is used by {other.name} ({other_purpose} {_span(theirs)}) "
                                 f"and {svc.name} ({purpose} {_span(mine)}); accepted: every port once per host",
                                 "move one base port so the per-rank ranges do not overlap, or place the pool on another host")
                    else:
                        owners[port] = (svc, purpose)
        gpu_owner: dict[int, Service] = {}
        for svc in services:
            for g in svc.gpus:
                if g in gpu_owner and gpu_owner[g] is not svc:
                    _problem(out, "GPU_OVERLAP", f"host {host}" if dep is None else _src(dep, f"pools.{svc.role}.gpus", f"pools.{svc.role}"),
                             f"GPU {g} on host {host} is used by {gpu_owner[g].name} and {svc.name}; accepted: each GPU once")
                gpu_owner.setdefault(g, svc)
            if dep is not None and host in dep.hosts and dep.hosts[host].gpus:
                bad = [g for g in svc.gpus if g not in dep.hosts[host].gpus]
                if bad:
                    _problem(out, "GPU_INDEX", _src(dep, f"hosts.{host}.gpus", f"hosts.{host}"),
                             f"{svc.name} uses GPUs {bad} not in host {host}'s glmops_gpus {dep.hosts[host].gpus}")
        if multi_host:
            for svc in services:
                for key, value in (svc.env or {}).items():
                    if (key.endswith("_HOST") or key.endswith("_HOST_IP") or key.endswith("_ADDR")) and str(value) in LOCALHOSTS[:3]:
                        _problem(out, "ADVERTISE_ADDRESS", f"service {svc.name}",
                                 f"{svc.name} on {host} advertises {key}={value!r} in a multi-host plan; accepted: "
                                 f"the host's own address ({svc.address})", "set glmops_address for the host")
                if dep is not None and "VLLM_NIXL_SIDE_CHANNEL_HOST" in (svc.env or {}) and host in dep.hosts:
                    want = dep.hosts[host].address
                    if svc.env["VLLM_NIXL_SIDE_CHANNEL_HOST"] != want:
                        _problem(out, "ADVERTISE_ADDRESS", f"service {svc.name}",
                                 f"{svc.name} advertises VLLM_NIXL_SIDE_CHANNEL_HOST={svc.env['VLLM_NIXL_SIDE_CHANNEL_HOST']!r} "
                                 f"on host {host}; accepted: {want!r}")
    _check_argv_secrets(plan, dep, out)
    _check_api_key(plan, dep, out)
    spec = registry.find(plan.engine)
    if spec is not None and spec.plan_rules is not None:
        out += spec.plan_rules(plan, dep)
    return _dedupe(out)


#: what an API key may hold: it lands in env files (systemd and ``docker --env-file`` syntax) and in
#: an HTTP header, so printable ASCII without whitespace, quotes, backslash or ``$``
_API_KEY = re.compile(r"^[!#%&(-\[\]-~]{8,4096}\Z")


def _check_api_key(plan: Plan, dep: Deployment | None, out: list[Problem]) -> None:
    """With ``glmops_api_key`` set, every service clients or front doors call takes it through its
    env file (catalog ``engines.<engine>.api_key.env``); a component with no such mechanism
    (argv only, or none) is API_KEY_UNSUPPORTED, naming it. The key's characters: API_KEY."""
    if dep is None or not dep.api_key:
        return
    where = dep.source("api_key")
    if not _API_KEY.match(dep.api_key):
        _problem(out, "API_KEY", where, f"glmops_api_key ({len(dep.api_key)} characters) is not usable in an env file "
                 "and a header; accepted: 8 to 4096 printable ASCII characters without whitespace, quotes, "
                 "backslash or $", "generate one, e.g. openssl rand -hex 32, and keep it in Ansible Vault")
    seen: list[str] = []
    for svc in plan.services:
        if svc.role == "store" or not (svc.health_url or svc.ready_url) or svc.engine in seen:
            continue
        seen.append(svc.engine)
        if not engine_base.api_key_env(svc.engine):
            says = engine_base.api_key_says(svc.engine)
            _problem(out, "API_KEY_UNSUPPORTED", where,
                     f"{svc.engine} ({svc.role}, {svc.name}) cannot take glmops_api_key from its 0600 env file"
                     + (f": {says}" if says else "") + "; accepted: engines and front doors that read the key from "
                     f"their environment: {', '.join(engine_base.api_key_engines())}",
                     "unset glmops_api_key for this deployment (and guard the endpoint elsewhere, e.g. a reverse proxy), "
                     "or use an engine that reads the key from its environment")
        elif plan.topology == "disagg" and engine_base.api_key_open_door(svc.engine):
            warning(out, "API_KEY_OPEN_FRONT_DOOR", where,
                    f"glmops_api_key is set and the workers require it, but {svc.name} ({svc.engine}) does not check "
                    f"the clients' key itself: {engine_base.api_key_open_door(svc.engine)}; the endpoint "
                    f"{svc.address}:{svc.port} serves clients without a key",
                    "guard the front door's port (firewall, reverse proxy), or use a topology whose front door "
                    "forwards the client's header (aggregated); validate --strict refuses this")


def _secret_in(word: str, secrets: Iterable[str]) -> str | None:
    """The secret ``word`` carries: a SECRET_VALUE shape, or a Vault plain text (whole word, or
    inside it when at least 4 characters long); None when it carries none."""
    found = SECRET_VALUE.search(word)
    if found:
        return found.group(0)
    for secret in secrets:
        if secret and (word == secret or (len(secret) >= 4 and secret in word)):
            return secret
    return None


def _secret_variable(dep: Deployment | None, secret: str) -> str | None:
    """The inventory path of the deployment value that holds ``secret`` (a field, or an entry of
    a mapping field), or None."""
    if dep is None:
        return None
    import dataclasses

    for f in dataclasses.fields(dep):
        if f.name in ("sources", "problems", "secret_values", "raw_variables"):
            continue
        value = getattr(dep, f.name)
        items = [("", value)] if isinstance(value, str) else \
            [(f".{k}", v) for k, v in value.items()] if isinstance(value, dict) else []
        for sub, item in items:
            if isinstance(item, str) and secret in item:
                return dep.sources.get(f"{f.name}{sub}") or dep.sources.get(f.name) or f"glmops_{f.name}"
    return None


def _check_argv_secrets(plan: Plan, dep: Deployment | None, out: list[Problem]) -> None:
    """Every service's whole command line (argv lands in unit files and /proc): a word that
    carries a secret (a Vault value, a token, a URL with a password) is SECRET_IN_ARGV, naming the
    service and the variable it came from, never the value."""
    secrets = sorted(dep.secret_values or (), key=len, reverse=True) if dep is not None else []
    reported: set[tuple[str, str]] = set()
    for svc in plan.services:
        for word in svc.argv or []:
            secret = _secret_in(str(word), secrets)
            if secret is None:
                continue
            variable = _secret_variable(dep, secret)
            key = (svc.name, variable or "")
            if key in reported:
                continue
            reported.add(key)
            _problem(out, "SECRET_IN_ARGV", variable or f"service {svc.name}",
                     f"{svc.name} would carry a secret (a Vault value, a token or a URL with a password"
                     f"{', from ' + variable if variable else ''}) on its command line (argv, unit file, "
                     "/proc); accepted: secrets only through the environment",
                     "use a plain value there; put secrets in glmops_env (a 0600 env file), e.g. from Ansible Vault")


def redacted(problems: Iterable[Problem], secrets: Iterable[str]) -> list[Problem]:
    """``problems`` with every Vault plain text in ``secrets`` (at least 4 characters, or the whole
    quoted value) replaced by ``<redacted>`` in path, message and hint."""
    values = sorted((s for s in secrets if s), key=len, reverse=True)
    if not values:
        return list(problems)
    out = []
    for p in problems:
        fields = []
        for text in (p.path, p.message, p.hint):
            for secret in values:
                if len(secret) >= 4:
                    text = text.replace(secret, "<redacted>")
                else:
                    text = text.replace(repr(secret), "<redacted>")
            fields.append(text)
        out.append(p if fields == [p.path, p.message, p.hint] else Problem(p.code, *fields, severity=p.severity))
    return out


# ----------------------------------------------------------------------------- validate


def validate(dep: Deployment) -> tuple[Plan | None, list[Problem]]:
    """Run :func:`check`, then ``glmops.plan.build`` and :func:`check_plan`.

    Returns ``(plan, problems)``; ``plan`` is None when it could not be built. A plan is only
    attempted when the catalog keys and the topology are known; its own ValidationError problems are added,
    except placement problems for a pool already reported by :func:`check`.
    No Vault plain text leaves it in a problem, whichever rule quoted it (:func:`redacted`, one place).
    """
    secrets = dep.secret_values or ()
    problems = check(dep)
    if any(p.code == "CATALOG_KEY" for p in problems) or dep.topology not in TOPOLOGIES:
        return None, redacted(problems, secrets)  # nothing to plan (an unknown topology is the loader's CHOICE)
    if any(_bad_sizes(pool) for pool in dep.pools) or \
            any(p.code == "PARALLELISM" for p in dep.problems or []):
        return None, redacted(problems, secrets)  # out-of-range sizes (the loader's or ours): placing them would not end
    plan = None
    try:
        plan = plan_mod.build(dep)
    except ValidationError as exc:
        # placement failures repeat what GPU/pool rules already said: keep the rules' words
        covered = any(p.code.startswith("GPU") or p.code in ("POOLS", "PARALLELISM") for p in problems) \
            or _strategy_said(dep, problems)
        for p in exc.problems:
            if p.code in ("PLACEMENT", "POOLS") and covered:
                continue
            problems.append(p)
    except Exception as exc:  # a planning bug must not hide the rule problems
        if not problems:
            problems.append(Problem("PLAN", dep.inventory_path,
                                    f"planning failed: {type(exc).__name__}: {exc}", "report this as a glmops bug"))
    if plan is not None:
        # the rendered-config checks repeat deployment-level findings: report each code once
        said = {p.code for p in problems}
        problems += [p for p in check_plan(plan, dep) if p.code not in said or p.code not in _PLAN_REPEATS]
        problems += monitoring.check(dep, plan)  # Prometheus' / the exporters' ports against the Plan's (F05)
    return plan, redacted(_dedupe(problems), secrets)


_PLAN_REPEATS = {"SECRET_IN_ARGV", "BLOCK_REUSE_SNAPSHOT", "CUDA_GRAPH_BATCH", "CONTEXT_WORKER_CONFIG", "GPU_OVERLAP", "GPU_INDEX",
                 "F05_PORT_COLLISION"}
