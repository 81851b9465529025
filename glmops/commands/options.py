"""The click options the verbs share, in one place: ``-i/--inventory``, ``--topology``,
``--limit``. A verb takes them as decorators (``@INVENTORY``); flags every inventory-reading
verb shares (vault, extra vars) belong here too, so each verb lists them once."""
from __future__ import annotations

import click

INVENTORY = click.option("-i", "--inventory", required=True, type=click.Path(exists=True),
                         help="Ansible inventory (directory or file).")
TOPOLOGY = click.option("--topology", type=click.Choice(["agg", "disagg"]), default=None,
                        help="Override the inventory's glmops_topology.")
LIMIT = click.option("--limit", default=None, help="Ansible --limit pattern.")
