#!/usr/bin/env python3
"""How `glmops plan` scales: a generated 1,024-node disaggregated inventory, timed end to
end (the CLI as a subprocess) next to `ansible-inventory --list` on the same files, in one
run; plus `glmops --help` next to `python -c 'import click'`.

Targets (issue 2): plan / ansible-inventory <= 1.2; --help / import click <= 2.0.
Prints the median of --reps runs of each command and the ratios. Not a test.

    .venv/bin/python bench/plan_scale.py [--nodes 1024] [--reps 3] [--keep DIR]
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

VENV_BIN = Path(sys.executable).parent


def write_inventory(root: Path, nodes: int) -> Path:
    """hosts.yml with ``nodes`` 8x B200 hosts in glmops_workers (half prefill, half decode)
    and group_vars/all.yml: GLM-5.3-Flash on vLLM, disagg, TP8 per node, vllm-router."""
    inv = root / "inv"
    (inv / "group_vars").mkdir(parents=True, exist_ok=True)
    half = nodes // 2
    prefill = {f"node-{i:04d}": {"ansible_host": f"10.{i // 250}.{i % 250}.10"} for i in range(half)}
    decode = {f"node-{i:04d}": {"ansible_host": f"10.{i // 250}.{i % 250}.10"} for i in range(half, nodes)}
    hosts = {"all": {"vars": {"glmops_rdma_devices": ["mlx5_0", "mlx5_1"]}, "children": {"glmops_workers": {"children": {
        "glmops_prefill": {"hosts": prefill}, "glmops_decode": {"hosts": decode}}}}}}
    (inv / "hosts.yml").write_text(yaml.safe_dump(hosts, sort_keys=False))
    gv = {
        "glmops_deployment": "scale",
        "glmops_model": "glm-5.3-flash",
        "glmops_variant": "fp8",
        "glmops_engine": "vllm",
        "glmops_hardware": "b200",
        "glmops_runtime": "venv",
        "glmops_topology": "disagg",
        "glmops_served_model_name": "zai-org/GLM-5.3-Flash",
        "glmops_speculative": {"method": "mtp", "num_speculative_tokens": 5},
        "glmops_checkpoint": {"repo": "zai-org/GLM-5.3-Flash", "revision": "f" * 40, "model_dir": "/models"},
        "glmops_topologies": {"disagg": {
            "pools": {"prefill": {"tp": 8, "replicas": half, "hosts": ["glmops_prefill"], "port": 8001},
                      "decode": {"tp": 8, "replicas": nodes - half, "hosts": ["glmops_decode"], "port": 8001}},
            "router": {"port": 8000, "policy": "round_robin"}}},
    }
    (inv / "group_vars" / "all.yml").write_text(yaml.safe_dump(gv, sort_keys=False))
    return inv


def timed(cmd: list[str], reps: int, env: dict[str, str]) -> tuple[float, list[float]]:
    runs = []
    for _ in range(reps):
        t0 = time.perf_counter()
        res = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env, timeout=900)
        runs.append(time.perf_counter() - t0)
        if res.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} exited {res.returncode}:\n{res.stderr[-2000:]}")
    return statistics.median(runs), runs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=1024)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--keep", help="write the inventory here and keep it")
    args = ap.parse_args()
    root = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="glmops-plan-scale-"))
    env = dict(os.environ, ANSIBLE_INVENTORY_ENABLED="yaml")
    try:
        inv = write_inventory(root, args.nodes)
        glmops = str(VENV_BIN / "glmops")
        ansible_inventory = str(VENV_BIN / "ansible-inventory")
        # warm the page cache / pyc once, untimed
        subprocess.run([glmops, "--help"], stdout=subprocess.DEVNULL, env=env, check=True)
        plan_t, plan_runs = timed([glmops, "plan", "-i", str(inv)], args.reps, env)
        inv_t, inv_runs = timed([ansible_inventory, "-i", str(inv), "--list"], args.reps, env)
        help_t, help_runs = timed([glmops, "--help"], max(args.reps, 5), env)
        click_t, click_runs = timed([sys.executable, "-c", "import click"], max(args.reps, 5), env)
        ratio = plan_t / inv_t
        hratio = help_t / click_t
        print(f"inventory: {args.nodes} nodes, disagg (prefill {args.nodes // 2} x TP8, decode "
              f"{args.nodes - args.nodes // 2} x TP8) in {inv}")
        print(f"glmops plan -i INV            median {plan_t:7.3f} s  runs {', '.join(f'{x:.3f}' for x in plan_runs)}")
        print(f"ansible-inventory -i INV --list median {inv_t:7.3f} s  runs {', '.join(f'{x:.3f}' for x in inv_runs)}")
        print(f"ratio plan / ansible-inventory: {ratio:.2f}  (target <= 1.2: {'ok' if ratio <= 1.2 else 'OVER'})")
        print(f"glmops --help                 median {help_t:7.3f} s")
        print(f"python -c 'import click'      median {click_t:7.3f} s")
        print(f"ratio --help / import click:  {hratio:.2f}  (target <= 2.0: {'ok' if hratio <= 2.0 else 'OVER'})")
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
