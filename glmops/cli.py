"""The ``glmops`` command. Verbs are thin: each one lives in the module named in
``VERBS`` and is imported only when called, so ``glmops --help`` stays fast.

Exit codes: 0 ok, 1 a run failed (a host, a unit, a check), 2 bad input
(every problem printed at once, no host contacted).
"""
from __future__ import annotations

import importlib

import click

# verb -> (module:attribute of a click command, one-line help shown by --help)
VERBS: dict[str, tuple[str, str]] = {
    "validate": ("glmops.commands.core:validate", "Check an inventory; print every problem (exit 2)."),
    "plan": ("glmops.commands.core:plan", "Show which services run where; their flags with --format yaml, their files with --out."),
    "known-hosts": ("glmops.commands.hostkeys:known_hosts", "Accept the SSH host keys of the inventory's hosts (ssh-keyscan)."),
    "targets": ("glmops.commands.monitoring:targets", "Print the deployment's Prometheus scrape targets (file_sd JSON)."),
    "lab": ("glmops.lab.cli:lab", "Local systemd-nspawn hosts to rehearse on."),
    "download": ("glmops.commands.download:download", "Fetch the pinned checkpoint once, verify it, copy it to every serving host."),
    "provision": ("glmops.commands.provision:provision", "Install the NVIDIA driver stack and container toolkit, then run every precheck."),
    "check": ("glmops.commands.provision:check", "Check hosts against what the deployment needs (--json: a report per node)."),
    "deploy": ("glmops.commands.deploy:deploy", "Place the Plan's services under systemd, start them gated on readiness."),
    "serve": ("glmops.commands.deploy:serve", "Like deploy, services only (no runtime install)."),
    "status": ("glmops.commands.status:status", "Per service: unit state, health, uptime, GPUs, URL."),
    "logs": ("glmops.commands.status:logs", "Journal lines of the services (-f to follow)."),
    "restart": ("glmops.commands.lifecycle:restart", "Restart services, gated on readiness (--rolling)."),
    "stop": ("glmops.commands.lifecycle:stop", "Stop the router, then the workers."),
    "destroy": ("glmops.commands.lifecycle:destroy", "Remove units and env files (--yes; checkpoints stay)."),
    "smoke": ("glmops.commands.smoke:smoke", "Check the endpoint: completion, reasoning, tool call, JSON, stream, image."),
    "bench": ("glmops.commands.bench:bench", "Sweep concurrency with aiperf; table, Pareto PNG, compare runs."),
    "history": ("glmops.commands.history:history", "List the generations (what each deploy placed) on every host."),
    "upgrade": ("glmops.commands.day2:upgrade", "Roll a new engine version or setting out one replica at a time, gated."),
    "rollback": ("glmops.commands.day2:rollback", "Put the previous (or --to N) generation back, one replica at a time."),
}


class LazyGroup(click.Group):
    """A click group whose subcommands are imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(VERBS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in VERBS:
            return None
        target, _ = VERBS[name]
        module, attr = target.split(":")
        return getattr(importlib.import_module(module), attr)

    def invoke(self, ctx: click.Context):
        """Run the verb; what a verb did not handle still ends plainly: an inventory problem
        (``ValidationError``, an Ansible parse error) exits 2 with every problem listed, any
        other error exits 1 with one line. ``GLMOPS_DEBUG=1`` shows the traceback instead."""
        try:
            return super().invoke(ctx)
        except BrokenPipeError:
            # the reader went away (`glmops validate | head`): stop quietly, like other CLIs
            import os
            import sys

            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            ctx.exit(1)
        except (click.exceptions.Exit, click.ClickException, click.Abort, SystemExit, KeyboardInterrupt):
            raise
        except Exception as exc:  # noqa: BLE001 - the last line of defence, see the docstring
            import os

            if os.environ.get("GLMOPS_DEBUG"):
                raise
            from glmops.model import ValidationError

            if isinstance(exc, ValidationError):
                click.echo(f"{len(exc.problems)} problem(s); nothing was changed:", err=True)
                for problem in exc.problems:
                    click.echo(f"  {problem}", err=True)
                ctx.exit(2)
            if type(exc).__module__.startswith("ansible") and "Parser" in type(exc).__name__:
                click.echo(f"error: the inventory cannot be read: {str(exc).splitlines()[0] if str(exc) else exc!r}",
                           err=True)
                ctx.exit(2)
            click.echo(f"error: {type(exc).__name__}: {exc}\n(set GLMOPS_DEBUG=1 to see where)", err=True)
            ctx.exit(1)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, VERBS[name][1]) for name in self.list_commands(ctx)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="glmops")
def main() -> None:
    """Take bare GPU hosts to a serving, health-checked, benchmarked GLM-5.3 endpoint."""


if __name__ == "__main__":  # pragma: no cover
    main()
