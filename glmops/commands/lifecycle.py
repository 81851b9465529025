"""``glmops restart``, ``glmops stop`` and ``glmops destroy``: act on the deployed services.

Each acts on the topology the hosts record as deployed unless ``--topology`` says otherwise,
plans once on the controller (bad input: exit 2, no host contacted) and hands that Plan to
its run. Each takes ``--service NAME`` (only those units: ``commands.services.pick_services``);
``destroy --service`` removes only them and their files and asks only when
:func:`outage_roles` says the endpoint loses a role. Exit codes: 0 ok, 1 the run failed, 2 bad input.
"""
from __future__ import annotations

import sys

import click

from glmops.commands.ansible_opts import ANSIBLE_OPTS
from glmops import runner
from glmops.commands.common import Unselected, by_service, confirm_destructive, day2_run, finish, pick_services
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
    one run), ending when the endpoint answers. Without --rolling the endpoint is down meanwhile,
    and with it when a step restarts every replica of a role (a disaggregated pool, a single agg
    replica): it asks first (--yes: don't).
    Without --topology: the topology recorded on the hosts by the last deploy."""
    console = make_console()

    def choose(view: dict) -> dict:  # this topology's units (--service) and, --rolling, its steps
        units = [s["unit"] for s in pick_services(view, services)] if services else None
        if not rolling:
            return {"glmops_units": units}
        # one run: restart.yml restarts one step at a time, each gated before the next
        picked = {**view, "services": pick_services(view, services)}
        return {"glmops_units": units, "glmops_restart_steps": [
            {"name": name, "units": step_units, "bundle": _bundle(name)} for name, step_units in rolling_steps(picked)]}

    # every input problem (inventory, --service, --limit) exits 2 first; only valid input is asked about
    run = day2_run(inventory, topology, choose, limit=limit,
                   selected=by_service(services)["selected"])
    if not rolling:
        confirm_destructive("restart takes the endpoint down until the services serve again", yes)
    else:  # a step that holds every replica of a serving role takes the endpoint down meanwhile
        down = [f"{c.plan.topology}: {', '.join(steps)}" for c in (run.planned, *run.alternatives)
                if (steps := outage_steps(c.view(), _picked(c.view(), services)))]
        if down:
            confirm_destructive("restart --rolling takes the endpoint down while a step restarts every replica of "
                                f"its role ({'; '.join(down)}), until it serves again", yes)

    def on_event(event: dict) -> None:  # a rolling step's first task reports glmops_event restart_step
        data = event.get("event_data") or {}
        if event.get("event") == "runner_on_ok" and runner.event_of(data) == RESTART_STEP:
            step = runner.reported(data)
            console.print(f"{runner.stamp()} [bold]restart step[/bold] {step['step']}: {', '.join(step['units'])}")

    result = runner.run("restart", "restart.yml", inventory, run.extravars, limit=limit, console=console,
                        planned=run.planned, alternatives=run.alternatives, on_event=on_event)
    finish(result, run.chosen_view(result, services), console)


def _picked(view: dict, services: tuple[str, ...]) -> list[dict]:
    try:
        return pick_services(view, services)
    except Unselected:  # no service of this topology: nothing restarts there
        return []


def outage_steps(plan: dict, picked: list[dict] | None = None) -> list[str]:
    """The :func:`rolling_steps` of ``plan``'s ``picked`` services (a view's; default all)
    during which no replica of a serving role is left: a disaggregated pool restarts all its
    replicas in one step, and an aggregated step is the only replica of the whole Plan. The
    front door's own step (seconds) and the discovery store's are not counted."""
    replicas: dict[str, set] = {}
    for svc in plan["services"]:
        if svc["pool"] not in ("store", "router"):
            replicas.setdefault(svc["pool"], set()).add(svc.get("replica"))
    out = []
    for name, _units in rolling_steps({**plan, "services": plan["services"] if picked is None else picked}):
        if name.startswith("store ") or name == "router":
            continue
        pool = "agg" if name.startswith("agg replica") else name.removesuffix(" pool")
        if pool != "agg" or len(replicas.get("agg", ())) <= 1:
            out.append(name)
    return out


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
    run = day2_run(inventory, topology, **by_service(services), limit=limit)  # bad input exits 2 here, before the question
    confirm_destructive("stop takes the endpoint down (`glmops serve` or `deploy` starts it again)", yes)
    result = runner.run("stop", "stop.yml", inventory, run.extravars, limit=limit, console=console,
                        planned=run.planned, alternatives=run.alternatives)
    finish(result, run.chosen_view(result, services), console)


@click.command("destroy")
@ANSIBLE_OPTS
@INVENTORY
@TOPOLOGY
@YES
@click.option("--purge-checkpoints", is_flag=True, help="Also delete the downloaded checkpoint (not with --service).")
@SERVICE
@LIMIT
def destroy(inventory, topology, yes, purge_checkpoints, services, limit):
    """Stop and remove every unit, env and config file of the deployment (checkpoints
    stay unless --purge-checkpoints): it asks first (--yes: don't).

    --service NAME: stop and remove only those units, their drop-ins and the env and config
    files no other unit uses; every other unit keeps running, and the deployment's target,
    checkpoint, records, scrape targets and a discovery store's data stay (`glmops deploy`
    puts the units back). It asks only when the named services are every replica of a role
    the endpoint needs (a pool, the front door, the discovery store). Without --topology: the
    topology recorded on the hosts by the last deploy."""
    console = make_console()
    if services and purge_checkpoints:
        make_console(stderr=True).print("--purge-checkpoints removes the checkpoint every service of the deployment "
                                        "reads: not with --service (destroy the whole deployment for that)",
                                        markup=False, soft_wrap=True)
        sys.exit(2)
    # bad input exits 2 here, before the question
    run = day2_run(inventory, topology, **by_service(services), limit=limit, glmops_purge_checkpoints=purge_checkpoints)
    if not services:
        confirm_destructive("destroy stops and removes every unit, env and config file of the deployment"
                            + (" and its downloaded checkpoint" if purge_checkpoints else ""), yes)
    else:  # every replica of a role the endpoint needs: the endpoint goes down
        down = [f"{c.plan.topology}: {', '.join(roles)}" for c in (run.planned, *run.alternatives)
                if (roles := outage_roles(c.view(), _picked(c.view(), services)))]
        if down:
            confirm_destructive("destroy --service removes every replica of a role the endpoint needs "
                                f"({'; '.join(down)}): the endpoint is down until `glmops deploy` puts them back", yes)
    result = runner.run("destroy", "destroy.yml", inventory, run.extravars, limit=limit,
                        console=console, planned=run.planned, alternatives=run.alternatives)
    plan = run.chosen_view(result, services)
    for svc in plan["services"]:
        if svc["role"] == "store" and result.ok:  # the units are gone; the store's data is not
            console.print(f"kept on {svc['host']}: {svc['name']}'s data under {plan['state_dir']}/{plan['deployment']}/ "
                          "(remove it to start the discovery store empty)", markup=False)
    finish(result, plan, console)


def outage_roles(plan: dict, picked: list[dict]) -> list[str]:
    """The pools of ``plan`` (a view) the endpoint needs that no replica is left of once the
    ``picked`` services are gone: ``agg``/``prefill``/``decode`` when every replica of the pool
    has a picked unit (a replica spanning hosts is broken by one unit), ``router`` (the front
    door) and ``store`` (the discovery store) when every unit of it is picked. In Plan order."""
    gone = {s["unit"] for s in picked}
    replicas: dict[str, dict] = {}
    for svc in plan["services"]:
        key = svc.get("replica") if svc["pool"] in ("agg", "prefill", "decode") else svc["unit"]
        replicas.setdefault(svc["pool"], {}).setdefault(key, []).append(svc["unit"])
    return [pool for pool, members in replicas.items()
            if all(any(u in gone for u in units) for units in members.values())]
