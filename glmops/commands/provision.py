"""Host verbs: ``glmops provision`` and ``glmops check``.

``provision`` runs ``playbooks/provision.yml`` (NVIDIA driver + fabric manager in lockstep,
container toolkit, then every precheck); ``check`` runs ``playbooks/check.yml`` (prechecks
only, changes nothing) and prints one report per node (``--json``: one JSON document).
Both go through :mod:`glmops.runner`. When the inventory describes a deployment
(``glmops_model`` set) it is validated first: bad input prints every problem and exits 2
with no host contacted. Exit codes: 0 ok, 1 a host failed (a precheck, a task,
unreachable), 2 bad input.
"""
from __future__ import annotations

import json
import sys
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from glmops.commands.ansible_opts import ANSIBLE_OPTS
from glmops import planning, runner
from glmops.commands.common import load_plan
from glmops.commands.options import INVENTORY, LIMIT
from glmops.inventory import defines
from glmops.model import ValidationError
from glmops.output import console as make_console

#: the event key of the prechecks' report (roles/prechecks glmops_prechecks, glmops.runner.event_of)
PRECHECK_EVENT = "precheck_report"


def has_deployment(inventory: str) -> bool:
    """True when any host of ``inventory`` sets ``glmops_model`` (:func:`glmops.inventory.defines`:
    Ansible's own API with the run's Vault secrets); exit 2 printing the problems when the
    inventory cannot be read."""
    try:
        return defines(inventory, "glmops_model")
    except ValidationError as exc:
        err = make_console(stderr=True)
        err.print(f"{len(exc.problems)} problem(s) in {inventory}; no host contacted:", markup=False)
        for problem in exc.problems:
            err.print(f"  {problem}", markup=False)
        sys.exit(2)


def _validate(inventory: str) -> planning.Planned | None:
    """The deployment's Plan when the inventory has one (bad input: exit 2 printing every
    problem), else None."""
    return load_plan(inventory, None) if has_deployment(inventory) else None


class ReportCollector:
    """An ``on_event`` callback for :func:`glmops.runner.run`: keeps the precheck report of each
    host (the result whose event key is :data:`PRECHECK_EVENT`)."""

    def __init__(self) -> None:
        self.reports: dict[str, dict[str, Any]] = {}

    def __call__(self, event: dict) -> None:
        data = event.get("event_data") or {}
        res = data.get("res") or {}
        if (event.get("event") == "runner_on_ok" and runner.event_of(data) == PRECHECK_EVENT
                and isinstance(res.get("report"), dict)):
            self.reports[data["host"]] = res["report"]


def reports(result: runner.RunResult, collected: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per host, the precheck report of the run (``collected`` by :class:`ReportCollector`, see
    glmops.prechecks.report); a host that failed or was unreachable before reporting gets
    ``{ok: false, failed: [its error]}``."""
    out: dict[str, dict[str, Any]] = dict(collected)
    for host, stats in result.hosts.items():
        if host not in out and host != "localhost" and stats.state != "ok":
            out[host] = {"host": host, "ok": False, "failed": [f"{host}: {m}" for m in stats.messages] or
                         [f"{host}: {stats.state}"], "warnings": [], "checks": []}
    return out


def print_reports(nodes: dict[str, dict[str, Any]], console: Console) -> None:
    """A table per node: check, result, found, needed; then every failure line."""
    table = Table(title="glmops check")
    for col in ("host", "check", "result", "found", "needed"):
        table.add_column(col)
    for host, rep in sorted(nodes.items()):
        for c in rep.get("checks", []):
            state = "ok" if c["ok"] else ("WARN" if c.get("severity") == "warn" else "FAILED")
            table.add_row(host, c["check"], state, str(c["found"]), str(c["needed"]))
    console.print(table)
    for host, rep in sorted(nodes.items()):
        for line in rep.get("failed", []):
            console.print(f"FAILED {line}", markup=False)
        for line in rep.get("warnings", []):
            console.print(f"warning {line}", markup=False)


def planned_driver_branch(planned: planning.Planned | None) -> str | None:
    """The driver branch the Plan's builds need (the highest ``driver_min`` of its hosts' precheck
    needs, :func:`glmops.prechecks.driver_need`), or None without a Plan or an NVIDIA host."""
    if planned is None:
        return None
    need = max((int(n.get("driver_min") or 0) for n in planned.precheck_needs().values()), default=0)
    return str(need) if need else None


@click.command("provision")
@ANSIBLE_OPTS
@INVENTORY
@click.option("--check", is_flag=True, help="Change nothing; show what would change.")
@click.option("--diff", is_flag=True, help="Show the changes to files.")
@LIMIT
@click.option("--no-reboot", is_flag=True,
              help="Never reboot; report hosts whose new driver needs one (nvidia_driver_reboot=false).")
@click.option("--upgrade-driver", is_flag=True,
              help="Allow replacing an installed driver branch: unhold, upgrade driver and fabric manager "
                   "together, hold again (nvidia_driver_upgrade=true).")
def provision(inventory, check, diff, limit, no_reboot, upgrade_driver):
    """Install the NVIDIA driver branch (fabric manager and nvlsm in lockstep, held), the
    container toolkit, and run every precheck."""
    console = make_console()
    planned = _validate(inventory)
    extravars: dict[str, Any] = {}
    if no_reboot:
        extravars["nvidia_driver_reboot"] = False
    if upgrade_driver:
        extravars["nvidia_driver_upgrade"] = True
    branch = planned_driver_branch(planned)
    if branch:  # F30: the driver branch the deployment's engine builds need (roles/nvidia_driver default)
        extravars["nvidia_driver_planned_branch"] = branch

    collector = ReportCollector()
    result = runner.run("provision", "provision.yml", inventory, extravars,
                        check=check, diff=diff, limit=limit, console=console,
                        on_event=collector, planned=planned)
    runner.print_summary(result, console)
    nodes = reports(result, collector.reports)
    if nodes and not check:
        print_reports(nodes, console)
    runner.finish(console, result)


@click.command("check")
@ANSIBLE_OPTS
@INVENTORY
@LIMIT
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document: a report per node.")
def check(inventory, limit, as_json):
    """Check every host against what the deployment needs (OS, GPUs, driver, fabric manager,
    disk, /dev/shm, memlock, ports, time sync, RDMA devices); report all failures at once."""
    console = make_console(stderr=as_json)
    planned = _validate(inventory)
    collector = ReportCollector()
    result = runner.run("check", "check.yml", inventory, {}, limit=limit,
                        console=make_console(stderr=True), quiet=as_json, on_event=collector, planned=planned)
    nodes = reports(result, collector.reports)
    ok = result.ok and bool(nodes) and all(r["ok"] for r in nodes.values())
    if as_json:
        click.echo(json.dumps({"ok": ok, "nodes": nodes, "artifacts": str(result.artifacts)}, indent=2))
    else:
        console.print(f"run artifacts: {result.artifacts}", markup=False)
        print_reports(nodes, console)
        for failure in result.failures:
            if "precheck(s) failed" not in failure:
                console.print(f"failed {failure}", markup=False)
        bad = [h for h, r in sorted(nodes.items()) if not r["ok"]]
        runner.finish(console, result, 0 if ok else 1,
                      f"precheck(s) failed on {', '.join(bad)}" if bad and not ok else "")
    sys.exit(0 if ok else 1)
