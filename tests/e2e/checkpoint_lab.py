"""Helpers for the checkpoint lab tests and bench/fanout.py: a lab, the hub double on the
lab's bridge gateway (never 0.0.0.0), a generated checkpoint repo, a deployment inventory
over the lab hosts, and ``glmops download`` run as a subprocess (the real CLI, through
glmops.runner, with the real huggingface-hub client on the hosts)."""
from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT / "tests" / "doubles"))
from hub_double import HubDouble  # noqa: E402

from glmops.lab import core, spec  # noqa: E402

CK_REPO = "glmops-test/ckpt"
CK_COMMIT = "89abcdef0123456789abcdef0123456789abcdef"
TOKEN = "hf_glmopsLabSecret_7f3c9a1e5d"
MiB = 1024 * 1024


def make_checkpoint(root: Path, shards: int = 3, shard_bytes: int = 12 * MiB, seed: int = 1) -> dict[str, int]:
    """Write a checkpoint-like repo under ``root``: config/tokenizer JSON (git files) and
    ``shards`` safetensors-named LFS files of pseudo-random bytes (generated on the fly,
    incompressible, so SSH/rsync and the hub move real bytes). Returns path -> size."""
    root.mkdir(parents=True, exist_ok=True)
    rnd = random.Random(seed)
    (root / "config.json").write_text(json.dumps({"model_type": "llama", "num_hidden_layers": 2}))
    (root / "tokenizer.json").write_text(json.dumps({"version": "1.0", "vocab": list(range(200))}))
    block = rnd.randbytes(MiB)
    for i in range(shards):
        with open(root / f"model-{i + 1:05d}-of-{shards:05d}.safetensors", "wb") as fh:
            left = shard_bytes
            salt = i.to_bytes(4, "little")
            n = 0
            while left > 0:
                # a fresh 1 MiB block per step: the block rotated by a per-step offset + salt
                k = (n * 7919 + i * 104729) % MiB
                chunk = (salt + block[k:] + block[:k])[:min(MiB, left)]
                fh.write(chunk)
                left -= len(chunk)
                n += 1
    return {str(p.relative_to(root)): p.stat().st_size for p in root.rglob("*") if p.is_file()}


def lab_up(name: str, hosts: int, extra_binds: list[spec.Bind] | None = None,
           wheel_sets: tuple[str, ...] = ("hub",)) -> spec.LabState:
    """A fresh lab (an old one of that name is taken down first), after building (or reusing)
    the wheel sets its deploys install from: ``~/.cache/glmops/wheelhouse`` is bound into the
    hosts only when it exists, and on a fresh machine no other test may have built them yet
    (concurrent builds of one set wait for each other)."""
    from glmops.lab import wheelhouse

    for ws in wheel_sets:
        wheelhouse.build(ws, log=lambda *_: None)
    core.down(name, log=lambda *_: None)
    return core.up(name=name, hosts=hosts, subnet="auto", binds=spec.default_binds() + list(extra_binds or []),
                   log=lambda *_: None)


def start_hub(lab: spec.LabState, repo_dir: Path, token: str | None = TOKEN) -> HubDouble:
    """The hub double on the lab's bridge gateway, serving ``repo_dir`` at CK_COMMIT."""
    hub = HubDouble(host=lab.gateway, port=0, required_token=token)
    hub.add_repo(CK_REPO, str(repo_dir), commit=CK_COMMIT)
    return hub.start()


def write_inventory(lab: spec.LabState, path: Path, hosts: list[str], mode: str = "fanout",
                    revision: str = CK_COMMIT, model_dir: str = "/models", offline: bool = True,
                    speculative: dict | None = None, extra_vars: dict | None = None) -> Path:
    """A vLLM-CPU agg deployment with one replica per host in ``hosts`` (each needs the checkpoint);
    ``speculative`` sets ``glmops_speculative`` (a drafter: its own checkpoint too); ``extra_vars``
    go to ``all.vars`` (e.g. ``checkpoint_relay_fanout``)."""
    by_name = {h.name: h for h in lab.hosts}
    inv = {"all": {
        "vars": {
            "ansible_user": "root", "ansible_python_interpreter": "/usr/bin/python3",
            "ansible_ssh_private_key_file": str(lab.dir / "id_ed25519"),
            "ansible_ssh_common_args": f"-o UserKnownHostsFile={lab.dir / 'known_hosts'} "
                                       "-o StrictHostKeyChecking=yes -o IdentitiesOnly=yes",
            "glmops_deployment": "ck", "glmops_model": "glm-5.3-flash", "glmops_variant": "bf16",
            "glmops_engine": "vllm", "glmops_engine_version": "0.32.0", "glmops_hardware": "cpu",
            "glmops_runtime": "venv", "glmops_topology": "agg", "glmops_served_model_name": "tiny-llama",
            "glmops_checkpoint": {"repo": CK_REPO, "revision": revision, "model_dir": model_dir,
                                  "mode": mode, "offline": offline},
            **({"glmops_speculative": speculative} if speculative else {}),
            **(extra_vars or {}),
            "glmops_topologies": {"agg": {"pools": {"agg": {"replicas": len(hosts), "hosts": list(hosts),
                                                            "port": 8001}},
                                          "router": {"host": hosts[0], "port": 8000}}},
        },
        "children": {"glmops_workers": {"hosts": {h: {"ansible_host": by_name[h].address} for h in hosts}}},
    }}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(inv, sort_keys=False))
    return path


def glmops(*args: str, hub: HubDouble | None = None, token: str | None = TOKEN, runs_dir: Path | None = None,
           timeout: float = 900, root: Path | None = None) -> subprocess.CompletedProcess:
    """Run the glmops CLI with HF_ENDPOINT at the double and HF_TOKEN in its environment;
    ``root``: the CLI, roles and playbooks of another checkout (bench/fanout.py's baseline)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    if root:
        env["PYTHONPATH"] = str(root)
    if hub:
        env["HF_ENDPOINT"] = hub.url
    if token:
        env["HF_TOKEN"] = token
    if runs_dir:
        env["GLMOPS_RUNS_DIR"] = str(runs_dir)
    return subprocess.run([sys.executable, "-m", "glmops.cli", *args], capture_output=True, text=True,
                          env=env, timeout=timeout, cwd=str(root or REPO_ROOT))


def download_json(inv: Path, *extra: str, **kw) -> tuple[subprocess.CompletedProcess, dict]:
    r = glmops("download", "-i", str(inv), "--json", *extra, **kw)
    try:
        data = json.loads(r.stdout)
    except ValueError:
        data = {}
    return r, data


def ssh(lab: spec.LabState, host: str, command: str, timeout: float = 120) -> subprocess.CompletedProcess:
    h = next(x for x in lab.hosts if x.name == host)
    return subprocess.run(core.ssh_argv(lab, h, "sh", "-c", command), capture_output=True, text=True,
                          timeout=timeout)


def wipe(lab: spec.LabState, hosts: list[str] | None = None, model_dir: str = "/models") -> None:
    """Remove checkpoints, markers and the checkpoint state on the hosts."""
    for h in hosts or [x.name for x in lab.hosts]:
        ssh(lab, h, f"rm -rf {model_dir}/glmops-test {model_dir}/.glmops-locks {model_dir}/.glmops-state "
                    "/var/lib/glmops/checkpoints /var/lib/glmops/checkpoint")


def digests(lab: spec.LabState, host: str, local_dir: str) -> dict[str, str]:
    """path -> sha256 of every file under ``local_dir`` on ``host`` (outside .cache)."""
    r = ssh(lab, host, f"cd {local_dir} && find . -path ./.cache -prune -o -type f -print0 | "
                       "xargs -0 -r sha256sum")
    out = {}
    for line in r.stdout.splitlines():
        digest, path = line.split(None, 1)
        out[path.strip()[2:]] = digest
    return out


def wait(pred, timeout: float = 30, step: float = 0.2) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(step)
    return False
