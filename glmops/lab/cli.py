"""``glmops lab up|status|down``: local systemd-nspawn hosts to rehearse deploys on.

Exit codes: 0 ok, 1 a step failed (what failed is printed), 2 bad input or a precondition
(every problem printed at once, nothing made).
"""
from __future__ import annotations

import json
import shutil
import sys
import time

import click

from glmops.lab.spec import DEFAULT_NAME, DEFAULT_SUBNET, PROFILES, Bind, default_binds
from glmops.output import console as make_console
from glmops.output import stamp

err = make_console(stderr=True)


def progress(t0: float):
    """The log function of ``lab up`` and ``lab down``: ``HH:MM:SS   4.2s message`` on stderr
    (wall clock, seconds since ``t0``, a ``time.monotonic()``)."""
    return lambda m: err.print(f"{stamp()} [dim]{time.monotonic() - t0:5.1f}s[/dim] {m}", soft_wrap=True)


def _problems(exc) -> None:
    for p in exc.problems:
        err.print(f"[red]error:[/red] {p}", markup=True, soft_wrap=True)


@click.group()
def lab() -> None:
    """Local systemd-nspawn hosts (real systemd, sshd, Ansible) to rehearse deploys on.

    State: /var/lib/glmops-lab/NAME/ (inventory.yml, id_ed25519, ssh_config). Needs root.
    """


@lab.command()
@click.option("--hosts", "-n", "count", type=int, default=1, show_default=True, help="Number of hosts lab-1..lab-N.")
@click.option("--profile", default="cpu", show_default=True, metavar="|".join(PROFILES),
              help="cpu: no GPUs; *-sim: 8 simulated GPUs (strict nvidia-smi double).")
@click.option("--name", default=DEFAULT_NAME, show_default=True, help="Lab name (state dir, bridge).")
@click.option("--subnet", default=DEFAULT_SUBNET, show_default=True,
              help="IPv4 /24 for the bridge (gateway .1, hosts .11..), or 'auto' for a free 10.77.X.0/24.")
@click.option("--bind", "binds", multiple=True, metavar="SRC:DST[:rw]",
              help="Extra directory to bind into every host (read-only unless :rw). Repeatable.")
@click.option("--no-default-binds", is_flag=True,
              help="Do not bind ~/.cache/glmops/{wheelhouse,models} into the hosts (and, for the cpu "
                   "profile, do not prepare the lab's serving kit: wheel sets, tiny model, shared KV dir).")
@click.option("--install-missing", is_flag=True, help="apt-get install missing tools (systemd-container, debootstrap, nftables, zstd).")
@click.option("--keep-on-failure", is_flag=True, help="Leave a failed lab in place for inspection.")
@click.option("--timeout", type=float, default=90.0, show_default=True, help="Seconds to wait for the hosts to boot.")
@click.option("--json", "as_json", is_flag=True, help="Print the lab's status as JSON on stdout.")
def up(count: int, profile: str, name: str, subnet: str, binds: tuple[str, ...], no_default_binds: bool,
       install_missing: bool, keep_on_failure: bool, timeout: float, as_json: bool) -> None:
    """Boot N hosts on a private bridge and write an Ansible inventory for them."""
    from glmops.lab import core

    from glmops.lab import kit, profiles

    problems, explicit = [], []
    for text in binds:
        try:
            explicit.append(Bind.parse(text))
        except ValueError as exc:
            problems.append(str(exc))
    # every problem at once, before anything is installed, built or created
    problems += [p for p in (core.check_name(name) + profiles.check_profile(profile)
                             + core.root_problem()) if p not in problems]
    if not 1 <= count <= core.MAX_HOSTS:
        problems.append(f"--hosts {count}: accepted 1..{core.MAX_HOSTS}")
    problems += core.subnet_syntax_problems(subnet, count)
    if problems:
        _problems(core.LabError(problems))
        sys.exit(2)
    if install_missing and not core.root_problem():
        core.install_missing_tools(lambda m: err.print(f"[dim]{m}[/dim]"))
    t0 = time.monotonic()
    from glmops.lab import spec as lab_spec

    shared_existed = lab_spec.shared_dir(name).exists()
    defaults: list[Bind] = []
    if not no_default_binds:
        if profile == "cpu" and not core.root_problem():
            # the serving kit inventories/lab deploys from (glmops/lab/kit.py), cached
            with err.status("lab: wheel sets and the lab model (cached after the first time)", spinner="dots"):
                kit_binds = kit.prepare(name, log=progress(t0))
        else:
            kit_binds = []
        defaults = default_binds() + kit_binds
    parsed = kit.merge(defaults, explicit)
    try:
        with err.status(f"lab {name}: booting {count} host(s)", spinner="dots"):
            st = core.up(name=name, hosts=count, profile=profile, subnet=subnet, binds=parsed,
                         keep_on_failure=keep_on_failure, boot_timeout=timeout,
                         log=progress(t0))
    except core.LabError as exc:
        if not shared_existed and not lab_spec.state_dir(name).exists():
            # refused before any host existed: the kit's shared dir made above goes too
            shutil.rmtree(lab_spec.shared_dir(name), ignore_errors=True)
        _problems(exc)
        sys.exit(exc.exit_code)
    if as_json:
        click.echo(json.dumps(core.status(st.name)[0], indent=1))
    else:
        err.print(f"[green]ready[/green]: ansible -i {st.dir / 'inventory.yml'} lab -m ping   |   "
                  f"ssh -F {st.dir / 'ssh_config'} lab-1")
        err.print(core.inventory_hint(st), markup=False, soft_wrap=True)


@lab.command()
@click.option("--name", default=None, help="Only this lab (default: all labs).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def status(name: str | None, as_json: bool) -> None:
    """Show labs, their hosts and whether each host is up (nspawn alive, port 22 open)."""
    from glmops.lab import core

    labs = core.status(name)
    if as_json:
        click.echo(json.dumps(labs, indent=1))
        return
    if not labs:
        err.print("no labs" + (f" named {name!r}" if name else ""))
        sys.exit(1 if name else 0)
    from rich.table import Table

    for lab_ in labs:
        out = make_console()
        out.print(f"[bold]lab {lab_['name']}[/bold] ({lab_['profile']}, {lab_['subnet']}, bridge {lab_['bridge']}, "
                  f"supervisor {'running' if lab_['supervisor_alive'] else '[red]gone[/red]'})")
        t = Table()
        for col in ("host", "address", "nspawn pid", "up"):
            t.add_column(col)
        for h in lab_["hosts"]:
            t.add_row(h["name"], h["address"], str(h["nspawn_pid"] or "-"),
                      "[green]yes[/green]" if h["up"] else "[red]no[/red]")
        out.print(t)
        out.print(f"inventory: {lab_['inventory']}")


@lab.command()
@click.option("--name", default=DEFAULT_NAME, show_default=True, help="Lab to remove.")
def down(name: str) -> None:
    """Stop the hosts and remove everything the lab made (mounts, cgroups, bridge, nft, state)."""
    from glmops.lab import core

    try:
        with err.status(f"lab {name}: stopping", spinner="dots"):
            found = core.down(name, log=progress(time.monotonic()))
    except core.LabError as exc:
        _problems(exc)
        sys.exit(exc.exit_code)
    if not found:
        err.print(f"no lab named {name!r}: nothing to do")


# `glmops lab wheelhouse build|status` and `glmops lab model build` (glmops/lab/wheelhouse.py,
# glmops/lab/tinymodel.py; stdlib + click only, cheap to import).
from glmops.lab.tinymodel import tinymodel_cli  # noqa: E402
from glmops.lab.wheelhouse import wheelhouse_cli  # noqa: E402

lab.add_command(wheelhouse_cli, "wheelhouse")
lab.add_command(tinymodel_cli, "model")
