"""The runbooks are checked against the CLI: every ``glmops ...`` command line in a fenced
code block of docs/runbooks/*.md goes through the real click parser (parse only,
``make_context`` with ``resilient_parsing=False``; nothing runs), so each verb and each
flag exists and every value is accepted as written. ``$INV`` is the inventory the
runbooks ``export``; it is expanded to a real inventory so ``-i`` (which must exist) parses.
"""
from __future__ import annotations

import re
import shlex
from pathlib import Path

import click
import pytest

from glmops.cli import main

REPO = Path(__file__).resolve().parents[2]
RUNBOOKS = REPO / "docs" / "runbooks"
INV = "inventories/lab"  # stands in for $INV: any existing inventory directory
REQUIRED = {
    "first-deploy.md", "upgrade-engine.md", "rollback.md", "add-or-replace-node.md",
    "rotate-hf-token.md", "cuda-oom-at-start.md", "block-reuse-disabled.md",
    "slow-first-request.md", "fabric-manager-not-started.md", "kv-transfer-hang-disagg.md",
    "disk-full-during-download.md",
}
FENCE = re.compile(r"^[ \t]*```([\w-]*)[ \t]*\n(.*?)^[ \t]*```[ \t]*$", re.MULTILINE | re.DOTALL)
SHELL_OPS = {"|", "||", "&&", ";", "&", ">", ">>", "<", "2>", "2>&1"}


def glmops_lines(text: str) -> list[str]:
    """Every ``glmops ...`` command in the fenced shell blocks of ``text`` (continuations joined)."""
    out = []
    for lang, body in FENCE.findall(text):
        if lang not in ("", "sh", "bash", "shell", "console"):
            continue
        body = re.sub(r"\s*\\\n\s*", " ", body)
        for line in body.splitlines():
            line = line.strip().removeprefix("$ ").strip()
            if re.match(r"^(sudo\s+)?glmops(\s|$)", line):
                out.append(line.removeprefix("sudo ").strip())
    return out


def argv_of(line: str) -> list[str]:
    """The argv of glmops in a shell line: $INV expanded, comments and pipes cut off."""
    lexer = shlex.shlex(line.replace("$INV", INV).replace("${INV}", INV), posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = "#"
    argv = []
    for token in lexer:
        if token in SHELL_OPS or set(token) <= set("|&;<>"):
            break
        argv.append(token)
    assert argv and argv[0] == "glmops", line
    return argv[1:]


def parse(argv: list[str]) -> list[str]:
    """Parse ``glmops ARGV`` down to the leaf command; returns the command path.

    Raises ``click.UsageError`` (unknown verb, unknown flag, bad value) like the CLI would.
    """
    cmd: click.Command = main
    ctx = cmd.make_context("glmops", list(argv), resilient_parsing=False)
    path = ["glmops"]
    while isinstance(cmd, click.Group):
        rest = [*ctx._protected_args, *ctx.args]
        if not rest and cmd.invoke_without_command:  # e.g. `glmops bench -i INV --quick`
            break
        if not rest:
            raise click.UsageError(f"{' '.join(path)}: a subcommand is missing", ctx=ctx)
        name, sub, remaining = cmd.resolve_command(ctx, rest)
        if sub is None:
            raise click.UsageError(f"no such command {name!r}", ctx=ctx)
        path.append(name)
        cmd = sub
        ctx = sub.make_context(name, remaining, parent=ctx, resilient_parsing=False)
    return path


def all_commands() -> list[tuple[str, str]]:
    out = []
    for md in sorted(RUNBOOKS.glob("*.md")):
        for line in glmops_lines(md.read_text()):
            out.append((md.name, line))
    return out


@pytest.fixture(autouse=True)
def _in_repo(monkeypatch):
    monkeypatch.chdir(REPO)  # -i paths are relative to the repository


def test_every_required_runbook_exists_with_symptoms_checks_steps():
    names = {p.name for p in RUNBOOKS.glob("*.md")}
    assert REQUIRED <= names, REQUIRED - names
    for name in REQUIRED:
        text = (RUNBOOKS / name).read_text()
        heads = re.findall(r"^##\s+(\w+)", text, re.MULTILINE)
        assert heads[:3] == ["Symptoms", "Checks", "Steps"], (name, heads)
        assert glmops_lines(text), f"{name} has no glmops command"


COMMANDS = all_commands()


def test_runbooks_have_many_commands_across_verbs():
    verbs = {argv_of(line)[0] for _, line in COMMANDS}
    assert len(COMMANDS) >= 60
    assert {"deploy", "upgrade", "rollback", "history", "download", "check", "provision",
            "status", "logs", "smoke", "validate", "plan"} <= verbs


@pytest.mark.parametrize("runbook,line", COMMANDS, ids=[f"{r}:{i}" for i, (r, _) in enumerate(COMMANDS)])
def test_runbook_command_parses(runbook, line):
    argv = argv_of(line)
    assert "$" not in " ".join(argv), f"{runbook}: unexpanded shell variable in {line!r}"
    try:
        parse(argv)
    except click.exceptions.Exit:  # --help
        pass
    except click.UsageError as exc:
        pytest.fail(f"{runbook}: `{line}` does not parse: {exc.format_message()}")


@pytest.mark.parametrize("line,needle", [
    ('glmops deploy -i "$INV" --made-up-flag', "--made-up-flag"),
    ('glmops upgrade -i "$INV" --to 3', "--to"),
    ('glmops rollback -i "$INV" --to zero', "zero"),
    ('glmops frobnicate -i "$INV"', "frobnicate"),
    ('glmops deploy --topology sideways -i "$INV"', "sideways"),
    ('glmops lab up --hosts 3 --bogus', "--bogus"),
    ("glmops deploy", "--inventory"),
])
def test_parser_rejects_what_the_cli_rejects(line, needle):
    with pytest.raises(click.UsageError) as err:
        parse(argv_of(line))
    assert needle in err.value.format_message()


def test_extraction_handles_continuations_pipes_and_comments():
    text = ('Intro\n\n```sh\n$ glmops status -i "$INV" --json | jq .services  # all\n'
            'glmops upgrade -i "$INV" \\\n    --set max_batch_size=8\nls -l\n```\n\n'
            '```yaml\nglmops_engine: vllm\n```\n')
    lines = glmops_lines(text)
    assert lines == ['glmops status -i "$INV" --json | jq .services  # all',
                     'glmops upgrade -i "$INV" --set max_batch_size=8']
    assert argv_of(lines[0]) == ["status", "-i", INV, "--json"]
    assert parse(argv_of(lines[1])) == ["glmops", "upgrade"]
