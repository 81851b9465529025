#!/usr/bin/python
"""Ansible module: read what glmops' prechecks compare, on the host, changing nothing."""
from __future__ import annotations

DOCUMENTATION = r"""
module: glmops_precheck_facts
short_description: Read the host facts glmops prechecks compare (read-only)
description:
  - OS release, GPUs (nvidia-smi or rocm-smi), NVSwitch fabric state, installed package
    versions, free disk under a directory, /dev/shm size, the memlock limit a systemd service
    gets (a transient unit started with systemd-run), TCP listeners with their owning unit,
    clock synchronisation (adjtimex) and RDMA devices.
  - The comparison against what the deployment needs runs on the controller
    (glmops.prechecks.evaluate, through the glmops_prechecks action of the same role).
options:
  gpu_vendor: {type: str, default: none, choices: [nvidia, amd, none], description: which GPU tool to ask}
  fabric: {type: bool, default: false, description: read the NVSwitch fabric state}
  packages: {type: list, elements: str, default: [], description: dpkg name patterns to report versions of}
  services: {type: list, elements: str, default: [], description: units whose ActiveState to report}
  disk_path: {type: str, description: directory whose filesystem free space is read (nearest existing parent)}
  checkpoint_dir: {type: str, description: reported as present when it exists}
  memlock_properties: {type: list, elements: str, default: ["LimitMEMLOCK=infinity"], description: unit properties of the probe; empty list skips the probe}
  listening: {type: bool, default: true, description: list TCP listeners}
author: glmops
"""

import ctypes
import ctypes.util
import os
import re
import shutil
import subprocess

from ansible.module_utils.basic import AnsibleModule


def _run(argv, timeout=60):
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
        return p.returncode, p.stdout, p.stderr
    except FileNotFoundError:
        return 127, "", f"{argv[0]}: not found"
    except subprocess.TimeoutExpired:
        return 124, "", f"{argv[0]}: timed out after {timeout} s"


def os_release():
    out = {}
    try:
        with open("/etc/os-release", encoding="utf-8") as fh:
            for line in fh:
                key, sep, value = line.strip().partition("=")
                if sep:
                    out[key.lower()] = value.strip().strip('"')
    except OSError as exc:
        out["error"] = str(exc)
    return {k: out.get(k, "") for k in ("id", "version_id", "pretty_name")}


def nvidia_gpus():
    rc, out, err = _run(["nvidia-smi", "--query-gpu=index,name,driver_version", "--format=csv,noheader"])
    if rc != 0:
        return {"error": f"rc {rc}: {(err or out).strip()[:300]}", "gpus": []}
    gpus, driver = [], ""
    for line in out.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 3:
            gpus.append({"index": int(parts[0]), "name": parts[1]})
            driver = parts[2]
    return {"gpus": gpus, "driver_version": driver}


def amd_gpus():
    rc, out, err = _run(["rocm-smi", "--showproductname", "--json"])
    if rc != 0:
        return {"error": f"rc {rc}: {(err or out).strip()[:300]}", "gpus": []}
    import json

    try:
        data = json.loads(out)
    except ValueError as exc:
        return {"error": f"rocm-smi JSON: {exc}", "gpus": []}
    gpus = []
    for key in sorted(k for k in data if k.startswith("card")):
        card = data[key]
        name = card.get("Card Series") or card.get("Card series") or card.get("Card SKU") or ""
        gpus.append({"index": int(key[4:]), "name": name})
    return {"gpus": gpus, "driver_version": ""}


def fabric_states():
    rc, out, err = _run(["nvidia-smi", "-q", "-d", "FABRIC"])
    if rc != 0:  # some drivers reject -d FABRIC; the section is also in plain -q
        rc, out, err = _run(["nvidia-smi", "-q"])
    if rc != 0:
        return {"error": (err or out).strip()[:300], "states": []}
    states, in_fabric = [], False
    for line in out.splitlines():
        stripped = line.strip()
        if stripped == "Fabric":
            in_fabric = True
            continue
        if in_fabric and stripped.startswith("State") and ":" in stripped:
            states.append(stripped.split(":", 1)[1].strip())
            in_fabric = False
    return {"states": states}


def packages(patterns):
    if not patterns:
        return {}
    rc, out, _ = _run(["dpkg-query", "-W", "-f", "${Package}\t${Version}\t${db:Status-Abbrev}\n", *patterns])
    found = {}
    for line in out.splitlines():
        parts = line.split("\t")
        if len(parts) == 3 and parts[2][1:2] == "i":  # "ii " installed, "hi " held
            found[parts[0]] = parts[1]
    return found


def services(names):
    out = {}
    for name in names:
        _, stdout, _ = _run(["systemctl", "show", "-p", "ActiveState", "--value", f"{name}.service"])
        out[name] = stdout.strip() or "unknown"
    return out


def disk(path, checkpoint_dir):
    if not path:
        return {}
    probe = path
    while probe and not os.path.isdir(probe):
        probe = os.path.dirname(probe.rstrip("/")) or "/"
    try:
        st = os.statvfs(probe)
    except OSError as exc:
        return {"path": probe, "error": str(exc)}
    return {"path": probe, "free_bytes": st.f_bavail * st.f_frsize,
            "checkpoint_present": bool(checkpoint_dir) and os.path.isdir(checkpoint_dir)}


def shm():
    try:
        st = os.statvfs("/dev/shm")
    except OSError as exc:
        return {"error": str(exc)}
    return {"size_bytes": st.f_blocks * st.f_frsize}


def memlock(properties):
    """The memlock limit a service started by systemd with ``properties`` actually gets (F07)."""
    if not properties:
        return {}
    if not shutil.which("systemd-run"):
        return {"error": "systemd-run not found"}
    argv = ["systemd-run", "--wait", "--pipe", "--quiet", "--collect"]
    for prop in properties:
        argv += ["-p", prop]
    rc, out, err = _run(argv + ["/bin/sh", "-c", "ulimit -l"], timeout=60)
    text = out.strip()
    if rc != 0 or not text:
        return {"error": f"systemd-run rc {rc}: {(err or out).strip()[:300]}"}
    if text == "unlimited":
        return {"value": "infinity", "raw": text}
    try:
        return {"value": int(text) * 1024, "raw": text}  # ulimit -l prints KiB
    except ValueError:
        return {"error": f"unexpected ulimit -l output {text!r}"}


def _unit_of(pid):
    try:
        with open(f"/proc/{pid}/cgroup", encoding="utf-8") as fh:
            for line in fh:
                for part in reversed(line.strip().split("/")):
                    if part.endswith(".service"):
                        return part
    except OSError:
        pass
    return ""


def listening():
    rc, out, err = _run(["ss", "-Htlnp"])
    if rc != 0:
        return [{"error": (err or out).strip()[:300]}]
    socks = []
    for line in out.splitlines():
        cols = line.split()
        if len(cols) < 4:
            continue
        local = cols[3]
        port = local.rsplit(":", 1)[-1]
        if not port.isdigit():
            continue
        proc, unit = "", ""
        m = re.search(r'users:\(\("([^"]+)",pid=(\d+)', line)
        if m:
            proc = f"{m.group(1)} (pid {m.group(2)})"
            unit = _unit_of(m.group(2))
        socks.append({"address": local, "port": int(port), "process": proc + (f" [{unit}]" if unit else ""),
                      "unit": unit})
    return socks


class _Timex(ctypes.Structure):
    # struct timex (linux/timex.h): only the leading fields are read; padding covers the rest
    _fields_ = [("modes", ctypes.c_uint), ("pad0", ctypes.c_int), ("offset", ctypes.c_long),
                ("freq", ctypes.c_long), ("maxerror", ctypes.c_long), ("esterror", ctypes.c_long),
                ("status", ctypes.c_int), ("rest", ctypes.c_char * 256)]


def time_sync():
    """Kernel clock state (what timedatectl's NTPSynchronized reports) and the sync daemon."""
    source = ""
    for unit in ("chrony", "chronyd", "systemd-timesyncd", "ntpsec", "ntp"):
        _, out, _ = _run(["systemctl", "show", "-p", "ActiveState", "--value", f"{unit}.service"])
        if out.strip() == "active":
            source = unit
            break
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        tx = _Timex()
        state = libc.adjtimex(ctypes.byref(tx))
    except (OSError, AttributeError) as exc:
        return {"synchronized": False, "source": source, "error": str(exc)}
    synced = state not in (-1, 5) and not (tx.status & 0x40)  # TIME_ERROR, STA_UNSYNC
    return {"synchronized": bool(synced), "source": source or ("kernel clock synchronized" if synced else "")}


def rdma_devices():
    try:
        return sorted(os.listdir("/sys/class/infiniband"))
    except OSError:
        return []


def main():
    module = AnsibleModule(
        argument_spec=dict(
            gpu_vendor=dict(type="str", default="none", choices=["nvidia", "amd", "none"]),
            fabric=dict(type="bool", default=False),
            packages=dict(type="list", elements="str", default=[]),
            services=dict(type="list", elements="str", default=[]),
            disk_path=dict(type="str"),
            checkpoint_dir=dict(type="str"),
            memlock_properties=dict(type="list", elements="str", default=["LimitMEMLOCK=infinity"]),
            listening=dict(type="bool", default=True),
        ),
        supports_check_mode=True,
    )
    p = module.params
    facts = {"os": os_release(), "packages": packages(p["packages"]), "services": services(p["services"]),
             "disk": disk(p["disk_path"], p["checkpoint_dir"]), "shm": shm(),
             "memlock": memlock(p["memlock_properties"]), "time": time_sync(),
             "rdma_devices": rdma_devices()}
    if p["gpu_vendor"] == "nvidia":
        facts["gpu"] = nvidia_gpus()
        if p["fabric"]:
            facts["fabric"] = fabric_states()
    elif p["gpu_vendor"] == "amd":
        facts["gpu"] = amd_gpus()
    if p["listening"]:
        facts["listening"] = listening()
    module.exit_json(changed=False, facts=facts)


if __name__ == "__main__":
    main()
