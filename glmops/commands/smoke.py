"""``glmops smoke``: the checks of :mod:`glmops.smoke` against a deployed endpoint.

Exit codes: 0 every check passed or was skipped with a reason, 1 a check failed,
2 bad input (inventory problems, unknown check names, no endpoint).
"""
from __future__ import annotations

import json
import sys

import click
from glmops.commands.ansible_opts import ANSIBLE_OPTS

from glmops import planning, runner
from glmops import smoke as sm
from glmops.commands.common import deployed_topology
from glmops.inventory import load_deployment
from glmops.model import ValidationError
from glmops.output import console as make_console

CHECK_NAMES = "models, completion, reasoning, tool_call, structured, stream, image, disagg, acceptance"


def _names(value: str | None) -> list[str]:
    return [v.strip() for v in (value or "").split(",") if v.strip()]


@click.command("smoke")
@ANSIBLE_OPTS
@click.option("-i", "--inventory", type=click.Path(exists=True), default=None,
              help="Ansible inventory (directory or file); the Plan gives endpoint, model and workers.")
@click.option("--topology", type=click.Choice(["agg", "disagg"]), default=None,
              help="Override the inventory's glmops_topology.")
@click.option("--endpoint", default=None, help="Endpoint URL (default: the Plan's endpoint_url).")
@click.option("--model", default=None, help="Served model name (default: the Plan's; needed without -i).")
@click.option("--multimodal/--no-multimodal", default=None,
              help="Send the image check (default: the deployment's glmops_multimodal).")
@click.option("--first-timeout", type=click.FloatRange(min=0.1), default=600.0, show_default=True,
              help="Seconds for the first generation request (F06: first KV transfer sets up connections).")
@click.option("--timeout", type=click.FloatRange(min=0.1), default=60.0, show_default=True,
              help="Seconds for every later request.")
@click.option("--min-acceptance", type=click.FloatRange(min=1.0), default=None,
              help="Fail when the MTP/EAGLE acceptance length (tokens per step) is below this (F16).")
@click.option("--only", default=None, help=f"Comma list of checks to run ({CHECK_NAMES}).")
@click.option("--skip", default=None, help="Comma list of checks to skip.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def smoke(inventory, topology, endpoint, model, multimodal, first_timeout, timeout, min_acceptance,
          only, skip, as_json):
    """Check the endpoint: models, completion, reasoning effort, tool call, structured output,
    streaming, image, the prefill/decode split and the speculative acceptance rate. With -i
    and without --topology: the topology recorded on the hosts by the last deploy."""
    err = make_console(stderr=True)
    problems = []
    unknown = [n for n in _names(only) + _names(skip) if n not in sm.CHECKS]
    if unknown:
        problems.append(f"--only/--skip: unknown check(s) {', '.join(unknown)}; accepted: {CHECK_NAMES}")
    target = None
    if inventory:
        try:
            target = planning.smoke_target(inventory, topology)
        except ValidationError as exc:
            problems += [str(p) for p in exc.problems]
        if target is not None and topology is None and not problems:
            # what the hosts record as deployed, not the inventory's default (issue 12)
            topology = deployed_topology(inventory, load_deployment(inventory).topology)
            target = planning.smoke_target(inventory, topology)
    elif not (endpoint and model):
        problems.append("give -i/--inventory, or both --endpoint and --model")
    bad_url = sm.endpoint_problem("--endpoint", endpoint)
    if bad_url:
        problems.append(bad_url)
    if problems:
        err.print(f"{len(problems)} problem(s); no request sent:")
        for p in problems:
            err.print(f"  {p}", markup=False)
        sys.exit(2)
    if target is None:
        target = sm.SmokeTarget(endpoint=endpoint.rstrip("/"), model=model)
    if endpoint:
        target.endpoint = endpoint.rstrip("/")
    if model:
        target.model = model
    if multimodal is not None:
        target.multimodal = multimodal
    log_reader = sm.journal_reader(inventory) if inventory else None
    # glmops_api_key from the inventory (Vault decrypted), else GLMOPS_API_KEY with --endpoint
    headers = sm.api_key_headers(inventory, topology) if (target.api_key_required or not inventory) else {}
    report = sm.run(target, first_timeout=first_timeout, timeout=timeout, min_acceptance=min_acceptance,
                    log_reader=log_reader, only=_names(only), skip=_names(skip), headers=headers)
    if as_json:
        click.echo(json.dumps(report.to_dict(), indent=2))
        sys.exit(0 if report.ok else 1)
    out = make_console()
    sm.render_table(report, out)
    failed = [c.name for c in report.checks if c.status == sm.FAIL]
    runner.finish(out, None, 1 if failed else 0, f"failed: {', '.join(failed)}" if failed else
                  f"{len(report.checks)} check(s) passed or skipped", verb="smoke")
