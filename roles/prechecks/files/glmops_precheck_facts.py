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
  gpu_state_fields: [nvidia-smi --query-gpu field]: read per GPU (F28), e.g. mig.mode.current
  writable: {user, home, paths}: which of the paths (their trees, or where a missing one would be
      created) the user cannot write, checked as that user in a child (F11)
  memory: bool (false): MemTotal / MemAvailable from /proc/meminfo
  address: str: the interfaces (``ip -j addr``) and which of them hold this address (a name is
      resolved on the host first) (F17)
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


def nvidia_gpu_state(fields):
    """``{index: {field: value}}`` of ``nvidia-smi --query-gpu=index,<fields> --format=csv,noheader``
    (F28: mig.mode.current, persistence_mode, ... as the catalog lists them)."""
    rc, out, err = _run(["nvidia-smi", "--query-gpu=" + ",".join(["index"] + list(fields)), "--format=csv,noheader"])
    if rc != 0:
        return {"state_error": f"rc {rc}: {(err or out).strip()[:300]}"}
    state = {}
    for line in out.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == len(fields) + 1 and parts[0].isdigit():
            state[parts[0]] = dict(zip(fields, parts[1:]))
    return {"state": state}


#: the most entries the writable walk looks at (a huge cache is cut short, said so)
WALK_MAX = 50000


def _entry(path, kind, target=None):
    import grp
    import pwd
    import stat as st_

    try:
        st = os.lstat(path)
    except OSError:
        return None
    try:
        owner = pwd.getpwuid(st.st_uid).pw_name
    except KeyError:
        owner = str(st.st_uid)
    try:
        group = grp.getgrgid(st.st_gid).gr_name
    except KeyError:
        group = str(st.st_gid)
    return {"path": path, "kind": kind, "owner": owner, "group": group,
            "mode": f"{st_.S_IMODE(st.st_mode):04o}", "for": target or path}


def _candidates(paths, home, uid=None):
    """What the user must be able to write, found as root: every directory in the paths' trees
    (to create entries), every lock file (opened for writing) and, for a path that does not
    exist, its nearest existing parent (to create it).

    Nothing below HOME when HOME is missing or owned by another uid: it is the units'
    ``StateDirectory=``, which systemd creates for the user, or chowns with its whole tree when
    the top is not the user's (systemd src/shared/chown-recursive.c; it does not descend when
    the top already is: the state F11 describes)."""
    out, seen, truncated = [], set(), False
    try:
        home_uid = os.lstat(home).st_uid if home else None
    except OSError:
        home_uid = -1  # missing
    for top in paths:
        under_home = bool(home) and (top == home or top.startswith(home.rstrip("/") + "/"))
        if under_home and home_uid is not None and home_uid != uid:
            continue
        if not os.path.lexists(top):
            parent = os.path.dirname(top.rstrip("/")) or "/"
            while not os.path.lexists(parent) and parent != "/":
                parent = os.path.dirname(parent) or "/"
            e = _entry(parent, "create", top)
            if e and (parent, "create") not in seen:
                seen.add((parent, "create"))
                out.append(e)
            continue
        for root, dirs, files in os.walk(top):
            dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(root, d))]
            if root not in seen:
                seen.add(root)
                e = _entry(root, "dir")
                if e:
                    out.append(e)
            in_locks = "/.locks" in root or root.endswith(".locks")
            for name in files:
                full = os.path.join(root, name)
                if (in_locks or name.endswith(".lock")) and full not in seen and not os.path.islink(full):
                    seen.add(full)
                    e = _entry(full, "file")
                    if e:
                        out.append(e)
            if len(out) >= WALK_MAX:
                truncated = True
                break
        if truncated:
            break
    return out, truncated


def writable(opts):
    """F11: the entries of :func:`_candidates` the user cannot write, checked with access(2) in a
    child that has become the user (its groups, gid, uid): what the user's processes get,
    ACLs and read-only mounts included."""
    import pwd

    user = opts.get("user") or ""
    try:
        pw = pwd.getpwnam(user)
    except KeyError:
        return {"user": user, "exists": False}
    entries, truncated = _candidates(list(opts.get("paths") or []), opts.get("home") or "", pw.pw_uid)
    if os.geteuid() != 0 and os.geteuid() != pw.pw_uid:
        return {"user": user, "error": f"cannot check as {user}: not root"}
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: become the user, then ask the kernel
        code = 0
        try:
            os.close(rfd)
            if os.geteuid() == 0:
                os.setgroups(os.getgrouplist(user, pw.pw_gid))
                os.setgid(pw.pw_gid)
                os.setuid(pw.pw_uid)
            bad = []
            for n, e in enumerate(entries):
                mode = os.W_OK | os.X_OK if e["kind"] in ("dir", "create") else os.W_OK
                if not os.access(e["path"], mode):
                    bad.append(n)
            data = json.dumps({"denied": bad}).encode()
        except BaseException as exc:  # noqa: BLE001 - reported to the parent
            data = json.dumps({"error": f"{type(exc).__name__}: {exc}"}).encode()
            code = 1
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(wfd, view):]
        finally:
            os._exit(code)
    os.close(wfd)
    chunks = []
    while True:
        chunk = os.read(rfd, 65536)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(rfd)
    os.waitpid(pid, 0)
    try:
        got = json.loads(b"".join(chunks) or b"{}")
    except ValueError as exc:
        return {"user": user, "error": f"child answer: {exc}"}
    if "error" in got:
        return {"user": user, "error": got["error"]}
    return {"user": user, "exists": True, "checked": len(entries), "truncated": truncated,
            "denied": [entries[n] for n in got.get("denied", [])]}


def interfaces(address):
    """``{address, resolved, interfaces: [{name, addresses}], holders: [name]}`` (F17)."""
    import ipaddress
    import socket

    rc, out, err = _run(["ip", "-j", "addr", "show"])
    if rc != 0:
        return {"address": address, "error": f"ip -j addr: rc {rc}: {(err or out).strip()[:300]}"}
    try:
        links = json.loads(out or "[]")
    except ValueError as exc:
        return {"address": address, "error": f"ip -j addr: {exc}"}
    try:
        wanted = {ipaddress.ip_address(address)}
    except ValueError:
        try:
            wanted = {ipaddress.ip_address(ai[4][0].split("%")[0]) for ai in socket.getaddrinfo(address, None)}
        except (OSError, ValueError) as exc:
            return {"address": address, "error": f"cannot resolve {address}: {exc}"}
    found, holders = [], []
    for link in links:
        addrs = [a.get("local", "") for a in link.get("addr_info") or [] if a.get("local")]
        found.append({"name": link.get("ifname", "?"), "addresses": addrs})
        for a in addrs:
            try:
                if ipaddress.ip_address(a.split("%")[0]) in wanted and link.get("ifname") not in holders:
                    holders.append(link.get("ifname"))
            except ValueError:
                pass
    return {"address": address, "resolved": sorted(str(w) for w in wanted), "interfaces": found, "holders": holders}


def memory():
    out = {}
    try:
        with open("/proc/meminfo", encoding="utf-8") as fh:
            for line in fh:
                key, _, rest = line.partition(":")
                if key in ("MemTotal", "MemAvailable"):
                    out[key] = int(rest.split()[0]) * 1024  # kB
    except (OSError, ValueError, IndexError) as exc:
        return {"error": str(exc)}
    if "MemTotal" not in out:
        return {"error": "no MemTotal in /proc/meminfo"}
    return {"total_bytes": out["MemTotal"], "available_bytes": out.get("MemAvailable")}


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
           "memlock_properties": (list, ["LimitMEMLOCK=infinity"]), "listening": (bool, True),
           "gpu_state_fields": (list, []), "writable": (dict, None), "memory": (bool, False),
           "address": (str, None)}


def options(text: str) -> dict:
    """The options from their JSON text, defaults filled in; ValueError naming what is wrong."""
    given = json.loads(text or "{}")
    if not isinstance(given, dict):
        raise ValueError("options must be one JSON object")
    unknown = sorted(set(given) - set(OPTIONS))
    bad = [f"{k}: {type(given[k]).__name__} (want {t.__name__})" for k, (t, _) in OPTIONS.items()
           if given.get(k) is not None and not isinstance(given[k], t)]
    fields = given.get("gpu_state_fields") or []
    if isinstance(fields, list) and not all(isinstance(f, str) and re.fullmatch(r"[a-z_.]+", f) for f in fields):
        bad.append(f"gpu_state_fields: {fields!r} (want nvidia-smi field names such as mig.mode.current)")
    wr = given.get("writable")
    if isinstance(wr, dict) and not (isinstance(wr.get("user"), str) and isinstance(wr.get("paths"), list)
                                     and all(isinstance(x, str) and x.startswith("/") for x in wr["paths"])):
        bad.append("writable: want {user: name, home: /path, paths: [/absolute/path]}")
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
        if p["gpu_state_fields"] and not facts["gpu"].get("error"):
            facts["gpu"].update(nvidia_gpu_state(p["gpu_state_fields"]))
        if p["fabric"]:
            facts["fabric"] = fabric_states()
    elif p["gpu_vendor"] == "amd":
        facts["gpu"] = amd_gpus()
    if p["listening"]:
        facts["listening"] = listening()
    if p["writable"]:
        facts["writable"] = writable(p["writable"])
    if p["memory"]:
        facts["memory"] = memory()
    if p["address"]:
        facts["interface"] = interfaces(p["address"])
    print(json.dumps({"changed": False, "facts": facts}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
