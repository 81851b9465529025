"""What rules need to say a problem, for ``glmops.rules`` and the engine modules alike.

Engine modules report their own rules (``EngineSpec.rules`` and friends, see
:mod:`glmops.engines.registry`) with these helpers, so none of them imports ``glmops.rules``.
Pure functions over a :class:`~glmops.model.Deployment`; no I/O.
"""
from __future__ import annotations

from typing import Any

from glmops.model import WARNING, Deployment, PoolSpec, Problem

__all__ = ["Problem", "problem", "warning", "src", "few", "canon", "dig", "deep_merge", "pool_args", "pool_config",
           "pool_env", "argv_value", "as_int", "int_range"]


def problem(out: list[Problem], code: str, path: str, message: str, hint: str = "") -> None:
    """Append ``Problem(code, path, message, hint)`` to ``out``."""
    out.append(Problem(code, path, message, hint))


def warning(out: list[Problem], code: str, path: str, message: str, hint: str = "") -> None:
    """Append a warning ``Problem``: a deviation from a seed's recipe the engine accepts. The
    message names the value, the seed's value and its source; ``glmops validate`` prints it and
    exits 0, ``--strict`` refuses it."""
    out.append(Problem(code, path, message, hint, severity=WARNING))


def src(dep: Deployment, *keys: str) -> str:
    """Inventory path of the first key the inventory set, else the last (most general) key."""
    for key in keys:
        if key in dep.sources:
            return dep.sources[key]
    return dep.source(keys[-1])


def few(names: list, shown: int = 10) -> str:
    """``names`` as a list text, the first ``shown`` of a long list and how many more."""
    names = list(names)
    return str(names) if len(names) <= shown else f"{names[:shown]} and {len(names) - shown} more"


def canon(key: str) -> str:
    """Flag names compare without leading dashes and with ``_`` == ``-`` (vLLM's own rule)."""
    return str(key).lstrip("-").replace("_", "-").lower()


def dig(data: Any, dotted: str) -> tuple[bool, Any]:
    """(found, value) of a dotted path in nested dicts; keys compare canonically."""
    cur = data
    for part in dotted.split("."):
        if not isinstance(cur, dict):
            return False, None
        match = next((k for k in cur if canon(k) == canon(part)), None)
        if match is None:
            return False, None
        cur = cur[match]
    return True, cur


def deep_merge(base: dict, over: dict) -> dict:
    """``base`` updated by ``over``, nested dicts merged (no copies of leaves)."""
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def pool_args(dep: Deployment, pool: PoolSpec) -> dict[str, Any]:
    """Effective engine_args of a pool (deployment-wide, then pool), canonical keys."""
    out: dict[str, Any] = {}
    for layer in (dep.engine_args, pool.engine_args):
        for key, value in (layer or {}).items():
            out[canon(key)] = value
    return out


def pool_config(dep: Deployment, pool: PoolSpec) -> dict[str, Any]:
    """Effective engine_config of a pool (deployment-wide, then pool, merged)."""
    return deep_merge(dep.engine_config or {}, pool.engine_config or {})


def pool_env(dep: Deployment, pool: PoolSpec) -> dict[str, str]:
    """Effective env of a pool (deployment-wide, then pool)."""
    return {**(dep.env or {}), **(pool.env or {})}


def argv_value(argv: list[str], flag: str) -> str | None:
    """The value after ``flag`` (``--flag v`` or ``--flag=v``) in ``argv``, else None."""
    for i, word in enumerate(argv):
        if word == flag and i + 1 < len(argv):
            return argv[i + 1]
        if word.startswith(flag + "="):
            return word.split("=", 1)[1]
    return None


def as_int(value: Any) -> int | None:
    """``int(value)``, or None when it is not an integer (a bad value another rule reports)."""
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def int_range(spec: Any, default: tuple[int, int]) -> tuple[int, int]:
    """(min, max) of a catalog range ``{min: a, max: b}``; ``default`` for missing bounds."""
    spec = spec if isinstance(spec, dict) else {}
    return int(spec.get("min", default[0])), int(spec.get("max", default[1]))
