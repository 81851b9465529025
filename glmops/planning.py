"""The one door into a Plan: :func:`load` (inventory -> validated Deployment and Plan).

Every verb, :func:`plan_view`, :func:`smoke_target` and every action plugin (``glmops_plan``,
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
and passes its path as ``glmops_plan_handoff``. The handoff is authenticated
(:func:`write_handoff`): a random per-run key in a 0600 file beside it, named to ansible-playbook
by the environment variable :data:`KEY_ENV` (a path; the key is in no argv, environment or
artifact), and an HMAC-SHA256 of its content. The plan play's ``glmops_plan`` plugin (and
``glmops_prechecks``, :func:`take_handoff`) uses it only when the HMAC verifies with that key,
both files and their directory are this user's and not group/other-writable, the content has
the expected shape and the digest of what it would plan from (inventory files, catalog,
overrides, ``-e``) is the same; otherwise it prints one line why and plans itself (as plain
``ansible-playbook -i INV playbooks/deploy.yml`` does, which has no key).

``GLMOPS_PLAN_BUILDS=<file>``: a debug hook; every Plan built through :func:`load` appends
one line (pid, inventory, topology) to that file, in the CLI and in the playbook's plugins.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import stat
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from glmops import ansible_options, deployview, rules
from glmops.checkpoint import plan_view as checkpoint_view
from glmops.inventory import RUN_VARIABLES, load_deployment
from glmops.model import Deployment, Plan, Problem, ValidationError, split_problems
from glmops.prechecks import needs_for_deployment
from glmops.smoke import SmokeTarget, target_from_plan

#: the debug hook's environment variable (see the module docstring)
BUILDS_ENV = "GLMOPS_PLAN_BUILDS"
CATALOG_DIR = Path(__file__).resolve().parent / "catalog"
HANDOFF_VERSION = 2
#: the environment variable naming the run's handoff key file (glmops.runner sets it for its
#: ansible-playbook; a path, never the key: ansible-runner keeps the environment in its artifacts)
KEY_ENV = "GLMOPS_PLAN_HANDOFF_KEY_FILE"
_MAGIC = b"glmops-plan-handoff-v2 "
_MAX_HANDOFF_BYTES = 256 << 20


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
    #: the rules' warnings (``Problem.severity == "warning"``): deviations from a seed's recipe
    #: that the engine accepts; the verbs print them (:func:`load` with ``strict`` refuses them)
    warnings: list[Problem] = field(default_factory=list)
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


def load(inventory: str, topology: str | None = None, overrides: dict[str, Any] | None = None,
         strict: bool = False) -> Planned:
    """Read ``inventory`` (``topology``/``overrides`` win over it, as in
    :func:`glmops.inventory.load_deployment`), validate it and build its Plan
    (:func:`glmops.rules.validate`: rules, ``glmops.plan.build``, the plan's checks).

    Raises :class:`glmops.model.ValidationError` with every problem (warnings included) when
    there is an error, or with ``strict`` a warning; nothing is contacted. Otherwise the
    warnings travel in ``Planned.warnings``."""
    dep = load_deployment(inventory, topology=topology, overrides=overrides)
    the_plan, problems = rules.validate(dep)
    if the_plan is not None:
        _count(inventory, topology)
    errors, warnings = split_problems(problems, strict)
    if errors or the_plan is None:
        raise ValidationError(problems)
    return Planned(dep, the_plan, str(inventory), topology, dict(overrides) if overrides else None,
                   ansible_options.current(), warnings)


class PlanProblems(ValidationError):
    """The inventory has problems; ``problems`` lists every one (glmops.model.Problem)."""

    def __init__(self, problems: list[Problem]):
        super().__init__(problems)


def plan_view(inventory: str, topology: str | None = None,
              overrides: dict[str, Any] | None = None, precheck_needs: bool = False) -> dict[str, Any]:
    """Validate + plan + render the deployment in ``inventory`` (a path): :func:`load`, then
    :meth:`Planned.view` (:func:`glmops.deployview.view`).

    ``overrides`` (variable name -> value, ``glmops_`` prefix optional) win over the
    inventory, as in ``glmops.inventory.load_deployment`` (``glmops upgrade --set``).
    ``precheck_needs``: also add ``precheck_needs`` = ``{host: needs}``
    (``glmops.prechecks.needs_for_deployment``, what the prechecks compare each host with).

    Raises :class:`PlanProblems` with every problem when the rules (or the loader)
    find any; nothing is contacted.
    """
    try:
        planned = load(inventory, topology, overrides)
    except ValidationError as exc:
        raise PlanProblems(exc.problems) from exc
    out = dict(planned.view())
    if precheck_needs:
        out["precheck_needs"] = planned.precheck_needs()
    return out


def smoke_target(inventory: str, topology: str | None = None) -> SmokeTarget:
    """Inventory -> Deployment -> Plan -> :class:`glmops.smoke.SmokeTarget` (:func:`load`, then
    :meth:`Planned.smoke_target`). Raises ``glmops.model.ValidationError`` with every problem
    when the inventory is invalid."""
    return load(inventory, topology).smoke_target()


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
                                       "leave it out: the verb's own options set what it controls")
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


def _handed(planned: Planned) -> dict[str, Any]:
    return {"topology": planned.plan.topology, "plan": planned.view(),
            "precheck_needs": planned.precheck_needs(), "smoke_target": asdict(planned.smoke_target()),
            "warnings": [str(w) for w in planned.warnings]}


def handoff(planned: Planned, run_extravars: dict[str, Any] | None = None,
            alternatives: tuple[Planned, ...] | list[Planned] = ()) -> dict[str, Any]:
    """What the CLI hands its run's plan play (secrets inside: write it 0600, outside artifacts);
    ``run_extravars``: the extra vars the runner adds to the run's ``-e``. ``alternatives``: Plans
    of the same inputs for other topologies (``{topology: {topology, plan, precheck_needs,
    smoke_target}}`` under ``alternatives``), for a run whose plan play chooses the topology
    from what the hosts record (``glmops_topology_from_hosts``, see :func:`take_handoff`)."""
    doc = {"version": HANDOFF_VERSION, "digest": planned.digest(run_extravars), **_handed(planned)}
    alts = {p.plan.topology: _handed(p) for p in alternatives if p.plan.topology != planned.plan.topology}
    if alts:
        doc["alternatives"] = alts
    return doc


class _Refused(Exception):
    """Why a handoff is not used (one line)."""


def _write_private(path: str, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)


def write_handoff(directory: str, planned: Planned, run_extravars: dict[str, Any] | None = None,
                  alternatives: tuple[Planned, ...] | list[Planned] = ()) -> tuple[str, str]:
    """Write ``planned``'s :func:`handoff` (with its ``alternatives``) into ``directory`` (a private 0700 directory of this
    user) as ``plan.json``, authenticated: a new random key in the 0600 file ``plan.key`` and
    the HMAC-SHA256 of the content in the file's first line. Returns (handoff path, key path);
    the run gets the first as ``glmops_plan_handoff`` and the second in :data:`KEY_ENV`."""
    key = secrets.token_bytes(32)
    key_path = os.path.join(directory, "plan.key")
    _write_private(key_path, key.hex().encode())
    payload = json.dumps(handoff(planned, run_extravars, alternatives)).encode()
    mac = hmac.new(key, payload, hashlib.sha256).hexdigest().encode()
    path = os.path.join(directory, "plan.json")
    _write_private(path, _MAGIC + mac + b"\n" + payload)
    return path, key_path


def _read_private(path: str, what: str, secret: bool) -> bytes:
    """The bytes of ``path``: a regular file (no symlink) of this user, not group/other-writable
    (``secret``: not group/other-accessible at all), in a directory of this user that is not
    group/other-writable; else :class:`_Refused`."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError as exc:
        raise _Refused(f"cannot open the {what} {path}: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _Refused(f"the {what} {path} is not a regular file")
        if st.st_uid != os.getuid():
            raise _Refused(f"the {what} {path} is not owned by this user")
        if st.st_mode & (0o077 if secret else 0o022):
            raise _Refused(f"the {what} {path} is {'accessible' if secret else 'writable'} by group or others "
                           f"(mode {stat.S_IMODE(st.st_mode):04o})")
        parent = os.stat(os.path.dirname(os.path.abspath(path)))
        if parent.st_uid != os.getuid() or parent.st_mode & 0o022:
            raise _Refused(f"the directory of the {what} {path} is not private to this user")
        if st.st_size > _MAX_HANDOFF_BYTES:
            raise _Refused(f"the {what} {path} is too large")
        with os.fdopen(os.dup(fd), "rb") as fh:
            return fh.read(_MAX_HANDOFF_BYTES + 1)
    finally:
        os.close(fd)


def _is_str_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _shape_problem(doc: Any) -> str:
    """What is wrong with the shape of a handoff document ("" when nothing)."""
    if not isinstance(doc, dict):
        return "it is not a JSON object"
    if doc.get("version") != HANDOFF_VERSION:
        return f"version {doc.get('version')!r}, expected {HANDOFF_VERSION}"
    if not isinstance(doc.get("digest"), str) or not isinstance(doc.get("topology"), str):
        return "no digest or topology"
    plan = doc.get("plan")
    if not isinstance(plan, dict):
        return "no plan"
    for key in ("deployment", "model", "served_model_name", "engine", "topology", "endpoint_url"):
        if not isinstance(plan.get(key), str):
            return f"plan.{key} is not a string"
    if plan["topology"] != doc["topology"]:
        return "plan.topology is not the handoff's topology"
    for key in ("worker_hosts", "router_hosts"):
        if not _is_str_list(plan.get(key)):
            return f"plan.{key} is not a list of host names"
    if "store_hosts" in plan and not _is_str_list(plan["store_hosts"]):
        return "plan.store_hosts is not a list of host names"
    for key in ("hosts", "checkpoint", "monitoring"):
        if key in plan and not isinstance(plan[key], dict):
            return f"plan.{key} is not a mapping"
    services = plan.get("services")
    if not isinstance(services, list) or not all(
            isinstance(svc, dict) and isinstance(svc.get("unit"), str) and isinstance(svc.get("host"), str)
            for svc in services):
        return "plan.services is not a list of services"
    needs = doc.get("precheck_needs")
    if needs is not None and not (isinstance(needs, dict) and all(isinstance(v, dict) for v in needs.values())):
        return "precheck_needs is not a mapping of host to needs"
    if doc.get("smoke_target") is not None and not isinstance(doc["smoke_target"], dict):
        return "smoke_target is not a mapping"
    alts = doc.get("alternatives", {})
    if not isinstance(alts, dict):
        return "alternatives is not a mapping"
    for top, alt in alts.items():
        if not isinstance(alt, dict) or alt.get("topology") != top:
            return f"alternatives.{top} is not a Plan of topology {top}"
        problem = _shape_problem({**alt, "version": doc["version"], "digest": doc["digest"]})
        if problem:
            return f"alternatives.{top}: {problem}"
    return ""


def _authenticated(path: str) -> dict[str, Any]:
    """The document of the handoff at ``path`` when it verifies (see the module docstring)."""
    key_path = os.environ.get(KEY_ENV)
    if not key_path:
        raise _Refused(f"no handoff key ({KEY_ENV} is not set: only glmops' own runs hand a Plan over)")
    try:
        key = bytes.fromhex(_read_private(key_path, "handoff key", secret=True).decode("ascii").strip())
    except (ValueError, UnicodeDecodeError):
        key = b""
    if len(key) < 16:
        raise _Refused(f"the handoff key {key_path} is not a key")
    data = _read_private(path, "handoff", secret=False)
    head, _, payload = data.partition(b"\n")
    if not head.startswith(_MAGIC) or not hmac.compare_digest(
            head[len(_MAGIC):], hmac.new(key, payload, hashlib.sha256).hexdigest().encode()):
        raise _Refused("its HMAC does not verify with this run's key (not written by this run)")
    try:
        doc = json.loads(payload)
    except ValueError:
        raise _Refused("it is not JSON") from None
    problem = _shape_problem(doc)
    if problem:
        raise _Refused(f"malformed: {problem}")
    return doc


def take_handoff(path: str | None, inventory: str, topology: str | None,
                 overrides: dict[str, Any] | None, extra_vars: dict[str, Any] | None = None,
                 say: Any = None) -> dict[str, Any] | None:
    """The handed ``{plan, precheck_needs, smoke_target}`` when ``path`` holds an authenticated
    handoff of this run (see the module docstring) planned from what ``inventory``,
    ``overrides`` and the run's ``-e`` values ``extra_vars`` (:func:`play_extra_vars`) are now
    (same :func:`inputs_digest`) for ``topology`` (None: the inventory's, which the digest
    covers; else the Plan's topology or one of its ``alternatives`` must be it); else None (the caller plans), after calling
    ``say`` (when given, and a ``path`` was) with one line saying why. Never raises for a bad
    handoff."""
    if not path:
        return None
    try:
        doc = _authenticated(str(path))
        if doc["digest"] != inputs_digest(inventory, overrides or None, extra_vars):
            raise _Refused("it was planned from other inputs (inventory, catalog, overrides or -e changed)")
        if topology and topology != doc["topology"]:
            if topology not in doc.get("alternatives", {}):
                raise _Refused(f"it was planned for topology {doc['topology']!r}, this run is {topology!r}")
            doc = doc["alternatives"][topology]
    except _Refused as exc:
        if say is not None:
            say(f"glmops: not using the plan handoff {path}: {exc}; planning here")
        return None
    warnings = doc.get("warnings") or []
    return {"plan": doc["plan"], "precheck_needs": doc.get("precheck_needs"), "smoke_target": doc.get("smoke_target"),
            "warnings": [str(w) for w in warnings] if isinstance(warnings, list) else []}
