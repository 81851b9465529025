"""``glmops history``: the generations each host keeps (``roles/generation``, recorded by every
deploy, serve and upgrade under ``<state_dir>/_records/<dep>/generations/<N>``), and
:func:`read_history`, the read-only run the day-2 verbs share.

Exit codes: 0 ok, 1 a host could not be read, 2 bad input.
"""
from __future__ import annotations

import json
import sys
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from glmops.commands.ansible_opts import ANSIBLE_OPTS
from glmops import generations as G
from glmops import planning, runner
from glmops.commands.options import INVENTORY, LIMIT, SERVICE, TOPOLOGY
from glmops.commands.services import Unselected, exit_unselected, pick_services
from glmops.deploystate import records_dir
from glmops.inventory import load_deployment
from glmops.model import Problem, ValidationError
from glmops.output import console as make_console
from glmops.rules import _NAME_RE

#: the event key of roles/generation's list (glmops_generation.py list: JSON with it on stdout)
GENERATIONS = "generations"


def deployment_records(inventory: str, topology: str | None) -> tuple[str, list[str], str]:
    """(generations dir, hosts, deployment name) from the inventory, without the rules:
    history and rollback work on an inventory the rules reject."""
    dep = load_deployment(inventory, topology=topology)
    # what this verb uses must be sound even when the rest may not be: the deployment name and
    # state dir choose the records read and restored, the addresses the hosts contacted
    used = ("glmops_deployment", "glmops_state_dir", "ansible_host", "glmops_address")
    problems = [p for p in dep.problems or []
                if p.code in ("ADDRESS", "INVENTORY") or any(name in p.path for name in used)]
    if not _NAME_RE.match(dep.name or ""):
        problems.append(Problem("DEPLOYMENT_NAME", dep.source("name"),
                                f"deployment name {dep.name!r} is not accepted: use 1-40 characters a-z, 0-9 and '-'",
                                "set glmops_deployment, e.g. flash-b200"))
    if problems:
        raise ValidationError(problems)
    hosts = list(dict.fromkeys([*dep.worker_hosts, *dep.router_hosts,
                                *(p for pool in dep.pools for p in (pool.hosts or [])),
                                *([dep.router.host] if dep.router and dep.router.host else [])]))
    return f"{records_dir(dep.state_dir, dep.name)}/generations", hosts, dep.name


def read_history(inventory: str, topology: str | None, console: Console | None = None, limit: str | None = None
                 ) -> tuple[dict[str, dict[str, Any]], runner.RunResult, str, list[str]]:
    """host -> {"generations": [manifest], "current": N|None}, the run, the dir, the hosts."""
    gen_dir, hosts, _ = deployment_records(inventory, topology)
    got: dict[str, dict[str, Any]] = {}

    def on_event(event: dict) -> None:
        data = event.get("event_data") or {}
        if event.get("event") == "runner_on_ok" and runner.event_of(data) == GENERATIONS:
            try:
                got[data["host"]] = json.loads((data.get("res") or {}).get("stdout", ""))
            except ValueError:
                pass
            else:
                got[data["host"]].pop(runner.EVENT_KEY, None)

    result = runner.run("history", "history.yml", inventory,
                        {"glmops_day2_hosts": ",".join(hosts), "glmops_generation_dir": gen_dir},
                        limit=limit, console=console or make_console(stderr=True), quiet=True, on_event=on_event)
    return {h: got.get(h, {"generations": [], "current": None}) for h in hosts}, result, gen_dir, hosts


def history_units(inventory: str, topology: str | None, names: tuple[str, ...]) -> list[str]:
    """The unit names ``history --service NAME ...`` asks about (``.service`` added), checked
    against the services of every Plan the inventory makes (``--topology``: that one's), so
    a unit of the other topology counts. Exits 2 before any host: a name no Plan has (naming
    it and the accepted units), or the inventory's problems when it plans nothing."""
    views, problems = [], []
    for top in [topology] if topology else G.TOPOLOGIES:
        try:
            views.append(planning.load(inventory, top).view())
        except ValidationError as exc:
            problems = problems or exc.problems
    if not views:
        err = make_console(stderr=True)
        err.print(f"history --service needs the Plan to know the services; {len(problems)} problem(s) in "
                  f"{inventory}; no host contacted:", markup=False, soft_wrap=True)
        for problem in problems:
            err.print(f"  {problem}", markup=False, soft_wrap=True)
        sys.exit(2)
    units = list(dict.fromkeys(s["unit"] for v in views for s in v["services"]))
    try:
        pick_services({**views[0], "services": [{"unit": u} for u in units],
                       "topology": "/".join(v["topology"] for v in views)}, names)
    except Unselected as exc:
        exit_unselected(exc)
    return [n if n.endswith(".service") else f"{n}.service" for n in dict.fromkeys(names)]


@click.command("history")
@ANSIBLE_OPTS
@INVENTORY
@TOPOLOGY
@click.option("--json", "as_json", is_flag=True, help="Print JSON: per host its generations and the current one.")
@SERVICE
@LIMIT
def history(inventory, topology, as_json, services, limit):
    """List the generations recorded on every host (newest last; * = current).

    --service NAME: only the generations in which that service's unit, env or config files
    changed against the host's previous recorded generation (added, changed or removed; the
    oldest one a host keeps counts when it holds them), from the files each generation
    records; the name must be a service of a Plan the inventory makes (either topology)."""
    console = make_console()
    units = history_units(inventory, topology, services) if services else []
    hist, result, gen_dir, _ = read_history(inventory, topology, limit=limit)
    if units:
        hist = G.unit_changes(hist, units)
    if as_json:
        click.echo(json.dumps({"dir": gen_dir, **({"services": units} if units else {}), "hosts": hist,
                               "failures": result.failures}, indent=2))
        sys.exit(0 if result.ok else 1)
    table = Table(title=f"generations ({gen_dir})" + (f" changing {', '.join(units)}" if units else ""))
    for col in ("host", "gen", "recorded (UTC)", "by", "engine runtimes", "checkpoint", "plan", "units"):
        table.add_column(col)
    for host, got in hist.items():
        if not got["generations"]:
            table.add_row(host, "-", "-", "-", "-", "-", "-",
                          f"no change of {', '.join(units)} recorded" if units else "none recorded")
        for g in got["generations"]:
            mark = "*" if g["number"] == got["current"] else " "
            runtimes = ", ".join(f"{r['engine']} {r['version']}" for r in g.get("runtimes", [])) or \
                ", ".join(g.get("images", [])) or "-"
            ck = g.get("checkpoint", {})
            table.add_row(host, f"{g['number']}{mark}", g.get("recorded_at", ""), g.get("source", ""), runtimes,
                          f"{ck.get('repo', '')}@{str(ck.get('revision', ''))[:12]}", str(g.get("plan_hash", ""))[:12],
                          ", ".join(g["changed_units"] if units else (u["unit"] for u in g.get("units", []))))
    console.print(table)
    for failure in result.failures:
        console.print(f"failed {failure}", markup=False)
    runner.finish(console, result)
