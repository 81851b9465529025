"""Host prechecks: what a node needs (from the catalog and the Plan) against what it has.

The facts are gathered on the host by the ``glmops_precheck_facts.py`` script (roles/prechecks/files);
this module holds everything else and does no I/O, so it is unit-tested directly:

* :func:`needs_from_catalog` / :func:`needs_for_deployment` -> the ``needs`` dict of a host;
* :func:`host_needs` -> the needs of one host as the prechecks role computes them (catalog,
  then the Plan's, then explicit ``prechecks_*`` values); :func:`facts_options` -> what the
  facts script must read for them;
* :func:`evaluate` (host, facts, needs) -> every check's result, all at once;
* :func:`report` -> the JSON report of one node (``glmops check --json``).

``needs`` keys (all optional; a missing key skips its check):

==================  =========================================================================
``os``              list of accepted ``"<id> <version_id>"`` (e.g. ``"ubuntu 24.04"``)
``gpu_vendor``      ``nvidia`` | ``amd`` | ``none``
``gpu_count``       GPUs the node must show (catalog ``gpus_per_node``)
``gpu_indices``     GPU indices the inventory uses (``glmops_gpus``); each must exist
``gpu_name``        catalog display name matched as a word in each GPU's name (``B200``)
``driver_min``      lowest NVIDIA driver branch: the deployment's builds' need (:func:`driver_need`,
                    F30), else the catalog ``engines.*.driver_min`` (575)
``driver_builds``   the builds that need ``driver_min`` (named in the failure)
``nvswitch``        fabric manager active, fabric state ``Completed``, FM package version
                    equal to the driver's (NVIDIA Fabric Manager guide)
``nvlsm``           nvlsm installed at the driver's version (Blackwell NVSwitch systems)
``disk_path``       directory the checkpoint goes to; ``disk_gib`` free GiB needed there
                    (0 when ``checkpoint_present``)
``shm_min_mib``     ``/dev/shm`` size floor (F08)
``memlock``         ``"infinity"`` or a byte count: the limit a systemd service must get (F07)
``ports``           ``{port: purpose}`` the Plan binds on this host (F05)
``own_units``       unit glob whose listeners are ours (a redeploy is no collision)
``time_sync``       True: the clock must be NTP-synchronised; ``"warn"``: only reported
``rdma_devices``    RDMA devices that must exist under /sys/class/infiniband (F06)
``gpu_state``       ``{nvidia-smi --query-gpu field: {label, accepted, needed, how}}`` checked
                    on every GPU (F28; catalog ``prechecks.yaml`` ``gpu_state``)
``writable``        ``{user, home, paths}``: every path the service user must write, checked
                    as that user (F11; :func:`writable_needs`)
``host_memory``     ``{bytes, parts}``: RAM the Plan keeps in host memory on the host
                    (:func:`host_memory_needs`), against MemTotal
``interface``       ``{address, refused[, name]}`` (multi-host Plans): an interface of the host holds
                    its inventory address and is not refused (``lo``, ``docker*``; F17); ``name``
                    (``glmops_socket_ifname``) must be that interface
==================  =========================================================================

Every failing result names the host, the value found and the value needed.
"""
from __future__ import annotations

import fnmatch
import re
from typing import Any

#: glmops policy: operating systems the roles are written for (apt based).
SUPPORTED_OS = ["ubuntu 22.04", "ubuntu 24.04", "debian 12"]
#: glmops policy (F08): NCCL's shared-memory transport needs more than Docker's 64 MiB default.
SHM_MIN_MIB = 1024
#: F07: engines register GPU memory for RDMA; units render LimitMEMLOCK=infinity.
MEMLOCK_NEEDED = "infinity"


def driver_min(catalog=None, engines: list[str] | None = None) -> int:
    """Lowest NVIDIA driver branch the given engines (default: every engine) need.

    Source: catalog ``engines.<e>.driver_min`` (seed 000: "CUDA Driver 575 or later").
    When none of ``engines`` names a minimum, the highest one any engine names applies
    (the node's driver serves every engine). Returns 0 when no engine names one.
    """
    from glmops import catalog as cat

    catalog = catalog or cat.load()
    every = {name: int(entry.get("driver_min") or 0) for name, entry in catalog.engines.items()}
    chosen = [every[e] for e in (engines or []) if every.get(e)]
    return max(chosen or every.values(), default=0)


def driver_need(dep, engines: list[str], catalog=None) -> tuple[int, list[str]]:
    """(lowest NVIDIA driver branch, the builds that need it) for ``dep``'s engines (``engines``:
    the Plan's, with the worker backend of an engine that runs another one) at the versions and
    runtime it runs: each catalog ``engines.<e>.builds`` entry of the runtime whose ``specifier``
    holds for the version (container: the image in use when an entry names it) needs
    ``max(driver_min, cuda.driver_min_by_major[cuda])`` (F30: vLLM's CUDA 13 wheels need R580).
    ``(0, [])`` when no build is known; the highest need wins, naming every build that asks for it."""
    from packaging.specifiers import InvalidSpecifier, SpecifierSet
    from packaging.version import InvalidVersion, Version

    from glmops import catalog as cat
    from glmops.engines.compat import backend_version

    catalog = catalog or cat.load()
    by_major = {int(k): int(v) for k, v in
                ((catalog.data["engines"].get("cuda") or {}).get("driver_min_by_major") or {}).items()}
    found: list[tuple[int, str]] = []
    for name in dict.fromkeys(engines):
        entry = catalog.engines.get(name) or {}
        version = backend_version(dep, catalog, name)
        builds = [b for b in entry.get("builds") or [] if b.get("runtime") == dep.runtime]
        if dep.runtime == "container":
            image = dep.image or (entry.get("image_by_model") or {}).get(dep.model) or entry.get("default_image")
            builds = [b for b in builds if b.get("artifact") == image] or builds
        for b in builds:
            try:
                if b.get("specifier") and Version(version) not in SpecifierSet(str(b["specifier"]), prereleases=True):
                    continue
            except (InvalidVersion, InvalidSpecifier):
                pass  # an unparsable version: ENGINE_VERSION reports it; the build counts
            need = max(int(b.get("driver_min") or 0), by_major.get(int(b.get("cuda") or 0), 0))
            found.append((need, f"{entry.get('name', name)} {version} {b.get('artifact')} (CUDA {b.get('cuda')}: "
                                f">= R{need})"))
    best = max((n for n, _ in found), default=0)
    return best, [text for n, text in found if n == best and best]


def needs_from_catalog(hardware: str | None, gpus: list[int] | None = None,
                       engines: list[str] | None = None, catalog=None) -> dict[str, Any]:
    """The needs every node of ``hardware`` (a catalog key) has, before any deployment.

    ``gpus``: the inventory's ``glmops_gpus`` for the host. Unknown or empty hardware ->
    only the host-level checks (OS, shm, memlock, time). Raises the catalog's lookup
    error (naming the accepted keys) for an unknown hardware key.
    """
    from glmops import catalog as cat

    catalog = catalog or cat.load()
    needs: dict[str, Any] = {"os": list(SUPPORTED_OS), "shm_min_mib": SHM_MIN_MIB,
                             "memlock": MEMLOCK_NEEDED, "time_sync": True}
    if not hardware or hardware == "cpu":
        needs["gpu_vendor"] = "none"
        return needs
    hw = catalog.hw(hardware)
    needs["gpu_vendor"] = hw["vendor"]
    needs["gpu_count"] = int(hw["gpus_per_node"])
    needs["gpu_name"] = hw["name"]
    if gpus:
        needs["gpu_indices"] = sorted(int(g) for g in gpus)
    if hw["vendor"] == "nvidia":
        needs["gpu_state"] = gpu_state_needs(catalog)
        needs["driver_min"] = driver_min(catalog, engines)
        needs["nvswitch"] = bool(hw.get("nvswitch"))
        needs["nvlsm"] = bool(hw.get("nvswitch")) and hw.get("arch_family") == "blackwell"
    return needs


def needs_for_deployment(dep, plan) -> dict[str, dict[str, Any]]:
    """Per host of ``plan`` (a glmops.model.Plan of ``dep``): catalog needs plus the
    checkpoint's disk, the ports the host's services bind, the host's RDMA devices, the paths
    its service user must write, the RAM the Plan keeps in host memory there and, when the
    Plan spans hosts, the interface that must hold the host's address (F17)."""
    from glmops import catalog as cat

    catalog = cat.load()
    out: dict[str, dict[str, Any]] = {}
    engines = sorted({s.engine for s in plan.services})
    from glmops.engines.registry import backend_name

    need, builds = driver_need(dep, [*engines, backend_name(dep)], catalog)
    for name, host in dep.hosts.items():
        needs = needs_from_catalog(host.hardware or dep.hardware, host.gpus, engines)
        if builds and "driver_min" in needs:  # F30: the builds' need, named (else the engines' driver_min)
            needs["driver_min"], needs["driver_builds"] = need, builds
        needs["disk_path"] = dep.checkpoint.model_dir
        needs["disk_gib"] = float(dep.checkpoint.size_gib or 0)
        needs["checkpoint_dir"] = dep.checkpoint.local_dir
        ports: dict[int, str] = {}
        for svc in plan.on_host(name):
            for purpose, values in (svc.ports or {}).items():
                for p in values if isinstance(values, list) else [values]:
                    ports.setdefault(int(p), f"{svc.name} {purpose}")
            ports.setdefault(int(svc.port), f"{svc.name} http")
        needs["ports"] = ports
        needs["own_units"] = f"glm-{dep.name}-*.service"
        if host.rdma_devices:
            needs["rdma_devices"] = list(host.rdma_devices)
        needs["writable"] = writable_needs(dep, plan.on_host(name), catalog)
        if len({svc.host for svc in plan.services}) > 1:  # F17: traffic between hosts
            needs["interface"] = {"address": host.address,
                                  "refused": list((catalog.prechecks.get("interface") or {}).get("refused") or [])}
            if host.socket_ifname:  # glmops_socket_ifname: the interface NCCL/Gloo are pointed at
                needs["interface"]["name"] = host.socket_ifname
        memory = host_memory_needs(plan.on_host(name), catalog)
        if memory["bytes"]:
            needs["host_memory"] = memory
        out[name] = needs
    return out


def gpu_state_needs(catalog=None) -> dict[str, dict[str, Any]]:
    """``{field: {label, accepted, needed, how}}``: the GPU state every NVIDIA GPU must be in,
    by ``nvidia-smi --query-gpu`` field (catalog ``prechecks.yaml`` ``gpu_state``, F28)."""
    from glmops import catalog as cat

    catalog = catalog or cat.load()
    return {field: {k: entry[k] for k in ("label", "accepted", "needed", "how")}
            for field, entry in (catalog.prechecks.get("gpu_state") or {}).items()}


def _backend(svc) -> str:
    """The engine whose flags a service's argv carries (a Dynamo worker: its backend module)."""
    if svc.engine != "dynamo":
        return svc.engine
    for word in svc.argv:
        m = re.fullmatch(r"dynamo\.(vllm|sglang|trtllm)", str(word))
        if m:
            return m.group(1)
    return svc.engine


def _flag_value(argv: list[str], flag: str) -> str | None:
    """The value of ``flag`` in ``argv`` (``--f v`` or ``--f=v``; the last one wins)."""
    value = None
    for i, word in enumerate(argv):
        if word == flag and i + 1 < len(argv):
            value = argv[i + 1]
        elif str(word).startswith(flag + "="):
            value = str(word)[len(flag) + 1:]
    return value


def host_memory_needs(services, catalog=None) -> dict[str, Any]:
    """RAM the services of one host keep in host memory: ``{bytes, parts: [text]}``.

    Each catalog ``host_memory.flags`` entry its backend's argv carries counts its value in its
    unit, per TP rank on this host (the service's GPUs here) or once per worker; every worker
    that keeps something in host memory adds ``worker_extra_gib`` (shared memory and the
    process: seed 001's 448 GiB per worker Pod less its 400 GB HiCache). ``bytes`` 0: the Plan
    keeps nothing in host memory here (no check)."""
    from glmops import catalog as cat

    catalog = catalog or cat.load()
    spec = catalog.prechecks.get("host_memory") or {}
    total, parts = 0, []
    for svc in services:
        backend, ranks, mine = _backend(svc), max(len(svc.gpus or []), 1), 0
        for entry in spec.get("flags") or []:
            raw = _flag_value(list(svc.argv), entry["flag"]) if entry["backend"] == backend else None
            try:
                value = float(raw) if raw is not None else 0.0
            except ValueError:
                continue
            if value <= 0:
                continue
            unit = 1e9 if entry["unit"] == "GB" else float(2**30)
            times = ranks if entry["per"] == "rank" else 1
            mine += int(value * unit * times)
            parts.append(f"{svc.name}: {entry['flag']} {raw} {entry['unit']}"
                         + (f" x {ranks} TP ranks" if entry["per"] == "rank" else "")
                         + f" = {value * unit * times / 2**30:.1f} GiB")
        if mine:
            extra = int(float(spec.get("worker_extra_gib") or 0) * 2**30)
            parts.append(f"{svc.name}: shared memory and process {extra / 2**30:.1f} GiB")
            total += mine + extra
    return {"bytes": total, "parts": parts}


def writable_needs(dep, services=(), catalog=None) -> dict[str, Any]:
    """``{user, home, paths}``: what the service user must write on a host (F11): its HOME
    (``<state_dir>/<deployment>``, the units' HOME and StateDirectory), the Hugging Face cache
    (``HF_HOME``, ``HF_HUB_CACHE`` from the deployment's env or their defaults under HOME) and
    its ``.locks``, and the compile caches of the backends the host runs (catalog
    ``prechecks.yaml`` ``writable``)."""
    from glmops import catalog as cat

    catalog = catalog or cat.load()
    spec = catalog.prechecks.get("writable") or {}
    home = f"{dep.state_dir.rstrip('/')}/{dep.name}"
    env = dict(dep.env or {})
    for svc in services:
        env.update({k: v for k, v in (svc.env or {}).items() if k in ("HF_HOME", "HF_HUB_CACHE")})
    hf_home = env.get("HF_HOME") or f"{home}/{spec.get('hf_home', '.cache/huggingface')}"
    hub = env.get("HF_HUB_CACHE") or f"{hf_home.rstrip('/')}/{spec.get('hub_cache', 'hub')}"
    paths = [home, hf_home, hub, f"{hub.rstrip('/')}/{spec.get('locks', '.locks')}"]
    for backend in sorted({_backend(s) for s in services}):
        paths += [f"{home}/{rel}" for rel in (spec.get("compile_caches") or {}).get(backend, [])]
    return {"user": dep.service_user, "home": home, "paths": list(dict.fromkeys(paths))}


#: the prechecks role's explicit needs (``prechecks_<key>``; null = keep the computed value)
NEED_VARS = ("os", "gpu_count", "gpu_name", "driver_min", "driver_builds", "nvswitch", "nvlsm", "disk_path", "disk_gib",
             "shm_min_mib", "memlock", "ports", "time_sync", "rdma_devices", "gpu_state", "writable", "host_memory",
             "interface")


def host_needs(hardware: str | None, gpus: list[int] | None, deployment_needs: dict | None,
               overrides: dict | None) -> dict[str, Any]:
    """One host's ``needs``, lowest precedence first: :func:`needs_from_catalog` of its
    ``glmops_hardware`` and ``glmops_gpus``; ``deployment_needs`` (this host's entry of
    :func:`needs_for_deployment`, or None); ``overrides`` ({key: value}, None values skipped:
    the role's ``prechecks_*`` variables). Raises LookupError for unknown hardware."""
    needs = needs_from_catalog(hardware, gpus)
    if isinstance(deployment_needs, dict):
        needs.update(deployment_needs)
    for key, value in (overrides or {}).items():
        if value is not None:
            needs[key] = value
    return needs


def facts_options(needs: dict[str, Any]) -> dict[str, Any]:
    """The options of ``glmops_precheck_facts.py`` that read what ``needs`` checks: the GPU
    tool of its vendor, the fabric and NVIDIA packages, the memlock probe and the listeners
    only when asked for."""
    vendor = needs.get("gpu_vendor", "none")
    return {
        "gpu_vendor": vendor if vendor in ("nvidia", "amd") else "none",
        "fabric": bool(needs.get("nvswitch")),
        "packages": ["nvidia-driver-*", "nvidia-fabricmanager*", "nvlsm"] if vendor == "nvidia" else [],
        "services": ["nvidia-fabricmanager"] if needs.get("nvswitch") else [],
        "disk_path": needs.get("disk_path"),
        "checkpoint_dir": needs.get("checkpoint_dir"),
        "memlock_properties": needs.get("memlock_properties", ["LimitMEMLOCK=infinity"]) if needs.get("memlock") else [],
        "listening": bool(needs.get("ports")),
        "gpu_state_fields": sorted(needs.get("gpu_state") or {}) if vendor == "nvidia" else [],
        "writable": ({k: needs["writable"][k] for k in ("user", "home", "paths") if k in needs["writable"]}
                     if isinstance(needs.get("writable"), dict) else None),
        "memory": bool(needs.get("host_memory")),
        "address": (needs["interface"].get("address") if isinstance(needs.get("interface"), dict) else None),
    }


def host_report(host: str, facts: dict[str, Any], needs: dict[str, Any]) -> dict[str, Any]:
    """:func:`report` of :func:`evaluate`, with the needs it was checked against (ports as
    a sorted list)."""
    out = report(host, evaluate(host, facts, needs))
    out["needs"] = {k: v for k, v in needs.items() if k != "ports"} | {
        "ports": sorted(int(p) for p in (needs.get("ports") or {}))}
    return out


def report_msg(rep: dict[str, Any]) -> str:
    """"all prechecks passed", or the count and every failure of a report, one per line."""
    return ("all prechecks passed" if rep["ok"]
            else f"{len(rep['failed'])} precheck(s) failed:\n" + "\n".join(rep["failed"]))


def _ok(check: str, found: Any, needed: Any) -> dict[str, Any]:
    return {"check": check, "ok": True, "found": found, "needed": needed, "message": ""}


def _fail(host: str, check: str, found: Any, needed: Any, text: str, severity: str = "error") -> dict[str, Any]:
    return {"check": check, "ok": False, "found": found, "needed": needed, "severity": severity,
            "message": f"{host}: {text} (found {found}, needed {needed})"}


def _branch(version: str) -> int | None:
    m = re.match(r"(\d+)", str(version or ""))
    return int(m.group(1)) if m else None


def _upstream(deb_version: str) -> str:
    """``575.57.08-1`` -> ``575.57.08`` (drop epoch and Debian revision)."""
    v = str(deb_version).split(":", 1)[-1]
    return v.rsplit("-", 1)[0] if "-" in v else v


def _pkg_version(packages: dict[str, str], prefix: str) -> tuple[str, str] | None:
    """(package, upstream version) of the first installed package named ``prefix`` or ``prefix-*``."""
    for name in sorted(packages):
        if name == prefix or re.fullmatch(re.escape(prefix) + r"-\d+(-open|-server)?", name):
            return name, _upstream(packages[name])
    return None


def evaluate(host: str, facts: dict[str, Any], needs: dict[str, Any]) -> list[dict[str, Any]]:
    """Every check of ``needs`` against ``facts`` (the glmops_precheck_facts module's
    result); returns one result per check: ``{check, ok, found, needed, message[, severity]}``.

    ``message`` of a failure reads ``<host>: <what> (found X, needed Y)``. Never raises on
    odd facts: a missing fact is a failure saying what could not be read.
    """
    results: list[dict[str, Any]] = []
    add = results.append
    vendor = needs.get("gpu_vendor")
    gpu = facts.get("gpu") or {}
    if needs.get("os"):
        _os_release(host, facts.get("os") or {}, needs["os"], add)
    if vendor in ("nvidia", "amd"):
        _gpus(host, gpu, needs, "nvidia-smi" if vendor == "nvidia" else "rocm-smi", add)
    if vendor == "nvidia" and not gpu.get("error"):
        _nvidia_driver(host, gpu.get("driver_version") or "", facts, needs, add)
    if needs.get("disk_path") and needs.get("disk_gib"):
        _disk(host, facts.get("disk") or {}, needs["disk_path"], needs["disk_gib"], add)
    if needs.get("shm_min_mib"):
        _shm(host, (facts.get("shm") or {}).get("size_bytes"), int(needs["shm_min_mib"]), add)
    if needs.get("memlock"):
        _memlock(host, facts.get("memlock") or {}, needs["memlock"], add)
    if needs.get("ports"):
        _ports(host, facts.get("listening") or [], needs["ports"], needs.get("own_units"), add)
    if needs.get("time_sync"):
        _time_sync(host, facts.get("time") or {}, needs["time_sync"], add)
    if needs.get("rdma_devices"):
        _rdma_devices(host, set(facts.get("rdma_devices") or []), needs["rdma_devices"], add)
    if vendor == "nvidia" and needs.get("gpu_state") and not gpu.get("error"):
        _gpu_state(host, gpu, needs["gpu_state"], add)
    if isinstance(needs.get("writable"), dict) and needs["writable"].get("paths"):
        _writable(host, facts.get("writable") or {}, needs["writable"], add)
    if isinstance(needs.get("host_memory"), dict) and needs["host_memory"].get("bytes"):
        _host_memory(host, facts.get("memory") or {}, needs["host_memory"], add)
    if isinstance(needs.get("interface"), dict) and needs["interface"].get("address"):
        _interface(host, facts.get("interface") or {}, needs["interface"], add)
    return results


def _os_release(host: str, os_: dict[str, Any], accepted: list[str], add) -> None:
    """The OS ``<id> <version_id>`` is one of ``accepted`` (``ubuntu 24.04``)."""
    found = f"{os_.get('id', '?')} {os_.get('version_id', '?')}"
    if found in accepted:
        add(_ok("os", found, accepted))
    else:
        add(_fail(host, "os", found, " | ".join(accepted), "unsupported operating system"))


def _gpus(host: str, gpu: dict[str, Any], needs: dict[str, Any], tool: str, add) -> None:
    """The GPUs ``tool`` (nvidia-smi, rocm-smi) listed: their count (``gpu_count``), the indices
    the inventory names (``gpu_indices``) and the model (``gpu_name``, matched as a word); a
    listing that failed is one gpu_count failure."""
    gpus = gpu.get("gpus") or []
    if gpu.get("error"):
        add(_fail(host, "gpu_count", f"{tool} failed: {gpu['error']}", needs.get("gpu_count"),
                  f"cannot list GPUs with {tool}"))
        return
    want = needs.get("gpu_count")
    if want is not None:
        if len(gpus) == want:
            add(_ok("gpu_count", len(gpus), want))
        else:
            add(_fail(host, "gpu_count", len(gpus), want, "wrong GPU count"))
    indices = {int(g.get("index", i)) for i, g in enumerate(gpus)}
    missing = [i for i in needs.get("gpu_indices") or [] if i not in indices]
    if needs.get("gpu_indices"):
        if missing:
            add(_fail(host, "gpu_indices", sorted(indices), needs["gpu_indices"],
                      f"glmops_gpus names GPUs {missing} the host does not have"))
        else:
            add(_ok("gpu_indices", sorted(indices), needs["gpu_indices"]))
    name = needs.get("gpu_name")
    if name:
        names = sorted({str(g.get("name", "")) for g in gpus})
        pattern = re.compile(r"(?<![A-Za-z0-9])" + re.escape(name) + r"(?![A-Za-z0-9])", re.I)
        wrong = [n for n in names if not pattern.search(n)]
        if gpus and not wrong:
            add(_ok("gpu_model", names, name))
        elif gpus:
            add(_fail(host, "gpu_model", ", ".join(names), name, "GPU model differs from the inventory"))


def _nvidia_driver(host: str, loaded: str, facts: dict[str, Any], needs: dict[str, Any], add) -> None:
    """The loaded NVIDIA driver ``loaded`` (``575.57.08``): its branch at least ``driver_min``,
    the same as the installed package (else a reboot is pending), and with ``nvswitch`` /
    ``nvlsm`` the fabric packages at its version."""
    dmin = needs.get("driver_min")
    if dmin:
        branch = _branch(loaded)
        if branch is not None and branch >= int(dmin):
            add(_ok("driver", loaded, f">= {dmin}"))
        else:
            builds = needs.get("driver_builds") or []
            add(_fail(host, "driver", loaded or "none", f">= {dmin}",
                      f"NVIDIA driver {loaded or '(none)'} is below the minimum branch {dmin}"
                      + (f" that {'; '.join(builds)} need{'s' if len(builds) == 1 else ''}" if builds else "")))
    packages = facts.get("packages") or {}
    installed = _pkg_version(packages, "nvidia-driver")
    if installed and loaded and installed[1] != loaded:
        add(_fail(host, "driver_loaded", loaded, installed[1],
                  f"running driver {loaded} differs from installed {installed[0]} {installed[1]}: "
                  "reboot pending"))
    elif installed:
        add(_ok("driver_loaded", loaded, installed[1]))
    if needs.get("nvswitch"):
        _nvswitch(host, loaded, facts, packages, add)
    if needs.get("nvlsm"):
        lsm = _pkg_version(packages, "nvlsm")
        if lsm is None or lsm[1] != loaded:
            add(_fail(host, "nvlsm_version", lsm[1] if lsm else "not installed", loaded,
                      "nvlsm must be installed at the driver's version on Blackwell NVSwitch systems"))
        else:
            add(_ok("nvlsm_version", lsm[1], loaded))


def _nvswitch(host: str, loaded: str, facts: dict[str, Any], packages: dict[str, str], add) -> None:
    """An NVSwitch system: nvidia-fabricmanager installed at the driver's version ``loaded``, its
    service active, and the fabric state ``Completed``."""
    fm = _pkg_version(packages, "nvidia-fabricmanager")
    if fm is None:
        add(_fail(host, "fabricmanager_version", "not installed", loaded,
                  "nvidia-fabricmanager is not installed on an NVSwitch system"))
    elif fm[1] != loaded:
        add(_fail(host, "fabricmanager_version", f"{fm[0]} {fm[1]}", f"driver {loaded}",
                  f"fabric manager {fm[1]} differs from driver {loaded}; "
                  "they must be the same version"))
    else:
        add(_ok("fabricmanager_version", fm[1], loaded))
    state = (facts.get("services") or {}).get("nvidia-fabricmanager", "unknown")
    if state == "active":
        add(_ok("fabricmanager_active", state, "active"))
    else:
        add(_fail(host, "fabricmanager_active", state, "active",
                  "nvidia-fabricmanager.service is not active"))
    states = sorted({str(s) for s in (facts.get("fabric") or {}).get("states", [])}) or ["unknown"]
    if states == ["Completed"]:
        add(_ok("fabric_state", "Completed", "Completed"))
    else:
        add(_fail(host, "fabric_state", ", ".join(states), "Completed",
                  "NVSwitch fabric is not up"))


def _disk(host: str, disk: dict[str, Any], path: str, gib: Any, add) -> None:
    """``gib`` GiB (a number) free under ``path`` for the checkpoint (none when it is already there)."""
    free = disk.get("free_bytes")
    want = 0.0 if disk.get("checkpoint_present") else float(gib)
    if free is None:
        add(_fail(host, "disk", f"unreadable ({disk.get('error', '?')})", f"{want:.1f} GiB free",
                  f"cannot read free space under {path}"))
        return
    free_gib = free / 2**30
    found = f"{free_gib:.1f} GiB free under {disk.get('path', path)}"
    if free_gib >= want:
        add(_ok("disk", found, f"{want:.1f} GiB"))
    else:
        add(_fail(host, "disk", found, f"{want:.1f} GiB",
                  f"too little disk for the checkpoint under {path}"))


def _shm(host: str, shm: int | None, want: int, add) -> None:
    """/dev/shm of ``shm`` bytes (None: missing) is at least ``want`` MiB (F08)."""
    if shm is None:
        add(_fail(host, "shm", "no /dev/shm", f"{want} MiB", "/dev/shm is missing"))
    elif shm / 2**20 >= want:
        add(_ok("shm", f"{shm / 2**20:.0f} MiB", f"{want} MiB"))
    else:
        add(_fail(host, "shm", f"{shm / 2**20:.0f} MiB", f"{want} MiB",
                  "/dev/shm is smaller than the floor for NCCL (F08)"))


def _memlock(host: str, ml: dict[str, Any], want: Any, add) -> None:
    """The locked-memory limit a systemd service gets (bytes or ``infinity``) is at least
    ``want`` (F07)."""
    value = ml.get("value")
    if value is None:
        add(_fail(host, "memlock", f"unreadable ({ml.get('error', '?')})", want,
                  "cannot read the memlock limit a systemd service gets"))
        return
    shown = "infinity" if value == "infinity" else f"{value} bytes"
    good = value == "infinity" or (want != "infinity" and int(value) >= int(want))
    if good:
        add(_ok("memlock", shown, want))
    else:
        add(_fail(host, "memlock", shown, want,
                  "a systemd service gets a locked-memory limit too low for RDMA (F07)"))


def _ports(host: str, listening: list[dict[str, Any]], ports: dict[Any, str], own: str | None, add) -> None:
    """Every port of ``ports`` (port -> purpose) is free, or held by one of glmops' own units
    (``own``, an fnmatch pattern) (F05): one failure per busy port."""
    busy = []
    for port, purpose in sorted((int(k), v) for k, v in ports.items()):
        for sock in listening:
            if int(sock.get("port", -1)) != port:
                continue
            unit = sock.get("unit") or ""
            if own and unit and fnmatch.fnmatch(unit, own):
                continue
            busy.append((port, purpose, sock.get("process") or unit or "unknown process"))
            break
    if busy:
        for port, purpose, who in busy:
            add(_fail(host, "ports", f"port {port} in use by {who}", f"port {port} free for {purpose}",
                      f"port {port} is already listening (F05)"))
    else:
        add(_ok("ports", "free", sorted(int(k) for k in ports)))


def _time_sync(host: str, ts: dict[str, Any], level: Any, add) -> None:
    """The clock is NTP-synchronized; a failure is a warning when ``level`` is ``warn``."""
    if ts.get("synchronized"):
        add(_ok("time_sync", ts.get("source", "yes"), "synchronized"))
    else:
        add(_fail(host, "time_sync", ts.get("source") or "not synchronized", "synchronized",
                  "the clock is not NTP-synchronized",
                  "warn" if level == "warn" else "error"))


def _rdma_devices(host: str, have: set[str], wanted: list[str], add) -> None:
    """Every RDMA device the inventory names exists (F06)."""
    missing = [d for d in wanted if d not in have]
    if missing:
        add(_fail(host, "rdma_devices", sorted(have) or "none", wanted,
                  f"RDMA devices {missing} named in the inventory do not exist (F06)"))
    else:
        add(_ok("rdma_devices", sorted(have), wanted))


def _interface(host: str, facts: dict[str, Any], want: dict[str, Any], add) -> None:
    """F17: the interface holding the host's inventory address exists and is not refused (lo,
    docker*): it is the one NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME must name."""
    address = want["address"]
    refused = list(want.get("refused") or [])
    needed = f"an interface other than {', '.join(refused)} holding {address}" if refused else \
        f"an interface holding {address}"
    shown = "; ".join(f"{i['name']} {' '.join(i.get('addresses') or []) or '-'}"
                      for i in facts.get("interfaces") or []) or "none"
    if facts.get("error"):
        add(_fail(host, "interface", f"unreadable ({facts['error']})", needed, "cannot list the host's interfaces"))
        return
    holders = list(facts.get("holders") or [])
    if not holders:
        add(_fail(host, "interface", f"no interface holds {address} ({shown})", needed,
                  f"the inventory address {address} is on no interface of the host; NCCL/Gloo cannot be pointed at "
                  "it (F17)"))
        return
    bad = [h for h in holders if any(fnmatch.fnmatch(h, p) for p in refused)]
    if bad:
        add(_fail(host, "interface", f"{address} is on {', '.join(holders)}", needed,
                  f"the inventory address {address} is on {', '.join(bad)}, which other hosts cannot reach; "
                  "give the host an address on its cluster network (F17)"))
    elif want.get("name") and want["name"] not in holders:
        add(_fail(host, "interface", f"{address} is on {', '.join(holders)}", f"{want['name']} holding {address}",
                  f"glmops_socket_ifname {want['name']} does not hold the inventory address {address} "
                  f"({', '.join(holders)} does); NCCL/Gloo would use the wrong network (F17)"))
    else:
        add(_ok("interface", f"{', '.join(holders)} holds {address}", needed))


def _ranges(indices: list[int]) -> str:
    """``[0, 1, 2, 3, 6]`` -> ``0-3, 6``."""
    out, run = [], []
    for i in sorted(indices):
        if run and i == run[-1] + 1:
            run.append(i)
            continue
        if run:
            out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
        run = [i]
    if run:
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ", ".join(out)


def _gpu_state(host: str, gpu: dict[str, Any], wanted: dict[str, dict[str, Any]], add) -> None:
    """F28: every GPU's ``nvidia-smi --query-gpu`` state field against the accepted values."""
    if gpu.get("state_error"):
        add(_fail(host, "gpu_state", f"nvidia-smi failed: {gpu['state_error']}", ", ".join(sorted(wanted)),
                  "cannot read the GPU state"))
        return
    states = gpu.get("state") or {}
    for field, spec in sorted(wanted.items()):
        check = f"gpu_state {field}"
        found: dict[str, list[int]] = {}
        for index, values in states.items():
            found.setdefault(str(values.get(field, "unread")), []).append(int(index))
        bad = {v: ids for v, ids in found.items() if v not in spec["accepted"]}
        if not states:
            add(_fail(host, check, "no GPU state read", spec["needed"], f"cannot read {spec['label']}"))
        elif bad:
            shown = "; ".join(f"{v} on GPU{'s' if len(ids) > 1 else ''} {_ranges(ids)}" for v, ids in sorted(bad.items()))
            add(_fail(host, check, shown, f"{spec['needed']} on every GPU",
                      f"{spec['label']} ({field}) is {shown}; set {spec['needed']}: {spec['how']} (F28)"))
        else:
            add(_ok(check, sorted(found), spec["accepted"]))


#: at most this many paths are named, one failure each; the rest are counted
WRITABLE_SHOWN = 10


def _writable(host: str, facts: dict[str, Any], want: dict[str, Any], add) -> None:
    """F11: each path the service user must write, as that user found it."""
    user = want.get("user", "?")
    needed = f"writable by {user}"
    if facts.get("error"):
        add(_fail(host, "writable", f"unreadable ({facts['error']})", needed,
                  f"cannot check the paths {user} must write"))
        return
    if not facts:
        add(_fail(host, "writable", "not read", needed, f"cannot check the paths {user} must write"))
        return
    if not facts.get("exists", True):
        add(_ok("writable", f"user {user} does not exist yet (the deploy creates it): not checked", needed))
        return
    denied = facts.get("denied") or []
    for d in denied[:WRITABLE_SHOWN]:
        what = {"dir": "cannot create or remove entries in", "file": "cannot write",
                "create": f"cannot create {d.get('for')} under"}.get(d.get("kind"), "cannot write")
        add(_fail(host, "writable", f"{d['path']} owned by {d.get('owner', '?')}:{d.get('group', '?')} "
                                    f"mode {d.get('mode', '?')}", needed,
                  f"the service user {user} {what} {d['path']} (owner {d.get('owner', '?')}:{d.get('group', '?')}, "
                  f"mode {d.get('mode', '?')}; checked as {user}; prechecks_fix_writable: true makes {user} its "
                  "owner, directories setgid group-writable) (F11)"))
    if len(denied) > WRITABLE_SHOWN:
        add(_fail(host, "writable", f"{len(denied) - WRITABLE_SHOWN} more paths", needed,
                  f"the service user {user} cannot write {len(denied) - WRITABLE_SHOWN} more paths under "
                  f"{', '.join(want.get('paths') or [])} (F11)"))
    if not denied:
        add(_ok("writable", f"{facts.get('checked', 0)} paths checked as {user}"
                            + (" (walk cut short)" if facts.get("truncated") else ""), needed))


def _host_memory(host: str, facts: dict[str, Any], want: dict[str, Any], add) -> None:
    """RAM (MemTotal) against what the Plan keeps in host memory on this host."""
    need = int(want["bytes"])
    shown = f"{need / 2**30:.1f} GiB ({'; '.join(want.get('parts') or [])})"
    total = facts.get("total_bytes")
    if total is None:
        add(_fail(host, "host_memory", f"unreadable ({facts.get('error', '?')})", shown,
                  "cannot read the host's memory"))
    elif int(total) >= need:
        add(_ok("host_memory", f"{int(total) / 2**30:.1f} GiB", f"{need / 2**30:.1f} GiB"))
    else:
        add(_fail(host, "host_memory", f"{int(total) / 2**30:.1f} GiB RAM", shown,
                  "too little RAM for what the Plan keeps in host memory (HiCache, CPU offload, shared memory)"))


def report(host: str, results: list[dict[str, Any]]) -> dict[str, Any]:
    """One node's JSON report: ``{host, ok, failed: [message], checks: [result]}``.

    ``severity: warn`` failures are listed but do not make ``ok`` false.
    """
    errors = [r for r in results if not r["ok"] and r.get("severity", "error") == "error"]
    return {"host": host, "ok": not errors, "failed": [r["message"] for r in errors],
            "warnings": [r["message"] for r in results if not r["ok"] and r.get("severity") == "warn"],
            "checks": results}
