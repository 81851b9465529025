#!/usr/bin/env python3
"""glmops discovery-store checks, run on a target host by ``ansible.builtin.script`` (stdlib only).

Every subcommand prints one JSON document and exits 1 when a check fails.

  ports --port ADDRESS:PORT=UNIT ...
      -> {"ports": [{address, port, unit, ok, holder, reason}]}
      each store port is free on ADDRESS, or held by UNIT's own processes (its cgroup) - "already ours".
  reach --timeout S --endpoint UNIT|ADDRESS|PORT ...
      -> {"endpoints": [{unit, address, port, ok, seconds, reason}]}
      a TCP connection from this host to each store client port succeeds within S seconds.
  registered --timeout S --url HEALTH_URL --want N [--endpoint generate]
      -> {"url", "want", "have", "instances": [{instance_id, address}], "ok", "seconds", "reason"}
      Dynamo's frontend ``/health`` lists N instances of the endpoint (its ``instances`` array,
      one entry per registered worker endpoint), waited for until S seconds.
"""
from __future__ import annotations

import argparse
import errno
import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request


def _unit_pids(unit: str) -> set[int]:
    """PIDs in the unit's cgroup (empty when it does not run)."""
    out = subprocess.run(["systemctl", "show", "-p", "ControlGroup", "--value", unit],
                         capture_output=True, text=True, check=False).stdout.strip()
    pids: set[int] = set()
    if not out:
        return pids
    for root in ("/sys/fs/cgroup", "/sys/fs/cgroup/unified", "/sys/fs/cgroup/systemd"):
        path = f"{root}{out}/cgroup.procs"
        try:
            with open(path, encoding="ascii") as fh:
                pids |= {int(line) for line in fh if line.strip()}
        except OSError:
            continue
    return pids


def _holders(port: int) -> list[tuple[str, int]]:
    """(command, pid) of the processes listening on TCP ``port`` (``ss -ltnpH``)."""
    out = subprocess.run(["ss", "-ltnpH", f"sport = :{port}"], capture_output=True, text=True, check=False).stdout
    found = []
    for chunk in out.split("users:((")[1:]:
        for user in chunk.split(")),")[0].split("),("):
            parts = dict(p.split("=", 1) for p in user.split(",")[1:] if "=" in p)
            name = user.split(",")[0].strip('"')
            if parts.get("pid", "").isdigit():
                found.append((name, int(parts["pid"])))
    return found


def _bindable(address: str, port: int) -> tuple[bool, str]:
    fam = socket.AF_INET6 if ":" in address else socket.AF_INET
    sock = socket.socket(fam, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((address, port))
        return True, ""
    except OSError as exc:
        if exc.errno == errno.EADDRNOTAVAIL:
            return False, f"{address} is not an address of this host"
        return False, os.strerror(exc.errno or 0) or str(exc)
    finally:
        sock.close()


def cmd_ports(args) -> int:
    rows = []
    for spec in args.port:
        where, _, unit = spec.partition("=")
        address, _, port_s = where.rpartition(":")
        port = int(port_s)
        free, why = _bindable(address.strip("[]"), port)
        row = {"address": address, "port": port, "unit": unit, "ok": free, "holder": "", "reason": ""}
        if not free:
            holders = _holders(port)
            ours = _unit_pids(unit)
            if holders and all(pid in ours for _, pid in holders):
                row.update(ok=True, holder=f"{unit} (already ours)")
            else:
                row["holder"] = ", ".join(f"{name} (pid {pid})" for name, pid in holders) or "unknown"
                row["reason"] = (f"port {port} on {address} is taken ({why}) by {row['holder']}, not by {unit}"
                                 if "not an address" not in why else why)
        rows.append(row)
    print(json.dumps({"ports": rows}))
    return 0 if all(r["ok"] for r in rows) else 1


def cmd_reach(args) -> int:
    start = time.monotonic()
    rows = []
    for spec in args.endpoint:
        unit, address, port = (spec.split("|") + ["", ""])[:3]
        row = {"unit": unit, "address": address, "port": int(port), "ok": False, "reason": ""}
        while True:
            try:
                with socket.create_connection((address, int(port)), timeout=3):
                    row["ok"] = True
                    row["reason"] = ""
                    break
            except OSError as exc:
                row["reason"] = f"TCP {address}:{port} ({unit}): {exc.strerror or exc}"
            if time.monotonic() - start >= args.timeout:
                break
            time.sleep(1.0)
        row["seconds"] = round(time.monotonic() - start, 1)
        rows.append(row)
    print(json.dumps({"endpoints": rows}))
    return 0 if all(r["ok"] for r in rows) else 1


def _instances(url: str, endpoint: str) -> tuple[list[dict], str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            doc = json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        try:
            doc = json.loads(exc.read())  # a frontend without workers answers 503 with the same document
        except (ValueError, OSError):
            return [], f"{url} answered {exc.code}"
    except (OSError, ValueError) as exc:
        return [], f"{url}: {exc}"
    seen = {}
    for inst in doc.get("instances") or []:
        if isinstance(inst, dict) and inst.get("endpoint") == endpoint:
            tcp = (inst.get("transport") or {}).get("tcp") or ""
            seen[inst.get("instance_id")] = {"instance_id": inst.get("instance_id"), "address": str(tcp)}
    return list(seen.values()), ""


def cmd_registered(args) -> int:
    start = time.monotonic()
    while True:
        found, why = _instances(args.url, args.endpoint)
        if len(found) == args.want:
            why = ""
            break
        why = why or f"the frontend lists {len(found)} {args.endpoint} instance(s), the Plan has {args.want}"
        if time.monotonic() - start >= args.timeout:
            break
        time.sleep(1.0)
    ok = not why
    print(json.dumps({"url": args.url, "want": args.want, "have": len(found), "instances": found, "ok": ok,
                      "seconds": round(time.monotonic() - start, 1), "reason": why}))
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="glmops_store_check")
    sub = ap.add_subparsers(dest="cmd", required=True)
    po = sub.add_parser("ports")
    po.add_argument("--port", nargs="+", required=True, help="ADDRESS:PORT=UNIT")
    re_ = sub.add_parser("reach")
    re_.add_argument("--timeout", type=float, default=30.0)
    re_.add_argument("--endpoint", nargs="+", required=True, help="UNIT|ADDRESS|PORT")
    rg = sub.add_parser("registered")
    rg.add_argument("--timeout", type=float, required=True)
    rg.add_argument("--url", required=True)
    rg.add_argument("--want", type=int, required=True)
    rg.add_argument("--endpoint", default="generate")
    args = ap.parse_args(argv)
    return {"ports": cmd_ports, "reach": cmd_reach, "registered": cmd_registered}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
