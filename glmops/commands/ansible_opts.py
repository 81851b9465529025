"""``@ANSIBLE_OPTS``: the ``ansible-playbook`` options every verb that reads the inventory
shares, spelled as ``ansible-playbook`` spells them:

  ``-e/--extra-vars``        (repeatable) ``key=value ...``, JSON/YAML ``{...}``, or ``@file``
  ``--vault-id``             (repeatable) ``[label@]source`` (a password file or client script;
                             ``label@prompt`` asks once)
  ``--vault-password-file``  (repeatable) a file holding the Vault password, or a script
  ``--ask-vault-pass``       ask for the Vault password once

The decorator takes these out of the command's keyword arguments and makes them
``glmops.ansible_options.current()`` while the command runs, so the controller-side read
(``glmops.inventory.load_deployment``) and the playbook run (``glmops.runner.run``) both see
them; the command's own signature does not change. A run-control variable
(``glmops.inventory.RUN_VARIABLES``, e.g. ``glmops_plan_handoff``) in ``-e`` exits 2 naming it,
before the command runs (``glmops.planning.refuse_run_variables``). A prompted password goes to a 0600 file
in a 0700 temporary directory (removed when the command ends): only its path reaches argv; so does
each inline ``-e`` (``key=value``, ``{...}``), as ``@FILE`` of its parsed JSON (:func:`_inline_to_files`).
"""
from __future__ import annotations

import functools
import os
import shutil
import tempfile

import click

from glmops.ansible_options import AnsibleOptions, using
from glmops.model import Problem, ValidationError, clip

_NAMES = ("extra_vars", "vault_ids", "vault_password_files", "ask_vault_pass")


def _password_file(tmpdir: list[str], label: str) -> str:
    """Prompt for one Vault password; write it to a 0600 file; return the path. No password to
    read (stdin at its end, no terminal) raises ValidationError (exit 2, nothing run)."""
    import warnings

    if not tmpdir:
        tmpdir.append(tempfile.mkdtemp(prefix="glmops-vault-"))  # mode 0700
    option = f"--vault-id {label}@prompt" if label else "--ask-vault-pass"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # getpass' GetPassWarning without a terminal: the problem says it
            secret = click.prompt(f"Vault password{f' ({label})' if label else ''}", hide_input=True, err=True)
    except (click.Abort, EOFError):
        raise ValidationError([Problem(
            "VAULT", option, f"{option} could not read a Vault password: the input ended (no terminal, or stdin "
            "at its end); accepted: a password typed at the prompt",
            "run it in a terminal, or pass --vault-password-file FILE (or --vault-id LABEL@FILE)")]) from None
    path = os.path.join(tmpdir[0], f"pw-{len(os.listdir(tmpdir[0]))}")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(secret + "\n")
    return path


_ACCEPTED_E = "key=value words, a YAML/JSON mapping ({...}), or @FILE of a readable YAML/JSON mapping"


def _alias_bomb(opt: str, shown: str) -> Problem | None:
    """An EXTRA_VARS problem when ``opt`` (an ``@FILE`` or inline YAML/JSON) expands to more YAML
    nodes than an inventory file may (``glmops.inventory.MAX_YAML_NODES``, aliases expanded): a
    billion-laughs alias bomb would hang the controller's read. None when it is within that or
    does not parse (the parse says so)."""
    import yaml

    from glmops.inventory import MAX_YAML_NODES, _yaml_nodes

    if opt.startswith("@"):
        with open(opt[1:], "rb") as fh:
            text = fh.read().decode("utf-8", errors="replace")
    elif opt[:1] in ("[", "{"):
        text = opt
    else:
        return None
    try:
        docs = list(yaml.compose_all(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)))  # libyaml: 4x faster
    except yaml.YAMLError:
        return None
    memo: dict[int, int] = {}
    if sum(_yaml_nodes(d, memo) for d in docs if d is not None) > MAX_YAML_NODES:
        return Problem("EXTRA_VARS", f"-e {shown}", f"-e {shown} expands to more than {MAX_YAML_NODES:,} YAML nodes "
                       f"(aliases * expanded); accepted: at most {MAX_YAML_NODES:,}", "a YAML alias bomb? write the values out")
    return None


def _names_a_secret(opt: str) -> bool:
    """True when the inline ``-e`` text ``opt`` names a secret (a word such as ``glmops_api_key``
    or ``HF_TOKEN``) or holds one (a token, a URL with a password: ``glmops.model.is_secret``),
    so a problem about it must not quote it."""
    import re

    from glmops.model import is_secret

    return is_secret("", opt) or any(is_secret(word) for word in re.findall(r"[\w.-]+", opt))


def check_extra_vars(extra: tuple[str, ...]) -> None:
    """Parse every ``-e`` argument as ``ansible-playbook`` would (``glmops.ansible_options.extra_vars``);
    raise ValidationError (exit 2) with one EXTRA_VARS problem per bad argument, naming it: an
    ``@FILE`` that does not exist or is not a regular file, data beyond an inventory file's limits
    (an ``@FILE`` over ``glmops.inventory.MAX_FILE_BYTES``, an alias bomb: :func:`_alias_bomb`),
    YAML/JSON that does not parse, data that is not a mapping, ``key=value`` text with words that
    are not ``key=value`` (Ansible keeps them as ``_raw_params`` and no variable gets them:
    ``-e 'glmops_max_batch_size 64'``, JSON after ``key=`` split at its spaces). A Vault-encrypted ``@FILE`` is only
    checked to exist and for its size (its secret is loaded with the inventory's). An inline
    argument that names or holds a secret (:func:`_names_a_secret`) is shown as ``'<redacted>'``."""
    if not extra:
        return
    from ansible.parsing.dataloader import DataLoader

    from glmops.ansible_options import extra_vars
    from glmops.inventory import MAX_FILE_BYTES

    problems = []
    for opt in extra:
        secret = not opt.startswith("@") and _names_a_secret(opt)
        shown = "'<redacted>' (it names or holds a secret)" if secret else clip(repr(opt))
        if opt.startswith("@"):
            path = opt[1:]
            if not os.path.isfile(path):
                what = "is a FIFO or not a regular file" if os.path.exists(path) else "does not exist"
                problems.append(Problem("EXTRA_VARS", f"-e {shown}", f"the extra vars file {path!r} of -e {shown} "
                                        f"{what}; accepted: {_ACCEPTED_E}", "check the path after '@'"))
                continue
            size = os.path.getsize(path)
            if size > MAX_FILE_BYTES:
                problems.append(Problem("EXTRA_VARS", f"-e {shown}", f"the extra vars file {path!r} of -e {shown} has "
                                        f"{size:,} bytes; accepted: at most {MAX_FILE_BYTES:,} bytes, as an inventory "
                                        "file", "keep only the variables glmops reads in it"))
                continue
            try:
                with open(path, "rb") as fh:
                    if fh.read(64).lstrip().startswith(b"$ANSIBLE_VAULT"):
                        continue
                bomb = _alias_bomb(opt, shown)
            except OSError as exc:
                problems.append(Problem("EXTRA_VARS", f"-e {shown}", f"the extra vars file {path!r} of -e {shown} "
                                        f"cannot be read ({exc.strerror}); accepted: {_ACCEPTED_E}"))
                continue
        else:
            bomb = _alias_bomb(opt, shown)
        if bomb:
            problems.append(bomb)
            continue
        try:
            data = extra_vars(DataLoader(), AnsibleOptions(extra_vars=(opt,)))
        except Exception as exc:  # noqa: BLE001 - AnsibleParserError, AnsibleOptionsError, ...
            first = (str(getattr(exc, "message", "") or exc).strip().splitlines() or [type(exc).__name__])[0]
            if secret:  # Ansible's message may quote the argument
                first = first.replace(opt, "<redacted>")
                first = type(exc).__name__ if _names_a_secret(first) else first
            problems.append(Problem("EXTRA_VARS", f"-e {shown}", f"the extra vars argument -e {shown} cannot be read "
                                    f"({clip(first, 200)}); accepted: {_ACCEPTED_E}",
                                    "this is the -e/--extra-vars argument, not the inventory: fix or quote it"))
            continue
        if opt[:1] not in ("@", "[", "{") and "_raw_params" in data:  # Ansible's parse_kv keeps such words there
            words = "" if secret else f" ({clip(repr(str(data['_raw_params'])), 80)})"
            problems.append(Problem("EXTRA_VARS", f"-e {shown}", f"-e {shown} has text that is not key=value{words}, "
                                    f"which sets no variable (Ansible keeps it as _raw_params); accepted: {_ACCEPTED_E}",
                                    "quote a value with spaces (key='a b'), and give a structured value as one JSON/YAML "
                                    """mapping: -e '{"glmops_checkpoint": {"size_gib": 300}}'"""))
    if problems:
        raise ValidationError(problems)


def _inline_to_files(tmpdir: list[str], extra: tuple[str, ...]) -> tuple[str, ...]:
    """Each inline ``-e`` (``key=value`` words, ``{...}``) as ``@FILE``: parsed as
    ``ansible-playbook`` parses it (``glmops.ansible_options.extra_vars``) and written as JSON
    to a 0600 file in the command's 0700 temporary directory (removed when it ends), so the
    values never reach ``ansible-playbook``'s argv or the run's artifacts (``env/cmdline``,
    ``artifacts/run/command``), only the path does. Order, and so precedence, is kept. A value
    whose name says it is a secret prints a warning: it is still in this command's own argv."""
    import json

    from ansible.parsing.dataloader import DataLoader

    from glmops.ansible_options import extra_vars
    from glmops.model import is_secret

    out = []
    for opt in extra:
        if opt.startswith("@"):
            out.append(opt)
            continue
        data = extra_vars(DataLoader(), AnsibleOptions(extra_vars=(opt,)))
        for key in sorted(k for k in data if is_secret(str(k))):  # glmops.model's patterns
            click.echo(f"warning [SECRET_IN_ARGV] -e:{key}: its value is in this command's own argv (ps, shell "
                       "history); glmops hands it to Ansible in a 0600 file only (hint: keep it in Ansible Vault: "
                       "-e @vault.yml --vault-password-file FILE)", err=True)
        if not tmpdir:
            tmpdir.append(tempfile.mkdtemp(prefix="glmops-vault-"))  # mode 0700
        path = os.path.join(tmpdir[0], f"extra-vars-{len(out)}.json")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(data, fh, default=str)
        out.append(f"@{path}")
    return tuple(out)


def ansible_options(fn, short_e: bool = True):
    """Add the shared Ansible options to the click command function ``fn`` (see the module
    docstring); ``short_e=False`` spells extra vars ``--extra-vars`` only (a verb whose ``-e``
    means something else)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        extra, ids, files, ask = (kwargs.pop(n) for n in _NAMES)
        tmpdir: list[str] = []
        try:
            ids = tuple(f"{vid.split('@', 1)[0]}@{_password_file(tmpdir, vid.split('@', 1)[0])}"
                        if vid.endswith("@prompt") or vid == "prompt" else vid for vid in ids)
            files = tuple(files) + ((_password_file(tmpdir, ""),) if ask else ())
            check_extra_vars(tuple(extra))  # a bad -e ends here, before any read or run (exit 2)
            given, extra = tuple(extra), _inline_to_files(tmpdir, tuple(extra))
            inline = tuple(opt[1:] for opt in extra if opt not in given)
            with using(AnsibleOptions(extra_vars=extra, vault_ids=ids, vault_password_files=files,
                                      inline_files=inline)) as opts:
                if extra:  # a run-control variable (glmops_plan_handoff, ...) in -e: exit 2, before any run
                    from glmops.planning import refuse_run_variables

                    refuse_run_variables(opts)
                return fn(*args, **kwargs)
        finally:
            if tmpdir:
                shutil.rmtree(tmpdir[0], ignore_errors=True)

    for decorator in reversed((
        click.option(*(("-e",) if short_e else ()), "--extra-vars", "extra_vars", multiple=True, metavar="VARS",
                     help="Extra variables, as ansible-playbook -e: key=value, JSON/YAML, or @FILE (repeatable; "
                          "they win over the inventory)."),
        click.option("--vault-id", "vault_ids", multiple=True, metavar="[LABEL@]SOURCE",
                     help="Vault identity: a password file or client script, or LABEL@prompt (repeatable)."),
        click.option("--vault-password-file", "vault_password_files", multiple=True, type=click.Path(),
                     help="File (or script) holding the Vault password (repeatable)."),
        click.option("--ask-vault-pass", "ask_vault_pass", is_flag=True, help="Ask for the Vault password."),
    )):
        wrapper = decorator(wrapper)
    # listed after the command's own options in --help (click shows __click_params__ reversed)
    params = wrapper.__click_params__
    params[0:0] = [params.pop() for _ in range(4)][::-1]
    return wrapper


#: ``@ANSIBLE_OPTS``: -e/--extra-vars, --vault-id, --vault-password-file, --ask-vault-pass
ANSIBLE_OPTS = ansible_options
#: the same without the ``-e`` short form (``glmops upgrade``, whose ``-e`` is ``--set``)
ANSIBLE_OPTS_LONG = functools.partial(ansible_options, short_e=False)
