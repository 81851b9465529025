#!/usr/bin/env python3
"""Checkpoint distribution benchmark: hub bytes and wall time of ``per_node`` vs ``fanout``
for 1, 2, 4 and 8 lab hosts (issues 6 and 19).

What runs: the real ``glmops download`` (playbooks/download.yml, roles/checkpoint, the real
huggingface-hub client in the hub venv on every lab host) against the hub double on the
lab's bridge gateway. The checkpoint is generated on the fly: ``--shards`` safetensors-named
files of ``--shard-mib`` MiB of pseudo-random (incompressible) bytes plus two JSON files, a
few hundred MB by default so transfer time is visible next to Ansible's own overhead.

The hub double throttles each connection to ``--hub-mibps`` MiB/s (huggingface-hub opens one
connection per file, up to 8 in parallel), standing in for the WAN link to the hub; the lab
hosts talk to each other over the lab bridge. On this machine all lab hosts share the same
2 CPU cores, so the peer copy (ssh + rsync + a sha256 pass on every target) competes for CPU
with everything else: read the fanout times as an upper bound.

fanout is the relay tree (issue 19): every host with children passes each file on as soon as
it holds it, from the start of the download; ``--relay-fanout`` sets the children per host
(1 chain, 2 binary tree, 0 star). Phases printed: hub (download start -> result collected),
relay (first relay start -> last copy verified) and tail (download result -> last copy
verified: what the peers add after the hub is done).

Targets: hub bytes = 1.0x the checkpoint for every N in fanout; fanout wall time at N=4 and
N=8 <= 1.3x a single-host download. Needs root + systemd-nspawn. Usage::

    python bench/fanout.py [--hosts 1,2,4,8] [--modes fanout] [--relay-fanout 2] [--shards 6]
                           [--shard-mib 48] [--hub-mibps 8] [--rounds 1] [--baseline DIR] [--keep-lab]

``--baseline DIR`` (e.g. ``git archive <commit> | tar -x -C DIR``) also runs every fanout row
with DIR's CLI, roles and playbooks, interleaved with this tree's rows on the same lab, so a
before/after comparison shares the machine's load; ``--rounds`` repeats everything and the
table shows medians.

Prints one table row per (N, mode) and the target ratios, and per row the CPU seconds the run
used: this process and its children (the CLI, Ansible, SSH clients, the hub double's thread) plus
the lab hosts (their cgroup), and that total over this machine's cores: the wall time no
schedule can beat here. When the wall time is close to it, the run is CPU-bound on this machine
(N hosts' Ansible modules, ssh, rsync and hashing on the same cores), not waiting on the design.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "e2e"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from deploy_scale import children_cpu_s, hosts_cpu_s  # noqa: E402
from checkpoint_lab import (CK_COMMIT, CK_REPO, MiB, download_json, lab_up, make_checkpoint,  # noqa: E402
                            start_hub, wipe, write_inventory)

from glmops.lab import core  # noqa: E402

NAME = "bench-ckpt"


def phases(run_dir: Path) -> dict[str, float]:
    """Seconds of the hub phase (download start -> result collected), of the relay phase
    (first relay start -> last copy verified) and of the tail (download result collected ->
    last copy verified), from the run's job events."""
    spans: dict[str, list[float]] = {}
    for f in (run_dir / "artifacts" / "run" / "job_events").glob("*.json"):
        ev = json.loads(f.read_text())
        data = ev.get("event_data") or {}
        if ev.get("event") != "runner_on_ok" or not data.get("start"):
            continue
        task = data.get("task", "")
        start = datetime.fromisoformat(data["start"]).timestamp()
        end = datetime.fromisoformat(data["end"]).timestamp()
        key = {"Start the download": "hub0", "Collect the download result": "hub1",
               "Start the relay to this host's children": "relay0",
               "Copy the checkpoint from the source": "relay0",  # a --baseline before the relay
               "Verify the copy against the hub's metadata": "relay1"}.get(task)
        if key:
            spans.setdefault(key, []).append(start if key.endswith("0") else end)
    out = {}
    if "hub0" in spans and "hub1" in spans:
        out["hub_s"] = max(spans["hub1"]) - min(spans["hub0"])
    if "relay0" in spans and "relay1" in spans:
        out["relay_s"] = max(spans["relay1"]) - min(spans["relay0"])
        if "hub1" in spans:
            out["tail_s"] = max(spans["relay1"]) - max(spans["hub1"])
    return out


CORES = os.cpu_count() or 1


def _cpu_s(lab: str) -> tuple[float, float]:
    """CPU seconds so far of (this process, the hub double being a thread of it, and its finished
    children: the CLI, Ansible, SSH clients; the lab's hosts, from their cgroup)."""
    import resource

    me = resource.getrusage(resource.RUSAGE_SELF)
    return me.ru_utime + me.ru_stime + children_cpu_s(), hosts_cpu_s(lab)


def median_rows(rows: list[dict]) -> list[dict]:
    """One row per (n, mode): the median of each number over the rounds, in first-seen order."""
    import statistics

    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["n"], r["mode"]), []).append(r)
    out = []
    for (n, mode), rs in groups.items():
        keys = {k for r in rs for k, v in r.items() if isinstance(v, float | int) and k != "n"}
        out.append({"n": n, "mode": mode, **{k: statistics.median(r.get(k, 0) for r in rs) for k in keys}})
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", default="1,2,4,8")
    ap.add_argument("--modes", default="per_node,fanout", help="modes for N > 1 (N=1 is always the single download)")
    ap.add_argument("--relay-fanout", type=int, default=None, help="checkpoint_relay_fanout (default: the role's)")
    ap.add_argument("--shards", type=int, default=6)
    ap.add_argument("--shard-mib", type=int, default=48)
    ap.add_argument("--hub-mibps", type=float, default=8.0, help="per-connection hub throttle, MiB/s")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--baseline", type=Path, default=None, help="another checkout to run fanout with, interleaved")
    ap.add_argument("--keep-lab", action="store_true")
    ns = ap.parse_args()
    counts = [int(x) for x in ns.hosts.split(",")]
    modes = [m for m in ns.modes.split(",") if m]
    extra = {} if ns.relay_fanout is None else {"checkpoint_relay_fanout": ns.relay_fanout}
    work = Path(tempfile.mkdtemp(prefix="glmops-bench-fanout-"))
    files = make_checkpoint(work / "repo", shards=ns.shards, shard_bytes=ns.shard_mib * MiB)
    total = sum(files.values())
    print(f"checkpoint: {len(files)} files, {total / MiB:.1f} MiB (generated pseudo-random shards); "
          f"hub throttle {ns.hub_mibps:g} MiB/s per connection", flush=True)
    lab = lab_up(NAME, max(counts))
    hub = start_hub(lab, work / "repo")
    names = [h.name for h in lab.hosts]
    rows = []
    # warm-up (not measured): install the hub venv on every host that downloads, so no run pays for it
    warm = names if "per_node" in modes else names[:1]
    r, _ = download_json(write_inventory(lab, work / "inv-warm.yml", warm, mode="per_node"), hub=hub,
                         runs_dir=work / "runs" / "warm")
    if r.returncode != 0:
        raise SystemExit(f"warm-up download failed:\n{r.stdout[-3000:]}\n{r.stderr[-2000:]}")
    runs_of = [(n, mode, None) for n in counts for mode in (["per_node"] if n == 1 else modes)]
    if ns.baseline:
        runs_of = [x for n, mode, _ in runs_of for x in
                   ([(n, mode, None), (n, mode, ns.baseline)] if mode == "fanout" else [(n, mode, None)])]
    try:
        for rnd in range(ns.rounds):
            for i, (n, mode, root) in enumerate(runs_of):
                label = mode + ("@base" if root else "")
                wipe(lab)
                hub.reset()
                hub.set_faults([{"kind": "slow", "bytes_per_s": int(ns.hub_mibps * MiB), "path": "*.safetensors"}])
                inv = write_inventory(lab, work / f"inv-{n}-{mode}.yml", names[:n], mode=mode, extra_vars=extra)
                runs = work / "runs" / f"{rnd}-{i}-{n}-{mode}"
                t0, cpu0 = time.monotonic(), _cpu_s(NAME)
                r, out = download_json(inv, hub=hub, runs_dir=runs, root=root)
                cpu1 = _cpu_s(NAME)
                wall, ctl_cpu, hosts_cpu = time.monotonic() - t0, cpu1[0] - cpu0[0], cpu1[1] - cpu0[1]
                cpu = ctl_cpu + hosts_cpu
                if r.returncode != 0:
                    print(r.stdout[-3000:], r.stderr[-3000:], file=sys.stderr)
                    raise SystemExit(f"download failed for N={n} {label}")
                hub_bytes = sum(hub.stats()["bytes_by_client"].values())
                ph = phases(next(runs.iterdir()))
                rows.append({"n": n, "mode": label, "wall_s": wall, "hub_bytes": hub_bytes,
                             "hub_x": hub_bytes / total, "cpu_s": cpu, "ctl_cpu_s": ctl_cpu, "hosts_cpu_s": hosts_cpu,
                             "floor_s": cpu / CORES, **ph})
                print(f"  N={n} {label:<13} wall {wall:6.1f} s  hub {hub_bytes / MiB:8.1f} MiB "
                      f"({hub_bytes / total:.2f}x)  hub phase {ph.get('hub_s', 0):5.1f} s  "
                      f"relay phase {ph.get('relay_s', 0):5.1f} s  tail {ph.get('tail_s', 0):5.1f} s  "
                      f"cpu {ctl_cpu:5.1f} + hosts {hosts_cpu:5.1f} = {cpu:6.1f} s "
                      f"(/{CORES} cores = {cpu / CORES:5.1f} s)  "
                      f"load {os.getloadavg()[0]:.1f}", flush=True)
    finally:
        hub.stop()
        if not ns.keep_lab:
            core.down(NAME, log=lambda *_: None)
    print()
    rows = median_rows(rows)
    print(f"{'N':>2} {'mode':<14} {'wall s':>7} {'hub MiB':>9} {'hub x':>6} {'hub phase s':>12} "
          f"{'relay phase s':>14} {'tail s':>7} {'ctl cpu s':>9} {'hosts cpu s':>11} {'cpu/cores s':>12}  "
          f"(medians of {ns.rounds} round(s))")
    for r in rows:
        print(f"{r['n']:>2} {r['mode']:<14} {r['wall_s']:7.1f} {r['hub_bytes'] / MiB:9.1f} {r['hub_x']:6.2f} "
              f"{r.get('hub_s', 0):12.1f} {r.get('relay_s', 0):14.1f} {r.get('tail_s', 0):7.1f} "
              f"{r['ctl_cpu_s']:9.1f} {r['hosts_cpu_s']:11.1f} {r['floor_s']:12.1f}")
    single = next((r for r in rows if r["n"] == 1), None)
    fan_ok = all(abs(r["hub_x"] - 1.0) < 1e-9 for r in rows if r["mode"].startswith("fanout") or r["n"] == 1)
    print(f"\nfanout hub bytes = 1.0x the checkpoint for every N: {'yes' if fan_ok else 'NO'}")
    for fan in (r for r in rows if r["mode"].startswith("fanout") and single):
        ratio = fan["wall_s"] / single["wall_s"]
        print(f"{fan['mode']} wall time at N={fan['n']} / single download: {fan['wall_s']:.1f} / "
              f"{single['wall_s']:.1f} s = {ratio:.2f}x (target <= 1.3x): {'met' if ratio <= 1.3 else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
