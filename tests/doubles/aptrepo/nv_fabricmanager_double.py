#!/usr/bin/python3
"""Strict ``nv-fabricmanager`` double (NVIDIA Fabric Manager) for GPU-less lab hosts.

Installed by the stand-in package ``nvidia-fabricmanager-<branch>`` (tests/doubles/aptrepo)
as ``/usr/bin/nv-fabricmanager``; its version is the package's, read from
``/usr/share/glmops-double/fabricmanager.version`` (written at package build time).

Real behaviour reproduced (NVIDIA Fabric Manager user guide): FM refuses to run when its
version differs from the loaded driver's ("version mismatch", exit 1) and otherwise brings
the NVSwitch fabric up, after which ``nvidia-smi -q`` shows ``Fabric State: Completed``.
The loaded driver is the nvidia-smi double's (``/etc/nvidia-smi-double.json``
``driver_version``); the fabric state is written back to that file (Completed while
running, In Progress after stop or on refusal).

Accepted: ``-c/--config FILE``, ``-v/--version``, ``-h/--help``, ``-r/--restart``.
Anything else: exit 1 with ``nv-fabricmanager: unrecognized option``. Config keys
outside :data:`CONFIG_KEYS`: exit 1 naming the key. ``DAEMONIZE=1`` is refused (the
stand-in unit runs it in the foreground, Type=simple).
"""
from __future__ import annotations

import json
import os
import signal
import sys
import time

# GLMOPS_DOUBLE_SHARE overrides the directory (the doubles' own tests)
VERSION_FILE = os.path.join(os.environ.get("GLMOPS_DOUBLE_SHARE", "/usr/share/glmops-double"), "fabricmanager.version")
SMI_CONFIG = os.environ.get("NVIDIA_SMI_DOUBLE_CONFIG", "/etc/nvidia-smi-double.json")
CONFIG_KEYS = {
    "LOG_LEVEL", "LOG_FILE_NAME", "LOG_APPEND_TO_LOG", "LOG_FILE_MAX_SIZE", "LOG_USE_SYSLOG",
    "DAEMONIZE", "BIND_INTERFACE_IP", "STARTING_TCP_PORT", "FABRIC_MODE",
    "FABRIC_MODE_RESTART", "STATE_FILE_NAME", "FM_CMD_BIND_INTERFACE", "FM_CMD_PORT_NUMBER",
    "FM_STAY_RESIDENT_ON_FAILURES", "ACCESS_LINK_FAILURE_MODE", "TRUNK_LINK_FAILURE_MODE",
    "NVSWITCH_FAILURE_MODE", "ABORT_CUDA_JOBS_ON_FM_EXIT", "TOPOLOGY_FILE_PATH",
    "DATABASE_PATH", "FM_CMD_UNIX_SOCKET_PATH", "FM_LISTEN_UNIX_SOCKET_PATH",
}


def _version() -> str:
    with open(VERSION_FILE, encoding="utf-8") as fh:
        return fh.read().strip()


def _set_fabric(state: str, status: str) -> None:
    try:
        with open(SMI_CONFIG, encoding="utf-8") as fh:
            cfg = json.load(fh)
    except OSError:
        return
    if not cfg.get("nvswitch"):
        return
    cfg["fabric"] = dict(cfg.get("fabric") or {}, state=state, status=status)
    tmp = f"{SMI_CONFIG}.fm{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(cfg, fh, indent=2)
        fh.write("\n")
    os.replace(tmp, SMI_CONFIG)


def _read_config(path: str) -> dict[str, str]:
    out = {}
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            key, sep, value = line.partition("=")
            if not sep or key.strip() not in CONFIG_KEYS:
                raise SystemExit(f"nv-fabricmanager: {path}:{n}: unknown config entry {key.strip()!r}")
            out[key.strip()] = value.strip()
    return out


def main(argv: list[str]) -> int:
    config = "/usr/share/nvidia/nvswitch/fabricmanager.cfg"
    args = list(argv)
    while args:
        a = args.pop(0)
        if a in ("-v", "--version"):
            print(f"Fabric Manager version is : {_version()}")
            return 0
        if a in ("-h", "--help"):
            print("usage: nv-fabricmanager [-h] [-v] [-c CONFIG] [-r]")
            return 0
        if a in ("-c", "--config") and args:
            config = args.pop(0)
        elif a.startswith("--config="):
            config = a.split("=", 1)[1]
        elif a in ("-r", "--restart"):
            pass
        else:
            print(f"nv-fabricmanager: unrecognized option '{a}'", file=sys.stderr)
            return 1
    cfg = _read_config(config)
    if cfg.get("DAEMONIZE", "1") != "0":
        print("nv-fabricmanager double: DAEMONIZE must be 0 (runs under systemd Type=simple)",
              file=sys.stderr)
        return 1
    mine = _version()
    try:
        with open(SMI_CONFIG, encoding="utf-8") as fh:
            driver = json.load(fh)["driver_version"]
    except (OSError, ValueError, KeyError):
        print("nv-fabricmanager: failed to open the NVIDIA driver (driver not loaded)", file=sys.stderr)
        return 1
    if driver != mine:
        _set_fabric("In Progress", "N/A")
        print(f"fabric manager version {mine} is not matching with the driver version {driver}; "
              "fabric manager and driver versions must match", file=sys.stderr)
        return 1

    def stop(signum, frame):  # noqa: ARG001
        _set_fabric("In Progress", "N/A")
        sys.exit(0)

    signal.signal(signal.SIGTERM, stop)
    _set_fabric("Completed", "Success")
    print(f"Fabric Manager {mine} started; fabric state Completed", flush=True)
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
