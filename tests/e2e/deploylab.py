"""Helpers for the deploy e2e tests: a lab of their own, an inventory for it, runs.

The tests boot their own lab (name ``e2edeploy``, subnet 10.77.60.0/24) so they never
touch the default lab ``glmops`` that ``inventories/lab`` addresses, and write a copy of
an inventory (``inventories/lab*``: group_vars as they are) whose hosts are that lab's.

Binds every deploy lab gets (``glmops lab up --bind``):
* the tiny model's work tree at ``/models/glmops-lab/tiny-llama/<commit>`` (the
  checkpoint path the Plan uses; the download role is a later issue);
* one shared rw directory at ``/var/lib/glmops/<dep>/kv-shared`` on every host: vLLM's
  ExampleConnector ``shared_storage_path`` for PD across two hosts (FINDINGS.md).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
GLMOPS = [sys.executable, "-m", "glmops.cli"]
LAB_ROOT = Path(os.environ.get("GLMOPS_LAB_ROOT", "/var/lib/glmops-lab"))
SECRET_API_KEY = "sk-glmops-e2e-SECRET-4242"
SECRET_HF_TOKEN = "hf_glmopsE2EsecretTOKEN9999"
#: ``pytestmark`` of a lab suite: mark ``lab``, skipped without root or systemd-nspawn
LAB_MARKS = [
    pytest.mark.lab,
    pytest.mark.skipif(os.geteuid() != 0, reason="the lab needs root"),
    pytest.mark.skipif(shutil.which("systemd-nspawn") is None, reason="systemd-nspawn missing"),
]


def lab_binds(lab: str, deployment: str) -> list[str]:
    """``--bind`` values for a deploy lab: the tiny model at its commit path, a shared KV dir."""
    from glmops.lab.tinymodel import TINY_LLAMA_COMMIT, ensure_tiny_model

    model = ensure_tiny_model().path
    shared = LAB_ROOT / f"{lab}-shared" / "kv"
    shared.mkdir(parents=True, exist_ok=True)
    shared.chmod(0o1777)
    return [f"{model}:/models/glmops-lab/tiny-llama/{TINY_LLAMA_COMMIT}",
            f"{shared}:/var/lib/glmops/{deployment}/kv-shared:rw"]


def lab_up(lab: str, hosts: int, subnet: str, binds: list[str], profile: str = "cpu") -> dict:
    """Boot (or reuse) lab ``lab``; returns its inventory.yml as a dict."""
    inv = LAB_ROOT / lab / "inventory.yml"
    if not inv.exists():
        cmd = GLMOPS + ["lab", "up", "--hosts", str(hosts), "--name", lab, "--subnet", subnet,
                        "--profile", profile]
        for b in binds:
            cmd += ["--bind", b]
        subprocess.run(cmd, check=True, cwd=REPO, timeout=600)
    return yaml.safe_load(inv.read_text())


def lab_for_module(lab: str, hosts: int, subnet: str, binds: list[str], profile: str = "cpu"):
    """Body of a module-scoped lab fixture (``yield from``): boot (or reuse) ``lab``, yield its
    inventory dict, then take it down unless it was up before or ``GLMOPS_KEEP_LAB`` is set."""
    existed = (LAB_ROOT / lab / "inventory.yml").exists()
    inv = lab_up(lab, hosts, subnet, binds, profile=profile)
    yield inv
    if not existed and not os.environ.get("GLMOPS_KEEP_LAB"):
        lab_down(lab)


def lab_down(lab: str) -> None:
    subprocess.run(GLMOPS + ["lab", "down", "--name", lab], cwd=REPO, timeout=300, check=False)


def make_inventory(lab_inv: dict, base: str, out: Path, workers: list[str], routers: list[str],
                   extra_vars: dict | None = None) -> Path:
    """Copy ``inventories/<base>`` to ``out`` with hosts.yml pointing at the lab's hosts.

    ``workers``/``routers`` are lab host names (lab-1 ...) for the glmops_workers and
    glmops_routers groups. ``extra_vars`` are merged into group_vars/all.yml.
    """
    src = REPO / "inventories" / base
    if out.exists():
        shutil.rmtree(out)
    shutil.copytree(src / "group_vars", out / "group_vars")
    lab = lab_inv["all"]["children"]["lab"]
    hosts = lab["hosts"]
    common = {k: v for k, v in lab.get("vars", {}).items() if k.startswith("ansible_")}
    doc = {"all": {"vars": common, "children": {
        "glmops_workers": {"hosts": {h: hosts[h] for h in workers}},
        **({"glmops_routers": {"hosts": {h: hosts[h] for h in routers}}} if routers else {}),
    }}}
    (out / "hosts.yml").write_text(yaml.safe_dump(doc, sort_keys=False))
    if extra_vars:
        gv = out / "group_vars" / "all.yml"
        data = yaml.safe_load(gv.read_text()) or {}
        data.update(extra_vars)
        gv.write_text(yaml.safe_dump(data, sort_keys=False))
    return out


def glmops(*args: str, env: dict | None = None, timeout: float = 1800) -> subprocess.CompletedProcess:
    """Run the glmops CLI; stdout+stderr captured as text."""
    full_env = {**os.environ, "COLUMNS": "200", **(env or {})}
    return subprocess.run(GLMOPS + list(args), cwd=REPO, capture_output=True, text=True,
                          timeout=timeout, env=full_env)


def ssh(lab_inv: dict, host: str, command: str, timeout: float = 60,
        input: str | None = None) -> subprocess.CompletedProcess:
    """Run ``command`` on a lab host as root over the lab's ssh config."""
    lab = lab_inv["all"]["children"]["lab"]
    name = lab["vars"]["glmops_lab_name"]
    cfg = LAB_ROOT / name / "ssh_config"
    return subprocess.run(["ssh", "-F", str(cfg), host, command], capture_output=True, text=True,
                          timeout=timeout, input=input)


def main_pid(lab_inv: dict, host: str, unit: str) -> int:
    out = ssh(lab_inv, host, f"systemctl show -p MainPID --value {unit}").stdout.strip()
    return int(out or 0)


def completion(url: str, model: str, prompt: str = "Hello, my name is", max_tokens: int = 8,
               timeout: float = 120, api_key: str | None = None) -> dict:
    """POST /v1/completions (``Authorization: Bearer api_key`` when given); returns the JSON answer
    (raises on non-200)."""
    body = json.dumps({"model": model, "prompt": prompt, "max_tokens": max_tokens}).encode()
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    req = urllib.request.Request(url.rstrip("/") + "/v1/completions", data=body, headers=headers)
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.loads(resp.read())


def completion_status(url: str, model: str, api_key: str | None = None) -> int:
    """The HTTP status of a one-token completion through ``url`` (401 without a required key)."""
    try:
        completion(url, model, max_tokens=1, timeout=60, api_key=api_key)
        return 200
    except urllib.error.HTTPError as exc:
        return exc.code


def wait_serving(url: str, model: str, timeout: float, api_key: str | None = None) -> float:
    """Seconds until a completion through ``url`` succeeds; raises TimeoutError."""
    start = time.monotonic()
    while True:
        try:
            if completion(url, model, max_tokens=1, timeout=10, api_key=api_key).get("choices"):
                return time.monotonic() - start
        except OSError:
            pass
        if time.monotonic() - start > timeout:
            raise TimeoutError(f"{url} did not serve within {timeout} s")
        time.sleep(0.5)
