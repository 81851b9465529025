#!/usr/bin/python3
"""Strict ``dockerd`` + ``docker`` double for the lab (no container engine can run here).

Installed by the stand-in package ``docker-ce`` (tests/doubles/aptrepo) as ``/usr/bin/dockerd``
and ``/usr/bin/docker`` (one file; the program name picks the role).

``dockerd [--config-file FILE]`` loads the daemon config (default ``/etc/docker/daemon.json``)
the way the real daemon does: invalid JSON or a key outside :data:`DAEMON_KEYS` exits 1 with
``unable to configure the Docker daemon with file FILE: ...`` (dockerd's own words), a runtime
without ``path`` is refused. Then it records its state (pid, start time, runtimes) in
``/run/docker-double/state.json`` and stays in the foreground until SIGTERM.

``docker info --format '{{json .Runtimes}}'`` prints the runtimes of the running daemon
(``runc`` plus the configured ones); ``docker info --format '{{.ServerVersion}}'`` the version.
Without a running daemon: exit 1, ``Cannot connect to the Docker daemon at
unix:///var/run/docker.sock. Is the docker daemon running?``. Other commands exit 125 with
``docker: unknown command``; other flags exit 125 with ``unknown flag``.
"""
from __future__ import annotations

import json
import os
import signal
import sys
import time

STATE = os.environ.get("GLMOPS_DOCKERD_DOUBLE_STATE", "/run/docker-double/state.json")
# GLMOPS_DOUBLE_SHARE overrides the directory (the doubles' own tests)
VERSION_FILE = os.path.join(os.environ.get("GLMOPS_DOUBLE_SHARE", "/usr/share/glmops-double"), "docker.version")
# daemon.json keys (docs.docker.com, "dockerd" reference, daemon configuration file)
DAEMON_KEYS = {
    "authorization-plugins", "bip", "bridge", "builder", "cgroup-parent", "containerd",
    "data-root", "debug", "default-address-pools", "default-cgroupns-mode", "default-ipc-mode",
    "default-runtime", "default-shm-size", "default-ulimits", "dns", "dns-opts", "dns-search",
    "exec-opts", "experimental", "features", "group", "hosts", "insecure-registries",
    "ip", "ip-forward", "ip-masq", "iptables", "ip6tables", "ipv6", "labels", "live-restore",
    "log-driver", "log-level", "log-opts", "max-concurrent-downloads", "max-concurrent-uploads",
    "mtu", "no-new-privileges", "registry-mirrors", "runtimes", "selinux-enabled",
    "storage-driver", "storage-opts", "tls", "tlscacert", "tlscert", "tlskey", "tlsverify",
    "userland-proxy", "userns-remap", "cdi-spec-dirs", "shutdown-timeout",
}


def _version() -> str:
    with open(VERSION_FILE, encoding="utf-8") as fh:
        return fh.read().strip()


def dockerd(argv: list[str]) -> int:
    path = "/etc/docker/daemon.json"
    args = list(argv)
    while args:
        a = args.pop(0)
        if a == "--config-file" and args:
            path = args.pop(0)
        elif a.startswith("--config-file="):
            path = a.split("=", 1)[1]
        elif a in ("-v", "--version"):
            print(f"Docker version {_version()}")
            return 0
        elif a.startswith("-H") or a.startswith("--containerd"):
            if "=" not in a and args:
                args.pop(0)
        else:
            print(f"unknown flag: {a}", file=sys.stderr)
            return 1
    cfg = {}
    if os.path.exists(path):
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
        try:
            cfg = json.loads(text) if text.strip() else {}
        except ValueError as exc:
            print(f"unable to configure the Docker daemon with file {path}: {exc}", file=sys.stderr)
            return 1
        unknown = sorted(set(cfg) - DAEMON_KEYS)
        if unknown:
            print(f"unable to configure the Docker daemon with file {path}: the following directives "
                  f"don't match any configuration option: {', '.join(unknown)}", file=sys.stderr)
            return 1
        for name, rt in (cfg.get("runtimes") or {}).items():
            if not isinstance(rt, dict) or not rt.get("path"):
                print(f"unable to configure the Docker daemon with file {path}: runtime {name}: "
                      "path is required", file=sys.stderr)
                return 1
    runtimes = {"runc": {"path": "runc"}, **(cfg.get("runtimes") or {})}
    os.makedirs(os.path.dirname(STATE), exist_ok=True)
    with open(STATE, "w", encoding="utf-8") as fh:
        json.dump({"pid": os.getpid(), "started": time.time(), "runtimes": runtimes,
                   "default_runtime": cfg.get("default-runtime", "runc")}, fh)

    def stop(signum, frame):  # noqa: ARG001
        try:
            os.unlink(STATE)
        except OSError:
            pass
        sys.exit(0)

    signal.signal(signal.SIGTERM, stop)
    print(f"API listen on /run/docker.sock (double, version {_version()})", flush=True)
    while True:
        time.sleep(3600)


def docker(argv: list[str]) -> int:
    if argv in (["--version"], ["-v"]):
        print(f"Docker version {_version()}, build double")
        return 0
    if not argv or argv[0] != "info":
        print(f"docker: unknown command: docker {argv[0] if argv else ''}", file=sys.stderr)
        return 125
    fmt = None
    args = argv[1:]
    while args:
        a = args.pop(0)
        if a in ("-f", "--format") and args:
            fmt = args.pop(0)
        elif a.startswith("--format="):
            fmt = a.split("=", 1)[1]
        else:
            print(f"unknown flag: {a}", file=sys.stderr)
            return 125
    try:
        with open(STATE, encoding="utf-8") as fh:
            state = json.load(fh)
        os.kill(state["pid"], 0)
    except (OSError, ValueError, KeyError):
        print("Cannot connect to the Docker daemon at unix:///var/run/docker.sock. "
              "Is the docker daemon running?", file=sys.stderr)
        return 1
    if fmt == "{{json .Runtimes}}":
        print(json.dumps(state["runtimes"]))
    elif fmt == "{{.DefaultRuntime}}":
        print(state["default_runtime"])
    elif fmt == "{{.ServerVersion}}":
        print(_version())
    elif fmt is None:
        print(f"Server Version: {_version()}\nRuntimes: {' '.join(state['runtimes'])}\n"
              f"Default Runtime: {state['default_runtime']}")
    else:
        print(f"docker double: --format {fmt!r} is not implemented", file=sys.stderr)
        return 125
    return 0


def main() -> int:
    prog = os.path.basename(sys.argv[0])
    return dockerd(sys.argv[1:]) if prog == "dockerd" else docker(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
