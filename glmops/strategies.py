"""Seed 004's parallelism strategies as pools (``glmops_strategy`` + ``glmops_nodes``).

The facts (which strategies exist, their topology, whether they span nodes, the pool shapes)
are the catalog's (``recipes.yaml:strategies``, each with its source); this module only turns
one into :class:`~glmops.model.PoolSpec` values for ``nodes`` nodes of ``gpus_per_node`` GPUs.
Pure: no I/O besides the packaged catalog.
"""
from __future__ import annotations

from typing import Any

from glmops import catalog as catalog_mod
from glmops.model import PoolSpec

#: the words a strategy's pool field may use instead of an int (``recipes.yaml:strategies`` schema)
_UNITS = {
    "gpus_per_node": lambda g, n: g,
    "all_gpus": lambda g, n: g * n,
    "nodes": lambda g, n: n,
    "nodes_half": lambda g, n: n // 2,
    "nodes_rest": lambda g, n: n - n // 2,
}


def names() -> tuple[str, ...]:
    """Every strategy name, in the catalog's (seed 004's) order."""
    return tuple(catalog_mod.load().strategies)


def entry(strategy: str) -> dict:
    """The catalog entry of ``strategy``; ValueError naming every accepted one."""
    cat = catalog_mod.load()
    if strategy not in cat.strategies:
        raise ValueError(f"strategy {strategy!r} unknown; accepted: {', '.join(cat.strategies)}")
    return cat.strategies[strategy]


def min_nodes(strategy: str) -> int:
    """Nodes the strategy needs at least: 2 for a multi-node one, else 1."""
    return 2 if entry(strategy).get("multi_node") else 1


def pools(strategy: str, nodes: int, gpus_per_node: int) -> list[PoolSpec]:
    """The pools of ``strategy`` on ``nodes`` nodes of ``gpus_per_node`` GPUs, in the catalog's
    role order. Raises ValueError for an unknown strategy, or ``nodes`` outside what it takes
    (a multi-node strategy needs >= 2, a single-node one exactly 1)."""
    spec = entry(strategy)
    low = min_nodes(strategy)
    if nodes < low or (not spec.get("multi_node") and nodes != 1):
        want = f">= {low}" if spec.get("multi_node") else "1"
        raise ValueError(f"strategy {strategy} needs nodes {want}, got {nodes}")
    out = []
    for role, fields in (spec.get("pools") or {}).items():
        values: dict[str, Any] = {}
        for key, value in (fields or {}).items():
            values[key] = _UNITS[value](gpus_per_node, nodes) if isinstance(value, str) else value
        out.append(PoolSpec(role=role, **values))
    return out
