"""Combinations an engine version refuses or breaks on, from the catalog's per-engine table
(``engines.<engine>.compat``, each entry with its ``source``): issue 14 item 5.

Engine-neutral: every check reads the table of the engine that runs the model (Dynamo's worker
backend included) and the version that runs it. Entry kinds (``kind``):

* ``disagg_tp``: prefill TP above decode TP in a disaggregated topology over ``transport``, on one
  of ``models`` when the entry names them (F02; vLLM: hybrid MLA + linear-attention models, fixed
  upstream by vllm-project/vllm#49297);
* ``disagg_pp``: pipeline parallelism > 1 on a disaggregated pool of ``roles`` over ``transport``
  (vLLM's NixlConnector: vllm-project/vllm#40674, #45880);
* ``speculative_with_pp``: a speculative ``methods`` entry with pipeline parallelism > 1 on one of
  ``models`` (MTP + PP for the GLM-5.x family);
* ``disagg_arg``: an engine flag a disaggregated pool cannot take (``args``: flag -> value; SGLang
  ``frontend-decoding``: seed 001 "Video input is unavailable in the SGLang disaggregated recipe");
* ``disagg_inputs``: the input modalities a disaggregated topology takes (``inputs``); the
  deployment's are ``text``, ``image`` with ``glmops_multimodal``, ``video`` with ``glmops_video``;
* ``config_value``: the values an engine config key (``key``, dotted, in the pool's effective
  ``engine_config``) takes for ``models``/``hardware``/``variants`` (each optional), ``values``
  (TRT-LLM ``moe_config.backend`` for GLM-5.3-Flash FP8 on B200/GB200: seed 000);
* ``not_rendered`` (a warning, code ``RECIPE_NOT_RENDERED``): a part of a seed's recipe glmops does
  not render, with ``why``; matched on ``engines`` (the deployment's engine, e.g. ``dynamo`` over a
  vLLM backend), ``images`` (the seed image the container runtime runs), ``models``, ``hardware``,
  ``topology`` and ``transport`` (each optional).

``specifier`` (PEP 440, e.g. ``<=0.33.0``) limits an entry to the versions it was reported for.
Rule code ``ENGINE_COMBINATION``; the message names the values, the engine and version, the source.
"""
from __future__ import annotations

import re
from typing import Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from glmops.catalog import CatalogKeyError
from glmops.engines import base, registry
from glmops.engines.problems import canon, dig, pool_args, pool_config, problem, src, warning
from glmops.model import Deployment, PoolSpec, Problem

# The optional keys an entry may carry beside kind/specifier/says/accepted/source, per kind
# (tests/unit/test_engine_combinations.py checks the catalog against it).
KINDS: dict[str, set[str]] = {
    "disagg_tp": {"transport", "models"},
    "disagg_pp": {"transport", "roles"},
    "speculative_with_pp": {"methods", "models"},
    "disagg_arg": {"args"},
    "disagg_inputs": {"inputs"},
    "not_rendered": {"why", "engines", "images", "models", "hardware", "arch_family", "runtime", "topology",
                     "transport"},
    "config_value": {"key", "values", "models", "hardware", "variants"},
}


def backend_version(dep: Deployment, cat: Any, backend: str) -> str:
    """The version of ``backend`` that runs the model: the deployment's own engine version, or
    the version the engine pins for its worker backend (catalog ``backend_versions``)."""
    if backend == dep.engine:
        return str(dep.engine_version or (cat.engines.get(backend) or {}).get("version") or "")
    pinned = (cat.engines.get(dep.engine) or {}).get("backend_versions") or {}
    return str(pinned.get(backend) or (cat.engines.get(backend) or {}).get("version") or "")


def applies(entry: dict, version: str) -> bool:
    """Whether ``entry`` covers ``version`` (no ``specifier``: every version)."""
    spec = entry.get("specifier")
    if not spec:
        return True
    try:
        return Version(version) in SpecifierSet(str(spec), prereleases=True)
    except (InvalidVersion, InvalidSpecifier):
        return True  # an unparsable version is checked (ENGINE_VERSION reports it)


def _transport(dep: Deployment, pool: PoolSpec) -> str:
    spec = registry.find(registry.backend_name(dep))
    if spec is None or spec.transport is None:
        return ""
    return spec.transport(pool_args(dep, pool), pool_config(dep, pool))


def _label(backend_entry: dict, backend: str, version: str) -> str:
    return f"{backend_entry.get('name') or backend} {version}".strip()


def check(dep: Deployment, cat: Any, out: list[Problem]) -> None:
    """Every ``compat`` entry of the backend engine that holds for ``dep``. The recipe settings
    read on the way are not kept (``base.SETTINGS_CACHE`` is memoised per plan build only)."""
    try:
        _check(dep, cat, out)
    finally:
        base.SETTINGS_CACHE.clear()


def _check(dep: Deployment, cat: Any, out: list[Problem]) -> None:
    backend = registry.backend_name(dep)
    entry_of = cat.engines.get(backend) or {}
    version = backend_version(dep, cat, backend)
    label = _label(entry_of, backend, version)
    for entry in entry_of.get("compat") or []:
        if not applies(entry, version):
            continue
        check = _CHECKS.get(str(entry.get("kind")))
        if check is not None:
            check(dep, entry, label, out, cat)


def _disagg_tp(dep: Deployment, entry: dict, label: str, out: list[Problem], cat: Any) -> None:
    pre, dec = dep.pool("prefill"), dep.pool("decode")
    if dep.topology != "disagg" or not (pre and dec):
        return
    models = [str(m) for m in entry.get("models") or []]
    if models and dep.model not in models:
        return
    want = str(entry.get("transport") or "")
    if want and want not in (_transport(dep, pre), _transport(dep, dec)):
        return
    if int(pre.tp) > int(dec.tp):
        problem(out, "ENGINE_COMBINATION", src(dep, "pools.decode.tp", "pools.prefill.tp", "pools.decode", "pools"),
                f"prefill tp {pre.tp} with decode tp {dec.tp} over {want or 'the KV transfer'} on {label}"
                f"{' for ' + dep.model if models else ''}: "
                f"{entry.get('says')}; accepted: {entry.get('accepted')} ({entry.get('source')})",
                "give decode at least the prefill's tensor parallelism (the seeds run TP4/TP4 and TP8/TP8)")


def _disagg_pp(dep: Deployment, entry: dict, label: str, out: list[Problem], cat: Any) -> None:
    if dep.topology != "disagg":
        return
    roles = [str(r) for r in entry.get("roles") or ["prefill", "decode"]]
    want = str(entry.get("transport") or "")
    for pool in dep.pools:
        if pool.role not in roles or int(pool.pp or 1) <= 1:
            continue
        if want and _transport(dep, pool) != want:
            continue
        problem(out, "ENGINE_COMBINATION", src(dep, f"pools.{pool.role}.pp", f"pools.{pool.role}", "pools"),
                f"{pool.role} pp {pool.pp} over {want or 'the KV transfer'} on {label}: "
                f"{entry.get('says')}; accepted: {entry.get('accepted')} ({entry.get('source')})",
                "use tp (or tp over more nodes) instead of pp on the disaggregated pools")


def _speculative_with_pp(dep: Deployment, entry: dict, label: str, out: list[Problem], cat: Any) -> None:
    models = [str(m) for m in entry.get("models") or []]
    if models and dep.model not in models:
        return
    methods = {str(m).lower() for m in entry.get("methods") or []}
    for pool in dep.pools:
        if int(pool.pp or 1) <= 1:
            continue
        spec = base.settings_for(dep, pool).speculative or {}
        method = str(spec.get("method", "")).lower()
        if method not in methods:
            continue
        problem(out, "ENGINE_COMBINATION",
                src(dep, f"pools.{pool.role}.pp", f"pools.{pool.role}.speculative", "speculative", f"pools.{pool.role}"),
                f"pool {pool.role} pp {pool.pp} with speculative method {method!r} on {label} for {dep.model}: "
                f"{entry.get('says')}; accepted: {entry.get('accepted')} ({entry.get('source')})",
                "use tp/ep (or more nodes of tp) instead of pp, or set glmops_speculative: {method: none}")


def _disagg_arg(dep: Deployment, entry: dict, label: str, out: list[Problem], cat: Any) -> None:
    if dep.topology != "disagg":
        return
    refused = {canon(k): v for k, v in (entry.get("args") or {}).items()}
    for pool in dep.pools:
        if pool.role == "agg":
            continue
        args = base.merge_args(base.settings_for(dep, pool).recipe.args, dep.engine_args, pool.engine_args)
        for key, value in args.items():
            if canon(key) in refused and value == refused[canon(key)]:
                problem(out, "ENGINE_COMBINATION",
                        src(dep, f"pools.{pool.role}.engine_args.{key}", f"engine_args.{key}", f"pools.{pool.role}"),
                        f"engine flag {key!r} = {value!r} on the disaggregated {pool.role} pool of {label}: "
                        f"{entry.get('says')}; accepted: {entry.get('accepted')} ({entry.get('source')})",
                        f"remove {key!r} from the disaggregated pools")


def modalities(dep: Deployment) -> list[str]:
    """The input modalities the deployment serves: ``text``, ``image`` (``glmops_multimodal``),
    ``video`` (``glmops_video``)."""
    return ["text"] + (["image"] if dep.multimodal else []) + (["video"] if dep.video else [])


def _config_value(dep: Deployment, entry: dict, label: str, out: list[Problem], cat: Any) -> None:
    for key, have in (("models", dep.model), ("hardware", dep.hardware), ("variants", dep.variant)):
        want = entry.get(key)
        if want is not None and have not in [str(w) for w in want]:
            return
    dotted = str(entry.get("key") or "")
    values = [str(v) for v in entry.get("values") or []]
    for pool in dep.pools:
        found, value = dig(pool_config(dep, pool), dotted)
        if found and str(value) not in values:
            problem(out, "ENGINE_COMBINATION",
                    src(dep, f"pools.{pool.role}.engine_config.{dotted}", f"engine_config.{dotted}"),
                    f"{dotted} {value!r} for {dep.model} {dep.variant} on {dep.hardware} ({label}, pool "
                    f"{pool.role}): {entry.get('says')}; accepted: {', '.join(values)} ({entry.get('source')})",
                    f"set {dotted} to one of {', '.join(values)}, or leave it out (the recipe's)")


def _disagg_inputs(dep: Deployment, entry: dict, label: str, out: list[Problem], cat: Any) -> None:
    if dep.topology != "disagg":
        return
    accepted = [str(m) for m in entry.get("inputs") or []]
    for modality in modalities(dep):
        if modality not in accepted:
            key = "video" if modality == "video" else "multimodal"
            problem(out, "ENGINE_COMBINATION", src(dep, key, f"glmops_{key}"),
                    f"{modality} input (glmops_{key} true) on the disaggregated topology of {label}: "
                    f"{entry.get('says')}; accepted: {entry.get('accepted')} ({entry.get('source')})",
                    f"set glmops_{key}: false, or serve {modality} from the agg topology")


def _matches(dep: Deployment, entry: dict, backend: str, cat: Any) -> bool:
    """Whether a ``not_rendered`` entry's optional match keys all hold for ``dep``."""
    try:
        family = str(cat.hw(dep.hardware).get("arch_family") or "")
    except CatalogKeyError:  # an unknown hardware kind is the rules' own problem, not this check's
        family = ""
    checks: list[tuple[str, set[str]]] = [
        ("engines", {dep.engine}),
        ("images", {base.seed_image(dep, dep.engine), base.seed_image(dep, backend)} - {""}),
        ("models", {dep.model}), ("hardware", {dep.hardware}), ("arch_family", {family} - {""}),
        ("runtime", {str(dep.runtime)}), ("topology", {dep.topology}),
        ("transport", {_transport(dep, p) for p in dep.pools if p.role != "agg"} - {""}),
    ]
    for key, have in checks:
        want = entry.get(key)
        if want is None:
            continue
        want = {str(w) for w in (want if isinstance(want, list) else [want])}
        if not want & have:
            return False
    return True


def _not_rendered(dep: Deployment, entry: dict, label: str, out: list[Problem], cat: Any) -> None:
    backend = registry.backend_name(dep)
    if not _matches(dep, entry, backend, cat):
        return
    facts = cat.engines.get(backend) or {}

    def text(key: str) -> str:
        """The entry's ``key`` with each ``{name}`` of a scalar of the engine's catalog entry filled in
        (``{flashinfer_min}``: the fact stays once, in the catalog)."""
        def fill(m: re.Match) -> str:
            value = facts.get(m.group(1))
            return str(value) if isinstance(value, str | int | float) else m.group(0)
        return re.sub(r"\{(\w+)\}", fill, str(entry.get(key)))

    warning(out, "RECIPE_NOT_RENDERED", src(dep, "image", "runtime", "hardware", "model"),
            f"the seed's {text('says')} is not in this plan ({label}): {text('why')} ({text('source')})",
            f"{text('accepted')} (glmops validate --strict refuses it)")


#: entry kind -> its check (the kinds of :data:`KINDS`)
_CHECKS = {"disagg_tp": _disagg_tp, "disagg_pp": _disagg_pp, "speculative_with_pp": _speculative_with_pp,
           "disagg_arg": _disagg_arg, "disagg_inputs": _disagg_inputs, "not_rendered": _not_rendered,
           "config_value": _config_value}
