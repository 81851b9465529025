"""The consoles glmops prints through (rich), and the time stamp of progress lines.

``console(stderr=False)`` is the one way a verb gets a :class:`rich.console.Console`:

* on a terminal: rich's defaults (the terminal's width, colour, the runner's live table);
* anything else (a pipe, ``tee``, a file, a CI log): rich would fall back to 80 columns
  (``COLUMNS`` overrides) and fold table cells and long text at that width, splitting paths,
  ssh hints, unit names and URLs. So the width is :data:`WIDE` and ``soft_wrap`` is on:
  a table is as wide as its widest cell, a line as long as its text; nothing is cut,
  folded or wrapped (``tests/unit/test_output.py`` pipes a verb and checks every line).

``stamp()`` is the wall-clock time (``HH:MM:SS``, the controller's local time) every progress
line starts with; the summary of a run gives its elapsed seconds.
"""
from __future__ import annotations

from datetime import datetime

from rich.console import Console

#: columns of a console that is not a terminal: wider than any line glmops prints
WIDE = 1 << 16


def console(stderr: bool = False, **kwargs) -> Console:
    """A Console on stdout (or stderr) for glmops' output; see the module docstring.
    ``kwargs`` go to :class:`rich.console.Console` (``highlight`` defaults to False)."""
    kwargs.setdefault("highlight", False)
    return unwrapped(Console(stderr=stderr, **kwargs), keep_width="width" in kwargs)


def unwrapped(con: Console, keep_width: bool = False) -> Console:
    """``con``, made to cut and wrap nothing unless it is a terminal (or ``keep_width``)."""
    if not con.is_terminal and not keep_width:
        con.width = WIDE
        con.soft_wrap = True
    return con


def stamp() -> str:
    """``HH:MM:SS`` now (local time): the first field of every progress line."""
    return datetime.now().strftime("%H:%M:%S")

