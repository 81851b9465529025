"""Day-2 verbs: ``glmops upgrade``, ``glmops rollback`` (``glmops history`` and the read
they share: ``glmops.commands.history``).

Each is one run of one playbook (``playbooks/upgrade.yml``, ``playbooks/rollback.yml``): the
playbook reads the generations, decides the steps on the controller
(``glmops.generations.upgrade_plan`` / ``rollback_plan``), rolls them and, on a failure, puts
the serving generation back inside the same run; what it decided and did reaches this module
as ``glmops_event`` reports (:data:`PLAN`, :data:`STEP`, :data:`RESULT`), printed here.
``--check`` reads the generations only (``glmops history``'s run) and prints the same decision.

* ``upgrade``: apply a changed engine version, image or settings (the inventory as it is
  now, plus ``--set key=value``) one replica at a time (``glmops.generations.steps``):
  each step takes its workers out of the router where the router allows it, waits for
  their requests to finish, places the new files, restarts what changed, gates on
  /health and a one-token request, puts them back, and sends one request through the
  endpoint. The first failure stops the upgrade: the failed replica gets its previous
  generation back and every later replica was never touched; exit 1 names the unit.
  The router goes last; then the new generation is recorded on every host.
* ``rollback``: put the previous (or ``--to N``) generation's files back byte for byte,
  the same rolling way, then make it current.

Neither takes ``--service`` (:func:`refuse_service`: exit 2 before any host): a generation is
one consistent deployment, recorded on every host and put back whole, so one service cannot
move to another generation alone. ``upgrade`` already restarts only the units whose files
change, so a setting of one role goes in the inventory per pool
(``glmops_topologies.<topology>.pools.<role>.engine_args|engine_config|env``) and ``upgrade``
rolls only that pool; ``restart --service`` restarts one service, ``--limit`` narrows the hosts.

Exit codes: 0 ok, 1 a step failed (named), 2 bad input or nothing to act on.
"""
from __future__ import annotations

import json
import sys
from typing import Any, NoReturn

import click
from rich.console import Console

from glmops.commands.ansible_opts import ANSIBLE_OPTS, ANSIBLE_OPTS_LONG
from glmops import generations as G
from glmops import planning, runner
from glmops.commands.common import exit_if_plan_refused, load_plan
from glmops.commands.history import deployment_records, history, read_history  # noqa: F401  (history: the verb table's old home)
from glmops.commands.options import INVENTORY, LIMIT, TOPOLOGY
from glmops.model import ValidationError
from glmops.output import console as make_console


#: the event keys of the day-2 playbooks' reports (debug msg dicts): what the controller decided
#: (glmops.generations.upgrade_plan / rollback_plan + ``unread``, ``go``), each step as it starts,
#: and what the run did (``number``, ``failed``: {step, host, task} or {}, ``put_back``, ``done``,
#: ``untouched``)
PLAN = "day2_plan"
STEP = "day2_step"
RESULT = "day2_result"


#: why ``upgrade``/``rollback`` refuse ``--service`` and what to use instead (see the module doc)
NO_SERVICE = {
    "upgrade": ("a generation is one consistent deployment, so an upgrade rolls the whole inventory and restarts "
                "only the units whose files change. For one role's settings set them per pool in the inventory "
                "(glmops_topologies.<topology>.pools.<role>.engine_args, engine_config or env) and run "
                "`glmops upgrade` (only that pool's units roll); to restart one service: `glmops restart "
                "--service NAME`; to narrow the hosts: --limit"),
    "rollback": ("a generation is restored whole (every unit's files byte for byte, then it is current on every "
                 "host): rolling back one service would leave the hosts on a generation nobody recorded. Roll the "
                 "whole deployment back (`glmops rollback`, --check to see what changes), or restart one service "
                 "with `glmops restart --service NAME`; --limit narrows the hosts"),
}


def refuse_service(verb: str, services: tuple[str, ...]) -> None:
    """``upgrade``/``rollback --service``: exit 2 before any host saying why and what to use
    (:data:`NO_SERVICE`); nothing without ``--service``."""
    if services:
        _err(f"{verb} --service {', '.join(services)}: not accepted: {NO_SERVICE[verb]}")
        sys.exit(2)


def _err(msg: str) -> None:
    """One message on stderr, never wrapped (operators grep for unit names)."""
    click.echo(msg, err=True)


class _Reports:
    """What one day-2 run reports (``on_event``): the decision, the steps as they start (each
    printed as a line), the result, and the units the readiness gate found not ready before
    any put-back (a put-back's gate reports the same units again)."""

    def __init__(self, console: Console, verb: str):
        self.console = console
        self.verb = verb
        self.plan: dict[str, Any] | None = None
        self.result: dict[str, Any] | None = None
        self.not_ready: list[str] = []
        self.putting_back = False

    def __call__(self, event: dict) -> None:
        data = event.get("event_data") or {}
        key = runner.event_of(data)
        kind = event.get("event")
        if key == runner.READY and not self.putting_back and kind in ("runner_on_ok", "runner_on_failed"):
            self._gate(data)
        if kind != "runner_on_ok" or key not in (PLAN, STEP, RESULT):
            return
        got = {k: v for k, v in runner.reported(data).items() if k != runner.EVENT_KEY}
        if key == PLAN:
            self.plan = got
            if not (got.get("refuse") or got.get("unread")):
                (_print_upgrade_plan if self.verb == "upgrade" else _print_rollback_plan)(self.console, got)
        elif key == RESULT:
            self.result = got
        elif got.get("put_back"):
            self.putting_back = True
            self.console.print(f"{runner.stamp()} [bold]putting generation {got.get('to')} back[/bold] on "
                               f"{', '.join(got.get('units') or [])}")
        else:
            what = ", ".join(got.get("units") or []) or (
                "router" if self.verb == "upgrade" else f"generation {got.get('to')} becomes current")
            self.console.print(f"{runner.stamp()} [bold]step[/bold] {got.get('step')}: {what}")

    def _gate(self, data: dict) -> None:
        try:
            rows = json.loads((data.get("res") or {}).get("stdout") or "{}").get("services", [])
        except (ValueError, AttributeError):
            return
        for row in rows:
            if isinstance(row, dict) and row.get("decided", True) and not row.get("ready"):
                line = f"{row.get('unit')} on {data.get('host')}: {row.get('reason', '')}"
                if line not in self.not_ready:
                    self.not_ready.append(line)


def _print_steps(console: Console, steps: list[dict], idle: str) -> None:
    for i, step in enumerate(steps, 1):
        how = " (out of the router first)" if step.get("router_out") else ""
        console.print(f"  step {i}: {step['name']}: {', '.join(step['units']) or idle}{how}")


def _print_upgrade_plan(console: Console, up: dict) -> None:
    """The upgrade's decision (glmops.generations.upgrade_plan) as ``glmops upgrade`` prints it."""
    console.print(f"generation {up['number']} serves; changed units: {', '.join(up['changed']) or 'none'}")
    if up["runtimes_changed"]:
        console.print(f"new engine runtimes on: {', '.join(up['runtimes_changed'])}")
    _print_steps(console, up["steps"], "place files, gate")


def _print_rollback_plan(console: Console, rb: dict) -> None:
    """The rollback's decision (glmops.generations.rollback_plan) as ``glmops rollback`` prints it."""
    console.print(f"rolling back to generation {rb['number']}; changed units: {', '.join(rb['changed']) or 'none'}")
    _print_steps(console, rb["steps"], "-")


def _not_ready(result: runner.RunResult, reports: _Reports | None = None) -> list[str]:
    """Units a failed step names: those the readiness gate reported not ready, else the failures."""
    if reports is not None and reports.not_ready:
        return list(reports.not_ready)
    units = [f"{s['unit']} on {s['host']}: {s.get('reason', '')}" for s in result.services if not s.get("ready")]
    return units or [f.splitlines()[0][:300] for f in result.failures]


def _read_or_exit(inventory: str, topology: str | None, limit: str | None = None) -> dict:
    """``glmops upgrade|rollback --check``: the generations (``glmops history``'s one run, within
    ``--limit`` as the real run's read is), or exit 1."""
    hist, result, _, _ = read_history(inventory, topology, limit=limit)
    if not result.ok:
        _err("cannot read the generations:\n" + "\n".join(result.failures))
        sys.exit(1)
    return hist


def _decided(result: runner.RunResult, reports: _Reports) -> dict:
    """The run's decision (:data:`PLAN`), or exit: 2 when the Plan or the decision refused
    (bad input, nothing changed), 1 when the generations could not be read."""
    exit_if_plan_refused(result)
    got = reports.plan
    if got is None or got.get("unread"):
        _err("cannot read the generations:\n" + "\n".join(result.failures))
        sys.exit(1)
    refuse = got.get("refuse")
    if refuse:
        for line in [refuse] if isinstance(refuse, str) else refuse:
            _err(line)
        sys.exit(2)
    return got


@click.command("upgrade")
@ANSIBLE_OPTS_LONG
@INVENTORY
@TOPOLOGY
@click.option("-e", "--set", "sets", multiple=True, metavar="KEY=VALUE",
              help="Override an inventory variable for this upgrade (glmops_ prefix optional; YAML value). Repeatable.")
@click.option("--check", is_flag=True, help="Show which units change and the steps; change nothing.")
@click.option("--drain-timeout", default=120, show_default=True, type=click.IntRange(0, 3600),
              help="Seconds to wait for a worker's requests to finish after it left the router.")
@click.option("--service", "services", multiple=True, metavar="NAME",
              help="Not accepted (exit 2): a generation is one consistent deployment; upgrade restarts only the "
                   "units whose files change: set one role's settings per pool in the inventory "
                   "(glmops_topologies.<topology>.pools.<role>.engine_args/engine_config/env), or use "
                   "`restart --service`, --limit.")
@LIMIT
def upgrade(inventory, topology, sets, check, drain_timeout, services, limit):
    """Roll a changed engine version, image or setting out one replica at a time, each
    gated on readiness and a one-token request; stop at the first failure. Only the units
    whose files change restart: a per-pool setting in the inventory rolls only that pool."""
    refuse_service("upgrade", services)
    console = make_console()
    planned, overrides = _planned_with_sets(inventory, topology, sets)
    plan = planned.view()
    if check:
        up = G.upgrade_plan(_read_or_exit(inventory, topology, limit), plan, inventory, drain_timeout)
        if up["refuse"]:
            _err(up["refuse"])
            sys.exit(2)
        _print_upgrade_plan(console, up)
        sys.exit(0)
    gen_dir, hosts, _ = deployment_records(inventory, topology)
    extra = {"glmops_day2": {"inventory": str(inventory), "drain_timeout_s": drain_timeout},
             "glmops_day2_hosts": ",".join(hosts), "glmops_generation_dir": gen_dir}
    if overrides:
        extra["glmops_overrides"] = overrides
    if topology:
        extra["glmops_topology"] = topology
    reports = _Reports(console, "upgrade")
    result = runner.run("upgrade", "upgrade.yml", inventory, extra, limit=limit, console=console, planned=planned,
                        on_event=reports)
    up = _decided(result, reports)
    if not up["act"]:
        console.print(f"nothing to upgrade: every unit already runs what the inventory says (generation {up['number']})")
        runner.finish(console, result, 0, f"nothing to upgrade (generation {up['number']} serves)")
    done = reports.result or {}
    if result.ok:
        console.print(f"upgrade done: {', '.join(done.get('done') or [])}; new generation recorded "
                      f"(`glmops history -i {inventory}`)")
        runner.finish(console, result, 0, "new generation recorded")
    _upgrade_stopped(result, reports, up, inventory, plan, console)


def _upgrade_stopped(res: runner.RunResult, reports: _Reports, up: dict, inventory: str, plan: dict,
                     console: Console) -> NoReturn:
    """The run stopped at a step (``reports.result``): say which steps are on the new settings,
    whether the serving generation is back on the failed step's units (else they are DOWN) and
    which steps were never touched; exit 1 naming the units."""
    number = up["number"]
    got = reports.result or {}
    failed = got.get("failed") or {}
    step = failed.get("step") or {}
    runner.print_summary(res, console, plan)
    if step.get("kind") == "runtimes":
        _err(f"upgrade stopped before any restart: installing the runtimes failed; generation {number} serves")
        runner.finish(console, None, 1, f"installing the runtimes failed; generation {number} serves", verb="upgrade")
    bad = _not_ready(res, reports)
    name = step.get("name") or "an unknown step"
    console.print(f"[red]upgrade stopped at {name}[/red]: " + "; ".join(bad), markup=True)
    lines = [f"upgrade FAILED at {name}: {', '.join(step.get('units') or [])} not ready"]
    lines += [f"  {b}" for b in bad]
    if step:
        lines.append(f"  {name}: " + (f"generation {number} put back and serving" if got.get("put_back")
                                      else f"DOWN: putting generation {number} back failed; "
                                           f"run `glmops rollback -i {inventory} --to {number}`"))
    if got.get("done"):
        lines.append(f"  already on the new settings: {', '.join(got['done'])}")
    if got.get("untouched"):
        lines.append(f"  still on generation {number} (untouched): {', '.join(got['untouched'])}")
    for line in lines:
        _err(line)
    runner.finish(console, None, 1, f"stopped at {name}: " + "; ".join(bad), verb="upgrade")


def _planned_with_sets(inventory: str, topology: str | None, sets: tuple[str, ...]) -> tuple[planning.Planned, dict]:
    """``(planned, overrides)``: the Plan of the inventory with the ``--set KEY=VALUE`` items
    (``overrides``, variable -> value) winning. Exits 2 with every problem at once: the items
    that did not parse, then the inventory's own problems with the ones that did."""
    overrides, problems = G.parse_sets(sets)
    if overrides or problems:
        found = [str(p) for p in problems]
        try:
            planned = planning.load(inventory, topology, overrides)
        except ValidationError as exc:
            found += [str(p) for p in exc.problems]
        if found:
            _err(f"{len(found)} problem(s) in {inventory} with --set; no host contacted:")
            for p in found:
                _err(f"  {p}")
            sys.exit(2)
    else:
        planned = load_plan(inventory, topology)
    return planned, overrides


@click.command("rollback")
@ANSIBLE_OPTS
@INVENTORY
@TOPOLOGY
@click.option("--to", "to", type=click.IntRange(1), default=None,
              help="Generation number to put back (default: the one before the current).")
@click.option("--check", is_flag=True, help="Show which units change and the steps; change nothing.")
@click.option("--drain-timeout", default=120, show_default=True, type=click.IntRange(0, 3600),
              help="Seconds to wait for a worker's requests to finish after it left the router.")
@click.option("--service", "services", multiple=True, metavar="NAME",
              help="Not accepted (exit 2): a generation is restored whole; use `restart --service`, --limit.")
@LIMIT
def rollback(inventory, topology, to, check, drain_timeout, services, limit):
    """Put the previous (or --to N) generation's units and files back byte for byte, one
    replica at a time, each gated on readiness; then it is the current generation (of the
    whole deployment: no --service)."""
    refuse_service("rollback", services)
    console = make_console()
    if check:
        rb = G.rollback_plan(_read_or_exit(inventory, topology, limit), to, drain_timeout)
        for p in rb["refuse"]:
            _err(p)
        if rb["refuse"]:
            sys.exit(2)
        _print_rollback_plan(console, rb)
        sys.exit(0)
    gen_dir, hosts, _ = deployment_records(inventory, topology)
    extra = {"glmops_day2": {"to": to, "drain_timeout_s": drain_timeout},
             "glmops_day2_hosts": ",".join(hosts), "glmops_generation_dir": gen_dir}
    reports = _Reports(console, "rollback")
    result = runner.run("rollback", "rollback.yml", inventory, extra, limit=limit, console=console, on_event=reports)
    rb = _decided(result, reports)
    number = rb["number"]
    if result.ok:
        console.print(f"rollback done: generation {number} is current and the endpoint serves")
        runner.finish(console, result, 0, f"generation {number} serves")
    got = reports.result or {}
    name = ((got.get("failed") or {}).get("step") or {}).get("name") or "an unknown step"
    bad = _not_ready(result, reports)
    runner.print_summary(result, console)
    _err(f"rollback FAILED at {name}: " + "; ".join(bad))
    if got.get("done"):
        _err(f"  on generation {number}: {', '.join(got['done'])}")
    if got.get("untouched"):
        _err(f"  not rolled back (untouched): {', '.join(got['untouched'])}")
    runner.finish(console, None, 1, f"stopped at {name}: " + "; ".join(bad), verb="rollback")
