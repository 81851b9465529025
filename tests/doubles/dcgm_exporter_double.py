#!/usr/bin/env python3
"""Strict ``dcgm-exporter`` double for GPU-less lab hosts: NVIDIA DCGM-Exporter 4.5.3-4.8.2.

Standalone, stdlib only: install as ``<dir>/usr/bin/dcgm-exporter`` (what :func:`build_archive`
lays out: NVIDIA's bare-metal archive) on a ``*-sim`` lab host, beside the nvidia-smi double.

Sources (NVIDIA/dcgm-exporter at tag ``4.5.3-4.8.2``, commit 691c92762eb5):

* ``pkg/cmd/app.go``: every flag, its aliases, kind (urfave/cli v2 String/Int/Bool/StringSlice
  flags, plus the built-in ``--help``/``-h`` and ``--version``/``-v``) and default
  (:data:`FLAGS`); ``parseDeviceOptions`` (``-d``/``-s``/``-p``: ``f``, ``g``, ``i``,
  ``g:0,1``, ``i:0,2-4``); ``--dcgm-log-level`` values; ``--log-format`` text|json.
* ``internal/pkg/counters/counter_config.go``: the ``-f`` CSV (``#`` comments, three fields
  ``name, prometheus type, help``; "malformed CSV record ... expected 3 fields"; "could not
  find Prometheus metric type"); ``variables.go``: the types gauge counter histogram summary label.
* ``internal/pkg/rendermetrics/render_metrics.go``: the exposition (``# HELP``/``# TYPE``, then
  ``NAME{gpu="0",UUID="GPU-...",pci_bus_id="...",device="nvidia0",modelName="...",Hostname="..."} V``).
* ``internal/pkg/server/server.go``: routes ``/health`` and ``/metrics``.
* ``packaging/config-files/systemd/nvidia-dcgm-exporter.service`` and the Makefile's
  ``package-build`` (the bare-metal archive: ``dcgm_exporter/usr/bin/dcgm-exporter``,
  ``dcgm_exporter/etc/dcgm-exporter/``, ``dcgm_exporter/lib/systemd/system/nvidia-dcgm-exporter.service``).

Refused, exit 1 with the real tool's message (urfave/cli prints ``Incorrect Usage: ...``):
an undefined flag; a flag without its value; a non-integer value of an Int flag; a non-boolean
``--bool=x``; a device option ``parseDeviceOptions`` refuses; a ``--dcgm-log-level`` or
``--log-format`` outside its values; a ``-f`` file that is missing, malformed, names an unknown
metric type or a field outside the upstream ``etc/*.csv`` lists (:data:`FIELDS`; the real tool
accepts any go-dcgm field, glmops uses only those); an ``--address`` that is not
``HOST:PORT`` or that cannot be bound; ``--kubernetes`` without the kubelet pod-resources socket;
``--configmap-data`` other than ``none`` without ``--kubernetes``; ``--web-config-file`` missing.
Stricter than the real tool: a positional argument is refused (Go's flag parser would stop there
and silently ignore every flag after it).

GPUs: from the nvidia-smi double's config (``NVIDIA_SMI_DOUBLE_CONFIG``, default
``/etc/nvidia-smi-double.json``): index, name, uuid, pci_bus_id, memory_used_mib; without it
the double exits 1 as the real one does without a driver (``Error: libdcgm.so not found`` /
no GPUs). Injected faults: ``DCGM_EXPORTER_DOUBLE_XID`` = ``GPU:XID[,GPU:XID]`` (the last Xid
of that GPU, DCGM_FI_DEV_XID_ERRORS) and ``DCGM_EXPORTER_DOUBLE_ECC_DBE`` = ``GPU:N`` (the
double-bit volatile ECC counter).

``DCGM_EXPORTER_DOUBLE_DRY_RUN=1``: validate, print the parsed flags as JSON, exit 0.
"""
from __future__ import annotations

import csv
import http.server
import io
import json
import os
import re
import socket
import sys
import tarfile
from pathlib import Path

VERSION = "4.5.3-4.8.2"
#: canonical name -> (aliases, kind, default); pkg/cmd/app.go at tag 4.5.3-4.8.2, in its order
FLAGS: dict[str, tuple[tuple[str, ...], str, object]] = {
    "collectors": (("f",), "string", "/etc/dcgm-exporter/default-counters.csv"),
    "address": (("a",), "string", ":9400"),
    "collect-interval": (("c",), "int", 30000),
    "kubernetes": (("k",), "bool", False),
    "use-old-namespace": (("o",), "bool", False),
    "cpu-devices": (("p",), "string", "f"),
    "configmap-data": (("m",), "string", "none"),
    "remote-hostengine-info": (("r",), "string", "localhost:5555"),
    "kubernetes-enable-pod-labels": ((), "bool", False),
    "kubernetes-enable-pod-uid": ((), "bool", False),
    "kubernetes-gpu-id-type": ((), "string", "uid"),
    "kubernetes-pod-label-allowlist-regex": ((), "slice", []),
    "devices": (("d",), "string", "f"),
    "no-hostname": (("n",), "bool", False),
    "switch-devices": (("s",), "string", "f"),
    "fake-gpus": ((), "bool", False),
    "web-config-file": ((), "string", ""),
    "xid-count-window-size": (("x",), "int", 300000),
    "replace-blanks-in-model-name": (("rbmn",), "bool", False),
    "debug": ((), "bool", False),
    "clock-events-count-window-size": ((), "int", 300000),
    "enable-dcgm-log": ((), "bool", False),
    "dcgm-log-level": ((), "string", "NONE"),
    "log-format": ((), "string", "text"),
    "pod-resources-kubelet-socket": ((), "string", "/var/lib/kubelet/pod-resources/kubelet.sock"),
    "hpc-job-mapping-dir": ((), "string", ""),
    "nvidia-resource-names": ((), "slice", []),
    "kubernetes-virtual-gpus": ((), "bool", False),
    "dump-enabled": ((), "bool", False),
    "dump-directory": ((), "string", "/tmp/dcgm-exporter-debug"),
    "dump-retention": ((), "int", 24),
    "dump-compression": ((), "bool", True),
    "kubernetes-enable-dra": ((), "bool", False),
    "disable-startup-validate": ((), "bool", False),
    "enable-gpu-bind-unbind-watch": ((), "bool", False),
    "gpu-bind-unbind-poll-interval": ((), "string", "1s"),
    "enable-pprof": ((), "bool", False),
    "web-systemd-socket": ((), "bool", False),  # Linux only (app.go appends it there)
    "help": (("h",), "bool", False),  # urfave/cli v2 built-ins
    "version": (("v",), "bool", False),
}
DCGM_LOG_LEVELS = ("NONE", "FATAL", "ERROR", "WARN", "INFO", "DEBUG", "VERB")
LOG_FORMATS = ("text", "json")
GPU_ID_TYPES = ("uid", "device-name")
PROM_TYPES = ("gauge", "counter", "histogram", "summary", "label")
#: every field named (commented or not) in etc/default-counters.csv and etc/dcp-metrics-included.csv
FIELDS = frozenset("""
DCGM_EXP_CLOCK_EVENTS_COUNT DCGM_EXP_GPU_HEALTH_STATUS DCGM_EXP_P2P_STATUS DCGM_EXP_XID_ERRORS_COUNT
DCGM_FI_DEV_BOARD_LIMIT_VIOLATION DCGM_FI_DEV_BRAND DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS DCGM_FI_DEV_DEC_UTIL
DCGM_FI_DEV_ECC_DBE_AGG_TOTAL DCGM_FI_DEV_ECC_DBE_VOL_TOTAL DCGM_FI_DEV_ECC_INFOROM_VER DCGM_FI_DEV_ECC_SBE_AGG_TOTAL
DCGM_FI_DEV_ECC_SBE_VOL_TOTAL DCGM_FI_DEV_ENC_UTIL DCGM_FI_DEV_FB_FREE DCGM_FI_DEV_FB_RESERVED DCGM_FI_DEV_FB_USED
DCGM_FI_DEV_GPU_TEMP DCGM_FI_DEV_GPU_UTIL DCGM_FI_DEV_INFOROM_IMAGE_VER DCGM_FI_DEV_LOW_UTIL_VIOLATION
DCGM_FI_DEV_MEMORY_TEMP DCGM_FI_DEV_MEM_CLOCK DCGM_FI_DEV_MEM_COPY_UTIL DCGM_FI_DEV_NVLINK_BANDWIDTH_L0
DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL
DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL
DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL DCGM_FI_DEV_OEM_INFOROM_VER DCGM_FI_DEV_PCIE_REPLAY_COUNTER
DCGM_FI_DEV_POWER_INFOROM_VER DCGM_FI_DEV_POWER_USAGE DCGM_FI_DEV_POWER_VIOLATION DCGM_FI_DEV_RELIABILITY_VIOLATION
DCGM_FI_DEV_RETIRED_DBE DCGM_FI_DEV_RETIRED_PENDING DCGM_FI_DEV_RETIRED_SBE DCGM_FI_DEV_ROW_REMAP_FAILURE
DCGM_FI_DEV_SERIAL DCGM_FI_DEV_SM_CLOCK DCGM_FI_DEV_SYNC_BOOST_VIOLATION DCGM_FI_DEV_THERMAL_VIOLATION
DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS DCGM_FI_DEV_VBIOS_VERSION
DCGM_FI_DEV_VGPU_LICENSE_STATUS DCGM_FI_DEV_XID_ERRORS DCGM_FI_DRIVER_VERSION DCGM_FI_NVML_VERSION
DCGM_FI_PROF_DRAM_ACTIVE DCGM_FI_PROF_GR_ENGINE_ACTIVE DCGM_FI_PROF_PCIE_RX_BYTES DCGM_FI_PROF_PCIE_TX_BYTES
DCGM_FI_PROF_PIPE_FP16_ACTIVE DCGM_FI_PROF_PIPE_FP32_ACTIVE DCGM_FI_PROF_PIPE_FP64_ACTIVE
DCGM_FI_PROF_PIPE_TENSOR_ACTIVE DCGM_FI_PROF_SM_ACTIVE DCGM_FI_PROF_SM_OCCUPANCY
""".split())
SMI_CONFIG_ENV = "NVIDIA_SMI_DOUBLE_CONFIG"
SMI_CONFIG = "/etc/nvidia-smi-double.json"
_GO_BOOL = {"1": True, "t": True, "T": True, "TRUE": True, "true": True, "True": True,
            "0": False, "f": False, "F": False, "FALSE": False, "false": False, "False": False}


class Refused(Exception):
    """What the real dcgm-exporter would refuse (its message); exit 1."""


def _canonical() -> dict[str, str]:
    names = {}
    for name, (aliases, _, _) in FLAGS.items():
        for n in (name, *aliases):
            names[n] = name
    return names


def parse(argv: list[str]) -> dict[str, object]:
    """argv (without the program name) -> canonical flag name -> value, defaults filled in
    (Go flag syntax: ``-x``/``--x``, ``--x=v`` or ``--x v``; a bool takes no separate value).
    Raises :class:`Refused`."""
    names = _canonical()
    out = {name: default for name, (_, _, default) in FLAGS.items()}
    given: set[str] = set()
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            rest = argv[i + 1:]
            if rest:
                raise Refused(f"dcgm-exporter double: positional arguments {rest} (the real one ignores them)")
            break
        if not arg.startswith("-") or arg == "-":
            raise Refused(f"dcgm-exporter double: positional argument {arg!r} (the real one stops parsing "
                          "there and ignores every flag after it)")
        body = arg[2:] if arg.startswith("--") else arg[1:]
        key, eq, value = body.partition("=")
        if key not in names:
            raise Refused(f"Incorrect Usage: flag provided but not defined: -{key}")
        name = names[key]
        kind = FLAGS[name][1]
        if kind == "bool":
            if eq:
                if value not in _GO_BOOL:
                    raise Refused(f'Incorrect Usage: invalid boolean value "{value}" for -{key}: parse error')
                out[name] = _GO_BOOL[value]
            else:
                out[name] = True
        else:
            if not eq:
                if i + 1 >= len(argv):
                    raise Refused(f"Incorrect Usage: flag needs an argument: -{key}")
                i += 1
                value = argv[i]
            if kind == "int":
                if not re.fullmatch(r"[-+]?\d+", value):
                    raise Refused(f'Incorrect Usage: invalid value "{value}" for flag -{key}: parse error')
                out[name] = int(value)
            elif kind == "slice":
                out[name] = (out[name] if name in given else []) + [v for v in value.split(",") if v]
            else:
                out[name] = value
        given.add(name)
        i += 1
    out["_given"] = sorted(given)
    return out


def parse_devices(value: str) -> None:
    """``parseDeviceOptions``: ``f`` | ``g`` | ``i`` | ``g:<list>`` | ``i:<list>``."""
    parts = value.split(":")
    if len(parts) > 2:
        raise Refused(f"Invalid ranged device option '{value}': there can only be one specified range")
    letter = parts[0]
    if letter == "f":
        if len(parts) > 1:
            raise Refused("no range can be specified with the flex option 'f'")
        return
    if letter not in ("g", "i"):
        raise Refused(f"the only valid options preceding ':<range>' are 'g' or 'i', but found '{letter}'")
    if len(parts) == 2:
        for item in parts[1].split(","):
            tokens = item.split("-")
            if len(tokens) > 2:
                raise Refused(f"range can only be '<number>-<number>', but found '{item}'")
            for t in tokens:
                if not re.fullmatch(r"[-+]?\d+", t):
                    raise Refused(f'strconv.Atoi: parsing "{t}": invalid syntax')


def read_counters(path: str) -> list[tuple[str, str, str]]:
    """The ``-f`` CSV -> ``[(field, prometheus type, help)]`` (counter_config.go)."""
    try:
        text = Path(path).read_text()
    except OSError:
        raise Refused(f"open {path}: no such file or directory") from None
    rows = []
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("#") and line.strip()]
    for i, record in enumerate(csv.reader(io.StringIO("\n".join(lines)))):
        record = [r.strip(" ") for r in record]
        if len(record) != 3:
            raise Refused(f"malformed CSV record; err: failed to parse line {i} (`{record}`), expected 3 fields")
        if record[0] not in FIELDS:
            raise Refused(f"could not find DCGM field; err: unknown field {record[0]!r} "
                          "(double: fields of upstream etc/*.csv only)")
        if record[1] not in PROM_TYPES:
            raise Refused(f"could not find Prometheus metric type '{record[1]}'")
        rows.append((record[0], record[1], record[2]))
    return rows


def validate(flags: dict[str, object]) -> list[tuple[str, str, str]]:
    """The value checks the real exporter makes before it serves; returns the counters."""
    for key in ("devices", "switch-devices", "cpu-devices"):
        parse_devices(str(flags[key]))
    if flags["dcgm-log-level"] not in DCGM_LOG_LEVELS:
        raise Refused(f"invalid dcgm-log-level parameter value: {flags['dcgm-log-level']}")
    if flags["log-format"] not in LOG_FORMATS:
        raise Refused(f"invalid log-format parameter value: {flags['log-format']} (text, json)")
    if flags["kubernetes-gpu-id-type"] not in GPU_ID_TYPES:
        raise Refused(f"invalid kubernetes-gpu-id-type: {flags['kubernetes-gpu-id-type']} (uid, device-name)")
    if flags["kubernetes"] and not os.path.exists(str(flags["pod-resources-kubelet-socket"])):
        raise Refused(f"failed to connect to the kubelet: {flags['pod-resources-kubelet-socket']} does not exist")
    if flags["configmap-data"] != "none" and not flags["kubernetes"]:
        raise Refused(f"could not retrieve ConfigMap '{flags['configmap-data']}': not running in Kubernetes")
    if flags["web-config-file"] and not os.path.exists(str(flags["web-config-file"])):
        raise Refused(f"open {flags['web-config-file']}: no such file or directory")
    split_address(str(flags["address"]))
    return read_counters(str(flags["collectors"]))


def split_address(address: str) -> tuple[str, int]:
    """``HOST:PORT``, ``:PORT`` or ``[V6]:PORT`` (Go's net.Listen)."""
    m = re.fullmatch(r"(\[[0-9A-Fa-f:.]+\]|[^:\[\]]*):(\d{1,5})", address)
    if not m or int(m.group(2)) > 65535:
        raise Refused(f"listen tcp {address}: address {address}: missing port in address")
    return m.group(1).strip("[]"), int(m.group(2))


def gpus() -> list[dict]:
    """The GPUs of the nvidia-smi double's config; :class:`Refused` without one (no driver)."""
    path = os.environ.get(SMI_CONFIG_ENV, SMI_CONFIG)
    try:
        found = json.loads(Path(path).read_text()).get("gpus") or []
    except (OSError, ValueError):
        raise Refused("Error: Failed to initialize NVML (no NVIDIA driver: nvidia-smi double config "
                      f"{path} missing)") from None
    if not found:
        raise Refused("Error: no GPUs found")
    return found


def _faults(var: str) -> dict[str, float]:
    out = {}
    for item in filter(None, os.environ.get(var, "").split(",")):
        gpu, _, value = item.partition(":")
        out[gpu.strip()] = float(value)
    return out


def render(counters: list[tuple[str, str, str]], devices: list[dict], hostname: str | None) -> str:
    """render_metrics.go's GPU format, one line per counter per GPU."""
    xid, dbe = _faults("DCGM_EXPORTER_DOUBLE_XID"), _faults("DCGM_EXPORTER_DOUBLE_ECC_DBE")
    lines = []
    for field, ptype, help_ in counters:
        if ptype == "label":
            continue
        lines += [f"# HELP {field} {help_}", f"# TYPE {field} {ptype}"]
        for g in devices:
            idx = str(g.get("index", 0))
            labels = (f'gpu="{idx}",UUID="{g.get("uuid", "")}",pci_bus_id="{g.get("pci_bus_id", "")}",'
                      f'device="nvidia{idx}",modelName="{g.get("name", "")}"')
            if hostname:
                labels += f',Hostname="{hostname}"'
            value = {"DCGM_FI_DEV_XID_ERRORS": xid.get(idx, 0), "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": dbe.get(idx, 0),
                     "DCGM_FI_DEV_FB_USED": g.get("memory_used_mib", 0)}.get(field, 0)
            lines.append(f"{field}{{{labels}}} {value:g}")
    return "\n".join(lines) + "\n"


def serve(flags: dict[str, object], counters: list[tuple[str, str, str]]) -> None:
    devices = gpus()
    host, port = split_address(str(flags["address"]))
    hostname = None if flags["no-hostname"] else socket.gethostname()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            if self.path == "/metrics":
                body, ctype = render(counters, devices, hostname).encode(), "text/plain; version=0.0.4"
            elif self.path == "/health":
                body, ctype = b"KO" if not devices else b"OK", "text/plain"
            else:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    server_cls = type("Server", (http.server.ThreadingHTTPServer,), {"address_family": family})
    try:
        server = server_cls((host, port), Handler)
    except OSError as exc:
        raise Refused(f"listen tcp {flags['address']}: bind: {exc.strerror}") from None
    print(f'level=INFO msg="Starting webserver" address={flags["address"]}', file=sys.stderr, flush=True)
    server.serve_forever()


def build_archive(dest: Path, arch: str = "x86-64") -> Path:
    """NVIDIA's bare-metal archive layout (Makefile ``package-build``) with this double as the
    binary: ``dest/dcgm_exporter-linux-<arch>-<version>.tar.gz`` holding ``dcgm_exporter/usr/bin/
    dcgm-exporter`` (0755) and ``dcgm_exporter/etc/dcgm-exporter/default-counters.csv``."""
    dest.mkdir(parents=True, exist_ok=True)
    out = dest / f"dcgm_exporter-linux-{arch}-{VERSION}.tar.gz"
    counters = "".join(f"{f}, gauge, {f}\n" for f in ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_XID_ERRORS"))
    with tarfile.open(out, "w:gz") as tar:
        for path, data, mode in (("dcgm_exporter/usr/bin/dcgm-exporter", Path(__file__).read_bytes(), 0o755),
                                 ("dcgm_exporter/etc/dcgm-exporter/default-counters.csv", counters.encode(), 0o644)):
            info = tarfile.TarInfo(path)
            info.size, info.mode, info.mtime = len(data), mode, 0
            tar.addfile(info, io.BytesIO(data))
    return out


def main(argv: list[str]) -> int:
    if Path(argv[0]).name == Path(__file__).name and argv[1:2] == ["--build-archive"]:
        print(build_archive(Path(argv[2])))
        return 0
    try:
        flags = parse(argv[1:])
        if flags["help"]:
            print("NAME:\n   DCGM Exporter - Generates GPU metrics in the prometheus format")
            return 0
        if flags["version"]:
            print(f"DCGM Exporter version {VERSION}")
            return 0
        counters = validate(flags)
        if os.environ.get("DCGM_EXPORTER_DOUBLE_DRY_RUN"):
            print(json.dumps({**flags, "counters": [c[0] for c in counters]}))
            return 0
        serve(flags, counters)
    except Refused as exc:
        print(exc, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
