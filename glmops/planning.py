"""The one door into a Plan: :func:`load` (inventory -> validated Deployment and Plan).

Every verb, ``glmops.deployview.plan_view`` and every action plugin (``glmops_plan``,
``glmops_prechecks``) plans through :func:`load`; it is the only caller of
``glmops.rules.validate`` (which is the only caller of ``glmops.plan.build``), so the
rules, the placement and the plan's port/config checks run everywhere the same way, and
``tests/unit/test_planning.py`` fails when a second door appears.

A :class:`Planned` hands out the parts a caller asks for (``view()`` renders every file,
``checkpoint()`` only the checkpoint section, ``precheck_needs()``, ``smoke_target()``), each
computed on first use.

The Plan travels to a playbook once: ``glmops.runner.run(..., planned=P)`` writes
:func:`handoff` (the plan view, the hosts' precheck needs and the :func:`inputs_digest` of
the inventory, the catalog, the topology and the overrides it was planned from) into a 0600
file of a private temporary directory (never the run's artifacts: env files hold secrets)
and passes its path as ``glmops_plan_handoff``. The plan play's ``glmops_plan`` plugin
(:func:`take_handoff`) uses it when the digest of what it would plan from is the same, and
plans itself otherwise (plain ``ansible-playbook -i INV playbooks/deploy.yml``).

``GLMOPS_PLAN_BUILDS=<file>``: a debug hook; every Plan built through :func:`load` appends
one line (pid, inventory, topology) to that file, in the CLI and in the playbook's plugins.
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from glmops import ansible_options, deployview, rules
from glmops.checkpoint import plan_view as checkpoint_view
from glmops.inventory import RUN_VARIABLES, load_deployment
from glmops.model import Deployment, Plan, Problem, ValidationError
from glmops.prechecks import needs_for_deployment
from glmops.smoke import SmokeTarget, target_from_plan

#: the debug hook's environment variable (see the module docstring)
BUILDS_ENV = "GLMOPS_PLAN_BUILDS"
CATALOG_DIR = Path(__file__).resolve().parent / "catalog"
HANDOFF_VERSION = 1


@dataclass
class Planned:
    """A validated Deployment and its Plan, with the parts callers ask for (cached)."""

    deployment: Deployment
    plan: Plan
    inventory: str
    topology: str | None = None
    overrides: dict[str, Any] | None = None
    #: the ``-e``/Vault options it was planned with (``glmops.ansible_options.current()`` then)
    options: ansible_options.AnsibleOptions = field(default_factory=ansible_options.AnsibleOptions)
    _parts: dict[str, Any] = field(default_factory=dict, repr=False)

    def _part(self, name: str, make):
        if name not in self._parts:
            self._parts[name] = make()
        return self._parts[name]

    def view(self) -> dict[str, Any]:
        """The playbooks' plan view, every file rendered (:func:`glmops.deployview.view`)."""
        return self._part("view", lambda: deployview.view(self.deployment, self.plan))

    def checkpoint(self) -> dict[str, Any]:
        """Only the checkpoint section (:func:`glmops.checkpoint.plan_view`), nothing rendered."""
        return self._part("checkpoint", lambda: checkpoint_view(self.deployment, self.plan))

    def precheck_needs(self) -> dict[str, dict[str, Any]]:
        """``{host: needs}`` (:func:`glmops.prechecks.needs_for_deployment`)."""
        return self._part("precheck_needs", lambda: needs_for_deployment(self.deployment, self.plan))

    def smoke_target(self) -> SmokeTarget:
        """The :class:`glmops.smoke.SmokeTarget` of this Plan."""
        return self._part("smoke_target", lambda: target_from_plan(self.plan, self.deployment))

    def extra_vars(self) -> dict[str, Any]:
        """The ``-e`` values it was planned with, parsed as ansible-playbook parses them."""
        return self._part("extra_vars", lambda: _parsed_extra_vars(self.options))

    def digest(self, run_extravars: dict[str, Any] | None = None) -> str:
        """:func:`inputs_digest` of its inputs; ``run_extravars``: what the run adds to its ``-e``
        (``glmops.runner`` passes them after the operator's, so they win)."""
        from ansible.utils.vars import combine_vars

        return inputs_digest(self.inventory, self.overrides, combine_vars(self.extra_vars(), run_extravars or {}))


def load(inventory: str, topology: str | None = None, overrides: dict[str, Any] | None = None) -> Planned:
    """Read ``inventory`` (``topology``/``overrides`` win over it, as in
    :func:`glmops.inventory.load_deployment`), validate it and build its Plan
    (:func:`glmops.rules.validate`: rules, ``glmops.plan.build``, the plan's checks).

    Raises :class:`glmops.model.ValidationError` with every problem; nothing is contacted."""
    dep = load_deployment(inventory, topology=topology, overrides=overrides)
    the_plan, problems = rules.validate(dep)
    if the_plan is not None:
        _count(inventory, topology)
    if problems or the_plan is None:
        raise ValidationError(problems)
    return Planned(dep, the_plan, str(inventory), topology, dict(overrides) if overrides else None,
                   ansible_options.current())


def _parsed_extra_vars(options: ansible_options.AnsibleOptions) -> dict[str, Any]:
    if not options.extra_vars:
        return {}
    from ansible.parsing.dataloader import DataLoader

    loader = DataLoader()
    if any(e.startswith("@") for e in options.extra_vars):
        ansible_options.vault_secrets(loader, options)
    return ansible_options.extra_vars(loader, options)


def refuse_run_variables(options: ansible_options.AnsibleOptions | None = None) -> None:
    """Raise ValidationError (the CLI exits 2, before any run) naming each run-control variable
    (``glmops.inventory.RUN_VARIABLES``: ``glmops_plan_handoff``, ``glmops_plan_summary``, ...)
    that the operator's ``-e`` (``options``, default ``current()``) sets: only glmops' verbs set
    them. ``-e`` that cannot be parsed is left to the inventory read and the run, which report it."""
    options = options or ansible_options.current()
    if not options.extra_vars:
        return
    try:
        given = _parsed_extra_vars(options)
    except Exception:  # noqa: BLE001 - the same parse error stops the read/the run before any host
        return
    bad = sorted(k for k in given if k in RUN_VARIABLES)
    if bad:
        raise ValidationError([Problem("RUN_VARIABLE", f"-e:{name}",
                                       f"{name!r} is a run-control variable glmops sets itself; it cannot be "
                                       "set with -e/--extra-vars",
                                       "leave it out (the verb's own options set what it controls)")
                               for name in bad])


def play_extra_vars(loader: Any) -> dict[str, Any] | None:
    """Inside ``ansible-playbook`` (an action plugin): that command's ``-e`` values, parsed
    (the operator's and the runner's ``@<run>/env/extravars``); None when they cannot be parsed
    (the caller plans itself and reports)."""
    try:
        return ansible_options.extra_vars(loader)
    except Exception:  # noqa: BLE001 - planning again reports the same error properly
        return None


def digest_extra_vars(extra_vars: dict[str, Any] | None) -> str:
    """The canonical text of the ``-e`` values a Plan depends on: every one (a templated inventory
    value may use any) but the run-control variables (``glmops.inventory.RUN_VARIABLES``: the
    runner's own, e.g. the handoff's path and the run dir)."""
    kept = {k: v for k, v in (extra_vars or {}).items() if k not in RUN_VARIABLES}
    return json.dumps(json.loads(json.dumps(kept, default=str)), sort_keys=True)


def _count(inventory: str, topology: str | None) -> None:
    path = os.environ.get(BUILDS_ENV)
    if path:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(f"{os.getpid()} {inventory} {topology or '-'}\n")


def _inventory_files(inventory: str) -> list[Path]:
    """The files Ansible reads for ``inventory``: a file, or every file of a directory source
    that Ansible's InventoryManager parses (it skips hidden names, ``group_vars``/``host_vars``/
    ``vars_plugins`` and ``INVENTORY_IGNORE_PATTERNS``/``INVENTORY_IGNORE_EXTS``: a run's
    ``.glmops/runs`` inside the inventory is never hashed); plus the vars files of the
    ``group_vars/`` and ``host_vars/`` beside it, as the ``host_group_vars`` plugin reads them
    (no hidden name, no ``~`` backup, extension none or ``YAML_FILENAME_EXTENSIONS``)."""
    import re

    from ansible import constants as C

    ignored = re.compile("|".join([r"^\.", "^host_vars$", "^group_vars$", "^vars_plugins$",
                                   *C.INVENTORY_IGNORE_PATTERNS,
                                   *(re.escape(x) + "$" for x in C.INVENTORY_IGNORE_EXTS)]))
    var_exts = {"", *C.YAML_FILENAME_EXTENSIONS}
    files: list[Path] = []

    def source(d: Path) -> None:
        for child in sorted(d.iterdir()):
            if ignored.search(child.name):
                continue
            if child.is_dir():
                source(child)
            elif child.is_file():
                files.append(child)

    def vars_dir(root: Path) -> None:
        for p in sorted(root.rglob("*")):
            parts = p.relative_to(root).parts
            if p.is_file() and p.suffix in var_exts \
                    and not any(part.startswith(".") or part.endswith("~") for part in parts):
                files.append(p)

    path = Path(inventory)
    if path.is_dir():
        source(path)
        base = path
    else:
        files += [path] if path.is_file() else []
        base = path.parent
    for sub in ("group_vars", "host_vars"):
        if (base / sub).is_dir():
            vars_dir(base / sub)
    return files


def inputs_digest(inventory: str, overrides: dict[str, Any] | None,
                  extra_vars: dict[str, Any] | None = None) -> str:
    """sha256 of what a Plan is built from: the inventory's files (names relative to it and
    contents), the catalog's files, the overrides and the ``-e`` values
    (:func:`digest_extra_vars`; the topology is compared apart: the Plan's own, see
    :func:`take_handoff`)."""
    h = hashlib.sha256()
    base = Path(inventory) if Path(inventory).is_dir() else Path(inventory).parent
    for root, files in ((base, _inventory_files(inventory)),
                        (CATALOG_DIR, sorted(p for p in CATALOG_DIR.rglob("*") if p.is_file()
                                             and "__pycache__" not in p.parts))):
        for f in files:
            h.update(str(f.relative_to(root)).encode() + b"\0")
            h.update(f.read_bytes() + b"\0")
    h.update(json.dumps(overrides or None, sort_keys=True, default=str).encode() + b"\0")
    h.update(digest_extra_vars(extra_vars).encode())
    return h.hexdigest()


def handoff(planned: Planned, run_extravars: dict[str, Any] | None = None) -> dict[str, Any]:
    """What the CLI hands its run's plan play (secrets inside: write it 0600, outside artifacts);
    ``run_extravars``: the extra vars the runner adds to the run's ``-e``."""
    return {"version": HANDOFF_VERSION, "digest": planned.digest(run_extravars), "topology": planned.plan.topology,
            "plan": planned.view(),
            "precheck_needs": planned.precheck_needs(), "smoke_target": asdict(planned.smoke_target())}


def take_handoff(path: str | None, inventory: str, topology: str | None,
                 overrides: dict[str, Any] | None, extra_vars: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """The handed ``{plan, precheck_needs, smoke_target}`` when ``path`` holds a handoff planned
    from what ``inventory``, ``overrides`` and the run's ``-e`` values ``extra_vars``
    (:func:`play_extra_vars`) are now (same :func:`inputs_digest`) for
    ``topology`` (None: the inventory's, which the digest covers; else the Plan's topology must
    be it); else None (the caller plans)."""
    if not path or not os.path.isfile(path):
        return None
    try:
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict) or doc.get("version") != HANDOFF_VERSION:
        return None
    if doc.get("digest") != inputs_digest(inventory, overrides or None, extra_vars):
        return None
    if topology and topology != doc.get("topology"):
        return None
    return {"plan": doc["plan"], "precheck_needs": doc.get("precheck_needs"), "smoke_target": doc.get("smoke_target")}
