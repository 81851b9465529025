#!/usr/bin/env python3
"""Lab boot benchmark: cold and warm ``glmops lab up --hosts 3`` wall time, idle memory per host.

    sudo .venv/bin/python bench/lab_boot.py [--hosts 3] [--repeat 3] [--skip-cold] [--settle 10]

- cold: ``lab up`` with an empty cache dir (``GLMOPS_CACHE_DIR`` pointed at a temporary directory,
  so the shared ``~/.cache/glmops`` is not touched): debootstrap + image tarball + boot.
- warm: ``lab up`` with the cached image (the normal case), ``--repeat`` times; min and median.
- idle memory: after ``--settle`` seconds, per host the PSS and RSS summed over every process in the
  host's cgroup (``/proc/PID/smaps_rollup``), i.e. nspawn + the guest's systemd, journald, sshd,
  networkd, dbus ...; the per-lab supervisor is reported on its own.
Targets (issue 3): warm <= 10 s, <= 40 MiB per idle host. Each ``lab up`` is a CLI subprocess, so the
figures include Python start-up, as a user sees them.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from glmops.lab import core, hosts as H

REPO = Path(__file__).resolve().parents[1]
GLMOPS = [sys.executable, "-m", "glmops.cli", "lab"]


def _up(name: str, n: int, env: dict | None = None) -> float:
    t = time.monotonic()
    r = subprocess.run([*GLMOPS, "up", "--name", name, "--hosts", str(n), "--subnet", "auto",
                        "--no-default-binds"], env=env, capture_output=True, text=True, cwd=REPO)
    dt = time.monotonic() - t
    if r.returncode != 0:
        sys.exit(f"lab up failed ({r.returncode}):\n{r.stderr}")
    return dt


def _down(name: str, env: dict | None = None) -> float:
    t = time.monotonic()
    subprocess.run([*GLMOPS, "down", "--name", name], env=env, check=True, capture_output=True, cwd=REPO)
    return time.monotonic() - t


def _mem(pids: set[int]) -> tuple[float, float]:
    """(PSS, RSS) in MiB summed over ``pids``."""
    pss = rss = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    pss += int(line.split()[1])
                elif line.startswith("Rss:"):
                    rss += int(line.split()[1])
        except OSError:
            continue
    return pss / 1024, rss / 1024


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hosts", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=3, help="warm runs")
    ap.add_argument("--skip-cold", action="store_true", help="do not rebuild the image in a temp cache")
    ap.add_argument("--settle", type=float, default=10.0, help="seconds idle before measuring memory")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("run as root (the lab needs it)")
    n = a.hosts
    print(f"lab_boot: {n} host(s), cpu profile, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}")

    if not a.skip_cold:
        with tempfile.TemporaryDirectory(prefix="glmops-bench-cache-") as tmp:
            env = {**os.environ, "GLMOPS_CACHE_DIR": tmp}
            cold = _up("bench-cold", n, env)
            _down("bench-cold", env)
            size = sum(p.stat().st_size for p in Path(tmp, "images").glob("*.tar.zst")) / 2**20
        print(f"cold  lab up --hosts {n}: {cold:6.1f} s  (debootstrap + {size:.0f} MiB image + boot)")
    else:
        print("cold  skipped (--skip-cold)")

    _up("bench-prime", 1)  # make sure the image is cached; not timed
    _down("bench-prime")
    warm, downs = [], []
    for i in range(a.repeat):
        warm.append(_up("bench-warm", n))
        if i < a.repeat - 1:
            downs.append(_down("bench-warm"))
    print(f"warm  lab up --hosts {n}: min {min(warm):.1f} s, median {statistics.median(warm):.1f} s "
          f"over {len(warm)} runs ({', '.join(f'{w:.1f}' for w in warm)})  target <= 10 s")

    time.sleep(a.settle)
    lab = core.LabState.load("bench-warm")
    rows = []
    for h in lab.hosts:
        pids = H.cgroup_pids(H.cgroup_dirs(lab.name, h.name))
        pss, rss = _mem(pids)
        rows.append((h.name, len(pids), pss, rss))
    sup_pss, sup_rss = _mem({lab.supervisor_pid})
    print(f"idle memory after {a.settle:.0f} s (PSS / RSS summed over each host's cgroup):")
    for name, np_, pss, rss in rows:
        print(f"  {name}: {np_:2d} processes  PSS {pss:5.1f} MiB  RSS {rss:5.1f} MiB")
    print(f"  mean per host: PSS {statistics.mean(r[2] for r in rows):.1f} MiB  "
          f"(target <= 40 MiB); supervisor (one per lab): PSS {sup_pss:.1f} MiB RSS {sup_rss:.1f} MiB")
    downs.append(_down("bench-warm"))
    print(f"down: median {statistics.median(downs):.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
