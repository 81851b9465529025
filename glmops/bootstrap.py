"""Set up a fresh Debian 12 machine to run glmops and its lab: ``sudo python3 -m glmops.bootstrap``.

Standard library only, so it runs from a bare checkout before anything is installed.
Idempotent: packages already present are not reinstalled, an existing ``.venv`` is reused.

Steps:
1. ``apt-get install`` what the CLI, the lab and the tests need (python3-venv, debootstrap,
   systemd-container, nftables, zstd, systemd for ``systemd-analyze``, iproute2, rsync, ssh, git,
   prometheus for ``promtool``).
2. ``python3 -m venv .venv`` in the checkout and ``pip install -e .[test,bench,lab]``
   constrained by ``.ci/constraints.txt`` (:data:`CONSTRAINTS`: every package the controller
   installs, at the versions CI tested).

``--freeze`` instead rewrites ``.ci/constraints.txt`` from the venv: ``name==version`` of
glmops' dependencies and their dependencies (markers evaluated here), the extras included.

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
#: the controller's lock: pyproject's ranges stay, this file pins what CI installs and tests
#: (.ci/, with CI's entry point: the top level is fixed, and it is no runtime data of the package)
CONSTRAINTS = ROOT / ".ci" / "constraints.txt"
# run by the venv's python: glmops' requirement closure (extras included) as name==version lines
_FREEZE = r"""
import importlib.metadata as md
from packaging.requirements import Requirement
seen, todo = {}, [("glmops", ("test", "bench", "lab"))]
while todo:
    name, extras = todo.pop()
    dist = md.distribution(name)
    key = dist.metadata["Name"].lower().replace("_", "-")
    if key != "glmops":
        seen[key] = dist.version
    for line in dist.requires or []:
        req = Requirement(line)
        if req.marker is None or any(req.marker.evaluate({"extra": e}) for e in (*extras, "")):
            if req.name.lower().replace("_", "-") not in seen:
                todo.append((req.name, tuple(req.extras)))
print("".join(f"{k}=={v}\n" for k, v in sorted(seen.items())), end="")
"""

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
    # the lab's upstream image registry (glmops/lab/toyimage.py; the image fan-out test and bench)
    "skopeo": "skopeo",
    "docker-registry": "docker-registry",
}


# Packages installed here for a command only (promtool, the lab's upstream registry), whose
# Debian unit would otherwise start at once and at every boot (a Prometheus on :9090, an
# unauthenticated registry on :5000 of every address): package -> its unit, masked when this
# bootstrap installs the package (one the machine had before is left as it is).
BINARY_ONLY_UNITS: dict[str, str] = {
    "prometheus": "prometheus.service",
    "docker-registry": "docker-registry.service",
}


def _install(missing: list[str], env: dict[str, str], root: Path = Path("/")) -> list[str]:
    """``apt-get install`` ``missing`` with no service started meanwhile (``policy-rc.d`` exit
    101, Debian's switch, unless the machine has its own), then mask the units of
    :data:`BINARY_ONLY_UNITS` among them. Returns the masked units; raises
    ``CalledProcessError`` as :func:`_run` does."""
    policy = root / "usr/sbin/policy-rc.d"
    ours = not policy.exists()
    if ours:
        policy.parent.mkdir(parents=True, exist_ok=True)
        policy.write_text("#!/bin/sh\n# glmops bootstrap: no service starts while it installs packages\nexit 101\n")
        policy.chmod(0o755)
    try:
        _run(["apt-get", "update", "-qq"], env=env)
        _run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing], env=env)
    finally:
        if ours:
            policy.unlink(missing_ok=True)
    masked = []
    for pkg in missing:
        unit = BINARY_ONLY_UNITS.get(pkg)
        if unit:
            link = root / "etc/systemd/system" / unit
            link.parent.mkdir(parents=True, exist_ok=True)
            if not link.exists() and not link.is_symlink():
                link.symlink_to("/dev/null")
            masked.append(unit)
    if masked:
        print(f"bootstrap: masked {', '.join(masked)} (installed for its command only; "
              f"'systemctl unmask' to run it as a service)")
    return masked


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
    ap.add_argument("--freeze", action="store_true",
                    help=f"rewrite {CONSTRAINTS.relative_to(ROOT)} from the venv, then stop")
    args = ap.parse_args(argv)
    if args.freeze:
        return _freeze(Path(args.venv) / "bin" / "python")

    missing = _missing_packages()
    if missing:
        if os.geteuid() != 0:
            print(f"bootstrap: need root to install Debian packages: {' '.join(missing)}", file=sys.stderr)
            return 1
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        _install(missing, env)

    venv = Path(args.venv)
    py = venv / "bin" / "python"
    if not py.exists():
        _run([sys.executable, "-m", "venv", str(venv)])
    _run([str(py), "-m", "pip", "install", "-q", "--upgrade", "pip"])
    constraints = ["-c", str(CONSTRAINTS)] if CONSTRAINTS.is_file() else []
    _run([str(py), "-m", "pip", "install", "-q", *constraints, "-e", f"{ROOT}[{args.extras}]"])
    print(f"bootstrap: ready. Activate with: . {venv}/bin/activate")
    return 0


def _freeze(py: Path) -> int:
    proc = subprocess.run([str(py), "-c", _FREEZE], capture_output=True, text=True)
    if proc.returncode != 0:
        print(f"bootstrap: --freeze needs a set-up venv ({py}): {proc.stderr.strip()}", file=sys.stderr)
        return 1
    CONSTRAINTS.write_text("# The controller's tested versions: pip install -c .ci/constraints.txt (glmops.bootstrap does).\n"
                           "# Regenerate after changing pyproject's dependencies: python3 -m glmops.bootstrap --freeze\n"
                           + proc.stdout)
    print(f"bootstrap: wrote {CONSTRAINTS} ({len(proc.stdout.splitlines())} pins)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
