"""Deploy and day-2 verbs: deploy, serve, status, logs, restart, stop, destroy.

Each verb validates and plans on the controller first (bad input: every problem,
exit 2, no host contacted), then runs its playbook (``playbooks/<verb>.yml``) through
``glmops.runner`` and prints the per-host summary. ``deploy`` leaves that to its run's
first play (the Plan is built once, in the glmops_plan plugin: exit 2 when it refuses).
Exit codes: 0 ok, 1 the run failed (a host unreachable, a unit not ready, a task failed),
2 bad input.
"""
from __future__ import annotations

import json
import shlex
import subprocess
import sys
from typing import Any

import click
from rich.table import Table

from glmops import runner
from glmops.commands.options import INVENTORY, LIMIT, TOPOLOGY
from glmops.output import console as make_console



def _console():
    return make_console()


def load_plan(inventory: str, topology: str | None) -> dict[str, Any]:
    """The plan view (glmops.deployview) or exit 2 printing every problem."""
    from glmops.deployview import PlanProblems, plan_view

    try:
        return plan_view(inventory, topology)
    except PlanProblems as exc:
        err = make_console(stderr=True)
        err.print(f"{len(exc.problems)} problem(s) in {inventory}; no host contacted:", markup=False)
        for problem in exc.problems:
            err.print(f"  {problem}", markup=False)
        sys.exit(2)


def deployed_topology(inventory: str, default: str) -> str:
    """The topology recorded on the hosts (their current generations, ``glmops history``),
    or ``default`` (the inventory's) when the hosts disagree or nothing is recorded
    (:func:`glmops.generations.deployed_topology`); its one line goes to stderr. One
    read-only run over the inventory's workers and routers."""
    from glmops import generations as G
    from glmops.commands.day2 import read_history

    hist, result, _, hosts = read_history(inventory, None)
    unread = [h for h in hosts if result.hosts.get(h) is None or result.hosts[h].state != "ok"]
    topology, line = G.deployed_topology(hist, default, unread)
    if line:
        make_console(stderr=True, highlight=False).print(line, markup=False, soft_wrap=True)
    return topology


def load_deployed_plan(inventory: str, topology: str | None) -> tuple[dict[str, Any], str]:
    """(plan view, topology) of what a day-2 verb acts on: ``--topology`` when given, else what
    the hosts record as deployed (:func:`deployed_topology`). Bad input exits 2 before any
    host is read (:func:`load_plan`)."""
    plan = load_plan(inventory, topology)
    if topology:
        return plan, topology
    deployed = deployed_topology(inventory, plan["topology"])
    return (plan if deployed == plan["topology"] else load_plan(inventory, deployed)), deployed


def exit_if_plan_refused(result: runner.RunResult) -> None:
    """Exit 2 printing every problem when the run's plan play refused the inventory (bad
    input: the run stopped on the controller, no host contacted); else return."""
    if not result.plan_problems:
        return
    head, *problems = result.plan_problems.strip().splitlines()
    err = make_console(stderr=True)
    err.print(head.removeprefix("glmops_plan: "), markup=False, soft_wrap=True)
    for problem in problems:
        err.print(f"  {problem}", markup=False, soft_wrap=True)
    sys.exit(2)


def _extravars(topology: str | None, **more: Any) -> dict[str, Any]:
    out = {k: v for k, v in more.items() if v is not None}
    if topology:
        out["glmops_topology"] = topology
    return out


def _finish(result: runner.RunResult, plan: dict, console) -> None:
    """The run's summary, then its exit status line as the last line; exits 0 or 1."""
    runner.print_summary(result, console, plan)
    runner.finish(console, result)


@click.command("deploy")
@INVENTORY
@TOPOLOGY
@click.option("--check", is_flag=True, help="Change nothing; show what would change.")
@click.option("--diff", is_flag=True, help="Show the changes to files.")
@LIMIT
@click.option("--skip-provision", is_flag=True,
              help="Do not provision and check the hosts first (driver, container toolkit, prechecks).")
@click.option("--skip-smoke", is_flag=True, help="Do not run `glmops smoke` after a successful deploy.")
@click.option("--full", is_flag=True,
              help="Run every role on every host, also on hosts the first read finds exactly as the Plan wants.")
@click.option("--no-reboot", is_flag=True,
              help="As `glmops provision --no-reboot`: never reboot; a host whose new driver needs one fails its prechecks.")
@click.option("--upgrade-driver", is_flag=True,
              help="As `glmops provision --upgrade-driver`: allow replacing an installed driver branch.")
@click.option("--no-prune", is_flag=True,
              help="Refuse (exit 1, nothing changed) when a host the last deploy used has left the Plan, "
                   "instead of stopping and removing the deployment's units there.")
def deploy(inventory, topology, check, diff, limit, skip_provision, skip_smoke, full, no_reboot, upgrade_driver,
           no_prune):
    """Read every host once (a host already exactly as the Plan wants, with its units
    healthy and its last deploy of this Plan recorded, is left alone), provision and check
    the others (as `glmops provision`; a failed precheck stops here with every host's
    report), install runtimes, place the Plan's services under systemd, start them in order
    (workers gated on /health 200 and a one-token request, then the router) and check the
    endpoint. A host the last recorded generation used that the Plan no longer has (a
    smaller Plan, another topology, a host taken out of the groups) has this deployment's
    units stopped and removed once the new Plan serves; a host the inventory no longer
    names is reported (it cannot be reached). With --no-prune the deploy instead stops
    before any change and exits 1 naming those hosts."""
    from glmops.commands.provision import ReportCollector, print_reports, reports

    console = _console()
    if skip_provision and (no_reboot or upgrade_driver):
        flags = [f for f, on in (("--no-reboot", no_reboot), ("--upgrade-driver", upgrade_driver)) if on]
        raise click.UsageError(f"{' and '.join(flags)} {'is a provisioning option' if len(flags) == 1 else 'are provisioning options'}"
                               " and --skip-provision skips provisioning; accepted: one or the other")
    collector = ReportCollector()
    # validate + plan happen once, in the run's plan play (bad input: exit 2, no host
    # contacted); its summary (result.plan) feeds the table
    result = runner.run("deploy", "deploy.yml", inventory,
                        _extravars(topology, glmops_provision=False if skip_provision else None,
                                   glmops_fast=False if full else None,
                                   nvidia_driver_reboot=False if no_reboot else None,
                                   nvidia_driver_upgrade=True if upgrade_driver else None,
                                   glmops_prune=False if no_prune else None),
                        check=check, diff=diff, limit=limit, console=console, on_event=collector)
    exit_if_plan_refused(result)
    plan = result.plan or {}
    if not all(r.get("ok") for r in collector.reports.values()):
        # a failed precheck stopped the run (any_errors_fatal) before any engine unit changed
        print_reports(reports(result, collector.reports), console)
    if result.ok and not check and not skip_smoke:  # glmops.smoke: every check, exit 1 on a failed one
        from glmops.smoke import smoke_after_deploy

        runner.print_summary(result, console, plan)
        smoked = smoke_after_deploy(inventory, topology, console)
        runner.finish(console, result, 0 if smoked else 1, "" if smoked else "the smoke checks after the deploy failed")
    _finish(result, plan, console)


@click.command("serve")
@INVENTORY
@TOPOLOGY
@click.option("--check", is_flag=True, help="Change nothing; show what would change.")
@click.option("--diff", is_flag=True, help="Show the changes to files.")
@LIMIT
def serve(inventory, topology, check, diff, limit):
    """Place and (re)start the services only (no runtime install), gated like deploy."""
    console = _console()
    plan = load_plan(inventory, topology)
    result = runner.run("serve", "serve.yml", inventory, _extravars(topology),
                        check=check, diff=diff, limit=limit, console=console)
    _finish(result, plan, console)


@click.command("status")
@INVENTORY
@TOPOLOGY
@click.option("--json", "as_json", is_flag=True, help="Print JSON (one object per service).")
def status(inventory, topology, as_json):
    """Per service: unit state, health, uptime, GPUs and URL. Exit 1 unless all serve.
    Without --topology: the topology recorded on the hosts by the last deploy."""
    console = _console()
    plan, topology = load_deployed_plan(inventory, topology)
    result = runner.run("status", "status.yml", inventory, _extravars(topology),
                        console=make_console(stderr=True), quiet=True)
    rows = status_rows(plan, result)
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
            table.add_row(r["host"], r["service"], r["role"], r["state"], str(r["health"]),
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
                console.print(f"{r['service']}: {'?' if have is None else have} of {want} planned worker "
                              "instance(s) registered", markup=False)
        for failure in result.failures:
            console.print(f"failed {failure}", markup=False)
        if healthy:  # every service active with /health 200
            console.print(f"endpoint: {plan['endpoint_url']}", markup=False)
        bad = [f"{r['host']} {r['service']} ({r['state']}, health {r['health']})" for r in rows
               if not (r["state"] == "active" and r["health"] == 200)]
        short = [f"{r['service']} ({r['instances']['have']} of {r['instances']['want']} instances registered)"
                 for r in rows if r.get("instances") and r["instances"]["have"] != r["instances"]["want"]]
        bad += short
        runner.finish(console, result, 0 if healthy else 1, ", ".join(bad) if bad and not healthy else "")
    sys.exit(0 if healthy else 1)


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"


def add_live_numbers(rows: list[dict[str, Any]], plan: dict) -> None:
    """Each row's ``live``: running / waiting requests and KV cache usage (0..1) read from the
    service's own metrics (glmops.monitoring.read_live, from the controller; ``{}`` when it
    has no metrics or does not answer)."""
    from glmops.monitoring import read_live

    live = read_live(plan["services"])
    for row in rows:
        row["live"] = live.get(row["service"], {})


def status_rows(plan: dict, result: runner.RunResult) -> list[dict[str, Any]]:
    """Merge the Plan's services with what the status run read on each host."""
    seen = {(s["host"], s["unit"]): s for s in result.services}
    rows = []
    for svc in plan["services"]:
        got = seen.get((svc["host"], svc["unit"]))
        host_state = result.hosts.get(svc["host"])
        if got:  # active, or e.g. activating/auto-restart, failed/failed (start-limit-hit; ...)
            state = got["active"] if got["active"] == "active" else f"{got['active']}/{got['sub']}"
            if got.get("failure"):
                state += f" ({got['failure']})"
        else:
            state = host_state.state if host_state and host_state.state != "ok" else "unknown"
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
    import urllib.error
    import urllib.request

    from glmops.engines import dynamo

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
    return {"have": len(dynamo.registered(doc)) if isinstance(doc, dict) else None, "want": int(svc["instances"])}


def _select(plan: dict, service: str | None) -> list[dict]:
    if not service:
        return plan["services"]
    picked = [s for s in plan["services"]
              if service in (s["name"], s["unit"], s["role"], s["host"])]
    if not picked:
        names = ", ".join(s["name"] for s in plan["services"])
        make_console(stderr=True).print(f"service {service!r} is not in the Plan; accepted: {names}, a role or a host",
                                        markup=False)
        sys.exit(2)
    return picked


@click.command("logs")
@INVENTORY
@TOPOLOGY
@click.argument("service", required=False)
@click.option("-f", "--follow", is_flag=True, help="Keep printing new lines (ssh + journalctl -f).")
@click.option("-n", "--lines", default=100, show_default=True, type=click.IntRange(1, 100000))
def logs(inventory, topology, service, follow, lines):
    """Journal lines of SERVICE (a service or unit name, a role or a host; default all).
    Without --topology: the topology recorded on the hosts by the last deploy."""
    plan, topology = load_deployed_plan(inventory, topology)
    picked = _select(plan, service)
    if follow:
        sys.exit(_follow(inventory, picked, lines))
    console = _console()
    result = runner.run("logs", "logs.yml", inventory,
                        _extravars(topology, glmops_log_units=[s["unit"] for s in picked], glmops_log_lines=lines),
                        console=make_console(stderr=True), quiet=True)
    for out in result.outputs:
        if console.is_terminal:
            console.rule(out["host"])
        else:  # a rule fills the console's width, which is unbounded off a terminal
            click.echo(f"==> {out['host']} <==")
        click.echo(out["res"].get("stdout", ""))
    for failure in result.failures:
        console.print(f"failed {failure}", markup=False)
    if not result.ok:
        runner.finish(console, result)
    sys.exit(0)


def ssh_command(inventory: str, host: str, remote: list[str]) -> list[str]:
    """``ssh`` argv reaching ``host`` with the inventory's connection variables."""
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader
    from ansible.vars.manager import VariableManager

    loader = DataLoader()
    inv = InventoryManager(loader=loader, sources=[inventory])
    hv = VariableManager(loader=loader, inventory=inv).get_vars(host=inv.get_host(host))
    argv = ["ssh", "-o", "BatchMode=yes"]
    if hv.get("ansible_ssh_private_key_file"):
        argv += ["-i", str(hv["ansible_ssh_private_key_file"])]
    if hv.get("ansible_port"):
        argv += ["-p", str(hv["ansible_port"])]
    argv += shlex.split(str(hv.get("ansible_ssh_common_args") or ""))
    user = hv.get("ansible_user")
    target = str(hv.get("ansible_host") or host)
    # "--": the destination is never read as an option (an address such as "-oProxyCommand=...")
    argv += ["--", f"{user}@{target}" if user else target]
    return argv + [shlex.join(remote)]


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


@click.command("restart")
@INVENTORY
@TOPOLOGY
@click.option("--rolling", is_flag=True,
              help="One replica (agg) or pool (disagg) at a time, waiting for readiness in between.")
def restart(inventory, topology, rolling):
    """Restart the services: workers (gated), then the router. Without --topology: the
    topology recorded on the hosts by the last deploy."""
    console = _console()
    plan, topology = load_deployed_plan(inventory, topology)
    if not rolling:
        result = runner.run("restart", "restart.yml", inventory, _extravars(topology), console=console)
        _finish(result, plan, console)
    result = None
    for step, units in rolling_steps(plan):
        console.print(f"{runner.stamp()} [bold]restart step[/bold] {step}: {', '.join(units)}")
        result = runner.run("restart", "restart.yml", inventory,
                            _extravars(topology, glmops_restart_units=units), console=console)
        if not result.ok:
            break
    _finish(result, plan, console)


def rolling_steps(plan: dict) -> list[tuple[str, list[str]]]:
    """Restart steps: one per discovery store member (never every member at once), one per agg
    replica, one per disagg pool, then the front door."""
    steps: dict[str, list[str]] = {}
    for svc in plan["services"]:
        if svc["pool"] == "store":
            key = f"store {svc['name']}"
        elif svc["pool"] == "router":
            key = "router"
        elif svc["pool"] == "agg":
            key = f"agg replica {svc['replica']}"
        else:
            key = f"{svc['pool']} pool"
        steps.setdefault(key, []).append(svc["unit"])
    ordered = [k for k in steps if k != "router"] + (["router"] if "router" in steps else [])
    return [(k, steps[k]) for k in ordered]


@click.command("stop")
@INVENTORY
@TOPOLOGY
def stop(inventory, topology):
    """Stop the router, then the workers (units and files stay). Without --topology: the
    topology recorded on the hosts by the last deploy."""
    console = _console()
    plan, topology = load_deployed_plan(inventory, topology)
    result = runner.run("stop", "stop.yml", inventory, _extravars(topology), console=console)
    _finish(result, plan, console)


@click.command("destroy")
@INVENTORY
@TOPOLOGY
@click.option("--yes", is_flag=True, help="Required: really remove the deployment.")
@click.option("--purge-checkpoints", is_flag=True, help="Also delete the downloaded checkpoint.")
def destroy(inventory, topology, yes, purge_checkpoints):
    """Stop and remove every unit, env and config file of the deployment (checkpoints
    stay unless --purge-checkpoints). Without --topology: the topology recorded on the
    hosts by the last deploy."""
    console = _console()
    if not yes:
        make_console(stderr=True).print("destroy removes units and env files: pass --yes to confirm")
        sys.exit(2)
    plan, topology = load_deployed_plan(inventory, topology)
    result = runner.run("destroy", "destroy.yml", inventory,
                        _extravars(topology, glmops_purge_checkpoints=purge_checkpoints), console=console)
    for svc in plan["services"]:
        if svc["role"] == "store" and result.ok:  # the units are gone; the store's data is not
            console.print(f"kept on {svc['host']}: {svc['name']}'s data under {plan['state_dir']}/{plan['deployment']}/ "
                          "(remove it to start the discovery store empty)", markup=False)
    _finish(result, plan, console)
