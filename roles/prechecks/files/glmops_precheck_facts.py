#!/usr/bin/env python3
"""Read what glmops' prechecks compare, on the host, changing nothing (stdlib only).

Run by the prechecks role's ``glmops_prechecks`` action and by the deploy's one host read
(``glmops.hostread``: in one ``python3 -`` with the other host scripts)::

    glmops_precheck_facts.py '{"gpu_vendor": "nvidia", ...}'
      -> {"facts": {os, packages, services, disk, shm, memlock, time, rdma_devices,
                    gpu (nvidia|amd), fabric (nvidia with fabric), listening (listening)}}

Options (one JSON object; every key optional):
  gpu_vendor: nvidia | amd | none (default none): which GPU tool to ask (nvidia-smi, rocm-smi)
  fabric: bool (false): read the NVSwitch fabric state
  packages: [dpkg name pattern]: report the installed versions
  services: [unit]: report their ActiveState
  disk_path: directory whose filesystem free space is read (nearest existing parent)
  checkpoint_dir: reported as present when it exists
  memlock_properties: unit properties of the memlock probe, a transient unit started with
      systemd-run (default ["LimitMEMLOCK=infinity"]; [] skips the probe)
  listening: bool (true): list TCP listeners with their owning unit
Also: OS release, /dev/shm size, clock synchronisation (adjtimex), RDMA devices.
The comparison against what the deployment needs runs on the controller
(glmops.prechecks.evaluate). Exit 2 with {"failed": true, "msg"} on bad options.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import json
import os
import re
import shutil
import subprocess
import sys


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


#: option -> (type, default)
OPTIONS = {"gpu_vendor": (str, "none"), "fabric": (bool, False), "packages": (list, []), "services": (list, []),
           "disk_path": (str, None), "checkpoint_dir": (str, None),
           "memlock_properties": (list, ["LimitMEMLOCK=infinity"]), "listening": (bool, True)}


def options(text: str) -> dict:
    """The options from their JSON text, defaults filled in; ValueError naming what is wrong."""
    given = json.loads(text or "{}")
    if not isinstance(given, dict):
        raise ValueError("options must be one JSON object")
    unknown = sorted(set(given) - set(OPTIONS))
    bad = [f"{k}: {type(given[k]).__name__} (want {t.__name__})" for k, (t, _) in OPTIONS.items()
           if given.get(k) is not None and not isinstance(given[k], t)]
    if given.get("gpu_vendor", "none") not in ("nvidia", "amd", "none"):
        bad.append(f"gpu_vendor: {given['gpu_vendor']!r} (want nvidia, amd or none)")
    if unknown or bad:
        raise ValueError("; ".join(([f"unknown option(s): {', '.join(unknown)}"] if unknown else []) + bad))
    return {k: given[k] if given.get(k) is not None else default for k, (_, default) in OPTIONS.items()}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        p = options(argv[0] if argv else "{}")
    except ValueError as exc:
        print(json.dumps({"failed": True, "msg": f"glmops_precheck_facts: {exc}"}))
        return 2
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
    print(json.dumps({"changed": False, "facts": facts}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
