"""NVIDIA Dynamo 1.6.1 for real on CPU, on this machine: the frontend with its KV router and
Dynamo's own mocker worker (no GPU, no etcd/NATS: file discovery, TCP request plane, ZMQ
event plane; FINDINGS.md), serving the lab model's tokenizer. Installed from the dynamo
wheelhouse with no index, into a cached local venv. Mark ``vllm`` (slow, needs wheelhouses).
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request

import pytest

pytestmark = [pytest.mark.vllm]

MODEL = "tiny-llama"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http(method: str, url: str, body: dict | None = None, timeout: float = 20) -> tuple[int, dict | str]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method, headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            text, status = resp.read().decode(), resp.status
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")
    except (urllib.error.URLError, OSError) as exc:
        return 0, str(exc)
    try:
        return status, json.loads(text)
    except ValueError:
        return status, text


@pytest.fixture(scope="module")
def dynamo(tmp_path_factory):
    from glmops.lab import tinymodel, wheelhouse

    start = time.monotonic()
    venv = wheelhouse.ensure_local_venv("dynamo")
    print(f"\ndynamo venv ready in {time.monotonic() - start:.1f} s: {venv}")
    model = tinymodel.ensure_tiny_model()
    tmp = tmp_path_factory.mktemp("dynamo")
    env = dict(os.environ, DYN_FILE_KV=str(tmp / "kv"))
    for var in ("DYN_TCP_RPC_HOST", "DYN_EVENT_PLANE_HOST", "DYN_TCP_RESPONSE_STREAM_HOST",
                "DYN_HTTP_RPC_HOST", "DYN_SYSTEM_HOST"):
        env[var] = "127.0.0.1"
    planes = ["--discovery-backend", "file", "--request-plane", "tcp", "--event-plane", "zmq"]
    port = free_port()
    py = str(venv / "bin" / "python")
    procs = []
    logs = {}
    try:
        for name, argv in (
            ("frontend", [py, "-m", "dynamo.frontend", "--router-mode", "kv", "--http-port", str(port), *planes]),
            ("mocker", [py, "-m", "dynamo.mocker", "--model-path", str(model.path), "--model-name", MODEL, *planes]),
        ):
            logs[name] = open(tmp / f"{name}.log", "w")
            procs.append(subprocess.Popen(argv, env=env, stdout=logs[name], stderr=subprocess.STDOUT,
                                          start_new_session=True))
        base = f"http://127.0.0.1:{port}"
        t0 = time.monotonic()
        while time.monotonic() - t0 < 90:
            status, body = http("GET", base + "/v1/models", timeout=3)
            if status == 200 and MODEL in [m.get("id") for m in body.get("data", [])]:
                break
            dead = [p.args[2] for p in procs if p.poll() is not None]
            assert not dead, f"{dead} exited: " + "".join((tmp / f"{n}.log").read_text()[-2000:] for n in logs)
            time.sleep(0.5)
        else:
            pytest.fail("dynamo frontend never listed the mocker's model: "
                        + "".join((tmp / f"{n}.log").read_text()[-2000:] for n in logs))
        print(f"dynamo frontend + mocker ready in {time.monotonic() - t0:.1f} s")
        yield base
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(timeout=5)
        for fh in logs.values():
            fh.close()


def test_dynamo_frontend_and_mocker_serve_completions(dynamo):
    status, health = http("GET", dynamo + "/health")
    assert status == 200 and health["status"] == "healthy"
    assert any(i["endpoint"] == "generate" for i in health["instances"])

    status, out = http("POST", dynamo + "/v1/completions",
                       {"model": MODEL, "prompt": "Hello world", "max_tokens": 8})
    assert status == 200, out
    assert out["usage"]["completion_tokens"] == 8 and out["usage"]["prompt_tokens"] > 0

    status, chat = http("POST", dynamo + "/v1/chat/completions",
                        {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4})
    assert status == 200, chat
    assert chat["usage"]["completion_tokens"] == 4

    status, _ = http("POST", dynamo + "/v1/completions", {"model": "nope", "prompt": "x", "max_tokens": 1})
    assert status == 404
