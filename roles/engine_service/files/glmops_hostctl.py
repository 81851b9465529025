#!/usr/bin/env python3
"""glmops host helper, run on a target host by ``ansible.builtin.script`` (stdlib only).

One call per host instead of one module call per file/unit, so a no-op redeploy costs
about what ``ansible -m setup`` costs. Every subcommand prints one JSON document.

  state --want PATH=SHA256:MODE:OWNER:GROUP ... --unit UNIT=PATH,PATH ... --keep UNIT ...
        --glob GLOB --target TARGET --user NAME [--health UNIT|HEALTH_URL ...] [--runtime UNIT=MARKER ...]
        [--stamp PATH] [--current PATH] [--ifname-env PATH|ADDRESS|NAME,NAME ...]
      -> {"drifted": [PATH], "units": {UNIT: {...}}, "restart": [UNIT], "stale": [UNIT], "user": bool,
          "unhealthy": [UNIT], "services": [{unit, ready, fresh, reason}], "reinstalled": [UNIT],
          "stamp": JSON | null, "current": str | null, "ifnames": {PATH: IFNAME}}
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
      --ifname-env (F17, glmops.netif): the env file PATH is in state when it is the wanted
      text followed by ``NAME=<interface>`` per NAME, the interface being the one that holds
      ADDRESS here (``ip -j addr``); ``ifnames`` names that interface per PATH (none found: no entry).
  ready --timeout S --model NAME --service UNIT|HEALTH_URL|READY_URL ... [--fresh UNIT ...]
        [--window W --run ID]
      -> {"done": bool, "services": [{unit, ready, seconds, decided_at, time_to_ready_s, reason, journal,
                                     first_error, waiting, restarts}]}
      readiness gate (F13): the unit is active, its own /health answers 200, then (for
      the --fresh units, the ones just (re)started) a one-token completion to READY_URL
      answers 200 with a choice. /v1/models never counts. All services are gated in parallel until S seconds.
      A unit that cannot become ready by waiting fails at once: failed (its start limit hit included),
      not loaded, or inactive with no restart pending for INACTIVE_GRACE_S; its reason names the unit's
      result and last exit ("core-dump, signal ILL", "exited, status 0"). On failure the last 100
      journal lines of the unit are returned, with ``first_error`` the first line that reads like an error.
      With --window W the call returns after at most W seconds with ``done`` false and, per unit not
      yet decided, ``waiting`` (loading | /health | the one-token request) and ``seconds`` waited; the
      caller calls again with the same --run ID (the gate's start and what it has seen are kept in
      /run/glmops-gate/ID.json) until ``done``: the playbook's ``until`` loop, whose retries the
      progress view prints. Exit 1 when done and any is not ready.
  status --service UNIT|HEALTH_URL ...
      -> {"services": [{unit, active, sub, loaded, pid, uptime_s, health[, failure, journal, first_error]}]}
      (``loaded``: systemd's LoadState, ``not-found`` when the unit is not installed; ``health``: the
      HTTP status of its /health, -1 when nothing answers)
      a failed unit (its start limit hit included) comes with its last 20 journal lines
"""
from __future__ import annotations

import argparse
import grp
import hashlib
import json
import os
import pwd
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from fnmatch import fnmatch

UNIT_DIR = "/etc/systemd/system"
SHOW = ("Id", "ActiveState", "SubState", "UnitFileState", "MainPID", "NRestarts",
        "ExecMainStartTimestampMonotonic", "LoadState", "Result", "ExecMainCode", "ExecMainStatus",
        "StartLimitBurst")
GATE_DIR = "/run/glmops-gate"
#: a unit inactive (not failed, no restart pending) this long will not come back by itself
INACTIVE_GRACE_S = 5.0
#: journal lines that read like the cause of a failure (the first one is picked out)
STARTED = re.compile(r" systemd\[\d+\]: Started ")
ERROR_WORDS = re.compile(r"error|exception|traceback|fatal|panic|illegal instruction|segmentation fault|"
                         r"core dumped|killed|died|abort|out of memory|oom|code=(killed|dumped)|failed with result", re.IGNORECASE)


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


def file_state(path: str, suffix: str = "") -> str | None:
    """``SHA256:MODE:OWNER:GROUP`` of a file (``dir:...`` for a directory), None if absent. With
    ``suffix``: the digest of the text before it ("suffix-missing" when the file does not end with it)."""
    try:
        st = os.stat(path)
        if os.path.isdir(path):
            digest = "dir"
        else:
            with open(path, "rb") as fh:
                data = fh.read()
            tail = suffix.encode()
            if tail and not data.endswith(tail):
                digest = "suffix-missing"
            else:
                digest = hashlib.sha256(data[:len(data) - len(tail)] if tail else data).hexdigest()
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


def address_holder(address: str, cache: dict) -> str | None:
    """The first interface (``ip -j addr``) that holds ``address`` (an IP, or a name resolved
    here), None when none does or the interfaces cannot be read (F17)."""
    import ipaddress
    import socket

    if address in cache:
        return cache[address]
    cache[address] = None
    try:
        ip = next((p for p in ("ip", "/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip") if shutil.which(p)), "ip")
        links = json.loads(subprocess.run([ip, "-j", "addr", "show"], capture_output=True, text=True,
                                          timeout=10).stdout or "[]")
        try:
            wanted = {ipaddress.ip_address(address)}
        except ValueError:
            wanted = {ipaddress.ip_address(ai[4][0].split("%")[0]) for ai in socket.getaddrinfo(address, None)}
    except (OSError, ValueError, subprocess.SubprocessError):
        return None
    for link in links:
        for a in link.get("addr_info") or []:
            try:
                if a.get("local") and ipaddress.ip_address(a["local"].split("%")[0]) in wanted:
                    cache[address] = link.get("ifname")
                    return cache[address]
            except ValueError:
                pass
    return None


def cmd_state(args) -> int:
    drifted = []
    ifnames, suffixes, holders, unresolved = {}, {}, {}, set()
    for spec in args.ifname_env:  # F17: PATH|ADDRESS|NAME,NAME
        path, address, names = (spec.split("|") + ["", ""])[:3]
        ifname = address_holder(address, holders)
        if not ifname:
            unresolved.add(path)  # no interface holds the address: never in state (the precheck says why)
        else:
            ifnames[path] = ifname
            suffixes[path] = "".join(f"{n}={ifname}\n" for n in names.split(",") if n)
    for want in args.want:
        path, _, spec = want.partition("=")
        if file_state(path, suffixes.get(path, "")) != spec or path in unresolved:
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
    print(json.dumps({"glmops_event": "state", "drifted": drifted, "units": {
        u: {"active": p.get("ActiveState", ""), "sub": p.get("SubState", ""),
            "enabled": p.get("UnitFileState", ""), "pid": int(p.get("MainPID") or 0),
            "loaded": p.get("LoadState", "")} for u, p in units.items()},
        "restart": restart, "stale": stale, "user": has_user, "reinstalled": reinstalled,
        "unhealthy": unhealthy, "services": services, "stamp": read_json(args.stamp) if args.stamp else None,
        "current": read_text(args.current) if args.current else None, "ifnames": ifnames}))
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


def env_value(path: str, name: str) -> str:
    """The value of ``name`` in the env file ``path`` (glmops.render.env_lines syntax: ``KEY=VALUE``,
    a value with other characters double-quoted with ``\\`` and ``\"`` escaped); "" when absent."""
    try:
        with open(path, encoding="utf-8") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return ""
    for line in lines:
        key, sep, value = line.partition("=")
        if not sep or key != name:
            continue
        if len(value) >= 2 and value[0] == value[-1] == '"':
            value = re.sub(r'\\(.)', r"\1", value[1:-1])
        return value
    return ""


def api_key(spec: str) -> str:
    """The API key of ``VAR@ENV_FILE`` (the service view's ``auth``): read on this host from the
    service's 0600 env file, so it never passes through Ansible's arguments or output; "" for ""."""
    name, sep, path = spec.partition("@")
    return env_value(path, name) if sep and name else ""


def http(url: str, body: dict | None = None, timeout: float = 5.0, key: str = "") -> tuple[int, bytes]:
    """(status, body) of a GET (or JSON POST), with ``Authorization: Bearer key`` when a key is
    given; status -1 when nothing answers."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method="POST" if data else "GET")
    if data:
        req.add_header("Content-Type", "application/json")
    if key:
        req.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read() if exc.fp else b""
    except (OSError, ValueError):
        return -1, b""


def one_token(url: str, model: str, timeout: float, key: str = "") -> tuple[bool, str]:
    """A one-token request; True when it answers 200 with at least one choice."""
    if url.rstrip("/").endswith("/chat/completions"):
        body = {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
    else:
        body = {"model": model, "prompt": "hi", "max_tokens": 1}
    status, raw = http(url, body, timeout, key)
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


def first_error(text: str) -> str:
    """The first journal line of the unit's last start that reads like an error: the engine's own
    lines first, then systemd's ("Main process exited, code=dumped, status=4/ILL"); "" when none
    does. The last start begins at the last "systemd[N]: Started" line, so errors of an earlier run
    of the same unit (an earlier deploy, a stop) never stand in for this one."""
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.startswith("-- ")]
    starts = [i for i, ln in enumerate(lines) if STARTED.search(ln)]
    lines = lines[starts[-1]:] if starts else lines
    ours = [ln for ln in lines if " systemd[" not in ln]
    for group in (ours, lines):
        for line in group:
            if ERROR_WORDS.search(line):
                return line.strip()
    return ""


def last_exit(props: dict[str, str]) -> str:
    """How the unit's main process last ended: "exited, status 0", "killed, signal KILL",
    "core-dump, signal ILL" (systemctl show ExecMainCode: 1 exited, 2 killed, 3 dumped); "" if
    it has not ended."""
    code, status = props.get("ExecMainCode", "0"), props.get("ExecMainStatus", "0")
    if code not in ("1", "2", "3"):
        return ""
    if code == "1":
        return f"exited, status {status}"
    try:
        name = signal.Signals(int(status)).name.removeprefix("SIG")
    except ValueError:
        name = status
    return f"{'killed' if code == '2' else 'core-dump'}, signal {name}"


def failure_summary(props: dict[str, str]) -> str:
    """"result signal; start limit hit after 3 starts; last exit: killed, signal ILL" for a failed
    unit. systemd 252 keeps the last failure's Result (``signal``, ``exit-code``) when it refuses an
    automatic restart ("Start request repeated too quickly"), and says ``start-limit-hit`` only for
    a refused manual start: a failed unit whose restart counter (NRestarts, counted when a restart
    is scheduled: the refused one included) reached StartLimitBurst has hit its start limit after
    that many starts."""
    restarts = int(props.get("NRestarts") or 0)
    burst = int(props.get("StartLimitBurst") or 0)
    parts = [f"result {props.get('Result', '?')}"]
    if props.get("Result") == "start-limit-hit" or (burst and restarts >= burst):
        parts.append(f"start limit hit after {max(restarts, 1)} starts")
    else:
        parts.append(f"{restarts} restart{'s' if restarts != 1 else ''}")
    ended = last_exit(props)
    if ended:
        parts.append(f"last exit: {ended}")
    return "; ".join(parts)


def unit_verdict(unit: str, props: dict[str, str], seen: dict) -> tuple[str, str]:
    """("", waiting) while the unit may still come up, or (reason, "") when waiting cannot help:
    not loaded, failed (a start limit hit included), or inactive with no restart pending for
    INACTIVE_GRACE_S. ``seen`` keeps what earlier looks saw (since when it is inactive)."""
    state, sub = props.get("ActiveState", ""), props.get("SubState", "")
    restarts = int(props.get("NRestarts") or 0)
    ended = last_exit(props)
    history = f"{restarts} restart{'s' if restarts != 1 else ''}" + (f", last exit: {ended}" if ended else "")
    if props.get("LoadState") == "not-found":
        return f"{unit} is not loaded (no unit file)", ""
    if state == "failed":
        return f"{unit} is failed ({failure_summary(props)})", ""
    if state == "inactive" and sub == "dead":
        first = seen.setdefault("inactive_since", time.time())
        if time.time() - first >= INACTIVE_GRACE_S:
            return (f"{unit} is inactive with no restart pending (result {props.get('Result', '?')}; {history})", "")
        return "", f"unit inactive ({history})"
    seen.pop("inactive_since", None)
    if state != "active":
        return "", f"unit {state}/{sub} ({history})"
    return "", ""


def gate(unit: str, health: str, ready: str, model: str, times: tuple[float, float, float], out: dict,
         seen: dict, stop: threading.Event, key: str = "") -> None:
    """Gate one unit until it is ready, cannot become ready, the gate's deadline passes, another
    unit failed (``stop`` set: this one stays undecided), or this call's window ends
    (``out["decided"]`` stays False). ``times``: (gate start, deadline, window end), epoch s."""
    start, deadline, until = times
    reason = "not checked"
    waiting = "loading"
    decided = False
    while not stop.is_set():
        props = unit_show([unit])[unit]
        verdict, loading = unit_verdict(unit, props, seen)
        if verdict:
            reason, decided = verdict, True
            break
        if not loading:  # active
            status, _ = http(health, timeout=3, key=key) if health else (200, b"")
            if status != 200:
                waiting = "/health"
                reason = f"{health} answered {status if status > 0 else 'nothing (connection refused or timeout)'}"
            elif ready:
                waiting = "the one-token request"
                try:
                    ok, reason = one_token(ready, model, timeout=max(5.0, min(60.0, deadline - time.time())), key=key)
                except Refused as exc:
                    reason = str(exc)
                    if exc.status != 404:
                        decided = True
                        break
                    seen["first_404"] = seen.get("first_404") or time.time()
                    if time.time() - seen["first_404"] >= NOT_FOUND_GRACE_S:
                        decided = True
                        break
                    ok = False
                if ok:
                    reason, decided = "", True
                    break
            else:
                reason, decided = "", True
                break
        else:
            waiting, reason = "loading", loading
        if time.time() >= deadline:
            decided = True
            break
        if time.time() >= until:
            break
        stop.wait(1.0)
    if decided and reason:
        stop.set()  # fail fast: the deploy fails on this unit, whatever the others do
    props = unit_show([unit])[unit]
    started = int(props.get("ExecMainStartTimestampMonotonic") or 0) / 1e6
    if decided:
        out["seconds"] = round(time.time() - start, 1)
        out["decided_at"] = round(time.time(), 3)  # epoch s: when the gate knew
    elif stop.is_set():
        reason = f"still waiting for {waiting or 'readiness'} when the gate stopped on another unit's failure"
    out.update(unit=unit, ready=decided and not reason, reason=reason, decided=decided,
               waiting="" if decided else waiting, restarts=int(props.get("NRestarts") or 0),
               pid=int(props.get("MainPID") or 0),
               uptime_s=round(time.monotonic() - started, 1) if started else None)
    if decided and reason:
        out["journal"] = journal(unit)
        out["first_error"] = first_error(out["journal"])


def _gate_state(run: str) -> tuple[str, dict]:
    """(path, state) of gate run ``run``: {"start": epoch s, "units": {unit: {...}}}."""
    if not run:
        return "", {"start": time.time(), "units": {}}
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", run)[:100]
    path = os.path.join(GATE_DIR, f"{safe}.json")
    state = read_json(path)
    if not isinstance(state, dict) or not isinstance(state.get("units"), dict):
        state = {"start": time.time(), "units": {}}
    return path, state


def _save_gate_state(path: str, state: dict) -> None:
    if not path:
        return
    os.makedirs(GATE_DIR, mode=0o700, exist_ok=True)
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(state, fh)
    os.replace(tmp, path)


def cmd_ready(args) -> int:
    path, state = _gate_state(args.run)
    start = float(state["start"])
    deadline = start + args.timeout
    now = time.time()
    until = min(deadline, now + args.window) if args.window else deadline
    results: list[dict] = []
    threads = []
    stop = threading.Event()
    for spec in args.service:
        unit, health, ready, auth = (spec.split("|") + ["", "", ""])[:4]
        kept = state["units"].setdefault(unit, {})
        if kept.get("result"):  # decided in an earlier window
            results.append(kept["result"])
            continue
        res: dict = {"unit": unit}
        results.append(res)
        # a service left running (not --fresh) proved its one-token request when it started:
        # its own /health is enough; the endpoint check after the router covers serving
        one = ready if unit in args.fresh else ""
        th = threading.Thread(target=gate, args=(unit, health, one, args.model, (start, deadline, until),
                                                 res, kept, stop), kwargs={"key": api_key(auth)})
        th.start()
        threads.append(th)
    for th in threads:
        th.join()
    done = stop.is_set() or all(r.get("decided", True) for r in results)
    for res in results:
        res["fresh"] = res["unit"] in args.fresh
        if "seconds" not in res:
            res["seconds"] = round(time.time() - start, 1)
        if res["fresh"] and res.get("uptime_s") is not None and res["ready"]:
            res["time_to_ready_s"] = res["uptime_s"]
        if res.get("decided"):
            state["units"][res["unit"]]["result"] = res
    if done:
        if path and os.path.exists(path):
            os.unlink(path)
    else:
        _save_gate_state(path, state)
    print(json.dumps({"glmops_event": "ready", "done": done, "services": results}))
    return 0 if not done or all(r["ready"] for r in results) else 1


def cmd_status(args) -> int:
    rows = []
    units = [s.split("|")[0] for s in args.service]
    shown = unit_show(units)
    for spec in args.service:
        unit, health, auth = (spec.split("|") + ["", ""])[:3]
        props = shown[unit]
        started = int(props.get("ExecMainStartTimestampMonotonic") or 0) / 1e6
        status = http(health, timeout=3, key=api_key(auth))[0] if health else None
        rows.append({"unit": unit, "active": props.get("ActiveState", ""), "sub": props.get("SubState", ""),
                     "enabled": props.get("UnitFileState", ""), "loaded": props.get("LoadState", ""),
                     "pid": int(props.get("MainPID") or 0),
                     "restarts": int(props.get("NRestarts") or 0),
                     "uptime_s": round(time.monotonic() - started, 1)
                     if started and props.get("ActiveState") == "active" else None,
                     "health": status})
        if props.get("ActiveState") == "failed":  # F32: say why, with the journal's tail
            tail = journal(unit, 20)
            rows[-1].update(failure=failure_summary(props), journal=tail, first_error=first_error(tail))
    print(json.dumps({"glmops_event": "status", "services": rows}))
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
    st.add_argument("--ifname-env", nargs="*", default=[],
                    help="PATH|ADDRESS|NAME,NAME: the env file ends with NAME=<interface holding ADDRESS> (F17)")
    rd = sub.add_parser("ready")
    rd.add_argument("--timeout", type=float, required=True)
    rd.add_argument("--model", default="")
    rd.add_argument("--service", nargs="+", required=True,
                    help="UNIT|HEALTH_URL|READY_URL|VAR@ENV_FILE (the last: where the API key is, or empty)")
    rd.add_argument("--fresh", nargs="*", default=[])
    rd.add_argument("--window", type=float, default=0.0, help="return after this many seconds (0: until done)")
    rd.add_argument("--run", default="", help="gate run id: where calls of one gate keep its start and state")
    ss = sub.add_parser("status")
    ss.add_argument("--service", nargs="+", required=True, help="UNIT|HEALTH_URL|VAR@ENV_FILE")
    args = ap.parse_args(argv)
    return {"state": cmd_state, "ready": cmd_ready, "status": cmd_status}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
