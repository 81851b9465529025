"""``glmops smoke`` against the strict trtllm-serve double on loopback (GLM-like answers:
reasoning_content, tool_calls under tool_choice auto, JSON-schema output, SSE, Prometheus
metrics with MTP acceptance) and its wrong-answer switches (DOUBLE_FAULT)."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from glmops import smoke as sm

REPO = Path(__file__).resolve().parents[2]
DOUBLE = REPO / "tests" / "doubles" / "trtllm_serve_double.py"
MODEL = "zai-org/GLM-5.3-Flash"
# seed 000's LLM-API options with metrics on (return_perf_metrics: /prometheus/metrics;
# enable_iter_perf_stats: /metrics iteration stats with specDecodingStats)
CONFIG = """\
kv_cache_config:
  dtype: fp8
speculative_config:
  decoding_type: MTP
  max_draft_len: 3
return_perf_metrics: true
enable_iter_perf_stats: true
"""
TRANSCEIVER = "cache_transceiver_config:\n  backend: NIXL\n  transceiver_runtime: PYTHON\n"
PARSERS = ["--tool_parser", "glm47", "--reasoning_parser", "deepseek-r1"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_health(url: str, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"{url}/health not 200 within {timeout} s")


class Doubles:
    def __init__(self, tmp: Path):
        self.tmp, self.procs = tmp, []

    def start(self, args: list[str], env: dict | None = None, name: str = "d") -> subprocess.Popen:
        log = open(self.tmp / f"{name}.log", "w")  # noqa: SIM115 - stays open for the process
        p = subprocess.Popen([sys.executable, str(DOUBLE), *args], stdout=log, stderr=subprocess.STDOUT,
                             env={**os.environ, **(env or {})})
        self.procs.append(p)
        return p

    def worker(self, name: str, config: str = CONFIG, extra=(), env=None) -> str:
        port = free_port()
        cfg = self.tmp / f"{name}.yml"
        cfg.write_text(config)
        self.start([str(self.tmp), "--served_model_name", MODEL, "--host", "127.0.0.1", "--port", str(port),
                    "--config", str(cfg), *extra], env=env, name=name)
        url = f"http://127.0.0.1:{port}"
        wait_health(url)
        return url

    def orchestrator(self, ctx: str, gen: str) -> str:
        port = free_port()
        cfg = self.tmp / "disagg.yaml"
        cfg.write_text(f"hostname: 127.0.0.1\nport: {port}\ncontext_servers:\n  num_instances: 1\n  urls:\n"
                       f"    - \"{ctx[7:]}\"\ngeneration_servers:\n  num_instances: 1\n  urls:\n"
                       f"    - \"{gen[7:]}\"\n")
        self.start(["disaggregated", "-c", str(cfg), "-t", "20"], name="orch")
        url = f"http://127.0.0.1:{port}"
        wait_health(url)
        return url

    def stop(self):
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()


@pytest.fixture
def doubles(tmp_path):
    d = Doubles(tmp_path)
    yield d
    d.stop()


def worker(name: str, role: str, url: str) -> sm.Worker:
    return sm.Worker(name=name, role=role, host="127.0.0.1", unit=f"{name}.service", base_url=url,
                     metrics_urls=[url + p for p in sm.metrics_paths("trtllm")])


def glm_target(url: str, **kw) -> sm.SmokeTarget:
    return sm.SmokeTarget(endpoint=url, model=MODEL, engine="trtllm", topology="agg", multimodal=True,
                          speculative={"method": "mtp", "num_speculative_tokens": 3},
                          workers=[worker("agg-0", "agg", url)], **kw)


def by_name(report: sm.SmokeReport) -> dict[str, sm.CheckResult]:
    return {c.name: c for c in report.checks}


# ------------------------------------------------------------------ aggregated
def test_every_check_passes_on_a_correct_glm_double(doubles):
    url = doubles.worker("agg", extra=PARSERS)
    report = sm.run(glm_target(url), first_timeout=30, timeout=10)
    checks = by_name(report)
    for name in ("models", "completion", "reasoning", "tool_call", "structured", "stream", "image", "acceptance"):
        assert checks[name].status == sm.PASS, (name, checks[name].reason)
    assert checks["disagg"].status == sm.SKIP and "aggregated" in checks["disagg"].reason
    assert report.ok
    assert checks["tool_call"].detail["arguments"]["city"]
    assert checks["structured"].detail["json"] in ({"answer": "yes"}, {"answer": "no"})
    # DOUBLE_MTP_ACCEPTANCE default 2.5; rate (2.5 - 1) / 3 draft tokens
    assert checks["acceptance"].detail["acceptance_length"] == pytest.approx(2.5)
    assert checks["acceptance"].detail["acceptance_rate"] == pytest.approx(0.5, abs=0.05)


@pytest.mark.parametrize("fault,check,needle,also", [
    ("no_tool_calls", "tool_call", "finish_reason 'stop' with 0 tool_calls (expected 'tool_calls')", ()),
    # inline <think> also breaks the JSON content: that failure is right too
    ("no_reasoning", "reasoning", "reasoning is inline in content", ("structured",)),
    ("bad_json", "structured", "content is not JSON", ()),
    ("stream_no_done", "stream", "without 'data: [DONE]'", ()),
])
def test_a_wrong_answering_double_fails_exactly_its_check(doubles, fault, check, needle, also):
    url = doubles.worker("bad", extra=PARSERS, env={"DOUBLE_FAULT": fault})
    report = sm.run(glm_target(url), first_timeout=30, timeout=10)
    checks = by_name(report)
    assert checks[check].status == sm.FAIL
    assert needle in checks[check].reason, checks[check].reason
    others = [c for c in report.checks if c.name != check and c.status == sm.FAIL and c.name not in also]
    assert others == [], [(c.name, c.reason) for c in others]
    assert not report.ok


def test_tool_check_never_sends_required_or_named_choice(doubles):
    # the double answers 400 for tool_choice "required"/named (seed 000: unsupported); the
    # check passes, so it sent "auto"
    url = doubles.worker("agg", extra=PARSERS)
    checks = by_name(sm.run(glm_target(url), only=["tool_call"]))
    assert checks["tool_call"].status == sm.PASS
    with pytest.raises(sm.CheckFailed, match="not supported"):
        sm.Client(url).post("/v1/chat/completions", {"model": MODEL, "messages": [{"role": "user", "content": "x"}],
                                                     "tools": sm.TOOLS, "tool_choice": "required"})


def test_acceptance_floor_fails_the_smoke(doubles):
    url = doubles.worker("agg", extra=PARSERS, env={"DOUBLE_MTP_ACCEPTANCE": "1.4"})
    checks = by_name(sm.run(glm_target(url), min_acceptance=2.0, only=["completion", "acceptance"]))
    assert checks["acceptance"].status == sm.FAIL
    assert "acceptance length 1.40" in checks["acceptance"].reason
    assert "below the floor 2.0" in checks["acceptance"].reason


def test_no_metrics_means_skip_not_pass_and_floor_then_fails(doubles):
    url = doubles.worker("agg", config="kv_cache_config:\n  dtype: fp8\n", extra=PARSERS)
    checks = by_name(sm.run(glm_target(url), only=["acceptance"]))
    assert checks["acceptance"].status == sm.SKIP
    assert "exports no acceptance metrics" in checks["acceptance"].reason
    floor = by_name(sm.run(glm_target(url), only=["acceptance"], min_acceptance=2.0))
    assert floor["acceptance"].status == sm.FAIL and "cannot check --min-acceptance" in floor["acceptance"].reason


# ------------------------------------------------------------------ disaggregated
def test_disagg_prefill_and_decode_each_served_part_shown_from_metrics(doubles):
    ctx = doubles.worker("ctx", config=CONFIG + TRANSCEIVER, extra=PARSERS)
    gen = doubles.worker("gen", config=CONFIG + TRANSCEIVER, extra=PARSERS)
    front = doubles.orchestrator(ctx, gen)
    target = sm.SmokeTarget(endpoint=front, model=MODEL, engine="trtllm", topology="disagg",
                            speculative={"method": "mtp"},
                            workers=[worker("ctx-0", "prefill", ctx), worker("gen-0", "decode", gen)])
    report = sm.run(target, first_timeout=30, timeout=10, skip=["image"])
    checks = by_name(report)
    assert checks["models"].status == sm.PASS and "no /v1/models" in checks["models"].reason
    assert checks["disagg"].status == sm.PASS, checks["disagg"].reason
    assert "prefill ctx-0 and decode gen-0 served the request" in checks["disagg"].reason
    assert checks["disagg"].detail["ctx-0"]["grew"] and checks["disagg"].detail["gen-0"]["grew"]
    assert report.ok, [(c.name, c.reason) for c in report.checks if c.status == sm.FAIL]


def test_disagg_fails_when_a_role_did_no_work(doubles):
    # the orchestrator routes to ctx/gen; the plan's "decode" worker is an idle third server
    ctx = doubles.worker("ctx", config=CONFIG + TRANSCEIVER)
    gen = doubles.worker("gen", config=CONFIG + TRANSCEIVER)
    idle = doubles.worker("idle", config=CONFIG + TRANSCEIVER)
    front = doubles.orchestrator(ctx, gen)
    target = sm.SmokeTarget(endpoint=front, model=MODEL, engine="trtllm", topology="disagg",
                            workers=[worker("ctx-0", "prefill", ctx), worker("idle-0", "decode", idle)])
    checks = by_name(sm.run(target, only=["disagg"]))
    assert checks["disagg"].status == sm.FAIL
    assert "no decode worker shows a share of the request" in checks["disagg"].reason


def test_disagg_without_metrics_uses_the_journal_reader_and_still_needs_the_kv(doubles):
    """No Prometheus text: the journal's 2xx request lines show each side's share; without the
    generation worker's per-request perf metrics nothing shows that KV moved: fail, naming why."""
    plain = "kv_cache_config:\n  dtype: fp8\n" + TRANSCEIVER
    ctx = doubles.worker("ctx", config=plain)
    gen = doubles.worker("gen", config=plain)
    front = doubles.orchestrator(ctx, gen)
    target = sm.SmokeTarget(endpoint=front, model=MODEL, engine="trtllm", topology="disagg",
                            workers=[worker("ctx-0", "prefill", ctx), worker("gen-0", "decode", gen)])
    asked = []

    def journal(w, since, patterns=None):
        asked.append((w.name, since, patterns))
        return 1

    checks = by_name(sm.run(target, only=["disagg"], log_reader=journal))
    assert [a[0] for a in asked] == ["ctx-0", "gen-0"] and asked[0][2] is None
    reason = checks["disagg"].reason
    assert checks["disagg"].status == sm.FAIL and "no KV transfer evidence" in reason, reason
    assert f"no request at {gen}/perf_metrics received KV" in reason, reason
    assert checks["disagg"].detail == {} and "decode gen-0 served the request without KV from prefill ctx-0" in reason
    none = by_name(sm.run(target, only=["disagg"]))
    assert none["disagg"].status == sm.FAIL and "no journal access" in none["disagg"].reason


# ------------------------------------------------------------------ F23 on SGLang: the router's PD mode
SGL_DOUBLE = REPO / "tests" / "doubles" / "sglang_double.py"
SGL_ROUTER = REPO / "tests" / "doubles" / "sglang_router_double.py"
SGL_MODEL = "RadixArk/GLM-5.3-Flash-NVFP4"


def sglang_worker(d: Doubles, name: str, extra=()) -> str:
    port = free_port()
    log = open(d.tmp / f"{name}.log", "w")  # noqa: SIM115 - stays open for the process
    d.procs.append(subprocess.Popen(
        [sys.executable, str(SGL_DOUBLE), "--model-path", SGL_MODEL, "--host", "127.0.0.1", "--port", str(port),
         "--enable-metrics", *extra], stdout=log, stderr=subprocess.STDOUT))
    url = f"http://127.0.0.1:{port}"
    wait_health(url)
    return url


def sglang_pd_router(d: Doubles, prefill: str, boot: str, decode: str) -> str:
    port = free_port()
    log = open(d.tmp / "router.log", "w")  # noqa: SIM115 - stays open for the process
    d.procs.append(subprocess.Popen(
        [sys.executable, str(SGL_ROUTER), "--pd-disaggregation", "--prefill", prefill, boot, "--decode", decode,
         "--host", "127.0.0.1", "--port", str(port), "--prometheus-port", str(free_port()),
         "--prometheus-host", "127.0.0.1"], stdout=log, stderr=subprocess.STDOUT))
    url = f"http://127.0.0.1:{port}"
    wait_health(url)
    return url


def sglang_target(front: str, prefill: str, decode: str) -> sm.SmokeTarget:
    def w(name, role, url):
        return sm.Worker(name=name, role=role, host="127.0.0.1", unit=f"{name}.service", base_url=url,
                         metrics_urls=[url + p for p in sm.metrics_paths("sglang")])
    return sm.SmokeTarget(endpoint=front, model=SGL_MODEL, engine="sglang", topology="disagg",
                          workers=[w("prefill-0", "prefill", prefill), w("decode-0", "decode", decode)])


def test_sglang_disagg_passes_on_the_decode_transferred_stage(doubles):
    boot = free_port()
    prefill = sglang_worker(doubles, "prefill", ["--disaggregation-mode", "prefill",
                                                 "--disaggregation-bootstrap-port", str(boot)])
    decode = sglang_worker(doubles, "decode", ["--disaggregation-mode", "decode"])
    front = sglang_pd_router(doubles, prefill, str(boot), decode)
    checks = by_name(sm.run(sglang_target(front, prefill, decode), only=["disagg"]))
    assert checks["disagg"].status == sm.PASS, checks["disagg"].reason
    assert ('KV handed over: decode-0 sglang:per_stage_req_latency_seconds_count{stage="decode_transferred"} 1'
            in checks["disagg"].reason), checks["disagg"].reason


def test_disagg_fails_when_both_roles_are_aggregated_workers_running_the_whole_request(doubles):
    """F23: the PD router in front of two aggregated servers: each runs the whole request (its
    success counter grows), no KV moves; the check fails naming the missing transfer evidence."""
    a = sglang_worker(doubles, "agg-a")
    b = sglang_worker(doubles, "agg-b")
    front = sglang_pd_router(doubles, a, "none", b)
    checks = by_name(sm.run(sglang_target(front, a, b), only=["disagg"]))
    res = checks["disagg"]
    assert res.status == sm.FAIL, res.reason
    assert res.reason.startswith("no KV transfer evidence: decode decode-0 served the request without KV "
                                 "from prefill prefill-0 (each worker ran the whole request"), res.reason
    assert ('decode-0: ' + b + '/metrics shows none of '
            'sglang:per_stage_req_latency_seconds_count{stage="decode_transferred"}') in res.reason, res.reason
    # both did the whole request: each one's own success counter grew
    state = {u: json.loads(urllib.request.urlopen(u + "/_double/state", timeout=5).read()) for u in (a, b)}
    assert all(s["counters"].get("requests") == 1 for s in state.values()), state


# ------------------------------------------------------------------ CLI
def glmops(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "glmops.cli", *args], check=False, capture_output=True, text=True,
                          timeout=120, cwd=REPO, env={**os.environ, "COLUMNS": "200"})


def test_cli_json_and_exit_codes(doubles):
    good = doubles.worker("good", extra=PARSERS)
    bad = doubles.worker("bad", extra=PARSERS, env={"DOUBLE_FAULT": "no_tool_calls"})
    r = glmops("smoke", "--endpoint", good, "--model", MODEL, "--multimodal", "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    out = json.loads(r.stdout)
    assert out["ok"] and out["failed"] == 0 and out["passed"] == 7
    r = glmops("smoke", "--endpoint", bad, "--model", MODEL, "--timeout", "5")
    assert r.returncode == 1
    assert "tool_call" in r.stdout and "fail" in r.stdout and "expected 'tool_calls'" in r.stdout
    r = glmops("smoke", "--endpoint", good, "--model", MODEL, "--only", "bogus,models")
    assert r.returncode == 2 and "unknown check(s) bogus" in r.stderr
    r = glmops("smoke", "--endpoint", good)
    assert r.returncode == 2 and "give -i/--inventory, or both --endpoint and --model" in r.stderr


def test_cli_help_lists_smoke_and_bench():
    r = glmops("--help")
    assert r.returncode == 0 and "smoke" in r.stdout and "bench" in r.stdout
