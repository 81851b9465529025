"""The per-lab supervisor: keeps a lab's hosts booted after ``glmops lab up`` returns.

Run detached as ``python -m glmops.lab.supervisor LAB``. It starts one ``systemd-nspawn`` per
host, each moved into that host's own cgroups before exec, and waits on them:

- exit 133 (the guest ran ``systemctl reboot``): boot the host again (at most 20 times a minute);
- any other exit: the host stays down (logged to ``supervisor.log``);
- SIGTERM/SIGINT: forward SIGTERM to every nspawn (nspawn then halts its guest cleanly),
  stop restarting, exit when all have exited.

It writes each nspawn pid to ``hosts/<host>/nspawn.pid`` and exits when no host is left.
"""
from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

from glmops.lab.hosts import cgroup_dirs, nspawn_argv
from glmops.lab.spec import HostState, LabState

REBOOT_EXIT = 133
MAX_REBOOTS_PER_MIN = 20


def _log(msg: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {msg}", flush=True)


def _spawn(lab: LabState, host: HostState) -> int:
    """Fork + exec nspawn for ``host`` inside its cgroups; return the child's pid."""
    argv = nspawn_argv(lab, host, lab.binds)
    cgroups = cgroup_dirs(lab.name, host.name)
    for cg in cgroups:
        cg.mkdir(parents=True, exist_ok=True)
    console = os.open(Path(host.dir) / "console.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    pid = os.fork()
    if pid == 0:  # child: join the host's cgroups, then become nspawn
        try:
            for cg in cgroups:
                (cg / "cgroup.procs").write_text("0\n")
            devnull = os.open(os.devnull, os.O_RDONLY)
            os.dup2(devnull, 0)
            os.dup2(console, 1)
            os.dup2(console, 2)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.execvp(argv[0], argv)
        except BaseException as exc:  # noqa: BLE001 - report and leave the forked child
            os.write(2, f"cannot start {argv[0]}: {exc}\n".encode())
        os._exit(127)
    os.close(console)
    (Path(host.dir) / "nspawn.pid").write_text(f"{pid}\n")
    _log(f"{host.name}: nspawn pid {pid}")
    return pid


def run(name: str) -> int:
    """Supervise lab ``name`` until every host has exited. Returns 0."""
    lab = LabState.load(name)
    children: dict[int, HostState] = {}
    reboots: dict[str, list[float]] = {}
    stopping = False

    def on_term(signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True
        _log(f"signal {signum}: stopping {len(children)} host(s)")
        for pid in list(children):
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    for host in lab.hosts:
        children[_spawn(lab, host)] = host
    while children:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            break
        host = children.pop(pid, None)
        if host is None:
            continue
        code = os.waitstatus_to_exitcode(status)
        _log(f"{host.name}: nspawn exited {code}")
        if code == REBOOT_EXIT and not stopping:
            recent = [t for t in reboots.get(host.name, []) if t > time.monotonic() - 60]
            reboots[host.name] = recent + [time.monotonic()]
            if len(recent) < MAX_REBOOTS_PER_MIN:
                children[_spawn(lab, host)] = host
                continue
            _log(f"{host.name}: rebooting too often, leaving it down")
        (Path(host.dir) / "nspawn.pid").unlink(missing_ok=True)
    _log("all hosts down")
    return 0


if __name__ == "__main__":
    sys.exit(run(sys.argv[1]))
