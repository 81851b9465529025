"""Lab host profiles: ``cpu`` (no GPUs) and ``*-sim`` (a strict nvidia-smi double per host).

A sim profile copies ``tests/doubles/nvidia_smi_double.py`` (owned by the doubles; its
docstring defines the config format) into each host as ``/usr/bin/nvidia-smi`` and writes
its config ``/etc/nvidia-smi-double.json`` with the double's own ``--write-profile``
(so the GPU facts live in one place: the double's ``PROFILES``). ``GLMOPS_NVSMI_DOUBLE``
overrides where the double is found.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import glmops

NVSMI_CONFIG = "etc/nvidia-smi-double.json"


@dataclass(frozen=True)
class Profile:
    """What a lab host pretends to be. ``hardware`` is the catalog key put in the inventory."""

    name: str
    hardware: str | None     # glmops_hardware for the inventory; None: not set (cpu)
    gpus: int                # GPUs the double reports (0: no nvidia-smi installed)
    double_profile: str | None = None


PROFILES: dict[str, Profile] = {
    "cpu": Profile("cpu", None, 0),
    "b200-sim": Profile("b200-sim", "b200", 8, "b200-sim"),   # 8x B200, 183359 MiB each
    "h200-sim": Profile("h200-sim", "h200", 8, "h200-sim"),   # 8x H200, 143771 MiB each
}


def nvsmi_double_path() -> Path:
    """Where the nvidia-smi double is: ``$GLMOPS_NVSMI_DOUBLE`` or the repo's tests/doubles/."""
    env = os.environ.get("GLMOPS_NVSMI_DOUBLE")
    if env:
        return Path(env)
    return Path(glmops.__file__).resolve().parents[1] / "tests" / "doubles" / "nvidia_smi_double.py"


def check_profile(name: str) -> list[str]:
    """Problems with a profile name or its prerequisites (empty when usable)."""
    if name not in PROFILES:
        return [f"--profile {name!r}: accepted: {', '.join(PROFILES)}"]
    if PROFILES[name].gpus and not nvsmi_double_path().is_file():
        return [f"--profile {name}: the nvidia-smi double {nvsmi_double_path()} is missing "
                "(set GLMOPS_NVSMI_DOUBLE to its path)"]
    return []


def install(profile: Profile, root: Path, seed: str) -> None:
    """Install the profile's parts into a host's mounted root ``root``.

    ``seed`` makes the GPU UUIDs reproducible and distinct per host (``<lab>-<host>``).
    Raises subprocess.CalledProcessError when the double rejects the profile.
    """
    if not profile.gpus:
        return
    double = nvsmi_double_path()
    subprocess.run([sys.executable, str(double), "--write-profile", profile.double_profile,
                    "--count", str(profile.gpus), "--uuid-seed", seed, str(root / NVSMI_CONFIG)],
                   check=True, capture_output=True, text=True)
    target = root / "usr/bin/nvidia-smi"
    shutil.copyfile(double, target)
    target.chmod(0o755)
