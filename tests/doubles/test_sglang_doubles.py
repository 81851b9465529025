"""SGLang server and router doubles: strict flags (from the option lists), loading phases,
serving, PD routing with bootstrap rooms."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import HERE, http, sse, wait_status
from engine_http_double import free_port

# seed 001 (SGLang targets): NVFP4 checkpoint at a pinned revision, TP4/EP4, FP8 E4M3 KV,
# page size 64, KV events ZMQ tcp://*:5557 topic kv-events, EAGLE 3 steps / 4 draft tokens
# with ReplaySSM, HiCache 100 GB per rank, 64 running requests, decode CUDA graph bs 64,
# chunked prefill 16384, static memory 0.70, glm45 reasoning + glm47 tool parsers,
# --enable-multimodal --mm-enable-dp-encoder.
SEED001 = [
    "--model-path", "RadixArk/GLM-5.3-Flash-NVFP4",
    "--revision", "f46cf340d35a22d0d83d0c1dac8957cf2b1bcd35",
    "--served-model-name", "RadixArk/GLM-5.3-Flash-NVFP4",
    "--tp-size", "4", "--ep-size", "4", "--kv-cache-dtype", "fp8_e4m3", "--page-size", "64",
    "--kv-events-config", '{"publisher": "zmq", "endpoint": "tcp://*:5557", "topic": "kv-events"}',
    "--speculative-algorithm", "EAGLE", "--speculative-num-steps", "3",
    "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4",
    "--enable-linear-replayssm-spec", "--enable-hierarchical-cache", "--hicache-size", "100",
    "--max-running-requests", "64", "--cuda-graph-max-bs-decode", "64",
    "--chunked-prefill-size", "16384", "--mem-fraction-static", "0.70",
    "--reasoning-parser", "glm45", "--tool-call-parser", "glm47",
    "--enable-multimodal", "--mm-enable-dp-encoder",
]
SEED001_PD = ["--disaggregation-mode", "prefill", "--disaggregation-transfer-backend", "mooncake"]


@pytest.fixture
def sgl(procs):
    return procs.link("launch_server", "sglang_double.py")


@pytest.fixture
def router(procs):
    return procs.link("launch_router", "sglang_router_double.py")


# ------------------------------------------------------------------ option data
def test_option_lists_match_reference():
    import option_lists_double as o
    # shared/ lies beside the checkout (CI clones elsewhere and copies shared/ beside it)
    ref = Path(__file__).resolve().parents[3] / "shared" / "reference" / "option-lists"
    if not ref.is_dir():
        pytest.skip("reference option lists not on this machine")
    for const, name in o.SOURCES.items():
        assert getattr(o, const) == (ref / name).read_text(), name


def test_seed001_flags_accepted(procs, sgl):
    r = procs.run([sgl] + SEED001 + SEED001_PD, env={"DOUBLE_DRY_RUN": "1"})
    assert r.returncode == 0, r.stderr
    ns = json.loads(r.stdout)
    assert ns["tp_size"] == 4 and ns["kv_cache_dtype"] == "fp8_e4m3" and ns["page_size"] == 64
    assert ns["reasoning_parser"] == "glm45" and ns["mm_enable_dp_encoder"] is True
    assert ns["disaggregation_mode"] == "prefill"


@pytest.mark.parametrize("extra,code,needle", [
    (["--x", "1"], 2, "sglang serve: error: unrecognized arguments: --x 1"),
    (["--frontend-decoding"], 2, "unrecognized arguments: --frontend-decoding"),  # Dynamo's flag
    (["--kv-cache-dtype", "fp8"], 2, "argument --kv-cache-dtype: invalid choice: 'fp8'"),
    (["--reasoning-parser", "glm47"], 2, "argument --reasoning-parser: invalid choice: 'glm47'"),
    (["--cuda-graph-max-bs", "64"], 2, "ambiguous option: --cuda-graph-max-bs could match "
                                       "--cuda-graph-max-bs-decode, --cuda-graph-max-bs-prefill"),
    (["--tp-size", "four"], 2, "argument --tp-size/--tensor-parallel-size: invalid int value: 'four'"),
    (["--speculative-algorithm", "MEDUSA"], 1, "Unknown speculative algorithm: MEDUSA"),
    (["--nnodes", "2"], 1, "--dist-init-addr is required when --nnodes > 1"),
    (["--kv-events-config", '{"publisher": "zmq", "port": 5557}'], 1,
     "--kv-events-config: unknown keys ['port']"),
    (["--kv-events-config", "publisher=zmq"], 1, "--kv-events-config is not valid JSON"),
])
def test_rejects_like_argparse(procs, sgl, extra, code, needle):
    r = procs.run([sgl, "--model-path", "m"] + extra, env={"DOUBLE_DRY_RUN": "1"})
    assert r.returncode == code
    assert needle in r.stderr


def test_api_key_flags_as_the_real_parser_takes_them(procs, sgl):
    """--api-key and --admin-api-key are plain str options (reference option list); a missing value
    or a spelling the parser lacks is argparse's exit 2."""
    r = procs.run([sgl, "--model-path", "m", "--api-key", "k1", "--admin-api-key", "k2"], env={"DOUBLE_DRY_RUN": "1"})
    assert r.returncode == 0, r.stderr
    ns = json.loads(r.stdout)
    assert (ns["api_key"], ns["admin_api_key"]) == ("k1", "k2")
    assert procs.run([sgl, "--model-path", "m", "--api-key"], env={"DOUBLE_DRY_RUN": "1"}).returncode == 2
    bad = procs.run([sgl, "--model-path", "m", "--api_key", "k"], env={"DOUBLE_DRY_RUN": "1"})
    assert bad.returncode == 2 and "unrecognized arguments: --api_key" in bad.stderr


def test_api_key_guards_the_openai_routes(procs, sgl, tmp_path):
    url = start_sglang(procs, sgl, tmp_path, "k", ["--api-key", "sk-double-key"])
    wait_status(url + "/health", 200)
    assert http("POST", url + "/v1/completions", {"prompt": "hi", "max_tokens": 1})[0] == 401
    status, r = http("POST", url + "/v1/completions", {"prompt": "hi", "max_tokens": 1},
                     headers={"Authorization": "Bearer sk-double-key"})
    assert status == 200 and r["choices"], r


def test_prefix_abbreviation_accepted(procs, sgl):
    r = procs.run([sgl, "--model-path", "m", "--tp", "2", "--dp", "2"], env={"DOUBLE_DRY_RUN": "1"})
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["tp_size"] == 2


def test_config_yaml_keys_are_flags(procs, sgl, tmp_path):
    good = tmp_path / "good.yaml"
    good.write_text("tp_size: 4\nkv-cache-dtype: fp8_e4m3\nenable_metrics: true\n")
    r = procs.run([sgl, "--model-path", "m", "--config", good, "--tp-size", "2"],
                  env={"DOUBLE_DRY_RUN": "1"})
    assert r.returncode == 0, r.stderr
    ns = json.loads(r.stdout)
    assert ns["tp_size"] == 2 and ns["kv_cache_dtype"] == "fp8_e4m3" and ns["enable_metrics"]
    bad = tmp_path / "bad.yaml"
    bad.write_text("tp_size: 4\nkv_cache_precision: fp8\n")
    r = procs.run([sgl, "--model-path", "m", "--config", bad], env={"DOUBLE_DRY_RUN": "1"})
    assert r.returncode == 2
    assert "unrecognized arguments: --kv-cache-precision fp8" in r.stderr


def test_sglang_serve_entrypoint(procs):
    s = procs.link("sglang", "sglang_double.py")
    r = procs.run([s, "serve", "--model-path", "m"], env={"DOUBLE_DRY_RUN": "1"})
    assert r.returncode == 0 and "WARNING" not in r.stderr
    r = procs.run([s, "launch", "--model-path", "m"])
    assert r.returncode == 2


# ------------------------------------------------------------------ serving
def start_sglang(procs, sgl, tmp_path, name, extra=(), env=None):
    port = free_port()
    procs.start([sgl, "--model-path", "RadixArk/GLM-5.3-Flash-NVFP4", "--host", "127.0.0.1",
                 "--port", str(port), *extra],
                env={"DOUBLE_REQUEST_LOG": str(tmp_path / f"{name}.jsonl"), **(env or {})},
                name=name)
    return f"http://127.0.0.1:{port}"


def test_loading_phases_and_metrics(procs, sgl, tmp_path):
    url = start_sglang(procs, sgl, tmp_path, "w", ["--enable-metrics", "--speculative-algorithm",
                                                   "EAGLE", "--reasoning-parser", "glm45"],
                       env={"DOUBLE_LOADING_REFUSE_S": "0.8", "DOUBLE_LOADING_503_S": "0.8"})
    seen, deadline = [], time.monotonic() + 15
    while time.monotonic() < deadline:
        try:
            state = http("GET", url + "/health", timeout=2)[0]
        except OSError:
            state = "refused"
        if not seen or seen[-1] != state:
            seen.append(state)
        if state == 200:
            break
        time.sleep(0.05)
    assert seen == ["refused", 503, 200]
    status, r = http("POST", url + "/v1/chat/completions", {
        "messages": [{"role": "user", "content": "Reply with exactly: READY"}]})
    assert r["choices"][0]["message"]["content"] == "READY"
    assert r["choices"][0]["message"]["reasoning_content"]
    status, text = http("GET", url + "/metrics")
    assert 'sglang:num_requests_total{model_name="RadixArk/GLM-5.3-Flash-NVFP4"} 1' in text
    assert "sglang:spec_accept_length" in text


def test_metrics_need_enable_metrics_and_tool_choice_required(procs, sgl, tmp_path):
    url = start_sglang(procs, sgl, tmp_path, "w", ["--tool-call-parser", "glm47"])
    wait_status(url + "/health")
    assert http("GET", url + "/metrics")[0] == 404
    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {
        "type": "object", "properties": {"q": {"type": "string"}}}}}]
    status, r = http("POST", url + "/v1/chat/completions", {
        "messages": [{"role": "user", "content": "find"}], "tools": tools,
        "tool_choice": "required"})
    assert status == 200 and r["choices"][0]["finish_reason"] == "tool_calls"
    # without a reasoning parser GLM's thinking stays inline
    assert r["choices"][0]["message"].get("reasoning_content") is None


def test_pd_through_router_prefill_and_decode_each_do_their_part(procs, sgl, router, tmp_path):
    boot = free_port()
    prefill = start_sglang(procs, sgl, tmp_path, "prefill", [
        "--disaggregation-mode", "prefill", "--disaggregation-bootstrap-port", str(boot),
        "--page-size", "64", "--kv-cache-dtype", "fp8_e4m3", "--tool-call-parser", "glm47"])
    decode = start_sglang(procs, sgl, tmp_path, "decode", [
        "--disaggregation-mode", "decode", "--page-size", "64", "--kv-cache-dtype", "fp8_e4m3",
        "--tool-call-parser", "glm47", "--reasoning-parser", "glm45"])
    rport, pport = free_port(), free_port()
    procs.start([router, "--pd-disaggregation", "--prefill", prefill, str(boot), "--decode", decode,
                 "--policy", "round_robin", "--host", "127.0.0.1", "--port", str(rport),
                 "--prometheus-port", str(pport), "--prometheus-host", "127.0.0.1"],
                env={"DOUBLE_REQUEST_LOG": str(tmp_path / "router.jsonl")}, name="router")
    front = f"http://127.0.0.1:{rport}"
    wait_status(front + "/health", timeout=20)
    status, r = http("POST", front + "/v1/completions", {"prompt": "Reply with exactly: PD",
                                                         "max_tokens": 4})
    assert status == 200 and r["choices"][0]["text"] == "PD"
    events = sse(front + "/v1/chat/completions", {
        "messages": [{"role": "user", "content": "Reply with exactly: STREAM"}], "stream": True})
    assert events[-1] == "[DONE]"
    assert "".join(e["choices"][0]["delta"].get("content") or "" for e in events[:-1]
                   if e["choices"]) == "STREAM"
    plog = [json.loads(x) for x in (tmp_path / "prefill.jsonl").read_text().splitlines()]
    dlog = [json.loads(x) for x in (tmp_path / "decode.jsonl").read_text().splitlines()]
    rlog = [json.loads(x) for x in (tmp_path / "router.jsonl").read_text().splitlines()]
    assert [x["role"] for x in plog] == ["prefill", "prefill"]
    assert [x["role"] for x in dlog] == ["decode", "decode"]
    assert sorted(x["bootstrap_room"] for x in plog) == sorted(x["bootstrap_room"] for x in dlog) \
        == sorted(x["bootstrap_room"] for x in rlog)
    assert all(x["prefill"].endswith(prefill.rsplit(":", 1)[1]) for x in dlog)
    metrics = http("GET", f"http://127.0.0.1:{pport}/metrics")[1]
    assert f'sgl_router_processed_requests_total{{worker="{decode}"}} 2' in metrics
    # a decode server refuses requests that did not come through a PD router
    status, err = http("POST", decode + "/v1/completions", {"prompt": "x"})
    assert status == 400 and "bootstrap_host" in err["message"]


def test_decode_rejects_mismatched_transfer_backend(procs, sgl, tmp_path):
    boot = free_port()
    prefill = start_sglang(procs, sgl, tmp_path, "prefill", [
        "--disaggregation-mode", "prefill", "--disaggregation-bootstrap-port", str(boot)])
    decode = start_sglang(procs, sgl, tmp_path, "decode", [
        "--disaggregation-mode", "decode", "--disaggregation-transfer-backend", "nixl"])
    wait_status(prefill + "/health")
    wait_status(decode + "/health")
    body = {"prompt": "x", "bootstrap_host": "127.0.0.1", "bootstrap_port": boot,
            "bootstrap_room": 42}
    assert http("POST", prefill + "/v1/completions", body)[0] == 200
    status, err = http("POST", decode + "/v1/completions", body)
    assert status == 500 and "mismatch" in err["message"] and "mooncake" in err["message"]


# ------------------------------------------------------------------ router
@pytest.mark.parametrize("flavor,extra,code,needle", [
    ("sglang-router", ["--x", "1"], 2, "error: unrecognized arguments: --x 1"),
    ("sglang-router", ["--health-check-port", "9"], 2, "unrecognized arguments: --health-check-port"),
    ("smg", ["--health-check-port", "9"], 0, ""),
    ("sglang-router", ["--policy", "least_load"], 2, "argument --policy: invalid choice: 'least_load'"),
    ("smg", ["--policy", "least_load"], 0, ""),
    ("sglang-router", ["--prefill-policy", "bucket"], 0, ""),
])
def test_router_flags_per_flavor(procs, flavor, extra, code, needle):
    link = procs.link(flavor, "sglang_router_double.py")
    r = procs.run([link, "launch", "--worker-urls", "http://127.0.0.1:1"] + extra,
                  env={"DOUBLE_DRY_RUN": "1"})
    assert r.returncode == code, r.stderr
    assert needle in r.stderr


def test_router_pd_args_checked(procs, router):
    r = procs.run([router, "--pd-disaggregation", "--prefill", "http://a:1", "8998"],
                  env={"DOUBLE_DRY_RUN": "1"})
    assert r.returncode == 2 and "requires at least one --prefill and one --decode" in r.stderr
    r = procs.run([router, "--pd-disaggregation", "--prefill", "http://a:1", "none",
                   "--prefill", "http://b:1", "--decode", "http://c:1"], env={"DOUBLE_DRY_RUN": "1"})
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["prefill"] == [["http://a:1", "none"], ["http://b:1"]]


def test_router_waits_for_workers_then_times_out(procs, router, sgl, tmp_path):
    dead = free_port()
    rport = free_port()
    p = procs.start([router, "--worker-urls", f"http://127.0.0.1:{dead}", "--host", "127.0.0.1",
                     "--port", str(rport), "--worker-startup-timeout-secs", "2",
                     "--prometheus-port", str(free_port())], name="router")
    time.sleep(0.8)
    with pytest.raises(OSError):
        http("GET", f"http://127.0.0.1:{rport}/health", timeout=1)
    assert p.wait(timeout=15) == 1
    assert "Timeout waiting for workers to become healthy" in Path(p.logfile).read_text()


# ------------------------------------------------------------------ install
def test_install_console_names_and_module_shims(tmp_path):
    dest, bindir, site = tmp_path / "opt", tmp_path / "bin", tmp_path / "site"
    r = subprocess.run([sys.executable, HERE / "engine_http_double.py", "install", "--dest", dest,
                        "--bin", bindir, "--site", site], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    assert (bindir / "trtllm-serve").resolve() == (dest / "trtllm_serve_double.py").resolve()
    env = {**os.environ, "PYTHONPATH": str(site), "DOUBLE_DRY_RUN": "1"}
    m = subprocess.run([sys.executable, "-m", "sglang.launch_server", "--model-path", "m", "--bogus"],
                       capture_output=True, text=True, env=env, timeout=30)
    assert m.returncode == 2 and "sglang serve: error: unrecognized arguments: --bogus" in m.stderr
    m = subprocess.run([sys.executable, "-m", "sglang_router.launch_router", "--worker-urls",
                        "http://a:1"], capture_output=True, text=True, env=env, timeout=30)
    assert m.returncode == 0, m.stderr
    m = subprocess.run([sys.executable, "-m", "smg.launch_router", "--worker-urls", "http://a:1",
                        "--health-check-port", "3"], capture_output=True, text=True, env=env,
                       timeout=30)
    assert m.returncode == 0, m.stderr
    t = subprocess.run([bindir / "trtllm-serve", "/x", "--tp-size", "2"], capture_output=True,
                       text=True, timeout=30)
    assert t.returncode == 2 and "No such option: --tp-size" in t.stderr


def test_install_minimal_venv_like_glmops_paths(tmp_path):
    venv = tmp_path / "opt" / "glmops" / "venvs" / "sglang-0.5.23"
    r = subprocess.run([sys.executable, HERE / "engine_http_double.py", "install", "--dest",
                        tmp_path / "doubles", "--venv", venv], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 0, r.stderr
    env = {"PATH": "/usr/bin:/bin", "DOUBLE_DRY_RUN": "1"}
    m = subprocess.run([venv / "bin" / "python", "-m", "sglang.launch_server", "--model-path", "m",
                        "--tp-size", "4"], capture_output=True, text=True, env=env, timeout=30)
    assert m.returncode == 0, m.stderr
    assert json.loads(m.stdout)["tp_size"] == 4
    t = subprocess.run([venv / "bin" / "trtllm-serve", "/nope", "--tp_size", "4"],
                       capture_output=True, text=True, env=env, timeout=30)
    assert t.returncode == 1 and "Repo id must be in the form" in t.stderr
