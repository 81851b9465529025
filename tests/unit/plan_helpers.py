"""Helpers for the plan/golden tests: build Deployments directly (no inventory) and
parse argv into flag -> value maps so seeds and plans compare flag for flag."""
from __future__ import annotations

import json
import shlex
from typing import Any

from glmops.engines.base import CATALOG
from glmops.model import CheckpointSpec, Deployment, HostSpec, PoolSpec, RouterSpec

REV = "0123456789abcdef0123456789abcdef01234567"


def hosts(n: int, gpus: int = 8, prefix: str = "gpu", base: str = "10.0.0.", start: int = 11,
          rdma: list[str] | None = None, hardware: str = "") -> dict[str, HostSpec]:
    """``n`` hosts ``gpu-1..`` at ``10.0.0.11..`` with ``gpus`` GPUs each."""
    out = {}
    for i in range(n):
        name = f"{prefix}-{i + 1}"
        out[name] = HostSpec(name=name, address=f"{base}{start + i}", gpus=list(range(gpus)),
                             rdma_devices=list(rdma or []), hardware=hardware, groups=["glmops_workers"])
    return out


def dep(*, engine: str, hardware: str, topology: str = "agg", model: str = "glm-5.3-flash",
        variant: str = "fp8", repo: str = "zai-org/GLM-5.3-Flash", pools: list[PoolSpec],
        n_hosts: int = 1, gpus: int = 8, served: str | None = None, router: RouterSpec | None = None,
        runtime: str = "venv", size_gib: float = 306, rdma: list[str] | None = None,
        **kw: Any) -> Deployment:
    """A Deployment as glmops.inventory would build it (checkpoint under /models)."""
    local = f"/models/{repo}/{REV}"
    extra = kw.pop("extra", {})
    d = Deployment(
        name=kw.pop("name", "t"), model=model, variant=variant, engine=engine, topology=topology,
        hardware=hardware, runtime=runtime,
        hosts=kw.pop("hosts", None) or hosts(n_hosts, gpus, rdma=rdma),
        pools=pools,
        checkpoint=CheckpointSpec(repo=repo, revision=REV, model_dir="/models", local_dir=local, size_gib=size_gib),
        router=router or RouterSpec(),
        served_model_name=served or repo,
        engine_version=kw.pop("engine_version", None) or str(CATALOG.engine(engine).get("version")),
        **kw,
    )
    if extra:
        d.extra = extra  # the read's findings under their old keys (Deployment.extra's setter)
    return d


def parse(argv: list[str] | str, positional: int = 0) -> dict[str, Any]:
    """argv -> {flag: value}. Bare flags map to True; JSON object values are parsed;
    ``--a.b v`` dotted flags merge into ``{'a': {'b': v}}`` (vLLM's two spellings of one
    config); a repeated flag gives a list; ``_pos`` holds the first ``positional`` words.
    Numbers stay strings, except inside JSON."""
    words = shlex.split(argv) if isinstance(argv, str) else list(argv)
    out: dict[str, Any] = {"_pos": words[:positional]}
    i = positional
    while i < len(words):
        w = words[i]
        assert w.startswith("-"), f"unexpected word {w!r} in {words}"
        vals = []
        j = i + 1
        while j < len(words) and not (words[j].startswith("-") and not _is_number(words[j])):
            vals.append(words[j])
            j += 1
        key = w.lstrip("-")
        if not vals:
            value: Any = True
        elif len(vals) == 1:
            value = vals[0]
            if value.startswith("{"):
                value = json.loads(value)
        else:
            value = vals
        if "." in key:
            top, sub = key.split(".", 1)
            out.setdefault(top, {})[sub] = _coerce(value)
        elif key in out:
            prev = out[key]
            out[key] = (prev if isinstance(prev, list) and key in out.get("_multi", ()) else [prev]) + [value]
            out.setdefault("_multi", set()).add(key)
        else:
            out[key] = value
        i = j
    out.pop("_multi", None)
    return out


def _is_number(w: str) -> bool:
    try:
        float(w)
        return True
    except ValueError:
        return False


def _coerce(v: Any) -> Any:
    if isinstance(v, str):
        try:
            return json.loads(v)
        except ValueError:
            return v
    return v


def seed_words(text: str) -> list[str]:
    """A seed's shell command (with ``\\`` line continuations and leading ``VAR=value``
    assignments) -> (env, argv words)."""
    return shlex.split(text.replace("\\\n", " "))


def seed_cmd(text: str) -> tuple[dict[str, str], list[str]]:
    words = seed_words(text)
    env = {}
    while words and "=" in words[0] and not words[0].startswith("-"):
        k, v = words.pop(0).split("=", 1)
        env[k] = v
    return env, words


def norm(value: Any) -> Any:
    """Compare values as the parsers would: numbers by value ("0.80" == 0.8), JSON by content."""
    if isinstance(value, dict):
        return {k: norm(v) for k, v in value.items()}
    if isinstance(value, list):
        return [norm(v) for v in value]
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    return value


def flags(argv: list[str], positional: int) -> dict[str, Any]:
    """parse() + norm(): the flag -> value map of an argv, positional words under ``_pos``."""
    return norm(parse(argv, positional))
