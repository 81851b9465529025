"""The Plan as the playbooks see it: plain dicts, every file rendered, secrets apart.

``view(deployment, plan)`` is what the ``glmops_plan`` action plugin returns to the playbooks
(``glmops.planning.Planned.view()``; ``glmops.planning.plan_view(inventory, topology)`` plans and
renders in one call): every file rendered (``glmops.render``). This module imports no planning
(``glmops.planning`` imports it). Shape::

    {deployment, model, served_model_name, engine, topology, endpoint_url, smoke, notes,
     service_user, config_dir, state_dir, records_dir, readiness_timeout_s, runtime, engine_version,
     target_name,                       # glm-<dep>.target
     unit_glob,                         # glm-<dep>-*.service: what belongs to this deployment
     services: [service view],          # all, in start order
     hosts: {host: {units: [unit], runtimes: [{engine, version, venv | mode+image+tag, pins}], target: file + {name},
                    stores: bundle, workers: bundle, routers: bundle}},
       bundle: {services: [service view], files: [file], secret_files: [file]}
     worker_hosts: [host], router_hosts: [host], store_hosts: [host],
     stores: [{unit, host, address, port, engine}],   # Dynamo's discovery store members (and NATS)
     monitoring: glmops.monitoring.view (targets, the Prometheus host and its files)}

    service view: {name, unit, host, role, pool, engine, address, port, url, gpus,
                   health_url, ready_url, metrics_url, start_order, replica, runtime, image,
                   paths: [every file path the unit depends on, unit file first],
                   instances: worker instances a front door must list before it is ready (0: not checked),
                   auth: "VAR@ENV_FILE" when the service requires glmops_api_key (the gate and status
                         read VAR from that 0600 file on the host and send Authorization: Bearer), else "",
                   runtime_marker: the venv's install marker ("" unless venv runtime)}
    file:         {path, content (str), mode, owner, group, service, sha256}; a worker's env file
                  in a Plan spanning hosts may add ``ifname_env`` ([NCCL_SOCKET_IFNAME, ...]) and
                  ``ifname_address``: the host appends ``NAME=<interface holding the address>``
                  lines to ``content`` (glmops.netif, F17)

Env files (mode 0600) are ``secret_files``: only tasks with ``no_log`` touch them. A
service view never carries file contents, so looping over services never leaks.
"""
from __future__ import annotations

import hashlib
from typing import Any

from glmops import monitoring, netif, render
from glmops.checkpoint import plan_view as checkpoint_view
from glmops.deploystate import records_dir
from glmops.engines import base
from glmops.model import ROUTER_ORDER, Deployment, Plan, Service
from glmops.runtime import engine_pins

#: the venv marker roles/engine_runtime writes when an install is complete (tasks/venv_install.yml)
RUNTIME_MARKER = ".glmops-runtime.json"
UNIT_DIR = "/etc/systemd/system"


def view(dep: Deployment, plan: Plan) -> dict[str, Any]:
    """Turn a Deployment and its Plan into the playbooks' dict (see module docstring)."""
    target = render.target_name(dep)
    out: dict[str, Any] = {
        "deployment": plan.deployment,
        "model": plan.model,
        "served_model_name": plan.served_model_name,
        "engine": plan.engine,
        "topology": plan.topology,
        "endpoint_url": plan.endpoint_url,
        "endpoint_ready_url": _endpoint_ready_url(plan),
        "smoke": list(plan.smoke),
        "notes": list(plan.notes),
        "service_user": dep.service_user,
        "config_dir": f"{dep.config_dir}/{plan.deployment}",
        "state_dir": dep.state_dir,
        "records_dir": records_dir(dep.state_dir, plan.deployment),  # generations + deploy stamp (root's)
        "checkpoint_dir": dep.checkpoint.local_dir,
        "checkpoint": checkpoint_view(dep, plan),  # roles/checkpoint (glmops.checkpoint.plan_view)
        "readiness_timeout_s": int(dep.readiness_timeout_s),
        "runtime": dep.runtime,
        "engine_version": dep.engine_version,
        "target_name": target,
        "unit_glob": f"glm-{plan.deployment}-*.service",
        "services": [],
        "hosts": {},
        "worker_hosts": [],
        "router_hosts": [],
        "store_hosts": [],
        # Dynamo's discovery store: {unit, client} per member (the workers' reachability precheck)
        "stores": [{"unit": s.unit, "host": s.host, "address": s.address, "port": s.port,
                    "engine": s.engine} for s in plan.services if s.role == "store"],
        "monitoring": monitoring.view(dep, plan),  # glmops.monitoring: scrape targets, Prometheus host
    }
    ordered = sorted(plan.services, key=lambda s: (s.start_order, s.host, s.name))
    for svc in ordered:
        files, secrets = _files(dep, plan, svc)
        runtime = _runtime(dep, svc)
        sview = _service_view(svc, [f["path"] for f in files + secrets])
        # the gate and status read the API key from the env file on the host (never from Ansible)
        sview["auth"] = f"{svc.auth_env}@{render.env_path(dep, svc)}" if svc.auth_env else ""
        # a venv reinstalled after the unit started (roles/engine_runtime writes this marker last)
        # restarts the unit: glmops_hostctl.py state --runtime
        sview["runtime_marker"] = f"{runtime['venv']}/{RUNTIME_MARKER}" if runtime and runtime.get("venv") else ""
        out["services"].append(sview)
        host = out["hosts"].get(svc.host)
        if host is None:
            tfile = _file(f"{UNIT_DIR}/{target}", render.target_text(dep, plan, svc.host), "0644", "root", "")
            tfile["name"] = target
            host = out["hosts"][svc.host] = {
                "units": [], "runtimes": [], "store_packages": [], "target": tfile, "stores": _bundle(), "workers": _bundle(),
                "routers": _bundle()}
        if runtime and runtime not in host["runtimes"]:
            host["runtimes"].append(runtime)
        if svc.role == "store":  # Debian packages (catalog engines.etcd / engines.nats), not venvs
            entry = base.CATALOG.engine(svc.engine)
            pkg = {"name": str(entry.get("package") or svc.engine), "unit": str(entry.get("package_unit") or "")}
            if pkg not in host["store_packages"]:
                host["store_packages"].append(pkg)
        kind = "stores" if svc.role == "store" else "routers" if svc.start_order >= ROUTER_ORDER else "workers"
        host["units"].append(svc.unit)
        host[kind]["services"].append(sview)
        _add_files(host[kind]["files"], files)
        _add_files(host[kind]["secret_files"], secrets)
        group = {"routers": "router_hosts", "stores": "store_hosts"}.get(kind, "worker_hosts")
        if svc.host not in out[group]:
            out[group].append(svc.host)
    return out


def _runtime(dep: Deployment, svc: Service) -> dict[str, str] | None:
    """The venv a venv-runtime service runs from: {engine, version, venv, pins}; for the container
    runtime {engine, version, mode: container, image (the seed's), tag (the derived image the unit
    runs), pins}; else None (pins: glmops.runtime.engine_pins, see roles/engine_runtime)."""
    if svc.runtime == "container" and svc.image:  # roles/engine_runtime container mode
        return {"engine": svc.engine, "version": base.engine_version(dep, svc.engine), "mode": "container",
                "image": base.seed_image(dep, svc.engine), "tag": svc.image, "pins": engine_pins(dep, svc.engine)}
    if svc.runtime != "venv" or not svc.argv:
        return None
    venv = base.venv_dir(dep, svc.engine)
    if not svc.argv[0].startswith(venv + "/"):
        return None
    return {"engine": svc.engine, "version": base.engine_version(dep, svc.engine), "venv": venv,
            "pins": engine_pins(dep, svc.engine)}


def _bundle() -> dict[str, list]:
    return {"services": [], "files": [], "secret_files": []}


def _endpoint_ready_url(plan: Plan) -> str:
    """The one-token URL of the endpoint: the front door's ``ready_url``."""
    for svc in plan.services:
        if svc.ready_url and svc.ready_url.startswith(plan.endpoint_url.rstrip("/") + "/"):
            return svc.ready_url
    return plan.endpoint_url.rstrip("/") + "/v1/completions"


def _service_view(svc: Service, paths: list[str]) -> dict[str, Any]:
    return {
        "name": svc.name,
        "unit": svc.unit,
        "host": svc.host,
        "role": svc.role,
        "pool": svc.role if svc.role in ("agg", "prefill", "decode", "store") else "router",
        "engine": svc.engine,
        "address": svc.address,
        "port": svc.port,
        "url": f"http://{svc.address}:{svc.port}",
        "gpus": list(svc.gpus),
        "health_url": svc.health_url,
        "ready_url": svc.ready_url,
        "metrics_url": svc.metrics_url,
        "start_order": svc.start_order,
        "replica": svc.replica,
        "runtime": svc.runtime,
        "image": svc.image,
        "paths": paths,
        "ports": {k: list(v) for k, v in svc.ports.items()},
        "instances": svc.instances,
    }


def plan_address(dep: Deployment, svc: Service) -> str:
    """The inventory address of ``svc``'s host (the one its interface must hold)."""
    host = dep.hosts.get(svc.host)
    return host.address if host is not None else svc.host


def _add_files(placed: list[dict], files: list[dict]) -> None:
    """Append ``files`` to a bundle's list once per path: services of a host may share a file
    (an image's overlay in the config dir, glmops.engines.base.image_overlay); two different
    contents for one path are a plan error (ValueError naming the path and both services)."""
    seen = {f["path"]: f for f in placed}
    for entry in files:
        prior = seen.get(entry["path"])
        if prior is None:
            placed.append(entry)
            seen[entry["path"]] = entry
        elif (prior["sha256"], prior["mode"]) != (entry["sha256"], entry["mode"]):
            raise ValueError(f"{entry['path']}: {prior['service']} and {entry['service']} want different files there")


def _file(path: str, content: str, mode: str, group: str, service: str) -> dict[str, str]:
    return {"path": path, "content": content, "mode": f"{int(str(mode), 8):04o}", "owner": "root",
            "group": group or "root", "service": service,
            "sha256": hashlib.sha256(content.encode()).hexdigest()}


def _files(dep: Deployment, plan: Plan, svc: Service) -> tuple[list[dict], list[dict]]:
    """(plain files, secret files) of one service: its unit, its env file (0600, secret)
    and its engine config files (group: the service user; 0600 ones are secret)."""
    files = [_file(f"{UNIT_DIR}/{svc.unit}", render.unit_text(dep, svc, plan), "0644", "root", svc.name)]
    secrets = [_file(render.env_path(dep, svc), render.env_text(dep, svc), "0600", "root", svc.name)]
    found = netif.host_found(plan, svc)
    if found:  # F17: the host fills in the interface holding its address (glmops_hostctl.py --ifname-env)
        secrets[0].update(ifname_env=found, ifname_address=plan_address(dep, svc))
    for cf in svc.files:
        entry = _file(cf.path, render.config_text(cf), cf.mode, dep.service_user, svc.name)
        (secrets if cf.format == "env" or entry["mode"] == "0600" else files).append(entry)
    for entry in files + secrets:  # every path the roles write lies where glmops places files
        render.placed(dep, entry["path"])
    return files, secrets

