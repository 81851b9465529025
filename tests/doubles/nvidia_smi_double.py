#!/usr/bin/env python3
"""Strict ``nvidia-smi`` double for GPU-less lab hosts (``b200-sim``, ``h200-sim`` ...).

Standalone, stdlib only: copy this one file into a host and run it as ``nvidia-smi``.

Install (what the lab does for a ``*-sim`` profile)::

    python3 nvidia_smi_double.py --write-profile b200-sim --driver 575.57.08 \\
        /etc/nvidia-smi-double.json            # on the controller or in the host
    install -m 0755 nvidia_smi_double.py /usr/bin/nvidia-smi

When run under the name ``nvidia-smi`` (argv[0]) it only accepts nvidia-smi's own
arguments; the ``--write-profile`` / ``--list-profiles`` admin commands work only
when it is run under its file name.

Config file
-----------
JSON, path from env ``NVIDIA_SMI_DOUBLE_CONFIG`` (default ``/etc/nvidia-smi-double.json``).
Unknown keys are an error (exit 255, naming the key)::

    {
      "profile": "b200-sim",              # informational
      "driver_version": "575.57.08",      # str, required
      "cuda_version": "12.9",             # str, required (what the banner shows)
      "nvswitch": true,                   # bool: HGX board with NVSwitch + fabric manager
      "fabric": {"state": "Completed",    # Completed | In Progress | Not Started | Not Supported | N/A
                 "status": "Success",     # Success | N/A | an error text
                 "clique_id": "0",        # optional
                 "cluster_uuid": "..."},  # optional
      "display_fabric": true,             # false: `-q -d FABRIC` is rejected (exit 2), as
                                          # some 580 drivers do; data stays in plain `-q`
      "gpus": [                           # one entry per GPU, index order
        {"index": 0, "name": "NVIDIA B200", "memory_total_mib": 183359,
         "memory_used_mib": 0, "uuid": "GPU-...", "pci_bus_id": "00000000:18:00.0",
         "serial": "...", "vbios_version": "...", "compute_cap": "10.0",
         "power_limit_w": 1000, "fabric": {...optional per-GPU override...},
         "persistence_mode": "Enabled",   # Enabled | Disabled (default Enabled)
         "mig_mode": "Disabled",          # Enabled | Disabled | [N/A] (current; default Disabled)
         "mig_mode_pending": "Disabled",  # the same values (default: the current mode)
         "compute_mode": "Default"}       # Default | Exclusive_Process | Prohibited
      ]
    }

``write_profile()`` / ``--write-profile`` produce this from :data:`PROFILES`.

Implemented nvidia-smi forms
----------------------------
* ``nvidia-smi`` (summary table), ``nvidia-smi -L`` / ``--list-gpus``
* ``--query-gpu=F1,F2,... --format=csv[,noheader][,nounits]`` (fields in :data:`QUERY_FIELDS`,
  named as ``nvidia-smi --help-query-gpu`` names them; any other name is rejected with the real
  tool's ``Field "x" is not a valid field to query.``, exit 2). The GPU state fields
  ``persistence_mode``, ``mig.mode.current``, ``mig.mode.pending`` and ``compute_mode`` print the
  per-GPU config values with nvidia-smi's spelling (``Enabled``/``Disabled``, ``[N/A]`` where a
  GPU has no MIG, ``Default``/``Exclusive_Process``/``Prohibited``; nvidia-smi(1)).
* ``-q`` / ``--query`` (optionally ``-d``/``--display=FABRIC,MEMORY``)
* ``-i N`` / ``--id=N`` (index, UUID or PCI bus id; comma list) with the query forms
* ``--version``, ``-h``/``--help``
Anything else exits non-zero with stderr naming the argument: real nvidia-smi flags the
double does not implement exit 2 with ``nvidia-smi double: unsupported argument``;
unknown flags exit 2 with nvidia-smi's ``Invalid combination of input arguments``.
Exit codes follow nvidia-smi(1): 0 ok, 2 invalid argument, 6 query unsuccessful
(e.g. ``-i 9`` with 8 GPUs: ``No devices were found``), 9 driver not loaded (no config file).

Memory sizes: B200 183359 MiB and H200 143771 MiB are what real ``nvidia-smi
--query-gpu=name,memory.total`` prints on HGX B200 / H200 nodes (several public run logs
agree, e.g. ``NVIDIA B200, 183359 MiB``; ``NVIDIA H200, 143771 MiB``). The Fabric section
text (``State : Completed`` / ``Status : Success``, ``In Progress`` / ``N/A`` while the
fabric manager has not registered the GPU) follows NVIDIA's Fabric Manager guide.
"""
from __future__ import annotations

import json
import os
import sys
import time
import uuid as _uuid

DEFAULT_CONFIG = "/etc/nvidia-smi-double.json"
CONFIG_ENV = "NVIDIA_SMI_DOUBLE_CONFIG"

# Exit codes from nvidia-smi(1) "RETURN VALUE".
EXIT_OK = 0
EXIT_INVALID_ARG = 2
EXIT_QUERY_FAILED = 6
EXIT_DRIVER_NOT_LOADED = 9
EXIT_OTHER = 255

# PCI bus ids as seen on 8-GPU HGX baseboards.
_HGX_BUS_IDS = ["18", "2A", "3A", "5D", "9A", "AB", "BA", "DB"]

#: Hardware profiles the lab can install. memory_total_mib: see module docstring.
PROFILES: dict[str, dict] = {
    "b200-sim": {"name": "NVIDIA B200", "count": 8, "memory_total_mib": 183359,
                 "driver_version": "575.57.08", "cuda_version": "12.9",
                 "compute_cap": "10.0", "power_limit_w": 1000, "nvswitch": True},
    "h200-sim": {"name": "NVIDIA H200", "count": 8, "memory_total_mib": 143771,
                 "driver_version": "575.57.08", "cuda_version": "12.9",
                 "compute_cap": "9.0", "power_limit_w": 700, "nvswitch": True},
    "b300-sim": {"name": "NVIDIA B300 SXM6 AC", "count": 8, "memory_total_mib": 275040,
                 "driver_version": "580.95.05", "cuda_version": "13.0",
                 "compute_cap": "10.3", "power_limit_w": 1100, "nvswitch": True},
    "gb200-sim": {"name": "NVIDIA GB200", "count": 4, "memory_total_mib": 189471,
                  "driver_version": "580.95.05", "cuda_version": "13.0",
                  "compute_cap": "10.0", "power_limit_w": 1200, "nvswitch": True},
}

# Driver branch -> CUDA version the banner reports (NVIDIA driver release notes).
_CUDA_FOR_BRANCH = {"570": "12.8", "575": "12.9", "580": "13.0", "590": "13.1", "595": "13.2"}

TOP_KEYS = {"profile", "driver_version", "cuda_version", "nvswitch", "fabric", "display_fabric",
            "gpus"}
GPU_KEYS = {"index", "name", "memory_total_mib", "memory_used_mib", "uuid", "pci_bus_id",
            "serial", "vbios_version", "compute_cap", "power_limit_w", "fabric",
            "persistence_mode", "mig_mode", "mig_mode_pending", "compute_mode"}
#: per-GPU state keys -> the values nvidia-smi prints for them (nvidia-smi(1), --help-query-gpu)
STATE_VALUES = {"persistence_mode": ("Enabled", "Disabled"),
                "mig_mode": ("Enabled", "Disabled", "[N/A]"),
                "mig_mode_pending": ("Enabled", "Disabled", "[N/A]"),
                "compute_mode": ("Default", "Exclusive_Process", "Prohibited")}
FABRIC_KEYS = {"state", "status", "clique_id", "cluster_uuid"}
FABRIC_STATES = {"Completed", "In Progress", "Not Started", "Not Supported", "N/A"}

#: --query-gpu fields the double implements: name -> (header unit or None, getter).
QUERY_FIELDS = {
    "index": None, "count": None, "name": None, "gpu_name": None, "uuid": None, "gpu_uuid": None,
    "serial": None, "pci.bus_id": None, "gpu_bus_id": None, "driver_version": None,
    "vbios_version": None, "compute_cap": None, "persistence_mode": None,
    "memory.total": "MiB", "memory.used": "MiB", "memory.free": "MiB", "memory.reserved": "MiB",
    "utilization.gpu": "%", "utilization.memory": "%", "temperature.gpu": None,
    "power.draw": "W", "power.limit": "W", "pstate": None, "mig.mode.current": None,
    "mig.mode.pending": None, "compute_mode": None,
}
# Real nvidia-smi options the double deliberately does not implement (fail loudly, exit 2).
_KNOWN_UNIMPLEMENTED = {
    "topo", "nvlink", "mig", "-pm", "--persistence-mode", "-r", "--gpu-reset", "-c",
    "--compute-mode", "-pl", "--power-limit", "-lgc", "-rgc", "-ac", "-rac", "dmon", "pmon",
    "-l", "--loop", "-lms", "--loop-ms", "-x", "--xml-format", "-f", "--filename",
    "--query-compute-apps", "--query-accounted-apps", "--query-retired-pages",
    "--query-remapped-rows", "--query-supported-clocks", "-e", "--ecc-config", "-p",
    "--reset-ecc-errors", "-u", "-s", "-g", "-d", "--display", "-a", "clocks", "vgpu",
    "drain", "nvswitch", "c2c", "conf-compute", "-mig", "--help-query-gpu",
}


class DoubleError(Exception):
    """Error with an nvidia-smi style message and exit code."""

    def __init__(self, message: str, code: int = EXIT_INVALID_ARG):
        super().__init__(message)
        self.code = code


# --------------------------------------------------------------------------- profiles
def make_config(profile: str, driver: str | None = None, cuda: str | None = None,
                count: int | None = None, fabric_state: str = "Completed",
                fabric_status: str | None = None, uuid_seed: str | None = None,
                display_fabric: bool = True, mig_mode: str = "Disabled",
                persistence_mode: str = "Enabled", compute_mode: str = "Default") -> dict:
    """Return a config dict (the JSON format above) for a named profile.

    ``profile``: a key of :data:`PROFILES`. ``driver``: driver version string, default the
    profile's; ``cuda`` defaults to the CUDA version of the driver's branch. ``count``:
    GPUs (default the profile's). ``fabric_state``: one of :data:`FABRIC_STATES`;
    ``fabric_status`` defaults to ``Success`` when Completed, else ``N/A``. ``uuid_seed``
    makes GPU UUIDs reproducible (default random, so each host differs). ``mig_mode``,
    ``persistence_mode``, ``compute_mode``: every GPU's state (:data:`STATE_VALUES`).
    Raises ValueError naming the bad value and what is accepted.
    """
    problems = []
    if profile not in PROFILES:
        problems.append(f"profile {profile!r} unknown; accepted: {', '.join(sorted(PROFILES))}")
    if fabric_state not in FABRIC_STATES:
        problems.append(f"fabric_state {fabric_state!r} unknown; accepted: "
                        f"{', '.join(sorted(FABRIC_STATES))}")
    for key, value in (("mig_mode", mig_mode), ("persistence_mode", persistence_mode),
                       ("compute_mode", compute_mode)):
        if value not in STATE_VALUES[key]:
            problems.append(f"{key} {value!r} unknown; accepted: {', '.join(STATE_VALUES[key])}")
    if count is not None and not (isinstance(count, int) and 0 < count <= 16):
        problems.append(f"count {count!r} must be an int in 1..16")
    if problems:
        raise ValueError("; ".join(problems))
    p = PROFILES[profile]
    driver = driver or p["driver_version"]
    if cuda is None:
        cuda = _CUDA_FOR_BRANCH.get(driver.split(".")[0], p["cuda_version"])
    count = count or p["count"]
    seed = uuid_seed if uuid_seed is not None else _uuid.uuid4().hex
    nvswitch = bool(p["nvswitch"])
    if not nvswitch:
        fabric_state, fabric_status = "N/A", "N/A"
    if fabric_status is None:
        fabric_status = "Success" if fabric_state == "Completed" else "N/A"
    gpus = []
    for i in range(count):
        gid = _uuid.uuid5(_uuid.NAMESPACE_OID, f"{seed}/{profile}/{i}")
        bus = _HGX_BUS_IDS[i] if i < len(_HGX_BUS_IDS) else f"{0xE0 + i:02X}"
        gpus.append({
            "index": i, "name": p["name"], "memory_total_mib": p["memory_total_mib"],
            "memory_used_mib": 0, "uuid": f"GPU-{gid}", "pci_bus_id": f"00000000:{bus}:00.0",
            "serial": str(1650000000000 + int(gid.hex[:8], 16) % 1000000000),
            "vbios_version": "97.00.00.00.01", "compute_cap": p["compute_cap"],
            "power_limit_w": p["power_limit_w"], "persistence_mode": persistence_mode,
            "mig_mode": mig_mode, "mig_mode_pending": mig_mode, "compute_mode": compute_mode,
        })
    cluster = str(_uuid.uuid5(_uuid.NAMESPACE_OID, f"{seed}/cluster"))
    return {
        "profile": profile, "driver_version": driver, "cuda_version": cuda,
        "nvswitch": nvswitch,
        "fabric": {"state": fabric_state, "status": fabric_status, "clique_id": "0",
                   "cluster_uuid": cluster if nvswitch else "N/A"},
        "display_fabric": display_fabric, "gpus": gpus,
    }


def write_profile(path: str, profile: str, **kwargs) -> dict:
    """Write :func:`make_config` output as JSON to ``path`` (mode 0644); return the dict."""
    cfg = make_config(profile, **kwargs)
    validate_config(cfg, source=path)
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(cfg, fh, indent=2)
        fh.write("\n")
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)
    return cfg


# --------------------------------------------------------------------------- config
def validate_config(cfg: object, source: str = "<config>") -> list[str]:
    """Check a config dict; raise DoubleError(exit 255) listing every problem at once."""
    problems: list[str] = []
    if not isinstance(cfg, dict):
        raise DoubleError(f"nvidia-smi double: {source}: config must be a JSON object", EXIT_OTHER)
    for k in sorted(set(cfg) - TOP_KEYS):
        problems.append(f"unknown key {k!r} (accepted: {', '.join(sorted(TOP_KEYS))})")
    for k in ("driver_version", "cuda_version", "gpus"):
        if k not in cfg:
            problems.append(f"missing key {k!r}")
    fab = cfg.get("fabric", {})
    fabrics = [("fabric", fab)] if isinstance(fab, dict) else []
    if not isinstance(fab, dict):
        problems.append(f"fabric must be an object, got {fab!r}")
    gpus = cfg.get("gpus", [])
    if not isinstance(gpus, list):
        problems.append(f"gpus must be a list, got {type(gpus).__name__}")
        gpus = []
    for n, g in enumerate(gpus):
        if not isinstance(g, dict):
            problems.append(f"gpus[{n}] must be an object")
            continue
        for k in sorted(set(g) - GPU_KEYS):
            problems.append(f"gpus[{n}]: unknown key {k!r} (accepted: {', '.join(sorted(GPU_KEYS))})")
        for k in ("name", "memory_total_mib"):
            if k not in g:
                problems.append(f"gpus[{n}]: missing key {k!r}")
        if "memory_total_mib" in g and not isinstance(g["memory_total_mib"], int):
            problems.append(f"gpus[{n}].memory_total_mib must be an int (MiB), got "
                            f"{g['memory_total_mib']!r}")
        for k, accepted in STATE_VALUES.items():
            if k in g and g[k] not in accepted:
                problems.append(f"gpus[{n}].{k} {g[k]!r} not one of {list(accepted)}")
        if isinstance(g.get("fabric"), dict):
            fabrics.append((f"gpus[{n}].fabric", g["fabric"]))
    for where, f in fabrics:
        for k in sorted(set(f) - FABRIC_KEYS):
            problems.append(f"{where}: unknown key {k!r} (accepted: {', '.join(sorted(FABRIC_KEYS))})")
        if "state" in f and f["state"] not in FABRIC_STATES:
            problems.append(f"{where}.state {f['state']!r} not one of {sorted(FABRIC_STATES)}")
    if problems:
        raise DoubleError(f"nvidia-smi double: {source}: " + "; ".join(problems), EXIT_OTHER)
    return problems


def load_config(path: str | None = None) -> dict:
    """Read and validate the config; a missing file means 'driver not loaded' (exit 9)."""
    path = path or os.environ.get(CONFIG_ENV, DEFAULT_CONFIG)
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except FileNotFoundError:
        raise DoubleError("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA "
                          "driver. Make sure that the latest NVIDIA driver is installed and running."
                          f" (nvidia-smi double: no config at {path})", EXIT_DRIVER_NOT_LOADED)
    try:
        cfg = json.loads(text)
    except ValueError as exc:
        raise DoubleError(f"nvidia-smi double: {path}: invalid JSON: {exc}", EXIT_OTHER)
    validate_config(cfg, source=path)
    for n, g in enumerate(cfg["gpus"]):
        g.setdefault("index", n)
        g.setdefault("memory_used_mib", 0)
        g.setdefault("uuid", f"GPU-{_uuid.uuid5(_uuid.NAMESPACE_OID, str(n))}")
        g.setdefault("pci_bus_id", f"00000000:{_HGX_BUS_IDS[n % 8]}:00.0")
        g.setdefault("serial", "N/A")
        g.setdefault("vbios_version", "N/A")
        g.setdefault("compute_cap", "N/A")
        g.setdefault("power_limit_w", 700)
        g.setdefault("persistence_mode", "Enabled")
        g.setdefault("mig_mode", "Disabled")
        g.setdefault("mig_mode_pending", g["mig_mode"])
        g.setdefault("compute_mode", "Default")
    return cfg


def _fabric(cfg: dict, gpu: dict) -> dict:
    base = {"state": "N/A", "status": "N/A", "clique_id": "N/A", "cluster_uuid": "N/A"}
    if cfg.get("nvswitch", False):
        base.update(cfg.get("fabric") or {})
    base.update(gpu.get("fabric") or {})
    return base


# --------------------------------------------------------------------------- output
def _field_value(cfg: dict, gpu: dict, field: str, units: bool) -> str:
    mem = {"memory.total": gpu["memory_total_mib"], "memory.used": gpu["memory_used_mib"]}
    reserved = 0 if gpu["memory_total_mib"] < 1024 else 511
    mem["memory.reserved"] = reserved
    mem["memory.free"] = max(0, gpu["memory_total_mib"] - gpu["memory_used_mib"] - reserved)
    if field in mem:
        return f"{mem[field]} MiB" if units else str(mem[field])
    plain = {
        "index": str(gpu["index"]), "count": str(len(cfg["gpus"])), "name": gpu["name"],
        "gpu_name": gpu["name"], "uuid": gpu["uuid"], "gpu_uuid": gpu["uuid"],
        "serial": gpu["serial"], "pci.bus_id": gpu["pci_bus_id"], "gpu_bus_id": gpu["pci_bus_id"],
        "driver_version": cfg["driver_version"], "vbios_version": gpu["vbios_version"],
        "compute_cap": gpu["compute_cap"], "persistence_mode": gpu["persistence_mode"],
        "temperature.gpu": "31", "pstate": "P0", "mig.mode.current": gpu["mig_mode"],
        "mig.mode.pending": gpu["mig_mode_pending"], "compute_mode": gpu["compute_mode"],
    }
    if field in plain:
        return plain[field]
    if field in ("utilization.gpu", "utilization.memory"):
        return "0 %" if units else "0"
    if field == "power.draw":
        return "140.00 W" if units else "140.00"
    if field == "power.limit":
        return f"{gpu['power_limit_w']:.2f} W" if units else f"{gpu['power_limit_w']:.2f}"
    raise KeyError(field)


def query_gpu(cfg: dict, gpus: list[dict], fields_arg: str, fmt: str) -> str:
    """Render ``--query-gpu=fields_arg --format=fmt``; raise DoubleError for bad fields/format."""
    fields = [f.strip() for f in fields_arg.split(",")]
    for f in fields:
        if f not in QUERY_FIELDS:
            raise DoubleError(f'Field "{f}" is not a valid field to query. '
                              f"(nvidia-smi double implements: {', '.join(QUERY_FIELDS)})")
    opts = [o.strip() for o in fmt.split(",")]
    if not opts or opts[0] != "csv" or any(o not in ("csv", "noheader", "nounits") for o in opts):
        raise DoubleError(f'"{fmt}" is not a valid format. (nvidia-smi double implements csv, '
                          "csv,noheader, csv,nounits, csv,noheader,nounits)")
    lines = []
    if "noheader" not in opts:
        lines.append(", ".join(f"{f} [{QUERY_FIELDS[f]}]" if QUERY_FIELDS[f] else f for f in fields))
    units = "nounits" not in opts
    for g in gpus:
        lines.append(", ".join(_field_value(cfg, g, f, units) for f in fields))
    return "\n".join(lines) + "\n"


def list_gpus(gpus: list[dict]) -> str:
    """``nvidia-smi -L``: ``GPU 0: NVIDIA B200 (UUID: GPU-...)`` per GPU."""
    return "".join(f"GPU {g['index']}: {g['name']} (UUID: {g['uuid']})\n" for g in gpus)


def version_text(cfg: dict) -> str:
    """``nvidia-smi --version``."""
    drv = cfg["driver_version"]
    nvml = ".".join(drv.split(".")[:2])
    return (f"NVIDIA-SMI version  : {drv}\nNVML version        : {nvml}\n"
            f"DRIVER version      : {drv}\nCUDA Version        : {cfg['cuda_version']}\n")


def query_text(cfg: dict, gpus: list[dict], displays: list[str]) -> str:
    """``nvidia-smi -q [-d MEMORY,FABRIC]`` (a subset of the real sections, same layout)."""
    w = 40
    def kv(indent: int, key: str, val: object) -> str:
        return f"{' ' * indent}{key:<{w - indent}}: {val}\n"
    out = ["\n==============NVSMI LOG==============\n\n",
           kv(0, "Timestamp", time.strftime("%a %b %d %H:%M:%S %Y")),
           kv(0, "Driver Version", cfg["driver_version"]),
           kv(0, "CUDA Version", cfg["cuda_version"]), "\n",
           kv(0, "Attached GPUs", len(cfg["gpus"]))]
    for g in gpus:
        out.append(f"GPU {g['pci_bus_id']}\n")
        if not displays:
            out += [kv(4, "Product Name", g["name"]), kv(4, "Product Brand", "NVIDIA"),
                    kv(4, "Persistence Mode", g["persistence_mode"]),
                    "    MIG Mode\n", kv(8, "Current", g["mig_mode"]), kv(8, "Pending", g["mig_mode_pending"]),
                    kv(4, "Serial Number", g["serial"]),
                    kv(4, "GPU UUID", g["uuid"]), kv(4, "Minor Number", g["index"]),
                    kv(4, "VBIOS Version", g["vbios_version"]),
                    "    PCI\n", kv(8, "Bus Id", g["pci_bus_id"])]
        if not displays or "MEMORY" in displays:
            total, used = g["memory_total_mib"], g["memory_used_mib"]
            out += ["    FB Memory Usage\n", kv(8, "Total", f"{total} MiB"),
                    kv(8, "Reserved", "511 MiB"), kv(8, "Used", f"{used} MiB"),
                    kv(8, "Free", f"{max(0, total - used - 511)} MiB")]
        if not displays or "FABRIC" in displays:
            f = _fabric(cfg, g)
            out += ["    Fabric\n", kv(8, "State", f["state"]), kv(8, "Status", f["status"]),
                    kv(8, "CliqueId", f["clique_id"]), kv(8, "ClusterUUID", f["cluster_uuid"]),
                    "        Health\n", kv(12, "Bandwidth", "Full" if f["state"] == "Completed"
                                            else "N/A")]
        out.append("\n")
    return "".join(out)


def summary_table(cfg: dict) -> str:
    """Plain ``nvidia-smi``: the banner (driver/CUDA) and one row per GPU."""
    bar = "+" + "-" * 89 + "+\n"
    inner = (f" NVIDIA-SMI {cfg['driver_version']:<22}Driver Version: {cfg['driver_version']:<15}"
             f"CUDA Version: {cfg['cuda_version']}")
    out = [time.strftime("%a %b %d %H:%M:%S %Y") + "\n", bar, "|" + inner.ljust(89) + "|\n",
           "|-----------------------------------------+------------------------+"
           "----------------------+\n",
           "| GPU  Name                 Persistence-M | Bus-Id          Disp.A |"
           " Volatile Uncorr. ECC |\n",
           "| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage |"
           " GPU-Util  Compute M. |\n",
           "|=========================================+========================+"
           "======================|\n"]
    for g in cfg["gpus"]:
        mem = f"{g['memory_used_mib']}MiB / {g['memory_total_mib']}MiB"
        pm = "On " if g.get("persistence_mode", "Enabled") == "Enabled" else "Off"
        out.append(f"| {g['index']:>3}  {g['name'][:20]:<20}           {pm} |   "
                   f"{g['pci_bus_id']} Off |                    0 |\n")
        out.append(f"| N/A   31C    P0            140W / {g['power_limit_w']:>4}W | "
                   f"{mem:>22} |      0%      Default |\n")
    out.append(bar)
    out.append("\n" + bar + "| Processes:" + " " * 79 + "|\n" + bar +
               "|  No running processes found" + " " * 61 + "|\n" + bar)
    return "".join(out)


# --------------------------------------------------------------------------- argv
def _select(cfg: dict, ids: str | None) -> list[dict]:
    if ids is None:
        return list(cfg["gpus"])
    chosen = []
    for tok in ids.split(","):
        tok = tok.strip()
        match = [g for g in cfg["gpus"] if tok in (str(g["index"]), g["uuid"], g["pci_bus_id"])]
        if not match:
            raise DoubleError(f"No devices were found (nvidia-smi double: no GPU with id {tok!r})",
                              EXIT_QUERY_FAILED)
        chosen += match
    return chosen


def _split_opt(arg: str, rest: list[str], names: tuple[str, ...]) -> tuple[bool, str | None]:
    """Match ``--name=value``, ``--name value``, ``-x value``, ``-xvalue``."""
    for n in names:
        if arg == n:
            if not rest:
                raise DoubleError(f"Option {n} requires an argument.\n"
                                  "Please run 'nvidia-smi -h' for help.")
            return True, rest.pop(0)
        if n.startswith("--") and arg.startswith(n + "="):
            return True, arg[len(n) + 1:]
    return False, None


def run(argv: list[str], out=None) -> int:
    """Run nvidia-smi with ``argv`` (without the program name); return the exit code."""
    out = out or sys.stdout
    args = list(argv)
    mode, ids, fields, fmt, displays = "summary", None, None, None, []
    while args:
        a = args.pop(0)
        hit, val = _split_opt(a, args, ("-i", "--id"))
        if hit:
            ids = val
            continue
        hit, val = _split_opt(a, args, ("--query-gpu",))
        if hit:
            mode, fields = "query-gpu", val
            continue
        hit, val = _split_opt(a, args, ("--format",))
        if hit:
            fmt = val
            continue
        hit, val = _split_opt(a, args, ("-d", "--display"))
        if hit:
            displays = [d.strip().upper() for d in val.split(",")]
            continue
        if a in ("-L", "--list-gpus"):
            mode = "list"
        elif a in ("-q", "--query"):
            mode = "query"
        elif a == "--version":
            mode = "version"
        elif a in ("-h", "--help"):
            out.write("NVIDIA System Management Interface (nvidia-smi double)\n"
                      "Implemented: -L, -q [-d MEMORY,FABRIC], -i ID, --query-gpu=FIELDS "
                      "--format=csv[,noheader][,nounits], --version\n")
            return EXIT_OK
        elif a in _KNOWN_UNIMPLEMENTED or a.split("=")[0] in _KNOWN_UNIMPLEMENTED:
            raise DoubleError(f"nvidia-smi double: unsupported argument {a!r} (real nvidia-smi "
                              "accepts it; the double does not implement it)")
        else:
            raise DoubleError(f"Invalid combination of input arguments. Please run 'nvidia-smi -h'"
                              f" for help. (nvidia-smi double: unknown argument {a!r})")
    if mode == "query-gpu" and not fmt:
        raise DoubleError("Option --format is required with --query-gpu.\n"
                          "Please run 'nvidia-smi -h' for help.")
    if fmt and mode != "query-gpu":
        raise DoubleError("Invalid combination of input arguments: --format needs --query-gpu.")
    if displays and mode != "query":
        raise DoubleError("Invalid combination of input arguments: -d/--display needs -q.")
    cfg = load_config()
    for d in displays:
        if d not in ("MEMORY", "FABRIC"):
            raise DoubleError(f"nvidia-smi double: unsupported argument '-d {d}' "
                              "(implemented: MEMORY, FABRIC)")
        if d == "FABRIC" and not cfg.get("display_fabric", True):
            raise DoubleError("Invalid combination of input arguments. Please run 'nvidia-smi -h' "
                              "for help.")
    if mode == "version":
        out.write(version_text(cfg))
        return EXIT_OK
    gpus = _select(cfg, ids)
    if mode == "summary":
        if ids is not None:
            cfg = dict(cfg, gpus=gpus)
        out.write(summary_table(cfg))
    elif mode == "list":
        out.write(list_gpus(gpus))
    elif mode == "query":
        out.write(query_text(cfg, gpus, displays))
    else:
        out.write(query_gpu(cfg, gpus, fields, fmt))
    return EXIT_OK


def _admin(argv: list[str]) -> int:
    import argparse
    p = argparse.ArgumentParser(prog="nvidia_smi_double.py",
                                description="Write a profile config for the nvidia-smi double.")
    p.add_argument("--write-profile", metavar="PROFILE", choices=sorted(PROFILES), required=True)
    p.add_argument("--driver", help="driver version, e.g. 575.57.08")
    p.add_argument("--cuda", help="CUDA version shown (default: from the driver branch)")
    p.add_argument("--count", type=int, help="number of GPUs (default: the profile's)")
    p.add_argument("--fabric-state", default="Completed", choices=sorted(FABRIC_STATES))
    p.add_argument("--fabric-status")
    p.add_argument("--uuid-seed", help="make GPU UUIDs reproducible")
    p.add_argument("--no-display-fabric", action="store_true",
                   help="reject `-q -d FABRIC` like some 580 drivers")
    p.add_argument("--mig-mode", default="Disabled", choices=STATE_VALUES["mig_mode"])
    p.add_argument("--persistence-mode", default="Enabled", choices=STATE_VALUES["persistence_mode"])
    p.add_argument("--compute-mode", default="Default", choices=STATE_VALUES["compute_mode"])
    p.add_argument("path")
    ns = p.parse_args(argv)
    try:
        write_profile(ns.path, ns.write_profile, driver=ns.driver, cuda=ns.cuda, count=ns.count,
                      fabric_state=ns.fabric_state, fabric_status=ns.fabric_status,
                      uuid_seed=ns.uuid_seed, display_fabric=not ns.no_display_fabric,
                      mig_mode=ns.mig_mode, persistence_mode=ns.persistence_mode, compute_mode=ns.compute_mode)
    except ValueError as exc:
        p.error(str(exc))
    return 0


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    """Entry point: nvidia-smi behaviour, or the admin CLI when not run as ``nvidia-smi``."""
    argv = sys.argv[1:] if argv is None else argv
    prog = os.path.basename(prog or sys.argv[0])
    if prog != "nvidia-smi" and argv[:1] == ["--list-profiles"]:
        print(json.dumps(PROFILES, indent=2))
        return 0
    if prog != "nvidia-smi" and argv and argv[0].startswith("--write-profile"):
        return _admin(argv)
    try:
        return run(argv)
    except DoubleError as exc:
        sys.stderr.write(str(exc) + "\n")
        return exc.code


if __name__ == "__main__":
    sys.exit(main())
