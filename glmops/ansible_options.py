"""The Ansible options an operator passes to glmops as to ``ansible-playbook``: extra vars and
Vault secrets, shared by the controller-side read (``glmops.inventory``) and the playbook run
(``glmops.runner``).

The CLI (``glmops.commands.ansible_opts.ANSIBLE_OPTS``) sets them for the duration of one verb
with :func:`using`; library callers get :func:`current` (the defaults: only what Ansible's own
configuration says, ``ANSIBLE_VAULT_PASSWORD_FILE`` / ``ANSIBLE_VAULT_IDENTITY_LIST`` / the
operator's ``ansible.cfg``).

No password ever goes into argv: ``--ask-vault-pass`` and ``--vault-id LABEL@prompt`` are
prompted for once by the CLI and written to a 0600 file in a 0700 temporary directory, removed
when the verb ends; the run gets that file's path.
"""
from __future__ import annotations

import contextlib
import contextvars
import os
import shlex
from dataclasses import dataclass
from typing import Any, Iterator

from glmops.resources import PACKAGE


@dataclass(frozen=True)
class AnsibleOptions:
    """``extra_vars``: each ``-e`` argument as given (``@file``, ``key=value ...``, JSON/YAML);
    ``vault_ids``: each ``--vault-id`` (``[label@]source``, source a password file or script);
    ``vault_password_files``: each ``--vault-password-file`` path; ``inline_files``: the
    ``@FILE`` paths of ``extra_vars`` that hold an inline ``-e`` (``key=value``, ``{...}``) the
    CLI wrote to a 0600 file, so a value's origin is still named ``-e``. All tuples of str."""

    extra_vars: tuple[str, ...] = ()
    vault_ids: tuple[str, ...] = ()
    vault_password_files: tuple[str, ...] = ()
    inline_files: tuple[str, ...] = ()

    def argv(self) -> list[str]:
        """The ``ansible-playbook`` arguments for these options (paths and -e text, no password)."""
        out: list[str] = []
        for vid in self.vault_ids:
            out += ["--vault-id", vid]
        for path in self.vault_password_files:
            out += ["--vault-password-file", path]
        for ev in self.extra_vars:
            out += ["-e", ev]
        return out

    def cmdline(self) -> str:
        """:meth:`argv` as one shell-quoted string (ansible-runner's ``cmdline``)."""
        return " ".join(shlex.quote(a) for a in self.argv())


_CURRENT: contextvars.ContextVar[AnsibleOptions] = contextvars.ContextVar("glmops_ansible_options")


#: environment of the ``ansible-playbook`` a verb runs (glmops.runner): the ``@FILE`` paths of its
#: ``-e`` that hold an inline ``-e`` (``AnsibleOptions.inline_files``), ``os.pathsep``-separated
INLINE_ENV = "GLMOPS_INLINE_EXTRA_VARS"


def current() -> AnsibleOptions:
    """The options of the running verb. Outside :func:`using`: inside an ``ansible-playbook``
    process (an action plugin), that command's own ``-e``/``--vault-id``/``--vault-password-file``
    (``ansible.context.CLIARGS``), with ``inline_files`` from :data:`INLINE_ENV`; else none."""
    explicit = _CURRENT.get(None)
    if explicit is not None:
        return explicit
    cli = _ansible_cli_args()
    if cli is None:
        return AnsibleOptions()
    inline = tuple(p for p in os.environ.get(INLINE_ENV, "").split(os.pathsep) if p)
    return AnsibleOptions(extra_vars=tuple(cli.get("extra_vars") or ()), vault_ids=tuple(cli.get("vault_ids") or ()),
                          vault_password_files=tuple(cli.get("vault_password_files") or ()), inline_files=inline)


def _ansible_cli_args() -> Any:
    """``ansible.context.CLIARGS`` when this process is an Ansible CLI (it is set), else None."""
    import sys

    context = sys.modules.get("ansible.context")
    args = getattr(context, "CLIARGS", None) if context else None
    return args if args else None


@contextlib.contextmanager
def using(options: AnsibleOptions) -> Iterator[AnsibleOptions]:
    """Make ``options`` :func:`current` inside the block."""
    token = _CURRENT.set(options)
    try:
        yield options
    finally:
        _CURRENT.reset(token)


def extra_vars(loader: Any, options: AnsibleOptions | None = None,
               files: dict[str, str] | None = None) -> dict[str, Any]:
    """The ``-e`` arguments of ``options`` parsed as ``ansible-playbook`` parses them
    (``ansible.utils.vars.load_extra_vars``: ``@file`` YAML/JSON, ``{...}``/``[...]`` YAML,
    else ``key=value`` words), later ones winning. ``files``, when given, is filled with
    top-level name -> the FILE of the ``-e @FILE`` that set it last (a name set last by an
    inline ``-e``, ``AnsibleOptions.inline_files`` included, is left out). Raises ``AnsibleOptionsError`` (message naming the argument)
    for a path without ``@`` or data that is not a mapping."""
    from collections.abc import MutableMapping

    from ansible.errors import AnsibleOptionsError
    from ansible.parsing.splitter import parse_kv
    from ansible.utils.vars import combine_vars

    out: dict[str, Any] = {}
    options = options or current()
    for opt in options.extra_vars:
        if not opt:
            continue
        if opt.startswith("@"):
            data = loader.load_from_file(opt[1:], trusted_as_template=True)
        elif opt[0] in "/.":
            raise AnsibleOptionsError(f"Please prepend extra_vars filename '{opt}' with '@'")
        elif opt[0] in "[{":
            data = loader.load(opt)
        else:
            data = parse_kv(opt)
        if not isinstance(data, MutableMapping):
            raise AnsibleOptionsError(f"Invalid extra vars data supplied. '{opt}' could not be made into a dictionary")
        out = combine_vars(out, data)
        if files is not None:
            for key in data:
                if opt.startswith("@") and opt[1:] not in options.inline_files:
                    files[key] = opt[1:]
                else:
                    files.pop(key, None)
    return out


def vault_secrets(loader: Any, options: AnsibleOptions | None = None) -> list:
    """Load the Vault secrets ``ansible-playbook`` would use with ``options`` into ``loader``
    and into ansible-core's process-wide ``VaultSecretsContext``: the ``--vault-id`` and
    ``--vault-password-file`` of ``options`` plus the configured ``vault_identity_list`` /
    ``vault_password_file`` (``ANSIBLE_VAULT_*``, the operator's ansible.cfg), never prompting.
    Returns ``[(vault id, secret)]`` (empty without any source). Raises AnsibleError for a
    password file that is missing or unreadable (Ansible's message names it)."""
    from ansible import constants as C
    from ansible.cli import CLI
    from ansible.parsing.vault import VaultSecretsContext

    explicit = options is not None or _CURRENT.get(None) is not None
    ctx = VaultSecretsContext.current(optional=True)
    if not explicit and ctx is not None and _ansible_cli_args() is not None:
        # inside ansible-playbook: the secrets it loaded (a prompted one cannot be asked again)
        loader.set_vault_secrets(ctx.secrets)
        return list(ctx.secrets)
    options = options or current()
    files = list(options.vault_password_files)
    if not files and not options.vault_ids and not C.DEFAULT_VAULT_PASSWORD_FILE \
            and not C.DEFAULT_VAULT_IDENTITY_LIST:
        secrets: list = []
    else:
        _check_password_sources(files + [vid.split("@", 1)[-1] for vid in options.vault_ids]
                                + [C.DEFAULT_VAULT_PASSWORD_FILE or ""]
                                + [vid.split("@", 1)[-1] for vid in (C.DEFAULT_VAULT_IDENTITY_LIST or ())])
        with _bounded_password_scripts():
            secrets = CLI.setup_vault_secrets(loader, vault_ids=list(options.vault_ids), vault_password_files=files,
                                              ask_vault_pass=False, auto_prompt=False, initialize_context=False)
    loader.set_vault_secrets(secrets)
    if ctx is None:  # ansible-core's one process-wide context (initialize() works once)
        VaultSecretsContext.initialize(VaultSecretsContext(secrets))
    else:
        ctx.secrets = secrets
    return secrets


#: seconds a Vault password script (``--vault-password-file``/``--vault-id`` executable) may take
PASSWORD_SCRIPT_SECONDS = 10


def _check_password_sources(paths: list[str]) -> None:
    """A Vault password source that is a FIFO (reading it would block until some writer comes)
    raises AnsibleError naming it."""
    import stat

    from ansible.errors import AnsibleError

    for path in paths:
        if not path or path == "prompt":
            continue
        try:
            mode = os.stat(os.path.expanduser(path)).st_mode
        except OSError:
            continue  # missing: Ansible's own error names it
        if stat.S_ISFIFO(mode) or not (stat.S_ISREG(mode)):
            raise AnsibleError(f"the Vault password file {path} is not a regular file (a FIFO or device would "
                               "block the read)")


@contextlib.contextmanager
def _bounded_password_scripts() -> Iterator[None]:
    """Vault password scripts run with a time limit (PASSWORD_SCRIPT_SECONDS): one that does not
    answer is killed and raises AnsibleError naming it (ansible-core waits for ever)."""
    import subprocess

    from ansible.errors import AnsibleError
    from ansible.parsing import vault

    originals = {cls: cls.__dict__["_run"] for cls in (vault.ScriptVaultSecret, vault.ClientScriptVaultSecret)
                 if "_run" in cls.__dict__}

    def _run(self: Any, command: Any) -> Any:  # ansible-core's, with a time limit
        client = isinstance(self, vault.ClientScriptVaultSecret)
        try:
            proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE if client else None)
        except OSError as exc:
            raise AnsibleError(f"Problem running vault password script {self.filename} ({exc}). If this is not a "
                               "script, remove the executable bit from the file.") from None
        try:
            stdout, stderr = proc.communicate(timeout=PASSWORD_SCRIPT_SECONDS)
        except subprocess.TimeoutExpired:
            proc.kill()  # its own children may keep the pipe open: close it, do not read it to the end
            for pipe in (proc.stdout, proc.stderr):
                if pipe is not None:
                    pipe.close()
            proc.wait()
            raise AnsibleError(f"the Vault password script {self.filename} did not answer within "
                               f"{PASSWORD_SCRIPT_SECONDS} s and was stopped") from None
        return stdout, stderr, proc

    for cls, original in originals.items():
        setattr(cls, "_run", _run)
    try:
        yield
    finally:
        for cls, original in originals.items():
            setattr(cls, "_run", original)


#: glmops' own plugin and role directories (relative to the repository) and the Ansible setting
#: and environment variable each is added to
# (setting, environment variable, glmops' directory: "roles" under the data root, else a
# directory under the package's ansible/, the same in a checkout and in an installed wheel)
_OWN_PATHS = (
    ("DEFAULT_ROLES_PATH", "ANSIBLE_ROLES_PATH", "roles"),
    ("DEFAULT_ACTION_PLUGIN_PATH", "ANSIBLE_ACTION_PLUGINS", "action_plugins"),
    ("DEFAULT_MODULE_PATH", "ANSIBLE_LIBRARY", "library"),
    ("DEFAULT_MODULE_UTILS_PATH", "ANSIBLE_MODULE_UTILS", "module_utils"),
    ("DEFAULT_LOOKUP_PLUGIN_PATH", "ANSIBLE_LOOKUP_PLUGINS", "lookup_plugins"),
    ("DEFAULT_FILTER_PLUGIN_PATH", "ANSIBLE_FILTER_PLUGINS", "filter_plugins"),
    ("DEFAULT_INVENTORY_PLUGIN_PATH", "ANSIBLE_INVENTORY_PLUGINS", "inventory_plugins"),
)


def config_env(repo: str, own_cfg: str) -> dict[str, str]:
    """Environment for an ``ansible-playbook`` run that honours the operator's Ansible
    configuration: ``ANSIBLE_CONFIG`` is the file Ansible itself would pick from here
    (``ANSIBLE_CONFIG``, ``./ansible.cfg`` of the working directory, ``~/.ansible.cfg``,
    ``/etc/ansible/ansible.cfg``), else glmops' own ``own_cfg``; and each plugin/role path
    setting (``ANSIBLE_ROLES_PATH``, ``ANSIBLE_ACTION_PLUGINS``, ``ANSIBLE_LIBRARY``, ...) is the
    operator's effective value (their file and environment) with glmops' directory appended:
    ``<repo>/roles`` (``repo``: :func:`glmops.resources.data_root`, the checkout's top level or
    the installed copy) and the package's ``glmops/ansible/<kind>`` for plugins (package data in
    both layouts). Returns ``{name: value}``; reads files only."""
    from ansible.config.manager import ConfigManager, find_ini_config_file

    cfg = find_ini_config_file() or own_cfg
    manager = ConfigManager(conf_file=cfg)
    env = {"ANSIBLE_CONFIG": cfg}
    for setting, name, rel in _OWN_PATHS:
        try:
            theirs = manager.get_config_value(setting) or []
        except Exception:  # noqa: BLE001 - an unreadable setting: Ansible reports it in the run
            theirs = []
        if isinstance(theirs, str):
            theirs = theirs.split(os.pathsep)
        ours = os.path.join(repo, rel) if rel == "roles" else str(PACKAGE / "ansible" / rel)
        paths = [str(p) for p in theirs if p and str(p) != ours] + [ours]
        env[name] = os.pathsep.join(dict.fromkeys(paths))
    return env
