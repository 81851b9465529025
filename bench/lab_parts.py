"""Cold and warm costs of the lab's real parts on the controller, for CI's time budget.

Prints, per wheel set: cold build (empty temporary cache root: everything resolved and
downloaded again; pip keeps no HTTP cache here), warm build (cached), size and wheel count;
the lab model (cold/warm); with ``--install``, a no-index venv install of each set from its
wheelhouse (what roles/engine_runtime does on a host) with its size on disk.

    .venv/bin/python bench/lab_parts.py [--set vllm,router,dynamo,aiperf] [--install]
"""
from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

from glmops.lab import tinymodel, wheelhouse


def du_mib(path: Path) -> float:
    return wheelhouse.dir_bytes(path) / 2**20


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--set", default="vllm,router,dynamo,aiperf")
    ap.add_argument("--install", action="store_true", help="also time a local no-index venv install per set")
    args = ap.parse_args()
    names = wheelhouse.parse_sets(args.set)
    tmp = Path(tempfile.mkdtemp(prefix="glmops-bench-"))
    try:
        print(f"{'set':8} {'cold s':>7} {'warm s':>7} {'MiB':>6} {'wheels':>6} {'install s':>9} {'venv MiB':>8}")
        for name in names:
            t0 = time.monotonic()
            res = wheelhouse.build(name, root=tmp / "wh", force=True)
            cold = time.monotonic() - t0
            t0 = time.monotonic()
            warm_res = wheelhouse.build(name, root=tmp / "wh")
            warm = time.monotonic() - t0
            assert warm_res.cached
            inst, venv_mib = "-", "-"
            if args.install:
                t0 = time.monotonic()
                venv = wheelhouse.ensure_local_venv(name, root=tmp / "wh", venvs=tmp / "venvs")
                inst = f"{time.monotonic() - t0:.1f}"
                venv_mib = f"{du_mib(venv):.0f}"
                shutil.rmtree(venv)
            print(f"{name:8} {cold:7.1f} {warm:7.2f} {res.bytes / 2**20:6.0f} {res.wheels:6d} {inst:>9} {venv_mib:>8}",
                  flush=True)
            shutil.rmtree(res.path)
        t0 = time.monotonic()
        m = tinymodel.ensure_tiny_model(tmp / "models")
        cold = time.monotonic() - t0
        t0 = time.monotonic()
        tinymodel.ensure_tiny_model(tmp / "models")
        warm = time.monotonic() - t0
        print(f"tiny model {m.repo_id}@{m.commit[:12]}: cold {cold:.2f} s, warm {warm:.3f} s, "
              f"{du_mib(m.path):.1f} MiB with .git")
        load = Path("/proc/loadavg").read_text().split()[:3]
        print(f"load average during the run: {' '.join(load)} (2 cores shared)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
