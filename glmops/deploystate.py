"""Is a host already what the Plan wants? The deploy's one read per host, and what it decides.

A no-op redeploy should cost about one look at each host (issue 4: no-op <= 1.5x
``ansible all -m setup``). ``playbooks/plays/read.yml`` runs the ``glmops_deploy_read``
action once per host: one round trip (:mod:`glmops.hostread`) runs the precheck facts, the
engine service state of the host's workers and routers (files, units, /health), the venv
probe of each engine runtime and reads the host's deploy stamp. :func:`decide` then says
whether the host is *in state*; only the hosts that are not go through the runtime, service
and record plays. Hosts whose NVIDIA roles are enabled are always provisioned
(:func:`provision_roles`): driver and fabric manager stay fully convergent.

In state means all of:

* every precheck passes (``glmops.prechecks``, the same needs as the prechecks role);
* the service user exists, no file, directory or unit of the host's services differs from
  the Plan (sha256, mode, owner, group), no stale unit, every unit active and enabled, every
  /health 200 (the ``state`` read of ``roles/engine_service/files/glmops_hostctl.py``);
* every venv runtime's marker exists, its wheelhouse manifest key is still the one installed
  (a rebuilt wheel set reinstalls), its Debian packages are installed; container runtimes
  are never in state (their images are checked by the runtime role);
* the host's deploy stamp (written by the record play after every service was ready) holds
  this run's :func:`deploy_key`: the Plan, the host's role input variables
  (``engine_runtime_*``, ``engine_service_*``, ``router_*``, ``generation_*``) and the
  roles and playbooks themselves, and the generation that deploy recorded is still the
  host's current one (no rollback or upgrade since). Any change of these sends the host the
  full way.

``glmops deploy --full`` (``-e glmops_fast=false``) sends every host the full way.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from glmops.resources import data_root

#: host variables that are inputs of the deploy's roles (role prefixes)
ROLE_VAR_PREFIXES = ("engine_runtime_", "engine_service_", "router_", "generation_")
_REPO = data_root()  # roles/ and playbooks/: the checkout's, else the installed copy's
_DIGEST: dict[str, str] = {}


def records_dir(state_dir: str, deployment: str) -> str:
    """Where glmops keeps its own records of a deployment on a host: ``<state_dir>/_records/<dep>``
    with ``generations/`` (glmops.generations) and ``deploy-stamp.json``. Root's alone: the
    state dir is root's (:func:`service_dirs`), the service user writes only its
    ``StateDirectory=`` ``<state_dir>/<dep>``, and ``_records`` is no deployment name
    (names are a-z, 0-9 and '-'), so no engine can rename or replace a record that root later
    restores files from."""
    return f"{state_dir.rstrip('/')}/_records/{deployment}"


def stamp_path(plan: dict) -> str:
    """The deploy stamp of a deployment on each of its hosts: ``<records_dir>/deploy-stamp.json``
    (``{"key": deploy_key, "generation": N}``, root, 0644), written by the record play."""
    return f"{records_dir(plan['state_dir'], plan['deployment'])}/deploy-stamp.json"


def service_dirs(config_dir: str, state_dir: str, user: str) -> list[dict[str, str]]:
    """The directories the engine_service role keeps: ``[{path, mode, owner, group}]``
    (config dir root:<user> 0750; state dir root:root 0755: each unit's ``StateDirectory=``
    under it is the service user's, the records beside them root's, :func:`records_dir`)."""
    return [{"path": config_dir, "mode": "0750", "owner": "root", "group": user},
            {"path": state_dir, "mode": "0755", "owner": "root", "group": "root"}]


def _spec(f: dict[str, Any], digest: str) -> str:
    return f"{f['path']}={digest}:{f['mode']}:{f['owner']}:{f['group']}"


def state_argv(bundle: dict, host_units: list[str], unit_glob: str, target: dict, user: str,
               config_dir: str, state_dir: str, stamp: str = "", current: str = "") -> list[str]:
    """argv of ``glmops_hostctl.py state`` for one bundle of a host's Plan (``workers`` or
    ``routers``: ``{services, files, secret_files}``, see :mod:`glmops.deployview`): the
    directories and files it wants (target file first), each unit with the files it
    depends on, the /health of each unit, the other units of the deployment on the host
    (``host_units``, never stale), the env files the host completes with the interface that
    holds its address (``ifname_env``, F17) and, with ``stamp`` and ``current``, the deploy stamp
    and the generations' ``current`` file to read."""
    files = ([target] if target.get("path") else []) + list(bundle.get("files", [])) + list(bundle.get("secret_files", []))
    argv = ["state", "--user", user, "--glob", unit_glob, "--target", target.get("name", ""),
            "--keep", *host_units,
            "--want", *[_spec(d, "dir") for d in service_dirs(config_dir, state_dir, user)],
            *[_spec(f, f["sha256"]) for f in files],
            "--unit", *[f"{s['unit']}={','.join(s['paths'])}" for s in bundle.get("services", [])],
            "--health", *[f"{s['unit']}|{s['health_url']}" for s in bundle.get("services", [])],
            "--runtime", *[f"{s['unit']}={s['runtime_marker']}" for s in bundle.get("services", [])
                           if s.get("runtime_marker")]]
    ifname = [f"{f['path']}|{f['ifname_address']}|{','.join(f['ifname_env'])}" for f in files if f.get("ifname_env")]
    if ifname:  # F17: env files the host completes with the interface holding its address (glmops.netif)
        argv += ["--ifname-env", *ifname]
    return argv + (["--stamp", stamp] if stamp else []) + (["--current", current] if current else [])


def provision_roles(hardware: str | None, runtime: str | None, driver_enabled: Any = None,
                    toolkit_enabled: Any = None) -> dict[str, bool]:
    """Which NVIDIA roles provision a host: ``{"driver": bool, "toolkit": bool}``.

    By default the driver stack on hardware whose catalog vendor is nvidia (``glmops_hardware``,
    ``catalog/hardware.yaml``), the container toolkit there too when the runtime is
    ``container`` (the default runtime when unset). ``nvidia_driver_enabled`` /
    ``container_toolkit_enabled`` (bool or None) win when set. Raises LookupError naming
    the accepted keys for unknown hardware."""
    from glmops import catalog

    nvidia = False
    if hardware and hardware != "cpu":
        nvidia = catalog.load().hw(hardware).get("vendor") == "nvidia"
    driver = nvidia if driver_enabled is None else _bool(driver_enabled)
    toolkit = ((runtime or "container") == "container" and nvidia) if toolkit_enabled is None else _bool(toolkit_enabled)
    return {"driver": driver, "toolkit": toolkit}


def _bool(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on", "y", "t")
    return bool(value)


def code_digest(root: Path = _REPO) -> str:
    """sha256 over every file under ``roles/`` and ``playbooks/`` of ``root`` (default: the
    checkout, else the installed copy, :func:`glmops.resources.data_root`; names and
    bytes; caches skipped): a changed role sends every host the full way once."""
    key = str(root)
    if key not in _DIGEST:
        h = hashlib.sha256()
        for top in ("roles", "playbooks"):
            for path in sorted((root / top).rglob("*")):
                if path.is_file() and "__pycache__" not in path.parts and not path.name.endswith(".pyc"):
                    h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
        _DIGEST[key] = h.hexdigest()
    return _DIGEST[key]


def deploy_key(plan: dict, host: str, role_vars: dict[str, Any], code: str) -> str:
    """sha256 of what a host's deploy depends on besides the host itself: the Plan, the
    host's name, its role input variables (``ROLE_VAR_PREFIXES``, templated values) and the
    roles' code digest (:func:`code_digest`)."""
    doc = {"plan": plan, "host": host, "vars": {k: role_vars[k] for k in sorted(role_vars)
                                                if k.startswith(ROLE_VAR_PREFIXES)}, "code": code}
    return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()


def services_in_state(state: dict) -> list[str]:
    """Why one ``glmops_hostctl.py state`` answer is not in state (empty: it is)."""
    why = []
    if not state.get("user"):
        why.append("the service user is missing")
    why += [f"{path} differs from the Plan" for path in state.get("drifted", [])]
    why += [f"{unit} is no longer in the Plan" for unit in state.get("stale", [])]
    for unit in state.get("restart", []):
        info = (state.get("units") or {}).get(unit) or {}
        if info.get("active") != "active":
            why.append(f"{unit} is not running ({info.get('active') or 'unknown'}/{info.get('sub') or '-'})")
        elif info.get("enabled") not in _ENABLED:
            why.append(f"{unit} is not enabled ({info.get('enabled') or 'unknown'})")
        elif unit in state.get("reinstalled", []):
            why.append(f"{unit} restarts: its engine runtime was reinstalled after it started")
        else:
            why.append(f"{unit} restarts for its changed files")
    why += [f"{unit} does not answer /health 200" for unit in state.get("unhealthy", [])]
    return why


#: UnitFileState values that start with the deployment target (as glmops_hostctl.py counts them)
_ENABLED = ("enabled", "enabled-runtime", "static", "linked")


def runtime_in_state(runtime: dict, probe: dict | None) -> list[str]:
    """Why one engine runtime is not in state (empty: it is). ``runtime``: the Plan's
    ``{engine, version, venv | mode, ...}``; ``probe``: ``glmops_runtime_probe.py``'s answer
    read with the marker's own wheelhouse (``{manifest, marker, packages}``)."""
    name = f"{runtime.get('engine')} {runtime.get('version')}"
    if runtime.get("mode", "venv") != "venv":
        return [f"{name}: the {runtime.get('mode')} runtime is checked by its role"]
    if not probe:
        return [f"{name}: the runtime probe did not answer"]
    marker = probe.get("marker") or {}
    want = marker.get("want") or {}
    if not marker.get("hash") or not want:
        return [f"{name}: {runtime.get('venv')} has no install marker"]
    why = []
    if want.get("source") == "wheelhouse" and (probe.get("manifest") or {}).get("key") != want.get("wheelhouse_key"):
        why.append(f"{name}: the wheel set at {want.get('wheelhouse', '?')} is not the one installed")
    have = probe.get("packages") or {}
    why += [f"{name}: Debian package {p} is not installed" for p in want.get("system_packages", [])
            if have.get(p) != "installed"]
    return why


def decide(prechecks_failed: list[str], states: list[dict], runtimes: list[tuple[dict, dict | None]],
           stamp: Any, current: Any, key: str) -> list[str]:
    """Why a host is not in state: every reason, empty when it is (see the module docstring).
    ``prechecks_failed``: the failed prechecks' lines; ``states``: the hostctl ``state``
    answers of its bundles; ``runtimes``: ``[(runtime, probe)]`` of the runtimes glmops
    installs there; ``stamp``: the deploy stamp's JSON or None; ``current``: the number in the
    generations' ``current`` file (str) or None."""
    why = [f"precheck failed: {line}" for line in prechecks_failed]
    for state in states:
        why += services_in_state(state)
    for runtime, probe in runtimes:
        why += runtime_in_state(runtime, probe)
    if stamp is None:
        why.append("no deploy of this Plan was recorded on this host")
    elif not isinstance(stamp, dict) or not isinstance(stamp.get("key"), str):
        why.append("the deploy stamp is not one glmops wrote")
    elif stamp["key"] != key:
        why.append("the last deploy on this host was of another Plan, variables or glmops version")
    elif str(stamp.get("generation")) != str(current).strip():
        why.append(f"the current generation ({str(current).strip() if current is not None else 'none'}) is not "
                   f"the one this Plan's deploy recorded ({stamp.get('generation')}): a rollback or upgrade ran since")
    return why


def destroy_picked(plan: dict, units: list[str], host: str) -> dict[str, list[str]]:
    """What ``glmops destroy --service`` removes on ``host``: ``{"units": [unit name], "paths":
    [file path]}``, the ``units`` (``glmops_units``) the Plan view ``plan`` runs on ``host`` and
    their files (each service view's ``paths``: unit file, env and config files), less every
    path a service that stays on the host uses too (a shared image overlay). Both lists follow
    the Plan's order; empty when none of ``units`` runs on ``host``. The unit files' drop-in
    directories (``<unit file>.d``) go with them (``roles/engine_service`` destroy)."""
    on_host = [s for s in plan.get("services", []) if s.get("host") == host]
    picked = [s for s in on_host if s["unit"] in set(units)]
    kept = {p for s in on_host if s["unit"] not in set(units) for p in s.get("paths", [])}
    paths = [p for s in picked for p in s.get("paths", []) if p not in kept]
    return {"units": [s["unit"] for s in picked], "paths": list(dict.fromkeys(paths))}
