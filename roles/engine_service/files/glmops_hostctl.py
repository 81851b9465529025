#!/usr/bin/env python3
"""glmops host helper, run on a target host by ``ansible.builtin.script`` (stdlib only).

One call per host instead of one module call per file/unit, so a no-op redeploy costs
about what ``ansible -m setup`` costs. Every subcommand prints one JSON document.

  state --want PATH=SHA256:MODE:OWNER:GROUP ... --unit UNIT=PATH,PATH ... --keep UNIT ...
        --glob GLOB --target TARGET --user NAME [--health UNIT|HEALTH_URL ...] [--runtime UNIT=MARKER ...]
        [--stamp PATH] [--current PATH]
      -> {"drifted": [PATH], "units": {UNIT: {...}}, "restart": [UNIT], "stale": [UNIT], "user": bool,
          "unhealthy": [UNIT], "services": [{unit, ready, fresh, reason}], "reinstalled": [UNIT],
          "stamp": JSON | null, "current": str | null}
      read-only: which files differ from what the Plan wants (content hash or ``dir``,
      mode, owner, group); each unit's systemd state; the units to (re)start (one of
      its files drifted, or not active, or not enabled); units matching GLOB in
      /etc/systemd/system, PartOf= TARGET, that neither --unit nor --keep names; whether
      the user exists. A running unit whose --runtime marker (its engine venv's install marker)
      is newer than its main process restarts too (``reinstalled``: the process still runs the
      removed venv's files). Each --health unit that stays as it is gets one GET of its own
      /health (3 s): ``unhealthy`` lists the ones that did not answer 200 (the caller
      then runs the ``ready`` gate), ``services`` the ones that did (ready, not fresh).
      ``stamp``: the JSON document at --stamp (the deploy stamp the record play writes after
      a successful deploy, see glmops.deploystate), null when missing or not JSON; ``current``:
      the text of --current (the generations' ``current`` file), null when missing.
  ready --timeout S --model NAME --service UNIT|HEALTH_URL|READY_URL ... [--fresh UNIT ...]
      -> {"services": [{unit, ready, seconds, time_to_ready, reason, journal}]}
      readiness gate (F13): the unit is active, its own /health answers 200, then (for
      the --fresh units, the ones just (re)started) a one-token completion to READY_URL
      answers 200 with a choice. /v1/models never counts. All services are gated in parallel until S seconds; on failure the
      last 100 journal lines of the unit are returned. Exit 1 when any is not ready.
  status --service UNIT|HEALTH_URL ...
      -> {"services": [{unit, active, sub, pid, uptime_s, health}]}
"""
from __future__ import annotations

import argparse
import grp
import hashlib
import json
import os
import pwd
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from fnmatch import fnmatch

UNIT_DIR = "/etc/systemd/system"
SHOW = ("Id", "ActiveState", "SubState", "UnitFileState", "MainPID", "NRestarts",
        "ExecMainStartTimestampMonotonic", "LoadState", "Result")


def unit_show(units: list[str]) -> dict[str, dict[str, str]]:
    """``systemctl show`` for several units in one call -> {unit: {prop: value}}."""
    if not units:
        return {}
    out = subprocess.run(["systemctl", "show", "--no-pager", "-p", ",".join(SHOW), *units],
                         capture_output=True, text=True, check=False).stdout
    result: dict[str, dict[str, str]] = {}
    for block in out.strip().split("\n\n"):
        props = dict(line.split("=", 1) for line in block.splitlines() if "=" in line)
        if props.get("Id"):
            result[props["Id"]] = props
    for unit in units:  # systemctl names aliases by their Id; keep the asked name
        result.setdefault(unit, {"Id": unit, "LoadState": "not-found", "ActiveState": "inactive"})
    return result


def part_of(path: str, target: str) -> bool:
    """True when the unit file says ``PartOf=<target>``: it belongs to that deployment
    (``glm-flash-b200-*`` also matches deployment ``flash-b200-sglang``'s units)."""
    if not target:
        return True
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return any(line.strip() == f"PartOf={target}" for line in fh)
    except OSError:
        return False


def file_state(path: str) -> str | None:
    """``SHA256:MODE:OWNER:GROUP`` of a file (``dir:...`` for a directory), None if absent."""
    try:
        st = os.stat(path)
        if os.path.isdir(path):
            digest = "dir"
        else:
            with open(path, "rb") as fh:
                digest = hashlib.sha256(fh.read()).hexdigest()
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
    return f"{digest}:{st.st_mode & 0o7777:04o}:{owner}:{group}"


def cmd_state(args) -> int:
    drifted = []
    for want in args.want:
        path, _, spec = want.partition("=")
        if file_state(path) != spec:
            drifted.append(path)
    wanted = dict(spec.partition("=")[::2] for spec in args.unit)
    units = unit_show(list(wanted))
    restart = []
    for unit, paths in wanted.items():
        props = units[unit]
        if (set(filter(None, paths.split(","))) & set(drifted) or props.get("ActiveState") != "active"
                or props.get("UnitFileState") not in ("enabled", "enabled-runtime", "static", "linked")):
            restart.append(unit)
    reinstalled = []
    for spec in args.runtime:
        unit, _, marker = spec.partition("=")
        if unit in wanted and unit not in restart and newer_than_process(marker, units[unit]):
            restart.append(unit)
            reinstalled.append(unit)
    stale = []
    if args.glob and os.path.isdir(UNIT_DIR):
        stale = sorted(n for n in os.listdir(UNIT_DIR)
                       if fnmatch(n, args.glob) and n not in wanted and n not in args.keep
                       and part_of(os.path.join(UNIT_DIR, n), args.target))
    try:
        pwd.getpwnam(args.user) if args.user else None
        has_user = True
    except KeyError:
        has_user = False
    unhealthy, services = [], []
    for spec in args.health:  # units left running: one look at their own /health
        unit, _, url = spec.partition("|")
        if unit in restart:
            continue
        status = http(url, timeout=3)[0] if url else 200
        if status == 200:
            services.append({"unit": unit, "ready": True, "fresh": False, "reason": ""})
        else:
            unhealthy.append(unit)
    print(json.dumps({"drifted": drifted, "units": {
        u: {"active": p.get("ActiveState", ""), "sub": p.get("SubState", ""),
            "enabled": p.get("UnitFileState", ""), "pid": int(p.get("MainPID") or 0),
            "loaded": p.get("LoadState", "")} for u, p in units.items()},
        "restart": restart, "stale": stale, "user": has_user, "reinstalled": reinstalled,
        "unhealthy": unhealthy, "services": services, "stamp": read_json(args.stamp) if args.stamp else None,
        "current": read_text(args.current) if args.current else None}))
    return 0


def process_started(pid: int) -> float | None:
    """Wall-clock start time of a process (s since the epoch): its start in clock ticks after
    boot (/proc/PID/stat field 22) plus the boot time (/proc/stat btime); None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            fields = fh.read().rpartition(")")[2].split()
        with open("/proc/stat", encoding="ascii") as fh:
            btime = next(int(line.split()[1]) for line in fh if line.startswith("btime "))
        return btime + int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None


def newer_than_process(marker: str, props: dict[str, str]) -> bool:
    """True when the unit runs and ``marker`` was written after its main process started."""
    pid = int(props.get("MainPID") or 0)
    try:
        written = os.stat(marker).st_mtime
    except OSError:
        return False
    started = process_started(pid) if pid > 0 else None
    return started is not None and written > started + 1.0  # tick and clock granularity


def read_text(path: str):
    """The stripped text of a small file; None when it is missing or unreadable."""
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read(4096).strip()
    except (OSError, ValueError):
        return None


def read_json(path: str):
    """The JSON document at ``path``; None when it is missing or unreadable."""
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return None


# answers to the one-token request (after /health 200) that waiting will not change
PERMANENT = (400, 401, 403, 404, 405, 422)


#: a front door answers 404 for its model until it has discovered a worker serving it (Dynamo's
#: frontend finds its workers a few ms after its /health turns 200): 404 counts as permanent
#: only when it lasts this long
NOT_FOUND_GRACE_S = 20.0


class Refused(Exception):
    """The service answered the one-token request with a client error: stop waiting."""

    def __init__(self, text: str, status: int):
        super().__init__(text)
        self.status = status


def http(url: str, body: dict | None = None, timeout: float = 5.0) -> tuple[int, bytes]:
    """(status, body) of a GET (or JSON POST); status -1 when nothing answers."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method="POST" if data else "GET")
    if data:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read() if exc.fp else b""
    except (OSError, ValueError):
        return -1, b""


def one_token(url: str, model: str, timeout: float) -> tuple[bool, str]:
    """A one-token request; True when it answers 200 with at least one choice."""
    if url.rstrip("/").endswith("/chat/completions"):
        body = {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
    else:
        body = {"model": model, "prompt": "hi", "max_tokens": 1}
    status, raw = http(url, body, timeout)
    if status in PERMANENT:
        raise Refused(f"one-token request to {url} answered {status}: {raw[:300].decode(errors='replace')}", status)
    if status != 200:
        return False, f"one-token request to {url} answered {status}"
    try:
        if json.loads(raw).get("choices"):
            return True, ""
    except (ValueError, AttributeError):
        pass
    return False, f"one-token request to {url} answered 200 without choices"


def journal(unit: str, lines: int = 100) -> str:
    return subprocess.run(["journalctl", "-u", unit, "-n", str(lines), "--no-pager", "-o", "short-iso"],
                          capture_output=True, text=True, check=False).stdout


def gate(unit: str, health: str, ready: str, model: str, deadline: float, out: dict) -> None:
    reason = "not checked"
    first_404 = None
    while True:
        props = unit_show([unit])[unit]
        state, sub = props.get("ActiveState"), props.get("SubState")
        if state == "failed" or props.get("LoadState") == "not-found":
            reason = f"unit is {state}/{sub} (result {props.get('Result', '?')}, {props.get('NRestarts', '0')} restarts)"
            break
        if state == "active":
            status, _ = http(health, timeout=3) if health else (200, b"")
            if status != 200:
                reason = f"{health} answered {status if status > 0 else 'nothing (connection refused or timeout)'}"
            elif ready:
                try:
                    ok, reason = one_token(ready, model, timeout=max(5.0, min(60.0, deadline - time.time())))
                except Refused as exc:
                    reason = str(exc)
                    if exc.status != 404:
                        break
                    first_404 = first_404 or time.time()
                    if time.time() - first_404 >= NOT_FOUND_GRACE_S:
                        break
                    ok = False
                if ok:
                    break
            else:
                reason = ""
                break
        else:
            reason = f"unit is {state}/{sub}"
        if time.time() >= deadline:
            break
        time.sleep(1.0)
    props = unit_show([unit])[unit]
    started = int(props.get("ExecMainStartTimestampMonotonic") or 0) / 1e6
    out.update(unit=unit, ready=not reason or reason == "", reason=reason,
               pid=int(props.get("MainPID") or 0),
               uptime_s=round(time.monotonic() - started, 1) if started else None)
    if out["ready"]:
        out["reason"] = ""
    else:
        out["journal"] = journal(unit)


def cmd_ready(args) -> int:
    start = time.time()
    deadline = start + args.timeout
    results: list[dict] = []
    threads = []
    for spec in args.service:
        unit, health, ready = (spec.split("|") + ["", ""])[:3]
        res: dict = {"unit": unit}
        results.append(res)
        # a service left running (not --fresh) proved its one-token request when it started:
        # its own /health is enough; the endpoint check after the router covers serving
        one = ready if unit in args.fresh else ""
        th = threading.Thread(target=gate, args=(unit, health, one, args.model, deadline, res))
        th.start()
        threads.append(th)
    for th in threads:
        th.join()
    for res in results:
        res["fresh"] = res["unit"] in args.fresh
        res["seconds"] = round(time.time() - start, 1)
        if res["fresh"] and res.get("uptime_s") is not None and res["ready"]:
            res["time_to_ready_s"] = res["uptime_s"]
    print(json.dumps({"services": results}))
    return 0 if all(r["ready"] for r in results) else 1


def cmd_status(args) -> int:
    rows = []
    units = [s.split("|")[0] for s in args.service]
    shown = unit_show(units)
    for spec in args.service:
        unit, health = (spec.split("|") + [""])[:2]
        props = shown[unit]
        started = int(props.get("ExecMainStartTimestampMonotonic") or 0) / 1e6
        status = http(health, timeout=3)[0] if health else None
        rows.append({"unit": unit, "active": props.get("ActiveState", ""), "sub": props.get("SubState", ""),
                     "enabled": props.get("UnitFileState", ""), "pid": int(props.get("MainPID") or 0),
                     "restarts": int(props.get("NRestarts") or 0),
                     "uptime_s": round(time.monotonic() - started, 1)
                     if started and props.get("ActiveState") == "active" else None,
                     "health": status})
    print(json.dumps({"services": rows}))
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="glmops_hostctl")
    sub = ap.add_subparsers(dest="cmd", required=True)
    st = sub.add_parser("state")
    st.add_argument("--want", nargs="*", default=[])
    st.add_argument("--unit", nargs="*", default=[], help="UNIT=PATH,PATH...: files the unit depends on")
    st.add_argument("--keep", nargs="*", default=[], help="other units of this deployment on the host")
    st.add_argument("--glob", default="")
    st.add_argument("--target", default="", help="stale units must be PartOf= this target")
    st.add_argument("--user", default="")
    st.add_argument("--health", nargs="*", default=[], help="UNIT|HEALTH_URL: one /health look per kept unit")
    st.add_argument("--runtime", nargs="*", default=[], help="UNIT=MARKER: the unit's engine venv install marker")
    st.add_argument("--stamp", default="", help="the deploy stamp file to read back")
    st.add_argument("--current", default="", help="the generations' current file to read back")
    rd = sub.add_parser("ready")
    rd.add_argument("--timeout", type=float, required=True)
    rd.add_argument("--model", default="")
    rd.add_argument("--service", nargs="+", required=True)
    rd.add_argument("--fresh", nargs="*", default=[])
    ss = sub.add_parser("status")
    ss.add_argument("--service", nargs="+", required=True)
    args = ap.parse_args(argv)
    return {"state": cmd_state, "ready": cmd_ready, "status": cmd_status}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
