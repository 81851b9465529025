"""The lab's network and host settings: a Linux bridge per lab, NAT through an nft table of its
own, IPv4 forwarding and inotify limits.

Forwarding and the inotify limits are machine-wide, so they are reference-counted across labs
(``/run/glmops-lab/users``): the first lab up records the previous values in
``/run/glmops-lab/sysctl.orig.json``; the last lab down restores them and removes the record.
All changes happen under ``/run/glmops-lab/lock``.
"""
from __future__ import annotations

import fcntl
import ipaddress
import json
import subprocess
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

RUN_DIR = Path("/run/glmops-lab")
IP_FORWARD = Path("/proc/sys/net/ipv4/ip_forward")
INOTIFY_INSTANCES = Path("/proc/sys/fs/inotify/max_user_instances")
INOTIFY_WATCHES = Path("/proc/sys/fs/inotify/max_user_watches")


class NetError(RuntimeError):
    """A network object the lab needs is taken or could not be made."""


def _run(*cmd: str, check: bool = True, stdin: str | None = None) -> subprocess.CompletedProcess:
    proc = subprocess.run(list(cmd), capture_output=True, text=True, input=stdin)
    if check and proc.returncode != 0:
        raise NetError(f"{' '.join(cmd)}: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc


@contextmanager
def net_lock() -> Iterator[None]:
    """Serialise network changes of concurrent ``lab up``/``lab down`` runs."""
    RUN_DIR.mkdir(parents=True, exist_ok=True)
    with open(RUN_DIR / "lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def link_exists(name: str) -> bool:
    return Path("/sys/class/net", name).exists()


def ipv4_in_use() -> list[tuple[str, ipaddress.IPv4Interface]]:
    """(interface, address/prefix) of every IPv4 address on this machine."""
    out = json.loads(_run("ip", "-j", "-4", "addr", "show").stdout or "[]")
    return [(link["ifname"], ipaddress.IPv4Interface(f"{a['local']}/{a['prefixlen']}"))
            for link in out for a in link.get("addr_info", [])]


def ipv4_routes() -> list[tuple[str, ipaddress.IPv4Network]]:
    """(device, destination) of every IPv4 route in the main table except the default route."""
    out = json.loads(_run("ip", "-j", "-4", "route", "show").stdout or "[]")
    routes = []
    for r in out:
        if r.get("dst") in (None, "default"):
            continue
        routes.append((r.get("dev", "?"), ipaddress.IPv4Network(r["dst"], strict=False)))
    return routes


def subnet_conflicts(subnet: str) -> list[str]:
    """Why ``subnet`` cannot be used for a new bridge: overlapping addresses or routes."""
    net = ipaddress.IPv4Network(subnet)
    found = [f"{addr} on {dev}" for dev, addr in ipv4_in_use() if addr.network.overlaps(net)]
    found += [f"route {dst} via {dev}" for dev, dst in ipv4_routes()
              if dst.overlaps(net) and not any(dst == a.network for d, a in ipv4_in_use() if d == dev)]
    return found


def free_subnet(pool: str, taken: list[str] = ()) -> str | None:
    """The first /24 of ``pool`` that overlaps no address, route or ``taken`` subnet."""
    used = [a.network for _, a in ipv4_in_use()] + [d for _, d in ipv4_routes()]
    used += [ipaddress.IPv4Network(t) for t in taken]
    for cand in ipaddress.IPv4Network(pool).subnets(new_prefix=24):
        if not any(cand.overlaps(u) for u in used):
            return str(cand)
    return None


def nft_table_exists(table: str) -> bool:
    return _run("nft", "list", "table", "ip", table, check=False).returncode == 0


def bridge_up(bridge: str, gateway: str, subnet: str) -> None:
    """Create ``bridge`` with ``gateway``/prefix and bring it up. Raises NetError if it exists."""
    if link_exists(bridge):
        raise NetError(f"network interface {bridge} already exists")
    prefix = ipaddress.IPv4Network(subnet).prefixlen
    _run("ip", "link", "add", bridge, "type", "bridge")
    _run("ip", "addr", "add", f"{gateway}/{prefix}", "dev", bridge)
    _run("ip", "link", "set", bridge, "up")


def bridge_ports(bridge: str) -> list[str]:
    """Names of the interfaces enslaved to ``bridge`` (the hosts' ``vb-*`` veth ends)."""
    if not link_exists(bridge):
        return []
    out = json.loads(_run("ip", "-j", "link", "show", "master", bridge, check=False).stdout or "[]")
    return [link["ifname"] for link in out]


def bridge_down(bridge: str) -> None:
    """Delete ``bridge`` and the veth ends still enslaved to it.

    The kernel removes a stopped container's veth pair only when its network namespace is
    cleaned up, which can lag the processes' exit; a leftover ``vb-*`` end makes the next
    ``systemd-nspawn --network-bridge`` of the same machine name fail with "File exists".
    """
    for port in bridge_ports(bridge):
        _run("ip", "link", "del", port, check=False)
    if link_exists(bridge):
        _run("ip", "link", "del", bridge)


def nat_up(table: str, bridge: str, subnet: str) -> None:
    """Masquerade the lab's traffic leaving through any other interface (apt from the hosts)."""
    rules = (f"table ip {table} {{\n"
             f"  chain postrouting {{ type nat hook postrouting priority srcnat; policy accept;\n"
             f"    ip saddr {subnet} oifname != \"{bridge}\" masquerade\n  }}\n"
             f"  chain forward {{ type filter hook forward priority filter; policy accept;\n"
             f"    iifname \"{bridge}\" accept\n"
             f"    oifname \"{bridge}\" ct state established,related accept\n  }}\n}}\n")
    _run("nft", "-f", "-", stdin=rules)


def nat_down(table: str) -> None:
    if nft_table_exists(table):
        _run("nft", "delete", "table", "ip", table)


def _settings() -> dict[Path, tuple[str, int]]:
    """sysctl file -> (how, value): ``exact`` sets the value, ``atleast`` raises it if lower."""
    return {IP_FORWARD: ("exact", 1),
            # every guest systemd uses ~8 inotify instances (path units, journald, udev-less
            # watches), all counted for uid 0: 128 (Debian's default) fits ~15 hosts machine-wide,
            # after that guests boot `degraded` (failed .path units). kind recommends the same values.
            INOTIFY_INSTANCES: ("atleast", 8192),
            INOTIFY_WATCHES: ("atleast", 524288)}


def _read_users() -> set[str]:
    names = set()
    for f in (RUN_DIR / "users", RUN_DIR / "ip_forward.users"):   # ip_forward.users: older layout
        if f.exists():
            names |= set(f.read_text().split())
    return names


def _write_users(names: set[str]) -> None:
    (RUN_DIR / "ip_forward.users").unlink(missing_ok=True)
    if names:
        (RUN_DIR / "users").write_text("\n".join(sorted(names)) + "\n")
    else:
        (RUN_DIR / "users").unlink(missing_ok=True)


def host_settings_acquire(lab: str) -> None:
    """Claim the machine-wide settings a lab needs (IPv4 forwarding, inotify limits).

    The first claim records the previous values in ``/run/glmops-lab/sysctl.orig.json``;
    ``host_settings_release`` by the last lab restores them.
    """
    RUN_DIR.mkdir(parents=True, exist_ok=True)
    orig_file = RUN_DIR / "sysctl.orig.json"
    orig = json.loads(orig_file.read_text()) if orig_file.exists() else {}
    old_fwd = RUN_DIR / "ip_forward.orig"                         # older layout
    if old_fwd.exists():
        orig.setdefault(str(IP_FORWARD), old_fwd.read_text().strip())
        old_fwd.unlink()
    for path, (how, value) in _settings().items():
        current = path.read_text().strip()
        orig.setdefault(str(path), current)
        if how == "exact" or int(current) < value:
            path.write_text(f"{value}\n")
    orig_file.write_text(json.dumps(orig, indent=1) + "\n")
    _write_users(_read_users() | {lab})


def host_settings_release(lab: str) -> None:
    """Drop ``lab``'s claim; the last lab restores the recorded values and deletes the record."""
    names = _read_users() - {lab}
    if RUN_DIR.exists():
        _write_users(names)
    if names:
        return
    orig_file = RUN_DIR / "sysctl.orig.json"
    if orig_file.exists():
        for path, value in json.loads(orig_file.read_text()).items():
            Path(path).write_text(f"{value}\n")
        orig_file.unlink()
    old_fwd = RUN_DIR / "ip_forward.orig"
    if old_fwd.exists():
        IP_FORWARD.write_text(old_fwd.read_text().strip() + "\n")
        old_fwd.unlink()
