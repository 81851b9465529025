"""``glmops known-hosts -i INV``: accept the SSH host keys of an inventory's hosts.

Every glmops run checks host keys (``glmops.runner`` sets ``ANSIBLE_HOST_KEY_CHECKING=True``),
so the first contact with a new host fails until its key is known. This verb reads the
inventory's hosts (Ansible's ``InventoryManager``: ``ansible_host``, ``ansible_port``, and a
``UserKnownHostsFile=`` in ``ansible_ssh_common_args``/``ansible_ssh_extra_args``), runs
``ssh-keyscan`` for each host not yet known and appends its keys (hashed names, ``ssh-keyscan
-H``) to that file (default ``~/.ssh/known_hosts``), printing each key's fingerprint.

A host whose known key differs from the one it offers now is never rewritten: it is reported
(exit 1) with ``ssh-keygen -R`` as the way to drop the old key after checking the host.
Exit codes: 0 every host known or added, 1 a host unreachable or with a changed key,
2 bad input (an inventory that cannot be read, an address that is an option).
"""
from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import click
from ansible.vars.manager import VariableManager

from glmops.commands.ansible_opts import ANSIBLE_OPTS
from glmops.inventory import ADDRESS, _parse
from glmops.model import Problem, ValidationError

#: seconds ssh-keyscan waits for one host
KEYSCAN_TIMEOUT_S = 5


def _known_hosts_file(host_vars: dict, default: str) -> str:
    for key in ("ansible_ssh_common_args", "ansible_ssh_extra_args"):
        words = shlex.split(str(host_vars.get(key) or ""))
        for i, word in enumerate(words):
            text = word[2:] if word.startswith("-o") and len(word) > 2 else (
                words[i + 1] if word == "-o" and i + 1 < len(words) else "")
            name, _, value = text.partition("=")
            if name.strip().lower() == "userknownhostsfile" and value.strip():
                return os.path.expanduser(value.strip().split()[0])
    return default


def targets(inventory: str, default_file: str) -> list[tuple[str, str, int, str]]:
    """``(inventory name, address, port, known_hosts file)`` per host (inventory order).
    Raises ValidationError for an unreadable inventory or an address/port that is not one."""
    inv, loader = _parse(inventory)
    variables = VariableManager(loader=loader, inventory=inv)
    out, problems = [], []
    for host in inv.hosts.values():
        hv = variables.get_vars(host=host, include_hostvars=False)
        address = str(hv.get("ansible_host") or host.name)
        port = hv.get("ansible_port") or 22
        if not ADDRESS.match(address):
            problems.append(Problem("ADDRESS", f"{inventory}:{host.name}",
                                    f"address {address!r} is not accepted; accepted: a host name, an IPv4 or an IPv6 address"))
            continue
        try:
            port = int(port)
            if not 1 <= port <= 65535:
                raise ValueError
        except (TypeError, ValueError):
            problems.append(Problem("RANGE", f"{inventory}:{host.name}.ansible_port",
                                    f"ansible_port {port!r} is not accepted; accepted: 1..65535"))
            continue
        out.append((host.name, address, port, _known_hosts_file(hv, default_file)))
    if problems:
        raise ValidationError(problems)
    return out


def _lookup_name(address: str, port: int) -> str:
    return address if port == 22 else f"[{address}]:{port}"


def _keys_of(text: str) -> set[tuple[str, str]]:
    keys = set()
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 3 and not line.startswith("#"):
            keys.add((parts[-2], parts[-1]) if parts[0].startswith("@") else (parts[1], parts[2]))
    return keys


def accept(address: str, port: int, known_file: str) -> tuple[str, str]:
    """Scan ``address:port`` and append its keys to ``known_file`` unless known.
    Returns (state, text): state ``known`` | ``added`` | ``changed`` | ``unreachable``."""
    name = _lookup_name(address, port)
    scan = subprocess.run(["ssh-keyscan", "-T", str(KEYSCAN_TIMEOUT_S), "-p", str(port), "--", address],
                          capture_output=True, text=True, timeout=KEYSCAN_TIMEOUT_S * 6)
    offered = _keys_of(scan.stdout)
    if not offered:
        return "unreachable", f"ssh-keyscan got no host key from {name}: {scan.stderr.strip()[-200:]}"
    known_text = ""
    if os.path.exists(known_file):
        found = subprocess.run(["ssh-keygen", "-F", name, "-f", known_file], capture_output=True, text=True)
        known_text = found.stdout if found.returncode == 0 else ""
    known = _keys_of(known_text)
    if known:
        known_types = {t for t, _ in known}
        if offered & known:
            return "known", f"{name}: already in {known_file}"
        if known_types & {t for t, _ in offered}:
            return "changed", (f"{name}: the host offers a key other than the one in {known_file}; not changed. "
                               f"Check the host, then `ssh-keygen -R {shlex.quote(name)} -f {shlex.quote(known_file)}` "
                               "and run known-hosts again")
    hashed = subprocess.run(["ssh-keyscan", "-H", "-T", str(KEYSCAN_TIMEOUT_S), "-p", str(port), "--", address],
                            capture_output=True, text=True, timeout=KEYSCAN_TIMEOUT_S * 6)
    lines = [line for line in hashed.stdout.splitlines() if line and not line.startswith("#")
             and tuple(line.split()[1:3]) in offered]
    if not lines:
        return "unreachable", f"ssh-keyscan got no host key from {name} on the second scan"
    path = Path(known_file)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    with open(path, "a", encoding="utf-8") as fh:
        fh.write("".join(line + "\n" for line in lines))
    if path.stat().st_mode & 0o022:
        os.chmod(path, 0o600)
    prints = subprocess.run(["ssh-keygen", "-l", "-f", "-"], input="".join(f"{name} {t} {k}\n" for t, k in offered),
                            capture_output=True, text=True).stdout.strip()
    return "added", f"{name}: added to {known_file}\n" + "\n".join(f"    {p}" for p in prints.splitlines())


@click.command("known-hosts")
@ANSIBLE_OPTS
@click.option("-i", "--inventory", required=True, type=click.Path(),
              help="Inventory directory (hosts.yml + group_vars/) or file.")
@click.option("--file", "known_file", default="~/.ssh/known_hosts", show_default=True,
              help="known_hosts file for hosts whose inventory names none (UserKnownHostsFile=).")
def known_hosts(inventory: str, known_file: str) -> None:
    """Accept the SSH host keys of the inventory's hosts (ssh-keyscan; never replaces a changed key)."""
    try:
        hosts = targets(inventory, os.path.expanduser(known_file))
    except ValidationError as exc:
        click.echo(f"{len(exc.problems)} problem(s) in {inventory}:", err=True)
        for p in exc.problems:
            click.echo(f"  {p}", err=True)
        sys.exit(2)
    bad = 0
    for name, address, port, path in hosts:
        state, text = accept(address, port, path)
        bad += state in ("changed", "unreachable")
        click.echo(f"{name}: {state}: {text}")
    sys.exit(1 if bad else 0)


