"""glmops.smoke without a server: plan -> target, metrics parsing, acceptance math, timeouts."""
from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from glmops import planning
from glmops import smoke as sm

REPO = Path(__file__).resolve().parents[2]


def _target(inv: str, topology: str) -> sm.SmokeTarget:
    return planning.smoke_target(str(REPO / "inventories" / inv), topology)


# ------------------------------------------------------------------ plan -> target
def test_lab_disagg_target_comes_from_the_plan():
    t = _target("lab", "disagg")
    assert t.endpoint == "http://10.77.0.13:8000" and t.model == "tiny-llama"
    assert t.engine == "vllm" and t.topology == "disagg" and not t.multimodal
    roles = {(w.role, w.host, w.base_url) for w in t.workers}
    assert roles == {("prefill", "lab-1", "http://10.77.0.11:8001"), ("decode", "lab-2", "http://10.77.0.12:8002")}
    assert all(w.metrics_urls == [w.base_url + "/metrics"] for w in t.workers)
    assert {w.unit for w in t.workers} == {"glm-lab-prefill-0.service", "glm-lab-decode-0.service"}
    # the tiny lab Llama cannot answer the GLM-only checks: declared skips, never passes
    assert set(t.skips) == {"reasoning", "tool_call", "image", "structured"}
    assert "tiny lab Llama" in t.skips["tool_call"]


def test_trtllm_workers_read_prometheus_path_first_and_router_is_not_a_worker():
    t = _target("b200", "disagg")
    assert {w.role for w in t.workers} == {"prefill", "decode"}
    assert all(w.metrics_urls[0].endswith("/prometheus/metrics") and w.metrics_urls[1].endswith("/metrics")
               for w in t.workers)
    assert t.skips == {}  # the GLM checkpoint answers every check


def test_speculative_and_multimodal_flags_reach_the_target():
    h200 = _target("h200", "agg")
    assert h200.speculative == {"method": "mtp", "num_speculative_tokens": 7}
    assert _target("gb200", "agg").multimodal is True


# ------------------------------------------------------------------ metrics
PROM = """\
# HELP vllm:request_success_total Count of successfully processed requests.
# TYPE vllm:request_success_total counter
vllm:request_success_total{engine="0",finished_reason="stop",model_name="m"} 3.0
vllm:request_success_total{engine="0",finished_reason="length",model_name="m"} 4.0
vllm:prompt_tokens_total{engine="0",model_name="m"} 120.0
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 10.0
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 30.0
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 15.0
vllm:cache_config_info{block_size="16"} 1.0
"""


def test_parse_prometheus_sums_label_sets_and_rejects_other_text():
    p = sm.parse_prometheus(PROM)
    assert p["vllm:request_success_total"] == 7.0
    assert p["vllm:prompt_tokens_total"] == 120.0
    with pytest.raises(ValueError):
        sm.parse_prometheus("<html>not metrics</html>")


def test_vllm_acceptance_from_counters():
    acc = sm.acceptance([sm.MetricsRead(url="u", prom=sm.parse_prometheus(PROM))])
    assert acc["acceptance_rate"] == pytest.approx(15 / 30)
    assert acc["acceptance_length"] == pytest.approx(1 + 15 / 10)


def test_sglang_gauge_and_trtllm_iteration_stats():
    sg = sm.acceptance([sm.MetricsRead(prom={"sglang:spec_accept_length": 2.25})])
    assert sg["acceptance_length"] == 2.25 and sg["acceptance_rate"] is None
    its = [{"specDecodingStats": {"numDraftTokens": 9, "numAcceptedTokens": 3, "numRequestsWithDraftTokens": 3,
                                  "acceptanceLength": 2.0}},
           {"specDecodingStats": {"numDraftTokens": 3, "numAcceptedTokens": 3, "numRequestsWithDraftTokens": 1,
                                  "acceptanceLength": 4.0}}]
    tr = sm.acceptance([sm.MetricsRead(iterations=its)])
    assert tr["acceptance_rate"] == pytest.approx(6 / 12)
    assert tr["acceptance_length"] == pytest.approx((2.0 + 4.0) / 2)  # the engine's own figure
    assert sm.acceptance([sm.MetricsRead(prom={"vllm:prompt_tokens_total": 1})]) is None


def test_work_done_counts_only_counters_that_grew():
    before = sm.MetricsRead(prom={"vllm:prompt_tokens_total": 10, "vllm:generation_tokens_total": 5})
    after = sm.MetricsRead(prom={"vllm:prompt_tokens_total": 18, "vllm:generation_tokens_total": 5})
    assert sm.work_done(before, after) == {"vllm:prompt_tokens_total": 8}
    assert sm.work_done(after, after) == {}
    assert sm.work_done(before, sm.MetricsRead(iterations=[{}, {}])) == {"iterations": 2.0}
    assert not sm.has_work_counters(sm.MetricsRead(prom={"process_cpu_seconds_total": 3}))


def test_label_selectors_and_only_successful_requests_count():
    text = ('sglang:per_stage_req_latency_seconds_count{model_name="m",stage="decode_transferred"} 2\n'
            'sglang:per_stage_req_latency_seconds_count{model_name="m",stage="decode_waiting"} 5\n'
            'vllm:request_success_total{engine="0",finished_reason="stop"} 1\n'
            'vllm:prompt_tokens_total{engine="0"} 40\n')
    series: list = []
    read = sm.MetricsRead(url="u", prom=sm.parse_prometheus(text, series), series=series)
    assert read.value('sglang:per_stage_req_latency_seconds_count{stage="decode_transferred"}') == 2
    assert read.value("sglang:per_stage_req_latency_seconds_count") == 7
    assert read.value('sglang:per_stage_req_latency_seconds_count{stage="prefill_bootstrap"}') is None
    # F23: a request that failed may still count prompt tokens; only the success counter decides
    before = sm.MetricsRead(prom={"vllm:request_success_total": 1, "vllm:prompt_tokens_total": 10})
    failed = sm.MetricsRead(prom={"vllm:request_success_total": 1, "vllm:prompt_tokens_total": 40})
    assert sm.work_done(before, failed) and not sm.served_well(before, failed)
    assert sm.served_well(sm.MetricsRead(prom={"vllm:request_success_total": 0}), read)
    assert sm.grown(before, read, ["vllm:external_prefix_cache_hits_total"]) == {}


def test_tiny_png_is_a_png():
    png = sm.tiny_png()
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and b"IHDR" in png and png.endswith(b"IEND\xaeB`\x82")


def test_unknown_check_names_are_refused():
    with pytest.raises(ValueError, match="unknown check.*bogus.*accepted: models"):
        sm.run(sm.SmokeTarget("http://127.0.0.1:9", "m"), only=["bogus"])


# ------------------------------------------------------------------ F06 timeouts
class _Slow(BaseHTTPRequestHandler):
    delay = 1.0

    def log_message(self, *a):
        pass

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        time.sleep(self.delay)
        body = json.dumps({"choices": [{"text": " Paris.", "finish_reason": "stop"}],
                           "usage": {"completion_tokens": 2}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        try:
            self.wfile.write(body)
        except OSError:  # the client gave up (the timeout under test)
            pass

    def do_GET(self):
        body = json.dumps({"data": [{"id": "m"}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def slow_server():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Slow)
    srv.daemon_threads = True
    th = threading.Thread(target=srv.serve_forever, daemon=True)
    th.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


def test_first_generation_request_gets_the_long_timeout_later_ones_the_tight_one(slow_server):
    c = sm.Client(slow_server, first_timeout=5.0, timeout=0.4)
    assert c.get("/v1/models")["data"][0]["id"] == "m"  # a GET does not use up the long timeout
    t0 = time.monotonic()
    c.post("/v1/completions", {"prompt": "x"})  # 1 s answer within the 5 s first timeout
    assert time.monotonic() - t0 >= 1.0
    with pytest.raises(sm.CheckFailed, match=r"no answer within 0.4 s \(timeout\)"):
        c.post("/v1/completions", {"prompt": "x"})


def test_first_request_timeout_is_named_when_it_expires(slow_server):
    c = sm.Client(slow_server, first_timeout=0.3, timeout=5.0)
    with pytest.raises(sm.CheckFailed, match=r"no answer within 0.3 s \(first generation request\)"):
        c.post("/v1/completions", {"prompt": "x"})


def test_smoke_run_reports_the_tight_timeout_on_a_later_check(slow_server):
    report = sm.run(sm.SmokeTarget(slow_server, "m"), first_timeout=5.0, timeout=0.4,
                    only=["models", "completion", "structured"])
    by = {c.name: c for c in report.checks}
    assert by["models"].status == sm.PASS
    assert by["completion"].status == sm.PASS and "Paris" in by["completion"].reason
    assert by["structured"].status == sm.FAIL and "0.4 s" in by["structured"].reason
    assert by["tool_call"].status == sm.SKIP and "not selected" in by["tool_call"].reason
    assert not report.ok


# ------------------------------------------------------------------ journal fallback
def test_journal_reader_counts_request_lines_over_ssh(monkeypatch):
    import subprocess

    journal = (
        'INFO:     10.77.0.13:40112 - "POST /v1/completions HTTP/1.1" 200 OK\n'
        'INFO:     10.77.0.13:40114 - "GET /metrics HTTP/1.1" 200 OK\n'
        'INFO:     10.77.0.13:40116 - "POST /v1/chat/completions HTTP/1.1" 200 OK\n'
        'INFO:     10.77.0.13:40118 - "POST /v1/completions HTTP/1.1" 400 Bad Request\n'
        "INFO 11-29 09:00:01 loggers.py: Engine 000: ... External prefix cache hit rate: 100.0%\n"
        "INFO 11-29 09:00:11 loggers.py: Engine 000: ... External prefix cache hit rate: 0.0%\n"
        "INFO 11-29 09:00:00 loggers.py: Engine 000: Avg prompt throughput: 1.0 tokens/s\n"
    )
    calls = []

    def fake_run(argv, **kw):
        calls.append(argv)
        return subprocess.CompletedProcess(argv, 0, stdout=journal, stderr="")

    monkeypatch.setattr(subprocess, "run", fake_run)
    read = sm.journal_reader(str(REPO / "inventories" / "lab"))
    w = sm.Worker("glm-lab-prefill-0", "prefill", "lab-1", "glm-lab-prefill-0.service", "http://10.77.0.11:8001")
    assert read(w, 1795941800.0) == 2  # the 400 line does not count (F23: only 2xx requests)
    from glmops.engines import vllm
    assert read(w, 1795941800.0, list(vllm.SPEC.kv_transfer.log_lines)) == 1  # a non-zero hit rate
    argv = calls[0]
    assert argv[0] == "ssh" and "root@10.77.0.11" in argv
    assert "--unit=glm-lab-prefill-0.service" in argv[-1] and "journalctl" in argv[-1]
    monkeypatch.setattr(subprocess, "run", lambda argv, **kw: subprocess.CompletedProcess(argv, 255, "", "denied"))
    assert read(w, 0.0) is None


@pytest.mark.parametrize("verb", ["smoke", "bench"])
@pytest.mark.parametrize("url,needle", [
    ("notaurl", "--endpoint 'notaurl' is not accepted; accepted: http(s)://HOST[:PORT]"),
    ("ftp://10.0.0.5:8000", "'ftp://10.0.0.5:8000' is not accepted"),
    ("http://10.0.0.5:99999", "is not a URL"),
])
def test_an_endpoint_that_is_not_a_url_is_refused_before_any_request(verb, url, needle):
    from click.testing import CliRunner

    from glmops.cli import main

    r = CliRunner().invoke(main, [verb, "--endpoint", url, "--model", "m"], env={"COLUMNS": "300"})
    assert r.exit_code == 2, r.output
    assert needle in " ".join(r.output.split()), r.output


def test_bench_flags_are_checked_together_before_any_ssh():
    from click.testing import CliRunner

    from glmops.cli import main

    from pathlib import Path

    inv = str(Path(__file__).resolve().parents[2] / "inventories" / "b200")
    r = CliRunner().invoke(main, ["bench", "-i", inv, "--bench-host", "nonexistent", "--gpus", "0",
                                  "--point-timeout", "-1"], env={"COLUMNS": "300"})
    out = " ".join(r.output.split())
    assert r.exit_code == 2, r.output
    assert "--bench-host 'nonexistent' is not accepted; accepted: router, controller or an inventory host (b200-node-0)" in out
    assert "--gpus 0 is not accepted" in out and "--point-timeout -1.0 is not accepted" in out


def test_a_401_says_whether_a_key_was_sent_and_where_smoke_takes_it(monkeypatch):
    """A fresh-user trial read ``HTTP 401: 401 Unauthorized server returned status:`` with no
    hint: the failure now folds the body's whitespace and says whether a key went out."""
    import http.server

    from local_http import reply, serve

    from glmops.smoke import CheckFailed, Client

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            reply(self, 401, b"401 Unauthorized\n  server returned status: ")

        def log_message(self, *args):
            pass

    with serve(Handler) as url:
        with pytest.raises(CheckFailed) as bare:
            Client(url).get("/v1/models")
        with pytest.raises(CheckFailed) as keyed:
            Client(url, headers={"Authorization": "Bearer sk-wrong-key-123"}).get("/v1/models")
    assert str(bare.value) == (f"GET {url}/v1/models: HTTP 401: 401 Unauthorized server returned status: "
                               "(no API key was sent: smoke reads glmops_api_key from the inventory, Vault values "
                               "with --vault-password-file; with --endpoint and no -i, from GLMOPS_API_KEY)")
    assert "the API key sent was refused" in str(keyed.value) and "sk-wrong-key-123" not in str(keyed.value)
