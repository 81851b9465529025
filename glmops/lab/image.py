"""The lab's base image: a debootstrapped Debian root file system, cached as a zstd tarball.

The image is built once from the machine's own apt sources (the mirror URI is read from
``/etc/apt/sources.list.d/*.sources`` or ``/etc/apt/sources.list`` at run time; none is
written into the repository) and stored as
``~/.cache/glmops/images/<suite>-<key>.tar.zst``, where ``key`` is a hash of the suite, the
package list and ``RECIPE`` (bump it when ``_customise`` changes). Each lab unpacks it once
and every host is an overlay on top (see ``hosts.py``).

Measured recipe: /work/shared/lab-recipe/FINDINGS.md (debootstrap ~45 s, ~230 MB, 72 MB
compressed, ~1.5 s to unpack).

The tarball is unpacked once per image key into ``<suite>-<key>.rootfs/`` beside it
(``ensure_base``); every host of every lab mounts its overlay on that read-only tree, so neither
``lab up`` nor ``lab down`` copies or deletes the ~11k files of the base.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from glmops.lab.spec import cache_dir

SUITE = "bookworm"
RECIPE = 3
# what a lab host needs to be a realistic Ansible target: real systemd + dbus as PID 1,
# sshd, python3 (+apt bindings for ansible.builtin.apt, venv for the engines' virtualenvs),
# sudo/acl for become to an unprivileged user, and the tools roles and tests use.
# Not libpam-systemd: with it every ssh login starts a user@0.service manager (0.2 s and ~8 MiB
# per login), and one that fails to stop under load leaves the host `degraded`.
PACKAGES = (
    "systemd", "systemd-sysv", "dbus",
    "python3", "python3-apt", "python3-venv",
    "openssh-server", "sudo", "acl",
    "iproute2", "iputils-ping", "procps", "rsync", "curl", "ca-certificates", "gnupg",
    # roles/engine_runtime packs and unpacks runtime archives with it (installed there when missing)
    "zstd",
)


class ImageError(RuntimeError):
    """The base image could not be built or found."""


def image_key(suite: str = SUITE, packages: tuple[str, ...] = PACKAGES) -> str:
    """12 hex digits identifying an image: sha256 over suite, sorted packages and RECIPE."""
    blob = json.dumps({"suite": suite, "packages": sorted(packages), "recipe": RECIPE})
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def image_path(suite: str = SUITE, packages: tuple[str, ...] = PACKAGES) -> Path:
    """Where the tarball for this suite + package list lives (it may not exist yet)."""
    return cache_dir() / "images" / f"{suite}-{image_key(suite, packages)}.tar.zst"


def apt_mirror(suite: str = SUITE, etc: Path = Path("/etc/apt")) -> str:
    """The first ``deb`` URI this machine's apt uses for ``suite``.

    Reads deb822 ``sources.list.d/*.sources`` first, then one-line ``sources.list`` and
    ``sources.list.d/*.list``. ``GLMOPS_LAB_MIRROR`` overrides. Raises ImageError when none.
    """
    if os.environ.get("GLMOPS_LAB_MIRROR"):
        return os.environ["GLMOPS_LAB_MIRROR"]
    for src in sorted((etc / "sources.list.d").glob("*.sources")):
        for stanza in re.split(r"\n\s*\n", src.read_text()):
            fields: dict[str, str] = {}
            for line in stanza.splitlines():
                if line.startswith("#") or ":" not in line or line[:1].isspace():
                    continue
                key, _, value = line.partition(":")
                fields[key.strip().lower()] = value.strip()
            if (fields.get("enabled", "yes").lower() != "no" and "deb" in fields.get("types", "").split()
                    and suite in fields.get("suites", "").split() and fields.get("uris")):
                return fields["uris"].split()[0]
    lists = [etc / "sources.list", *sorted((etc / "sources.list.d").glob("*.list"))]
    for src in lists:
        if not src.is_file():
            continue
        for line in src.read_text().splitlines():
            words = re.sub(r"\[[^\]]*\]", "", line.split("#")[0]).split()
            if len(words) >= 3 and words[0] == "deb" and words[2] == suite:
                return words[1]
    raise ImageError(f"no apt source for suite {suite!r} in {etc}/sources.list(.d); "
                     "set GLMOPS_LAB_MIRROR=<debian mirror URI>")


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def ensure_image(log: Callable[[str], None] = print, rebuild: bool = False) -> Path:
    """Return the cached image tarball, building it first when missing (or ``rebuild``).

    Concurrent callers wait on a lock file; only one builds. Needs root and debootstrap.
    Raises ImageError with debootstrap's last output lines when the build fails.
    """
    target = image_path()
    with _locked(target.parent / ".lock"):
        if target.exists() and not rebuild:
            return target
        if shutil.which("debootstrap") is None:
            raise ImageError("debootstrap is missing (needed once to build the base image): "
                             "apt-get install -y debootstrap")
        mirror = apt_mirror()
        log(f"building base image {target.name} ({SUITE}, {len(PACKAGES)} packages) — once, ~1 min")
        with tempfile.TemporaryDirectory(prefix="glmops-image-", dir=target.parent) as tmp:
            root = Path(tmp) / "rootfs"
            cmd = ["debootstrap", "--variant=minbase", "--components=main",
                   f"--include={','.join(PACKAGES)}", SUITE, str(root), mirror]
            proc = subprocess.run(cmd, capture_output=True, text=True)
            if proc.returncode != 0:
                tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-15:])
                raise ImageError(f"debootstrap failed (exit {proc.returncode}):\n{tail}")
            _customise(root)
            part = target.with_suffix(".part")
            subprocess.run(["tar", "--numeric-owner", "--xattrs", "--xattrs-include=*",
                            "-I", "zstd -T0 -6", "-C", str(root), "-cf", str(part), "."], check=True)
            part.replace(target)
        log(f"base image ready: {target} ({target.stat().st_size // 2**20} MiB)")
        return target


def ensure_base(log: Callable[[str], None] = print) -> Path:
    """The unpacked base root for the current image (built and unpacked when missing).

    The tree is never written to after unpacking: it is the lower layer of every host overlay.
    """
    tar = ensure_image(log=log)
    base = tar.with_name(tar.name.removesuffix(".tar.zst") + ".rootfs")
    if (base / ".glmops-complete").exists():
        return base
    with _locked(tar.parent / ".lock"):
        if (base / ".glmops-complete").exists():
            return base
        tmp = Path(tempfile.mkdtemp(prefix=".unpack-", dir=tar.parent))
        try:
            unpack(tar, tmp)
            (tmp / ".glmops-complete").write_text(tar.name + "\n")
            if base.exists():           # an interrupted earlier unpack
                shutil.rmtree(base)
            tmp.rename(base)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp)
    return base


def unpack(tarball: Path, dest: Path) -> None:
    """Unpack an image tarball into ``dest`` (created), keeping owners, modes and xattrs."""
    dest.mkdir(parents=True, exist_ok=True)
    subprocess.run(["tar", "--numeric-owner", "--xattrs", "--xattrs-include=*", "-I", "zstd",
                    "-xpf", str(tarball), "-C", str(dest)], check=True)


def _customise(root: Path) -> None:
    """Make the debootstrapped tree a good container guest (no host-specific data in it)."""
    # apt: the machine's own sources (so hosts reach the same mirror through the lab NAT)
    apt = root / "etc/apt"
    (apt / "sources.list").unlink(missing_ok=True)
    for src in [Path("/etc/apt/sources.list"), *Path("/etc/apt/sources.list.d").glob("*.sources"),
                *Path("/etc/apt/sources.list.d").glob("*.list")]:
        if src.is_file() and src.stat().st_size:
            dst = apt / src.relative_to("/etc/apt")
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dst)
    for sub in ("var/lib/apt/lists", "var/cache/apt/archives"):
        for entry in (root / sub).glob("*"):
            if entry.is_file():
                entry.unlink()
    for entry in (root / "var/cache/apt").glob("*.bin"):
        entry.unlink()
    # identity is per host: host keys and machine-id are written by `lab up`
    for key in (root / "etc/ssh").glob("ssh_host_*"):
        key.unlink()
    (root / "etc/machine-id").write_text("")
    (root / "var/lib/dbus/machine-id").unlink(missing_ok=True)
    # sshd: only the per-host ed25519 key, root by key only, no reverse DNS
    (root / "etc/ssh/sshd_config.d").mkdir(parents=True, exist_ok=True)
    (root / "etc/ssh/sshd_config.d/glmops-lab.conf").write_text(
        "HostKey /etc/ssh/ssh_host_ed25519_key\nPermitRootLogin prohibit-password\n"
        "PasswordAuthentication no\nUseDNS no\n")
    # journald in memory, small
    (root / "etc/systemd/journald.conf.d").mkdir(parents=True, exist_ok=True)
    (root / "etc/systemd/journald.conf.d/glmops-lab.conf").write_text(
        "[Journal]\nStorage=volatile\nRuntimeMaxUse=16M\n")
    # network: systemd-networkd configures host0 from the per-host .network file
    subprocess.run(["systemctl", f"--root={root}", "enable", "systemd-networkd.service"],
                   check=True, capture_output=True)
    # no background apt runs holding the dpkg lock while a test deploys; no console getty
    subprocess.run(["systemctl", f"--root={root}", "mask", "apt-daily.timer",
                    "apt-daily-upgrade.timer", "console-getty.service"],
                   check=True, capture_output=True)
    (root / "etc/hostname").write_text("lab\n")
