"""Read the seeds' own text in tests: their option lists and shell commands, so expectations
come from /work/shared/seeds at test time instead of being retyped."""
from __future__ import annotations

import re
from pathlib import Path

SEEDS = Path("/work/shared/seeds")


def seed(number: str) -> str:
    """The text of seed ``number`` (``"004"``)."""
    [path] = SEEDS.glob(f"{number}_*.txt")
    return path.read_text(encoding="utf-8")


def option_list(text: str, key: str) -> list[str]:
    """The backticked values of the seed's ``- `key`: `a`, `b` ...`` line (before any parenthesis)."""
    line = next(ln for ln in text.splitlines() if ln.startswith(f"- `{key}`:"))
    return re.findall(r"`([^`]+)`", line.split(":", 1)[1].split("(")[0])


def command_after(text: str, marker: str, start: str = "") -> tuple[str, int]:
    """The first shell command after the first line containing ``marker`` (leading ``VAR=value``
    lines and ``\\`` continuations included) whose first line starts with ``start`` (any command
    line when empty), and its 1-based first line number."""
    lines = text.splitlines()
    i = next(n for n, ln in enumerate(lines) if marker in ln)
    cmd = re.compile(r"^(export \w+=|[A-Z_][A-Z0-9_]*=\S* \\$|vllm |vllm-router |trtllm-serve)")
    while not (cmd.match(lines[i]) and lines[i].startswith(start)):
        i += 1
    first, out = i, []
    while True:
        out.append(lines[i])
        if not lines[i].rstrip().endswith("\\"):
            break
        i += 1
    return "\n".join(out), first + 1
