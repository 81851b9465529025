"""Plan -> files on hosts: systemd units, env files, engine config files, the
deployment target, and the ``docker run`` form for the container runtime.

Templates live in ``glmops/templates/`` (jinja2). Every function is pure (text in,
text out) except :func:`write_tree`, which writes ``glmops plan --out DIR``.

Unit conventions (docs/DEVELOPING.md, field cases F07/F08): one unit per service,
``PartOf=``/``WantedBy=`` the deployment's target ``glm-<dep>.target``,
``Restart=always`` (an engine that stops while it should serve is restarted whatever its exit
status: vLLM exits 0 after its engine core died, FINDINGS.md) with a start limit that trips for slow
failures too (:func:`start_limit_interval_s`, field case F32), ``TimeoutStartSec`` sized for the checkpoint, ``LimitMEMLOCK=infinity`` (RDMA
registration), ``LimitNOFILE``, ``EnvironmentFile=`` the 0600 env file, a dedicated
``User=``, hardening without ``PrivateDevices`` so ``/dev/nvidia*`` stays reachable.
Container runtime: ``docker run --ipc=host --network=host --gpus '"device=..."'
--ulimit memlock=-1`` with the models mount and ``--env-file``.
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from glmops import monitoring
from glmops.engines.base import CATALOG, checkpoint_timeout_s
from glmops.model import CONTROL_CHARS, ENV_NAME, ConfigFile, Deployment, Plan, Service, is_secret
from glmops.unitsyntax import RESTART_SEC, START_LIMIT_BURST, jinja_env as _env, systemd_quote  # noqa: F401

DOCKER = "/usr/bin/docker"
NOFILE = 1048576
_ENV_SAFE = re.compile(r"^[A-Za-z0-9_@+=:,./*-]*\Z")


@dataclass
class RenderedFile:
    """A file a deploy places on a host: absolute ``path``, text ``content``, octal ``mode``."""

    path: str
    content: str
    mode: str = "0644"


def target_name(dep: Deployment) -> str:
    """``glm-<dep>.target``: every unit of the deployment is ``PartOf=`` it."""
    return f"glm-{dep.name}.target"


def env_path(dep: Deployment, svc: Service) -> str:
    """``/etc/glmops/<dep>/<service>.env`` (mode 0600)."""
    return f"{dep.config_dir}/{dep.name}/{svc.name}.env"


def container_argv(dep: Deployment, svc: Service) -> list[str]:
    """The seeds' ``docker run`` form around ``svc.argv`` (binary as ``--entrypoint``)."""
    vendor = CATALOG.hardware(dep.hardware).get("vendor")
    argv = [DOCKER, "run", "--rm", "--name", svc.name, "--ipc=host", "--network=host"]
    if svc.gpus and vendor == "nvidia":
        argv += ["--gpus", '"device=' + ",".join(str(g) for g in svc.gpus) + '"']
    elif vendor == "amd":
        argv += ["--device", "/dev/kfd", "--device", "/dev/dri", "--group-add", "video"]
    argv += ["--ulimit", "memlock=-1", "--ulimit", f"nofile={NOFILE}"]
    model_dir = dep.checkpoint.model_dir
    argv += ["-v", f"{model_dir}:{model_dir}:ro",
             "-v", f"{dep.config_dir}/{dep.name}:{dep.config_dir}/{dep.name}:ro",
             "-v", f"{dep.state_dir}/{dep.name}:{dep.state_dir}/{dep.name}"]
    argv += ["--env-file", env_path(dep, svc)]
    argv += ["--entrypoint", svc.argv[0], svc.image] + list(svc.argv[1:])
    return argv


def exec_argv(dep: Deployment, svc: Service) -> list[str]:
    """What ``ExecStart=`` runs: the engine argv (venv) or the docker form (container)."""
    if svc.runtime == "container":
        if not svc.image:
            raise ValueError(f"{svc.name}: container runtime but no image for engine {svc.engine} "
                             "(set glmops_image or use glmops_runtime: venv)")
        return container_argv(dep, svc)
    return list(svc.argv)


def env_lines(dep: Deployment, svc: Service) -> list[tuple[str, str]]:
    """Sorted env pairs for the env file. In containers the device list is chosen by
    ``--gpus``, so ``CUDA_VISIBLE_DEVICES`` (host numbering) is left out."""
    env = dict(svc.env)
    if svc.runtime == "container":
        env.pop("CUDA_VISIBLE_DEVICES", None)
    out = []
    for key in sorted(env):
        if not ENV_NAME.match(key):
            raise ValueError(f"{svc.name}: environment variable name {key!r} is not valid (letters, digits, _)")
        value = str(env[key])
        if CONTROL_CHARS.search(value):
            raise ValueError(f"{svc.name}: environment variable {key} has a control character in its value")
        if not _ENV_SAFE.match(value):
            value = '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
        out.append((key, value))
    return out


def env_text(dep: Deployment, svc: Service) -> str:
    """The ``EnvironmentFile=`` text (KEY=VALUE lines, systemd syntax; also read by
    ``docker run --env-file``)."""
    return _env().get_template("service.env.j2").render(dep=dep, svc=svc, env=env_lines(dep, svc))


def unit_text(dep: Deployment, svc: Service, plan: Plan | None = None) -> str:
    """The systemd unit for ``svc``. Same-host ``depends_on`` become ``After=``."""
    after = []
    if plan is not None:
        same = {s.name for s in plan.services if s.host == svc.host}
        after = [f"{d}.service" for d in svc.depends_on if d in same]
    return _env().get_template("unit.service.j2").render(
        dep=dep, svc=svc, container=svc.runtime == "container", after=after,
        target=target_name(dep), user=dep.service_user, env_path=env_path(dep, svc),
        home=f"{dep.state_dir}/{dep.name}", state_subdir=_state_subdir(dep),
        exec_start=" ".join(systemd_quote(w) for w in exec_argv(dep, svc)),
        docker=DOCKER, timeout_start=checkpoint_timeout_s(dep), nofile=NOFILE,
        start_limit_interval=start_limit_interval_s(checkpoint_timeout_s(dep)), start_limit_burst=START_LIMIT_BURST,
        restart_sec=RESTART_SEC,
    )


def start_limit_interval_s(timeout_start_s: int, burst: int = START_LIMIT_BURST, restart_sec: int = RESTART_SEC) -> int:
    """``StartLimitIntervalSec=`` (seconds) for a unit whose start may take up to ``timeout_start_s``.

    systemd counts starts in a fixed window that opens at the first start
    (src/basic/ratelimit.c: the count resets only once ``interval`` has passed since the
    window opened) and refuses the start after ``burst`` starts in it. A failure that always
    comes T seconds after start (T up to ``TimeoutStartSec``) starts the unit every
    T + ``RestartSec`` seconds, so a window of (burst + 1) x (TimeoutStartSec + RestartSec) still
    holds the refused start: the unit stops after ``burst`` starts however slow the failure
    (field case F32; a 1800 s window let a failure after a 30-minute load restart forever).
    """
    return (burst + 1) * (int(timeout_start_s) + restart_sec)


def _state_subdir(dep: Deployment) -> str:
    root = dep.state_dir.rstrip("/")
    if root.startswith("/var/lib/"):
        return f"{root[len('/var/lib/'):]}/{dep.name}"
    raise ValueError(f"state_dir {dep.state_dir!r} must be under /var/lib (systemd StateDirectory=)")


def target_text(dep: Deployment, plan: Plan, host: str) -> str:
    """``glm-<dep>.target`` for ``host``: ``Wants=`` every unit of the deployment there."""
    units = [s.unit for s in plan.on_host(host)]
    return _env().get_template("deployment.target.j2").render(dep=dep, host=host, units=units)


def config_text(cf: ConfigFile) -> str:
    """A ConfigFile as text: YAML (block style, keys in the plan's order, ``null`` kept),
    JSON (indented), or the string itself."""
    if cf.format == "yaml":
        import yaml

        return yaml.safe_dump(cf.content, sort_keys=False, default_flow_style=False)
    if cf.format == "json":
        return json.dumps(cf.content, indent=2) + "\n"
    return str(cf.content)


UNIT_DIR = "/etc/systemd/system"


def placed(dep: Deployment, path: str) -> str:
    """``path`` when it is a file glmops may place on a host: absolute, normalised (no ``.``,
    ``..``, ``//``) and below ``/etc/systemd/system``, ``<config_dir>/<deployment>`` or
    ``<state_dir>/<deployment>``. Raises ValueError otherwise (a value that escaped the
    inventory's checks must not choose where a file lands)."""
    roots = [UNIT_DIR, f"{dep.config_dir.rstrip('/')}/{dep.name}", f"{dep.state_dir.rstrip('/')}/{dep.name}"]
    ok = (path.startswith("/") and os.path.normpath(path) == path and "/" not in dep.name
          and dep.name not in ("", ".", "..") and any(path.startswith(root + "/") for root in roots))
    if not ok:
        raise ValueError(f"file {path!r} is not below {', '.join(roots)}; refused")
    return path


def host_files(dep: Deployment, plan: Plan, host: str) -> list[RenderedFile]:
    """Every file a deploy places on ``host``: units, target, env files (0600), configs.
    Raises ValueError for a path outside the places of :func:`placed`."""
    files: list[RenderedFile] = []
    for svc in plan.on_host(host):
        files.append(RenderedFile(f"{UNIT_DIR}/{svc.unit}", unit_text(dep, svc, plan)))
        files.append(RenderedFile(env_path(dep, svc), env_text(dep, svc), "0600"))
        for cf in svc.files:
            files.append(RenderedFile(cf.path, config_text(cf), cf.mode))
    files.append(RenderedFile(f"{UNIT_DIR}/{target_name(dep)}", target_text(dep, plan, host)))
    for f in files:
        placed(dep, f.path)
    return files


#: a host's directory name under ``plan --out`` (the inventory's host-name shape)
#: plan --out's directory for what is no host's: the scrape targets (no host name starts with "_")
MONITORING_DIR = "_monitoring"
_HOST_DIR = re.compile(r"^[A-Za-z0-9\[][A-Za-z0-9.:_\-\]%]*\Z")


def redact_text(dep: Deployment, content: str) -> str:
    """``content`` with its secrets as ``<redacted>``: every ``NAME=VALUE`` line whose name or
    value is secret (``glmops.model.is_secret``: ``*API_KEY*``, ``*TOKEN``, a Vault value, ...)
    keeps its name, and every other occurrence of the API key or a Vault value is replaced."""
    values = set(dep.secret_values or ()) | ({dep.api_key} if dep.api_key else set())
    out = []
    for line in content.splitlines(keepends=True):
        name, eq, value = line.partition("=")
        if eq and ENV_NAME.match(name.strip()) and is_secret(name.strip(), value.strip(), frozenset(values)):
            line = f"{name}=<redacted>" + ("\n" if line.endswith("\n") else "")
        out.append(line)
    text = "".join(out)
    for secret in sorted((v for v in values if len(v) >= 4), key=len, reverse=True):
        text = text.replace(secret, "<redacted>")
    return text


def write_tree(dep: Deployment, plan: Plan, out_dir: str | os.PathLike, secrets: bool = False) -> list[Path]:
    """Write ``OUT/<host>/<absolute path>`` for every host's files, with their modes, the
    Prometheus host's (``glmops_monitoring.enabled``), the exporters' units and drop-ins
    (glmops.monitoring.exporter_files) and ``OUT/_monitoring/file_sd/glmops-<dep>.json``.
    Secrets are written as ``<redacted>`` (:func:`redact_text`; a tree for review or a CI
    artifact) unless ``secrets`` (the files exactly as a deploy places them).
    Returns the written paths. Every file is rendered and every target path resolved
    (symlinks followed) before the first is written; a path that would land outside
    ``OUT/<host>`` or a host name that is not one (``/``, ``../..``) is refused with
    ValueError, leaving ``out_dir`` as it was."""
    written: list[Path] = []
    root = Path(os.path.realpath(out_dir))
    rendered = [(host, f) for host in plan.hosts for f in host_files(dep, plan, host)]
    mon = monitoring.settings(dep)
    rendered += [(mon["host"], RenderedFile(p, c, m)) for p, c, m in monitoring.host_files(dep, plan)]
    # the exporters' units and hardening drop-ins (node exporter, Prometheus, DCGM exporter)
    rendered += [(h, RenderedFile(p, c, m)) for h, p, c, m in monitoring.exporter_files(dep, plan)]
    # the scrape targets for a Prometheus of your own (glmops targets prints the same)
    rendered.append((MONITORING_DIR, RenderedFile(f"/file_sd/{monitoring.file_sd_name(dep)}",
                                                  monitoring.targets_json(dep, plan))))
    targets = []
    for host, f in rendered:
        if host != MONITORING_DIR and (not _HOST_DIR.match(host) or host in (".", "..")):
            raise ValueError(f"host name {host!r} cannot name a directory under {out_dir}; refused")
        base = root / host
        path = Path(os.path.realpath(base / f.path.lstrip("/")))
        if not path.is_relative_to(base) or path == base:
            raise ValueError(f"{f.path} of host {host} would be written to {path}, outside {base}; refused")
        targets.append((path, f))
    for path, f in targets:
        path.parent.mkdir(parents=True, exist_ok=True)
        # owner-only while the content is written, then the file's mode: a 0600 env file with
        # --with-secrets is never readable by others in between (umask 022 made it 0644 first)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            os.fchmod(fd, 0o600)
            fh.write(f.content if secrets else redact_text(dep, f.content))
            fh.flush()
            os.fchmod(fd, int(f.mode, 8))
        written.append(path)
    return written
