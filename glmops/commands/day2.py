"""Day-2 verbs: ``glmops upgrade``, ``glmops rollback`` (``glmops history`` and the read
they share: ``glmops.commands.history``).

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

Exit codes: 0 ok, 1 a step failed (named), 2 bad input or nothing to act on.
"""
from __future__ import annotations

import sys
from typing import NoReturn

import click
from rich.console import Console

from glmops.commands.ansible_opts import ANSIBLE_OPTS, ANSIBLE_OPTS_LONG
from glmops import generations as G
from glmops import planning, runner
from glmops.commands.common import load_plan
from glmops.commands.history import history, read_history  # noqa: F401  (history: the verb table's old home)
from glmops.commands.options import INVENTORY, TOPOLOGY
from glmops.model import ValidationError
from glmops.output import console as make_console


def _err(msg: str) -> None:
    """One message on stderr, never wrapped (operators grep for unit names)."""
    click.echo(msg, err=True)


def _run_step(verb: str, playbook: str, inventory: str, extravars: dict, console: Console,
              planned: planning.Planned | None = None) -> runner.RunResult:
    return runner.run(verb, playbook, inventory, extravars, console=console, planned=planned)


def _not_ready(result: runner.RunResult) -> list[str]:
    """Units a failed step names: those the readiness gate reported not ready, else the failures."""
    units = [f"{s['unit']} on {s['host']}: {s.get('reason', '')}" for s in result.services if not s.get("ready")]
    return units or [f.splitlines()[0][:300] for f in result.failures]


@click.command("upgrade")
@ANSIBLE_OPTS_LONG
@INVENTORY
@TOPOLOGY
@click.option("-e", "--set", "sets", multiple=True, metavar="KEY=VALUE",
              help="Override an inventory variable for this upgrade (glmops_ prefix optional; YAML value). Repeatable.")
@click.option("--check", is_flag=True, help="Show which units change and the steps; change nothing.")
@click.option("--drain-timeout", default=120, show_default=True, type=click.IntRange(0, 3600),
              help="Seconds to wait for a worker's requests to finish after it left the router.")
def upgrade(inventory, topology, sets, check, drain_timeout):
    """Roll a changed engine version, image or setting out one replica at a time, each
    gated on readiness and a one-token request; stop at the first failure."""
    console = make_console()
    planned, overrides = _planned_with_sets(inventory, topology, sets)
    plan = planned.view()
    hist, result, gen_dir, _ = read_history(inventory, topology)
    if not result.ok:
        _err("cannot read the generations:\n" + "\n".join(result.failures))
        sys.exit(1)
    current = G.current_manifests(hist)
    plan_hosts = list(plan["hosts"])
    old_number = _serving_generation(inventory, current, plan_hosts)
    changed: list[str] = []
    runtimes_changed = []
    for host in plan_hosts:
        changed += G.changed_units(G.manifest_files(current[host]), G.plan_files(plan, host))
        if current[host].get("runtimes") != plan["hosts"][host]["runtimes"]:
            runtimes_changed.append(host)
    services = plan["services"]
    plan_steps = G.steps(services, set(changed), plan["topology"])
    console.print(f"generation {old_number} serves; changed units: {', '.join(changed) or 'none'}")
    if runtimes_changed:
        console.print(f"new engine runtimes on: {', '.join(runtimes_changed)}")
    for i, step in enumerate(plan_steps, 1):
        how = " (out of the router first)" if step.router_out else ""
        console.print(f"  step {i}: {step.name}: {', '.join(step.units) or 'place files, gate'}{how}")
    if check:
        sys.exit(0)
    if not changed and not runtimes_changed:
        console.print(f"nothing to upgrade: every unit already runs what the inventory says (generation {old_number})")
        sys.exit(0)
    base = {"glmops_overrides": overrides} if overrides else {}
    if topology:
        base["glmops_topology"] = topology
    if runtimes_changed:
        console.print(f"{runner.stamp()} [bold]step[/bold] install engine runtimes")
        res = _run_step("upgrade", "upgrade.yml", inventory, {**base, "glmops_step": {"kind": "runtimes"}}, console,
                        planned)
        if not res.ok:
            runner.print_summary(res, console, plan)
            _err(f"upgrade stopped before any restart: installing the runtimes failed; generation {old_number} serves")
            runner.finish(console, None, 1, f"installing the runtimes failed; generation {old_number} serves",
                          verb="upgrade")
    done: list[str] = []
    for step in plan_steps:
        console.print(f"{runner.stamp()} [bold]step[/bold] {step.name}: {', '.join(step.units) or 'router'}")
        res = _run_step("upgrade", "upgrade.yml", inventory,
                        {**base, "glmops_step": step.extravar(drain_timeout_s=drain_timeout)}, console, planned)
        if res.ok:
            done.append(step.name)
            continue
        _upgrade_stopped(res, step, plan_steps, done, inventory, hist, gen_dir, old_number, plan, drain_timeout,
                         console)
    console.print(f"upgrade done: {', '.join(done)}; new generation recorded (`glmops history -i {inventory}`)")
    sys.exit(0)


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


def _serving_generation(inventory: str, current: dict[str, dict], plan_hosts: list[str]) -> int:
    """The generation number every host of ``plan_hosts`` currently runs (``current``: host ->
    manifest). Exits 2 when a host has none (a failed step could not be put back) or the
    hosts run different ones."""
    missing = [h for h in plan_hosts if h not in current]
    if missing:
        _err(f"no current generation on {', '.join(missing)}: a failed step could not be put back. "
             f"Run `glmops deploy -i {inventory}` first (it records one), then upgrade.")
        sys.exit(2)
    numbers = {m["number"] for m in current.values()}
    if len(numbers) > 1:
        _err("hosts run different generations: " + ", ".join(f"{h}={m['number']}" for h, m in current.items())
             + f"; bring them together with `glmops rollback -i {inventory} --to N` or `glmops deploy` first")
        sys.exit(2)
    return numbers.pop()


def _upgrade_stopped(res: runner.RunResult, step: G.Step, plan_steps: list[G.Step], done: list[str],
                     inventory: str, hist: dict, gen_dir: str, old_number: int, plan: dict, drain_timeout: int,
                     console: Console) -> NoReturn:
    """``step`` failed (``res``): put generation ``old_number`` back on its units, say which steps
    are on the new settings (``done``), which were never touched, and exit 1 naming the units."""
    runner.print_summary(res, console, plan)
    bad = _not_ready(res)
    console.print(f"[red]upgrade stopped at {step.name}[/red]: " + "; ".join(bad), markup=True)
    restored = _put_back(inventory, hist, gen_dir, step, old_number, plan, drain_timeout, console)
    untouched = [s.name for s in plan_steps if s.name not in done and s is not step]
    lines = [f"upgrade FAILED at {step.name}: {', '.join(step.units)} not ready"]
    lines += [f"  {b}" for b in bad]
    lines.append(f"  {step.name}: " + (f"generation {old_number} put back and serving" if restored
                                       else f"DOWN: putting generation {old_number} back failed; "
                                            f"run `glmops rollback -i {inventory} --to {old_number}`"))
    if done:
        lines.append(f"  already on the new settings: {', '.join(done)}")
    if untouched:
        lines.append(f"  still on generation {old_number} (untouched): {', '.join(untouched)}")
    for line in lines:
        _err(line)
    runner.finish(console, None, 1, f"stopped at {step.name}: " + "; ".join(bad), verb="upgrade")


def _put_back(inventory: str, hist: dict, gen_dir: str, step: G.Step, number: int, plan: dict,
              drain_timeout: int, console: Console) -> bool:
    """Restore generation ``number``'s files of the failed step's units, restart, gate."""
    hosts = ",".join(hist)
    extra = {"glmops_day2_hosts": hosts, "glmops_generation_dir": gen_dir,
             "glmops_step": step.extravar(to=number, model=plan["served_model_name"],
                                          readiness_timeout_s=plan["readiness_timeout_s"],
                                          endpoint_ready_url=plan["endpoint_ready_url"],
                                          drain_timeout_s=drain_timeout)}
    # the failed workers are already out of the router (or never were in): restore, gate, add back
    extra["glmops_step"]["router_out_done"] = True
    console.print(f"{runner.stamp()} [bold]putting generation {number} back[/bold] on {', '.join(step.units)}")
    res = runner.run("upgrade-putback", "rollback.yml", inventory, extra, console=console)
    if not res.ok:
        runner.print_summary(res, console, plan)
    return res.ok


@click.command("rollback")
@ANSIBLE_OPTS
@INVENTORY
@TOPOLOGY
@click.option("--to", "to", type=click.IntRange(1), default=None,
              help="Generation number to put back (default: the one before the current).")
@click.option("--check", is_flag=True, help="Show which units change and the steps; change nothing.")
@click.option("--drain-timeout", default=120, show_default=True, type=click.IntRange(0, 3600),
              help="Seconds to wait for a worker's requests to finish after it left the router.")
def rollback(inventory, topology, to, check, drain_timeout):
    """Put the previous (or --to N) generation's units and files back byte for byte, one
    replica at a time, each gated on readiness; then it is the current generation."""
    console = make_console()
    hist, result, gen_dir, hosts = read_history(inventory, topology)
    if not result.ok:
        _err("cannot read the generations:\n" + "\n".join(result.failures))
        sys.exit(1)
    number, problems = G.resolve_target(hist, to)
    if problems:
        for p in problems:
            _err(p)
        sys.exit(2)
    current = G.current_manifests(hist)
    changed: list[str] = []
    for host in hist:
        target = G.manifest_of(hist, host, number)
        if target is None:
            continue
        old = G.manifest_files(current[host]) if host in current else {}
        changed += G.changed_units(old, G.manifest_files(target))
    services = G.manifest_services(hist, number)
    if not services:
        _err(f"generation {number} lists no unit")
        sys.exit(2)
    first = next(G.manifest_of(hist, h, number) for h in hist if G.manifest_of(hist, h, number))
    plan_steps = G.steps(services, set(changed), first.get("topology", "agg"))
    console.print(f"rolling back to generation {number}; changed units: {', '.join(changed) or 'none'}")
    for i, step in enumerate(plan_steps, 1):
        how = " (out of the router first)" if step.router_out else ""
        console.print(f"  step {i}: {step.name}: {', '.join(step.units) or '-'}{how}")
    if check:
        sys.exit(0)
    common = {"to": number, "model": first.get("served_model_name", ""),
              "readiness_timeout_s": int(first.get("readiness_timeout_s") or 1800),
              "endpoint_ready_url": first.get("endpoint_ready_url", ""), "drain_timeout_s": drain_timeout}
    base = {"glmops_day2_hosts": ",".join(hosts), "glmops_generation_dir": gen_dir}
    finish = G.Step(name="finish", kind="finish", units=[])
    for step in [s for s in plan_steps if s.units] + [finish]:
        console.print(f"{runner.stamp()} [bold]step[/bold] {step.name}: "
                      f"{', '.join(step.units) or 'generation ' + str(number) + ' becomes current'}")
        res = runner.run("rollback", "rollback.yml", inventory, {**base, "glmops_step": step.extravar(**common)},
                         console=console)
        if not res.ok:
            runner.print_summary(res, console)
            _err(f"rollback FAILED at {step.name}: " + "; ".join(_not_ready(res)))
            runner.finish(console, None, 1, f"stopped at {step.name}: " + "; ".join(_not_ready(res)),
                          verb="rollback")
    console.print(f"rollback done: generation {number} is current and the endpoint serves")
    sys.exit(0)
