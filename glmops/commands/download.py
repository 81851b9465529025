"""``glmops download``: fetch the checkpoint at its pinned commit, verify it, put it on every
host that serves it (``playbooks/download.yml``, ``roles/checkpoint``), through
``glmops.runner``.

The hub token is never an argument: it comes from ``HF_TOKEN`` in the environment, from
``checkpoint_hf_token`` (Ansible Vault) or ``checkpoint_hf_token_file`` in the inventory;
the playbook hands it to the downloading host as a 0600 file under ``no_log``.
Exit codes: 0 every host holds a verified copy, 1 a host failed, 2 bad input.
"""
from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from typing import Any

import click
from glmops.commands.ansible_opts import ANSIBLE_OPTS
from rich.console import Console
from rich.table import Table

from glmops import runner
from glmops.checkpoint import human
from glmops.commands.common import load_plan
from glmops.output import console as make_console
from glmops.smoke import endpoint_problem

#: the event key of roles/checkpoint's progress polls (glmops_checkpoint action=progress)
PROGRESS_TASK = runner.DOWNLOAD_PROGRESS
#: the fact roles/checkpoint's last task sets per host: that host's result
OUTPUT_FACT = "checkpoint_result"


def _human(n: float) -> str:
    return human(n)


class ProgressPrinter:
    """Turns the role's progress polls (``runner_retry`` events of the progress task) into one
    line per host every few seconds: bytes done / total, percent, rate; and, at once, a line
    naming each file the download's watchdog found stalled (F31)."""

    def __init__(self, console: Console, every_s: float = 5.0):
        self.console, self.every = console, every_s
        self.last: dict[str, float] = {}
        self.seen: dict[str, dict[str, Any]] = {}
        self.stalls: dict[str, int] = {}

    def __call__(self, event: dict) -> None:
        data = event.get("event_data") or {}
        if runner.event_of(data) != PROGRESS_TASK or event.get("event") not in ("runner_retry", "runner_on_ok"):
            return
        res = data.get("res") or {}
        host = data.get("host", "?")
        if "bytes_total" not in res:
            return
        self.seen[host] = res
        stalls = res.get("stalls") or []
        for n, stall in enumerate(stalls[self.stalls.get(host, 0):], start=self.stalls.get(host, 0)):
            from glmops.checkpoint import stall_text

            self.console.print(f"{runner.stamp()}   {host:<16} stalled: "
                               f"{stall_text(stall, bool(res.get('plain_http')) and n + 1 == len(stalls))}",
                               highlight=False, markup=False)
        self.stalls[host] = len(stalls)
        now = time.monotonic()
        if event["event"] == "runner_retry" and now - self.last.get(host, 0) < self.every:
            return
        self.last[host] = now
        self.console.print(
            f"{runner.stamp()}   {host:<16} {res.get('state', ''):<10} {_human(res.get('bytes_done', 0))} / "
            f"{_human(res.get('bytes_total', 0))} ({res.get('percent', 0):.1f} %) "
            f"{_human(res.get('rate_bps', 0))}/s", highlight=False)


TOKEN_VARS = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")


def _token_to_file(extravars: dict[str, Any]) -> str | None:
    """Move the hub token out of this process's environment into a 0600 file in a 0700 temp
    dir, and point the playbook at it (``checkpoint_hf_token_file``, a path: not secret).

    ansible-runner copies the whole environment into the run's artifacts
    (``artifacts/run/command``), so a token left in the environment would land on disk there.
    Returns the temp dir to remove after the run (None without a token)."""
    token = ""
    for key in TOKEN_VARS:
        token = token or os.environ.get(key, "")
        os.environ.pop(key, None)
    if not token:
        return None
    tdir = tempfile.mkdtemp(prefix="glmops-token-")
    os.chmod(tdir, 0o700)
    path = os.path.join(tdir, "hf_token")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(token.strip())
    extravars["checkpoint_hf_token_file"] = path
    return tdir


def results(outputs: list[dict]) -> list[dict[str, Any]]:
    """The per-host checkpoint results from the role's output task events."""
    rows = []
    for ev in outputs:
        facts = ((ev.get("event_data") or {}).get("res") or {}).get("ansible_facts") or {}
        if OUTPUT_FACT in facts:
            rows.append(facts[OUTPUT_FACT])
    return rows


@click.command("download")
@ANSIBLE_OPTS
@click.option("-i", "--inventory", required=True, type=click.Path(exists=True), help="Ansible inventory (directory or file).")
@click.option("--topology", type=click.Choice(["agg", "disagg"]), default=None, help="Override glmops_topology.")
@click.option("--mode", type=click.Choice(["per_node", "fanout", "shared"]), default=None,
              help="Override glmops_checkpoint.mode.")
@click.option("--endpoint", default=None,
              help="Hub URL, http(s)://HOST[:PORT] (default: HF_ENDPOINT, else huggingface-hub's default).")
@click.option("--check", is_flag=True, help="Check the space and the hub's metadata; download nothing.")
@click.option("--limit", default=None, help="Ansible --limit pattern.")
@click.option("--json", "as_json", is_flag=True, help="Print the per-host results as JSON.")
def download(inventory, topology, mode, endpoint, check, limit, as_json):
    """Fetch every checkpoint the Plan loads (the model's and each speculative drafter's) once at
    its pinned commit, verify every file against the hub's metadata and distribute it
    (per_node | fanout | shared)."""
    bad = endpoint_problem("--endpoint", endpoint)
    if bad:  # before the inventory is planned and before any request
        click.echo(f"error: {bad}; nothing was contacted", err=True)
        sys.exit(2)
    console = make_console(stderr=as_json)
    planned = load_plan(inventory, topology)
    ck = planned.checkpoint()  # only the checkpoint section: no unit rendered here
    for one in ck.get("checkpoints") or [ck]:  # the model's, then each drafter's
        label = "checkpoint" if one.get("kind", "model") == "model" else one["kind"]
        console.print(f"{label} {one['repo']}@{one['revision'] or '(pin at download)'} -> {one['local_dir']} "
                      f"on {', '.join(one['hosts'])} ({mode or one['mode']})")
    extravars: dict[str, Any] = {}
    if topology:
        extravars["glmops_topology"] = topology
    if mode:
        extravars["checkpoint_mode"] = mode
    if endpoint:
        extravars["checkpoint_endpoint"] = endpoint
    outputs: list[dict] = []
    progress = ProgressPrinter(console)
    token_dir = _token_to_file(extravars)

    def on_event(event: dict) -> None:
        progress(event)
        data = event.get("event_data") or {}
        facts = (data.get("res") or {}).get("ansible_facts") or {}
        if OUTPUT_FACT in facts and event.get("event") == "runner_on_ok":
            outputs.append(event)

    try:
        result = runner.run("download", "download.yml", inventory, extravars, check=check, limit=limit,
                            console=console, quiet=as_json, on_event=on_event, planned=planned)
    finally:
        if token_dir:
            shutil.rmtree(token_dir, ignore_errors=True)
    rows = results(outputs)
    if as_json:
        click.echo(json.dumps({"ok": result.ok, "changed": result.changed, "hosts": rows, "failures": result.failures,
                               "artifacts": str(result.artifacts)}, indent=2))
    else:
        table = Table(title=f"glmops download: {'ok' if result.ok else 'FAILED'} in {result.seconds:.1f} s")
        for col in ("host", "from", "commit", "files fetched", "size", "path"):
            table.add_column(col)
        for r in rows:
            table.add_row(r["host"], r["source"], str(r["commit"])[:12], str(r["fetched"]),
                          _human(int(r["bytes"] or 0)), r["local_dir"])
        if result.ok:
            console.print(table)
        console.print(f"run artifacts: {result.artifacts}", markup=False)
        if not result.ok:  # a failed run ends with what failed where, then its exit status
            for failure in result.failures:
                console.print(f"failed {failure}", markup=False)
            console.print(table)
        runner.finish(console, result)
    sys.exit(0 if result.ok else 1)
