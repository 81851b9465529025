"""Run a glmops playbook through ansible-runner: the only caller of ansible-runner.

``run(verb, playbook, inventory, ...)`` runs ``playbooks/<playbook>`` with the
repository's ``ansible.cfg``, streams the events into a progress view (one line per
host and step, or a live table on a terminal), and returns a :class:`RunResult`
with per-host stats, per-service readiness (from the ``glmops_hostctl.py`` gate and
status outputs) and every failure message. ``print_summary`` prints the per-host
summary table (host, service, state, time-to-ready) and the endpoint URL (only when the
run's one-token request through the endpoint answered); on a failed run the failures and
the table come last. ``finish`` prints the exit status line and exits: a failed run ends
with its failure summary and ``exit 1: ...``, never with ``changed: N`` or the endpoint.

Progress lines (plain output, not a terminal) start with the time (``HH:MM:SS``,
``glmops.output.stamp``); a task that polls (``until``/``retries``, e.g. the engine runtime's
"Install progress" or the readiness gate) prints one line per retry event with its
result's ``msg`` (or the last line of its stdout), see ``_Progress.retry``.

The plan play (playbooks/plays/plan.yml) writes the Plan's secret-free summary into the
run dir (``plan-summary.json``, extra var ``glmops_plan_summary``); it becomes
``RunResult.plan``, and a plan refused for bad input becomes ``RunResult.plan_problems``,
so a CLI verb need not plan on the controller before the run. A verb that planned already
passes its :class:`glmops.planning.Planned` (``planned=``): the run's plan play takes it
(``glmops_plan_handoff``, a 0600 file in a private temporary directory removed after the
run, never in the artifacts, authenticated by an HMAC with a per-run key whose file's path
goes to ansible-playbook as ``GLMOPS_PLAN_HANDOFF_KEY_FILE``: ``glmops.planning.write_handoff``) instead of planning again.

Artifacts of every run are kept under ``./.glmops/runs/<UTC timestamp>-<verb>/``
(``GLMOPS_RUNS_DIR`` overrides the parent), whose path is printed. Nothing secret is
passed as an extra var, and tasks touching secrets are ``no_log``, so the artifacts
hold no secret (tests grep them).
"""
from __future__ import annotations

import contextlib
import difflib
import json
import os
import re
import shlex
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, NoReturn

import ansible_runner
from rich.console import Console
from rich.live import Live
from rich.table import Table
from rich.text import Text

from glmops import ansible_options, planning
from glmops.inventory import check_run_target
from glmops.model import SECRET_NAME as _SECRET_ENV  # the one home of secret patterns
from glmops.resources import data_root
from glmops.output import console as make_console
from glmops.output import stamp

REPO = data_root()  # the checkout's top level, else the installed copy (glmops/_data)
PLAYBOOKS = REPO / "playbooks"
ANSIBLE_CFG = REPO / "ansible.cfg"

# What a task reports travels as an explicit event key in its result, never as its name:
# ``glmops_event: <key>`` in the result (an action plugin's return dict), in a reporting
# ``ansible.builtin.debug`` msg dict (hidden from the progress lines) or in a script's JSON on
# stdout (so the retries of a polling script carry it too); :func:`event_of` reads it.
EVENT_KEY = "glmops_event"
READY = "ready"  # roles/engine_service glmops_hostctl.py ready: per-service JSON (the gate)
STATUS = "status"  # glmops_hostctl.py status
STATE = "state"  # glmops_hostctl.py state: the host read before any change; its "services" rows are
# the units left running that answered /health (a no-op deploy skips the gate); the gate's rows replace them
READ = "read"  # glmops_deploy_read (plays/read.yml): the deploy's one read per host; its msg says
# "in state" or what the host needs, shown on the progress line
JOURNAL = "journal"  # roles/engine_service logs: the journal lines glmops logs prints (a report)
PLAN = "plan"  # glmops_plan (plays/plan.yml): a refusal's problems
ENDPOINT = "endpoint"  # glmops_endpoint: only its ok result lets the summary print the endpoint line
PRUNED = "pruned"  # plays/prune.yml: a host's prune finished (a report)
#: plays/departed.yml: the fact holding the decision about the hosts that left the Plan
#: (glmops.generations.departed); a result setting it is that decision
DEPARTED_FACT = "glmops_departed"
DOWNLOAD_PROGRESS = "download_progress"  # roles/checkpoint's progress polls (glmops download prints them)


def event_of(data: dict) -> str:
    """The event key of a task result (an ansible-runner event's ``event_data``): ``glmops_event``
    of the result, of its msg dict (a reporting debug task) or of its stdout JSON (a script), else
    ``""``: a result without the key reports nothing, whatever its task is named."""
    res = data.get("res") or {}
    if not isinstance(res, dict):
        return ""
    msg = res.get("msg")
    key = res.get(EVENT_KEY) or (msg.get(EVENT_KEY) if isinstance(msg, dict) else None)
    out = res.get("stdout")
    if not key and isinstance(out, str) and out.startswith("{") and f'"{EVENT_KEY}"' in out:
        try:
            doc = json.loads(out)
        except ValueError:
            doc = {}
        key = doc.get(EVENT_KEY) if isinstance(doc, dict) else None
    return str(key or "")


def reported(data: dict) -> dict:
    """What a reporting debug task reported (its msg dict), else the result itself."""
    res = data.get("res") or {}
    msg = res.get("msg")
    return msg if isinstance(msg, dict) and EVENT_KEY in msg else res


PLAN_SUMMARY = "plan-summary.json"
# ssh's words for an unknown or changed host key (StrictHostKeyChecking=yes), and what to do
HOST_KEY_FAILURE = re.compile(r"Host key verification failed|REMOTE HOST IDENTIFICATION HAS CHANGED"
                              r"|No (ED25519|ECDSA|RSA)? ?host key is known")
HOST_KEY_HINT = ("hint: the host's SSH key is unknown or changed; accept a new host's key with "
                 "`glmops known-hosts -i INVENTORY` (ssh-keyscan, appended to ~/.ssh/known_hosts); "
                 "a changed key is never replaced: check the host, then `ssh-keygen -R HOST`")


@dataclass
class HostStats:
    ok: int = 0
    changed: int = 0
    failed: int = 0
    unreachable: int = 0
    skipped: int = 0
    last_task: str = ""
    failed_task: str = ""  # the task that failed or found the host unreachable
    messages: list[str] = field(default_factory=list)

    @property
    def state(self) -> str:
        if self.unreachable:
            return "UNREACHABLE"
        if self.failed:
            return "FAILED"
        return "ok"


@dataclass
class RunResult:
    """What a playbook run did. ``rc``: 0 ok, 1 failed (a host, a task, unreachable)."""

    verb: str
    rc: int
    status: str
    artifacts: Path
    seconds: float
    hosts: dict[str, HostStats] = field(default_factory=dict)
    services: list[dict[str, Any]] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    outputs: list[dict[str, Any]] = field(default_factory=list)
    check: bool = False
    # the plan play's summary (glmops_plan's ``summary``), None when the run has no plan play
    plan: dict[str, Any] | None = None
    # the plan play refused the inventory: its message, one problem per line after the first
    plan_problems: str = ""
    # the endpoint check (event ENDPOINT) answered in this run; its msg
    endpoint_answered: bool = False
    endpoint_msg: str = ""
    # deploy: what it decided about the hosts that left the Plan (glmops.generations.departed)
    # and the hosts whose prune finished
    departed: dict[str, Any] | None = None
    pruned: list[str] = field(default_factory=list)

    @property
    def changed(self) -> int:
        return sum(h.changed for h in self.hosts.values())

    @property
    def ok(self) -> bool:
        return self.rc == 0


def runs_dir() -> Path:
    return Path(os.environ.get("GLMOPS_RUNS_DIR") or Path.cwd() / ".glmops" / "runs")


def run(
    verb: str,
    playbook: str,
    inventory: str | os.PathLike,
    extravars: dict[str, Any] | None = None,
    *,
    check: bool = False,
    diff: bool = False,
    limit: str | None = None,
    console: Console | None = None,
    quiet: bool = False,
    on_event: Callable[[dict], None] | None = None,
    planned: planning.Planned | None = None,
    alternatives: tuple[planning.Planned, ...] | list[planning.Planned] = (),
) -> RunResult:
    """Run ``playbooks/<playbook>`` against ``inventory`` and return what happened.

    ``extravars`` must hold no secret (they are written into the run dir).
    ``check``/``diff``/``limit`` map to ``--check``/``--diff``/``--limit``.
    ``planned``: the Plan the verb built for this run, handed to the plan play (see the
    module docstring); ``alternatives``: its Plans for other topologies, handed with it for a
    run whose plan play chooses the topology the hosts record (``glmops_deployed_read``).
    """
    planning.refuse_run_variables()  # ValidationError (exit 2): -e may not set glmops_plan_handoff, ...
    check_run_target(inventory, limit)  # ValidationError (exit 2) before any host: no hosts, bad --limit
    console = console or make_console()
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S.%fZ")
    rundir = runs_dir() / f"{stamp}-{verb}"
    rundir.mkdir(parents=True, exist_ok=True)
    cmdline = [shlex.quote(a) for a in ansible_options.current().argv()]  # -e, vault ids/files: paths, no password
    if check:
        cmdline.append("--check")
    if diff:
        cmdline.append("--diff")
    result = RunResult(verb=verb, rc=1, status="", artifacts=rundir, seconds=0.0, check=check)
    view = _Progress(console, quiet, diff=diff)

    def handler(event: dict) -> bool:
        _collect(result, event)
        view.event(event, result)
        if on_event:
            on_event(event)
        return True

    env = _runner_env()
    # which of the -e @FILE hold an inline -e (a problem's place then reads -e, not the temp file)
    env[ansible_options.INLINE_ENV] = os.pathsep.join(ansible_options.current().inline_files)
    started = time.monotonic()
    extra = {**(extravars or {}), "glmops_plan_summary": str(rundir / PLAN_SUMMARY)}
    with _secrets_out_of_environ(), _handoff(planned, extra, alternatives) as handoff:
        # the handoff's path, and its key file's in the environment (never an inherited one)
        env[planning.KEY_ENV] = ""
        if handoff:
            extra["glmops_plan_handoff"], env[planning.KEY_ENV] = handoff
        r = ansible_runner.run(
            private_data_dir=str(rundir),
            project_dir=str(REPO),
            playbook=str(PLAYBOOKS / playbook),
            inventory=str(Path(inventory).resolve()),
            extravars=extra,
            cmdline=" ".join(cmdline) or None,
            # the first play (validate + plan) runs on localhost: keep it inside any --limit
            limit=f"{limit},localhost" if limit else None,
            envvars=env,
            quiet=True,
            event_handler=handler,
            ident="run",
            rotate_artifacts=0,
        )
    result.seconds = time.monotonic() - started
    result.status = r.status
    result.rc = 0 if (r.rc == 0 and r.status == "successful") else 1
    view.close()
    _ended(result, r, rundir)
    return result


def _runner_env() -> dict[str, str]:
    """The environment ansible-runner adds for a run (name -> value)."""
    return {
        # the ansible-playbook next to this interpreter (a venv's bin is not always on PATH)
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
        # the operator's ansible.cfg (else ours), glmops' plugin/role paths appended to theirs
        **ansible_options.config_env(str(REPO), str(ANSIBLE_CFG)),
        "ANSIBLE_FORCE_COLOR": "0",
        "ANSIBLE_NOCOLOR": "1",
        "PYTHONUNBUFFERED": "1",
        # ansible-runner sets ANSIBLE_HOST_KEY_CHECKING=False when the environment lacks it:
        # check host keys on every run (an inventory may still say otherwise per host, e.g.
        # ansible_host_key_checking or its own ansible_ssh_common_args)
        "ANSIBLE_HOST_KEY_CHECKING": "True",
    }


def _ended(result: RunResult, r: Any, rundir: Path) -> None:
    """Complete ``result`` (status and rc set) of the ended ansible-runner run ``r`` in ``rundir``:
    the plan play's summary, and a failure quoting the last 20 lines of the run's stdout when
    it failed before any host result."""
    summary = rundir / PLAN_SUMMARY
    if summary.is_file():
        result.plan = json.loads(summary.read_text())
    if result.rc and not result.failures:
        # the run failed before any host result (bad playbook, missing ansible-playbook...)
        tail = (rundir / "artifacts" / "run" / "stdout")
        text = tail.read_text(errors="replace").strip().splitlines()[-20:] if tail.exists() else []
        result.failures.append(f"ansible-runner {r.status} (rc {r.rc}): " + "\n".join(text))


@contextlib.contextmanager
def _handoff(planned: planning.Planned | None, run_extravars: dict[str, Any] | None = None,
             alternatives: tuple[planning.Planned, ...] | list[planning.Planned] = ()):
    """(handoff path, key path) of ``planned``'s authenticated handoff
    (:func:`glmops.planning.write_handoff`: env files, so secrets; its digest covers
    ``run_extravars``, the run's own extra vars, as the plan play sees them): 0600 files in a
    0700 temporary directory, removed when the run ends; None without a Plan. The key file's
    path goes to ansible-playbook in the environment (``planning.KEY_ENV``), never the key."""
    if planned is None:
        yield None
        return
    tdir = tempfile.mkdtemp(prefix="glmops-plan-")
    try:
        os.chmod(tdir, 0o700)
        yield planning.write_handoff(tdir, planned, run_extravars, alternatives)
    finally:
        shutil.rmtree(tdir, ignore_errors=True)


# Environment variables that hold secrets (glmops.model.SECRET_NAME). ansible-runner writes the
# whole environment of the run into its artifacts (artifacts/<ident>/command), so these are taken
# out of the environment for the duration of the run; secrets reach hosts only through 0600 files
# or no_log vars.


def secret_env_names(environ: dict[str, str] | None = None) -> list[str]:
    """Names in ``environ`` (default ``os.environ``) that look like secrets (HF_TOKEN,
    VLLM_API_KEY, ...). Paths to secret files (``*_FILE``, e.g. ANSIBLE_VAULT_PASSWORD_FILE)
    are not secrets and stay."""
    environ = os.environ if environ is None else environ
    return [k for k in environ if _SECRET_ENV.search(k) and not k.upper().endswith("_FILE")]


@contextlib.contextmanager
def _secrets_out_of_environ():
    """Remove secret-looking variables from ``os.environ`` while ansible-runner runs, then
    put them back, so no run artifact holds them."""
    saved = {k: os.environ.pop(k) for k in secret_env_names()}
    try:
        yield
    finally:
        os.environ.update(saved)


def _collect(result: RunResult, event: dict) -> None:
    kind = event.get("event", "")
    data = event.get("event_data") or {}
    if kind == "playbook_on_stats":
        # the recap's counts are authoritative: a no_log result (env files) hides its
        # "changed" from the per-task events
        for name, count in (data.get("changed") or {}).items():
            stats = result.hosts.setdefault(name, HostStats())
            stats.changed = max(stats.changed, int(count))
        return
    host = data.get("host")
    if not host or not kind.startswith("runner_on_") or kind in ("runner_on_start",):
        return
    stats = result.hosts.setdefault(host, HostStats())
    task = data.get("task", "")
    stats.last_task = task
    res = data.get("res") or {}
    key = event_of(data)
    if kind == "runner_on_ok":
        stats.ok += 1
        stats.changed += 1 if res.get("changed") else 0
    elif kind == "runner_on_failed" and not data.get("ignore_errors"):
        stats.failed += 1
        msg = _failure_text(res)
        if key == PLAN and host == "localhost":
            result.plan_problems = msg
        stats.messages.append(msg)
        stats.failed_task = stats.failed_task or task
        result.failures.append(f"{host}: {task}: {msg}")
    elif kind == "runner_on_unreachable":
        stats.unreachable += 1
        msg = res.get("msg", "unreachable")
        if HOST_KEY_FAILURE.search(msg):
            msg += f"\n{HOST_KEY_HINT}"
        stats.messages.append(msg)
        stats.failed_task = stats.failed_task or task
        result.failures.append(f"{host}: UNREACHABLE: {msg}")
    elif kind == "runner_on_skipped":
        stats.skipped += 1
    if key == ENDPOINT and kind == "runner_on_ok" and not res.get("skipped"):
        result.endpoint_answered = True
        result.endpoint_msg = str(res.get("msg") or "")
    if key in (READY, STATUS, STATE, READ) and res.get("stdout"):
        try:
            rows = json.loads(res["stdout"]).get("services", [])
        except ValueError:
            rows = []
        for row in rows:
            row["host"] = host
            row["task"] = task
            row["event"] = key
            result.services = [s for s in result.services
                               if not (s["host"] == host and s["unit"] == row["unit"])]
            result.services.append(row)
    if kind != "runner_on_ok":
        return
    if DEPARTED_FACT in (res.get("ansible_facts") or {}):
        result.departed = res["ansible_facts"][DEPARTED_FACT]
    if key == PRUNED and host not in result.pruned:
        result.pruned.append(host)
    if key == JOURNAL:
        result.outputs.append({"host": host, "task": task, "res": reported(data)})


def gate_waiting(host: str, res: dict) -> list[str]:
    """One line per unit the readiness gate still waits for, from one of its windows (a
    ``runner_retry`` result of the gate (event :data:`READY`, roles/engine_service/files/glmops_hostctl.py ``ready
    --window``): ``host unit: waiting 95 s for /health (... answered 503)``."""
    try:
        rows = json.loads(res.get("stdout") or "{}").get("services", [])
    except (ValueError, AttributeError):
        return []
    lines = []
    for row in rows:
        if row.get("decided", True) or not isinstance(row, dict):
            continue
        what, why = row.get("waiting") or "readiness", row.get("reason") or ""
        detail = f" ({why})" if why and why != what else ""
        lines.append(f"{host:<16} {row.get('unit', '?')}: waiting {float(row.get('seconds') or 0):.0f} s for {what}{detail}")
    return lines


def _failure_text(res: dict) -> str:
    if res.get("censored"):
        return res["censored"]
    if res.get("results"):  # a loop: the failed items' messages
        parts = [_failure_text(r) for r in res["results"] if isinstance(r, dict) and r.get("failed")]
        return "\n".join(p for p in parts if p)
    msg = res.get("msg") or ""
    extra = (res.get("stderr") or "").strip()
    return f"{msg}\n{extra}".strip() if extra and extra not in msg else msg


def diff_text(res: dict) -> str:
    """Unified diff text of a task result's ``diff`` (a dict or a list of dicts with
    ``before``/``after`` and optional headers), as ``ansible-playbook --diff`` shows it."""
    items = res.get("diff") or []
    items = items if isinstance(items, list) else [items]
    out = []
    for d in items:
        if not isinstance(d, dict) or ("before" not in d and "after" not in d):
            if isinstance(d, dict) and d.get("prepared"):
                out.append(str(d["prepared"]))
            continue
        before, after = d.get("before", ""), d.get("after", "")
        if not isinstance(before, str) or not isinstance(after, str):
            before, after = json.dumps(before, indent=2, sort_keys=True), json.dumps(after, indent=2, sort_keys=True)
        out.extend(difflib.unified_diff(before.splitlines(keepends=True), after.splitlines(keepends=True),
                                        d.get("before_header", "before"), d.get("after_header", "after")))
    return "".join(out)


#: role argument checks Ansible adds per role and host: shown only when they fail
_ARGSPEC_TASK = "Validating arguments against arg spec"

#: event keys whose retry events another printer shows (glmops download's ProgressPrinter)
RETRY_SILENT: set[str] = {DOWNLOAD_PROGRESS}
#: per task, the least seconds between two printed retry lines of one host (default: every retry;
#: the task's ``delay`` sets the pace)
RETRY_EVERY_S: dict[str, float] = {}


def retry_text(res: dict) -> str:
    """What one retry of a polling task says: its result's ``msg`` (first line), else the last
    line of its stdout, else ``attempt N of M``."""
    for text in (str(res.get("msg") or "").strip().splitlines()[:1],
                 str(res.get("stdout") or "").strip().splitlines()[-1:]):
        if text and text[0].strip():
            return text[0].strip()
    if res.get("attempts"):
        return f"attempt {res['attempts']} of {res.get('retries', '?')}"
    return "waiting"


class _Progress:
    """Per host and step: a line per task result (plain output), or a live table on a TTY.
    Every plain line starts with the time (``HH:MM:SS``). A play header is printed with its
    first shown result (plays with nothing to do stay silent); with ``diff`` the file diffs of
    ``--diff`` are printed under their task; a retry event of a polling task (``until``) is a
    line ``waiting: <retry_text>`` (:meth:`retry`)."""

    def __init__(self, console: Console, quiet: bool, diff: bool = False):
        self.console = console
        self.quiet = quiet
        self.diff = diff
        self.live = None
        self.rows: dict[str, tuple[str, str, str]] = {}
        self.play = ""
        self.play_shown = True
        self.retried: dict[tuple[str, str], float] = {}
        if console.is_terminal and not quiet:
            self.live = Live(self._table(), console=console, refresh_per_second=4, transient=True)
            self.live.start()

    def _table(self) -> Table:
        table = Table(title=self.play or "glmops", expand=False)
        table.add_column("time")
        table.add_column("host")
        table.add_column("step")
        table.add_column("result")
        for host, (task, state, at) in sorted(self.rows.items()):
            table.add_row(at, host, task, state)
        return table

    def _line(self, host: str, task: str, state: str) -> None:
        self._play_header()
        self.console.print(f"{stamp()}   {host:<16} {task:<70} {state}", highlight=False, markup=False,
                           soft_wrap=True)

    def _row(self, host: str, task: str, state: str) -> None:
        self.rows[host] = (task, state, stamp())
        if self.live:
            self.live.update(self._table())

    def event(self, event: dict, result: RunResult) -> None:
        kind = event.get("event", "")
        data = event.get("event_data") or {}
        if kind == "playbook_on_play_start":
            self.play = data.get("play", "")
            self.play_shown = False
        if kind == "runner_on_file_diff":
            text = diff_text(data) if self.diff else ""
            if text and not self.quiet:
                self._play_header()
                self.console.print(f"{stamp()} --- {data.get('host')}: {data.get('task', '')}", markup=False,
                                   highlight=False, soft_wrap=True)
                self.console.print(text.rstrip("\n"), markup=False, highlight=False, soft_wrap=True)
            return
        if kind == "runner_retry" and data.get("host"):
            self.retry(data)
            return
        if not kind.startswith("runner_on_") or kind == "runner_on_start" or not data.get("host"):
            if kind == "runner_on_start" and data.get("host"):
                self._row(data["host"], data.get("task", ""), "running")
            return
        res = data.get("res") or {}
        state = {
            "runner_on_ok": "changed" if res.get("changed") else "ok",
            "runner_on_failed": "FAILED",
            "runner_on_unreachable": "UNREACHABLE",
            "runner_on_skipped": "skipped",
        }.get(kind, kind)
        if kind == "runner_on_failed" and data.get("ignore_errors"):
            state = "failed (ignored)"
        if kind == "runner_on_ok" and isinstance(res.get("msg"), dict) and EVENT_KEY in res["msg"]:
            return  # a reporting task: what it reports is the CLI's to show, not a progress line
        if event_of(data) == READ and kind == "runner_on_ok" and res.get("msg"):
            state = f"ok: {res['msg']}"
        self._row(data["host"], data.get("task", ""), state)
        if (not self.live and not self.quiet and state != "skipped"
                and not (data.get("task", "").startswith(_ARGSPEC_TASK) and state == "ok")):
            self._line(data["host"], data.get("task", ""), state)

    def retry(self, data: dict) -> None:
        """One retry of a polling task on a host (ansible-runner's ``runner_retry`` event: the
        result of the attempt in ``res``, with ``attempts`` and ``retries``): a line (or the live
        row) ``waiting: <retry_text(res)>``, at most one per ``RETRY_EVERY_S[task]`` seconds
        and host; events in ``RETRY_SILENT`` are shown by their own printer."""
        host, task = data["host"], data.get("task", "")
        key = event_of(data)
        if key in RETRY_SILENT:
            return
        if key == READY:  # one of the gate's windows: a line per unit it still waits for
            for line in gate_waiting(host, data.get("res") or {}):
                self._row(host, task, line[17:])
                if not self.live and not self.quiet:
                    self._play_header()
                    self.console.print(f"{stamp()}   {line}", highlight=False, markup=False, soft_wrap=True)
            return
        now = time.monotonic()
        last = self.retried.get((host, task))
        if last is not None and now - last < RETRY_EVERY_S.get(task, 0):
            return
        self.retried[(host, task)] = now
        state = f"waiting: {retry_text(data.get('res') or {})}"
        self._row(host, task, state)
        if not self.live and not self.quiet:
            self._line(host, task, state)

    def _play_header(self) -> None:
        if not self.play_shown and not self.live:
            self.play_shown = True
            self.console.print(Text(f"{stamp()} ") + Text("PLAY ", style="bold") + Text(self.play),
                               highlight=False, soft_wrap=True)

    def close(self) -> None:
        if self.live:
            self.live.stop()


def print_summary(result: RunResult, console: Console, plan: dict | None = None) -> None:
    """The per-host table (host, service, state, time-to-ready), failures, endpoint, artifacts.

    An ok run: the table, ``endpoint: URL (model M)`` when the endpoint answered in this run
    (:func:`endpoint_answered`), then ``changed: N   run artifacts: DIR``. A failed run
    ends with its failure summary: ``changed``/artifacts first, then every failure message
    (journal tails), then the table (state ``FAILED at <task>: <first line>`` per failed host);
    never an endpoint line. The exit status line is :func:`finish`'s."""
    table = Table(title=f"glmops {result.verb}: {'ok' if result.ok else 'FAILED'} in {result.seconds:.1f} s")
    for col in ("host", "service", "state", "time-to-ready"):
        table.add_column(col)
    by_host: dict[str, list[dict]] = {}
    for svc in result.services:
        by_host.setdefault(svc["host"], []).append(svc)
    planned: dict[str, list[str]] = {}
    for svc in (plan or {}).get("services", []):
        planned.setdefault(svc["host"], []).append(svc["unit"])
    left = departed_rows(result)
    hosts = list(dict.fromkeys([*planned, *result.hosts, *by_host]))
    gone = {row[0] for row in left}
    hosts = [h for h in hosts if h not in gone and (h != "localhost" or result.hosts.get(h, HostStats()).state != "ok")] or hosts
    for host in hosts:
        stats = result.hosts.get(host, HostStats())
        seen = {s["unit"]: s for s in by_host.get(host, [])}
        units = planned.get(host) or list(seen)
        if not units:
            table.add_row(host, "-", _host_state(stats), "-")
        for unit in units:
            svc = seen.get(unit)
            if svc is None:
                state = _host_state(stats) if stats.state != "ok" else (
                    "check mode: not gated" if result.check else "not reached")
                table.add_row(host, unit, state, "-")
                continue
            if not svc.get("ready"):
                state = f"NOT READY: {svc.get('reason', '')}"
            else:
                state = "ready (restarted)" if svc.get("fresh") else "ready"
            ttr = svc.get("time_to_ready_s")
            table.add_row(host, unit, state, f"{ttr:.1f} s" if isinstance(ttr, (int, float)) else "-")
    for row in left:
        table.add_row(*row)
    artifacts = f"changed: {result.changed}   run artifacts: {result.artifacts}"
    warned = (plan or {}).get("warnings") or []
    if result.ok:
        console.print(table)
        _print_warnings(console, warned)
        if plan and plan.get("endpoint_url") and endpoint_answered(result, plan):
            console.print(f"endpoint: {plan['endpoint_url']}  (model {plan.get('served_model_name', '')})",
                          highlight=False, markup=False, soft_wrap=True)
        console.print(artifacts, highlight=False, markup=False, soft_wrap=True)
        return
    console.print(artifacts, highlight=False, markup=False, soft_wrap=True)
    for failure in result.failures:  # journal tails hold "[...]": no markup, no re-wrapping
        console.print(Text("failed ", style="red") + Text(failure), highlight=False, soft_wrap=True)
    console.print(table)
    _print_warnings(console, warned)


def _print_warnings(console: Console, warnings: list[str]) -> None:
    """The Plan's warnings (``glmops validate``'s, e.g. API_KEY_OPEN_FRONT_DOOR), once more
    under the table: a deploy log read from its end still shows them."""
    if warnings:
        console.print(f"{len(warnings)} warning(s) of the Plan (validate --strict refuses them):",
                      highlight=False, markup=False, soft_wrap=True)
        for line in warnings:
            console.print(Text("  warning ", style="yellow") + Text(line.removeprefix("warning ")),
                          highlight=False, soft_wrap=True)


def endpoint_answered(result: RunResult, plan: dict | None) -> bool:
    """True when this run saw the endpoint answer: its endpoint check (event :data:`ENDPOINT`) passed,
    or this run's readiness gate (event :data:`READY`) passed the front door whose one-token URL is the
    endpoint's (``glmops restart`` gates the router that way and has no separate check)."""
    if result.endpoint_answered:
        return True
    ready_url = (plan or {}).get("endpoint_ready_url")
    doors = {(s.get("host"), s.get("unit")) for s in (plan or {}).get("services", [])
             if ready_url and s.get("ready_url") == ready_url}
    return any(s.get("ready") and s.get("event") == READY and (s.get("host"), s.get("unit")) in doors
               for s in result.services)


def exit_line(result: RunResult | None, rc: int, why: str = "", verb: str = "") -> str:
    """``exit 0: glmops deploy ok in 83.1 s`` or ``exit 1: glmops deploy FAILED after 612.0 s:
    lab-1 (failed at Wait for readiness), lab-2 (UNREACHABLE)``; ``why`` replaces the host list."""
    verb = verb or (result.verb if result else "")
    took = f" {'in' if rc == 0 else 'after'} {result.seconds:.1f} s" if result else ""
    if rc == 0 and not why and result is not None and result.check:
        # a dry run says so in its last line, and whether anything would change
        why = (f"check mode, {result.changed} change(s) would be made" if result.changed
               else "check mode, nothing would change")
    if rc == 0:
        return f"exit 0: glmops {verb} ok{took}" + (f": {why}" if why else "")
    if not why and result is not None:
        bad = [f"{h} ({'UNREACHABLE' if s.unreachable else 'failed at ' + (s.failed_task or s.last_task)})"
               for h, s in sorted(result.hosts.items(), key=lambda kv: kv[0] == "localhost") if s.state != "ok"]
        why = ", ".join(bad) or (result.failures[0].splitlines()[0] if result.failures else result.status)
    return f"exit {rc}: glmops {verb} FAILED{took}" + (f": {why}" if why else "")


def finish(console: Console, result: RunResult | None, rc: int | None = None, why: str = "",
           verb: str = "") -> NoReturn:
    """Print :func:`exit_line` as the last line and exit with ``rc`` (default: the run's)."""
    rc = (0 if result is not None and result.ok else 1) if rc is None else rc
    console.print(exit_line(result, rc, why, verb), highlight=False, markup=False, soft_wrap=True)
    sys.exit(rc)


def departed_rows(result: RunResult) -> list[tuple[str, str, str, str]]:
    """Summary rows (host, service, state, "-") of the hosts that left the Plan: pruned (or
    would be, in check mode), not pruned and why, or not reachable at all (not in the inventory)."""
    dep = result.departed or {}
    rows = []
    for p in dep.get("prune", []):
        stats = result.hosts.get(p["host"], HostStats())
        if p["host"] in result.pruned:
            state = "would be pruned (check mode): left the Plan" if result.check else "pruned: left the Plan, stopped and removed"
        elif stats.state != "ok":
            state = f"NOT pruned (left the Plan): {_host_state(stats)}"
        else:
            state = "NOT pruned (left the Plan): the run stopped before the prune"
        for unit in p.get("units") or ["-"]:
            rows.append((p["host"], unit, state, "-"))
    for u in dep.get("unreachable", []):
        rows.append((u["host"], "-", "NOT pruned (left the Plan): could not be read (unreachable)", "-"))
    for g in dep.get("gone", []):
        rows.append((g["name"], ", ".join(g.get("units") or []) or "-",
                     "NOT pruned: left the Plan and the inventory (cannot be reached)", "-"))
    return rows


def _host_state(stats: HostStats) -> str:
    if stats.state == "ok":
        return "ok" if stats.ok else "not reached"
    first = (stats.messages[-1] if stats.messages else "").strip().splitlines()
    where = f" at {stats.failed_task}" if stats.failed_task and stats.state == "FAILED" else ""
    return f"{stats.state}{where}: {first[0] if first else ''}"
