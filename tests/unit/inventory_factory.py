"""Build small Ansible inventories in a temp dir for the inventory/rules/validate tests.

``write_inventory(root, group_vars, hosts=...)`` writes ``hosts.yml`` (hosts in group
``glmops_workers``, optional extra groups) and ``group_vars/all.yml``; ``host_vars`` and extra
``group_files`` go to ``host_vars/<host>.yml`` / ``group_vars/<group>.yml``. Addresses are
placeholders: nothing here is ever contacted.
"""
from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

REV = "0123456789abcdef0123456789abcdef01234567"


def write_inventory(
    root: Path,
    group_vars: dict[str, Any],
    hosts: dict[str, dict[str, Any]] | None = None,
    groups: dict[str, list[str]] | None = None,
    host_vars: dict[str, dict[str, Any]] | None = None,
    group_files: dict[str, dict[str, Any]] | None = None,
) -> Path:
    """Write an inventory under ``root`` and return ``root``."""
    root.mkdir(parents=True, exist_ok=True)
    hosts = hosts if hosts is not None else {"gpu-a": {"ansible_host": "10.0.0.11"}}
    children: dict[str, Any] = {"glmops_workers": {"hosts": {h: dict(v) for h, v in hosts.items()}}}
    for group, members in (groups or {}).items():
        children[group] = {"hosts": {m: {} for m in members}}
    (root / "hosts.yml").write_text(yaml.safe_dump({"all": {"children": children}}, sort_keys=False))
    (root / "group_vars").mkdir(exist_ok=True)
    (root / "group_vars" / "all.yml").write_text(yaml.safe_dump(group_vars, sort_keys=False))
    for group, data in (group_files or {}).items():
        (root / "group_vars" / f"{group}.yml").write_text(yaml.safe_dump(data, sort_keys=False))
    if host_vars:
        (root / "host_vars").mkdir(exist_ok=True)
        for host, data in host_vars.items():
            (root / "host_vars" / f"{host}.yml").write_text(yaml.safe_dump(data, sort_keys=False))
    return root


def vllm_b200_disagg(**over: Any) -> dict[str, Any]:
    """Seed 002's single-node vLLM P/D split: prefill GPUs 0-3 :8001, decode GPUs 4-7 :8002."""
    gv: dict[str, Any] = {
        "glmops_model": "glm-5.3-flash",
        "glmops_variant": "fp8",
        "glmops_engine": "vllm",
        "glmops_hardware": "b200",
        "glmops_runtime": "venv",
        "glmops_topology": "disagg",
        "glmops_checkpoint": {"revision": REV},
        "glmops_topologies": {
            "disagg": {
                "pools": {
                    "prefill": {"tp": 4, "gpus": [0, 1, 2, 3], "port": 8001},
                    "decode": {"tp": 4, "gpus": [4, 5, 6, 7], "port": 8002},
                },
                "router": {"port": 8000},
            }
        },
    }
    gv.update(copy.deepcopy(over))
    return gv


def trtllm_b200(topology: str = "disagg", **over: Any) -> dict[str, Any]:
    """Seed 000 on one 8x B200 node: agg TP4/EP4, or context 0-3 + generation 4-7."""
    gv: dict[str, Any] = {
        "glmops_model": "glm-5.3-flash",
        "glmops_engine": "trtllm",
        "glmops_hardware": "b200",
        "glmops_runtime": "venv",
        "glmops_topology": topology,
        "glmops_max_batch_size": 64,
        "glmops_checkpoint": {"revision": REV},
        "glmops_topologies": {
            "agg": {"pools": {"agg": {"tp": 4, "ep": 4, "port": 8000}}},
            "disagg": {
                "pools": {
                    "context": {"tp": 4, "ep": 4, "gpus": [0, 1, 2, 3], "port": 8001},
                    "generation": {"tp": 4, "ep": 4, "gpus": [4, 5, 6, 7], "port": 8002},
                },
                "router": {"port": 8000},
            },
        },
    }
    gv.update(copy.deepcopy(over))
    return gv


def agg(model: str, engine: str, hardware: str, tp: int, **over: Any) -> dict[str, Any]:
    """One aggregated pool of ``tp`` GPUs."""
    gv: dict[str, Any] = {
        "glmops_model": model,
        "glmops_engine": engine,
        "glmops_hardware": hardware,
        "glmops_runtime": "venv",
        "glmops_topology": "agg",
        "glmops_topologies": {"agg": {"pools": {"agg": {"tp": tp}}}},
    }
    gv.update(copy.deepcopy(over))
    return gv


def without_venv_advice(problems: list) -> list:
    """``problems`` without the warning every GLM-5.3-Flash plan on vLLM from a venv gets on
    GPUs (catalog engines.vllm.compat glm53-flash-vllm-from-docker: seed 002 line 12 "use
    docker before the integration is included in the public repo"; tested in
    tests/unit/test_compat_paths.py). The factories above plan from a venv so argv stay free of
    the container wrapper; the tests that take them as a problem-free baseline drop it here."""
    return [p for p in problems if not (p.code == "RECIPE_NOT_RENDERED" and "use docker before the integration" in p.message)]
