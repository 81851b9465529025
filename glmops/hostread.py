"""Read a host in one SSH round trip: several standalone host scripts, one Python process.

The roles read hosts with small stdlib-only scripts (``roles/*/files/*.py``: the engine
service state, the engine runtime probe, the generation list, the precheck facts). Each
``ansible.builtin.script`` call costs a temp dir, a copy and an exec; an Ansible module
costs an AnsiballZ payload and ``ansible.module_utils`` imports on the host. Here an action
plugin sends one program on the stdin of one ``python3 -`` (the SSH pipelining path): it
runs every script in turn with its own ``argv``, each one's stdout captured, and prints one
JSON document. Nothing is written on the host.

:func:`program` builds that program, :func:`parse` reads its answer, :func:`run` does both
through an action plugin's connection, :func:`script` finds a role's script by name.
"""
from __future__ import annotations

import json
from pathlib import Path

from glmops.resources import data_root

#: glmops' roles directory (the checkout's, else the installed copy's: glmops.resources)
ROLES = data_root() / "roles"

# Runs on the host (stdlib only). JOBS: [{"id", "name", "argv"}]; SOURCES: {name: text}.
# Each script runs as __main__ with sys.argv = [name, *argv]; SystemExit gives its exit code.
_RUNNER = r'''
import contextlib, io, json, sys
def _one(name, source, argv):
    out = io.StringIO()
    code = 0
    sys.argv = [name, *argv]
    try:
        with contextlib.redirect_stdout(out):
            exec(compile(source, name, "exec"), {"__name__": "__main__", "__file__": name})
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except Exception as exc:  # the answer says which script failed and why
        code = 1
        out = io.StringIO(json.dumps({"failed": True, "msg": "%s: %s: %s" % (name, type(exc).__name__, exc)}))
    return {"rc": code, "stdout": out.getvalue()}
_res = {job["id"]: _one(job["name"], SOURCES[job["name"]], job["argv"]) for job in JOBS}
sys.stdout.write("\n" + MARK + json.dumps(_res))
'''

#: precedes the JSON answer on stdout (a script's stray output to fd 1 cannot be mistaken for it)
MARK = "@@glmops-hostread@@"


def script(role: str, name: str) -> Path:
    """Path of ``roles/<role>/files/<name>`` under :data:`ROLES`.

    Raises FileNotFoundError naming the path when it is missing."""
    path = ROLES / role / "files" / name
    if not path.is_file():
        raise FileNotFoundError(f"host script {path} is missing")
    return path


def program(jobs: list[tuple[str, Path, list[str]]]) -> str:
    """The Python program that runs ``jobs`` on the host.

    ``jobs``: ``[(id, script path, argv)]``; a script used by several jobs is sent once.
    Returns the program text for ``python3 -`` (stdin)."""
    sources: dict[str, str] = {}
    todo = []
    for job_id, path, argv in jobs:
        sources.setdefault(path.name, path.read_text(encoding="utf-8"))
        todo.append({"id": job_id, "name": path.name, "argv": [str(a) for a in argv]})
    return (f"SOURCES = {json.dumps(sources)}\nJOBS = {json.dumps(todo)}\nMARK = {json.dumps(MARK)}\n"
            + _RUNNER)


def parse(stdout: str) -> dict[str, dict]:
    """``{id: {"rc": int, "stdout": str, "json": parsed stdout or None}}`` from the program's
    output. Raises ValueError when the answer is missing (the program did not finish)."""
    head, sep, body = stdout.rpartition(MARK)
    if not sep:
        raise ValueError(f"no answer from the host read (output: {stdout[-300:]!r})")
    out = json.loads(body)
    for res in out.values():
        try:
            res["json"] = json.loads(res["stdout"]) if res["stdout"].strip() else None
        except ValueError:
            res["json"] = None
    return out


def run(action, task_vars: dict, jobs: list[tuple[str, Path, list[str]]]) -> dict[str, dict]:
    """Run ``jobs`` on the action's host in one round trip (``python3 -`` with the program on
    stdin, become as the task says). ``action``: an ``ActionBase``. Returns :func:`parse`'s
    answer; raises RuntimeError with the host's stderr when the interpreter fails."""
    python = str(task_vars.get("ansible_python_interpreter") or "")
    if not python or python.startswith("auto") or "{" in python:  # discovery or a template: the usual path
        python = "/usr/bin/python3"
    res = action._low_level_execute_command(f"{python} -", in_data=program(jobs).encode("utf-8"), sudoable=True)
    try:
        return parse(res.get("stdout", ""))
    except ValueError as exc:
        raise RuntimeError(f"reading the host failed (rc {res.get('rc')}): "
                           f"{(res.get('stderr') or '').strip()[-500:] or exc}") from exc
