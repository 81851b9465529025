"""The click options the verbs share, in one place: ``-i/--inventory``, ``--topology``,
``--limit``, ``--service``, ``--yes``. A verb takes them as decorators (``@INVENTORY``); flags every inventory-reading
verb shares (vault, extra vars) belong here too, so each verb lists them once."""
from __future__ import annotations

import click

INVENTORY = click.option("-i", "--inventory", required=True, type=click.Path(exists=True),
                         help="Ansible inventory (directory or file).")
TOPOLOGY = click.option("--topology", type=click.Choice(["agg", "disagg"]), default=None,
                        help="Override the inventory's glmops_topology.")
LIMIT = click.option("--limit", default=None, help="Ansible --limit pattern.")
SERVICE = click.option("--service", "services", multiple=True, metavar="NAME",
                       help="Only this service: its unit name as `glmops plan`/`status` list it, with or without "
                            ".service (repeatable; default every service).")
YES = click.option("--yes", is_flag=True, help="Go on without asking (needed where there is no terminal to ask on).")
STRICT = click.option("--strict", is_flag=True, default=False,
                      help="Refuse warnings too (deviations from a seed's recipe): exit 2.")


def print_warnings(warnings: list, inventory: str, err: bool = False) -> None:
    """One line per warning of the rules (a :class:`glmops.model.Problem` with severity warning)."""
    if warnings:
        click.echo(f"{len(warnings)} warning(s) in {inventory} (--strict refuses them):", err=err)
        for p in warnings:
            click.echo(f"  {p}", err=err)
