"""The catalog: every fact from the seeds, once, each with its ``source``.

``load()`` reads ``models.yaml``, ``hardware.yaml``, ``engines.yaml`` and ``recipes.yaml``
beside this file (once per process) and returns a :class:`Catalog` whose accessors hand out
plain dicts. Unknown keys raise :class:`CatalogKeyError` naming the key and every accepted one.
"""
from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import yaml

CATALOG_DIR = Path(__file__).resolve().parent
FILES = ("models", "hardware", "engines", "recipes", "monitoring", "prechecks")


class CatalogKeyError(LookupError):
    """An unknown catalog key. ``kind`` is what was looked up (model, variant, hardware,
    engine), ``key`` the value asked for, ``accepted`` the keys the catalog has."""

    def __init__(self, kind: str, key: Any, accepted: list[str]):
        self.kind, self.key, self.accepted = kind, key, sorted(accepted)
        super().__init__(f"unknown {kind} {key!r}; accepted: {', '.join(self.accepted)}")

    def __str__(self) -> str:  # LookupError would repr() the message
        return self.args[0]


def _as_list(value: Any) -> list:
    if value is None:
        return []
    return list(value) if isinstance(value, (list, tuple)) else [value]


class Catalog:
    """Plain-dict views over the catalog YAML files.

    ``models``/``hardware``/``engines``: key -> entry dict. ``layouts``: default pools per
    engine x hardware x topology (``recipes.yaml:layouts``); ``recipes``: the engine-flag recipes
    (``recipes.yaml:engine_recipes``, owned by the plan). ``policy``: glmops policies (memory headroom).
    """

    def __init__(self, data: dict[str, dict[str, Any]]):
        self.data = data
        self.models: dict[str, dict] = data["models"]["models"]
        self.hardware: dict[str, dict] = data["hardware"]["hardware"]
        self.policy: dict[str, Any] = data["hardware"].get("policy", {})
        self.engines: dict[str, dict] = data["engines"]["engines"]
        self.layouts: list[dict] = data["recipes"].get("layouts") or []
        self.recipes: list[dict] = data["recipes"].get("engine_recipes") or []
        #: seed 004's parallelism strategies (``recipes.yaml:strategies``): name -> entry
        self.strategies: dict[str, dict] = data["recipes"].get("strategies") or {}
        #: host state the prechecks require (``prechecks.yaml``: gpu_state, host_memory, writable)
        self.prechecks: dict[str, Any] = data.get("prechecks") or {}

    def model(self, name: str) -> dict:
        """Model entry for ``name`` (e.g. ``glm-5.3-flash``). Raises CatalogKeyError."""
        try:
            return self.models[name]
        except (KeyError, TypeError):
            raise CatalogKeyError("model", name, list(self.models)) from None

    def variant(self, model: str, variant: str) -> dict:
        """Checkpoint variant entry (repo, revision, weight_gib, ...) of ``model``."""
        variants = self.model(model)["variants"]
        try:
            return variants[variant]
        except (KeyError, TypeError):
            raise CatalogKeyError(f"variant of {model}", variant, list(variants)) from None

    def weight_gib(self, repo: str, variant: dict | None = None) -> float | None:
        """Size in GiB (2^30 bytes) of the checkpoint ``repo`` per ``models.yaml``: ``variant``'s
        ``weight_gib`` when ``repo`` is that variant's (or it names no repo: the user's repo is
        its checkpoint, e.g. glm-5.3 w4a8), else that of the first variant of any model whose
        ``repo`` is ``repo``; None when the catalog does not know ``repo`` (e.g. the lab's
        ``glmops-lab/tiny-llama``)."""
        entries = [variant] if variant and (not variant.get("repo") or variant.get("repo") == repo) else []
        entries += [v for m in self.models.values() for v in (m.get("variants") or {}).values()
                    if isinstance(v, dict) and repo and v.get("repo") == repo]
        sizes = [float(e["weight_gib"]) for e in entries if e.get("weight_gib") is not None]
        return sizes[0] if sizes else None

    def hw(self, name: str) -> dict:
        """Hardware entry (arch, gpu_memory_gib, gpus_per_node, ...) for ``name``."""
        try:
            return self.hardware[name]
        except (KeyError, TypeError):
            raise CatalogKeyError("hardware", name, list(self.hardware)) from None

    def engine(self, name: str) -> dict:
        """Engine entry (version, min_version, images, ports, ...) for ``name``."""
        try:
            return self.engines[name]
        except (KeyError, TypeError):
            raise CatalogKeyError("engine", name, list(self.engines)) from None

    def strategy(self, name: str) -> dict:
        """Seed 004's strategy entry ``name`` (topology, multi_node, pools, source). Raises CatalogKeyError."""
        try:
            return self.strategies[name]
        except (KeyError, TypeError):
            raise CatalogKeyError("strategy", name, list(self.strategies)) from None

    def layout(self, engine: str, hardware: str, topology: str, model: str | None = None,
               backend: str | None = None) -> dict | None:
        """First ``layouts`` entry matching engine x hardware x topology (x model when the
        entry names one, x ``backend`` when it names backends: the engine that runs the model,
        Dynamo's worker backend), or None. An engine with no entry of its own (Dynamo on hardware
        only its backend has a recipe for) takes its backend's first match."""
        found = self._layout(engine, hardware, topology, model, backend or engine)
        if found is None and backend and backend != engine:
            found = self._layout(backend, hardware, topology, model, backend)
        return found

    def _layout(self, engine: str, hardware: str, topology: str, model: str | None, backend: str) -> dict | None:
        for entry in self.layouts:
            if engine not in _as_list(entry.get("engine")):
                continue
            backends = _as_list(entry.get("backend"))
            if backends and backend not in backends:
                continue
            if hardware not in _as_list(entry.get("hardware")):
                continue
            if entry.get("topology") != topology:
                continue
            models = _as_list(entry.get("model"))
            if models and model not in models:
                continue
            return entry
        return None


@functools.lru_cache(maxsize=None)
def _load_cached(directory: str) -> Catalog:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    data = {}
    for name in FILES:
        with open(Path(directory) / f"{name}.yaml", encoding="utf-8") as fh:
            data[name] = yaml.load(fh, Loader=loader) or {}
    return Catalog(data)


def load(directory: str | Path | None = None) -> Catalog:
    """Return the catalog (cached per directory). ``directory`` defaults to this package."""
    return _load_cached(str(directory or CATALOG_DIR))
