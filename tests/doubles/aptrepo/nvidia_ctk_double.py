#!/usr/bin/python3
"""Strict ``nvidia-ctk`` double (NVIDIA Container Toolkit CLI) for the lab.

Installed by the stand-in package ``nvidia-container-toolkit`` (tests/doubles/aptrepo) as
``/usr/bin/nvidia-ctk``; version from ``/usr/share/glmops-double/container-toolkit.version``.

Implemented (flags as in NVIDIA's docs, "Installing the NVIDIA Container Toolkit"):

* ``nvidia-ctk --version``
* ``nvidia-ctk runtime configure --runtime=docker [--config=FILE] [--set-as-default] [--dry-run]``:
  adds ``runtimes.nvidia = {"args": [], "path": "nvidia-container-runtime"}`` to the Docker
  daemon config (default ``/etc/docker/daemon.json``), keeping every other key; prints
  ``Wrote updated config to FILE`` and the restart hint, as the real one does.
  ``--runtime`` other than docker|containerd|crio: exit 1.
* ``nvidia-ctk cdi generate --output=FILE [--format=yaml|json]``: a CDI spec (kind
  ``nvidia.com/gpu``, one device per GPU index and UUID, plus ``all``) from
  ``nvidia-smi --query-gpu=index,uuid``; exit 1 when nvidia-smi fails (driver not loaded).
* ``nvidia-ctk cdi list``: the device names of ``/etc/cdi/nvidia.yaml``/``/var/run/cdi/nvidia.yaml``.

Unknown flags and commands exit 1 with urfave/cli's ``Incorrect Usage: flag provided but not
defined: -NAME`` / ``No help topic for 'NAME'``.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

# GLMOPS_DOUBLE_SHARE overrides the directory (the doubles' own tests)
VERSION_FILE = os.path.join(os.environ.get("GLMOPS_DOUBLE_SHARE", "/usr/share/glmops-double"), "container-toolkit.version")
CDI_DIRS = ("/etc/cdi", "/var/run/cdi")


def _usage(msg: str) -> int:
    print(f"Incorrect Usage: {msg}", file=sys.stderr)
    return 1


def _parse(args: list[str], with_value: set[str], flags: set[str]) -> tuple[dict, int | None]:
    out: dict = {}
    while args:
        a = args.pop(0)
        if not a.startswith("-"):
            return out, _usage(f"unexpected argument {a!r}")
        name, eq, value = a.lstrip("-").partition("=")
        if name in with_value:
            if not eq:
                if not args:
                    return out, _usage(f"flag needs an argument: -{name}")
                value = args.pop(0)
            out[name] = value
        elif name in flags:
            out[name] = value.lower() != "false" if eq else True
        else:
            return out, _usage(f"flag provided but not defined: -{name}")
    return out, None


def runtime_configure(args: list[str]) -> int:
    opts, rc = _parse(args, {"runtime", "config", "nvidia-runtime-name", "runtime-path"},
                      {"set-as-default", "dry-run", "cdi.enabled"})
    if rc is not None:
        return rc
    runtime = opts.get("runtime", "docker")
    if runtime not in ("docker", "containerd", "crio"):
        print(f"unrecognized runtime '{runtime}'", file=sys.stderr)
        return 1
    if runtime != "docker":
        print(f"nvidia-ctk double: only --runtime=docker is implemented (got {runtime})", file=sys.stderr)
        return 1
    path = opts.get("config", "/etc/docker/daemon.json")
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
        cfg = json.loads(text) if text.strip() else {}
    except FileNotFoundError:
        cfg = {}
    except ValueError as exc:
        print(f"unable to load config for runtime docker: {exc}", file=sys.stderr)
        return 1
    name = opts.get("nvidia-runtime-name", "nvidia")
    cfg.setdefault("runtimes", {})[name] = {"args": [], "path": opts.get("runtime-path", "nvidia-container-runtime")}
    if opts.get("set-as-default"):
        cfg["default-runtime"] = name
    if opts.get("cdi.enabled"):
        cfg.setdefault("features", {})["cdi"] = True
    out = json.dumps(cfg, indent=4)
    if opts.get("dry-run"):
        print(out)
        return 0
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(out + "\n")
    print(f"Wrote updated config to {path}")
    print("It is recommended that docker daemon be restarted.")
    return 0


def cdi_generate(args: list[str]) -> int:
    opts, rc = _parse(args, {"output", "format", "device-name-strategy", "driver-root", "mode"}, set())
    if rc is not None:
        return rc
    fmt = opts.get("format", "yaml")
    if fmt not in ("yaml", "json"):
        print(f"invalid output format: {fmt}", file=sys.stderr)
        return 1
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=index,uuid", "--format=csv,noheader"],
                             capture_output=True, text=True, check=False)
    except FileNotFoundError:
        smi = None
    if smi is None or smi.returncode != 0:
        print("failed to generate CDI spec: failed to create device CDI specs: failed to "
              "initialize NVML: ERROR_LIBRARY_NOT_FOUND", file=sys.stderr)
        return 1
    devices = []
    for line in smi.stdout.strip().splitlines():
        index, uuid = (p.strip() for p in line.split(","))
        node = {"containerEdits": {"deviceNodes": [{"path": f"/dev/nvidia{index}"}]}}
        devices += [dict(name=index, **node), dict(name=uuid, **node)]
    devices.append({"name": "all", "containerEdits": {"deviceNodes": [
        {"path": f"/dev/nvidia{d['name']}"} for d in devices if d["name"].isdigit()]}})
    spec = {"cdiVersion": "0.5.0", "kind": "nvidia.com/gpu", "devices": devices,
            "containerEdits": {"deviceNodes": [{"path": "/dev/nvidiactl"}, {"path": "/dev/nvidia-uvm"}]}}
    if fmt == "json":
        text = json.dumps(spec, indent=2) + "\n"
    else:
        text = _yaml(spec)
    out = opts.get("output")
    if not out:
        sys.stdout.write(text)
        return 0
    os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
    with open(out, "w", encoding="utf-8") as fh:
        fh.write(text)
    print(f'Generated CDI spec with version 0.5.0 to {out}')
    return 0


def _yaml(obj, indent: int = 0) -> str:
    """A small YAML emitter for the CDI spec (stdlib only; strings quoted with JSON rules)."""
    pad = "  " * indent
    lines = []
    if isinstance(obj, dict):
        for k, v in obj.items():
            if isinstance(v, (dict, list)) and v:
                lines.append(f"{pad}{k}:\n{_yaml(v, indent + 1)}")
            else:
                lines.append(f"{pad}{k}: {json.dumps(v)}\n")
    else:
        for item in obj:
            body = _yaml(item, indent + 1)
            lines.append(f"{pad}- {body.lstrip()}")
    return "".join(lines)


def cdi_list(args: list[str]) -> int:
    if args:
        return _usage(f"flag provided but not defined: {args[0]}")
    for d in CDI_DIRS:
        for name in ("nvidia.yaml", "nvidia.json"):
            path = os.path.join(d, name)
            if os.path.exists(path):
                with open(path, encoding="utf-8") as fh:
                    for line in fh:
                        s = line.strip()
                        if s.startswith("- name:") or s.startswith("name:"):
                            print(f"nvidia.com/gpu={json.loads(s.split(':', 1)[1].strip())}")
    return 0


def main(argv: list[str]) -> int:
    if argv in (["--version"], ["-v"]):
        with open(VERSION_FILE, encoding="utf-8") as fh:
            print(f"NVIDIA Container Toolkit CLI version {fh.read().strip()}")
        return 0
    if not argv:
        print("NAME:\n   NVIDIA Container Toolkit CLI - Tools to configure the NVIDIA Container Toolkit")
        return 0
    cmd = argv[:2]
    if cmd == ["runtime", "configure"]:
        return runtime_configure(argv[2:])
    if cmd == ["cdi", "generate"]:
        return cdi_generate(argv[2:])
    if cmd == ["cdi", "list"]:
        return cdi_list(argv[2:])
    if argv[0].startswith("-"):
        return _usage(f"flag provided but not defined: {argv[0]}")
    print(f"No help topic for '{' '.join(cmd)}'", file=sys.stderr)
    return 3


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
