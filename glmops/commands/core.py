"""The core verbs: ``glmops validate`` (here) and ``glmops plan`` (``glmops.commands.plan``,
re-exported so the verb table can point at this module).

Both read the inventory on the controller only; no host is contacted. Exit codes: 0 valid
(warnings printed: deviations from a seed's recipe the engine accepts), 2 bad input (every
problem printed at once; ``--strict``: a warning too).
"""
from __future__ import annotations

import json
import sys

import click
from glmops.commands.ansible_opts import ANSIBLE_OPTS
from glmops.commands.options import STRICT, print_warnings

from glmops import planning
from glmops.commands.plan import plan  # noqa: F401  (verb table: glmops.commands.core:plan)
from glmops.model import ValidationError, split_problems


def _summary(dep, the_plan) -> str:
    services = len(the_plan.services) if the_plan is not None else 0
    hosts = len(the_plan.hosts) if the_plan is not None else len(dep.hosts)
    pools = ", ".join(
        f"{p.role} {p.replicas}x(tp{p.tp}" + (f" pp{p.pp}" if p.pp > 1 else "") + (f" ep{p.ep}" if p.ep > 1 else "")
        + (f" dp{p.dp}" if p.dp > 1 else "") + ")"
        for p in dep.pools
    )
    return (f"{dep.inventory_path}: valid: {dep.model} {dep.variant} on {dep.engine} {dep.engine_version}, "
            f"{dep.hardware}, {dep.topology} [{pools}], {services} service(s) on {hosts} host(s)")


@click.command("validate")
@ANSIBLE_OPTS
@click.option("-i", "--inventory", required=True, type=click.Path(),
              help="Inventory directory (hosts.yml + group_vars/) or file.")
@click.option("--topology", type=click.Choice(["agg", "disagg"]), default=None,
              help="Override glmops_topology.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@STRICT
def validate(inventory: str, topology: str | None, as_json: bool, strict: bool) -> None:
    """Check an inventory without contacting any host; print every problem (exit 2) and every
    warning (exit 0; --strict: exit 2)."""
    dep = None
    the_plan = None
    problems: list = []
    warnings: list = []
    try:
        planned = planning.load(inventory, topology, strict=strict)
        dep, the_plan, warnings = planned.deployment, planned.plan, planned.warnings
    except ValidationError as exc:
        problems, warnings = split_problems(exc.problems, strict)
    if as_json:
        out = {
            "inventory": inventory,
            "valid": not problems,
            "problems": [_as_dict(p) for p in problems],
        }
        if warnings:
            out["warnings"] = [_as_dict(p) for p in warnings]
        click.echo(json.dumps(out, indent=2))
    elif problems:
        click.echo(f"{len(problems)} problem(s) in {inventory}:")
        for p in problems + warnings:
            click.echo(f"  {p}")
    else:
        click.echo(_summary(dep, the_plan))
        print_warnings(warnings, inventory)
    if problems:
        sys.exit(2)


def _as_dict(p) -> dict:
    return {"code": p.code, "path": p.path, "message": p.message, "hint": p.hint, "severity": p.severity}
