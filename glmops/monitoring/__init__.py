"""Prometheus for a deployment: scrape targets from the Plan, the shipped alert rules and
Grafana dashboards, the live numbers ``glmops status`` shows.

Every Plan service with a ``metrics_url`` (catalog ``engines.<engine>.metrics``: where each
engine serves Prometheus text at the pinned version, with its source) is one scrape target;
so is each host's node exporter (role ``exporter``) / DCGM exporter (role ``dcgm``) when
``glmops_monitoring`` turns them on, and each etcd member of a Dynamo discovery store (role ``etcd``).
:func:`exporter_files` are the exporters' units and drop-ins (the engine units' hardening).

* :func:`targets` -> Prometheus ``file_sd`` target groups (a JSON list), one group per
  target, labels ``deployment host role pool engine replica service`` plus
  ``__metrics_path__`` (TRT-LLM serves ``/prometheus/metrics``). ``glmops targets``,
  ``glmops plan --out`` (``OUT/_monitoring/file_sd/glmops-<dep>.json``) and ``glmops deploy``
  (the run's ``file_sd/`` and, with ``enabled``, the Prometheus host) write it.
* :func:`prometheus_config` -> ``prometheus.yml`` for roles/monitoring (one ``file_sd`` job
  ``glmops``, the rule files).
* ``rules/glmops-alerts.yml`` (alerts), ``rules/glmops-alerts.test.yml`` (``promtool test
  rules``), :func:`slo_rules` (the SLO recording rule rendered from ``ttft_p99_slo_ms``),
  ``dashboards/<family>.json`` (Grafana, one per engine family).
* :func:`live_numbers` -> running / waiting requests and KV cache usage from one /metrics text.

No I/O here besides reading the shipped files; :func:`read_live` does HTTP GETs.
"""
from __future__ import annotations

import json
import re
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from glmops.model import Deployment, Plan, Problem, Service
from glmops.smoke import parse_prometheus
from glmops.unitsyntax import RESTART_SEC, jinja_env as _env, systemd_quote

HERE = Path(__file__).resolve().parent
RULES = HERE / "rules" / "glmops-alerts.yml"
RULE_TESTS = HERE / "rules" / "glmops-alerts.test.yml"
DASHBOARDS = HERE / "dashboards"
#: engine family (dashboard file stem) -> engines whose series it charts
FAMILIES = {"vllm": ("vllm", "vllm_router"), "sglang": ("sglang", "sglang_router"), "trtllm": ("trtllm",),
            "dynamo": ("dynamo",)}
JOB = "glmops"
FILE_SD_DIR = "/etc/prometheus/file_sd"
RULES_DIR = "/etc/prometheus/rules"
WORKER_ROLES = ("agg", "prefill", "decode")
METRIC_IN_EXPR = re.compile(r"([A-Za-z_:][A-Za-z0-9_:]*)\{")


def _catalog():
    from glmops.engines.base import CATALOG

    return CATALOG


def settings(dep: Deployment) -> dict[str, Any]:
    """``glmops_monitoring`` after defaults (glmops.variables.MONITORING_KEYS): enabled, host,
    port, scrape_interval, node_exporter, dcgm_exporter, ttft_p99_slo_ms."""
    from glmops.variables import MONITORING_KEYS

    out = {k: v.default for k, v in MONITORING_KEYS.items()}
    out.update({k: v for k, v in (dep.monitoring or {}).items() if v is not None})
    if not out.get("host"):
        out["host"] = dep.router.host or next(iter(dep.hosts), "")
    if out.get("port") is None:
        out["port"] = int(exporter("prometheus")["port"])
    return out


def exporter(name: str) -> dict[str, Any]:
    """Catalog ``monitoring.<name>`` (prometheus, node_exporter, dcgm_exporter): package,
    port, flags, source."""
    from glmops import catalog

    return dict(((catalog.load().data.get("monitoring") or {}).get("monitoring") or {}).get(name) or {})


def _labels(dep: Deployment, svc: Service) -> dict[str, str]:
    """A service target's labels; a discovery store member's ``role`` is its engine (``etcd``),
    its ``pool`` ``store``."""
    if svc.role == "store":
        role, pool = svc.engine, "store"
    else:
        role, pool = svc.role, svc.role if svc.role in WORKER_ROLES else "router"
    return {"deployment": dep.name, "host": svc.host, "role": role, "pool": pool, "engine": svc.engine,
            "replica": str(svc.replica), "service": svc.name}


def _split(url: str) -> tuple[str, str]:
    rest = url.split("://", 1)[1]
    hostport, _, path = rest.partition("/")
    return hostport, "/" + path


def targets(dep: Deployment, plan: Plan) -> list[dict[str, Any]]:
    """``file_sd`` target groups: every service with a ``metrics_url``, then the exporters
    (node exporter on every host of the Plan, DCGM exporter on every GPU host) when
    ``glmops_monitoring`` enables them. Ordered as the Plan (start order, host, name)."""
    groups: list[dict[str, Any]] = []
    for svc in sorted(plan.services, key=lambda s: (s.start_order, s.host, s.name)):
        if not svc.metrics_url:
            continue
        hostport, path = _split(svc.metrics_url)
        labels = _labels(dep, svc)
        labels["__metrics_path__"] = path
        groups.append({"targets": [hostport], "labels": labels})
    for name, role in (("node_exporter", "exporter"), ("dcgm_exporter", "dcgm")):
        spec = exporter(name)
        for host in exporter_hosts(dep, plan, name):
            groups.append({"targets": [_listen(dep.hosts[host].address, int(spec["port"]))], "labels": {
                "deployment": dep.name, "host": host, "role": role, "pool": "host", "engine": name,
                "replica": "0", "service": name, "__metrics_path__": "/metrics"}})
    return groups


def exporter_hosts(dep: Deployment, plan: Plan, name: str) -> list[str]:
    """Hosts of the Plan that run exporter ``name`` (``node_exporter``: every host,
    ``dcgm_exporter``: the NVIDIA GPU hosts, catalog ``hardware.<h>.vendor``) when
    ``glmops_monitoring.<name>`` is on; ``[]`` otherwise. Plan order."""
    if not settings(dep)[name]:
        return []
    if name != "dcgm_exporter":
        return list(plan.hosts)
    return [h for h in plan.hosts
            if _catalog().hardware(dep.hosts[h].hardware or dep.hardware).get("vendor") == "nvidia"]


def dcgm_archive_name(arch: str) -> str:
    """NVIDIA's bare-metal archive for ``arch`` (``x86_64`` | ``aarch64``) at the catalog's
    version: ``dcgm_exporter-linux-<x86-64|sbsa>-<version>.tar.gz``. KeyError for another arch."""
    spec = exporter("dcgm_exporter")
    return str(spec["archive"]).format(arch=spec["archive_arch"][arch], version=spec["version"])


def dcgm_install_dir() -> str:
    """``<install_dir>/<version>``: where the archive is unpacked (its ``dcgm_exporter/`` root stripped)."""
    spec = exporter("dcgm_exporter")
    return f"{spec['install_dir']}/{spec['version']}"


def dcgm_argv(listen: str) -> list[str]:
    """The exporter's command: the archive's binary with glmops' counters file, ``listen``
    (``address:port``, the host's inventory address) and DCGM's host engine (catalog
    ``monitoring.dcgm_exporter.flags``: long names of upstream pkg/cmd/app.go)."""
    spec = exporter("dcgm_exporter")
    flags = spec["flags"]
    return [f"{dcgm_install_dir()}/{spec['binary']}", flags["collectors"], str(spec["counters_file"]),
            flags["address"], listen, flags["hostengine"], str(spec["hostengine"])]


def dcgm_counters_csv() -> str:
    """The ``--collectors`` file: ``field, type, help`` lines (catalog ``monitoring.dcgm_exporter.counters``)."""
    lines = ["# rendered by glmops (roles/monitoring): DCGM field, Prometheus metric type, help message"]
    lines += [f"{name}, {kind}, {help_}" for name, (kind, help_) in exporter("dcgm_exporter")["counters"].items()]
    return "\n".join(lines) + "\n"


def _templates():

    return _env(), RESTART_SEC, systemd_quote


def dcgm_unit(listen: str) -> str:
    """``nvidia-dcgm-exporter.service`` (replacing the archive's unit of that name in
    /etc/systemd/system): NVIDIA's unit's user and ordering after DCGM's host engine,
    ``Restart=always``, the engine units' hardening (``templates/hardening.j2``)."""
    env, restart_sec, quote = _templates()
    spec = exporter("dcgm_exporter")
    return env.get_template("dcgm-exporter.service.j2").render(
        version=spec["version"], hostengine_unit=spec["hostengine_unit"], restart_sec=restart_sec,
        exec_start=" ".join(quote(w) for w in dcgm_argv(listen)))


#: exporter -> the Debian unit glmops hardens with a drop-in (``<unit>.d/glmops-hardening.conf``)
HARDENED_UNITS = {"node_exporter": "prometheus-node-exporter.service", "prometheus": "prometheus.service"}
DROPIN_NAME = "glmops-hardening.conf"
#: unit -> directive -> (value, why) where a unit must read more than the engine units' hardening lets it
DROPIN_OVERRIDES = {"prometheus-node-exporter.service": {
    "ProtectHome": ("read-only", "the filesystem collector statfs()es every mount point, /home included")}}


def hardening_dropin(unit: str) -> str:
    """A ``[Service]`` drop-in for a Debian exporter unit with the engine units' hardening
    (``templates/hardening.j2``), then :data:`DROPIN_OVERRIDES` for that unit (a later
    assignment wins): the exporters still read /proc, /sys and D-Bus (node exporter's systemd
    collector) and write their state under /var/lib (ProtectSystem=full leaves it writable)."""
    env, _, _ = _templates()
    return env.get_template("hardening.conf.j2").render(unit=unit, overrides=DROPIN_OVERRIDES.get(unit, {}))


def dropin_path(unit: str) -> str:
    """``/etc/systemd/system/<unit>.d/glmops-hardening.conf``."""
    return f"/etc/systemd/system/{unit}.d/{DROPIN_NAME}"


def exporter_files(dep: Deployment, plan: Plan) -> list[tuple[str, str, str, str]]:
    """``(host, path, content, mode)`` of the files roles/monitoring places for the exporters:
    the node exporter's and Prometheus' hardening drop-ins, the DCGM exporter's unit and
    counters file, on the hosts that run them."""
    out = []
    for host in exporter_hosts(dep, plan, "node_exporter"):
        unit = HARDENED_UNITS["node_exporter"]
        out.append((host, dropin_path(unit), hardening_dropin(unit), "0644"))
    if settings(dep)["enabled"]:
        unit = HARDENED_UNITS["prometheus"]
        out.append((settings(dep)["host"], dropin_path(unit), hardening_dropin(unit), "0644"))
    spec = exporter("dcgm_exporter")
    for host in exporter_hosts(dep, plan, "dcgm_exporter"):
        listen = _listen(dep.hosts[host].address, int(spec["port"]))
        out.append((host, f"/etc/systemd/system/{spec['unit']}", dcgm_unit(listen), "0644"))
        out.append((host, str(spec["counters_file"]), dcgm_counters_csv(), "0644"))
    return out


def targets_json(dep: Deployment, plan: Plan) -> str:
    """:func:`targets` as the JSON text Prometheus' ``file_sd_configs`` reads."""
    return json.dumps(targets(dep, plan), indent=2) + "\n"


def file_sd_name(dep: Deployment) -> str:
    """``glmops-<deployment>.json``."""
    return f"glmops-{dep.name}.json"


def slo_rules(dep: Deployment) -> str:
    """The rule file with the deployment's SLO (``ttft_p99_slo_ms``) as a recording rule the
    shipped alert ``GlmopsTTFTp99AboveSLO`` compares with (``glmops:slo_ttft_p99_seconds``)."""
    slo = int(settings(dep)["ttft_p99_slo_ms"]) / 1000
    doc = {"groups": [{"name": f"glmops-slo-{dep.name}", "rules": [
        {"record": "glmops:slo_ttft_p99_seconds", "expr": f"vector({slo:g})",
         "labels": {"deployment": dep.name}}]}]}
    import yaml

    return yaml.safe_dump(doc, sort_keys=False)


def prometheus_config(dep: Deployment) -> str:
    """``/etc/prometheus/prometheus.yml``: job ``glmops`` over every ``glmops-*.json`` in the
    file_sd directory, the rule files in the rules directory, the scrape/evaluation interval."""
    import yaml

    mon = settings(dep)
    doc = {
        "global": {"scrape_interval": mon["scrape_interval"], "evaluation_interval": mon["scrape_interval"]},
        "rule_files": [f"{RULES_DIR}/*.yml"],
        "scrape_configs": [{"job_name": JOB, "file_sd_configs": [
            {"files": [f"{FILE_SD_DIR}/glmops-*.json"], "refresh_interval": "30s"}]}],
    }
    return "# rendered by glmops (roles/monitoring); changes here are overwritten\n" + yaml.safe_dump(doc, sort_keys=False)


def check(dep: Deployment, plan: Plan) -> list[Problem]:
    """Prometheus' and the exporters' ports against the Plan's on the same host (F05)."""
    mon = settings(dep)
    problems: list[Problem] = []
    if not mon["enabled"] and not mon["node_exporter"] and not mon["dcgm_exporter"]:
        return problems
    path = dep.source("glmops_monitoring")
    wanted: list[tuple[str, int, str]] = []
    if mon["enabled"]:
        port = int(mon["port"])
        if not 1024 <= port <= 65535:
            problems.append(Problem("TYPE", f"{path}.port", f"value {port} is out of range; accepted: 1024..65535"))
        wanted.append((mon["host"], port, "prometheus"))
    for name in ("node_exporter", "dcgm_exporter"):
        wanted += [(h, int(exporter(name)["port"]), name) for h in exporter_hosts(dep, plan, name)]
    if exporter_hosts(dep, plan, "dcgm_exporter"):
        problems += _check_dcgm_archive(mon.get("dcgm_exporter_archive") or "", f"{path}.dcgm_exporter_archive")
    for host, port, what in wanted:
        for svc in plan.services:
            used = {int(p) for ps in svc.ports.values() for p in ps} | {int(svc.port)}
            if svc.host == host and port in used:
                problems.append(Problem("PORT_COLLISION", path,
                                        f"{what} port {port} on {host} is also {svc.name}'s",
                                        "move the service's port or glmops_monitoring.port"))
    return problems


def _check_dcgm_archive(archive: str, path: str) -> list[Problem]:
    spec = exporter("dcgm_exporter")
    accepted = [dcgm_archive_name(a) for a in spec["archive_arch"]]
    if archive and archive.rsplit("/", 1)[-1] in accepted:
        return []
    found = f"value {archive!r}" if archive else "no value"
    return [Problem("DCGM_EXPORTER_ARCHIVE", path,
                    f"{found}; glmops_monitoring.dcgm_exporter installs NVIDIA's bare-metal DCGM-Exporter "
                    f"{spec['version']} from its archive; accepted: a path on the controller ending in "
                    f"{' or '.join(accepted)} (catalog monitoring.dcgm_exporter)",
                    "download NVIDIA's archive of that version and name its path, or turn dcgm_exporter off")]


def host_files(dep: Deployment, plan: Plan) -> list[tuple[str, str, str]]:
    """``(path, content, mode)`` of every file roles/monitoring places on the Prometheus host:
    ``prometheus.yml``, this deployment's file_sd JSON, the shipped alert rules, the SLO rule
    file. Empty unless ``glmops_monitoring.enabled``."""
    if not settings(dep)["enabled"]:
        return []
    return [
        ("/etc/prometheus/prometheus.yml", prometheus_config(dep), "0644"),
        (f"{FILE_SD_DIR}/{file_sd_name(dep)}", targets_json(dep, plan), "0644"),
        (f"{RULES_DIR}/glmops-alerts.yml", RULES.read_text(), "0644"),
        (f"{RULES_DIR}/glmops-slo-{dep.name}.yml", slo_rules(dep), "0644"),
    ]


def _listen(address: str, port: int) -> str:
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"


def view(dep: Deployment, plan: Plan) -> dict[str, Any]:
    """What the playbooks and the CLI read (glmops.deployview ``monitoring``): ``enabled``,
    ``hosts`` (the Prometheus host, or none), ``address``, ``port``, ``listen`` (address:port),
    ``url``, ``file_sd_name``, ``targets`` (:func:`targets`), ``files`` (:func:`host_files`
    as ``{path, content, mode}``), ``node_exporter``/``dcgm_exporter`` (host lists), each
    exporter's listen address per host, the node exporter's flags, the DCGM exporter's archive
    (controller path), install dir, binary, unit name, unit text per host (:func:`dcgm_unit`) and
    counters file, and ``dropins`` (Debian unit -> ``{path, content}``: :func:`hardening_dropin`)."""
    mon = settings(dep)
    host = mon["host"]
    address = dep.hosts[host].address if host in dep.hosts else host
    addr = f"[{address}]" if ":" in address else address
    node, dcgm = exporter("node_exporter"), exporter("dcgm_exporter")
    dcgm_listen = {h: _listen(dep.hosts[h].address, int(dcgm["port"])) for h in exporter_hosts(dep, plan, "dcgm_exporter")}
    return {
        "enabled": bool(mon["enabled"]),
        "hosts": [host] if mon["enabled"] else [],
        "address": address,
        "port": int(mon["port"]),
        "listen": f"{addr}:{int(mon['port'])}",
        "url": f"http://{addr}:{int(mon['port'])}",
        "file_sd_name": file_sd_name(dep),
        "targets": targets(dep, plan),
        "files": [{"path": p, "content": c, "mode": m} for p, c, m in host_files(dep, plan)],
        "node_exporter": list(plan.hosts) if mon["node_exporter"] else [],
        "node_exporter_listen": {h: _listen(dep.hosts[h].address, int(node["port"]))
                                 for h in plan.hosts} if mon["node_exporter"] else {},
        "node_exporter_flags": list(node.get("flags") or []),
        "dcgm_exporter": list(dcgm_listen),
        "dcgm_exporter_listen": dcgm_listen,
        "dcgm_exporter_archive": str(mon.get("dcgm_exporter_archive") or ""),
        "dcgm_exporter_dir": dcgm_install_dir(),
        "dcgm_exporter_binary": f"{dcgm_install_dir()}/{dcgm['binary']}",
        "dcgm_exporter_unit": str(dcgm["unit"]),
        "dcgm_exporter_units": {h: dcgm_unit(listen) for h, listen in dcgm_listen.items()},
        "dcgm_exporter_counters": dcgm_counters_csv() if dcgm_listen else "",
        "dcgm_exporter_counters_path": str(dcgm["counters_file"]),
        "dropins": {unit: {"path": dropin_path(unit), "content": hardening_dropin(unit)}
                    for unit in HARDENED_UNITS.values()},
    }


# ------------------------------------------------------------------ rules and dashboards


def alert_rules() -> dict[str, Any]:
    """The shipped alert rule file as data."""
    import yaml

    return yaml.safe_load(RULES.read_text())


def dashboards() -> dict[str, dict[str, Any]]:
    """Family -> the shipped Grafana dashboard (``dashboards/<family>.json``)."""
    return {p.stem: json.loads(p.read_text()) for p in sorted(DASHBOARDS.glob("*.json"))}


def dashboard_exprs(board: dict[str, Any]) -> list[str]:
    """Every target expression of every panel of ``board``."""
    return [t["expr"] for p in board.get("panels", []) for t in p.get("targets", []) if t.get("expr")]


def grafana_to_promql(expr: str) -> str:
    """A dashboard expression with Grafana's variables replaced so Prometheus can evaluate it
    (``$deployment``/``$pool`` -> ``.+``, ``$__rate_interval`` -> ``1m``)."""
    expr = expr.replace("$__rate_interval", "1m")
    return re.sub(r"\$\{?[a-z_]+\}?", ".+", expr)


_CMP = re.compile(r"\s(==|!=|>=|<=|>|<)\s")


def _top_level(expr: str, pattern: re.Pattern) -> list[tuple[int, int]]:
    """Spans of ``pattern`` matches outside parentheses/braces/brackets and quotes."""
    depth, quote, spans = 0, "", []
    for i, ch in enumerate(expr):
        if quote:
            quote = "" if ch == quote and expr[i - 1] != "\\" else quote
            continue
        if ch in "\"'":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif depth == 0:
            m = pattern.match(expr, i)
            if m:
                spans.append((m.start(), m.end()))
    return spans


def signals(expr: str) -> list[str]:
    """The measured sides of an alert expression: split at top-level ``and``/``unless``, each part
    without its top-level comparison (``X > 0.95`` -> ``X``). A healthy deployment makes an alert
    return nothing; its signals must still return series (the lab e2e evaluates them)."""
    expr = " ".join(expr.split())
    parts, last = [], 0
    for start, end in _top_level(expr, re.compile(r"\s(and|unless)\s")):
        parts.append(expr[last:start])
        last = end
    parts.append(expr[last:])
    out = []
    for part in parts:
        while True:
            before = part = part.strip()
            if part.startswith("(") and part.endswith(")") and _balanced(part[1:-1]):
                part = part[1:-1].strip()
            cmp = _top_level(part, _CMP)
            part = part[:cmp[0][0]].strip() if cmp else part
            if part == before:
                break
        out.append(part)
    return out


def _balanced(text: str) -> bool:
    depth = 0
    for ch in text:
        depth += ch in "([{"
        depth -= ch in ")]}"
        if depth < 0:
            return False
    return depth == 0


def metric_names(expr: str) -> set[str]:
    """Metric names ``expr`` selects (every selector is written ``name{...}``), histogram
    suffixes (``_bucket``/``_sum``/``_count``) stripped."""
    out = set()
    for name in METRIC_IN_EXPR.findall(expr):
        out.add(re.sub(r"_(bucket|sum|count)$", "", name))
    return out


def known_metrics(engine: str) -> set[str]:
    """Catalog ``engines.<engine>.metrics.names`` (or ``monitoring.<exporter>.names``)."""
    spec = _catalog().engine(engine).get("metrics") or exporter(engine)
    return set(spec.get("names") or [])


# ------------------------------------------------------------------ live numbers (glmops status)

def parse_samples(text: str) -> dict[str, float]:
    """Prometheus text -> metric name -> sum of its samples (labels summed over; comments skipped);
    ``{}`` for text that is not Prometheus exposition (:func:`glmops.smoke.parse_prometheus`)."""
    try:
        return parse_prometheus(text)
    except ValueError:
        return {}


def live_numbers(engine: str, text: str) -> dict[str, float | None]:
    """``{running, waiting, kv_cache}`` from one /metrics text, by the catalog's
    ``metrics.live`` names for ``engine``, then the workers' engines' (a Dynamo worker's system
    port passes its vLLM/SGLang series through); None where none of them is in the text."""
    samples = parse_samples(text)
    out: dict[str, float | None] = {"running": None, "waiting": None, "kv_cache": None}
    for eng in dict.fromkeys((engine, "vllm", "sglang", "trtllm")):
        live = ((_catalog().engine(eng).get("metrics") or {}).get("live")) or {}
        for key in out:
            if out[key] is None and live.get(key) in samples:
                out[key] = samples[live[key]]
    return out


def read_live(services: list[dict[str, Any]], timeout: float = 3.0) -> dict[str, dict[str, float | None]]:
    """Service name -> :func:`live_numbers` for every service view with a ``metrics_url``
    (GETs in parallel, ``timeout`` s each); a service that does not answer maps to ``{}``."""
    def one(svc):
        try:
            with urllib.request.urlopen(svc["metrics_url"], timeout=timeout) as resp:
                return svc["name"], live_numbers(svc["engine"], resp.read().decode("utf-8", "replace"))
        except (OSError, ValueError):
            return svc["name"], {}

    wanted = [s for s in services if s.get("metrics_url")]
    if not wanted:
        return {}
    with ThreadPoolExecutor(max_workers=min(16, len(wanted))) as pool:
        return dict(pool.map(one, wanted))
