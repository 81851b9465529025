"""The engine doubles serve Prometheus text as the real engines do (tests/doubles README): only
when the real one would (SGLang ``--enable-metrics``, TRT-LLM ``return_perf_metrics``), with the
metric names the catalog cites from upstream (engines.<engine>.metrics.names), so every rule and
dashboard expression on SGLang / TRT-LLM / SGLang-router series selects series a double serves."""
from __future__ import annotations

import re

from conftest import http, wait_status
from engine_http_double import free_port
from test_trtllm_serve_double import SEED000_CONFIG

from glmops import monitoring
from glmops.engines.base import CATALOG


def served(text: str) -> set[str]:
    names = set(re.findall(r"^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{|\s)", text, re.M))
    return {re.sub(r"_(bucket|sum|count)$", "", n) for n in names}


def catalog_names(engine: str, with_spec: bool) -> set[str]:
    spec = CATALOG.engine(engine)["metrics"]
    return {n for n in spec["names"] if with_spec or n not in (spec.get("only_with") or {})}


def exprs_naming(prefix: str) -> list[tuple[str, set[str]]]:
    out = []
    for group in monitoring.alert_rules()["groups"]:
        out += [(r["alert"], monitoring.metric_names(r["expr"])) for r in group["rules"]]
    for fam, board in monitoring.dashboards().items():
        out += [(fam, monitoring.metric_names(e)) for e in monitoring.dashboard_exprs(board)]
    return [(w, {n for n in names if n.startswith(prefix)}) for w, names in out
            if any(n.startswith(prefix) for n in names)]


def test_sglang_double_serves_the_catalog_names_only_with_enable_metrics(procs, tmp_path):
    sgl = procs.link("launch_server", "sglang_double.py")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    procs.start([sgl, "--model-path", "m", "--host", "127.0.0.1", "--port", str(port), "--enable-metrics",
                 "--speculative-algorithm", "EAGLE"], name="sgl")
    wait_status(url + "/health")
    http("POST", url + "/v1/completions", {"prompt": "hi", "max_tokens": 2})
    status, text = http("GET", url + "/metrics")
    assert status == 200
    names = served(text)
    assert catalog_names("sglang", with_spec=True) <= names, catalog_names("sglang", True) - names
    for where, used in exprs_naming("sglang:"):
        assert used <= names, (where, used - names)
    port2 = free_port()
    procs.start([sgl, "--model-path", "m", "--host", "127.0.0.1", "--port", str(port2)], name="off")
    wait_status(f"http://127.0.0.1:{port2}/health")
    assert http("GET", f"http://127.0.0.1:{port2}/metrics")[0] == 404  # off by default, as upstream


def test_trtllm_double_serves_the_catalog_names_with_the_keys_glmops_sets(procs, tmp_path):
    trt = procs.link("trtllm-serve", "trtllm_serve_double.py")
    keys = CATALOG.engine("trtllm")["metrics"]["config"]
    assert keys == {"return_perf_metrics": True, "enable_iter_perf_stats": True}
    cfg = tmp_path / "w.yml"
    cfg.write_text(SEED000_CONFIG + "".join(f"{k}: true\n" for k in keys))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    procs.start([trt, str(tmp_path), "--host", "127.0.0.1", "--port", str(port), "--config", str(cfg)], name="trt")
    wait_status(url + "/health")
    http("POST", url + "/v1/completions", {"prompt": "hi", "max_tokens": 2})
    status, text = http("GET", url + CATALOG.engine("trtllm")["metrics"]["path"])
    assert status == 200
    names = served(text)
    want = catalog_names("trtllm", with_spec="speculative_config" in SEED000_CONFIG)
    assert want <= names, want - names
    for where, used in exprs_naming("trtllm_"):
        used = {n for n in used if n in want}
        assert used <= names, (where, used - names)


def test_sglang_router_double_serves_its_metrics_on_the_prometheus_host(procs, tmp_path):
    sgl = procs.link("launch_server", "sglang_double.py")
    router = procs.link("launch_router", "sglang_router_double.py")
    wport = free_port()
    procs.start([sgl, "--model-path", "m", "--host", "127.0.0.1", "--port", str(wport)], name="w")
    wait_status(f"http://127.0.0.1:{wport}/health")
    rport, pport = free_port(), free_port()
    procs.start([router, "--worker-urls", f"http://127.0.0.1:{wport}", "--host", "127.0.0.1", "--port", str(rport),
                 "--prometheus-host", "127.0.0.1", "--prometheus-port", str(pport)], name="r")
    wait_status(f"http://127.0.0.1:{rport}/health")
    http("POST", f"http://127.0.0.1:{rport}/v1/completions", {"model": "m", "prompt": "hi", "max_tokens": 2})
    status, text = http("GET", f"http://127.0.0.1:{pport}/metrics")
    assert status == 200
    names = served(text)
    for where, used in exprs_naming("sgl_router_"):
        assert used <= names, (where, used - names)
    assert {"sgl_router_requests_total", "sgl_router_processed_requests_total", "sgl_router_active_workers"} <= names
