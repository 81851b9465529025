#!/usr/bin/python3
"""Boot-time "kernel module load" of the stand-in driver package (no kernel modules in the lab).

On a real host the NVIDIA kernel module of the installed driver is loaded at boot, so after a
driver upgrade the running module (what nvidia-smi reports) differs from the installed packages
until the next reboot. The stand-in ``nvidia-driver-<branch>`` package ships this as
``/usr/lib/nvidia-double/load-module`` run by ``nvidia-double-module.service`` at boot: it
sets ``driver_version`` (and the banner's CUDA version) in the nvidia-smi double's config to
the installed package's version. No config (a GPU-less host): nothing to load, exit 0.
"""
from __future__ import annotations

import json
import os
import sys

# GLMOPS_DOUBLE_SHARE overrides the directory (the doubles' own tests)
VERSION_FILE = os.path.join(os.environ.get("GLMOPS_DOUBLE_SHARE", "/usr/share/glmops-double"), "driver.version")
SMI_CONFIG = os.environ.get("NVIDIA_SMI_DOUBLE_CONFIG", "/etc/nvidia-smi-double.json")
# driver branch -> CUDA version nvidia-smi's banner shows (NVIDIA driver release notes)
CUDA_FOR_BRANCH = {"570": "12.8", "575": "12.9", "580": "13.0"}


def main() -> int:
    if len(sys.argv) > 1:
        print(f"load-module: unexpected argument {sys.argv[1]!r}", file=sys.stderr)
        return 2
    with open(VERSION_FILE, encoding="utf-8") as fh:
        version = fh.read().strip()
    try:
        with open(SMI_CONFIG, encoding="utf-8") as fh:
            cfg = json.load(fh)
    except FileNotFoundError:
        return 0
    if cfg.get("driver_version") == version:
        return 0
    cfg["driver_version"] = version
    cfg["cuda_version"] = CUDA_FOR_BRANCH.get(version.split(".")[0], cfg.get("cuda_version", ""))
    tmp = f"{SMI_CONFIG}.mod"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(cfg, fh, indent=2)
        fh.write("\n")
    os.replace(tmp, SMI_CONFIG)
    print(f"loaded NVIDIA module {version}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
