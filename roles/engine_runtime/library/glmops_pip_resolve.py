#!/usr/bin/python
"""glmops_pip_resolve: resolve an engine's requirement set together with its pins, changing nothing.

F15 (shared/cases/field-cases.md): a pin such as ``transformers==5.17.0`` conflicts with the
engine release's own ``transformers<5``. This module runs pip's resolver in a dry run
(``pip install --dry-run --ignore-installed --report``) with the interpreter the engine venv
will be made with (same Python version, platform tags and markers; pip from the interpreter,
else the wheel ensurepip ships, else a throwaway venv under the module's temporary directory),
against the same source (a wheelhouse with
``--no-index --find-links``, or an index URL handed over in the environment). Nothing outside
that temporary directory is written; the engine venv is not touched.

Merging: a pin replaces the requirement line of the same project (a wheelhouse lock pins every
project); everything else (the engine's own Requires-Dist included) is resolved together.

Returns ``resolved`` (``name==version`` for every distribution the set needs, in pip's order),
``requirements`` (the merged lines resolved). Fails with ``conflict`` (pip's "The conflict is
caused by" lines: each constraint with who asked for it), or ``missing`` (requirements the
source does not have), and a message naming them; ``resolve()`` is importable for tests.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile

DOCUMENTATION = r"""
module: glmops_pip_resolve
short_description: Resolve an engine's requirements together with its pins (pip dry run), changing nothing.
description:
  - Runs C(pip install --dry-run --ignore-installed --report) in a throwaway venv under the module's
    temporary directory and reports the resolved set, or fails naming the conflicting constraints (F15).
options:
  python:
    description: Interpreter the engine venv is made with (the throwaway venv uses it too).
    type: path
    default: /usr/bin/python3
  requirements:
    description: The engine's requirement lines (a wheelhouse lock or index requirements).
    type: list
    elements: str
    required: true
  pins:
    description: Requirement specifiers installed with the engine; each replaces the line of the same project.
    type: list
    elements: str
    default: []
  wheelhouse:
    description: Wheel directory (C(--no-index --find-links)); empty means use I(index_url).
    type: path
  index_url:
    description: Package index URL, passed as C(PIP_INDEX_URL) in pip's environment.
    type: str
    default: ""
  pip_args:
    description: Extra pip arguments.
    type: list
    elements: str
    default: []
  label:
    description: What is resolved, for messages (C(vllm 0.32.0)).
    type: str
    default: the engine
author: glmops
"""

_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def project(spec: str) -> str:
    """PEP 503 normalised project name of a requirement line ('' for comments/options)."""
    m = _NAME.match(spec or "")
    return re.sub(r"[-_.]+", "-", m.group(1)).lower() if m else ""


def merge(requirements: list[str], pins: list[str]) -> list[str]:
    """The requirement lines with every pinned project's line replaced by its pin (pins last)."""
    pinned = {project(p) for p in pins}
    kept = [r.strip() for r in requirements if r.strip() and project(r) not in pinned]
    return kept + [p.strip() for p in pins if p.strip()]


def explain(stderr: str) -> tuple[list[str], list[str]]:
    """(conflict lines, missing requirements) from pip's resolver output."""
    conflict: list[str] = []
    lines = stderr.splitlines()
    for i, line in enumerate(lines):
        if line.strip().startswith("The conflict is caused by"):
            for nxt in lines[i + 1:]:
                if not nxt.strip():
                    break
                conflict.append(nxt.strip())
            break
    missing = re.findall(r"No matching distribution found for (\S+)", stderr)
    return conflict, missing


_FIND_PIP_WHEEL = (
    "import ensurepip, glob, os\n"
    "dirs = [os.path.join(os.path.dirname(ensurepip.__file__), '_bundled'), '/usr/share/python-wheels']\n"
    "found = sorted(w for d in dirs for w in glob.glob(os.path.join(d, 'pip-*.whl')))\n"
    "print(found[-1] if found else '')\n")


def pip_command(python: str, tmp: str) -> list[str] | str:
    """argv prefix that runs pip for ``python`` without changing anything outside ``tmp``:
    the interpreter's own pip, else the pip wheel ensurepip ships (pip runs from a wheel:
    ``python pip.whl/pip``; with --dry-run --ignore-installed nothing is installed), else a
    throwaway venv in ``tmp``. A string is an error message."""
    if subprocess.run([python, "-c", "import pip"], capture_output=True, check=False).returncode == 0:
        return [python, "-m", "pip"]
    found = subprocess.run([python, "-c", _FIND_PIP_WHEEL], capture_output=True, text=True, check=False)
    wheel = found.stdout.strip()
    if found.returncode == 0 and wheel:
        return [python, os.path.join(wheel, "pip")]
    venv = os.path.join(tmp, "venv")
    made = subprocess.run([python, "-m", "venv", venv], capture_output=True, text=True, check=False)
    if made.returncode:
        return f"{python} has no pip and `{python} -m venv` failed: {made.stderr.strip()}"
    return [os.path.join(venv, "bin", "python"), "-m", "pip"]


def resolve(python: str, requirements: list[str], pins: list[str], wheelhouse: str | None = None,
            index_url: str = "", pip_args: list[str] | None = None, workdir: str | None = None,
            label: str = "the engine") -> dict:
    """Dry-run resolve of ``merge(requirements, pins)``; returns a module result dict.

    ``failed`` is set with ``msg``, ``conflict`` and ``missing`` when pip cannot resolve the
    set. ``workdir``: where the throwaway venv goes (a temporary directory under it, removed).
    """
    merged = merge(requirements, pins)
    tmp = tempfile.mkdtemp(prefix="glmops-resolve-", dir=workdir)
    try:
        pip = pip_command(python, tmp)
        if isinstance(pip, str):
            return {"failed": True, "msg": f"glmops_pip_resolve: {pip}"}
        req = os.path.join(tmp, "requirements.txt")
        with open(req, "w") as fh:
            fh.write("\n".join(merged) + "\n")
        report = os.path.join(tmp, "report.json")
        argv = pip + ["install", "--dry-run", "--ignore-installed",
                "--disable-pip-version-check", "--no-input", "--report", report]
        env = dict(os.environ, PIP_NO_CACHE_DIR="1")
        env.pop("PIP_INDEX_URL", None)
        if wheelhouse:  # the wheelhouse only: no index, no other links from the environment
            for name in ("PIP_FIND_LINKS", "PIP_EXTRA_INDEX_URL"):
                env.pop(name, None)
            argv += ["--no-index", "--find-links", wheelhouse]
        elif index_url:
            env["PIP_INDEX_URL"] = index_url
        argv += list(pip_args or []) + ["-r", req]
        proc = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
        source = f"wheelhouse {wheelhouse}" if wheelhouse else "the package index"
        if proc.returncode:
            conflict, missing = explain(proc.stdout + "\n" + proc.stderr)  # pip logs the cause at info level
            if conflict:
                msg = (f"F15: the pins {pins} conflict with {label}'s own requirements; nothing on this host "
                       f"was changed. pip's resolver: " + "; ".join(conflict))
            elif missing:
                msg = (f"{label} with pins {pins}: {', '.join(missing)} not found in {source}; nothing on this "
                       f"host was changed")
            else:
                tail = " | ".join(ln.strip() for ln in proc.stderr.strip().splitlines()[-6:])
                msg = f"{label} with pins {pins}: pip could not resolve the set from {source}: {tail}"
            return {"failed": True, "msg": msg, "conflict": conflict, "missing": missing,
                    "requirements": merged, "changed": False}
        with open(report) as fh:
            items = json.load(fh).get("install", [])
        resolved = [f"{i['metadata']['name']}=={i['metadata']['version']}" for i in items]
        return {"changed": False, "resolved": resolved, "requirements": merged}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    from ansible.module_utils.basic import AnsibleModule

    module = AnsibleModule(
        argument_spec={
            "python": {"type": "path", "default": "/usr/bin/python3"},
            "requirements": {"type": "list", "elements": "str", "required": True},
            "pins": {"type": "list", "elements": "str", "default": []},
            "wheelhouse": {"type": "path"},
            "index_url": {"type": "str", "default": "", "no_log": True},
            "pip_args": {"type": "list", "elements": "str", "default": []},
            "label": {"type": "str", "default": "the engine"},
        },
        supports_check_mode=True,  # read-only: resolves in a throwaway directory
    )
    p = module.params
    result = resolve(p["python"], p["requirements"], p["pins"], p["wheelhouse"] or None, p["index_url"],
                     p["pip_args"], workdir=module.tmpdir, label=p["label"])
    if result.pop("failed", False):
        module.fail_json(**result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
