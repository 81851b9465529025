#!/usr/bin/env python3
"""Strict SGLang router double: sglang-router 0.3.2 (``python -m sglang_router.launch_router``,
``sglang-router launch``) and smg 1.13.0 (``smg launch``, ``python -m smg.launch_router``).

Flags: exactly those of /work/shared/reference/option-lists/sglang-router-0.3.2.txt or
smg-1.13.0.txt (embedded in ``option_lists_double.py``), as argparse with prefix abbreviation;
unknown flag -> ``error: unrecognized arguments`` exit 2, bad ``--policy`` -> ``invalid
choice`` exit 2 (serving-clis.md §0). ``--prefill URL [BOOTSTRAP_PORT|none]`` and ``--decode
URL`` repeat (serving-clis.md §3 "same parsing as vllm-router"). Which flavour: ``smg`` in
argv[0] (or ``DOUBLE_ROUTER_FLAVOR=smg``), else sglang-router.

Install: next to ``engine_http_double.py`` and ``option_lists_double.py``; symlink as
``sglang-router`` / ``smg`` (then the first argument must be ``launch``) or use the ``python
-m`` shims ``engine_http_double.py install --site`` writes.

Behaviour (FINDINGS.md measured this for vllm-router, the same Rust lineage; serving-clis.md
§3 for the defaults): at start it polls every worker's ``--health-check-endpoint`` until 200
and does not listen before that; after ``--worker-startup-timeout-secs`` it exits 1. Then it
serves ``/health``, ``/liveness``, ``/readiness``, ``/v1/models`` (from a worker),
``/v1/completions``, ``/v1/chat/completions``, ``/generate``; Prometheus text on
``--prometheus-host:--prometheus-port`` (``/metrics``; names of sgl-router's src/metrics.rs).
Regular mode: ``--worker-urls`` with ``--policy`` (round_robin; random; others pick
round-robin). PD mode (``--pd-disaggregation``): each request gets ``bootstrap_host`` (the
prefill URL's host), ``bootstrap_port`` (its bootstrap port, or null for ``none``) and a random
``bootstrap_room``, and is sent to one prefill and one decode worker at the same time; the
client gets the decode answer (streamed when asked). Each routing decision is logged
(``DOUBLE_REQUEST_LOG``, ``GET /_double/state``). ``--api-key`` is sent to the workers.
``DOUBLE_DRY_RUN=1``: parse and check, print the parsed flags as JSON, exit 0.
"""
from __future__ import annotations

import itertools
import json
import os
import random
import sys
import threading
import time
import urllib.error
import urllib.request
from urllib.parse import urlsplit

sys.path.insert(0, os.path.dirname(os.path.realpath(__file__)))
from engine_http_double import (EngineServer, build_argparse, parse_option_list,  # noqa: E402
                                random_room, wait_healthy)
from option_lists_double import SGLANG_ROUTER, SMG  # noqa: E402

APPEND = {"--prefill", "--decode"}


def build_parser(flavor: str):
    """Strict parser for ``sglang-router`` (0.3.2) or ``smg`` (1.13.0)."""
    text = SMG if flavor == "smg" else SGLANG_ROUTER
    specs = parse_option_list(text)
    prog = "smg launch" if flavor == "smg" else "sglang_router.launch_router"
    plain = [s for s in specs if s["names"][0] not in APPEND]
    p = build_argparse(prog, plain)
    p.add_argument("--prefill", nargs="+", action="append", default=None)
    p.add_argument("--decode", nargs=1, action="append", default=None)
    return p


def check_args(p, ns) -> None:
    """Mode checks made right after parsing (argparse error form, exit 2)."""
    if ns.pd_disaggregation:
        if not ns.prefill or not ns.decode:
            p.error("--pd-disaggregation requires at least one --prefill and one --decode")
        for item in ns.prefill:
            if len(item) > 2:
                p.error(f"--prefill takes URL [BOOTSTRAP_PORT|none], got {' '.join(item)}")
            if len(item) == 2 and item[1] != "none" and not item[1].isdigit():
                p.error(f"--prefill bootstrap port must be an int or 'none', got {item[1]!r}")
    elif not ns.worker_urls:
        p.error("either --worker-urls or --pd-disaggregation with --prefill/--decode is required")
    for u in (ns.worker_urls or []) + [i[0] for i in ns.prefill or []] + [d[0] for d in ns.decode or []]:
        if not u.startswith(("http://", "https://")):
            p.error(f"worker URL must start with http:// or https://, got {u!r}")


class Prometheus(EngineServer):
    """The router's Prometheus endpoint on ``--prometheus-host:--prometheus-port``."""
    name = "router-prometheus"
    uvicorn_log = False

    def __init__(self, host, port, router):
        super().__init__(host, port, refuse_s=0, starting_s=0)
        self.router = router

    def route(self, h, method, path):
        if method == "GET" and path == "/metrics":
            return h.send_bytes(200, self.router.prometheus().encode(),
                                "text/plain; version=0.0.4")
        return h.send_json(404, {"detail": "Not Found"})


class Router(EngineServer):
    """The router process."""

    uvicorn_log = False

    def __init__(self, ns, flavor):
        super().__init__(ns.host, int(ns.port), starting_s=0)
        self.ns, self.flavor = ns, flavor
        self.name = flavor
        self.prefix = "smg" if flavor == "smg" else "sgl_router"
        if ns.pd_disaggregation:
            self.prefills = [(i[0].rstrip("/"), None if len(i) == 1 or i[1] == "none" else int(i[1]))
                             for i in ns.prefill]
            self.decodes = [d[0].rstrip("/") for d in ns.decode]
            self.workers = [u for u, _ in self.prefills] + self.decodes
        else:
            self.workers = [u.rstrip("/") for u in ns.worker_urls]
        self.cycles = {k: itertools.cycle(v) for k, v in (
            ("regular", self.workers), ("prefill", getattr(self, "prefills", [])),
            ("decode", getattr(self, "decodes", [])))}
        self.cycle_lock = threading.Lock()
        self.failed = False

    def pick(self, kind: str, policy: str | None):
        """Next worker of pool ``kind`` (regular/prefill/decode) under ``policy``."""
        pool = {"regular": self.workers, "prefill": getattr(self, "prefills", []),
                "decode": getattr(self, "decodes", [])}[kind]
        if (policy or self.ns.policy) == "random":
            return random.choice(pool)
        with self.cycle_lock:
            return next(self.cycles[kind])

    def wait_workers(self) -> bool:
        """Poll every worker's health endpoint until 200; False after the startup timeout."""
        deadline = time.monotonic() + float(self.ns.worker_startup_timeout_secs)
        for w in self.workers:
            if not wait_healthy(w, deadline, self.ns.health_check_endpoint):
                sys.stderr.write(f"ERROR: Timeout waiting for workers to become healthy: {w} "
                                 f"(after {self.ns.worker_startup_timeout_secs} s)\n")
                return False
        return True

    def prometheus(self) -> str:
        """Prometheus text: requests per route and per worker."""
        c, p = self.counters, self.prefix
        lines = [f"# TYPE {p}_requests_total counter"]
        for key, v in sorted(c.items()):
            if key.startswith("route:"):
                lines.append(f'{p}_requests_total{{route="{key[6:]}"}} {v}')
        # names: sgl-router src/metrics.rs (sgl_router_active_workers: healthy workers)
        lines += [f"# TYPE {p}_active_workers gauge", f"{p}_active_workers {len(self.workers)}"]
        lines.append(f"# TYPE {p}_processed_requests_total counter")
        for key, v in sorted(c.items()):
            if key.startswith("worker:"):
                lines.append(f'{p}_processed_requests_total{{worker="{key[7:]}"}} {v}')
        return "\n".join(lines) + "\n"

    # ------------------------------------------------------------------ proxying
    def _headers(self):
        hdr = {"Content-Type": "application/json"}
        if self.ns.api_key:
            hdr["Authorization"] = f"Bearer {self.ns.api_key}"
        return hdr

    def _open(self, url, body):
        req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers=self._headers())
        return urllib.request.urlopen(req, timeout=float(self.ns.request_timeout_secs))

    def _relay(self, h, resp, stream):
        if stream:
            h.start_sse()
            for line in resp:
                h.wfile.write(line)
                h.wfile.flush()
            return None
        return h.send_bytes(resp.status, resp.read(), "application/json")

    def route(self, h, method, path):
        if method == "GET" and path in ("/health", "/liveness", "/readiness", "/health_generate"):
            return h.send_bytes(200, b"OK")
        if method == "GET" and path == "/v1/models":
            target = self.decodes[0] if self.ns.pd_disaggregation else self.workers[0]
            try:
                req = urllib.request.Request(target + "/v1/models", headers=self._headers())
                with urllib.request.urlopen(req, timeout=10) as r:
                    return h.send_bytes(r.status, r.read(), "application/json")
            except urllib.error.HTTPError as exc:
                return h.send_bytes(exc.code, exc.read(), "application/json")
        if method == "POST" and path in ("/v1/completions", "/v1/chat/completions", "/generate"):
            self.count("route:" + path)
            body = h.body_json()
            try:
                if self.ns.pd_disaggregation:
                    return self._pd(h, path, body)
                return self._regular(h, path, body)
            except urllib.error.HTTPError as exc:
                return h.send_bytes(exc.code, exc.read(), "application/json")
            except OSError as exc:
                return h.send_json(502, {"error": f"worker unreachable: {exc}"})
        return h.send_json(404, {"error": f"no route {method} {path}"})

    def _regular(self, h, path, body):
        worker = self.pick("regular", None)
        self.count("worker:" + worker)
        self.log_request({"endpoint": path, "worker": worker, "stream": bool(body.get("stream"))})
        resp = self._open(worker + path, body)
        with resp:
            return self._relay(h, resp, bool(body.get("stream")))

    def _pd(self, h, path, body):
        prefill, boot_port = self.pick("prefill", self.ns.prefill_policy)
        decode = self.pick("decode", self.ns.decode_policy)
        room = random_room()
        pd_body = dict(body, bootstrap_host=urlsplit(prefill).hostname, bootstrap_port=boot_port,
                       bootstrap_room=room)
        self.count("worker:" + prefill)
        self.count("worker:" + decode)
        self.log_request({"endpoint": path, "prefill": prefill, "decode": decode,
                          "bootstrap_room": room, "stream": bool(body.get("stream"))})
        sys.stderr.write(f"{self.flavor}: PD request room {room}: prefill {prefill} + decode "
                         f"{decode}\n")
        result: dict = {}

        def run_prefill():
            try:
                with self._open(prefill + path, dict(pd_body, stream=False)) as r:
                    result["status"] = r.status
                    r.read()
            except urllib.error.HTTPError as exc:
                result["status"], result["body"] = exc.code, exc.read()
            except OSError as exc:
                result["status"], result["body"] = 502, str(exc).encode()

        t = threading.Thread(target=run_prefill, daemon=True)
        t.start()
        try:
            resp = self._open(decode + path, pd_body)
        except urllib.error.HTTPError as exc:
            t.join(timeout=30)
            if result.get("status", 200) != 200:
                return h.send_bytes(result["status"], result.get("body", b""), "application/json")
            return h.send_bytes(exc.code, exc.read(), "application/json")
        with resp:
            out = self._relay(h, resp, bool(body.get("stream")))
        t.join(timeout=30)
        return out


def main(argv: list[str] | None = None, prog0: str | None = None) -> int:
    """Entry point: parse strictly, wait for workers, serve."""
    argv = sys.argv[1:] if argv is None else list(argv)
    name = os.path.basename(prog0 or sys.argv[0])
    flavor = "smg" if ("smg" in name or os.environ.get("DOUBLE_ROUTER_FLAVOR") == "smg") \
        else "sglang-router"
    if name in ("sglang-router", "smg", "amg"):
        if argv[:1] != ["launch"]:
            sys.stderr.write(f"{name} double: only '{name} launch ...' is implemented\n")
            return 2
        argv = argv[1:]
    p = build_parser(flavor)
    ns = p.parse_args(argv)
    check_args(p, ns)
    if os.environ.get("DOUBLE_DRY_RUN"):
        print(json.dumps({k: v for k, v in vars(ns).items() if v not in (None, False, [], {})}))
        return 0
    router = Router(ns, flavor)
    if not router.wait_workers():
        return 1
    prom = Prometheus(ns.prometheus_host or ns.host, int(ns.prometheus_port), router)
    threading.Thread(target=prom.serve, daemon=True).start()
    try:
        router.serve()
    except KeyboardInterrupt:
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
