#!/usr/bin/env python3
"""Engine image distribution benchmark (issue 19 item 4): upstream registry bytes and wall time of
the container image fan-out (roles/engine_runtime, ``engine_runtime_image_fanout``) on N = 1, 2,
4, 8 lab hosts, against one host's own fetch.

What runs: ``ansible-playbook`` with ``roles/engine_runtime`` in container mode on lab hosts
``lab-1`` .. ``lab-N`` (b200-sim, no Docker engine: the strict docker CLI double is their
``docker``). The upstream registry is Debian's docker-registry on the lab's bridge gateway serving
a generated image (``--layers`` gzip layers of ``--layer-mib`` MiB of incompressible bytes,
glmops/lab/toyimage.py) behind a proxy that sends at most ``--upstream-mibps`` MiB/s over all its
connections together (the site's WAN link to the registry); its own log gives the bytes it served. lab-1 is the fan-out host: it
pins the image, copies it by digest into its fan-out registry, and every host copies it from there
by digest, loads it and checks the image ID against the pin.

Each point starts from hosts without the image (the double's store emptied); a warm-up run on all
hosts (not measured) installs skopeo and docker-registry first. "One host's fetch" is what a host
does without a fan-out: ``skopeo copy`` from the upstream registry into a docker-archive, then
``docker load`` (timed over ssh on lab-1, no Ansible; measured again before every point, as the
machine's load changes, and the median taken). Per N the bench prints the play's wall time
and its data phase (from ansible-runner's task events: the start of the fan-out host's upstream copy
to the end of the last host's tag), which is what compares with one host's fetch; the rest of the
wall time is the role's fixed Ansible cost (package check, unit, pin, ~20 tasks).

Targets: registry bytes 1.0x one host's fetch for every N; fan-out wall time <= 1.3x one host's
fetch. All lab hosts share this machine's 2 cores: the N host copies (skopeo writes the layers
uncompressed, the double hashes them on load) compete for CPU that N machines would not share, so
read the data phase at large N as an upper bound. Needs root, systemd-nspawn, skopeo and docker-registry. Usage::

    python bench/image_fanout.py [--hosts 1,2,4,8] [--layers 4] [--layer-mib 64] [--upstream-mibps 32] [--rounds 1] [--keep-lab]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "e2e"))

import image_fanout_lab as F  # noqa: E402

from glmops.lab import core, spec  # noqa: E402
from glmops.lab.toyimage import MiB, ThrottledProxy, UpstreamRegistry, make_oci_layout  # noqa: E402

NAME = "bench-img"
FIRST, LAST = "Copy the image by digest from its registry into the fan-out registry", "Tag the verified image"
#: where the data phase goes: phase -> the role's tasks (by name prefix) it spans; a phase whose tasks
#: the role does not run is not printed. Per phase: its span (first start to last end over the hosts)
#: and the mean per-host time in it.
PHASES = {
    "upstream copy": ("Copy the image by digest from its registry into the fan-out registry",),
    "hosts' copies": ("Copy the image by digest from the fan-out registry",
                      "Fetch the image's blobs from the fan-out registry"),
    "wait for the blobs": ("Wait for the blobs",),
    "loads": ("Load the image",),
    "check + tag": ("Refuse an image whose ID", "Tag the verified image"),
}


def phases(events: list[dict]) -> dict[str, dict[str, float]]:
    """ansible-runner events -> {phase: {"span": s, "per_host": mean s, "hosts": n}} (see PHASES)."""
    spans: dict[str, list[tuple[str, float, float]]] = {}
    for ev in events:
        data = ev.get("event_data") or {}
        if ev.get("event") not in ("runner_on_ok", "runner_on_failed") or not data.get("start") or not data.get("end"):
            continue
        task = data.get("task") or ""
        for phase, prefixes in PHASES.items():
            if task.startswith(prefixes):
                spans.setdefault(phase, []).append((data.get("host") or "", datetime.fromisoformat(data["start"]).timestamp(),
                                                    datetime.fromisoformat(data["end"]).timestamp()))
    out = {}
    for phase in PHASES:
        if phase in spans:
            rows = spans[phase]
            per_host: dict[str, float] = {}
            for host, a, b in rows:
                per_host[host] = per_host.get(host, 0.0) + (b - a)
            out[phase] = {"span": max(b for _, _, b in rows) - min(a for _, a, _ in rows),
                          "per_host": statistics.mean(per_host.values()), "hosts": len(per_host)}
    return out


def run_play(inventory: Path, ref: str, work: Path, hosts: list[str]) -> tuple[int, str, float]:
    """The role on ``hosts`` through ansible-runner: (rc, stdout, seconds of the data phase); the
    phases of the last run are kept in ``run_play.phases``."""
    import ansible_runner

    work.mkdir(parents=True, exist_ok=True)
    (work / "project").mkdir(exist_ok=True)
    (work / "project" / "image.yml").write_text(F.PLAY)
    env = {"ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_ROLES_PATH": str(REPO / "roles"),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    r = ansible_runner.run(private_data_dir=str(work), playbook="image.yml", inventory=str(inventory), quiet=True,
                           envvars=env, extravars={"engine_runtime_image": ref, "image_hosts": ",".join(hosts)})
    starts, ends = [], []
    for ev in r.events:
        data = ev.get("event_data") or {}
        if ev.get("event") == "runner_on_ok" and data.get("start"):
            if (data.get("task") or "").startswith(FIRST):
                starts.append(datetime.fromisoformat(data["start"]).timestamp())
            if data.get("task") == LAST:
                ends.append(datetime.fromisoformat(data["end"]).timestamp())
    out = r.stdout.read() if hasattr(r.stdout, "read") else ""
    run_play.phases = phases(list(r.events))
    return r.rc, out, (max(ends) - min(starts)) if starts and ends else float("nan")


def _ssh(lab: spec.LabState):
    import subprocess

    def run(host: str, cmd: str, input: str | None = None, timeout: float = 600):
        return subprocess.run(["ssh", "-F", str(spec.state_dir(lab.name) / "ssh_config"), host, cmd],
                              capture_output=True, text=True, input=input, timeout=timeout)
    return run


def single_fetch(ssh, ref: str) -> float:
    """One host's own fetch on lab-1: skopeo copy from upstream into a docker-archive + docker load."""
    F.wipe_images(ssh, ["lab-1"])
    start = time.monotonic()
    proc = ssh("lab-1", f"rm -f /var/tmp/bench-single.tar && skopeo copy --quiet docker://{ref} "
                        "docker-archive:/var/tmp/bench-single.tar && docker load --input /var/tmp/bench-single.tar "
                        "&& rm -f /var/tmp/bench-single.tar")
    took = time.monotonic() - start
    if proc.returncode != 0:
        sys.exit(f"single fetch failed: {proc.stderr[-2000:]}")
    return took


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hosts", default="1,2,4,8")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--layer-mib", type=int, default=64)
    ap.add_argument("--upstream-mibps", type=float, default=32.0, help="upstream link, MiB/s (all connections)")
    ap.add_argument("--rounds", type=int, default=1, help="runs per point (the median is printed)")
    ap.add_argument("--keep-lab", action="store_true")
    args = ap.parse_args()
    sizes = [int(x) for x in args.hosts.split(",")]
    names = [f"lab-{i}" for i in range(1, max(sizes) + 1)]
    work = Path(tempfile.mkdtemp(prefix="glmops-bench-image-"))
    image = make_oci_layout(work / "oci", tag="0.0.0-toy", layers=args.layers, layer_bytes=args.layer_mib * MiB)
    print(f"image: {args.layers} layers, {image.total_bytes / MiB:.1f} MiB as the registry stores it", flush=True)
    core.down(NAME, log=lambda *_: None)
    lab = core.up(name=NAME, hosts=max(sizes), subnet="auto", binds=spec.default_binds(), profile="b200-sim",
                  log=lambda *_: None)
    registry = UpstreamRegistry(lab.gateway, work / "registry").start()
    proxy = ThrottledProxy(lab.gateway, (registry.host, registry.port), int(args.upstream_mibps * MiB))
    inventory = spec.state_dir(NAME) / "inventory.yml"
    ssh = _ssh(lab)
    rows = []
    try:
        ref = registry.push(image, "toy/vllm").replace(registry.address, proxy.address)
        F.prepare_hosts(ssh, names, proxy.address)
        F.wipe_images(ssh, names)
        rc, out, _ = run_play(inventory, ref, work / "warm", names)
        if rc != 0:
            sys.exit(f"warm-up failed:\n{out[-4000:]}")
        fetches = []
        for n in sizes:
            walls, datas, served = [], [], []
            for r in range(args.rounds):
                registry.reset()
                fetches.append(single_fetch(ssh, ref))
                single_bytes = registry.bytes_served()
                print(f"  one host's fetch (skopeo copy + docker load on lab-1): {fetches[-1]:.1f} s, "
                      f"registry {single_bytes / MiB:.1f} MiB", flush=True)
                F.wipe_images(ssh, names[:n])
                registry.reset()
                start = time.monotonic()
                rc, out, data = run_play(inventory, ref, work / f"n{n}-{r}", names[:n])
                walls.append(time.monotonic() - start)
                datas.append(data)
                if rc != 0:
                    sys.exit(f"N={n}: ansible-playbook exit {rc}\n{out[-4000:]}")
                served.append(registry.bytes_served())
                for h in names[:n]:
                    if F.images(ssh, h).get(ref, {}).get("Id") != image.config_digest:
                        sys.exit(f"N={n}: {h} does not hold the pinned image")
            rows.append({"n": n, "wall": statistics.median(walls), "data": statistics.median(datas),
                         "bytes": max(served), "phases": run_play.phases, "load1": os.getloadavg()[0]})
            row = rows[-1]
            print(f"N={n:<2} fan-out {row['wall']:6.1f} s (data phase {row['data']:5.1f} s)  "
                  f"registry {row['bytes'] / MiB:7.1f} MiB "
                  f"({row['bytes'] / single_bytes:.2f}x one host's)", flush=True)
            print("      phases (last round; span, mean per host): " + " | ".join(
                f"{k} {v['span']:.1f} s, {v['per_host']:.1f} s" for k, v in row["phases"].items())
                + f" | load1 {row['load1']:.2f}", flush=True)
    finally:
        proxy.stop()
        registry.stop()
        if not args.keep_lab:
            core.down(NAME, log=lambda *_: None)
    single = statistics.median(fetches)
    base = rows[0]
    print(f"\none host's fetch (median of {len(fetches)}): {single:.1f} s, {single_bytes / MiB:.1f} MiB from the registry")
    print(f"{'N':>3} {'wall s':>7} {'x N=' + str(base['n']):>7} {'data s':>7} {'data x fetch':>13} "
          f"{'registry MiB':>13} {'x bytes':>8}")
    for r in rows:
        print(f"{r['n']:>3} {r['wall']:7.1f} {r['wall'] / base['wall']:7.2f} {r['data']:7.1f} {r['data'] / single:13.2f} "
              f"{r['bytes'] / MiB:13.1f} {r['bytes'] / single_bytes:8.2f}")
    print(json.dumps({"single_s": single, "single_bytes": single_bytes, "rows": rows}))
    ok = all(r["bytes"] <= single_bytes + image.manifest_bytes for r in rows)
    print(f"registry bytes 1.0x one host's fetch for every N (manifest re-reads aside): {'yes' if ok else 'NO'}")
    print("targets: registry bytes 1.0x, fan-out data phase <= 1.3x one host's fetch")
    return 0


if __name__ == "__main__":
    sys.exit(main())
