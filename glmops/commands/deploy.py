"""``glmops deploy`` and ``glmops serve``: place the Plan's services under systemd and start
them gated on readiness.

``deploy`` leaves validate + plan to its run's first play (the Plan is built once, in the
glmops_plan plugin: exit 2 when it refuses; the smoke checks after it take the run's smoke
target, so the CLI does not plan again). ``serve`` plans on the controller first (bad input:
every problem, exit 2, no host contacted) and hands that Plan to its run
(``glmops.runner.run(planned=...)``). Exit codes: 0 ok, 1 the run failed (a host
unreachable, a unit not ready, a task failed), 2 bad input.
"""
from __future__ import annotations

import click

from glmops.commands.ansible_opts import ANSIBLE_OPTS
from glmops import planning, runner, smoke
from glmops.commands.common import exit_if_plan_refused, extravars, finish, load_plan
from glmops.commands.options import INVENTORY, LIMIT, TOPOLOGY
from glmops.commands.provision import ReportCollector, print_reports, reports
from glmops.output import console as make_console


@click.command("deploy")
@ANSIBLE_OPTS
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
    console = make_console()
    if skip_provision and (no_reboot or upgrade_driver):
        flags = [f for f, on in (("--no-reboot", no_reboot), ("--upgrade-driver", upgrade_driver)) if on]
        raise click.UsageError(f"{' and '.join(flags)} {'is a provisioning option' if len(flags) == 1 else 'are provisioning options'}"
                               " and --skip-provision skips provisioning; accepted: one or the other")
    collector = ReportCollector()
    # validate + plan happen once, in the run's plan play (bad input: exit 2, no host
    # contacted); its summary (result.plan) feeds the table
    result = runner.run("deploy", "deploy.yml", inventory,
                        extravars(topology, glmops_provision=False if skip_provision else None,
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
        runner.print_summary(result, console, plan)
        # the run's Plan (its smoke target, in the plan play's summary): no second plan
        target = plan.get("smoke_target") or planning.smoke_target(inventory, topology)
        smoked = smoke.smoke_after_deploy(inventory, topology, console, target)
        runner.finish(console, result, 0 if smoked else 1, "" if smoked else "the smoke checks after the deploy failed")
    finish(result, plan, console)


@click.command("serve")
@ANSIBLE_OPTS
@INVENTORY
@TOPOLOGY
@click.option("--check", is_flag=True, help="Change nothing; show what would change.")
@click.option("--diff", is_flag=True, help="Show the changes to files.")
@LIMIT
def serve(inventory, topology, check, diff, limit):
    """Place and (re)start the services only (no runtime install), gated like deploy."""
    console = make_console()
    planned = load_plan(inventory, topology)
    result = runner.run("serve", "serve.yml", inventory, extravars(topology),
                        check=check, diff=diff, limit=limit, console=console, planned=planned)
    finish(result, planned.view(), console)
