#!/usr/bin/env python3
"""Strict SGLang server double: ``python -m sglang.launch_server`` / ``sglang serve`` (0.5.23).

Flags: exactly those of /work/shared/reference/option-lists/sglang-0.5.23-serve.txt (embedded
in ``option_lists_double.py``), rebuilt as an argparse parser with the same actions, nargs,
types, choices and prefix abbreviation, ``prog="sglang serve"``: an unknown flag gives
``sglang serve: error: unrecognized arguments: --x 1`` (exit 2), a bad choice ``invalid
choice`` (exit 2), an ambiguous prefix (``--cuda-graph-max-bs``) ``ambiguous option`` (exit 2)
- the behaviours /work/shared/reference/serving-clis.md §0/§3 records from the real parser.
After parsing (exit 1, like the real ``ServerArgs`` checks): unknown
``--speculative-algorithm``; ``--kv-events-config`` that is not JSON or has keys/values
outside serving-clis.md §3; ``--nnodes > 1`` without ``--dist-init-addr``; no
``--model-path``; too few GPUs (only when an ``nvidia-smi`` is on PATH, e.g. the lab's double).

Install: copy next to ``engine_http_double.py`` and ``option_lists_double.py``;
``engine_http_double.py install --site SITE`` writes a ``sglang/launch_server.py`` shim so
``python -m sglang.launch_server`` runs this; a ``sglang`` symlink gives ``sglang serve``.

Behaviour (serving-clis.md §3 "Health"): port closed while "loading weights"
(``DOUBLE_LOADING_REFUSE_S``), then ``/health`` and ``/health_generate`` 503 during warm-up
(``DOUBLE_LOADING_503_S``), then 200. Rank >= 1 of a multi-node group (``--node-rank``)
serves only ``/health``, ``/health_generate``, ``/ping``. Routes: ``/v1/models``,
``/v1/completions``, ``/v1/chat/completions`` (SSE with ``stream``), ``/generate``,
``/get_model_info``, ``/get_server_info``, ``/ready``, ``/metrics`` (Prometheus text, only with
``--enable-metrics``; ``sglang:spec_accept_length`` with a speculative algorithm; PD servers add
``sglang:per_stage_req_latency_seconds`` with the stage ``prefill_transfer_kv_cache`` (prefill)
or ``decode_transferred`` (decode: one per request whose room arrived) and the counters
``sglang:num_transfer_failed_reqs_total`` / ``sglang:num_bootstrap_failed_reqs_total``, names of
SGLang's metrics/collector.py; a server without a disaggregation mode ignores bootstrap fields and
runs the whole request, as the real one does).
``--reasoning-parser`` -> ``reasoning_content``; ``--tool-call-parser`` -> ``tool_calls``
(``tool_choice`` auto/none/required/named).

PD (``--disaggregation-mode prefill|decode``): a prefill server also listens on
``--disaggregation-bootstrap-port`` and registers each request's ``bootstrap_room``; a decode
server waits (``DOUBLE_KV_WAIT_S``, default 30) until the prefill named by the request's
``bootstrap_host``/``bootstrap_port`` has that room, and fails when the transfer backend,
page size or KV dtype differ. Requests to PD servers without bootstrap fields get 400.
``--config FILE`` (YAML, keys = flag names) is expanded into flags before the command line.
``DOUBLE_FAULT`` switches faults (engine_http_double.FAULTS). ``DOUBLE_REQUEST_LOG``: JSONL.
``DOUBLE_DRY_RUN=1``: parse and check, print the parsed flags as JSON, exit 0.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.realpath(__file__)))
from engine_http_double import (EngineServer, OpenAIBehaviour, build_argparse,  # noqa: E402
                                http_json, load_yaml, parse_option_list, prometheus_text)
from option_lists_double import SGLANG_SERVE  # noqa: E402

PROG = "sglang serve"
VERSION = "0.5.23"
#: --kv-events-config JSON keys (reference/serving-clis.md §3)
KV_EVENTS_KEYS = {"publisher", "endpoint", "topic", "replay_endpoint", "buffer_steps", "hwm",
                  "max_queue_size", "bind", "format"}
SPEC_ALGOS = {"EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM", "DFLASH", "DSPARK", "UNO"}


def build_parser():
    """The strict parser (option list sglang-0.5.23-serve.txt)."""
    return build_argparse(PROG, parse_option_list(SGLANG_SERVE))


def expand_config(argv: list[str]) -> list[str]:
    """``--config FILE``: YAML keys become flags placed before the command line (CLI wins),
    so an unknown key fails like an unknown flag (``unrecognized arguments``, exit 2)."""
    path, rest, i = None, [], 0
    while i < len(argv):
        a = argv[i]
        if a == "--config" and i + 1 < len(argv):
            path, i = argv[i + 1], i + 2
            continue
        if a.startswith("--config="):
            path, i = a.split("=", 1)[1], i + 1
            continue
        rest.append(a)
        i += 1
    if path is None:
        return argv
    with open(path, encoding="utf-8") as fh:
        cfg = load_yaml(fh.read())
    if not isinstance(cfg, dict):
        raise ValueError(f"config file {path} must hold a YAML mapping")
    extra: list[str] = []
    for key, value in cfg.items():
        flag = "--" + str(key).replace("_", "-")
        if value is True:
            extra.append(flag)
        elif value is False or value is None:
            continue
        elif isinstance(value, list):
            extra += [flag] + [str(v) for v in value]
        elif isinstance(value, dict):
            extra += [flag, json.dumps(value)]
        else:
            extra += [flag, str(value)]
    return extra + rest


def post_parse_checks(ns) -> list[str]:
    """Checks the real server makes after parsing (exit 1). Returns every problem found."""
    problems = []
    if not ns.model_path:
        problems.append("--model-path is required")
    if ns.speculative_algorithm and ns.speculative_algorithm.upper() not in SPEC_ALGOS:
        problems.append(f"Unknown speculative algorithm: {ns.speculative_algorithm} "
                        f"(known: {', '.join(sorted(SPEC_ALGOS))})")
    if (ns.nnodes or 1) > 1 and not ns.dist_init_addr:
        problems.append("--dist-init-addr is required when --nnodes > 1")
    if ns.kv_events_config:
        try:
            kv = json.loads(ns.kv_events_config)
        except ValueError as exc:
            kv = None
            problems.append(f"--kv-events-config is not valid JSON: {exc}")
        if kv is not None:
            extra = sorted(set(kv) - KV_EVENTS_KEYS) if isinstance(kv, dict) else ["<not a mapping>"]
            if extra:
                problems.append(f"--kv-events-config: unknown keys {extra} (accepted: "
                                f"{', '.join(sorted(KV_EVENTS_KEYS))})")
            elif kv.get("publisher", "null") not in ("null", "zmq", None):
                problems.append(f"--kv-events-config: publisher {kv['publisher']!r} not one of "
                                "null, zmq")
            elif kv.get("format", "default") not in ("default", "dynamo"):
                problems.append(f"--kv-events-config: format {kv['format']!r} not one of "
                                "default, dynamo")
    if ns.node_rank and ns.node_rank >= (ns.nnodes or 1):
        problems.append(f"--node-rank {ns.node_rank} must be < --nnodes {ns.nnodes}")
    return problems


def check_gpus(ns) -> str | None:
    """With an nvidia-smi on PATH: the GPUs per node must cover tp x pp / nnodes."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    r = subprocess.run([smi, "--query-gpu=index", "--format=csv,noheader"], capture_output=True,
                       text=True, timeout=30)
    idx = [x.strip() for x in r.stdout.splitlines() if x.strip()] if r.returncode == 0 else []
    vis = os.environ.get("CUDA_VISIBLE_DEVICES")
    if vis is not None:
        idx = [i for i in idx if i in {v.strip() for v in vis.split(",")}]
    need = max(1, ns.tp_size * (ns.pp_size or 1) // max(1, ns.nnodes or 1))
    if len(idx) < need:
        return (f"RuntimeError: this node has {len(idx)} GPUs visible but tp x pp / nnodes = "
                f"{need} (CUDA_VISIBLE_DEVICES={vis!r})")
    return None


class BootstrapServer(EngineServer):
    """The prefill side's bootstrap server: rooms whose KV is ready."""

    name = "sglang-bootstrap"
    uvicorn_log = False

    def __init__(self, host, port, layout):
        super().__init__(host, port, refuse_s=0, starting_s=0)
        self.rooms: dict[int, dict] = {}
        self.layout = layout

    def route(self, h, method, path):
        if method == "GET" and path.startswith("/_double/room/"):
            room = int(path.rsplit("/", 1)[1])
            with self.lock:
                entry = self.rooms.get(room)
            if entry is None:
                return h.send_json(404, {"error": f"room {room} not ready"})
            return h.send_json(200, dict(entry, layout=self.layout))
        if method == "GET" and path == "/health":
            return h.send_bytes(200, b"")
        return h.send_json(404, {"detail": "Not Found"})


class SGLangServer(EngineServer):
    """One ``sglang serve`` process (rank 0 API server or a rank >= 1 health stub)."""

    name = "sglang"

    def __init__(self, ns):
        super().__init__(ns.host, ns.port)
        self.ns = ns
        self.model_id = ns.served_model_name or ns.model_path
        self.behaviour = OpenAIBehaviour(self.model_id, bool(ns.reasoning_parser),
                                         bool(ns.tool_call_parser), faults=self.faults)
        self.mode = ns.disaggregation_mode
        self.layout = {"transfer_backend": ns.disaggregation_transfer_backend,
                       "page_size": ns.page_size, "kv_cache_dtype": ns.kv_cache_dtype}
        self.bootstrap = None
        if self.mode == "prefill" and not ns.node_rank:
            self.bootstrap = BootstrapServer(ns.host, ns.disaggregation_bootstrap_port, self.layout)
        self.acceptance = float(os.environ.get("DOUBLE_MTP_ACCEPTANCE", "2.5"))

    def on_faults(self, faults):
        self.behaviour.faults = set(faults)

    def on_listen(self):
        super().on_listen()
        if self.bootstrap is not None:
            threading.Thread(target=self.bootstrap.serve, daemon=True).start()

    def route(self, h, method, path):
        ready = self.ready.is_set()
        if path in ("/health", "/health_generate") and method == "GET":
            if not ready or "health_503" in self.faults:
                return h.send_bytes(503, b"Starting" if not ready else b"Unhealthy")
            return h.send_bytes(200, b"")
        if self.ns.node_rank:  # dummy health server of ranks >= 1
            if path == "/ping":
                return h.send_bytes(200 if ready else 503, b"")
            return h.send_json(404, {"detail": "Not Found"})
        if path == "/ready" and method == "GET":
            return h.send_json(200 if ready else 503, {"status": "ready" if ready else "starting"})
        if not ready:
            return h.send_json(503, {"detail": "Server is starting"})
        if self.ns.api_key and path.startswith(("/v1/", "/generate")):
            if h.headers.get("Authorization") != f"Bearer {self.ns.api_key}":
                return h.send_json(401, {"error": "Unauthorized"})
        if method == "GET":
            if path == "/v1/models":
                return h.send_json(200, {"object": "list", "data": [
                    {"id": self.model_id, "object": "model", "created": int(time.time()),
                     "owned_by": "sglang", "root": self.model_id,
                     "max_model_len": self.ns.context_length or 1048576}]})
            if path == "/get_model_info":
                return h.send_json(200, {"model_path": self.ns.model_path,
                                         "tokenizer_path": self.ns.tokenizer_path or
                                         self.ns.model_path, "is_generation": True})
            if path == "/get_server_info":
                return h.send_json(200, {"version": VERSION, "tp_size": self.ns.tp_size,
                                         "dp_size": self.ns.dp_size,
                                         "disaggregation_mode": self.mode,
                                         "page_size": self.ns.page_size})
            if path == "/metrics" and self.ns.enable_metrics:
                return h.send_bytes(200, self._prometheus().encode(),
                                    "text/plain; version=0.0.4; charset=utf-8")
        if method == "POST" and path in ("/v1/completions", "/v1/chat/completions", "/generate"):
            return self._generate(h, path)
        return h.send_json(404, {"detail": "Not Found"})

    def _prometheus(self) -> str:
        """The names of SGLang's production metrics page (docs/references/production_metrics.md);
        ``sglang:spec_accept_length`` only with a speculative algorithm."""
        c, lab = self.counters, {"model_name": self.model_id}
        n = c.get("requests", 0)
        ttft = float(os.environ.get("DOUBLE_TTFT_MS", "0") or 0) / 1000
        itl = float(os.environ.get("DOUBLE_ITL_MS", "0") or 0) / 1000
        fams = [("sglang:num_requests_total", "counter", lab, n),
                ("sglang:prompt_tokens_total", "counter", lab, c.get("prompt_tokens", 0)),
                ("sglang:generation_tokens_total", "counter", lab, c.get("completion_tokens", 0)),
                ("sglang:num_running_reqs", "gauge", lab, 0),
                ("sglang:num_queue_reqs", "gauge", lab, 0),
                ("sglang:token_usage", "gauge", lab, 0.0),
                ("sglang:cache_hit_rate", "gauge", lab, 0.0),
                ("sglang:gen_throughput", "gauge", lab, 0.0),
                ("sglang:time_to_first_token_seconds", "histogram", lab, (n, n * ttft)),
                ("sglang:inter_token_latency_seconds", "histogram", lab, (n, n * itl)),
                ("sglang:e2e_request_latency_seconds", "histogram", lab, (n, n * (ttft + itl)))]
        if self.ns.speculative_algorithm:
            fams.append(("sglang:spec_accept_length", "gauge", lab, self.acceptance))
        if self.mode in ("prefill", "decode"):
            stage = "prefill_transfer_kv_cache" if self.mode == "prefill" else "decode_transferred"
            k = c.get("kv_transferred", 0)
            fams += [("sglang:per_stage_req_latency_seconds", "histogram", {**lab, "stage": stage}, (k, k * 0.001)),
                     ("sglang:num_transfer_failed_reqs_total", "counter", lab, c.get("kv_transfer_failed", 0)),
                     ("sglang:num_bootstrap_failed_reqs_total", "counter", lab, 0)]
        return prometheus_text(fams)

    def _err(self, h, status, message):
        return h.send_json(status, {"object": "error", "message": message,
                                    "type": "BadRequestError", "param": None, "code": status})

    def _wait_room(self, host, port, room):
        deadline = time.monotonic() + float(os.environ.get("DOUBLE_KV_WAIT_S", "30"))
        last = None
        while time.monotonic() < deadline:
            try:
                status, body = http_json("GET", f"http://{host}:{port}/_double/room/{room}",
                                         timeout=5)
                if status == 200:
                    return body, None
                last = body
            except OSError as exc:
                last = str(exc)
            time.sleep(0.05)
        return None, f"KV transfer timed out waiting for room {room} at {host}:{port}: {last}"

    def _generate(self, h, path):
        body = h.body_json()
        if "http500" in self.faults:
            return self._err(h, 500, "Internal server error (double fault http500)")
        chat = path == "/v1/chat/completions"
        if chat:
            err = self.behaviour.check_tool_choice(body)
            if err:
                return self._err(h, 400, err)
        record = {"endpoint": path, "role": self.mode if self.mode != "null" else "agg",
                  "stream": bool(body.get("stream"))}
        if self.mode in ("prefill", "decode"):
            missing = [k for k in ("bootstrap_host", "bootstrap_room") if body.get(k) is None]
            if missing:
                return self._err(h, 400, f"disaggregation-mode {self.mode} needs "
                                 f"{', '.join(missing)} in the request (send it through the router)")
            record["bootstrap_room"] = body["bootstrap_room"]
        if self.mode == "prefill":
            with self.bootstrap.lock:
                self.bootstrap.rooms[int(body["bootstrap_room"])] = {
                    "prefill": f"{self.ns.host}:{self.port}", "endpoint": path}
            self.count("kv_transferred")  # its KV is ready for the decode side in the room
        elif self.mode == "decode":
            port = body.get("bootstrap_port") or 8998
            entry, err = self._wait_room(body["bootstrap_host"], port, int(body["bootstrap_room"]))
            if err:
                self.count("kv_transfer_failed")
                return self._err(h, 500, err)
            diff = {k: (entry["layout"].get(k), self.layout[k]) for k in self.layout
                    if entry["layout"].get(k) != self.layout[k]}
            if diff:
                self.count("kv_transfer_failed")
                return self._err(h, 500, f"KV transfer failed: prefill/decode mismatch {diff}")
            record["prefill"] = entry["prefill"]
            self.count("kv_transferred")
        if path == "/generate":
            text = body.get("text") or ""
            res = self.behaviour.completion_result(
                {"prompt": text, "max_tokens": (body.get("sampling_params") or {}).get(
                    "max_new_tokens", 16)})
        elif chat:
            res = self.behaviour.chat_result(body)
        else:
            res = self.behaviour.completion_result(body)
        self.count("requests")
        self.count("prompt_tokens", res["prompt_tokens"])
        self.count("completion_tokens", res["completion_tokens"])
        self.log_request(record)
        if path == "/generate":
            return h.send_json(200, {"text": res["text"], "meta_info": {
                "prompt_tokens": res["prompt_tokens"], "completion_tokens": res["completion_tokens"],
                "finish_reason": {"type": res["finish_reason"]}}})
        if body.get("stream"):
            h.start_sse()
            if self.behaviour.ttft:
                time.sleep(self.behaviour.ttft)
            gen = (self.behaviour.chat_stream if chat else self.behaviour.completion_stream)(body, res)
            for chunk in gen:
                h.sse(chunk)
                if self.behaviour.itl:
                    time.sleep(self.behaviour.itl)
            if "stream_no_done" not in self.faults:
                h.sse("[DONE]")
            return None
        resp = (self.behaviour.chat_response if chat else self.behaviour.completion_response)(body, res)
        return h.send_json(200, resp)


def main(argv: list[str] | None = None, prog0: str | None = None) -> int:
    """Entry point: parse strictly, check, serve. ``prog0`` overrides argv[0] (``sglang`` => ``sglang serve``)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    name = os.path.basename(prog0 or sys.argv[0])
    if name == "sglang":
        if argv[:1] != ["serve"]:
            sys.stderr.write("sglang double: only 'sglang serve' is implemented\n")
            return 2
        argv = argv[1:]
    else:
        sys.stderr.write("WARNING: 'python -m sglang.launch_server' is still supported, but "
                         "'sglang serve' is the recommended entrypoint.\n")
    parser = build_parser()
    try:
        argv = expand_config(argv)
    except (OSError, ValueError) as exc:
        sys.stderr.write(f"{type(exc).__name__}: {exc}\n")
        return 1
    ns = parser.parse_args(argv)  # exits 2 like the real parser
    if ns.enable_dp_attention:
        sys.stderr.write("WARNING: --enable-dp-attention is deprecated; use --attn-dp-size\n")
    problems = post_parse_checks(ns)
    gpu = check_gpus(ns)
    if problems or gpu:
        for p in problems:
            sys.stderr.write(f"ValueError: {p}\n")
        if gpu:
            sys.stderr.write(gpu + "\n")
        return 1
    if os.environ.get("DOUBLE_DRY_RUN"):
        print(json.dumps({k: v for k, v in vars(ns).items() if v not in (None, False)},
                         default=str))
        return 0
    server = SGLangServer(ns)
    try:
        server.serve()
    except KeyboardInterrupt:
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
