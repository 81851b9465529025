"""``lab up`` / ``lab down`` / ``lab status`` as functions (the click verbs in cli.py are thin).

Everything a lab makes is recorded under ``/var/lib/glmops-lab/<name>/`` (``lab.json``) so that
``down`` can remove it again, also after a failed or interrupted ``up``:
state dir (ssh key, unpacked base, per-host overlays), overlay mounts, cgroups
``/sys/fs/cgroup/{systemd,unified}/glmops/<name>/``, the bridge, the nft table and its claim on
``net.ipv4.ip_forward`` and the inotify limits. Conventions: see spec.py and docs/DEVELOPING.md ("Lab").
"""
from __future__ import annotations

import concurrent.futures
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import yaml

from glmops.lab import hosts as H
from glmops.lab import image, netsetup, profiles, spec
from glmops.lab.spec import (AUTO_SUBNET_POOL, DEFAULT_NAME, DEFAULT_SUBNET, MAX_HOSTS,
                             Bind, HostState, LabState, bridge_name, check_name, default_binds,
                             host_addresses, host_name, nft_table, state_dir)

Log = Callable[[str], None]

# tool -> Debian package that provides it
TOOLS = {"systemd-nspawn": "systemd-container", "nft": "nftables", "ip": "iproute2",
         "zstd": "zstd", "tar": "tar", "ssh-keygen": "openssh-client", "ssh": "openssh-client",
         "mount": "mount"}


class LabError(RuntimeError):
    """A lab could not be made or removed. ``problems`` lists every reason (one line each)."""

    def __init__(self, problems: list[str] | str, exit_code: int = 1):
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        self.exit_code = exit_code  # 2: bad input / precondition, nothing made; 1: a step failed
        super().__init__("\n".join(self.problems))


def root_problem(euid: int | None = None) -> list[str]:
    """``[message]`` when not running as root (``euid`` defaults to ``os.geteuid()``)."""
    euid = os.geteuid() if euid is None else euid
    if euid != 0:
        return ["glmops lab needs root (it mounts overlays, creates bridges and nft tables and runs "
                "systemd-nspawn): run it with sudo"]
    return []


def tool_problems(need_debootstrap: bool) -> list[str]:
    """One line per missing command, naming the apt package that provides it."""
    tools = dict(TOOLS)
    if need_debootstrap:
        tools["debootstrap"] = "debootstrap"
    missing = {pkg: [] for pkg in tools.values()}
    for tool, pkg in tools.items():
        if shutil.which(tool) is None:
            missing[pkg].append(tool)
    problems = [f"{', '.join(t)} not found: apt-get install -y {pkg}" for pkg, t in missing.items() if t]
    if "overlay" not in Path("/proc/filesystems").read_text():
        problems.append("the kernel has no overlay file system: modprobe overlay")
    return problems


def install_missing_tools(log: Log) -> None:
    """apt-get install the packages behind missing tools (``lab up --install-missing``)."""
    pkgs = sorted({TOOLS.get(t, t) for t in [*TOOLS, "debootstrap"] if shutil.which(t) is None})
    if pkgs:
        log(f"installing {' '.join(pkgs)}")
        subprocess.run(["apt-get", "install", "-y", "--no-install-recommends", *pkgs], check=True,
                       env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})


def _existing_lab_problem(name: str) -> list[str]:
    d = state_dir(name)
    if not d.exists():
        return []
    try:
        st = LabState.load(name)
        what = f"{len(st.hosts)} host(s) on {st.subnet}, made {time.strftime('%H:%M:%S', time.localtime(st.created))}"
    except (OSError, ValueError, TypeError, KeyError):
        what = "state incomplete"
    return [f"a lab named {name!r} already exists ({what}; state {d}): run "
            f"`glmops lab down --name {name}` first, or pick another --name"]


def _taken_subnets() -> list[str]:
    out = []
    for st in list_labs():
        out.append(st.subnet)
    return out


def subnet_syntax_problems(subnet: str, hosts: int) -> list[str]:
    """``--subnet`` problems visible without looking at the machine: not ``auto`` and not an
    IPv4 /24 with room for ``hosts`` hosts. Empty list = fine."""
    if subnet == "auto":
        return []
    try:
        host_addresses(subnet, max(min(hosts, MAX_HOSTS), 1))
    except ValueError as exc:
        msg = str(exc) if str(exc).startswith("--subnet") else f"--subnet {subnet!r}: {exc}"
        return [f"{msg}; expected an IPv4 /24 such as {DEFAULT_SUBNET}, or 'auto'"]
    return []


def preflight(name: str, hosts: int, profile: str, subnet: str, binds: list[Bind],
              euid: int | None = None) -> tuple[str, list[str]]:
    """Check everything ``up`` needs; return (subnet to use, problems). Runs under the net lock.

    ``subnet`` may be ``auto``: the first free /24 of 10.77.0.0/16 other than
    :data:`DEFAULT_SUBNET`, which stays for the README's lab (inventories/lab addresses it).
    """
    problems = root_problem(euid)
    problems += check_name(name)
    problems += profiles.check_profile(profile)
    if not 1 <= hosts <= MAX_HOSTS:
        problems.append(f"--hosts {hosts}: accepted 1..{MAX_HOSTS}")
    problems += tool_problems(need_debootstrap=not image.image_path().exists())
    for b in binds:
        if not Path(b.source).is_dir():
            problems.append(f"--bind {b.source}:{b.target}: {b.source} is not a directory")
    if problems and root_problem(euid):
        return subnet, problems
    if not check_name(name):
        problems += _existing_lab_problem(name)
        br = bridge_name(name)
        if netsetup.link_exists(br):
            problems.append(f"bridge {br} already exists: remove it (`ip link del {br}`) or "
                            f"run `glmops lab down --name {name}`")
        if shutil.which("nft") and netsetup.nft_table_exists(nft_table(name)):
            problems.append(f"nft table ip {nft_table(name)} already exists: "
                            f"`nft delete table ip {nft_table(name)}`")
    if subnet == "auto":
        picked = netsetup.free_subnet(AUTO_SUBNET_POOL, [*_taken_subnets(), DEFAULT_SUBNET])
        if picked is None:
            problems.append(f"--subnet auto: no free /24 left in {AUTO_SUBNET_POOL}")
        subnet = picked or subnet
    else:
        bad = subnet_syntax_problems(subnet, hosts)
        problems += bad
        if not bad:
            conflicts = netsetup.subnet_conflicts(subnet)
            if conflicts:
                free = netsetup.free_subnet(AUTO_SUBNET_POOL, _taken_subnets())
                problems.append(f"--subnet {subnet}: bridge address range already in use "
                                f"({'; '.join(conflicts)}); pick another, e.g. --subnet {free} "
                                "or --subnet auto")
    return subnet, problems


def list_labs() -> list[LabState]:
    """Every lab with a readable ``lab.json`` under the state root."""
    labs = []
    if spec.STATE_ROOT.is_dir():
        for d in sorted(spec.STATE_ROOT.iterdir()):
            if (d / "lab.json").is_file():
                try:
                    labs.append(LabState.load(d.name))
                except (OSError, ValueError, TypeError, KeyError):
                    continue
    return labs


def up(name: str = DEFAULT_NAME, hosts: int = 1, profile: str = "cpu", subnet: str = DEFAULT_SUBNET,
       binds: list[Bind] | None = None, log: Log = print, boot_timeout: float = 90.0,
       keep_on_failure: bool = False) -> LabState:
    """Boot ``hosts`` lab hosts and write the inventory; return the lab's state.

    ``binds`` defaults to ``default_binds()`` (wheelhouse, models). Raises LabError with every
    problem found before anything is made, or with the failure (after cleaning up, unless
    ``keep_on_failure``) when a step fails.
    """
    binds = default_binds() if binds is None else binds
    t0 = time.monotonic()
    with netsetup.net_lock():
        subnet, problems = preflight(name, hosts, profile, subnet, binds)
        if problems:
            raise LabError(problems, exit_code=2)
        gateway, addresses = host_addresses(subnet, hosts)
        d = state_dir(name)
        d.parent.mkdir(parents=True, exist_ok=True)
        try:
            d.mkdir(mode=0o700)
        except FileExistsError:
            raise LabError(_existing_lab_problem(name), exit_code=2) from None
        lab = LabState(
            name=name, profile=profile, subnet=subnet, gateway=gateway, bridge=bridge_name(name),
            nft_table=nft_table(name), image=str(image.image_path()), binds=list(binds),
            created=time.time(),
            hosts=[HostState(name=host_name(i), index=i, address=addresses[i - 1],
                             machine=f"{name}-{host_name(i)}"[:64], dir=str(d / "hosts" / host_name(i)))
                   for i in range(1, hosts + 1)])
        lab.save()
        net_error: Exception | None = None
        try:
            netsetup.bridge_up(lab.bridge, gateway, subnet)
            netsetup.nat_up(lab.nft_table, lab.bridge, subnet)
            netsetup.host_settings_acquire(name)
        except Exception as exc:  # noqa: BLE001 - cleaned up below, outside the lock down() takes
            net_error = exc
    if net_error is not None:
        _cleanup_after_failure(name, keep_on_failure, log)
        raise LabError(f"network setup failed: {net_error}") from net_error
    log(f"network: bridge {lab.bridge} {gateway}/{subnet.split('/')[1]}, nft table {lab.nft_table}")
    try:
        _build_hosts(lab, log)
        _start(lab, log)
        _wait_ready(lab, log, boot_timeout)
    except BaseException as exc:
        _cleanup_after_failure(name, keep_on_failure, log)
        if isinstance(exc, LabError):
            raise
        if isinstance(exc, KeyboardInterrupt):
            raise
        raise LabError(f"lab up failed: {exc}") from exc
    log(f"lab {name!r}: {hosts} host(s) running in {time.monotonic() - t0:.1f} s; "
        f"inventory {d / 'inventory.yml'}")
    return lab


def _cleanup_after_failure(name: str, keep: bool, log: Log) -> None:
    if keep:
        log(f"left lab {name!r} as it is for inspection; remove it with `glmops lab down --name {name}`")
        return
    try:
        down(name, log=lambda _m: None)
    except LabError as exc:
        log(f"cleanup after failure incomplete: {exc}")


def _build_hosts(lab: LabState, log: Log) -> None:
    """Unpack the base, ssh key, overlays with per-host identity, inventory, ssh config."""
    d = lab.dir
    t = time.monotonic()
    base = image.ensure_base(log=log)
    key = d / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"glmops-lab-{lab.name}",
                    "-f", str(key)], check=True, capture_output=True)
    pub = key.with_suffix(".pub").read_text()
    prof = profiles.PROFILES[lab.profile]
    known = []
    for host in lab.hosts:
        root = H.mount_overlay(host, base)
        hostkey = H.write_identity(lab, host, root, pub)
        known.append(f"{host.address},{host.name} {hostkey}\n")
        profiles.install(prof, root, seed=f"{lab.name}-{host.name}")
        for b in lab.binds:
            (root / b.target.lstrip("/")).mkdir(parents=True, exist_ok=True)
    (d / "known_hosts").write_text("".join(known))
    (d / "ssh_config").write_text("".join(
        f"Host {h.name} {h.address}\n  HostName {h.address}\n  User root\n  IdentityFile {key}\n"
        f"  IdentitiesOnly yes\n  UserKnownHostsFile {d / 'known_hosts'}\n  StrictHostKeyChecking yes\n"
        for h in lab.hosts))
    write_inventory(lab)
    log(f"{len(lab.hosts)} host root(s) ready in {time.monotonic() - t:.1f} s (base {base})")


def write_inventory(lab: LabState) -> Path:
    """Write ``<state>/inventory.yml`` (group ``lab``) and return its path."""
    d = lab.dir
    prof = profiles.PROFILES[lab.profile]
    hostvars = {}
    for h in lab.hosts:
        hv = {"ansible_host": h.address, "ansible_user": "root",
              "ansible_ssh_private_key_file": str(d / "id_ed25519"),
              "ansible_python_interpreter": "/usr/bin/python3"}
        if prof.hardware:
            hv["glmops_hardware"] = prof.hardware
            hv["glmops_gpus"] = list(range(prof.gpus))
        hostvars[h.name] = hv
    inv = {"all": {"children": {"lab": {
        "hosts": hostvars,
        "vars": {"ansible_ssh_common_args": f"-o UserKnownHostsFile={d / 'known_hosts'} "
                                             "-o StrictHostKeyChecking=yes -o IdentitiesOnly=yes",
                 "glmops_lab_name": lab.name, "glmops_lab_profile": lab.profile}}}}}
    path = d / "inventory.yml"
    path.write_text(f"# written by `glmops lab up --name {lab.name}`; removed by `glmops lab down`\n"
                    + yaml.safe_dump(inv, sort_keys=False))
    return path


def shipped_inventories(root: Path | None = None) -> list[dict]:
    """The checkout's lab inventories, ``<root>/inventories/lab*`` (``root``: the checkout,
    ``glmops.resources.data_root()``), sorted by name, each as ``{path, key, addresses, hardware}``:
    its ``all.vars.ansible_ssh_private_key_file``, every ``ansible_host`` of its hosts.yml in
    order, and the ``glmops_hardware`` its ``group_vars/*.yml`` set (None: unset). ``[]`` when
    there is no ``inventories/`` (an installed wheel ships none)."""
    if root is None:
        from glmops.resources import data_root

        root = data_root()
    out = []
    for inv in sorted((Path(root) / "inventories").glob("lab*/hosts.yml")):
        data = yaml.safe_load(inv.read_text()) or {}
        addresses: list[str] = []

        def walk(node: dict) -> None:
            for hv in (node.get("hosts") or {}).values():
                if isinstance(hv, dict) and hv.get("ansible_host"):
                    addresses.append(str(hv["ansible_host"]))
            for child in (node.get("children") or {}).values():
                walk(child or {})

        walk(data.get("all") or {})
        hardware = None
        for gv in sorted(inv.parent.glob("group_vars/*.yml")):
            hardware = (yaml.safe_load(gv.read_text()) or {}).get("glmops_hardware", hardware)
        out.append({"path": inv.parent, "addresses": addresses, "hardware": hardware,
                    "key": ((data.get("all") or {}).get("vars") or {}).get("ansible_ssh_private_key_file")})
    return out


def inventory_hint(lab: LabState, root: Path | None = None) -> str:
    """What ``lab up`` says to deploy with: the shipped inventories that address ``lab`` (its
    key, a subset of its addresses, its profile's hardware: README.md's ``glmops deploy -i
    inventories/lab`` after ``lab up --hosts 3 --profile cpu --name glmops``), else how to make
    one for it from them (``shipped_inventories``). Paths below the working directory are shown
    relative to it."""
    def shown(path: Path) -> str:
        rel = os.path.relpath(path)
        return path.as_posix() if rel.startswith("..") else rel

    shipped = shipped_inventories(root)
    hardware = profiles.PROFILES[lab.profile].hardware or "cpu"
    mine = {h.address for h in lab.hosts}
    key = str(lab.dir / "id_ed25519")
    fit = [inv for inv in shipped if inv["key"] == key and inv["hardware"] == hardware
           and inv["addresses"] and set(inv["addresses"]) <= mine]
    if fit:
        also = ", ".join(shown(inv["path"]) for inv in fit[1:])
        return (f"deploy to it with a shipped inventory, as README.md does: glmops deploy -i {shown(fit[0]['path'])}"
                + (f" (this lab also fits {also})" if also else ""))
    own = (f"-i a directory holding a link to {lab.dir / 'inventory.yml'} and a group_vars/all.yml naming "
           "glmops_model, glmops_engine, glmops_hardware")
    readme = next((inv for inv in shipped if inv["path"].name == "lab"), None)
    if readme is None:
        return f"glmops verbs (validate, deploy, ...): {own}"
    want = next((p for p, prof in profiles.PROFILES.items() if (prof.hardware or "cpu") == readme["hardware"]), "cpu")
    where = "" if shown(readme["path"]) == "inventories/lab" else f" ({shown(readme['path'])})"
    return (f"README.md's inventories/lab{where} addresses the lab of `glmops lab up --hosts "
            f"{len(readme['addresses'])} --profile {want} --name {Path(str(readme['key'])).parent.name}` "
            f"({', '.join(readme['addresses'])}), not this one ({lab.name}, {lab.profile}, "
            f"{', '.join(h.address for h in lab.hosts)}): for this one, a copy of it with these addresses and key "
            f"{key}, or {own} (e.g. inventories/lab's)")


def _start(lab: LabState, log: Log) -> None:
    """Start the detached supervisor that boots the hosts."""
    out = open(lab.dir / "supervisor.log", "ab")
    proc = subprocess.Popen([sys.executable, "-m", "glmops.lab.supervisor", lab.name],
                            stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True,
                            env={**os.environ, "GLMOPS_LAB_ROOT": str(spec.STATE_ROOT)})
    out.close()
    lab.supervisor_pid = proc.pid
    lab.save()


def _tcp_open(address: str, port: int = 22, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((address, port), timeout=timeout):
            return True
    except OSError:
        return False


def ssh_argv(lab: LabState, host: HostState, *command: str) -> list[str]:
    """``ssh`` argv that runs the argv ``command`` as root on ``host`` (quoted for the remote shell,
    so each item arrives as one argument) with the lab's key and known_hosts."""
    d = lab.dir
    return ["ssh", "-F", str(d / "ssh_config"), "-o", "BatchMode=yes", "-o", "ConnectTimeout=5",
            host.name, shlex.join(command)]


def _wait_one(lab: LabState, host: HostState, deadline: float) -> str:
    while time.monotonic() < deadline:
        if not H.pid_alive(lab.supervisor_pid):
            break
        if _tcp_open(host.address):
            left = max(1, int(deadline - time.monotonic()))
            proc = subprocess.run(ssh_argv(lab, host, "timeout", str(left), "systemctl",
                                           "is-system-running", "--wait"),
                                  capture_output=True, text=True, timeout=left + 10)
            state = proc.stdout.strip()
            if state == "running":
                return state
            if state in ("degraded", "maintenance", "stopping"):
                failed = subprocess.run(ssh_argv(lab, host, "systemctl", "--failed", "--no-legend",
                                                 "--plain"), capture_output=True, text=True)
                return f"{state}: {failed.stdout.strip() or proc.stderr.strip()}"
        time.sleep(0.1)
    return "timeout"


def _wait_ready(lab: LabState, log: Log, timeout: float) -> None:
    """Wait until every host answers ssh and reports ``running``; raise LabError otherwise."""
    deadline = time.monotonic() + timeout
    with concurrent.futures.ThreadPoolExecutor(max_workers=min(16, len(lab.hosts))) as pool:
        states = list(zip(lab.hosts, pool.map(lambda h: _wait_one(lab, h, deadline), lab.hosts)))
    bad = [(h, s) for h, s in states if s != "running"]
    if bad:
        problems = []
        for h, s in bad:
            tail = "".join((Path(h.dir) / "console.log").read_text(errors="replace").splitlines(True)[-8:]) \
                if (Path(h.dir) / "console.log").exists() else ""
            problems.append(f"{h.name} ({h.address}) did not come up: {s}\n  console tail:\n{tail}")
        raise LabError(problems)


def down(name: str = DEFAULT_NAME, log: Log = print, timeout: float = 20.0) -> bool:
    """Remove lab ``name`` and everything it made. Returns False when there was no such lab.

    Order: stop the supervisor (it halts the guests), kill what is left in the lab's cgroups,
    unmount, remove cgroups, nft table, bridge, host-settings claim, state dir.
    Raises LabError listing what could not be removed.
    """
    # the name becomes paths (state dir, cgroups) that are killed and removed: a name such as
    # '..' or '' would reach the machine's root cgroup and /var/lib
    problems = check_name(name) + root_problem()
    if problems:
        raise LabError(problems, exit_code=2)
    d = state_dir(name)
    try:
        lab: LabState | None = LabState.load(name)
    except FileNotFoundError:
        lab = None
    except (ValueError, TypeError, KeyError):
        lab = None
    cg_lab = H.cgroup_dirs(name)
    if lab is None and not d.exists() and not any(c.exists() for c in cg_lab) \
            and not netsetup.link_exists(bridge_name(name)):
        return False
    t0 = time.monotonic()
    # 1. processes
    hosts = _nspawn_pids(lab) if lab else {}
    if lab and H.pid_alive(lab.supervisor_pid):
        log(f"stopping {len(lab.hosts)} host(s) ({', '.join(h.name for h in lab.hosts)}): "
            f"SIGTERM to the supervisor (pid {lab.supervisor_pid}), which halts each guest")
        os.kill(lab.supervisor_pid, signal.SIGTERM)
    sup = {lab.supervisor_pid} if lab and lab.supervisor_pid else set()
    left = _wait_stopped(sup | set(hosts) | H.cgroup_pids(cg_lab), hosts, timeout, log)
    if left:
        log(f"force-stopping {len(left)} process(es) that did not stop in {timeout:.0f} s")
    for _ in range(50):
        pids = H.cgroup_pids(cg_lab) | {p for p in sup if H.pid_alive(p)}
        if not pids:
            break
        H.stop_pids(pids)
        H.wait_gone(pids, 1.0)
    errors = []
    # 2. mounts (host overlays, anything else under the state dir)
    mounts = H.mounts_under(d)
    if mounts:
        log(f"unmounting {len(mounts)} mount(s) under {d}")
    for mp in mounts:
        r = subprocess.run(["umount", mp], capture_output=True, text=True)
        if r.returncode != 0:
            r = subprocess.run(["umount", "-l", mp], capture_output=True, text=True)
            if r.returncode != 0:
                errors.append(f"umount {mp}: {r.stderr.strip()}")
    # 3. cgroups
    if any(c.exists() for c in cg_lab):
        log(f"removing the lab's cgroups ({', '.join(str(c) for c in cg_lab if c.exists())})")
    for top in cg_lab:
        try:
            H.remove_cgroup_tree(top)
        except OSError as exc:
            errors.append(f"rmdir {top}: {exc}")
        try:
            top.parent.rmdir()   # glmops/ when no other lab is left
        except OSError:
            pass
    # 4. network
    log(f"removing the bridge {lab.bridge if lab else bridge_name(name)} and the nft table "
        f"{lab.nft_table if lab else nft_table(name)}")
    with netsetup.net_lock():
        try:
            netsetup.nat_down(lab.nft_table if lab else nft_table(name))
        except netsetup.NetError as exc:
            errors.append(str(exc))
        try:
            netsetup.bridge_down(lab.bridge if lab else bridge_name(name))
        except netsetup.NetError as exc:
            errors.append(str(exc))
        netsetup.host_settings_release(name)
    # 5. files
    if not errors and d.exists():
        # one line per host (its tree holds its engine venvs: GBs, a minute on a slow disk), so a
        # long removal shows progress instead of one silent step
        hosts_dir = d / "hosts"
        if hosts_dir.is_dir() and not hosts_dir.is_symlink():
            for entry in sorted(hosts_dir.iterdir()):
                if entry.is_dir() and not entry.is_symlink():
                    log(f"removing {entry}")
                    shutil.rmtree(entry)
        log(f"removing {d}")
        shutil.rmtree(d)
    if not errors and spec.shared_dir(name).exists():
        shutil.rmtree(spec.shared_dir(name))
    try:
        spec.STATE_ROOT.rmdir()
    except OSError:
        pass
    if errors:
        raise LabError(errors)
    log(f"lab {name!r} removed in {time.monotonic() - t0:.1f} s")
    return True


def _nspawn_pids(lab: LabState) -> dict[int, str]:
    """nspawn pid -> host name, from each host's ``nspawn.pid`` (hosts without one are left out)."""
    out = {}
    for h in lab.hosts:
        try:
            out[int((Path(h.dir) / "nspawn.pid").read_text())] = h.name
        except (OSError, ValueError):
            continue
    return out


def _wait_stopped(pids: set[int], hosts: dict[int, str], timeout: float, log: Log) -> set[int]:
    """:func:`glmops.lab.hosts.wait_gone` that logs ``lab-2 stopped (4.1 s)`` as each host's nspawn
    process (``hosts``: pid -> name) exits, and ``waiting for lab-1 (30 s)`` every 30 s while any runs."""
    t = time.monotonic()
    deadline, said = t + timeout, t
    alive = {p for p in pids if H.pid_alive(p)}
    running = {pid: name for pid, name in hosts.items() if pid in alive}
    while alive and time.monotonic() < deadline:
        time.sleep(0.05)
        alive = {p for p in alive if H.pid_alive(p)}
        for pid in [p for p in running if p not in alive]:
            log(f"{running.pop(pid)} stopped ({time.monotonic() - t:.1f} s)")
        if running and time.monotonic() - said >= 30:
            said = time.monotonic()
            log(f"waiting for {', '.join(running.values())} to halt ({said - t:.0f} s)")
    return alive


def status(name: str | None = None) -> list[dict]:
    """Per lab: name, profile, subnet, bridge, inventory, supervisor, hosts with ``up`` = the
    nspawn process lives and port 22 answers."""
    out = []
    for lab in list_labs():
        if name and lab.name != name:
            continue
        rows = []
        for h in lab.hosts:
            pidfile = Path(h.dir) / "nspawn.pid"
            pid = int(pidfile.read_text()) if pidfile.exists() else 0
            alive = H.pid_alive(pid)
            rows.append({"name": h.name, "address": h.address, "machine": h.machine, "nspawn_pid": pid,
                         "up": alive and _tcp_open(h.address, timeout=0.3)})
        out.append({"name": lab.name, "profile": lab.profile, "subnet": lab.subnet,
                    "bridge": lab.bridge, "state_dir": str(lab.dir),
                    "inventory": str(lab.dir / "inventory.yml"),
                    "ssh_key": str(lab.dir / "id_ed25519"), "ssh_config": str(lab.dir / "ssh_config"),
                    "supervisor_pid": lab.supervisor_pid,
                    "supervisor_alive": H.pid_alive(lab.supervisor_pid), "hosts": rows})
    return out
