"""Read an Ansible inventory into a :class:`~glmops.model.Deployment`.

Every variable is read through Ansible itself: the inventory is parsed by ``DataLoader`` +
``InventoryManager`` (after :func:`preflight` has checked the files: sizes, FIFOs, alias
bombs, duplicate keys), each host's variables come from ``VariableManager.get_vars`` (Ansible's
precedence, ``-e`` extra vars winning; one call per distinct set of groups for hosts without
``host_vars``), Jinja in a value is rendered by Ansible's ``Templar`` with the host's variables,
and Vault secrets are loaded as ``ansible-playbook`` loads them (``--vault-id``,
``--vault-password-file``, ``ANSIBLE_VAULT_*``, the operator's ansible.cfg:
``glmops.ansible_options``). Values read from Vault are secret by value
(``extra["secret_values"]``). Where a value came from is Ansible's origin tag: a
``group_vars``/``host_vars`` file, the inventory file's host or group entry, or ``-e``.

The variables (``VARIABLES``, ``POOL_KEYS``, ``ROUTER_KEYS``, ``CHECKPOINT_KEYS``,
``HOST_VARIABLES``) are defined in ``glmops.variables``, which also renders docs/variables.md.

Type and shape errors do not raise one by one: they are collected as
:class:`~glmops.model.Problem` in ``deployment.problems`` (the value falls back to
its default), and ``glmops.rules.check`` returns them with every other problem. Only an
inventory that cannot be read at all raises :class:`~glmops.model.ValidationError`.
"""
from __future__ import annotations

import difflib
import functools
import os
import re
from typing import Any, Callable

from glmops import strategies
from glmops.resources import data_root
from glmops.model import (
    CONTROL_CHARS,
    ENV_NAME,
    CheckpointSpec,
    Deployment,
    HostSpec,
    PoolSpec,
    Problem,
    RouterSpec,
    ValidationError,
    checkpoint_dir,
    clip,
    is_secret,
    set_in,
)

# The user-facing variables live in glmops.variables (one Var per variable, argument_specs shape).
from glmops.variables import (  # noqa: E402
    ADDRESS,
    CHECKPOINT_KEYS,
    HOST_VARIABLES,
    LAB_VARIABLES,
    MONITORING_KEYS,
    POOL_KEYS,
    RESERVED_ENV,
    ROUTER_KEYS,
    VARIABLES,
    Var,
    value_problem,
)

TOPOLOGY_KEYS = ("pools", "router")
# TensorRT-LLM names (seed 000) accepted for pool roles.
ROLE_ALIASES = {"context": "prefill", "generation": "decode"}
POOL_ROLES = ("agg", "prefill", "decode")
WORKERS_GROUP = "glmops_workers"
ROUTERS_GROUP = "glmops_routers"
#: run controls glmops' own verbs pass to the playbooks as extra vars (glmops.commands, glmops.runner):
#: not inventory variables, so never reported as unknown ones
RUN_VARIABLES = frozenset((
    "glmops_day2", "glmops_day2_hosts", "glmops_departed", "glmops_deployed_read", "glmops_fast",
    "glmops_generation_dir", "glmops_generation_record",
    "glmops_generation_source", "glmops_log_lines", "glmops_log_units", "glmops_overrides",
    "glmops_plan_handoff", "glmops_plan_summary", "glmops_provision", "glmops_provision_fatal", "glmops_provision_hosts",
    "glmops_prune", "glmops_purge_checkpoints", "glmops_record_hosts", "glmops_restart_steps", "glmops_restart_units",
    "glmops_run_choices",
    "glmops_step", "glmops_units",
))
# Variables whose value must be the same for every worker host.
_DEPLOYMENT_WIDE = tuple(VARIABLES)

# Ansible's type converters: the same leniency as argument_specs ("8" -> 8, "yes" -> True).
_CHECKERS: dict[str, Callable[[Any], Any]] | None = None


def play_inventory(task_vars: dict, or_inventory_dir: bool = False) -> str | None:
    """The inventory an Ansible play runs with (for action plugins): the first existing path
    among ``ansible_inventory_sources``; else, with ``or_inventory_dir``, the host's
    ``inventory_dir``; else None."""
    sources = task_vars.get("ansible_inventory_sources") or []
    if isinstance(sources, str):
        sources = [sources]
    found = next((s for s in sources if s and os.path.exists(s)), None)
    return found or ((task_vars.get("inventory_dir") or None) if or_inventory_dir else None)


def _checkers() -> dict[str, Callable[[Any], Any]]:
    global _CHECKERS
    if _CHECKERS is None:
        from ansible.module_utils.common import validation as v

        def _str(value: Any) -> str:
            if isinstance(value, (dict, list, bool)) or value is None:
                raise TypeError(f"{_type_name(value)} cannot be converted to a str")
            return str(value)

        def _int(value: Any) -> int:
            if isinstance(value, bool):
                raise TypeError("a bool is not an int")
            return v.check_type_int(value)

        def _dict(value: Any) -> dict:
            if not isinstance(value, dict):
                raise TypeError(f"{_type_name(value)} is not a mapping")
            return value

        def _list(value: Any) -> list:
            if isinstance(value, dict):
                raise TypeError("a dict is not a list")
            return v.check_type_list(value)

        _CHECKERS = {"str": _str, "int": _int, "bool": v.check_type_bool, "dict": _dict, "list": _list}
    return _CHECKERS


def _type_name(value: Any) -> str:
    """The plain YAML word for ``value``'s type (Ansible's tagged str/list/dict read as plain)."""
    for kind, word in ((bool, "bool"), (str, "str"), (int, "int"), (float, "float"), (dict, "mapping"),
                       (list, "list"), (type(None), "null")):
        if isinstance(value, kind):
            return word
    return type(value).__name__


_TYPE_WORDS = {"str": "a string", "int": "an integer", "bool": "a boolean", "dict": "a mapping", "list": "a list"}


def plain(value: Any) -> Any:
    """Return ``value`` with Ansible's tagged types (2.19 data tagging) turned into plain
    str/int/float/dict/list, recursively. Plain values pass through."""
    t = type(value)
    if t is str or t is int or t is bool or t is float or value is None:
        return value
    if isinstance(value, str):
        return str(value)
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, dict):
        return {plain(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [plain(v) for v in value]
    if type(value).__name__ == "EncryptedString":  # a !vault scalar: its plain text (secret by value)
        return str(value)
    return value




def shown(path: str, value: Any) -> str:
    """``repr(value)`` for a problem message, or a redaction when ``path`` names a secret or
    the value is one (``glmops.model.is_secret``: a URL with a password, a token, a value read
    from Ansible Vault)."""
    name = path.rsplit(":", 1)[-1]  # the variable path, not the file's (a directory may say "secret")
    return "<redacted>" if is_secret(name, value, _VAULTED) else clip(repr(value))


#: plain values of the Vault-encrypted variables read by the last load_deployment (secret by value)
_VAULTED: set[str] = set()


def _leaves(value: Any) -> Any:
    """Every leaf (not a dict, list or tuple) under ``value``; dict keys are not leaves."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
        else:
            yield item


def _vaulted(value: Any, found: set[str]) -> None:
    """Add the plain text of every Vault-encrypted leaf under ``value`` (``!vault`` scalars and
    values of vault-encrypted files, both tagged by ansible-core) to ``found``."""
    try:
        from ansible._internal._datatag._tags import VaultedValue  # ansible-core >= 2.19
        from ansible.parsing.vault import EncryptedString
    except ImportError:  # pragma: no cover - older ansible-core
        return
    for item in _leaves(value):
        if isinstance(item, EncryptedString) or VaultedValue.is_tagged_on(item):
            try:
                found.add(str(item))
            except Exception:  # noqa: BLE001 - no vault secret: a VAULT problem where it is read
                pass


def _check_text(value: Any, path: str, r: "_Reader") -> None:
    """Every string (and dict key) under ``value`` is one line of text: a newline or other
    control character would start a new directive in a unit or env file."""
    if isinstance(value, str):
        if CONTROL_CHARS.search(value):
            r.problem("CONTROL_CHAR", path,
                      f"value {shown(path, value)} contains a control character (newline, tab, NUL ...); "
                      "accepted: one line of printable text",
                      "a YAML '|' or '>' block adds a newline: use a plain or quoted scalar")
    elif isinstance(value, dict):
        for key, item in value.items():
            if isinstance(key, str) and CONTROL_CHARS.search(key):
                r.problem("CONTROL_CHAR", f"{path}.{key!r}",
                          f"key {key!r} contains a control character; accepted: one line of printable text")
            _check_text(item, f"{path}.{key}", r)
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            _check_text(item, f"{path}[{i}]", r)


def _display_path(path: str) -> str:
    """``path`` relative to the working directory when it lies below it, else absolute."""
    absolute = os.path.abspath(path)
    cwd = os.getcwd()
    if absolute == cwd:
        return "."
    if absolute.startswith(cwd + os.sep):
        return os.path.relpath(absolute, cwd)
    return absolute


class _Reader:
    """Collects problems and sources while turning raw values into typed ones."""

    def __init__(self) -> None:
        self.problems: list[Problem] = []
        self.sources: dict[str, str] = {}

    def problem(self, code: str, path: str, message: str, hint: str = "") -> None:
        self.problems.append(Problem(code, path, message, hint))

    def typed(self, value: Any, spec: Var, path: str) -> tuple[bool, Any]:
        """Convert ``value`` to the spec's type. Returns (ok, value or default)."""
        kind, default, elements = spec.type, spec.default, spec.elements
        if value is None:
            return True, default
        try:
            out = _checkers()[kind](value)
            if kind == "list" and elements:
                conv = _checkers()[elements]
                out = [conv(item) for item in out]
        except (TypeError, ValueError, OverflowError) as exc:
            want = _TYPE_WORDS[kind] + (f" of {elements}s" if kind == "list" and elements else "")
            self.problem(
                "TYPE",
                path,
                f"value {shown(path, value)} is {_type_name(value)}; accepted: {want}"
                + ("" if shown(path, value) == "<redacted>" else f" ({exc})"),
                f"fix the value's type {set_in(path)}",
            )
            return False, default
        out = plain(out)
        bad = value_problem(spec, out)
        if bad:
            code, accepted = bad
            name = path.rsplit(":", 1)[-1].rsplit(".", 1)[-1]
            self.problem(code, path, f"{name} {shown(path, value)} is not accepted; accepted: {accepted}",
                         f"fix the value {set_in(path)}")
            return False, default
        return True, out

    def unknown_keys(self, data: dict, accepted: Any, path_of: Callable[[str], str], what: str) -> None:
        for key in data:
            if key in accepted:
                continue
            close = difflib.get_close_matches(str(key), list(accepted), n=1)
            hint = f"did you mean {close[0]!r}?" if close else f"accepted {what}: {', '.join(sorted(accepted))}"
            self.problem(
                "UNKNOWN_KEY",
                path_of(key),
                f"unknown {what} {key!r}; accepted: {', '.join(sorted(accepted))}",
                hint,
            )


class _Vars:
    """Each host's variables as Ansible resolves them, with the file each came from.

    Values come from ``ansible.vars.manager.VariableManager.get_vars`` (Ansible's precedence:
    inventory and ``group_vars``/``host_vars`` by group depth and priority, extra vars ``-e``
    winning; no play, no facts, no hostvars), computed once per host; or, for an action plugin,
    from the play's own ``hostvars`` mapping (``hostvars``), which already carry ``-e`` and Vault.
    Jinja in a value is rendered with the host's variables by :meth:`resolve` (Ansible's
    ``Templar``); a ``!vault`` value is decrypted there too."""

    def __init__(self, inventory: Any, loader: Any, root: str, hostvars: Any = None) -> None:
        from glmops import ansible_options

        self.inventory, self.loader, self.root = inventory, loader, root
        self._cache: dict[str, dict] = {}
        self.template_seconds = 0.0  # spent rendering Jinja (bounded: TEMPLATE_TOTAL_SECONDS)
        if hostvars is None:
            from ansible.vars.manager import VariableManager

            from ansible import constants as C

            manager = VariableManager(loader=loader, inventory=inventory)
            # ansible-core caches the CLI's -e once per process: this verb's -e, parsed the same way
            #: -e name -> the FILE of the -e @FILE that set it (labels name it)
            self.extra_files: dict[str, str] = {}
            manager._extra_vars = self.extra = ansible_options.extra_vars(loader, files=self.extra_files)
            self._full = self._get = lambda host: manager.get_vars(host=host, include_hostvars=False)
            # Only the default vars plugin and no persistent facts: a host without host_vars files
            # differs from any other host of its groups by its inventory vars alone (see _shared)
            if list(C.VARIABLE_PLUGINS_ENABLED or ()) in (["ansible.builtin.host_group_vars"], ["host_group_vars"]) \
                    and C.CACHE_PLUGIN in ("memory", "ansible.builtin.memory"):
                self._get = self._shared
        else:
            self.extra, self.extra_files = {}, {}
            self._full = self._get = lambda host: hostvars[host.name]
        self._by_groups: dict[tuple, dict] = {}
        dirs = [s if os.path.isdir(s) else os.path.dirname(s) for s in inventory._sources if s and "," not in s]
        # hosts with a host_vars entry (file or directory, name without extension)
        self.host_var_names: set[str] = set()
        for d in dirs:
            hv = os.path.join(d, "host_vars")
            if os.path.isdir(hv):
                for entry in os.listdir(hv):
                    self.host_var_names.add(entry if os.path.isdir(os.path.join(hv, entry)) else os.path.splitext(entry)[0])

    def _shared(self, host: Any) -> dict:
        """``VariableManager.get_vars`` for ``host``, one call per distinct set of groups: the
        group-level answer (of a probe host in the same groups, without host vars) combined with
        the host's own inventory vars, then ``-e``, then its magic names, in get_vars' order
        (``ansible.utils.vars.combine_vars``, so ``hash_behaviour`` holds). Hosts with a
        ``host_vars`` entry get the full call."""
        if host.name in self.host_var_names:
            return self._full(host)
        from ansible.utils.vars import combine_vars

        groups = host.get_groups()
        signature = tuple(g.name for g in groups)
        base = self._by_groups.get(signature)
        if base is None:
            from ansible.inventory.host import Host

            probe = Host(name="glmops-probe-host-without-vars")
            probe.groups = list(groups)
            base = self._by_groups[signature] = self._full(probe)
        out = combine_vars(combine_vars(base, host.get_vars()), self.extra) if self.extra \
            else combine_vars(base, host.get_vars())
        return out

    def of(self, host: Any) -> dict:
        """``host``'s variables (a mapping, not rendered)."""
        found = self._cache.get(host.name)
        if found is None:
            found = self._cache[host.name] = self._get(host)
        return found

    def label(self, host: Any, key: str) -> str:
        """Where ``key``'s value for ``host`` comes from: ``-e:<key>``, ``-e @<file>:<key>`` (the file
        of ``-e @FILE``), ``<inventory file>:<host>.<key>``, ``<inventory file>:<group>.vars.<key>`` or
        ``<vars file>:<key>`` (Ansible's origin tag); :func:`glmops.model.set_in` reads it back."""
        if key in self.extra:
            path = self.extra_files.get(key)
            return f"-e @{_display_path(path)}:{key}" if path else f"-e:{key}"
        value = self.of(host).get(key)
        if key in host.vars and host.vars[key] is value:
            return f"{_display_path(host.vars.get('inventory_file') or self.root)}:{host.name}.{key}"
        path = _origin_path(value)
        for group in host.get_groups():
            if key in group.vars and group.vars[key] is value:
                return f"{_display_path(path) if path else self.root}:{group.name}.vars.{key}"
        return f"{_display_path(path) if path else self.root}:{key}"

    def resolve(self, host: Any, key: str, value: Any, where: str, r: "_Reader") -> Any:
        """``value`` with every ``!vault`` leaf decrypted and Jinja rendered with ``host``'s
        variables. A Vault value that no secret opens (VAULT) or a template that fails, e.g. an
        undefined variable (TEMPLATE), is a problem naming ``where``; the value is then None."""
        from ansible.errors import AnsibleError

        try:
            _decrypt_all(value)
        except AnsibleError as exc:
            r.problem("VAULT", where, f"the Vault value of {key} cannot be decrypted: {_first_line(exc)}; accepted: "
                      "a value encrypted with a secret given by --vault-id, --vault-password-file, "
                      "--ask-vault-pass or ANSIBLE_VAULT_PASSWORD_FILE",
                      "pass the Vault password the inventory was encrypted with")
            return None
        if not _has_template(value):
            return value
        from ansible.template import Templar

        budget = min(TEMPLATE_SECONDS, TEMPLATE_TOTAL_SECONDS - self.template_seconds)
        if budget <= 0:
            r.problem("TEMPLATE", where, f"the Jinja template in {key} was not rendered for host {host.name}: the "
                      f"inventory's templates already took {TEMPLATE_TOTAL_SECONDS:g} s; accepted: templates that "
                      "render at once", "write the values out instead of computing them")
            return None
        templar = Templar(loader=self.loader, variables=self._full(host))
        guard = _TemplateGuard(templar, budget)
        error: BaseException | None = None
        out: Any = None
        try:
            with guard:
                out = templar.template(value)
                big = _oversized(out)
        except (Exception, _TemplateTimeout) as exc:  # noqa: BLE001 - whatever a template raised: a problem
            error = exc
        finally:
            self.template_seconds += guard.elapsed
        if guard.lookups:
            # never evaluated (the guard refused the call), so no value of it can be shown
            used = ", ".join(dict.fromkeys(f"lookup({name!r})" for name in guard.lookups))
            r.problem("TEMPLATE", where, f"{key} uses {used}, and lookups are not evaluated by glmops (they would run "
                      "commands, read files or the environment on this machine while only reading the inventory); "
                      "accepted: a literal value, a Vault value, or Jinja over other variables",
                      "put the value itself (or a !vault value) in the inventory or pass it with -e")
            return None
        if guard.timed_out or isinstance(error, _TemplateTimeout):
            r.problem("TEMPLATE", where, f"the Jinja template in {key} took longer than {budget:g} s to render for "
                      f"host {host.name} and was stopped; accepted: a template that renders at once (at most "
                      f"{TEMPLATE_SECONDS:g} s)", "write the value out instead of computing it")
            return None
        if guard.refused or isinstance(error, MemoryError):
            r.problem("TEMPLATE", where, f"the Jinja template in {key} would build a value larger than "
                      f"{MAX_TEMPLATE_CHARS:,} characters (or items) for host {host.name}; accepted: at most "
                      f"{MAX_TEMPLATE_CHARS:,}", "write the value out instead of computing it")
            return None
        if error is not None:
            message = _first_line(error) if isinstance(error, AnsibleError) else f"{type(error).__name__}: {error}"
            r.problem("TEMPLATE", where, f"the Jinja template in {key} cannot be rendered for host {host.name}: "
                      f"{clip(message, 200)}; accepted: a template over defined variables, or plain text",
                      "define the variable it uses (inventory, group_vars, -e) or quote the text with {% raw %}")
            return None
        if big:
            r.problem("TEMPLATE", where, f"the Jinja template in {key} renders to {big:,} characters (or items) for "
                      f"host {host.name}; accepted: at most {MAX_TEMPLATE_CHARS:,}",
                      "write the value out instead of computing it")
            return None
        return out


#: seconds one value's Jinja may take on the controller, and all of one read's together
TEMPLATE_SECONDS = 2.0
TEMPLATE_TOTAL_SECONDS = 6.0
#: characters (or items) a rendered value, a ``range()`` or a ``*`` in a template may have
MAX_TEMPLATE_CHARS = 1_000_000
#: bits a ``**`` in a template may produce
_MAX_POW_BITS = 65_536


class _TemplateTimeout(BaseException):
    """Raised by the guard's timer in the middle of a template (not an Exception: Jinja and
    Ansible do not turn it into a value)."""


class _TemplateRefused(Exception):
    """A lookup or an over-sized ``range``/``*``/``**`` refused by :class:`_TemplateGuard`."""


class _TemplateGuard:
    """Controller-side templating for glmops' own read of the inventory, around one
    ``Templar.template`` call:

    * no lookup runs: ansible-core 2.19 evaluates ``lookup()``/``query()``/``q()`` (also inside
      other variables a template uses) through ``_jinja_plugins._invoke_lookup``, which is
      replaced by a refusal for the call (the ``disable_lookups`` argument of ``template`` is a
      deprecated no-op there); every refused name is in :attr:`lookups`;
    * ``range()``, ``*`` and ``**`` are bounded on the template's environment (Jinja's sandbox
      hooks: the ``range`` global, ``intercepted_binops`` + ``call_binop``); a refusal sets
      :attr:`refused`;
    * in the main thread, a timer (``signal.setitimer``) stops the template after ``budget``
      seconds (:attr:`timed_out`).
    """

    def __init__(self, templar: Any, budget: float) -> None:
        self.templar, self.budget = templar, budget
        self.lookups: list[str] = []
        self.refused = self.timed_out = False
        self.elapsed = 0.0
        self._undo: list[Callable[[], None]] = []

    def _refuse_lookup(self, *, plugin_name: str, lookup_terms: Any = None, lookup_kwargs: Any = None,
                       invoked_as_with: bool = False) -> Any:
        self.lookups.append(str(plugin_name))
        raise _TemplateRefused(f"lookup({plugin_name!r}) is not evaluated by glmops")

    def _range(self, *args: Any) -> range:
        rng = range(*args)
        if len(rng) > MAX_TEMPLATE_CHARS:
            self.refused = True
            raise _TemplateRefused(f"range() of {len(rng):,} items")
        return rng

    def _binop(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def call_binop(context: Any, operator: str, left: Any, right: Any) -> Any:
            if operator == "*":
                for seq, n in ((left, right), (right, left)):
                    if isinstance(seq, (str, bytes, list, tuple)) and isinstance(n, int) \
                            and len(seq) * n > MAX_TEMPLATE_CHARS:
                        self.refused = True
                        raise _TemplateRefused("a repetition too large")
            elif operator == "**" and isinstance(left, int) and isinstance(right, int) and right > 0 \
                    and abs(left) > 1 and left.bit_length() * right > _MAX_POW_BITS:
                self.refused = True
                raise _TemplateRefused("a power too large")
            return original(context, operator, left, right)

        return call_binop

    def _on_alarm(self, signum: int, frame: Any) -> None:
        self.timed_out = True
        raise _TemplateTimeout()

    def __enter__(self) -> "_TemplateGuard":
        import signal
        import threading
        import time

        self._start = time.monotonic()
        try:
            from ansible._internal._templating import _jinja_plugins  # ansible-core >= 2.19

            original = _jinja_plugins._invoke_lookup
            _jinja_plugins._invoke_lookup = self._refuse_lookup
            self._undo.append(lambda: setattr(_jinja_plugins, "_invoke_lookup", original))
        except (ImportError, AttributeError):  # pragma: no cover - another ansible-core: no lookup is allowed
            raise RuntimeError("glmops cannot disable Jinja lookups with this ansible-core") from None
        try:
            env = self.templar._engine.environment
            env.globals["range"] = self._range
            env.intercepted_binops = frozenset(env.intercepted_binops) | {"*", "**"}
            env.call_binop = self._binop(type(env).call_binop.__get__(env))
        except AttributeError:  # pragma: no cover - the timer still bounds the time
            pass
        if threading.current_thread() is threading.main_thread() and hasattr(signal, "setitimer"):
            previous = signal.signal(signal.SIGALRM, self._on_alarm)
            signal.setitimer(signal.ITIMER_REAL, max(self.budget, 0.01))

            def stop() -> None:
                signal.setitimer(signal.ITIMER_REAL, 0)
                signal.signal(signal.SIGALRM, previous)

            self._undo.append(stop)
        return self

    def __exit__(self, *exc: Any) -> None:
        import time

        while self._undo:
            self._undo.pop()()
        self.elapsed = time.monotonic() - self._start


def _oversized(value: Any) -> int:
    """The size of the largest string or list under ``value`` when over MAX_TEMPLATE_CHARS, else 0."""
    for item in [value, *_leaves(value)] if isinstance(value, (dict, list, tuple)) else [value]:
        try:
            size = len(item) if isinstance(item, (str, bytes, list, tuple, dict)) else 0
        except Exception:  # noqa: BLE001
            size = 0
        if size > MAX_TEMPLATE_CHARS:
            return size
    return 0


def _error_file(exc: BaseException) -> str | None:
    """The file an Ansible error is about (the Origin tag of its ``obj``, along the cause chain)."""
    seen = 0
    item: BaseException | None = exc
    while item is not None and seen < 10:
        obj = getattr(item, "obj", None)
        if obj is not None and _origin_path(obj):
            return _origin_path(obj)
        item, seen = item.__cause__ or item.__context__, seen + 1
    return None


def _first_line(exc: BaseException) -> str:
    text = str(getattr(exc, "message", "") or exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def _origin_path(value: Any) -> str | None:
    """The file ``value`` was read from (ansible-core's Origin tag), or None."""
    try:
        from ansible._internal._datatag._tags import Origin  # ansible-core >= 2.19

        origin = Origin.get_tag(value)
        return origin.path if origin and origin.path else None
    except Exception:  # pragma: no cover - older ansible-core or untagged values
        return None


def _has_template(value: Any) -> bool:
    """Whether a string under ``value`` holds Jinja (``{{``, ``{%``, ``{#``)."""
    return any(isinstance(item, str) and ("{{" in item or "{%" in item or "{#" in item) for item in _leaves(value))


def _decrypt_all(value: Any) -> None:
    """Decrypt every ``!vault`` leaf under ``value`` (raises AnsibleError when one cannot be)."""
    try:
        from ansible.parsing.vault import EncryptedString
    except ImportError:  # pragma: no cover - older ansible-core
        return
    for item in _leaves(value):
        if isinstance(item, EncryptedString):
            str(item)


def _capture_parse_errors(inventory_mod: Any) -> tuple[list[str], Callable[[], None]]:
    """Collect Ansible's inventory parse warnings/errors instead of printing them."""
    messages: list[str] = []
    display = inventory_mod.display
    saved = {name: getattr(display, name) for name in ("warning", "error_as_warning")}

    def warning(msg: str, *args: Any, **kwargs: Any) -> None:
        messages.append(str(msg))

    def error_as_warning(msg: str | None = None, exception: BaseException | None = None, *args: Any, **kwargs: Any) -> None:
        messages.append(f"{msg or ''} {exception or ''}".strip())

    display.warning = warning  # type: ignore[method-assign]
    display.error_as_warning = error_as_warning  # type: ignore[method-assign]

    def restore() -> None:
        for name, fn in saved.items():
            setattr(display, name, fn)

    return messages, restore


#: limits of an inventory read before Ansible sees it (a hostile or broken inventory must not
#: hang or exhaust the controller): bytes per file, files, YAML nodes after alias expansion,
#: hosts a range pattern (``n[0:99]``) may expand to
MAX_FILE_BYTES = 4 * 1024 * 1024
MAX_FILES = 10_000
MAX_YAML_NODES = 200_000
MAX_RANGE_HOSTS = 10_000
_YAML_EXT = (".yml", ".yaml", ".json")
#: Ansible's host range pattern: [start:end] or [start:end:step], numeric or alphabetic
_HOST_RANGE = re.compile(r"\[([0-9]+|[a-zA-Z]):([0-9]+|[a-zA-Z])(?::([0-9]+))?\]")


def _inventory_files(inventory_path: str, where: str) -> list[tuple[str, bool]]:
    """Every file Ansible would read for ``inventory_path``: ``(path, is an inventory source)``.
    Raises ValidationError for a path that is not a regular file or directory (a FIFO would
    block the read forever), or for more than MAX_FILES files."""
    out: list[tuple[str, bool]] = []
    problems: list[Problem] = []

    def regular(path: str) -> bool:
        import stat

        try:
            mode = os.stat(path).st_mode
        except OSError as exc:
            problems.append(Problem("INVENTORY", _display_path(path), f"cannot read {_display_path(path)!r}: {exc.strerror}"))
            return False
        if stat.S_ISDIR(mode) or stat.S_ISREG(mode):
            return True
        problems.append(Problem("INVENTORY", _display_path(path),
                                f"{_display_path(path)!r} is not a regular file or directory (a FIFO, socket or device); "
                                "accepted: inventory files and directories only", "remove it from the inventory"))
        return False

    def walk(directory: str, source: bool, depth: int) -> None:
        for entry in sorted(os.listdir(directory)):
            if entry.startswith(".") or len(out) > MAX_FILES:
                continue
            path = os.path.join(directory, entry)
            if not regular(path):
                continue
            if os.path.isdir(path):
                if depth < 4 and (not source or entry in ("group_vars", "host_vars")):
                    walk(path, False, depth + 1)
                elif source and depth < 4:
                    walk(path, True, depth + 1)
            else:
                out.append((path, source))

    if not regular(inventory_path):
        raise ValidationError(problems)
    if os.path.isdir(inventory_path):
        walk(inventory_path, True, 0)
    else:
        out.append((inventory_path, True))
        for kind in ("group_vars", "host_vars"):
            side = os.path.join(os.path.dirname(os.path.abspath(inventory_path)), kind)
            if os.path.isdir(side) and regular(side):
                walk(side, False, 1)
    if len(out) > MAX_FILES:
        problems.append(Problem("INVENTORY", where, f"the inventory has more than {MAX_FILES:,} files; accepted: fewer"))
    if problems:
        raise ValidationError(problems)
    return out


def _yaml_nodes(node: Any, memo: dict[int, int]) -> int:
    """Nodes of a composed YAML tree with every alias expanded (memoised per node, so an alias
    bomb is measured in linear time)."""
    import yaml

    key = id(node)
    if key in memo:
        return memo[key]
    memo[key] = 1  # a cycle (recursive alias) counts once; Ansible refuses it itself
    if isinstance(node, yaml.SequenceNode):
        total = 1 + sum(_yaml_nodes(n, memo) for n in node.value)
    elif isinstance(node, yaml.MappingNode):
        total = 1 + sum(_yaml_nodes(k, memo) + _yaml_nodes(v, memo) for k, v in node.value)
    else:
        total = 1
    memo[key] = min(total, MAX_YAML_NODES + 1)
    return memo[key]


def _duplicate_keys(docs: list[Any]) -> list[tuple[str, int]]:
    """(key, line) of every key repeated in one YAML mapping (Ansible would warn, quoting the
    file's lines, and keep the last value)."""
    import yaml

    found: list[tuple[str, int]] = []
    stack, seen = list(docs), set()
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            keys: set[str] = set()
            for k, v in node.value:
                if isinstance(k, yaml.ScalarNode):
                    if k.value in keys and k.value != "<<":
                        found.append((k.value, k.start_mark.line + 1))
                    keys.add(k.value)
                stack.append(v)
        elif isinstance(node, yaml.SequenceNode):
            stack.extend(node.value)
    return sorted(found, key=lambda kv: kv[1])


def _range_hosts(pattern: str) -> int:
    """How many hosts Ansible's range pattern ``pattern`` expands to (1 without a range)."""
    total = 1
    for start, end, step in _HOST_RANGE.findall(pattern):
        if start.isdigit() and end.isdigit():
            count = (int(end) - int(start)) // int(step or 1) + 1
        else:
            count = (ord(end) - ord(start)) // int(step or 1) + 1
        total *= max(count, 1)
        if total > MAX_RANGE_HOSTS:
            break
    return total


def _host_patterns(node: Any) -> list[Any]:
    """Scalar keys of every ``hosts:`` mapping in a composed YAML inventory."""
    import yaml

    found: list[Any] = []
    stack, seen = [node], set()
    while stack:
        item = stack.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        if isinstance(item, yaml.MappingNode):
            for k, v in item.value:
                if isinstance(k, yaml.ScalarNode) and k.value == "hosts" and isinstance(v, yaml.MappingNode):
                    found += [hk for hk, _ in v.value if isinstance(hk, yaml.ScalarNode)]
                stack.append(v)
        elif isinstance(item, yaml.SequenceNode):
            stack.extend(item.value)
    return found


def preflight(inventory_path: str) -> None:
    """Check the files of an inventory before Ansible reads them: regular files only, at most
    MAX_FILE_BYTES each, YAML that parses (a syntax error names file, line and column),
    at most MAX_YAML_NODES nodes after alias expansion (alias bombs), host range patterns
    expanding to at most MAX_RANGE_HOSTS hosts. Raises ValidationError with every problem
    (code INVENTORY), one per file."""
    import yaml

    where = _display_path(inventory_path)
    problems: list[Problem] = []
    files = _inventory_files(inventory_path, where)
    if not any(source for _path, source in files):
        raise ValidationError([Problem("INVENTORY", where, f"the inventory {where!r} has no inventory file, so it "
                                       "defines no hosts", f"add hosts.yml with hosts in group {WORKERS_GROUP}")])
    for path, source in files:
        shown_path = _display_path(path)
        size = os.path.getsize(path)
        if size > MAX_FILE_BYTES:
            problems.append(Problem("INVENTORY", shown_path, f"{shown_path} has {size:,} bytes; accepted: at most "
                                    f"{MAX_FILE_BYTES:,} bytes per inventory file"))
            continue
        yamlish = path.endswith(_YAML_EXT) or not source
        if not yamlish and not source:
            continue
        with open(path, "rb") as fh:
            text = fh.read().decode("utf-8", errors="replace")
        if not yamlish or text.lstrip().startswith("$ANSIBLE_VAULT"):
            if source:  # an INI inventory: its host patterns are the first word of a line
                for line in text.splitlines():
                    word = line.strip().split(" ")[0] if line.strip() else ""
                    if word and not word.startswith(("[", "#", ";")) and _range_hosts(word) > MAX_RANGE_HOSTS:
                        problems.append(Problem("INVENTORY", shown_path, f"host pattern {word[:80]!r} expands to more "
                                                f"than {MAX_RANGE_HOSTS:,} hosts; accepted: at most {MAX_RANGE_HOSTS:,}"))
                        break
            continue
        try:
            docs = list(yaml.compose_all(text, Loader=yaml.SafeLoader))
        except yaml.MarkedYAMLError as exc:
            mark = exc.problem_mark or exc.context_mark
            at = f"{shown_path}:{mark.line + 1}:{mark.column + 1}" if mark else shown_path
            problems.append(Problem("INVENTORY", at, f"YAML parsing failed: {exc.problem or exc.context}"
                                    + (f" ({exc.context})" if exc.context and exc.problem else ""),
                                    "fix the YAML at that line"))
            continue
        except yaml.YAMLError as exc:
            problems.append(Problem("INVENTORY", shown_path, f"YAML parsing failed: {str(exc).splitlines()[0]}"))
            continue
        memo: dict[int, int] = {}
        if sum(_yaml_nodes(d, memo) for d in docs if d is not None) > MAX_YAML_NODES:
            problems.append(Problem("INVENTORY", shown_path,
                                    f"{shown_path} expands to more than {MAX_YAML_NODES:,} YAML nodes (aliases * "
                                    f"expanded); accepted: at most {MAX_YAML_NODES:,}",
                                    "a YAML alias bomb? write the values out"))
            continue
        for key, line in _duplicate_keys(docs):
            problems.append(Problem("INVENTORY", f"{shown_path}:{line}",
                                    f"key {key[:80]!r} appears twice in one mapping; accepted: each key once",
                                    "Ansible would keep only the last value: remove one"))
        if source:
            for key in (k for d in docs if d is not None for k in _host_patterns(d)):
                if _range_hosts(str(key.value)) > MAX_RANGE_HOSTS:
                    problems.append(Problem("INVENTORY", f"{shown_path}:{key.start_mark.line + 1}",
                                            f"host pattern {str(key.value)[:80]!r} expands to more than "
                                            f"{MAX_RANGE_HOSTS:,} hosts; accepted: at most {MAX_RANGE_HOSTS:,}"))
    if problems:
        raise ValidationError(problems)


def _vault_secrets(loader: Any) -> None:
    """Give ``loader`` (and ansible-core's VaultSecretsContext) the Vault secrets
    ansible-playbook would have: this verb's ``--vault-id`` / ``--vault-password-file``
    (``glmops.ansible_options.current()``) and the configuration's (``ANSIBLE_VAULT_PASSWORD_FILE``,
    ``ANSIBLE_VAULT_IDENTITY_LIST``, ansible.cfg), never prompting; without any, Vault values
    stay encrypted and reading one is a VAULT problem. A password file that is missing or
    unreadable raises ValidationError (VAULT, naming it)."""
    from ansible.errors import AnsibleError

    from glmops import ansible_options

    try:
        ansible_options.vault_secrets(loader)
    except AnsibleError as exc:
        raise ValidationError([Problem("VAULT", "--vault-password-file", f"cannot load the Vault secret: {_first_line(exc)}; "
                                       "accepted: a readable password file, an executable client script, or LABEL@prompt",
                                       "check the path given to --vault-id / --vault-password-file / "
                                       "ANSIBLE_VAULT_PASSWORD_FILE")]) from None


#: the playbooks' directory: the DataLoader's base directory (playbook-adjacent group_vars/host_vars)
_PLAYBOOKS = str(data_root() / "playbooks")  # the checkout's, else the installed copy's


def _parse(inventory_path: str) -> tuple[Any, Any]:
    """Parse with Ansible; raise ValidationError when nothing usable comes out."""
    where = _display_path(inventory_path)
    if not os.path.lexists(inventory_path):
        raise ValidationError([Problem("INVENTORY", where, f"inventory path {where!r} does not exist",
                                       "pass -i with an inventory directory or file")])
    preflight(inventory_path)
    from ansible.inventory import manager as inventory_mod
    from ansible.parsing.dataloader import DataLoader

    loader = DataLoader()
    # group_vars/ beside the playbooks, as ansible-playbook reads them, never the working directory's
    loader.set_basedir(_PLAYBOOKS)
    _vault_secrets(loader)
    messages, restore = _capture_parse_errors(inventory_mod)
    try:
        inventory = inventory_mod.InventoryManager(loader=loader, sources=[os.path.abspath(inventory_path)])
    except Exception as exc:  # AnsibleError and friends
        raise ValidationError([Problem("INVENTORY", where, f"cannot parse the inventory: {exc}")]) from None
    finally:
        restore()
    failures = [m for m in messages if "parse" in m.lower()]
    if failures:
        raise ValidationError([Problem("INVENTORY", where, msg, "fix the inventory file's syntax") for msg in failures])
    for msg in messages:  # other warnings (e.g. group names) are Ansible's to show
        inventory_mod.display.warning(msg)
    if not inventory.hosts:
        raise ValidationError([Problem("INVENTORY", where, "the inventory defines no hosts",
                                       f"add hosts (group {WORKERS_GROUP}) to hosts.yml")])
    _check_vault_files(inventory_path, where, loader)  # every file no secret opens, before any read of them
    return inventory, loader


def defines(inventory_path: str, name: str) -> bool:
    """True when any host of the inventory sets the variable ``name`` (read with Ansible's own
    API, with the run's Vault secrets). Raises ValidationError (exit 2) for an inventory that
    cannot be read, naming each Vault file no secret opens."""
    from ansible.errors import AnsibleError
    from ansible.vars.manager import VariableManager

    path = str(inventory_path)
    inventory, loader = _parse(path)
    variables = VariableManager(loader=loader, inventory=inventory)
    try:
        return any(name in variables.get_vars(host=h) for h in inventory.get_hosts())
    except AnsibleError as exc:
        raise ValidationError([Problem("INVENTORY", _display_path(path),
                                       f"cannot read the inventory's variables: {_first_line(exc)}")]) from None


def _check_vault_files(inventory_path: str, where: str, loader: Any) -> None:
    """Raise ValidationError (code VAULT, one problem per file, all at once) for each
    Vault-encrypted file of the inventory that the run's secrets (``loader``'s:
    ``--vault-id``/``--vault-password-file``/``ANSIBLE_VAULT_*``) cannot decrypt, so a run fails
    before ansible-playbook reads the inventory (which would stop with its bare "Decryption
    failed", naming no file)."""
    from ansible.errors import AnsibleError

    problems = []
    for file, _source in _inventory_files(inventory_path, where):
        try:
            with open(file, "rb") as fh:
                encrypted = fh.read(64).lstrip().startswith(b"$ANSIBLE_VAULT")
            if encrypted:
                loader.load_from_file(os.path.abspath(file), cache="none")
        except AnsibleError as exc:
            shown = _display_path(file)
            chain, cause = [], exc
            while cause is not None and len(chain) < 5:
                chain.append(_first_line(cause))
                cause = cause.__cause__ or cause.__context__
            why = next((line for line in chain if "crypt" in line.lower() or "vault" in line.lower()), chain[0])
            problems.append(Problem(
                "VAULT", shown, f"cannot decrypt this file: {why}; accepted: files encrypted with a "
                "secret given by --vault-id, --vault-password-file, --ask-vault-pass or ANSIBLE_VAULT_PASSWORD_FILE",
                "pass the Vault password the file was encrypted with"))
        except OSError:
            continue  # unreadable files are preflight's to report
    if problems:
        raise ValidationError(problems)


def check_run_target(inventory_path: str | os.PathLike[str], limit: str | None) -> list[str]:
    """What a run against ``inventory_path`` with Ansible's ``--limit`` ``limit`` would reach:
    the host names. Raises ValidationError (the CLI exits 2, nothing contacted) for an
    inventory that cannot be read or has no hosts, Vault-encrypted files of it that the run's
    secrets cannot decrypt (:func:`_check_vault_files`, via :func:`_parse`), an empty ``limit`` (``''`` would mean every
    host), a plain host or group name in ``limit`` that the inventory does not have, or a limit
    that matches no host."""
    path = str(inventory_path)
    where = _display_path(path)
    inventory, _loader = _parse(path)
    names = list(inventory.hosts)
    if limit is None:
        return names
    accepted = f"host or group names of the inventory ({', '.join(names[:20])}{', ...' if len(names) > 20 else ''})"
    parts = [p.strip() for p in str(limit).replace(":", ",").split(",")]
    if not str(limit).strip() or not any(parts):
        raise ValidationError([Problem("LIMIT", "--limit", f"--limit {limit!r} names no host (an empty limit would "
                                       f"mean every host); accepted: {accepted}", "leave --limit out to run on every host")])
    problems = []
    for part in parts:
        if part.startswith("@") and not os.path.isfile(part[1:]):
            problems.append(Problem("LIMIT", "--limit", f"--limit {part!r}: no file {part[1:]!r} to read host names "
                                    f"from; accepted: @<file of host names>, or {accepted}"))
            continue
        plain_name = part.lstrip("!&")
        if not plain_name or any(c in plain_name for c in "*?[~@"):
            continue  # patterns, regexes and @files are Ansible's to match
        if plain_name not in inventory.hosts and plain_name not in inventory.groups and plain_name != "localhost":
            close = difflib.get_close_matches(plain_name, names + list(inventory.groups), n=1)
            problems.append(Problem("LIMIT", "--limit", f"--limit names {plain_name!r}, which is neither a host nor a "
                                    f"group of {where}; accepted: {accepted}",
                                    f"did you mean {close[0]!r}?" if close else ""))
    if problems:
        raise ValidationError(problems)
    inventory.subset(str(limit))
    if not inventory.get_hosts():
        raise ValidationError([Problem("LIMIT", "--limit", f"--limit {limit!r} matches no host of {where}; "
                                       f"accepted: {accepted}")])
    return [h.name for h in inventory.get_hosts()]


def load_deployment(
    inventory_path: str | os.PathLike[str],
    topology: str | None = None,
    overrides: dict[str, Any] | None = None,
) -> Deployment:
    """Read the inventory at ``inventory_path`` (a directory with hosts.yml + group_vars/ +
    host_vars/, or one inventory file) into a Deployment.

    Every variable is read through Ansible: ``VariableManager`` for precedence (this verb's
    ``-e`` extra vars, ``glmops.ansible_options.current()``, win), Vault secrets from
    ``--vault-id``/``--vault-password-file``/``ANSIBLE_VAULT_*``/ansible.cfg, Jinja rendered
    with the host's variables. Values read from Vault are secret by value
    (``extra["secret_values"]``).

    ``topology`` (``agg``/``disagg``) overrides ``glmops_topology``. ``overrides`` maps variable
    names (``glmops_`` prefix optional) to values that win over the inventory, like ``-e``.

    Returns the Deployment; its ``sources`` map keys (``model``, ``kv_cache_dtype``,
    ``pools.prefill.tp``, ``pools.prefill.env.NAME``, ``hosts.gpu-a.gpus``, ``checkpoint.revision``,
    ``router.port`` ...) to ``<file>:<variable path>`` (``-e:<variable>`` for extra vars,
    ``-e @<file>:<variable>`` for those of an ``-e @FILE``);
    ``extra["problems"]`` holds the type/shape problems found while reading, including a Vault
    value no secret opens (VAULT) and a template that cannot be rendered (TEMPLATE).
    Catalog-key and cross-field checks are ``glmops.rules``'.

    Raises ValidationError only when the inventory cannot be parsed (including a YAML error in
    group_vars/host_vars, reported as code ``INVENTORY`` with Ansible's message; an encrypted
    vars file no secret opens, code ``VAULT``) or has no hosts.
    """
    return _guarded(inventory_path, topology, overrides, None)


def deployment_from_hostvars(
    inventory_path: str | os.PathLike[str],
    hostvars: Any,
    topology: str | None = None,
    overrides: dict[str, Any] | None = None,
) -> Deployment:
    """As :func:`load_deployment`, but every host's variables come from ``hostvars``, a
    ``{host name: {variable: value}}`` mapping such as an action plugin's
    ``task_vars["hostvars"]`` (which already carries the play's ``-e`` and Vault secrets).
    The inventory at ``inventory_path`` still gives the hosts and groups. Same returns and
    errors as :func:`load_deployment`."""
    return _guarded(inventory_path, topology, overrides, hostvars)


def _guarded(inventory_path: Any, topology: str | None, overrides: dict[str, Any] | None, hostvars: Any) -> Deployment:
    from ansible.errors import AnsibleError

    try:
        return _load_deployment(inventory_path, topology, overrides, hostvars)
    except AnsibleError as exc:
        first = _first_line(exc)
        if "decrypt" in first.lower() or "vault" in first.lower():
            where = _error_file(exc)
            raise ValidationError([Problem(
                "VAULT", _display_path(where or str(inventory_path)),
                f"cannot decrypt {'this file' if where else chr(39).join(('the inventory', 's variables'))}: "
                f"{first}; accepted: files encrypted with a secret given "
                "by --vault-id, --vault-password-file, --ask-vault-pass or ANSIBLE_VAULT_PASSWORD_FILE",
                "pass the Vault password the file was encrypted with")]) from None
        raise ValidationError([Problem(
            "INVENTORY", _display_path(str(inventory_path)),
            f"cannot read the inventory's variables: {first}",
            "fix the YAML of group_vars/ and host_vars/ files (each must be a mapping)")]) from None


class _Load:
    """What the steps of :func:`_load_deployment` share: the parsed inventory (``inventory``,
    ``vars_of``), the reader that collects problems and sources (``r``), the hosts by role
    (``all_hosts``, ``workers``, ``first`` worker, ``routers`` names), and what the earlier steps
    found: the resolved (``raw``) and typed (``v``) variables, ``secret_values``, the catalog
    entries they name, the topology and the catalog ``layout`` used, if any."""

    model_key: str
    variant_key: str
    variant: dict
    drafters: dict
    engine_key: str
    engine: dict
    hardware_key: str
    hardware: dict
    topo: str
    inv_dir: str

    def __init__(self, path: str, hostvars: Any) -> None:
        from glmops import catalog as catalog_mod

        self.cat = catalog_mod.load()
        self.path = path
        self.inventory, loader = _parse(path)
        self.root = _display_path(path)
        self.vars_of = _Vars(self.inventory, loader, self.root, hostvars)
        self.r = _Reader()
        self.all_hosts = list(self.inventory.hosts.values())  # inventory order
        workers_group = self.inventory.groups.get(WORKERS_GROUP)
        worker_names = {h.name for h in workers_group.get_hosts()} if workers_group else set()
        self.workers = [h for h in self.all_hosts if h.name in worker_names] or self.all_hosts
        routers_group = self.inventory.groups.get(ROUTERS_GROUP)
        self.routers: list[str] = [h.name for h in routers_group.get_hosts()] if routers_group else []
        self.first = self.workers[0]
        _check_groups(self.inventory, self.r, self.root, len(self.all_hosts))
        self.raw: dict[str, Any] = {}
        self.v: dict[str, Any] = {}
        self.secret_values: set[str] = set()
        self.layout: dict | None = None
        self.strategy = ""
        self.strategy_entry: dict = {}
        self.nodes: int | None = None

    def src(self, name: str) -> str:
        """Where variable ``name`` was read (``group_vars/all.yml`` when it was not set)."""
        return self.r.sources.get(name, f"{self.root}/group_vars/all.yml:{name}")


def _load_deployment(
    inventory_path: str | os.PathLike[str],
    topology: str | None = None,
    overrides: dict[str, Any] | None = None,
    hostvars: Any = None,
) -> Deployment:
    """The body of :func:`load_deployment` and :func:`deployment_from_hostvars` (same arguments,
    returns and errors): one step per part of the Deployment over one :class:`_Load`, in the
    order their problems are reported."""
    s = _Load(str(inventory_path), hostvars)
    _read_variables(s, overrides or {})
    _catalog_entries(s, topology)
    hosts = _read_hosts(s)
    pools_raw, router_raw, pools_base, router_base = _topology(s, hosts)
    pools = _read_pools(s, pools_raw, pools_base)
    router = _read_router(s, router_raw, router_base, hosts)
    checkpoint = _read_checkpoint(s)
    monitoring = _read_monitoring(s, router.host, hosts)
    return _assemble(s, hosts, pools, router, checkpoint, monitoring)


def _read_variables(s: _Load, overrides: dict[str, Any]) -> None:
    """Deployment-wide variables: the first worker's view (``overrides`` winning, then ``-e``),
    checked equal on every worker. Sets ``s.raw`` (resolved values), ``s.v`` (typed, the default
    where unset or wrong), ``s.secret_values`` and the module's ``_VAULTED``."""
    r, vars_of, first = s.r, s.vars_of, s.first
    first_vars = vars_of.of(first)
    _vaulted({k: val for k, val in first_vars.items() if k not in ("groups", "hostvars")}, s.secret_values)
    for key in first_vars:
        if isinstance(key, str) and key.startswith("glmops_") and key not in HOST_VARIABLES \
                and key not in RUN_VARIABLES and key not in LAB_VARIABLES:
            r.sources[key] = vars_of.label(first, key)
            s.raw[key] = vars_of.resolve(first, key, first_vars[key], r.sources[key], r)
    for key, value in overrides.items():
        name = key if key.startswith("glmops_") else f"glmops_{key}"
        s.raw[name] = value
        r.sources[name] = f"--set {name.removeprefix('glmops_')}"  # the only way in: `glmops upgrade --set KEY=VALUE`

    _vaulted(s.raw, s.secret_values)
    _VAULTED.clear()
    _VAULTED.update(s.secret_values)

    r.unknown_keys(s.raw, VARIABLES, s.src, "variable")
    _near_misses(first, vars_of, r)
    _role_variables(first, vars_of, r)
    for key, value in s.raw.items():
        _check_text(value, s.src(key), r)
    _check_same_on_workers(s.workers, vars_of, r, overrides)

    for name, spec in VARIABLES.items():
        s.v[name] = r.typed(s.raw.get(name), spec, s.src(name))[1]


def _catalog_entries(s: _Load, topology: str | None) -> None:
    """The catalog entries the variables name (an empty mapping for an unknown key: rules.py
    reports those, and defaults come only from known ones) and the topology (``topology``,
    the CLI's ``--topology``, wins over ``glmops_topology``)."""
    v, cat = s.v, s.cat
    s.inv_dir = s.path if os.path.isdir(s.path) else os.path.dirname(os.path.abspath(s.path))
    s.model_key = v["glmops_model"] or ""
    model = cat.models.get(s.model_key) or {}
    s.variant_key = v["glmops_variant"] or model.get("default_variant") or ""
    s.variant = (model.get("variants") or {}).get(s.variant_key) or {}
    s.drafters = model.get("drafters") or {}
    s.engine_key = v["glmops_engine"] or ""
    s.engine = cat.engines.get(s.engine_key) or {}
    s.hardware_key = v["glmops_hardware"] or ""
    s.hardware = cat.hardware.get(s.hardware_key) or {}
    s.strategy = v["glmops_strategy"] or ""
    s.strategy_entry = cat.strategies.get(s.strategy) or {}
    # the topology the inventory or the CLI names; else the strategy's (seed 004: pd_cluster = disagg)
    s.topo_named = topology or (v["glmops_topology"] if s.raw.get("glmops_topology") is not None else "")
    s.topo = s.topo_named or s.strategy_entry.get("topology") or v["glmops_topology"] or "agg"
    if s.strategy and not s.strategy_entry:
        s.r.problem("CHOICE", s.src("glmops_strategy"),
                    f"glmops_strategy {s.strategy!r} is not accepted; accepted: {', '.join(cat.strategies)}",
                    "seeds/004_1623a49a49212f9f.txt line 18 lists the strategies")
    if topology:
        s.r.sources["glmops_topology"] = "--topology"
    elif not s.topo_named and s.strategy_entry:
        s.r.sources["glmops_topology"] = s.src("glmops_strategy")


def _read_hosts(s: _Load) -> dict[str, HostSpec]:
    """Every host of the inventory, in inventory order: name -> HostSpec. A misspelt glmops
    variable of a host other than the first worker is reported here (the first worker's by
    :func:`_read_variables`)."""
    hosts: dict[str, HostSpec] = {}
    default_gpus = list(range(int(s.hardware.get("gpus_per_node") or 0)))
    for host in s.all_hosts:
        if host is not s.first:
            _host_typos(s, host)
        hosts[host.name] = _read_host(s, host, default_gpus)
    return hosts


def _host_typos(s: _Load, host: Any) -> None:
    """A typo in ``host``'s vars is as wrong as one in the first worker's: UNKNOWN_KEY for each
    ``glmops_`` name that is no variable, and near misses (once per file and name)."""
    r, vars_of = s.r, s.vars_of
    reported = {p.path for p in r.problems}
    for k in vars_of.of(host):
        if isinstance(k, str) and k.startswith("glmops_") and k not in VARIABLES and k not in HOST_VARIABLES \
                and k not in RUN_VARIABLES and k not in LAB_VARIABLES:
            label = vars_of.label(host, k)
            if label not in reported:
                reported.add(label)
                r.unknown_keys({k: None}, VARIABLES, lambda _k, label=label: label, "variable")
    _near_misses(host, vars_of, r)
    _role_variables(host, vars_of, r)


@functools.lru_cache(maxsize=1)
def role_options() -> dict[str, tuple[str, dict[str, Any]]]:
    """Every role input a user may set in the inventory: option name -> (role, its spec), read
    from each ``roles/<role>/meta/argument_specs.yml`` ``main`` entry point (type, elements,
    choices, suboptions; ``required`` and ``default`` dropped: an inventory sets a value)."""
    import yaml

    out: dict[str, tuple[str, dict[str, Any]]] = {}
    for f in sorted((data_root() / "roles").glob("*/meta/argument_specs.yml")):
        main = ((yaml.safe_load(f.read_text()) or {}).get("argument_specs") or {}).get("main") or {}
        for name, opt in (main.get("options") or {}).items():
            out[name] = (f.parent.parent.name, _spec_for_value(opt))
    return out


def _spec_for_value(opt: dict[str, Any]) -> dict[str, Any]:
    spec = {k: v for k, v in opt.items() if k in ("type", "elements", "choices")}
    if isinstance(opt.get("options"), dict):
        spec["options"] = {k: _spec_for_value(v) for k, v in opt["options"].items()}
    return spec


def _role_variables(host: Any, vars_of: "_Vars", r: _Reader) -> None:
    """A role input set in the inventory (``checkpoint_relay_fanout: two``) is checked here, with
    Ansible's own ``ArgumentSpecValidator`` against the role's ``meta/argument_specs.yml``, before
    any host is touched, instead of failing the role's argument validation mid-play. A value with
    Jinja is left to the play (it may name facts only a play has). Problems: ROLE_VAR, once per
    file and name, naming the role and its spec file."""
    from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

    options = role_options()
    seen = {p.path for p in r.problems}
    data = vars_of.of(host)
    for key, value in data.items():
        if key not in options or _has_template(value):
            continue
        label = vars_of.label(host, key)
        if label in seen:
            continue
        role, spec = options[key]
        try:
            errors = list(ArgumentSpecValidator({key: spec}).validate({key: plain(value)}).errors.errors)
        except Exception as exc:  # noqa: BLE001 - a spec Ansible itself cannot read is reported, not raised
            errors = [exc]
        if errors:
            seen.add(label)
            accepted = (f"one of {', '.join(map(str, spec['choices']))}" if spec.get("choices")
                        else f"{'an' if spec.get('type', 'str')[0] in 'aeiou' else 'a'} {spec.get('type', 'str')}" + (f" of {spec['elements']}s" if spec.get("elements") else ""))
            why = "" if shown(label, value) == "<redacted>" else f": {_first_line(errors[0])}"
            r.problem("ROLE_VAR", label, f"{key} {shown(label, value)} is not accepted by role {role}{why}; "
                      f"accepted: {accepted}", f"see roles/{role}/meta/argument_specs.yml")


def _read_host(s: _Load, host: Any, default_gpus: list[int]) -> HostSpec:
    """``host``'s HostSpec from its host variables (``glmops_address``, ``glmops_gpus`` defaulting
    to ``default_gpus``, ``glmops_rdma_devices``) and ``ansible_host``; a host name or address
    that is not one is an ADDRESS problem."""
    r, vars_of, root = s.r, s.vars_of, s.root
    hv = vars_of.of(host)
    spec = HostSpec(name=host.name, address=host.name, hardware=s.hardware_key,
                    groups=[g.name for g in host.groups])
    values = {}
    for key, hspec in HOST_VARIABLES.items():
        value = hv.get(key)
        where = vars_of.label(host, key) if value is not None else f"{root}/host_vars/{host.name}.yml:{key}"
        if value is not None:
            r.sources[f"hosts.{host.name}.{key[len('glmops_'):]}"] = where
            value = vars_of.resolve(host, key, value, where, r)
        values[key] = r.typed(value, hspec, where)[1]
    ansible_host = hv.get("ansible_host")
    if ansible_host is not None:
        where_host = vars_of.label(host, "ansible_host")
        ansible_host = vars_of.resolve(host, "ansible_host", ansible_host, where_host, r)
    if ansible_host is not None and not ADDRESS.match(str(ansible_host)):
        r.problem("ADDRESS", where_host,
                  f"ansible_host {str(ansible_host)!r} of host {host.name} is not accepted; accepted: a host name, "
                  "an IPv4 or an IPv6 address")
    for key in ("glmops_rdma_devices", "glmops_socket_ifname"):
        _check_text(values[key], f"hosts.{host.name}.{key}", r)
    if CONTROL_CHARS.search(host.name) or not host.name.isprintable():
        r.problem("ADDRESS", f"{root}:{host.name!r}", f"host name {host.name!r} is not printable text; accepted: a host name")
    elif not ADDRESS.match(host.name):
        # the name is the SSH target without ansible_host, and a directory of plan --out
        r.problem("ADDRESS", f"{root}:{host.name}",
                  f"host name {host.name!r} is not accepted; accepted: a host name, an IPv4 or an IPv6 address "
                  "(letters, digits, . _ - :, not starting with '-', '.' or '/')",
                  "rename the host and give its address in ansible_host")
    if values["glmops_address"]:
        spec.address = values["glmops_address"]
    elif ansible_host:
        spec.address = str(ansible_host)
    spec.gpus = values["glmops_gpus"] if values["glmops_gpus"] is not None else list(default_gpus)
    spec.rdma_devices = values["glmops_rdma_devices"] or []
    spec.socket_ifname = str(values["glmops_socket_ifname"] or "")
    spec.vars = {"ansible_host": str(ansible_host)} if ansible_host else {}
    port = hv.get("ansible_port")  # with ansible_host (else the name): which machine ssh reaches (DUPLICATE_HOST)
    if port is not None and "{{" not in str(port):
        spec.vars["ansible_port"] = str(port)
    branch = hv.get("nvidia_driver_branch")  # roles/nvidia_driver's input: DRIVER_BRANCH compares it (F30)
    if branch is not None and "{{" not in str(branch):
        spec.vars["nvidia_driver_branch"] = str(branch)
        r.sources[f"hosts.{host.name}.nvidia_driver_branch"] = vars_of.label(host, "nvidia_driver_branch")
    r.sources[f"hosts.{host.name}"] = f"{_display_path(host.vars.get('inventory_file') or root)}:{host.name}"
    return spec


def _topology(s: _Load, hosts: dict[str, HostSpec]) -> tuple[Any, Any, str, str]:
    """The chosen topology's raw ``pools`` and ``router``: from ``glmops_topologies.<topology>``,
    else seed 004's ``glmops_strategy`` laid out on the workers (:func:`_strategy_pools`), else the
    catalog layout for the engine (and the backend that runs the model), hardware, topology and
    model (set as ``s.layout``; an engine without one of its own takes its backend's). The router
    keeps the layout's policy when the inventory's router sets none. Returns
    ``(pools_raw, router_raw, pools_base, router_base)``, the bases being the paths problems name;
    ``pools_raw`` is not yet checked to be a mapping, ``router_raw`` is ``{}`` when unset."""
    r, v, topo = s.r, s.v, s.topo
    topologies = v["glmops_topologies"] or {}
    # a misspelled topology name (disag:) would be ignored silently and the catalog layout used
    r.unknown_keys(topologies, VARIABLES["glmops_topology"].choices or (),
                   lambda k: f"{s.src('glmops_topologies')}.{k}", "topology")
    topo_path = f"{s.src('glmops_topologies')}.{topo}"
    tdata = topologies.get(topo)
    if tdata is not None and not isinstance(tdata, dict):
        r.problem("TYPE", topo_path, f"value {tdata!r} is not a mapping; accepted: a mapping with pools and router")
        tdata = {}
    tdata = tdata or {}
    r.unknown_keys(tdata, TOPOLOGY_KEYS, lambda k: f"{topo_path}.{k}", "topology key")
    pools_raw, router_raw, base = tdata.get("pools"), tdata.get("router"), topo_path
    router_base = topo_path
    cat, engine_key, hardware_key = s.cat, s.engine_key, s.hardware_key
    # an engine with worker backends (catalog `backends`: Dynamo) runs the model on glmops_dynamo_backend
    backend = (v["glmops_dynamo_backend"] or "") if s.engine.get("backends") else engine_key
    layout = cat.layout(engine_key, hardware_key, topo, s.model_key, backend) if engine_key and hardware_key else None
    if pools_raw is None and s.strategy:
        pools_raw, base = _strategy_pools(s, hosts), f"catalog recipes.yaml:strategies[{s.strategy}]"
    elif pools_raw is None:
        s.layout = layout
        pools_raw = (layout or {}).get("pools") or {}
        if layout:
            base = f"catalog recipes.yaml:layouts[{layout['id']}]"
            r.sources["layout"] = layout.get("id", "")
    if layout and router_raw is None:
        router_raw, router_base = dict(layout.get("router") or {}), f"catalog recipes.yaml:layouts[{layout['id']}]"
    elif layout and isinstance(router_raw, dict) and router_raw.get("policy") is None \
            and (layout.get("router") or {}).get("policy") is not None:
        # pools pinned in the inventory keep the recipe's routing policy unless the router names one
        router_raw = {**router_raw, "policy": layout["router"]["policy"]}
    router_raw = router_raw if router_raw is not None else {}
    r.sources[f"glmops_topologies.{topo}.pools"] = f"{base}.pools"
    r.sources["pools"] = f"{base}.pools"
    return pools_raw, router_raw, base, router_base


def _strategy_pools(s: _Load, hosts: dict[str, HostSpec]) -> dict[str, dict[str, Any]]:
    """Seed 004's ``glmops_strategy`` as raw pools (role -> fields) on ``glmops_nodes`` nodes of the
    workers' GPUs (the fewest any worker has). Every reason it cannot is a problem (CHOICE for an
    unknown strategy, STRATEGY for a node count or topology it does not take) and ``{}`` is
    returned, so the topology's POOLS problem follows."""
    r, v, name = s.r, s.v, s.strategy
    if not s.strategy_entry:
        return {}  # CHOICE, reported by _catalog_entries
    entry, ok = s.strategy_entry, True
    if s.topo != entry.get("topology"):
        r.problem("STRATEGY", s.src("glmops_topology"),
                  f"glmops_strategy {name} is a {entry.get('topology')} strategy but the topology is {s.topo}; "
                  f"accepted: topology {entry.get('topology')} (or unset) with {name}, or pools of your own under "
                  f"glmops_topologies.{s.topo}.pools", f"catalog recipes.yaml:strategies[{name}] ({entry.get('source')})")
        ok = False
    workers = [h.name for h in s.workers]
    multi = bool(entry.get("multi_node"))
    nodes = v["glmops_nodes"] if v["glmops_nodes"] is not None else (len(workers) if multi else 1)
    s.nodes = nodes
    if multi and nodes < 2:
        r.problem("STRATEGY", s.src("glmops_nodes"),
                  f"glmops_strategy {name} spans nodes but glmops_nodes is {nodes} ({len(workers)} worker host(s)); "
                  "accepted: glmops_nodes >= 2 and as many hosts in glmops_workers",
                  "seeds/004_1623a49a49212f9f.txt line 18: multi-node strategies also need nodes=<n>")
        ok = False
    elif not multi and nodes != 1:
        r.problem("STRATEGY", s.src("glmops_nodes"),
                  f"glmops_strategy {name} runs on one node but glmops_nodes is {nodes}; accepted: 1, or a multi-node "
                  f"strategy ({', '.join(k for k, e in s.cat.strategies.items() if e.get('multi_node'))})",
                  "seeds/004_1623a49a49212f9f.txt line 18")
        ok = False
    elif nodes > len(workers):
        r.problem("STRATEGY", s.src("glmops_nodes"),
                  f"glmops_strategy {name} on {nodes} nodes but the inventory has {len(workers)} worker host(s) "
                  f"({', '.join(workers)}); accepted: glmops_nodes <= {len(workers)}, or more hosts")
        ok = False
    per_node = [len(hosts[h].gpus) for h in workers if h in hosts]
    gpus = min(per_node) if per_node else 0
    if not gpus:
        r.problem("STRATEGY", s.src("glmops_strategy"),
                  f"glmops_strategy {name} lays out GPUs but hardware {s.hardware_key!r} gives the workers none; "
                  "accepted: GPU hardware (glmops_gpus on the hosts), or pools of your own")
        ok = False
    if not ok:
        return {}
    return {p.role: {k: getattr(p, k) for k in ("tp", "pp", "ep", "dp", "attention_dp", "replicas")}
            for p in strategies.pools(name, nodes, gpus)}


def _read_pools(s: _Load, pools_raw: Any, base: str) -> list[PoolSpec]:
    """``pools_raw`` (role -> pool mapping, read at ``base``) as PoolSpecs, in its order; a pool
    with an unknown role or that is no mapping is a problem and left out."""
    if not isinstance(pools_raw, dict):
        s.r.problem("TYPE", f"{base}.pools", f"value {pools_raw!r} is not a mapping; accepted: a mapping of role -> pool")
        pools_raw = {}
    pools: list[PoolSpec] = []
    for role_raw, pdata in pools_raw.items():
        pool = _read_pool(s, role_raw, pdata, f"{base}.pools.{role_raw}")
        if pool is not None:
            pools.append(pool)
    return pools


def _read_pool(s: _Load, role_raw: Any, pdata: Any, ppath: str) -> PoolSpec | None:
    """One pool (``role_raw`` may be a TensorRT-LLM alias) read at ``ppath``, or None when its
    role is unknown or ``pdata`` is not a mapping (a problem either way). ``speculative``
    defaults to ``glmops_speculative``."""
    r, v, topo = s.r, s.v, s.topo
    role = ROLE_ALIASES.get(role_raw, role_raw)
    if role not in POOL_ROLES:
        r.problem("UNKNOWN_KEY", ppath, f"unknown pool role {role_raw!r}; accepted: agg, prefill, decode (TensorRT-LLM: context, generation)")
        return None
    if not isinstance(pdata, dict):
        r.problem("TYPE", ppath, f"value {pdata!r} is not a mapping; accepted: a mapping of {', '.join(POOL_KEYS)}")
        return None
    r.unknown_keys(pdata, POOL_KEYS, lambda k, p=ppath: f"{p}.{k}", "pool key")
    fields: dict[str, Any] = {}
    for key, kspec in POOL_KEYS.items():
        kpath = f"{ppath}.{key}"
        value = pdata.get(key)
        if value is not None:
            r.sources[f"pools.{role}.{key}"] = kpath
        fields[key] = r.typed(value, kspec, kpath)[1]
    for key in ("engine_args", "engine_config", "env"):
        for sub in fields[key] or {}:
            r.sources[f"pools.{role}.{key}.{sub}"] = f"{ppath}.{key}.{sub}"
    r.sources[f"pools.{role}"] = ppath
    r.sources[f"glmops_topologies.{topo}.pools.{role}"] = ppath
    pool_hosts = _expand_hosts(fields["hosts"] or [], s.inventory, r, f"{ppath}.hosts")
    spec_pool = PoolSpec(
        role=role,  # type: ignore[arg-type]
        tp=fields["tp"], pp=fields["pp"], ep=fields["ep"], dp=fields["dp"],
        attention_dp=fields["attention_dp"], replicas=fields["replicas"],
        hosts=pool_hosts, gpus=fields["gpus"] or [], port=fields["port"],
        engine_args=fields["engine_args"] or {}, engine_config=fields["engine_config"] or {},
        env=_env(fields["env"] or {}, r, f"{ppath}.env"),
        speculative=fields["speculative"] if fields["speculative"] is not None else v["glmops_speculative"],
    )
    if fields["speculative"] is None and v["glmops_speculative"] is not None:
        r.sources[f"pools.{role}.speculative"] = s.src("glmops_speculative")
    return spec_pool


def _read_router(s: _Load, router_raw: Any, router_base: str, hosts: dict[str, HostSpec]) -> RouterSpec:
    """The front door from ``router_raw`` (read at ``router_base``); its host defaults to the
    first router host, else the first worker, and must be one of ``hosts`` (UNKNOWN_HOST)."""
    r = s.r
    if not isinstance(router_raw, dict):
        r.problem("TYPE", f"{router_base}.router", f"value {router_raw!r} is not a mapping; accepted: a mapping of {', '.join(ROUTER_KEYS)}")
        router_raw = {}
    r.unknown_keys(router_raw, ROUTER_KEYS, lambda k: f"{router_base}.router.{k}", "router key")
    rf: dict[str, Any] = {}
    for key, kspec in ROUTER_KEYS.items():
        r.sources[f"glmops_topologies.router.{key}"] = f"{router_base}.router.{key}"
        if router_raw.get(key) is not None:
            r.sources[f"router.{key}"] = f"{router_base}.router.{key}"
        rf[key] = r.typed(router_raw.get(key), kspec, f"{router_base}.router.{key}")[1]
    router = RouterSpec(kind=rf["kind"], host=rf["host"], port=rf["port"], policy=rf["policy"], args=rf["args"] or {})
    if not router.host:
        router.host = s.routers[0] if s.routers else s.workers[0].name
    elif router.host not in hosts:
        r.problem("UNKNOWN_HOST", f"{router_base}.router.host",
                  f"router host {router.host!r} is not in the inventory; accepted: {', '.join(list(hosts)[:10])}")
    return router


def _read_checkpoint(s: _Load) -> CheckpointSpec:
    """``glmops_checkpoint`` over the catalog variant's repo, revision and size: the weights'
    ``local_dir`` is ``<model_dir>/<repo>[/<revision>]``, which must stay below ``model_dir``
    (PATH). ``size_gib``: ``glmops_checkpoint.size_gib`` when set, else the planned repo's
    (``Catalog.weight_gib``), else, for a repo the catalog does not list (a private mirror, the
    lab's tiny model), the planned variant's ``weight_gib``: a start timeout too long only waits
    longer for a worker that fails, one too short kills a worker still loading."""
    r, variant = s.r, s.variant
    ck_raw = s.v["glmops_checkpoint"] or {}
    ck_path = s.src("glmops_checkpoint")
    r.unknown_keys(ck_raw, CHECKPOINT_KEYS, lambda k: f"{ck_path}.{k}", "checkpoint key")
    ck: dict[str, Any] = {}
    for key, kspec in CHECKPOINT_KEYS.items():
        if ck_raw.get(key) is not None:
            r.sources[f"checkpoint.{key}"] = f"{ck_path}.{key}"
        ck[key] = r.typed(ck_raw.get(key), kspec, f"{ck_path}.{key}")[1]
    repo = ck["repo"] or variant.get("repo") or ""
    revision = ck["revision"] if ck["revision"] is not None else variant.get("revision")
    model_dir = ck["model_dir"].rstrip("/") or "/"
    local_dir = checkpoint_dir(model_dir, repo, revision)
    if any(part in (".", "..") for part in f"{repo}/{revision or ''}".split("/")):
        r.problem("PATH", f"{ck_path}.repo",
                  f"checkpoint directory {local_dir!r} (model_dir/repo/revision) is not below model_dir {model_dir!r}; "
                  "accepted: a repo id and revision without '..' or '.' segments")
    known = s.cat.weight_gib(repo, variant)
    if ck["size_gib"] is not None:
        size, size_from = float(ck["size_gib"]), "inventory"
    elif known is not None:
        size, size_from = known, "catalog"
    else:
        size, size_from = float(variant.get("weight_gib") or 0.0), "assumed"
    return CheckpointSpec(
        repo=repo, revision=revision, model_dir=model_dir, local_dir=local_dir,
        size_gib=size, size_from=size_from, allow_patterns=ck["allow_patterns"] or [],
        mode=ck["mode"], offline=ck["offline"],
    )


def _read_monitoring(s: _Load, router_host: str, hosts: dict[str, HostSpec]) -> dict[str, Any]:
    """``glmops_monitoring`` (glmops.monitoring) with every key typed; its host defaults to
    ``router_host`` and must be one of ``hosts`` (UNKNOWN_HOST)."""
    r = s.r
    mon_raw = s.v["glmops_monitoring"] or {}
    mon_path = s.src("glmops_monitoring")
    r.unknown_keys(mon_raw, MONITORING_KEYS, lambda k: f"{mon_path}.{k}", "monitoring key")
    monitoring: dict[str, Any] = {}
    for key, kspec in MONITORING_KEYS.items():
        monitoring[key] = r.typed(mon_raw.get(key), kspec, f"{mon_path}.{key}")[1]
    if not monitoring["host"]:
        monitoring["host"] = router_host
    elif monitoring["host"] not in hosts:
        r.problem("UNKNOWN_HOST", f"{mon_path}.host",
                  f"monitoring host {monitoring['host']!r} is not in the inventory; accepted: {', '.join(list(hosts)[:10])}")
    return monitoring


def _drafter_defaults(s: _Load, spec: Any) -> Any:
    """``spec`` (speculative settings) with what the catalog knows of its method's drafter
    (``models.<m>.drafters.<method>``: ``model`` repo, ``num_speculative_tokens``, ``revision``)
    where the inventory left them unset; a copy, ``spec`` itself when there is no drafter."""
    if not isinstance(spec, dict):
        return spec
    drafter = s.drafters.get(str(spec.get("method", "")).lower())
    if not isinstance(drafter, dict):
        return spec
    out = dict(spec)
    for key, cat_key in (("model", "repo"), ("num_speculative_tokens", "num_speculative_tokens"), ("revision", "revision")):
        if out.get(key) is None and drafter.get(cat_key) is not None:
            out[key] = drafter[cat_key]
    return out


def _assemble(s: _Load, hosts: dict[str, HostSpec], pools: list[PoolSpec], router: RouterSpec,
              checkpoint: CheckpointSpec, monitoring: dict[str, Any]) -> Deployment:
    """The Deployment from the parts the other steps read and the typed variables, with
    ``sources`` completed for the Deployment's own field names."""
    r, v = s.r, s.v
    for pool in pools:
        pool.speculative = _drafter_defaults(s, pool.speculative)
    served = v["glmops_served_model_name"] or s.variant.get("served_model_name") or checkpoint.repo
    engine_version = v["glmops_engine_version"] or str(s.engine.get("version") or "")
    name = v["glmops_deployment"] or os.path.basename(os.path.abspath(s.inv_dir)) or "glm"
    for field_name, var in _FIELD_VARS.items():
        if var in r.sources:
            r.sources[field_name] = r.sources[var]
    for key in ("engine_args", "engine_config", "env"):
        for sub in v[f"glmops_{key}"] or {}:
            r.sources[f"{key}.{sub}"] = f"{s.src('glmops_' + key)}.{sub}"

    return Deployment(
        name=name,
        model=s.model_key,
        variant=s.variant_key,
        engine=s.engine_key,
        topology=s.topo,  # type: ignore[arg-type]
        hardware=s.hardware_key,
        runtime=v["glmops_runtime"],
        hosts=hosts,
        pools=pools,
        checkpoint=checkpoint,
        router=router,
        served_model_name=served,
        engine_version=engine_version,
        kv_cache_dtype=v["glmops_kv_cache_dtype"],
        max_seq_len=v["glmops_max_seq_len"],
        max_batch_size=v["glmops_max_batch_size"],
        max_num_tokens=v["glmops_max_num_tokens"],
        multimodal=v["glmops_multimodal"],
        video=v["glmops_video"],
        speculative=_drafter_defaults(s, v["glmops_speculative"]),
        engine_args=v["glmops_engine_args"] or {},
        engine_config=v["glmops_engine_config"] or {},
        env=_env(v["glmops_env"] or {}, r, s.src("glmops_env")),
        service_user=v["glmops_service_user"],
        state_dir=v["glmops_state_dir"],
        config_dir=v["glmops_config_dir"],
        venv_root=v["glmops_venv_root"],
        readiness_timeout_s=v["glmops_readiness_timeout_s"],
        sources=r.sources,
        problems=r.problems,
        inventory_path=s.root,
        inventory_dir=_display_path(s.inv_dir),
        worker_hosts=[h.name for h in s.workers],
        router_hosts=s.routers,
        dynamo_backend=v["glmops_dynamo_backend"],
        dynamo_etcd_hosts=_expand_hosts(v["glmops_dynamo_etcd_hosts"] or [], s.inventory, r,
                                        s.src("glmops_dynamo_etcd_hosts")),
        dynamo_request_plane=v["glmops_dynamo_request_plane"],
        dynamo_event_plane=v["glmops_dynamo_event_plane"],
        image=v["glmops_image"],
        pip_extra=v["glmops_pip_extra"] or [],
        layout=(s.layout or {}).get("id"),
        strategy=s.strategy or None,
        nodes=s.nodes,
        monitoring=monitoring,
        raw_variables=sorted(s.raw),
        # plain values read from Ansible Vault: secret by value wherever they land (the API key too,
        # vaulted or not: SECRET_IN_ARGV finds it in any argv word)
        secret_values=s.secret_values | ({v["glmops_api_key"]} if v["glmops_api_key"] else set()),
        api_key=v["glmops_api_key"] or None,
    )


# Deployment field -> variable, for ``sources``.
_FIELD_VARS = {
    "name": "glmops_deployment", "model": "glmops_model", "variant": "glmops_variant",
    "engine": "glmops_engine", "engine_version": "glmops_engine_version", "hardware": "glmops_hardware",
    "runtime": "glmops_runtime", "topology": "glmops_topology", "served_model_name": "glmops_served_model_name",
    "kv_cache_dtype": "glmops_kv_cache_dtype", "max_seq_len": "glmops_max_seq_len",
    "max_batch_size": "glmops_max_batch_size", "max_num_tokens": "glmops_max_num_tokens",
    "speculative": "glmops_speculative", "multimodal": "glmops_multimodal", "video": "glmops_video",
    "engine_args": "glmops_engine_args",
    "engine_config": "glmops_engine_config", "env": "glmops_env", "checkpoint": "glmops_checkpoint",
    "service_user": "glmops_service_user", "readiness_timeout_s": "glmops_readiness_timeout_s",
    "dynamo_backend": "glmops_dynamo_backend", "dynamo_etcd_hosts": "glmops_dynamo_etcd_hosts",
    "dynamo_request_plane": "glmops_dynamo_request_plane", "dynamo_event_plane": "glmops_dynamo_event_plane",
    "pip_extra": "glmops_pip_extra", "image": "glmops_image",
    "topologies": "glmops_topologies", "strategy": "glmops_strategy", "nodes": "glmops_nodes",
    "api_key": "glmops_api_key",
}


_ALL_NAMES = tuple(VARIABLES) + tuple(HOST_VARIABLES)


def _near_misses(host: Any, vars_of: _Vars, r: _Reader) -> None:
    """Variables of ``host`` that look like ours but are not spelled ``glmops_<name>``
    (``glmosp_multimodal``, ``glmops-checkpoint``, ``GLMOPS_MODEL``) would be ignored and the
    defaults used: each is an UNKNOWN_KEY problem with a did-you-mean (once per file and name)."""
    seen = {p.path for p in r.problems}
    for key in vars_of.of(host):
        if not isinstance(key, str) or key.startswith("glmops_") or len(key) > 200:
            continue
        found, close = _near_miss(key)
        if not found:
            continue
        where = vars_of.label(host, key)
        if where in seen:
            continue
        seen.add(where)
        r.problem("UNKNOWN_KEY", where,
                  f"variable {key!r} looks like a glmops variable but is not one, so it is ignored; "
                  "accepted: glmops_<name> in lower case with '_' (docs/variables.md)",
                  f"did you mean {close!r}?" if close else "see docs/variables.md")


@functools.lru_cache(maxsize=4096)
def _near_miss(key: str) -> tuple[bool, str | None]:
    """(whether ``key`` looks like a misspelt glmops variable, the closest name or None)."""
    norm = key.lower().replace("-", "_").replace(".", "_")
    close = difflib.get_close_matches(norm, _ALL_NAMES, n=1, cutoff=0.85)
    if not (norm.startswith("glmops") or close or difflib.get_close_matches(norm[:7], ["glmops_"], cutoff=0.7)
            and "_" in norm[5:8]):
        return False, None
    if not close:
        close = difflib.get_close_matches("glmops_" + norm.split("_", 1)[-1], _ALL_NAMES, n=1, cutoff=0.6)
    return True, (close[0] if close else None)


def _env(data: dict, r: _Reader, path: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in data.items():
        if not ENV_NAME.match(str(key)):
            r.problem("ENV_NAME", f"{path}.{key}", f"environment variable name {str(key)!r} is not accepted; "
                      "accepted: letters, digits and _, not starting with a digit")
            continue
        if RESERVED_ENV.match(str(key)):
            r.problem("ENV_RESERVED", f"{path}.{key}",
                      f"environment variable {key} is set by glmops or changes which code runs; accepted: any other "
                      "name (not CUDA_VISIBLE_DEVICES, HF_HUB_OFFLINE, HOME, PATH, PYTHONPATH, LD_*, ...)",
                      "GPUs come from glmops_gpus/pools.gpus, offline serving from glmops_checkpoint.offline")
            continue
        if isinstance(value, (dict, list)) or value is None:
            r.problem("TYPE", f"{path}.{key}", f"value {shown(str(key), value)} for env {key} is not a scalar; "
                      "accepted: a string or number")
            continue
        out[str(key)] = ("true" if value else "false") if isinstance(value, bool) else str(value)
    return out


def _expand_hosts(names: list[str], inventory: Any, r: _Reader, path: str) -> list[str]:
    """Host names and group names -> host names (inventory order, no duplicates)."""
    out: list[str] = []
    for name in names:
        if name in inventory.hosts:
            members = [name]
        elif name in inventory.groups:
            members = [h.name for h in inventory.groups[name].get_hosts()]
        else:
            close = difflib.get_close_matches(str(name), list(inventory.groups) + list(inventory.hosts), n=1)
            r.problem("UNKNOWN_HOST", path,
                      f"{name!r} is neither a host nor a group of the inventory; accepted: host or group names "
                      f"({', '.join(sorted(inventory.groups))})",
                      f"did you mean {close[0]!r}?" if close else "")
            continue
        out.extend(m for m in members if m not in out)
    return out


def _check_groups(inventory: Any, r: _Reader, root: str, n_hosts: int) -> None:
    """Group ``glmops_workers`` / ``glmops_routers`` misspelled (``glmops_worker``) or empty: without
    the group every host of the inventory is taken as a worker (and routers land on workers), so a
    group name close to one of them while the real one is absent or empty is a problem (UNKNOWN_GROUP)."""
    special = (WORKERS_GROUP, ROUTERS_GROUP)
    others = [g for g in inventory.groups if g not in special and g not in ("all", "ungrouped")]
    for name in special:
        group = inventory.groups.get(name)
        if group is not None and group.get_hosts():
            continue
        close = [g for g in difflib.get_close_matches(name, others, n=3, cutoff=0.8)]
        what = "has no hosts" if group is not None else "is not defined"
        fallback = (f"every host of the inventory ({n_hosts}) is taken as a worker" if name == WORKERS_GROUP
                    else "the router runs on the first worker host")
        for near in close:
            r.problem("UNKNOWN_GROUP", f"{root}:{near}",
                      f"inventory group {near!r} is not a glmops group and {name} {what}, so {fallback}; "
                      f"accepted groups: {', '.join(special)}", f"did you mean {name!r}?")
        if group is not None and not close and name == WORKERS_GROUP:
            r.problem("UNKNOWN_GROUP", f"{root}:{name}",
                      f"group {name} has no hosts, so {fallback}; accepted: at least one host in {name}, "
                      "or no such group", f"add the serving hosts under {name}.hosts (or its children)")


def _check_same_on_workers(workers: list, vars_of: _Vars, r: _Reader, overrides: dict) -> None:
    """Deployment-wide variables must resolve to the same value on every worker host. Hosts with
    the same groups and no own glmops_ vars share the first worker's answer, so this costs one
    comparison per distinct group set, not per host."""
    first = workers[0]
    first_vars = vars_of.of(first)

    def has_own(host: Any) -> bool:
        return any(k.startswith("glmops_") and k not in HOST_VARIABLES for k in host.vars) \
            or host.name in vars_of.host_var_names

    # hosts with the first worker's groups share its answer only when the first has no own vars
    seen: set[tuple] = set() if has_own(first) else {tuple(g.name for g in first.get_groups())}
    for host in workers[1:]:
        own = has_own(host)
        signature = tuple(g.name for g in host.get_groups())
        if not own and signature in seen:
            continue
        seen.add(signature)
        hv = vars_of.of(host)
        for name in _DEPLOYMENT_WIDE:
            if name in overrides or name.removeprefix("glmops_") in overrides or name in vars_of.extra:
                continue
            mine, theirs = hv.get(name), first_vars.get(name)
            if mine is not theirs and plain(mine) != plain(theirs):
                where = vars_of.label(host, name) if name in hv else vars_of.label(first, name)
                r.problem(
                    "HOST_VAR_CONFLICT",
                    where,
                    f"{name} is {shown(name, plain(mine))} on host {host.name} but {shown(name, plain(theirs))} on "
                    f"host {first.name}; accepted: one value for every worker host",
                    "set deployment-wide variables in group_vars/all.yml only",
                )
