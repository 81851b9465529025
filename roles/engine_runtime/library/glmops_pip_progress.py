#!/usr/bin/python
"""glmops_pip_progress: how far a running ``pip install`` into an engine venv has got, changing nothing.

tasks/venv_install.yml starts pip as an async job (``--log <venv>/glmops-pip.log``) and polls
this module (``until: finished``; it waits up to ``wait_s`` for the job, returning as soon as it
ends); each poll is an ansible-runner ``runner_retry`` event whose
``msg`` the progress view of ``glmops deploy`` prints (glmops/runner.py ``_Progress.retry``), so
a long install shows packages done and the package pip works on instead of minutes of silence.

What it reads, all on the host:

* packages done: ``<venv>/lib/python*/site-packages/<name>-<version>.dist-info/RECORD`` of the
  projects being installed (pip writes RECORD last, when a distribution is installed);
* the projects: pip's ``Installing collected packages: a, b, ...`` log line (the order pip
  installs them in, dependencies included), before it the requirement file's lines;
* the package in hand: the first collected project without its RECORD, or while pip still
  collects, the file or project of its last ``Processing``/``Collecting``/``Downloading`` line;
* finished: the async job's results file holds its final result (not ``started`` without
  ``finished``); elapsed seconds from that file's time (written when the job started).

Returns ``finished``, ``phase`` (``collecting``, ``installing``, ``finished``), ``packages_done``,
``packages_total``, ``current``, ``elapsed_s`` and ``msg`` (one line). ``progress()`` is
importable for tests. Source of the pip behaviour: pip 23.0.1 (Debian 12's ``python3 -m venv``),
``pip/_internal/req/__init__.py`` ``install_given_reqs`` (the log line, then one install at a
time) and ``pip/_internal/operations/install/wheel.py`` (RECORD written after the files).
"""
from __future__ import annotations

import glob
import json
import os
import re
import time

DOCUMENTATION = r"""
module: glmops_pip_progress
short_description: Report how far a running pip install into a venv has got (packages done, current package).
description:
  - Reads the venv's installed distributions, pip's log and the async job's results file; changes nothing.
options:
  venv:
    description: The venv pip installs into.
    type: path
    required: true
  requirements:
    description: The requirement file pip was given (its lines count the packages until pip logs the collected set).
    type: path
  log:
    description: pip's C(--log) file.
    type: path
  async_results_file:
    description: The async job's results file (C(results_file) of the task that started pip).
    type: path
  wait_s:
    description: Seconds to wait for the job to finish before reporting (returns at once when it does).
    type: float
    default: 0
author: glmops
"""

_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")
_COLLECTED = re.compile(r"Installing collected packages: (.+)$")
_STEP = re.compile(r"\b(?:Processing|Collecting|Downloading|Using cached) (\S+)")


def norm(name: str) -> str:
    """PEP 503 normalised project name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirement_names(path: str | None) -> list[str]:
    names: list[str] = []
    try:
        with open(path or "", encoding="utf-8") as fh:
            for line in fh:
                line = line.split("#", 1)[0].strip()
                m = _NAME.match(line) if line and not line.startswith("-") else None
                if m and norm(m.group(1)) not in names:
                    names.append(norm(m.group(1)))
    except OSError:
        pass
    return names


def _installed(venv: str) -> set[str]:
    """Projects with a complete install (dist-info with RECORD) in the venv."""
    done = set()
    for record in glob.glob(os.path.join(venv, "lib", "python*", "site-packages", "*.dist-info", "RECORD")):
        dist = os.path.basename(os.path.dirname(record))[: -len(".dist-info")]
        done.add(norm(dist.split("-", 1)[0]))
    return done


def _log(path: str | None) -> tuple[list[str], str]:
    """(collected projects in install order, the last collect step's subject) from pip's log."""
    collected: list[str] = []
    step = ""
    try:
        with open(path or "", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                m = _COLLECTED.search(line)
                if m:
                    collected = [norm(n.strip()) for n in m.group(1).split(",") if n.strip()]
                    continue
                s = _STEP.search(line)
                if s:
                    step = os.path.basename(s.group(1).rstrip("/"))
    except OSError:
        pass
    return collected, step


def _job(path: str | None) -> tuple[bool, float | None]:
    """(finished, seconds since the job started) from the async results file."""
    if not path or not os.path.exists(path):
        return False, None
    try:
        started = os.stat(path).st_mtime
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return False, None
    finished = not (data.get("started") and not data.get("finished"))
    return finished, None if finished else max(0.0, time.time() - started)


def progress(venv: str, requirements: str | None = None, log: str | None = None,
             async_results_file: str | None = None, wait_s: float = 0) -> dict:
    """The install's progress; see the module docstring for the fields. Waits up to ``wait_s``
    seconds for the job to finish first (a poll every 0.2 s), so the task's ``delay`` can be
    short and a quick install costs no poll interval."""
    deadline = time.monotonic() + wait_s
    finished, elapsed = _job(async_results_file)
    while not finished and time.monotonic() < deadline:
        time.sleep(0.2)
        finished, elapsed = _job(async_results_file)
    collected, step = _log(log)
    wanted = collected or _requirement_names(requirements)
    installed = _installed(venv)
    done = [n for n in wanted if n in installed]
    out = {"finished": finished, "packages_total": len(wanted), "packages_done": len(done),
           "elapsed_s": round(elapsed, 1) if elapsed is not None else None}
    took = f" ({elapsed:.0f} s)" if elapsed is not None else ""
    if finished:
        out.update(phase="finished", current="", msg=f"pip finished: {len(done)}/{len(wanted)} packages installed")
    elif collected:
        current = next((n for n in collected if n not in installed), "")
        now = f"now {current}" if current else "finishing"  # all installed: pip compiles, writes its report
        out.update(phase="installing", current=current,
                   msg=f"installing {len(done)}/{len(wanted)} packages, {now}{took}")
    else:
        out.update(phase="collecting", current=step,
                   msg=f"collecting {len(wanted)} packages, now {step or '-'}{took}")
    return out


def main() -> None:
    from ansible.module_utils.basic import AnsibleModule

    module = AnsibleModule(
        argument_spec=dict(
            venv=dict(type="path", required=True),
            requirements=dict(type="path"),
            log=dict(type="path"),
            async_results_file=dict(type="path"),
            wait_s=dict(type="float", default=0),
        ),
        supports_check_mode=True,
    )
    p = module.params
    module.exit_json(changed=False, **progress(p["venv"], p["requirements"], p["log"], p["async_results_file"],
                                               p["wait_s"]))


if __name__ == "__main__":
    main()
