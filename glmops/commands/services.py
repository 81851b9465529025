"""Which of a Plan's services a day-2 verb's ``--service NAME ...`` names (:func:`pick_services`),
and its bad-input exit (:func:`exit_unselected`, exit 2 before any host). Imports no verb module
and no other ``glmops.commands`` module, so every verb module may use it (``history`` too, which
``common`` imports)."""
from __future__ import annotations

import sys

from glmops.output import console as make_console


class Unselected(Exception):
    """A ``--service`` (or ``logs`` SERVICE) selection names nothing of a Plan; its one-line
    message names what was asked and what is accepted."""


def pick_services(plan: dict, names: tuple[str, ...]) -> list[dict]:
    """The Plan's services ``--service NAME ...`` names (a unit name with or without
    ``.service``; every service without a name), in the Plan's order; :class:`Unselected`
    naming each unknown name and listing the accepted ones."""
    if not names:
        return list(plan["services"])
    wanted = {n if n.endswith(".service") else f"{n}.service" for n in names}
    units = [s["unit"] for s in plan["services"]]
    unknown = [n for n in names if (n if n.endswith(".service") else f"{n}.service") not in units]
    if unknown:
        raise Unselected(
            f"--service {', '.join(repr(n) for n in unknown)}: not a service of deployment {plan['deployment']} "
            f"({plan['topology']}); accepted: {', '.join(units)} (with or without .service)")
    return [s for s in plan["services"] if s["unit"] in wanted]


def exit_unselected(exc: Unselected) -> None:
    """Print the selection's problem and exit 2 (before any host is touched)."""
    make_console(stderr=True).print(str(exc), markup=False, soft_wrap=True)
    sys.exit(2)


def select_services(plan: dict, names: tuple[str, ...]) -> list[dict]:
    """:func:`pick_services`, or exit 2 printing why (before any host is touched)."""
    try:
        return pick_services(plan, names)
    except Unselected as exc:
        exit_unselected(exc)
        raise  # unreachable: exit_unselected exits
