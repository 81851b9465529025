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
from rich.console import Console
from rich.table import Table

from glmops import runner

INVENTORY = click.option("-i", "--inventory", required=True, type=click.Path(exists=True),
                         help="Ansible inventory (directory or file).")
TOPOLOGY = click.option("--topology", type=click.Choice(["agg", "disagg"]), default=None,
                        help="Override the inventory's glmops_topology.")
LIMIT = click.option("--limit", default=None, help="Ansible --limit pattern.")


def _console() -> Console:
    return Console(highlight=False)


def load_plan(inventory: str, topology: str | None) -> dict[str, Any]:
    """The plan view (glmops.deployview) or exit 2 printing every problem."""
    from glmops.deployview import PlanProblems, plan_view

    try:
        return plan_view(inventory, topology)
    except PlanProblems as exc:
        err = Console(stderr=True, highlight=False)
        err.print(f"{len(exc.problems)} problem(s) in {inventory}; no host contacted:")
        for problem in exc.problems:
            err.print(f"  {problem}", markup=False)
        sys.exit(2)


def exit_if_plan_refused(result: runner.RunResult) -> None:
    """Exit 2 printing every problem when the run's plan play refused the inventory (bad
    input: the run stopped on the controller, no host contacted); else return."""
    if not result.plan_problems:
        return
    head, *problems = result.plan_problems.strip().splitlines()
    err = Console(stderr=True, highlight=False)
    err.print(head.removeprefix("glmops_plan: "), markup=False, soft_wrap=True)
    for problem in problems:
        err.print(f"  {problem}", markup=False, soft_wrap=True)
    sys.exit(2)


def _extravars(topology: str | None, **more: Any) -> dict[str, Any]:
    out = {k: v for k, v in more.items() if v is not None}
    if topology:
        out["glmops_topology"] = topology
    return out


def _finish(result: runner.RunResult, plan: dict, console: Console) -> None:
    runner.print_summary(result, console, plan)
    sys.exit(0 if result.ok else 1)


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
def deploy(inventory, topology, check, diff, limit, skip_provision, skip_smoke, full, no_reboot, upgrade_driver):
    """Read every host once (a host already exactly as the Plan wants, with its units
    healthy and its last deploy of this Plan recorded, is left alone), provision and check
    the others (as `glmops provision`; a failed precheck stops here with every host's
    report), install runtimes, place the Plan's services under systemd, start them in order
    (workers gated on /health 200 and a one-token request, then the router) and check the
    endpoint."""
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
                                   nvidia_driver_upgrade=True if upgrade_driver else None),
                        check=check, diff=diff, limit=limit, console=console, on_event=collector)
    exit_if_plan_refused(result)
    plan = result.plan or {}
    if not all(r.get("ok") for r in collector.reports.values()):
        # a failed precheck stopped the run (any_errors_fatal) before any engine unit changed
        print_reports(reports(result, collector.reports), console)
    if result.ok and not check and not skip_smoke:  # glmops.smoke: every check, exit 1 on a failed one
        from glmops.smoke import smoke_after_deploy

        runner.print_summary(result, console, plan)
        sys.exit(0 if smoke_after_deploy(inventory, topology, console) else 1)
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
    """Per service: unit state, health, uptime, GPUs and URL. Exit 1 unless all serve."""
    console = _console()
    plan = load_plan(inventory, topology)
    result = runner.run("status", "status.yml", inventory, _extravars(topology),
                        console=Console(stderr=True), quiet=True)
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
        for failure in result.failures:
            console.print(f"failed {failure}", markup=False)
        console.print(f"endpoint: {plan['endpoint_url']}")
    healthy = result.ok and rows and all(r["state"] == "active" and r["health"] == 200 for r in rows)
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
        if got:  # active, or e.g. activating/auto-restart, failed/failed
            state = got["active"] if got["active"] == "active" else f"{got['active']}/{got['sub']}"
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
        })
    return rows


def _select(plan: dict, service: str | None) -> list[dict]:
    if not service:
        return plan["services"]
    picked = [s for s in plan["services"]
              if service in (s["name"], s["unit"], s["role"], s["host"])]
    if not picked:
        names = ", ".join(s["name"] for s in plan["services"])
        Console(stderr=True).print(f"service {service!r} is not in the Plan; accepted: {names}, a role or a host",
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
    """Journal lines of SERVICE (a service or unit name, a role or a host; default all)."""
    plan = load_plan(inventory, topology)
    picked = _select(plan, service)
    if follow:
        sys.exit(_follow(inventory, picked, lines))
    console = _console()
    result = runner.run("logs", "logs.yml", inventory,
                        _extravars(topology, glmops_log_units=[s["unit"] for s in picked], glmops_log_lines=lines),
                        console=Console(stderr=True), quiet=True)
    for out in result.outputs:
        console.rule(out["host"])
        click.echo(out["res"].get("stdout", ""))
    for failure in result.failures:
        console.print(f"failed {failure}", markup=False)
    sys.exit(0 if result.ok else 1)


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
    """Restart the services: workers (gated), then the router."""
    console = _console()
    plan = load_plan(inventory, topology)
    if not rolling:
        result = runner.run("restart", "restart.yml", inventory, _extravars(topology), console=console)
        _finish(result, plan, console)
    result = None
    for step, units in rolling_steps(plan):
        console.print(f"[bold]restart step[/bold] {step}: {', '.join(units)}")
        result = runner.run("restart", "restart.yml", inventory,
                            _extravars(topology, glmops_restart_units=units), console=console)
        if not result.ok:
            break
    _finish(result, plan, console)


def rolling_steps(plan: dict) -> list[tuple[str, list[str]]]:
    """Restart steps: one per agg replica, one per disagg pool, then the front door."""
    steps: dict[str, list[str]] = {}
    for svc in plan["services"]:
        if svc["pool"] == "router":
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
    """Stop the router, then the workers (units and files stay)."""
    console = _console()
    plan = load_plan(inventory, topology)
    result = runner.run("stop", "stop.yml", inventory, _extravars(topology), console=console)
    _finish(result, plan, console)


@click.command("destroy")
@INVENTORY
@TOPOLOGY
@click.option("--yes", is_flag=True, help="Required: really remove the deployment.")
@click.option("--purge-checkpoints", is_flag=True, help="Also delete the downloaded checkpoint.")
def destroy(inventory, topology, yes, purge_checkpoints):
    """Stop and remove every unit, env and config file of the deployment (checkpoints
    stay unless --purge-checkpoints)."""
    console = _console()
    if not yes:
        Console(stderr=True).print("destroy removes units and env files: pass --yes to confirm")
        sys.exit(2)
    plan = load_plan(inventory, topology)
    result = runner.run("destroy", "destroy.yml", inventory,
                        _extravars(topology, glmops_purge_checkpoints=purge_checkpoints), console=console)
    _finish(result, plan, console)
