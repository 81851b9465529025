#!/usr/bin/env python3
"""Build the signed local apt repositories of STRICT stand-in packages for NVIDIA's and
Docker's host packages, which cannot be installed here (no GPU, no NVIDIA repo, no Docker).

Three flat repositories (the layout NVIDIA's CUDA repo and the libnvidia-container repo use,
``deb [signed-by=KEYRING] URL/ /``), signed with a throwaway GPG key made for the build::

    OUT/keyring.gpg                 binary keyring for apt's signed-by
    OUT/cuda/                       nvidia-driver-<B>, nvidia-fabricmanager-<B>, nvlsm,
                                    nvidia-persistenced for branches 570, 575, 580
                                    (+ nvidia-fabricmanager-575 575.51.03: an FM point release
                                    that differs from the 575 driver, for the mismatch tests)
    OUT/container-toolkit/          nvidia-container-toolkit
    OUT/docker/                     docker-ce

Every package carries its version in ``/usr/share/glmops-double/<part>.version`` and the
doubles under tests/doubles/aptrepo/ read it, so e.g. a fabric manager whose version differs
from the loaded driver refuses to start, like the real one. The driver package ships the
nvidia-smi double (tests/doubles/nvidia_smi_double.py) as ``/usr/bin/nvidia-smi`` and a boot
unit that "loads the kernel module" (sets the double's driver_version to the installed version,
see nvidia_module_double.py): after an upgrade the running driver differs until a reboot.

Versions: driver branches and point releases as NVIDIA publishes them (570.172.08,
575.57.08, 575.51.03, 580.95.05); nvidia-container-toolkit 1.17.8; docker-ce 28.3.3.

``build(out=None) -> dict`` builds (or reuses, keyed by the content of the inputs) under
``~/.cache/glmops/aptrepo/<hash>/`` and returns ``{"dir", "keyring", "repos": {name: dir}}``.
Needs dpkg-deb, dpkg-scanpackages (dpkg-dev) and gpg. CLI: ``build.py [OUT]`` prints that JSON.
"""
from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from email.utils import formatdate
from pathlib import Path

HERE = Path(__file__).resolve().parent
DOUBLES = HERE.parent
CACHE = Path(os.environ.get("GLMOPS_CACHE", Path.home() / ".cache" / "glmops")) / "aptrepo"

#: driver branch -> the point release of every package of that branch
DRIVERS = {"570": "570.172.08", "575": "575.57.08", "580": "580.95.05"}
#: extra fabric manager point releases (differ from the branch's driver)
EXTRA_FM = {"575": ["575.51.03"]}
CTK_VERSION = "1.17.8"
DOCKER_VERSION = "28.3.3"

FM_CFG = """\
# Fabric Manager configuration (glmops lab stand-in; keys as in NVIDIA's fabricmanager.cfg)
LOG_LEVEL=4
LOG_FILE_NAME=/var/log/fabricmanager.log
LOG_APPEND_TO_LOG=1
LOG_USE_SYSLOG=0
DAEMONIZE=0
BIND_INTERFACE_IP=127.0.0.1
STARTING_TCP_PORT=16000
FABRIC_MODE=0
FABRIC_MODE_RESTART=0
STATE_FILE_NAME=/var/tmp/fabricmanager.state
"""

UNIT_FM = """\
[Unit]
Description=NVIDIA fabric manager service (glmops lab stand-in)
After=nvidia-double-module.service

[Service]
Type=simple
ExecStart=/usr/bin/nv-fabricmanager -c /usr/share/nvidia/nvswitch/fabricmanager.cfg
LimitCORE=infinity

[Install]
WantedBy=multi-user.target
"""

UNIT_PERSISTENCED = """\
[Unit]
Description=NVIDIA Persistence Daemon (glmops lab stand-in)
Wants=syslog.target
After=nvidia-double-module.service

[Service]
Type=simple
ExecStart=/usr/bin/nvidia-persistenced --user nvidia-persistenced --no-persistence-mode --verbose
ExecStopPost=/bin/rm -rf /var/run/nvidia-persistenced

[Install]
WantedBy=multi-user.target
"""

UNIT_MODULE = """\
[Unit]
Description=Load the NVIDIA kernel module (glmops lab stand-in: sets the nvidia-smi double's driver)
DefaultDependencies=no
After=local-fs.target
Before=nvidia-persistenced.service nvidia-fabricmanager.service

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/usr/lib/nvidia-double/load-module

[Install]
WantedBy=multi-user.target
"""

UNIT_DOCKER = """\
[Unit]
Description=Docker Application Container Engine (glmops lab stand-in)
After=network-online.target

[Service]
Type=simple
ExecStart=/usr/bin/dockerd
ExecReload=/bin/kill -s HUP $MAINPID
Restart=on-failure
StartLimitBurst=3

[Install]
WantedBy=multi-user.target
"""

ENABLE = """#!/bin/sh
set -e
if [ "$1" = configure ] && command -v deb-systemd-helper >/dev/null; then
    deb-systemd-helper enable {unit} >/dev/null || true
fi
"""

ENABLE_START = ENABLE + """if [ "$1" = configure ] && [ -d /run/systemd/system ]; then
    systemctl daemon-reload || true
    systemctl restart {unit} || true
fi
"""

STOP = """#!/bin/sh
set -e
if [ -d /run/systemd/system ]; then
    systemctl stop {unit} >/dev/null 2>&1 || true
fi
"""


def _pkg(name: str, version: str, files: dict[str, tuple[str | Path, int]], description: str,
         depends: str = "", provides: str = "", conflicts: str = "", replaces: str = "",
         postinst: str = "", prerm: str = "") -> dict:
    return dict(name=name, version=version, files=files, description=description, depends=depends,
                provides=provides, conflicts=conflicts, replaces=replaces, postinst=postinst,
                prerm=prerm)


def packages() -> dict[str, list[dict]]:
    """The stand-in packages per repository (name, version, files {path: (source|text, mode)})."""
    cuda = []
    for branch, version in DRIVERS.items():
        deb = f"{version}-1"
        cuda.append(_pkg(
            f"nvidia-driver-{branch}", deb, {
                "usr/bin/nvidia-smi": (DOUBLES / "nvidia_smi_double.py", 0o755),
                "usr/lib/nvidia-double/load-module": (HERE / "nvidia_module_double.py", 0o755),
                "usr/share/glmops-double/driver.version": (version + "\n", 0o644),
                "lib/systemd/system/nvidia-double-module.service": (UNIT_MODULE, 0o644),
            }, f"NVIDIA driver metapackage, branch {branch} (glmops lab stand-in)",
            depends="python3", provides="nvidia-driver-binary", conflicts="nvidia-driver-binary",
            replaces="nvidia-driver-binary",
            postinst=ENABLE.format(unit="nvidia-double-module.service")))
        cuda.append(_pkg(
            "nvidia-persistenced", deb, {
                "usr/bin/nvidia-persistenced": (HERE / "nvidia_persistenced_double.py", 0o755),
                "usr/share/glmops-double/persistenced.version": (version + "\n", 0o644),
                "lib/systemd/system/nvidia-persistenced.service": (UNIT_PERSISTENCED, 0o644),
            }, "NVIDIA Persistence Daemon (glmops lab stand-in)", depends="python3",
            prerm=STOP.format(unit="nvidia-persistenced.service")))
        for fm_version in [version, *EXTRA_FM.get(branch, [])]:
            cuda.append(_pkg(
                f"nvidia-fabricmanager-{branch}", f"{fm_version}-1", {
                    "usr/bin/nv-fabricmanager": (HERE / "nv_fabricmanager_double.py", 0o755),
                    "usr/share/nvidia/nvswitch/fabricmanager.cfg": (FM_CFG, 0o644),
                    "usr/share/glmops-double/fabricmanager.version": (fm_version + "\n", 0o644),
                    "lib/systemd/system/nvidia-fabricmanager.service": (UNIT_FM, 0o644),
                }, f"Fabric Manager for NVSwitch based systems, branch {branch} (glmops lab stand-in)",
                depends="python3", provides="nvidia-fabricmanager-binary",
                conflicts="nvidia-fabricmanager-binary", replaces="nvidia-fabricmanager-binary",
                prerm=STOP.format(unit="nvidia-fabricmanager.service")))
        cuda.append(_pkg(
            "nvlsm", deb, {
                "usr/sbin/nvlsm": (HERE / "nvlsm_double.py", 0o755),
                "usr/share/glmops-double/nvlsm.version": (version + "\n", 0o644),
            }, "NVLink Subnet Manager (glmops lab stand-in)", depends="python3"))
    ctk = [_pkg("nvidia-container-toolkit", f"{CTK_VERSION}-1", {
        "usr/bin/nvidia-ctk": (HERE / "nvidia_ctk_double.py", 0o755),
        "usr/share/glmops-double/container-toolkit.version": (CTK_VERSION + "\n", 0o644),
    }, "NVIDIA Container toolkit (glmops lab stand-in)", depends="python3")]
    docker = [_pkg("docker-ce", f"5:{DOCKER_VERSION}-1~debian.12~bookworm", {
        "usr/bin/dockerd": (HERE / "dockerd_double.py", 0o755),
        "usr/bin/docker": (HERE / "dockerd_double.py", 0o755),
        "usr/share/glmops-double/docker.version": (DOCKER_VERSION + "\n", 0o644),
        "lib/systemd/system/docker.service": (UNIT_DOCKER, 0o644),
    }, "Docker: the open-source application container engine (glmops lab stand-in)",
        depends="python3", postinst=ENABLE_START.format(unit="docker.service"),
        prerm=STOP.format(unit="docker.service"))]
    return {"cuda": cuda, "container-toolkit": ctk, "docker": docker}


def inputs_hash() -> str:
    """Content hash of everything the repos are built from (cache key)."""
    h = hashlib.sha256()
    for path in sorted([*HERE.glob("*.py"), DOUBLES / "nvidia_smi_double.py"]):
        h.update(path.name.encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def _arch() -> str:
    return subprocess.run(["dpkg", "--print-architecture"], capture_output=True, text=True,
                          check=True).stdout.strip()


def _build_deb(pkg: dict, arch: str, work: Path, dest: Path) -> None:
    root = work / f"{pkg['name']}_{pkg['version'].replace(':', '_')}"
    (root / "DEBIAN").mkdir(parents=True)
    for rel, (src, mode) in pkg["files"].items():
        target = root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(src, Path):
            shutil.copyfile(src, target)
        else:
            target.write_text(src)
        target.chmod(mode)
    control = [f"Package: {pkg['name']}", f"Version: {pkg['version']}", f"Architecture: {arch}",
               "Maintainer: glmops tests <tests@glmops.invalid>", "Section: non-free/libs",
               "Priority: optional"]
    for key in ("depends", "provides", "conflicts", "replaces"):
        if pkg[key]:
            control.append(f"{key.capitalize()}: {pkg[key]}")
    control.append(f"Description: {pkg['description']}")
    (root / "DEBIAN" / "control").write_text("\n".join(control) + "\n")
    for script in ("postinst", "prerm"):
        if pkg[script]:
            p = root / "DEBIAN" / script
            p.write_text(pkg[script])
            p.chmod(0o755)
    out = dest / f"{pkg['name']}_{pkg['version'].split(':')[-1]}_{arch}.deb"
    subprocess.run(["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", str(root), str(out)],
                   check=True, capture_output=True, text=True)


def _release(repo: Path, arch: str, name: str) -> str:
    lines = ["Origin: glmops-tests", f"Label: glmops stand-in {name}",
             f"Date: {formatdate(time.time() - 86400, usegmt=True)}", f"Architectures: {arch}",
             "Acquire-By-Hash: no"]
    for title, algo in (("MD5Sum", "md5"), ("SHA256", "sha256")):
        lines.append(f"{title}:")
        for f in ("Packages", "Packages.gz"):
            data = (repo / f).read_bytes()
            lines.append(f" {hashlib.new(algo, data).hexdigest()} {len(data)} {f}")
    return "\n".join(lines) + "\n"


def _gpg(home: Path, *args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(["gpg", "--homedir", str(home), "--batch", "--pinentry-mode", "loopback",
                           "--passphrase", "", *args], check=True, capture_output=True, **kw)


def build(out: str | Path | None = None) -> dict:
    """Build (or reuse) the signed repos; return ``{"dir", "keyring", "repos": {name: dir}}``.

    Raises subprocess.CalledProcessError (with the tool's stderr) when dpkg-deb,
    dpkg-scanpackages or gpg fail, FileNotFoundError when one is missing.
    """
    out = Path(out) if out else CACHE / inputs_hash()
    marker = out / "built.json"
    if marker.exists():
        return json.loads(marker.read_text())
    missing = [t for t in ("dpkg-deb", "dpkg-scanpackages", "gpg") if not shutil.which(t)]
    if missing:
        raise FileNotFoundError(f"needed to build the stand-in apt repo: {', '.join(missing)} "
                                "(apt-get install dpkg-dev gpg)")
    arch = _arch()
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="glmops-aptrepo-") as tmp:
        work = Path(tmp)
        home = work / "gnupg"
        home.mkdir(mode=0o700)
        _gpg(home, "--quick-gen-key", "glmops stand-in repo <tests@glmops.invalid>", "ed25519", "sign", "0")
        keyring = out / "keyring.gpg"
        keyring.write_bytes(_gpg(home, "--export").stdout)
        repos = {}
        for name, pkgs in packages().items():
            repo = out / name
            if repo.exists():
                shutil.rmtree(repo)
            repo.mkdir()
            for pkg in pkgs:
                _build_deb(pkg, arch, work / name, repo)
            scan = subprocess.run(["dpkg-scanpackages", "--multiversion", ".", "/dev/null"], cwd=repo,
                                  check=True, capture_output=True)
            (repo / "Packages").write_bytes(scan.stdout)
            (repo / "Packages.gz").write_bytes(gzip.compress(scan.stdout, mtime=0))
            (repo / "Release").write_text(_release(repo, arch, name))
            _gpg(home, "--clearsign", "-o", str(repo / "InRelease"), str(repo / "Release"))
            _gpg(home, "--armor", "--detach-sign", "-o", str(repo / "Release.gpg"), str(repo / "Release"))
            repos[name] = str(repo)
    info = {"dir": str(out), "keyring": str(keyring), "repos": repos,
            "drivers": DRIVERS, "extra_fm": EXTRA_FM, "ctk": CTK_VERSION, "docker": DOCKER_VERSION}
    marker.write_text(json.dumps(info, indent=2))
    return info


if __name__ == "__main__":
    print(json.dumps(build(sys.argv[1] if len(sys.argv) > 1 else None), indent=2))
