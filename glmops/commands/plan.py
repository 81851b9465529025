"""``glmops plan``: validate an inventory, then show (or write) what a deploy would do.

Re-exported by ``glmops.commands.core`` (the verb table points there). Plans through
:func:`glmops.planning.load`, the one door into a Plan.
"""
from __future__ import annotations

import json
import os
import sys

import click
import yaml

from glmops.commands.ansible_opts import ANSIBLE_OPTS
from glmops.commands.options import STRICT, print_warnings
from glmops import planning, render
from glmops.model import ValidationError, is_secret
from glmops.plan import summary_rows


def table_text(plan) -> str:
    """Per host: service, role, GPUs, ports, health URL; then endpoint, smoke, notes."""
    rows = summary_rows(plan)
    cols = ["host", "service", "role", "gpus", "ports", "health"]
    widths = {c: max([len(c)] + [len(str(r[c])) for r in rows]) for c in cols}
    lines = [f"deployment {plan.deployment}: {plan.model} as {plan.served_model_name!r} "
             f"on {plan.engine}, {plan.topology}"]
    lines.append("  ".join(c.upper().ljust(widths[c]) for c in cols).rstrip())
    last = None
    for r in rows:
        shown = dict(r)
        if r["host"] == last:
            shown["host"] = ""
        last = r["host"]
        lines.append("  ".join(str(shown[c]).ljust(widths[c]) for c in cols).rstrip())
    lines.append(f"endpoint: {plan.endpoint_url}")
    lines.append("smoke: " + " ".join(plan.smoke))
    lines += [f"note: {n}" for n in plan.notes]
    return "\n".join(lines) + "\n"


def redacted(data, secret_values=frozenset()):
    """``data`` (a Plan as dicts/lists) with secrets shown as ``<redacted>``: the values of
    secret-looking keys (``*TOKEN``, ``*API_KEY*``, ``*_PASS``, ``*SECRET*``, ...), values that
    are secrets themselves (a URL with a password, a token, a Vault value: ``secret_values``)
    and argv words after a secret flag. ``--out`` writes them as ``<redacted>`` too
    (``glmops.render.redact_text``) unless ``--with-secrets``. Patterns: ``glmops.model.is_secret``."""
    if isinstance(data, dict):
        return {k: "<redacted>" if isinstance(k, str) and isinstance(v, (str, int, float)) and is_secret(k, v, secret_values)
                else redacted(v, secret_values) for k, v in data.items()}
    if isinstance(data, list):
        out, hide = [], False
        for v in data:
            if isinstance(v, str) and (hide or is_secret("", v, secret_values)):
                out.append("<redacted>")
                hide = False
                continue
            hide = isinstance(v, str) and v.startswith("--") and is_secret(v.lstrip("-").split("=")[0])
            out.append(redacted(v, secret_values))
        return out
    if isinstance(data, str) and is_secret("", data, secret_values):
        return "<redacted>"
    return data


@click.command("plan")
@ANSIBLE_OPTS
@click.option("-i", "--inventory", required=True, type=click.Path(exists=True),
              help="Inventory directory (hosts.yml + group_vars/) or file.")
@click.option("--topology", type=click.Choice(["agg", "disagg"]), default=None,
              help="Override glmops_topology.")
@click.option("--format", "fmt", type=click.Choice(["table", "yaml", "json"]), default="table",
              show_default=True, help="Output format.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default=None,
              help="Write every file a deploy would place, as OUT/<host>/<path>.")
@click.option("--with-secrets", is_flag=True,
              help="With --out: write secrets (API key, Vault values) as a deploy places them, not <redacted>.")
@STRICT
def plan(inventory: str, topology: str | None, fmt: str, out_dir: str | None, with_secrets: bool, strict: bool) -> None:
    """Show which services run where; each one's flags with --format yaml, every file a deploy
    would place with --out (exit 2 on bad input; warnings go to stderr, exit 0, --strict: exit 2)."""
    if with_secrets and out_dir is None:
        click.echo("error: --with-secrets writes secrets into the --out tree and there is none; accepted: "
                   "--with-secrets together with --out DIR", err=True)
        sys.exit(2)
    if out_dir is not None and not out_dir.strip():
        click.echo("error: --out '' names no directory; accepted: a directory path", err=True)
        sys.exit(2)
    if out_dir is not None and os.path.realpath(out_dir) == "/":
        click.echo(f"error: --out {out_dir!r} is the root directory: the tree (OUT/<host>/etc/...) would land beside "
                   "the system's; accepted: a directory of its own, e.g. --out plan-out", err=True)
        sys.exit(2)
    try:
        planned = planning.load(inventory, topology, strict=strict)
        dep, the_plan = planned.deployment, planned.plan
        written = []
        if out_dir:
            written = render.write_tree(dep, the_plan, out_dir, secrets=with_secrets)
    except ValidationError as exc:
        click.echo(f"{len(exc.problems)} problem(s) in {inventory}:", err=True)
        for p in exc.problems:
            click.echo(f"  {p}", err=True)
        sys.exit(2)
    except ValueError as exc:  # render refusals (e.g. container runtime without an image)
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    except OSError as exc:  # --out under a file, on /dev/null, read-only, /proc, ...
        click.echo(f"error: --out {out_dir!r} cannot be written: {exc.strerror} ({exc.filename}); accepted: a "
                   "directory this user can create and write", err=True)
        sys.exit(2)
    print_warnings(planned.warnings, inventory, err=True)
    if fmt == "json":
        click.echo(json.dumps(redacted(the_plan.to_dict(), dep.secret_values or frozenset()), indent=2))
    elif fmt == "yaml":
        click.echo(yaml.safe_dump(redacted(the_plan.to_dict(), dep.secret_values or frozenset()), sort_keys=False), nl=False)
    else:
        click.echo(table_text(the_plan), nl=False)
    if out_dir:
        click.echo(f"wrote {len(written)} files under {out_dir}", err=True)
