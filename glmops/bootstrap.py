"""Set up a fresh Debian 12 machine to run glmops and its lab: ``sudo python3 -m glmops.bootstrap``.

Standard library only, so it runs from a bare checkout before anything is installed.
Idempotent: packages already present are not reinstalled, an existing ``.venv`` is reused.

Steps:
1. ``apt-get install`` what the CLI, the lab and the tests need (python3-venv, debootstrap,
   systemd-container, nftables, zstd, systemd for ``systemd-analyze``, iproute2, rsync, ssh, git,
   prometheus for ``promtool``).
2. ``python3 -m venv .venv`` in the checkout and ``pip install -e .[test,bench,lab]``.

Exit status: 0 ready, 1 a step failed (its command and output are printed).
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Debian package -> a command it provides (checked with shutil.which) or a path.
APT_PACKAGES: dict[str, str] = {
    "python3-venv": "ensurepip",  # probed by importing it
    "debootstrap": "debootstrap",
    "systemd-container": "systemd-nspawn",
    "systemd": "systemd-analyze",
    "nftables": "nft",
    "zstd": "zstd",
    "iproute2": "ip",
    "rsync": "rsync",
    "openssh-client": "ssh",
    "git": "git",
    "curl": "curl",
    # the stand-in NVIDIA/Docker apt repos of the provisioning tests (tests/doubles/aptrepo)
    "dpkg-dev": "dpkg-scanpackages",
    "gpg": "gpg",
    # promtool: the alert rules' checks and unit tests (tests/unit/test_monitoring.py)
    "prometheus": "promtool",
}


def _missing_packages() -> list[str]:
    missing = []
    for pkg, probe in APT_PACKAGES.items():
        if pkg == "python3-venv":
            ok = subprocess.run([sys.executable, "-c", "import ensurepip, venv"], capture_output=True).returncode == 0
        elif probe.startswith("/"):
            ok = Path(probe).exists()
        else:
            ok = shutil.which(probe) is not None
        if not ok:
            missing.append(pkg)
    return missing


def _run(cmd: list[str], **kw) -> None:
    print("+ " + " ".join(cmd), flush=True)
    proc = subprocess.run(cmd, **kw)
    if proc.returncode != 0:
        print(f"bootstrap: failed ({proc.returncode}): {' '.join(cmd)}", file=sys.stderr)
        raise SystemExit(1)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m glmops.bootstrap", description=__doc__.splitlines()[0])
    ap.add_argument("--extras", default="test,bench,lab", help="pip extras to install (default: %(default)s)")
    ap.add_argument("--venv", default=str(ROOT / ".venv"), help="where the virtualenv goes (default: %(default)s)")
    args = ap.parse_args(argv)

    missing = _missing_packages()
    if missing:
        if os.geteuid() != 0:
            print(f"bootstrap: need root to install Debian packages: {' '.join(missing)}", file=sys.stderr)
            return 1
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        _run(["apt-get", "update", "-qq"], env=env)
        _run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing], env=env)

    venv = Path(args.venv)
    py = venv / "bin" / "python"
    if not py.exists():
        _run([sys.executable, "-m", "venv", str(venv)])
    _run([str(py), "-m", "pip", "install", "-q", "--upgrade", "pip"])
    _run([str(py), "-m", "pip", "install", "-q", "-e", f"{ROOT}[{args.extras}]"])
    print(f"bootstrap: ready. Activate with: . {venv}/bin/activate")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
