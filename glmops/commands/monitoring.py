"""``glmops targets``: the deployment's Prometheus scrape targets (file_sd JSON), no host contacted."""
from __future__ import annotations

import sys
from pathlib import Path

import click
from glmops.commands.ansible_opts import ANSIBLE_OPTS

from glmops import monitoring, planning
from glmops.model import ValidationError


@click.command("targets")
@ANSIBLE_OPTS
@click.option("-i", "--inventory", required=True, type=click.Path(exists=True),
              help="Inventory directory (hosts.yml + group_vars/) or file.")
@click.option("--topology", type=click.Choice(["agg", "disagg"]), default=None, help="Override glmops_topology.")
@click.option("--out", "out_file", type=click.Path(dir_okay=False), default=None,
              help="Write the JSON to this file (for an existing Prometheus' file_sd_configs) instead of stdout.")
def targets(inventory: str, topology: str | None, out_file: str | None) -> None:
    """Print the deployment's Prometheus file_sd targets: every worker, the router/frontend
    and the enabled exporters, labelled deployment/host/role/pool/engine/replica/service
    (exit 2 on bad input; no host contacted)."""
    try:
        planned = planning.load(inventory, topology)
        dep, the_plan = planned.deployment, planned.plan
    except ValidationError as exc:
        click.echo(f"{len(exc.problems)} problem(s) in {inventory}:", err=True)
        for p in exc.problems:
            click.echo(f"  {p}", err=True)
        sys.exit(2)
    text = monitoring.targets_json(dep, the_plan)
    if out_file:
        Path(out_file).write_text(text, encoding="utf-8")
        click.echo(f"wrote {len(monitoring.targets(dep, the_plan))} targets to {out_file}", err=True)
    else:
        click.echo(text, nl=False)
