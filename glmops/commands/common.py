"""What the verbs that run a playbook share: the plan on the controller (:func:`load_plan`,
through :func:`glmops.planning.load`, exit 2 with every problem before any host), a day-2
verb's one run on the topology the hosts record (:func:`day2_run`; :func:`deployed_topology`
for the verbs that read it without a playbook run of their own), extra vars and the run's end.

No verb is defined here, and this module imports no verb module (verbs import it)."""
from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any, Callable

from glmops import generations as G
from glmops import planning, runner
from glmops.commands.history import deployment_records, read_history
from glmops.commands.options import print_warnings
from glmops.commands.services import Unselected, exit_unselected, pick_services, select_services  # noqa: F401 (re-exported)
from glmops.inventory import check_run_target
from glmops.model import ValidationError
from glmops.output import console as make_console


def exit_problems(inventory: str, exc: ValidationError) -> None:
    """Print every problem of ``exc`` and exit 2 (no host contacted)."""
    err = make_console(stderr=True)
    err.print(f"{len(exc.problems)} problem(s) in {inventory}; no host contacted:", markup=False)
    for problem in exc.problems:
        err.print(f"  {problem}", markup=False)
    sys.exit(2)


def load_plan(inventory: str, topology: str | None, overrides: dict[str, Any] | None = None
              ) -> planning.Planned:
    """The validated Plan (:func:`glmops.planning.load`; ask it for the part you need:
    ``.view()``, ``.checkpoint()``, ...) or exit 2 printing every problem."""
    try:
        planned = planning.load(inventory, topology, overrides)
    except ValidationError as exc:
        exit_problems(inventory, exc)
    print_warnings(planned.warnings, inventory, err=True)
    return planned


def deployed_topology(inventory: str, default: str, limit: str | None = None) -> str:
    """The topology recorded on the hosts (their current generations, ``glmops history``),
    or ``default`` (the inventory's) when the hosts disagree or nothing is recorded
    (:func:`glmops.generations.deployed_topology`); its one line goes to stderr. One
    read-only run over the inventory's workers and routers."""
    hist, result, _, hosts = read_history(inventory, None, limit=limit)
    if limit:  # the hosts --limit leaves out were not read: neither records nor unread
        kept = set(result.hosts)
        hist, hosts = {h: v for h, v in hist.items() if h in kept}, [h for h in hosts if h in kept]
    unread = [h for h in hosts if result.hosts.get(h) is None or result.hosts[h].state != "ok"]
    topology, line = G.deployed_topology(hist, default, unread)
    if line:
        make_console(stderr=True, highlight=False).print(line, markup=False, soft_wrap=True)
    return topology


def load_deployed_plan(inventory: str, topology: str | None, limit: str | None = None
                       ) -> tuple[planning.Planned, str]:
    """(Plan, topology) of what a day-2 verb acts on: ``--topology`` when given, else what
    the hosts record as deployed (:func:`deployed_topology`). Bad input exits 2 before any
    host is read (:func:`load_plan`)."""
    planned = load_plan(inventory, topology)
    if topology:
        return planned, topology
    deployed = deployed_topology(inventory, planned.plan.topology, limit)
    return (planned if deployed == planned.plan.topology else load_plan(inventory, deployed)), deployed


def exit_if_plan_refused(result: runner.RunResult) -> None:
    """Exit 2 printing every problem when the run's plan play refused the inventory (bad
    input: the run stopped on the controller, no host contacted); else return."""
    if not result.plan_problems:
        return
    head, *problems = result.plan_problems.strip().splitlines()
    err = make_console(stderr=True)
    err.print(head.removeprefix("glmops_plan: "), markup=False, soft_wrap=True)
    for problem in problems:
        err.print(f"  {problem}", markup=False, soft_wrap=True)
    sys.exit(2)


def interactive() -> bool:
    """Is there a terminal to ask on (stdin and stderr are TTYs)?"""
    return sys.stdin.isatty() and sys.stderr.isatty()


def confirm_destructive(what: str, yes: bool) -> None:
    """A destructive verb goes on with ``--yes``; else on a terminal it asks (default no, exit 1 on
    no), and without a terminal (scripts, CI) it refuses with exit 2 naming ``--yes``."""
    if yes:
        return
    err = make_console(stderr=True)
    if interactive():
        import click

        if click.confirm(f"{what}. Go on?", default=False, err=True):
            return
        err.print("nothing done")
        sys.exit(1)
    err.print(f"{what}: pass --yes to confirm (no terminal to ask on)")
    sys.exit(2)


def selection(plan: dict, names: tuple[str, ...]) -> tuple[dict, list[str] | None]:
    """(the Plan's view with only the ``--service`` services, ``glmops_units`` for the run: the
    selected units, None without ``--service``): see :func:`select_services`."""
    picked = select_services(plan, names)
    if not names:
        return plan, None
    return {**plan, "services": picked}, [s["unit"] for s in picked]


def by_service(services: tuple[str, ...]) -> dict[str, Callable[[dict], Any]]:
    """:func:`day2_run`'s ``choose`` and ``selected`` for a verb whose ``--service`` names the
    units it acts on (``glmops_units``; none named: every unit)."""
    return {"choose": lambda view: {"glmops_units": [s["unit"] for s in pick_services(view, services)]
                                    if services else None},
            "selected": lambda view: pick_services(view, services) if services else None}


#: what a day-2 run's selection may set (playbooks/plays/plan.yml takes each from the chosen
#: topology's choice): ``glmops_units`` [] = every unit
RUN_CHOICE_KEYS = {"glmops_units": [], "glmops_log_units": None, "glmops_restart_steps": None}


@dataclass
class Day2Run:
    """What a day-2 verb hands its one run: ``planned`` (the ``--topology`` Plan, else the
    inventory's default), ``alternatives`` (without ``--topology``: the Plans of the other
    topologies the inventory plans), ``extravars``. Without ``--topology`` the run's plan play
    reads the hosts' records first and acts on the topology they record
    (``glmops_deployed_read``, ``glmops_run_choices``: playbooks/plays/plan.yml); :meth:`chosen`
    then says which Plan that was."""

    planned: planning.Planned
    alternatives: list[planning.Planned] = field(default_factory=list)
    extravars: dict[str, Any] = field(default_factory=dict)

    def chosen_view(self, result: runner.RunResult, names: tuple[str, ...] = ()) -> dict:
        """The plan view the run acted on (:meth:`chosen`) with only the ``--service`` services
        (all of them when the names are no services of it: the run failed then, and its own
        failure says why)."""
        view = self.chosen(result).view()
        try:
            return {**view, "services": pick_services(view, names)}
        except Unselected:
            return view

    def chosen(self, result: runner.RunResult) -> planning.Planned:
        """The Plan of the topology the run acted on (its plan play's summary), printing the
        line that says why on stderr when there is one; ``planned`` when the run did not plan."""
        summary = result.plan or {}
        if summary.get("topology_line"):
            make_console(stderr=True, highlight=False).print(summary["topology_line"], markup=False, soft_wrap=True)
        for candidate in (self.planned, *self.alternatives):
            if candidate.plan.topology == summary.get("topology"):
                return candidate
        return self.planned


def day2_run(inventory: str, topology: str | None, choose: Callable[[dict], dict[str, Any]] | None = None,
             *, selected: Callable[[dict], list[dict] | None] | None = None, limit: str | None = None,
             **fixed: Any) -> Day2Run:
    """The :class:`Day2Run` of a day-2 verb: ``choose(view)`` -> the run's selection variables
    for one topology's plan view (keys of :data:`RUN_CHOICE_KEYS`; raises :class:`Unselected`
    when the selection names nothing of it); ``selected(view)``: the services the user named
    (None: none named), which must run on a host ``--limit`` keeps; ``fixed``: extra vars for
    any topology (None ones dropped). Bad input exits 2 before any host: the inventory's
    problems (:func:`load_plan`), a bad ``--limit``, or a selection no plannable topology accepts
    (the default's message).
    Plans every topology the inventory plans (on the controller, no host), so the run needs
    no second read of the hosts."""
    planned = load_plan(inventory, topology)
    kept = None
    if limit is not None:
        try:
            kept = set(check_run_target(inventory, limit))
        except ValidationError as exc:
            exit_problems(inventory, exc)

    def chosen(view: dict) -> dict:
        picked = (choose or (lambda v: {}))(view)
        named = selected(view) if selected else None
        if kept is not None and named:
            hosts = sorted({s["host"] for s in named})
            if not set(hosts) & kept:
                raise Unselected(f"{', '.join(s['unit'] for s in named)} run(s) on {', '.join(hosts)}, which "
                                 f"--limit {limit!r} leaves out ({', '.join(sorted(kept))}); accepted: a --limit "
                                 "that keeps their host, or services on the kept hosts")
        return picked

    if topology:
        try:
            picked = chosen(planned.view())
        except Unselected as exc:
            exit_unselected(exc)
        return Day2Run(planned, [], extravars(topology, **fixed, **picked))
    alternatives = []
    for other in G.TOPOLOGIES:
        if other != planned.plan.topology:
            try:
                alternatives.append(planning.load(inventory, other))
            except ValidationError:  # this inventory does not plan it: the hosts cannot record it either
                continue
    choices, refused = {}, []
    for candidate in (planned, *alternatives):
        try:
            picked = {k: v for k, v in chosen(candidate.view()).items() if v is not None}
            choices[candidate.plan.topology] = {**RUN_CHOICE_KEYS, **picked}
        except Unselected as exc:
            refused.append(exc)
    if not choices:
        exit_unselected(refused[0])
    gen_dir, hosts, _ = deployment_records(inventory, None)
    read = {"hosts": ",".join(hosts), "generation_dir": gen_dir, "default_topology": planned.plan.topology}
    return Day2Run(planned, alternatives, extravars(None, **fixed, glmops_deployed_read=read, glmops_run_choices=choices))


def extravars(topology: str | None, **more: Any) -> dict[str, Any]:
    """The run's extra vars: ``more`` without the None ones, and ``glmops_topology``."""
    out = {k: v for k, v in more.items() if v is not None}
    if topology:
        out["glmops_topology"] = topology
    return out


def finish(result: runner.RunResult, plan: dict, console) -> None:
    """The run's summary, then its exit status line as the last line; exits 0 or 1."""
    runner.print_summary(result, console, plan)
    runner.finish(console, result)
