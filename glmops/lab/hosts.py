"""One lab host: an overlay root, its identity files, its cgroups and its nspawn command line.

Each host ``lab-i`` of lab ``L`` is ``systemd-nspawn --boot`` over an overlay
(lower: the lab's unpacked base image, upper/work: ``hosts/lab-i/``). Flags and why
(FINDINGS.md): ``--register=no --keep-unit`` because no machined runs on this machine; its own
cgroup under ``/sys/fs/cgroup/{systemd,unified}/glmops/L/lab-i`` (otherwise nspawn puts every
container in the same cgroup and their units collide, and boots end ``degraded``);
``--network-bridge`` so the host has its own address (otherwise it shares port 22 with us);
exit code 133 means the guest rebooted, and ``supervisor.py`` boots it again.
"""
from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid
from pathlib import Path

from glmops.lab.spec import CGROUP_ROOT, Bind, HostState, LabState


def cgroup_hierarchies() -> list[Path]:
    """Cgroup hierarchies a host needs a directory in, for this machine's cgroup layout.

    Hybrid (this machine: v1 controllers + ``name=systemd`` + ``unified``): both
    ``systemd`` and ``unified``. Pure cgroup2: the root. Legacy v1: ``systemd``.
    """
    if (CGROUP_ROOT / "unified" / "cgroup.procs").exists():
        return [CGROUP_ROOT / "systemd", CGROUP_ROOT / "unified"]
    if (CGROUP_ROOT / "cgroup.controllers").exists():
        return [CGROUP_ROOT]
    return [CGROUP_ROOT / "systemd"]


def cgroup_dirs(lab: str, host: str | None = None) -> list[Path]:
    """``<hierarchy>/glmops/<lab>[/<host>]`` for each hierarchy."""
    rel = Path("glmops", lab, host) if host else Path("glmops", lab)
    return [h / rel for h in cgroup_hierarchies()]


def cgroup_pids(paths: list[Path]) -> set[int]:
    """Every pid in the cgroup trees ``paths`` (missing trees are empty)."""
    pids: set[int] = set()
    for top in paths:
        if not top.is_dir():
            continue
        for dirpath, _, files in os.walk(top):
            if "cgroup.procs" in files:
                try:
                    text = Path(dirpath, "cgroup.procs").read_text()
                except OSError:
                    continue
                pids.update(int(p) for p in text.split())
    return pids


def remove_cgroup_tree(top: Path) -> None:
    """rmdir ``top`` and its children, deepest first (they must hold no processes)."""
    if not top.is_dir():
        return
    for dirpath, _, _ in sorted(os.walk(top), key=lambda t: -len(t[0])):
        try:
            os.rmdir(dirpath)
        except FileNotFoundError:
            pass


def is_mounted(path: Path) -> bool:
    target = str(path.resolve()) if path.exists() else str(path)
    with open("/proc/self/mountinfo") as fh:
        return any(line.split()[4] == target for line in fh)


def mounts_under(path: Path) -> list[str]:
    """Mount points at or below ``path``, deepest first."""
    prefix = str(path.resolve()) if path.exists() else str(path)
    found = []
    with open("/proc/self/mountinfo") as fh:
        for line in fh:
            mp = line.split()[4].encode().decode("unicode_escape")
            if mp == prefix or mp.startswith(prefix + "/"):
                found.append(mp)
    return sorted(found, key=len, reverse=True)


def mount_overlay(host: HostState, lower: Path) -> Path:
    """Mount the host's overlay at ``<dir>/root`` and return that path."""
    d = Path(host.dir)
    for sub in ("upper", "work", "root"):
        (d / sub).mkdir(parents=True, exist_ok=True)
    root = d / "root"
    if not is_mounted(root):
        subprocess.run(["mount", "-t", "overlay", "overlay", "-o",
                        f"lowerdir={lower},upperdir={d / 'upper'},workdir={d / 'work'}", str(root)],
                       check=True, capture_output=True, text=True)
    return root


def _write(path: Path, text: str, mode: int = 0o644) -> None:
    if path.is_symlink():
        path.unlink()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)


def host_nameservers() -> list[str]:
    """Nameservers of this machine the hosts can reach through NAT (loopback ones cannot)."""
    servers = []
    try:
        for line in Path("/etc/resolv.conf").read_text().splitlines():
            words = line.split()
            if len(words) >= 2 and words[0] == "nameserver" and not words[1].startswith("127."):
                servers.append(words[1])
    except OSError:
        pass
    return servers


def write_identity(lab: LabState, host: HostState, root: Path, pubkey: str) -> str:
    """Write hostname, hosts, machine-id, network, DNS, root's authorized key and an ssh host key.

    Returns the host's public ed25519 host key line (for known_hosts).
    """
    prefix = int(lab.subnet.split("/")[1])
    _write(root / "etc/hostname", f"{host.name}\n")
    hosts = "127.0.0.1 localhost\n::1 localhost ip6-localhost ip6-loopback\n"
    hosts += "".join(f"{h.address} {h.name}\n" for h in lab.hosts)
    _write(root / "etc/hosts", hosts)
    _write(root / "etc/machine-id", uuid.uuid4().hex + "\n", 0o444)
    dns = "".join(f"DNS={s}\n" for s in host_nameservers())
    _write(root / "etc/systemd/network/10-host0.network",
           f"[Match]\nName=host0\n\n[Network]\nAddress={host.address}/{prefix}\n"
           f"Gateway={lab.gateway}\n{dns}LinkLocalAddressing=no\nIPv6AcceptRA=no\n")
    _write(root / "etc/resolv.conf", "".join(f"nameserver {s}\n" for s in host_nameservers()))
    ssh_dir = root / "root/.ssh"
    ssh_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    ssh_dir.chmod(0o700)
    _write(ssh_dir / "authorized_keys", pubkey.strip() + "\n", 0o600)
    key = root / "etc/ssh/ssh_host_ed25519_key"
    for p in (key, key.with_suffix(".pub")):
        p.unlink(missing_ok=True)
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"root@{host.name}",
                    "-f", str(key)], check=True, capture_output=True)
    return " ".join(key.with_suffix(".pub").read_text().split()[:2])


def nspawn_argv(lab: LabState, host: HostState, binds: list[Bind]) -> list[str]:
    """The systemd-nspawn command line that boots ``host``."""
    argv = ["systemd-nspawn", "--quiet", "--register=no", "--keep-unit",
            f"--machine={host.machine}", f"--hostname={host.name}",
            f"--directory={Path(host.dir) / 'root'}", "--boot", "--console=passive",
            f"--network-bridge={lab.bridge}", "--capability=all",
            "--resolv-conf=off", "--link-journal=no", "--timezone=off"]
    argv += [b.nspawn_arg() for b in binds]
    return argv


def stop_pids(pids: set[int], sig: int = signal.SIGKILL) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie is not alive
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def wait_gone(pids: set[int], timeout: float) -> set[int]:
    """Wait up to ``timeout`` s for ``pids`` to exit; return those still alive."""
    deadline = time.monotonic() + timeout
    alive = {p for p in pids if pid_alive(p)}
    while alive and time.monotonic() < deadline:
        time.sleep(0.05)
        alive = {p for p in alive if pid_alive(p)}
    return alive
