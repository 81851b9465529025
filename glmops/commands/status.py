"""``glmops status`` and ``glmops logs``: what the deployment's services do now.

Both act on the topology the hosts record as deployed unless ``--topology`` says otherwise
(``glmops.commands.common.load_deployed_plan``), plan once on the controller (bad input: exit
2, no host contacted) and hand that Plan to their read-only run.
"""
from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request
from typing import Any

import click
from rich.table import Table

from glmops.commands.ansible_opts import ANSIBLE_OPTS
from glmops import runner
from glmops.commands.common import Unselected, by_service, day2_run, exit_unselected, load_deployed_plan, pick_services
from glmops.inventory import check_run_target
from glmops.commands.options import INVENTORY, LIMIT, SERVICE, TOPOLOGY
from glmops.engines import registry
from glmops.monitoring import read_live
from glmops.output import console as make_console
from glmops.ssh import ssh_command


@click.command("status")
@ANSIBLE_OPTS
@INVENTORY
@TOPOLOGY
@click.option("--json", "as_json", is_flag=True, help="Print JSON (one object per service).")
@SERVICE
@LIMIT
def status(inventory, topology, as_json, services, limit):
    """Per service: unit state, health, uptime, GPUs and URL. Exit 1 unless all serve.
    Without --topology: the topology recorded on the hosts by the last deploy."""
    console = make_console()
    run = day2_run(inventory, topology, **by_service(services), limit=limit)
    result = runner.run("status", "status.yml", inventory, run.extravars, limit=limit,
                        console=make_console(stderr=True), quiet=True, planned=run.planned,
                        alternatives=run.alternatives)
    plan = run.chosen_view(result, services)
    rows = status_rows(plan, result)
    if limit:  # only the hosts the --limit pattern kept (a host left out has no result)
        rows = [r for r in rows if r["host"] in result.hosts]
    add_live_numbers(rows, plan)
    if as_json:
        click.echo(json.dumps({"endpoint": plan["endpoint_url"], "services": rows,
                               "artifacts": str(result.artifacts)}, indent=2))
    else:
        table = Table(title=f"{plan['deployment']}: {plan['engine']} {plan['topology']}")
        for col in ("host", "service", "role", "state", "health", "uptime", "running", "waiting", "KV cache",
                    "GPUs", "URL"):
            table.add_column(col)
        for r in rows:
            live = r["live"]
            table.add_row(r["host"], r["service"], r["role"], r["state"], health_text(r),
                          f"{r['uptime_s']:.0f} s" if r["uptime_s"] is not None else "-",
                          _num(live.get("running")), _num(live.get("waiting")),
                          f"{live['kv_cache'] * 100:.1f} %" if live.get("kv_cache") is not None else "-",
                          ",".join(map(str, r["gpus"])) or "-", r["url"])
        console.print(table)
        for r in rows:
            if r["journal"]:
                console.print(f"--- {r['unit']} on {r['host']}: {r['state']}", markup=False, highlight=False)
                if r["first_error"]:
                    console.print(f"first error: {r['first_error']}", markup=False, highlight=False, soft_wrap=True)
                console.print(r["journal"].rstrip("\n"), markup=False, highlight=False, soft_wrap=True)
    healthy = bool(result.ok and rows and all(r["state"] == "active" and r["health"] == 200 for r in rows))
    healthy = healthy and all(r["instances"]["have"] == r["instances"]["want"] for r in rows if r.get("instances"))
    if not as_json:
        for r in rows:
            if r.get("instances"):
                have, want = r["instances"]["have"], r["instances"]["want"]
                console.print(f"{r['service']}: {'unknown (the frontend did not answer)' if have is None else have} "
                              f"of {want} planned worker instance(s) registered", markup=False)
        for failure in result.failures:
            console.print(f"failed {failure}", markup=False)
        if healthy:  # every service active with /health 200
            console.print(f"endpoint: {plan['endpoint_url']}", markup=False)
        runner.finish(console, result, 0 if healthy else 1, "" if healthy else not_serving(rows))
    sys.exit(0 if healthy else 1)


#: a row's ``state`` when the unit is not installed on its host (systemd's LoadState ``not-found``)
NOT_DEPLOYED = "not deployed"
#: a row's ``state`` when its host could not be reached (nothing is known about the unit)
UNREACHABLE = "unreachable"


def health_text(row: dict[str, Any]) -> str:
    """The health column in words: the HTTP status of the service's /health (``200``, ``503``),
    ``no answer`` (nothing answered: the host script's -1), ``-`` for a unit that is not
    deployed, ``unknown`` when the unit could not be read (host unreachable, read failed)."""
    health = row["health"]
    if row["state"] == NOT_DEPLOYED:
        return "-"
    if health is None:
        return "unknown"
    return "no answer" if health < 0 else str(health)


def not_serving(rows: list[dict[str, Any]]) -> str:
    """The final line's reason when not every service serves, per host in words:
    ``lab-1, lab-2 unreachable (3 services unknown); nothing deployed on lab-3 (1 service)`` or
    ``lab-1 glm-x-agg-0 (failed/failed, health no answer)``; a frontend short of its planned
    worker instances: ``glm-x-frontend (1 of 2 instances registered)``."""
    by_host: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by_host.setdefault(r["host"], []).append(r)
    unreachable = [h for h, rs in by_host.items() if all(r["state"] == UNREACHABLE for r in rs)]
    undeployed = [h for h, rs in by_host.items() if all(r["state"] == NOT_DEPLOYED for r in rs)]
    parts = []
    if unreachable:
        n = sum(len(by_host[h]) for h in unreachable)
        parts.append(f"{', '.join(unreachable)} unreachable ({n} service(s) unknown)")
    if undeployed:
        n = sum(len(by_host[h]) for h in undeployed)
        parts.append(f"nothing deployed on {', '.join(undeployed)} ({n} service(s) of the Plan not installed)")
    parts += [f"{r['host']} {r['service']} ({r['state']}, health {health_text(r)})" for r in rows
              if r["host"] not in unreachable + undeployed and not (r["state"] == "active" and r["health"] == 200)]
    parts += [f"{r['service']} ({'unknown' if r['instances']['have'] is None else r['instances']['have']} of "
              f"{r['instances']['want']} instances registered)"
              for r in rows if r.get("instances") and r["instances"]["have"] != r["instances"]["want"]]
    return "; ".join(parts) or "no service of the Plan was read"


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"


def add_live_numbers(rows: list[dict[str, Any]], plan: dict) -> None:
    """Each row's ``live``: running / waiting requests and KV cache usage (0..1) read from the
    service's own metrics (glmops.monitoring.read_live, from the controller; ``{}`` when it
    has no metrics or does not answer)."""
    live = read_live(plan["services"])
    for row in rows:
        row["live"] = live.get(row["service"], {})


def status_rows(plan: dict, result: runner.RunResult) -> list[dict[str, Any]]:
    """Merge the Plan's services with what the status run read on each host. ``state`` in words:
    systemd's (``active``, ``failed/failed (...)``), :data:`NOT_DEPLOYED`, :data:`UNREACHABLE`, or
    ``unknown (...)`` saying why the unit was not read; ``health`` stays the host's number (None: not read)."""
    seen = {(s["host"], s["unit"]): s for s in result.services}
    rows = []
    for svc in plan["services"]:
        got = seen.get((svc["host"], svc["unit"]))
        host_state = result.hosts.get(svc["host"])
        if got and got.get("loaded") == "not-found":
            state = NOT_DEPLOYED
        elif got:  # active, or e.g. activating/auto-restart, failed/failed (start-limit-hit; ...)
            state = got["active"] if got["active"] == "active" else f"{got['active']}/{got['sub']}"
            if got.get("failure"):
                state += f" ({got['failure']})"
        elif host_state and host_state.unreachable:
            state = UNREACHABLE
        elif host_state and host_state.failed:
            state = f"unknown (the read failed at {host_state.failed_task or host_state.last_task or 'a task'})"
        else:
            state = "unknown (not read)"
        rows.append({
            "host": svc["host"], "service": svc["name"], "unit": svc["unit"], "role": svc["role"],
            "state": state,
            "sub": got["sub"] if got else "", "pid": got["pid"] if got else 0,
            "restarts": got["restarts"] if got else None,
            "health": got["health"] if got else None,
            "uptime_s": got["uptime_s"] if got else None,
            "gpus": svc["gpus"], "url": svc["url"],
            "first_error": got.get("first_error", "") if got else "",
            "journal": got.get("journal", "") if got else "",
            "instances": _instances(svc) if svc.get("instances") else None,
        })
    return rows


def _instances(svc: dict) -> dict[str, Any]:
    """``{have, want}``: the worker instances a front door that discovers its workers (Dynamo's
    frontend) lists in its ``/health``, read from the controller, and the Plan's count (``have``
    None when the frontend does not answer)."""
    try:
        with urllib.request.urlopen(svc["health_url"], timeout=5) as resp:
            doc = json.loads(resp.read())
    except urllib.error.HTTPError as exc:  # 503 without workers: the same document
        try:
            doc = json.loads(exc.read())
        except (ValueError, OSError):
            doc = None
    except (OSError, ValueError):
        doc = None
    return {"have": len(registry.instances_in(doc)) if isinstance(doc, dict) else None, "want": int(svc["instances"])}


def _select(plan: dict, service: str | None) -> list[dict]:
    """The services ``logs`` SERVICE names (a service or unit name, a role or a host; all
    without one); :class:`Unselected` naming what is accepted when none."""
    if not service:
        return plan["services"]
    picked = [s for s in plan["services"]
              if service in (s["name"], s["unit"], s["role"], s["host"])]
    if not picked:
        names = ", ".join(s["name"] for s in plan["services"])
        raise Unselected(f"service {service!r} is not in the Plan; accepted: {names}, a role or a host")
    return picked


def _log_units(view: dict, service: str | None, services: tuple[str, ...]) -> list[dict]:
    """``logs``' services of one topology's plan view: SERVICE among the ``--service`` ones."""
    return _select({**view, "services": pick_services(view, services)}, service)


@click.command("logs")
@ANSIBLE_OPTS
@INVENTORY
@TOPOLOGY
@click.argument("service", required=False)
@click.option("-f", "--follow", is_flag=True, help="Keep printing new lines (ssh + journalctl -f).")
@click.option("-n", "--lines", default=100, show_default=True, type=click.IntRange(1, 100000))
@SERVICE
@LIMIT
def logs(inventory, topology, service, follow, lines, services, limit):
    """Journal lines of SERVICE (a service or unit name, a role or a host; default all) and of
    the --service units. Without --topology: the topology recorded on the hosts by the last deploy."""
    named = (lambda view: _log_units(view, service, services)) if (service or services) else None
    # bad SERVICE/--service/--limit: exit 2 here, before any host (for -f too)
    run = day2_run(inventory, topology,
                   lambda view: {"glmops_log_units": [s["unit"] for s in _log_units(view, service, services)]},
                   limit=limit, selected=named, glmops_log_lines=lines)
    if follow:  # ssh + journalctl -f: the hosts' records are read first (one read-only run)
        planned, _ = load_deployed_plan(inventory, topology, limit)
        try:
            picked = _log_units(planned.view(), service, services)
        except Unselected as exc:
            exit_unselected(exc)
        kept = set(check_run_target(inventory, limit)) if limit else None
        picked = [s for s in picked if kept is None or s["host"] in kept]
        code = _follow(inventory, picked, lines)
        sys.exit(0 if code == 0 else 1)  # ssh's own codes (255: no connection) are not ours
    console = make_console()
    result = runner.run("logs", "logs.yml", inventory, run.extravars, limit=limit,
                        console=make_console(stderr=True), quiet=True, planned=run.planned,
                        alternatives=run.alternatives)
    run.chosen(result)
    for out in result.outputs:
        if console.is_terminal:
            console.rule(out["host"])
        else:  # a rule fills the console's width, which is unbounded off a terminal
            click.echo(f"==> {out['host']} <==")
        click.echo(out["res"].get("stdout", ""))
    for failure in result.failures:
        console.print(f"failed {failure}", markup=False)
    runner.finish(console, result)


def _follow(inventory: str, services: list[dict], lines: int) -> int:
    by_host: dict[str, list[str]] = {}
    for svc in services:
        by_host.setdefault(svc["host"], []).append(svc["unit"])
    procs = []
    for host, units in by_host.items():
        remote = ["journalctl", "-f", "--no-pager", "-o", "short-iso", "-n", str(lines)]
        remote += [f"--unit={u}" for u in units]
        procs.append(subprocess.Popen(ssh_command(inventory, host, remote)))
    try:
        return max(p.wait() for p in procs)
    except KeyboardInterrupt:
        for p in procs:
            p.terminate()
        return 0
