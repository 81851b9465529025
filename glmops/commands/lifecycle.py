"""``glmops restart``, ``glmops stop`` and ``glmops destroy``: act on the deployed services.

Each acts on the topology the hosts record as deployed unless ``--topology`` says otherwise,
plans once on the controller (bad input: exit 2, no host contacted) and hands that Plan to
its run. Exit codes: 0 ok, 1 the run failed, 2 bad input.
"""
from __future__ import annotations


import click

from glmops.commands.ansible_opts import ANSIBLE_OPTS
from glmops import runner
from glmops.commands.common import confirm_destructive, day2_run, finish, pick_services, selection
from glmops.commands.options import INVENTORY, LIMIT, SERVICE, TOPOLOGY, YES
from glmops.output import console as make_console

#: the event key of a rolling restart's step report (playbooks/tasks/restart_step.yml)
RESTART_STEP = "restart_step"


@click.command("restart")
@ANSIBLE_OPTS
@INVENTORY
@TOPOLOGY
@click.option("--rolling", is_flag=True,
              help="One replica (agg) or pool (disagg) at a time, waiting for readiness in between.")
@SERVICE
@LIMIT
@YES
def restart(inventory, topology, rolling, services, limit, yes):
    """Restart the services: workers (gated), then the router (--rolling: one step at a time in
    one run). Without --rolling the endpoint is down meanwhile: it asks first (--yes: don't).
    Without --topology: the topology recorded on the hosts by the last deploy."""
    console = make_console()
    if not rolling:
        confirm_destructive("restart takes the endpoint down until the services serve again", yes)

    def choose(view: dict) -> dict:  # this topology's units (--service) and, --rolling, its steps
        units = [s["unit"] for s in pick_services(view, services)] if services else None
        if not rolling:
            return {"glmops_units": units}
        # one run: restart.yml restarts one step at a time, each gated before the next
        picked = {**view, "services": pick_services(view, services)}
        return {"glmops_units": units, "glmops_restart_steps": [
            {"name": name, "units": step_units, "bundle": _bundle(name)} for name, step_units in rolling_steps(picked)]}

    run = day2_run(inventory, topology, choose)

    def on_event(event: dict) -> None:  # a rolling step's first task reports glmops_event restart_step
        data = event.get("event_data") or {}
        if event.get("event") == "runner_on_ok" and runner.event_of(data) == RESTART_STEP:
            step = runner.reported(data)
            console.print(f"{runner.stamp()} [bold]restart step[/bold] {step['step']}: {', '.join(step['units'])}")

    result = runner.run("restart", "restart.yml", inventory, run.extravars, limit=limit, console=console,
                        planned=run.planned, alternatives=run.alternatives, on_event=on_event)
    plan, _ = selection(run.chosen(result).view(), services)
    finish(result, plan, console)


def _bundle(step: str) -> str:
    """The plan view's bundle a rolling step's units are in (see :func:`rolling_steps`)."""
    return "stores" if step.startswith("store ") else "routers" if step == "router" else "workers"


def rolling_steps(plan: dict) -> list[tuple[str, list[str]]]:
    """Restart steps: one per discovery store member (never every member at once), one per agg
    replica, one per disagg pool, then the front door."""
    steps: dict[str, list[str]] = {}
    for svc in plan["services"]:
        if svc["pool"] == "store":
            key = f"store {svc['name']}"
        elif svc["pool"] == "router":
            key = "router"
        elif svc["pool"] == "agg":
            key = f"agg replica {svc['replica']}"
        else:
            key = f"{svc['pool']} pool"
        steps.setdefault(key, []).append(svc["unit"])
    ordered = [k for k in steps if k != "router"] + (["router"] if "router" in steps else [])
    return [(k, steps[k]) for k in ordered]


@click.command("stop")
@ANSIBLE_OPTS
@INVENTORY
@TOPOLOGY
@SERVICE
@LIMIT
@YES
def stop(inventory, topology, services, limit, yes):
    """Stop the router, then the workers (units and files stay): the endpoint is down, so it
    asks first (--yes: don't). Without --topology: the topology recorded on the hosts by the
    last deploy."""
    console = make_console()
    confirm_destructive("stop takes the endpoint down (`glmops serve` or `deploy` starts it again)", yes)
    run = day2_run(inventory, topology,
                   lambda view: {"glmops_units": [s["unit"] for s in pick_services(view, services)] if services else None})
    result = runner.run("stop", "stop.yml", inventory, run.extravars, limit=limit, console=console,
                        planned=run.planned, alternatives=run.alternatives)
    plan, _ = selection(run.chosen(result).view(), services)
    finish(result, plan, console)


@click.command("destroy")
@ANSIBLE_OPTS
@INVENTORY
@TOPOLOGY
@YES
@click.option("--purge-checkpoints", is_flag=True, help="Also delete the downloaded checkpoint.")
@LIMIT
def destroy(inventory, topology, yes, purge_checkpoints, limit):
    """Stop and remove every unit, env and config file of the deployment (checkpoints
    stay unless --purge-checkpoints). Without --topology: the topology recorded on the
    hosts by the last deploy."""
    console = make_console()
    confirm_destructive("destroy stops and removes every unit, env and config file of the deployment"
                        + (" and its downloaded checkpoint" if purge_checkpoints else ""), yes)
    run = day2_run(inventory, topology, glmops_purge_checkpoints=purge_checkpoints)
    result = runner.run("destroy", "destroy.yml", inventory, run.extravars, limit=limit,
                        console=console, planned=run.planned, alternatives=run.alternatives)
    plan = run.chosen(result).view()
    for svc in plan["services"]:
        if svc["role"] == "store" and result.ok:  # the units are gone; the store's data is not
            console.print(f"kept on {svc['host']}: {svc['name']}'s data under {plan['state_dir']}/{plan['deployment']}/ "
                          "(remove it to start the discovery store empty)", markup=False)
    finish(result, plan, console)
