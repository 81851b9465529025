"""systemd unit syntax shared by every unit glmops renders (``glmops.render`` for the engine
units, ``glmops.monitoring`` for the exporters): ``ExecStart=`` quoting, the restart timing and
the templates' Jinja environment. Imports nothing of glmops but ``glmops.model``."""
from __future__ import annotations

import re

import jinja2

from glmops.model import CONTROL_CHARS

#: starts systemd allows within the window (``StartLimitBurst=``); the next start attempt is refused
#: (``start-limit-hit``), so a unit that always fails is stopped after this many starts (F32: at most 4)
START_LIMIT_BURST = 3
#: seconds between a stop and the automatic restart (``RestartSec=``)
RESTART_SEC = 10
_SAFE = re.compile(r"^[A-Za-z0-9_@+=:,./-]+\Z")


def jinja_env() -> jinja2.Environment:
    """The Jinja environment of ``glmops/templates`` (strict undefined, no autoescape: unit
    files, env files and YAML configs, never HTML)."""
    return jinja2.Environment(
        loader=jinja2.PackageLoader("glmops", "templates"),
        trim_blocks=True, keep_trailing_newline=True, undefined=jinja2.StrictUndefined, autoescape=False,
    )


def systemd_quote(word: str) -> str:
    """Quote one argv word for ``ExecStart=`` (systemd.syntax): ``%`` -> ``%%`` and
    ``$`` -> ``$$`` always (no specifier/env expansion); plain words stay bare; others go
    in single quotes, or in double quotes with ``\\`` and ``\"`` escapes when the word
    has a backslash or a single quote (systemd unescapes C escapes)."""
    if CONTROL_CHARS.search(word):
        # a newline would end ExecStart= and start a directive of its own (glmops.inventory
        # refuses such values first; this keeps any other path from writing one)
        raise ValueError(f"argument {word!r} contains a control character; accepted: one line of printable text")
    word = word.replace("%", "%%").replace("$", "$$")
    if word and _SAFE.match(word):
        return word
    if "\\" not in word and "'" not in word:
        return f"'{word}'"
    return '"' + word.replace("\\", "\\\\").replace('"', '\\"') + '"'
