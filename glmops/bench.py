"""Benchmarks the way the seeds run them: a concurrency sweep, one JSON result per point,
a Markdown table, a Pareto PNG, and a comparison of two runs.

The sweep (seed 000 "Benchmarking Performance": ``concurrency_list="1 2 4 ... 256"``,
``multi_round=5``, ``num_prompts = concurrency * multi_round``, ISL/OSL 1024, random
prompts, ``--ignore-eos``, ``--seed 0``) is :class:`SweepConfig`; ``--quick`` is
:data:`QUICK`. The client is aiperf 0.13.0 (:func:`aiperf_argv`; the offline command
line of lab-recipe/FINDINGS.md) or, when asked, the engine's own client (TensorRT-LLM's
``python -m tensorrt_llm.serve.scripts.benchmark_serving`` with seed 000's flags,
:func:`engine_client_argv`).

Each point is normalised into one JSON (:func:`point_from_aiperf`,
:func:`point_from_benchmark_serving`) with these fields (times in ms, rates in tok/s)::

    concurrency num_prompts isl osl gpus completed errors duration_s
    output_tok_s output_tok_s_per_gpu user_tok_s_p50 request_per_s
    ttft_ms_{p50,mean,p99} tpot_ms_{mean,p99} itl_ms_{mean,p99} e2el_ms_{mean,p99}
    client source

Metric mapping (seed 000 "Key Metrics"): TPOT = per-request (E2E - TTFT)/(tokens - 1), which
is aiperf's ``inter_token_latency``; ITL = the intervals between streamed tokens, aiperf's
``inter_chunk_latency``; E2EL = aiperf ``request_latency``; user output tok/s = aiperf
``output_token_throughput_per_user`` (1/TPOT per request; ``e2e_output_token_throughput``
when the server streamed a single chunk); system output tok/s = ``output_token_throughput``.

A run directory ``<out>/<UTC yyyymmddTHHMMSSZ>-<deployment>/`` holds ``meta.json`` (engine,
engine version, client and its version, sweep, bench host, GPUs), ``plan.json``,
``points/c<concurrency>.json``, ``raw/c<concurrency>/`` (the client's own files),
``results.md`` and ``pareto.png``.
"""
from __future__ import annotations

import json
import math
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from glmops.engines import registry

AIPERF_VERSION = "0.13.0"
#: Where ``glmops bench`` looks for aiperf on the controller (the lab wheel set installed
#: into its own venv; see :func:`aiperf_binary`).
AIPERF_VENV = Path(os.environ.get("GLMOPS_CACHE", Path.home() / ".cache" / "glmops")) / "venvs" / f"aiperf-{AIPERF_VERSION}"
#: On a bench host (a router host), installed under the venv root like the engines.
REMOTE_AIPERF = f"/opt/glmops/venvs/aiperf-{AIPERF_VERSION}/bin/aiperf"

POINT_FIELDS = ("concurrency", "num_prompts", "isl", "osl", "gpus", "completed", "errors", "duration_s",
                "output_tok_s", "output_tok_s_per_gpu", "user_tok_s_p50", "request_per_s",
                "ttft_ms_p50", "ttft_ms_mean", "ttft_ms_p99", "tpot_ms_mean", "tpot_ms_p99",
                "itl_ms_mean", "itl_ms_p99", "e2el_ms_mean", "e2el_ms_p99", "client", "source")

#: Table columns: (header, point field, format). The first three are seed 001's columns.
TABLE_COLUMNS = (
    ("Concurrency", "concurrency", "{:d}"),
    ("System output tok/s/GPU", "output_tok_s_per_gpu", "{:,.1f}"),
    ("User output tok/s (P50)", "user_tok_s_p50", "{:,.1f}"),
    ("TTFT P50 (ms)", "ttft_ms_p50", "{:,.1f}"),
    ("TPOT mean (ms)", "tpot_ms_mean", "{:,.2f}"),
    ("TPOT P99 (ms)", "tpot_ms_p99", "{:,.2f}"),
    ("ITL mean (ms)", "itl_ms_mean", "{:,.2f}"),
    ("ITL P99 (ms)", "itl_ms_p99", "{:,.2f}"),
    ("E2EL mean (ms)", "e2el_ms_mean", "{:,.1f}"),
    ("E2EL P99 (ms)", "e2el_ms_p99", "{:,.1f}"),
)


class BenchError(Exception):
    """A bench input or run problem; the message names the value and what is accepted."""


# ------------------------------------------------------------------------------ sweep
@dataclass
class SweepConfig:
    """One sweep. Defaults are seed 000's bench.sh: concurrency 1..256 (x2), multi_round 5
    (num_prompts = concurrency x 5), ISL/OSL 1024, random prompts, ignore-eos, seed 0."""

    concurrency: list[int] = field(default_factory=lambda: [1, 2, 4, 8, 16, 32, 64, 128, 256])
    multi_round: int = 5
    isl: int = 1024
    osl: int = 1024
    seed: int = 0
    ignore_eos: bool = True
    endpoint_type: str = "completions"
    streaming: bool = True

    def num_prompts(self, concurrency: int) -> int:
        return concurrency * self.multi_round

    def problems(self) -> list[str]:
        out = []
        if not self.concurrency:
            out.append("--concurrency: empty; accepted: a comma list of integers >= 1, e.g. 1,2,4")
        bad = [c for c in self.concurrency if not isinstance(c, int) or c < 1]
        if bad:
            out.append(f"--concurrency: {bad} not >= 1; accepted: integers >= 1")
        for name in ("multi_round", "isl", "osl"):
            if getattr(self, name) < 1:
                out.append(f"--{name.replace('_', '-')}: {getattr(self, name)} not >= 1")
        if self.endpoint_type not in ("completions", "chat"):
            out.append(f"--endpoint-type: {self.endpoint_type!r}; accepted: completions, chat")
        return out


#: ``--quick``: a tiny sweep that fits the lab model (max_model_len 512).
QUICK = SweepConfig(concurrency=[1, 2], multi_round=2, isl=64, osl=16)


def parse_concurrency(text: str) -> list[int]:
    """``"1,2,4"`` -> [1, 2, 4]; ``"1..256"`` -> powers of two from 1 to 256. Raises BenchError."""
    text = text.strip()
    try:
        if ".." in text:
            lo, hi = (int(x) for x in text.split("..", 1))
            if lo < 1 or hi < lo:
                raise ValueError
            out, c = [], lo
            while c <= hi:
                out.append(c)
                c *= 2
            return out
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise BenchError(f"--concurrency {text!r}: accepted: a comma list of integers (1,2,4) or LO..HI (1..256)")


# ------------------------------------------------------------------------------ clients
def aiperf_binary(explicit: str | None = None) -> str:
    """The aiperf executable: ``explicit``, else the controller's aiperf venv, else
    ``aiperf`` on PATH. Raises BenchError naming where it looked."""
    if explicit:
        if not (os.path.exists(explicit) or shutil.which(explicit)):
            raise BenchError(f"--aiperf {explicit!r}: not found")
        return explicit
    venv = AIPERF_VENV / "bin" / "aiperf"
    if venv.exists():
        return str(venv)
    found = shutil.which("aiperf")
    if found:
        return found
    raise BenchError(f"aiperf not found at {venv} or on PATH; install it: python3 -m venv {AIPERF_VENV} && "
                     f"{AIPERF_VENV}/bin/pip install aiperf=={AIPERF_VERSION} (offline: --no-index --find-links "
                     "~/.cache/glmops/wheelhouse/aiperf -r requirements.lock), or pass --aiperf PATH")


def ensure_aiperf_venv(wheelhouse: Path | None = None, python: str = "python3") -> Path:
    """Create :data:`AIPERF_VENV` from the lab's ``aiperf`` wheel set with no index
    (``glmops.lab.wheelhouse``: ``pip install --no-index --no-deps -r requirements.lock``) unless
    it already has ``bin/aiperf``; returns the aiperf path. Measured on the 2-core controller:
    ~1.5 min, 1.2 GB. Raises BenchError when the wheel set is missing."""
    binary = AIPERF_VENV / "bin" / "aiperf"
    if binary.exists():
        return binary
    wh = Path(wheelhouse) if wheelhouse else (AIPERF_VENV.parent.parent / "wheelhouse" / "aiperf")
    lock = wh / "requirements.lock"
    if not lock.exists():
        raise BenchError(f"no aiperf wheel set at {wh}; build it: python -m glmops.lab.wheelhouse build --set aiperf")
    subprocess.run([python, "-m", "venv", str(AIPERF_VENV)], check=True, timeout=300)
    subprocess.run([str(AIPERF_VENV / "bin" / "pip"), "install", "-q", "--no-index", "--no-deps",
                    "--find-links", str(wh), "-r", str(lock)], check=True, timeout=1800)
    return binary


def aiperf_argv(binary: str, url: str, model: str, tokenizer: str, cfg: SweepConfig, concurrency: int,
                artifact_dir: str, extra: Iterable[str] = ()) -> list[str]:
    """aiperf 0.13.0 ``profile`` command line for one point (flags checked against
    ``aiperf profile --help`` of 0.13.0; FINDINGS.md's offline form). ignore-eos goes in as
    ``--extra-inputs {"ignore_eos": true}`` (vLLM/TRT-LLM/SGLang request field); the
    request count is concurrency x multi_round like seed 000's num_prompts."""
    argv = [binary, "profile", "--model", model, "--url", url, "--endpoint-type", cfg.endpoint_type,
            "--tokenizer", tokenizer, "--concurrency", str(concurrency),
            "--request-count", str(cfg.num_prompts(concurrency)),
            "--isl", str(cfg.isl), "--isl-stddev", "0", "--osl", str(cfg.osl), "--osl-stddev", "0",
            "--random-seed", str(cfg.seed), "--artifact-dir", artifact_dir, "--ui-type", "none",
            "--no-gpu-telemetry"]
    if cfg.streaming:
        argv.insert(2, "--streaming")
    if cfg.ignore_eos:
        argv += ["--extra-inputs", json.dumps({"ignore_eos": True})]
    return argv + list(extra)


def engine_client_argv(engine: str, python: str, model: str, host: str, port: int, tokenizer: str,
                       cfg: SweepConfig, concurrency: int, result_dir: str, result_file: str) -> list[str]:
    """The engine's own benchmark client for one point. TensorRT-LLM only (seed 000 bench.sh,
    with ``--save-result --result-dir --result-filename``): the engine's
    ``EngineSpec.bench_client``. Raises BenchError for an engine without one."""
    spec = registry.find(engine)
    if spec is None or spec.bench_client is None:
        have = " and ".join(s.name for s in registry.specs() if s.bench_client is not None)
        raise BenchError(f"client 'engine' for engine {engine!r}: only {have} ships a client glmops drives "
                         "(seed 000 benchmark_serving); accepted: --client aiperf")
    return spec.bench_client(python, model, host, port, tokenizer, cfg, concurrency, result_dir, result_file)


# ------------------------------------------------------------------------------ normalise
def _stat(d: dict, key: str, stat: str) -> float | None:
    v = (d.get(key) or {}).get(stat) if isinstance(d.get(key), dict) else None
    return float(v) if isinstance(v, (int, float)) else None


def point_from_aiperf(export: dict, concurrency: int, cfg: SweepConfig, gpus: int, source: str = "") -> dict:
    """One point from aiperf's ``profile_export_aiperf.json`` (schema 1.4 of 0.13.0: each
    metric is ``{unit, avg, p50, p99, ...}``; times in ms). See the module docstring for the
    mapping. Raises BenchError when the export lacks the output throughput."""
    out_tok_s = _stat(export, "output_token_throughput", "avg")
    if out_tok_s is None:
        raise BenchError(f"aiperf export {source or ''} has no output_token_throughput: "
                         f"errors {export.get('error_summary')}")
    user = _stat(export, "output_token_throughput_per_user", "p50")
    if user is None:
        user = _stat(export, "e2e_output_token_throughput", "p50")
    completed = _stat(export, "completed_request_count", "avg") or _stat(export, "request_count", "avg") or 0
    total = cfg.num_prompts(concurrency)
    return _finish_point({
        "concurrency": concurrency, "num_prompts": total, "isl": cfg.isl, "osl": cfg.osl, "gpus": gpus,
        "completed": int(completed), "errors": max(0, total - int(completed)),
        "duration_s": _stat(export, "benchmark_duration", "avg"),
        "output_tok_s": out_tok_s, "user_tok_s_p50": user,
        "request_per_s": _stat(export, "request_throughput", "avg"),
        "ttft_ms_p50": _stat(export, "time_to_first_token", "p50"),
        "ttft_ms_mean": _stat(export, "time_to_first_token", "avg"),
        "ttft_ms_p99": _stat(export, "time_to_first_token", "p99"),
        "tpot_ms_mean": _stat(export, "inter_token_latency", "avg"),
        "tpot_ms_p99": _stat(export, "inter_token_latency", "p99"),
        "itl_ms_mean": _stat(export, "inter_chunk_latency", "avg"),
        "itl_ms_p99": _stat(export, "inter_chunk_latency", "p99"),
        "e2el_ms_mean": _stat(export, "request_latency", "avg"),
        "e2el_ms_p99": _stat(export, "request_latency", "p99"),
        "client": f"aiperf {export.get('aiperf_version', '')}".strip(), "source": source,
    })


def point_from_benchmark_serving(result: dict, concurrency: int, cfg: SweepConfig, gpus: int,
                                 source: str = "") -> dict:
    """One point from a ``benchmark_serving --save-result`` JSON (keys ``output_throughput``,
    ``{mean,median,p99}_{ttft,tpot,itl,e2el}_ms``, ``completed``; seed 000's printed
    fields). User tok/s P50 = 1000 / median TPOT. Raises BenchError without
    ``output_throughput``."""
    if not isinstance(result.get("output_throughput"), (int, float)):
        raise BenchError(f"benchmark_serving result {source} has no output_throughput")
    med_tpot = result.get("median_tpot_ms")
    total = cfg.num_prompts(concurrency)
    completed = int(result.get("completed") or 0)
    return _finish_point({
        "concurrency": concurrency, "num_prompts": total, "isl": cfg.isl, "osl": cfg.osl, "gpus": gpus,
        "completed": completed, "errors": max(0, total - completed), "duration_s": result.get("duration"),
        "output_tok_s": float(result["output_throughput"]),
        "user_tok_s_p50": (1000.0 / med_tpot) if med_tpot else None,
        "request_per_s": result.get("request_throughput"),
        "ttft_ms_p50": result.get("median_ttft_ms"), "ttft_ms_mean": result.get("mean_ttft_ms"),
        "ttft_ms_p99": result.get("p99_ttft_ms"),
        "tpot_ms_mean": result.get("mean_tpot_ms"), "tpot_ms_p99": result.get("p99_tpot_ms"),
        "itl_ms_mean": result.get("mean_itl_ms"), "itl_ms_p99": result.get("p99_itl_ms"),
        "e2el_ms_mean": result.get("mean_e2el_ms"), "e2el_ms_p99": result.get("p99_e2el_ms"),
        "client": "benchmark_serving", "source": source,
    })


def _finish_point(p: dict) -> dict:
    gpus = p.get("gpus") or 0
    p["output_tok_s_per_gpu"] = p["output_tok_s"] / gpus if gpus else None
    return {k: p.get(k) for k in POINT_FIELDS}


# ------------------------------------------------------------------------------ render
def _fmt(fmt: str, value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if "d}" in fmt:
        return fmt.format(int(value))
    return fmt.format(float(value))


def markdown_table(points: list[dict], title: str = "") -> str:
    """Seed 001's columns (System output tok/s/GPU, User output tok/s (P50), TTFT P50 (ms))
    plus TPOT, ITL and E2EL mean and P99, one row per point sorted by concurrency; every
    number is formatted from the point's own field."""
    rows = sorted(points, key=lambda p: p["concurrency"])
    head = "| " + " | ".join(c[0] for c in TABLE_COLUMNS) + " |"
    sep = "|" + "|".join("---:" for _ in TABLE_COLUMNS) + "|"
    lines = ([f"### {title}", ""] if title else []) + [head, sep]
    for p in rows:
        lines.append("| " + " | ".join(_fmt(fmt, p.get(key)) for _, key, fmt in TABLE_COLUMNS) + " |")
    return "\n".join(lines) + "\n"


def pareto_front(points: list[dict], x: str = "user_tok_s_p50", y: str = "output_tok_s_per_gpu") -> list[int]:
    """Indices of the points no other point beats on both axes (higher is better on both:
    ``x`` tok/s per user, ``y`` output tok/s per GPU; seed 000's frontier). A point is
    dominated when another is >= on both and > on one. Points missing a value are left out."""
    idx = [i for i, p in enumerate(points) if p.get(x) is not None and p.get(y) is not None]
    front = []
    for i in idx:
        xi, yi = points[i][x], points[i][y]
        dominated = any(points[j][x] >= xi and points[j][y] >= yi and (points[j][x] > xi or points[j][y] > yi)
                        for j in idx if j != i)
        if not dominated:
            front.append(i)
    return sorted(front, key=lambda i: points[i][x])


FRONT_ALPHA, DOMINATED_ALPHA = 1.0, 0.25


def pareto_styles(points: list[dict]) -> list[float | None]:
    """Marker alpha per point as :func:`pareto_png` draws it: frontier points
    :data:`FRONT_ALPHA`, dominated points faded to :data:`DOMINATED_ALPHA`, None for points
    missing an axis value (not drawn)."""
    front = set(pareto_front(points))
    out: list[float | None] = []
    for i, p in enumerate(points):
        if p.get("user_tok_s_p50") is None or p.get("output_tok_s_per_gpu") is None:
            out.append(None)
        else:
            out.append(FRONT_ALPHA if i in front else DOMINATED_ALPHA)
    return out


def pareto_png(points: list[dict], path: Path, title: str = "", per: str = "GPU") -> Path:
    """Write the Pareto PNG: output tok/s per ``per`` (y) against tok/s per user (x), the
    frontier as a line with full-colour markers, dominated points faded (:func:`pareto_styles`), each
    labelled with its concurrency. matplotlib with the Agg backend (no display)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 5), dpi=110)
    for p, alpha in zip(points, pareto_styles(points)):
        if alpha is None:
            continue
        x, y = p["user_tok_s_p50"], p["output_tok_s_per_gpu"]
        on = alpha == FRONT_ALPHA
        ax.scatter([x], [y], color="tab:blue", alpha=alpha, s=40 if on else 30, zorder=3 if on else 2)
        ax.annotate(f"c{p['concurrency']}", (x, y), textcoords="offset points", xytext=(4, 4),
                    fontsize=8, alpha=1.0 if on else 0.4)
    xs = [p.get("user_tok_s_p50") for p in points]
    ys = [p.get("output_tok_s_per_gpu") for p in points]
    order = pareto_front(points)
    if order:
        ax.plot([xs[i] for i in order], [ys[i] for i in order], color="tab:blue", lw=1.5, zorder=2,
                label="Pareto frontier")
        ax.legend(loc="best")
    ax.set_xlabel("Output tok/s per user (P50)")
    ax.set_ylabel(f"Output tok/s per {per}")
    ax.set_title(title or "Pareto frontier")
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


# ------------------------------------------------------------------------------ run dirs
def load_run(run_dir: Path) -> tuple[dict, list[dict]]:
    """(meta, points sorted by concurrency) of a run directory. Raises BenchError when the
    directory has no ``points/*.json``."""
    run_dir = Path(run_dir)
    files = sorted((run_dir / "points").glob("*.json"))
    if not files:
        raise BenchError(f"{run_dir}: no points/*.json; accepted: a directory written by glmops bench")
    meta = json.loads((run_dir / "meta.json").read_text()) if (run_dir / "meta.json").exists() else {}
    points = [json.loads(f.read_text()) for f in files]
    return meta, sorted(points, key=lambda p: p["concurrency"])


COMPARE_FIELDS = (("output_tok_s_per_gpu", "out tok/s/GPU", True), ("user_tok_s_p50", "user tok/s P50", True),
                  ("ttft_ms_p50", "TTFT P50 ms", False), ("tpot_ms_mean", "TPOT mean ms", False),
                  ("e2el_ms_p99", "E2EL P99 ms", False))


def compare(a: list[dict], b: list[dict]) -> list[dict]:
    """Per concurrency present in both runs, for each of :data:`COMPARE_FIELDS`: ``{a, b,
    delta (b - a), pct (delta / a * 100, None when a is 0 or missing), better (bool: b is
    better, higher tok/s or lower latency)}``. Rows sorted by concurrency; concurrencies in
    one run only are listed with ``only`` = "A"/"B"."""
    by_a = {p["concurrency"]: p for p in a}
    by_b = {p["concurrency"]: p for p in b}
    rows = []
    for c in sorted(set(by_a) | set(by_b)):
        if c not in by_a or c not in by_b:
            rows.append({"concurrency": c, "only": "A" if c in by_a else "B"})
            continue
        row: dict[str, Any] = {"concurrency": c}
        for key, _label, higher in COMPARE_FIELDS:
            va, vb = by_a[c].get(key), by_b[c].get(key)
            if va is None or vb is None:
                row[key] = {"a": va, "b": vb, "delta": None, "pct": None, "better": None}
                continue
            delta = vb - va
            row[key] = {"a": va, "b": vb, "delta": delta, "pct": (delta / va * 100.0) if va else None,
                        "better": (delta > 0) if higher else (delta < 0)}
        rows.append(row)
    return rows


def compare_markdown(rows: list[dict], name_a: str, name_b: str) -> str:
    """The comparison as a Markdown table: per field ``A -> B (+x.x%)``."""
    head = "| Concurrency | " + " | ".join(label for _, label, _ in COMPARE_FIELDS) + " |"
    lines = [f"A = {name_a}", f"B = {name_b}", "", head, "|---:|" + "|".join("---:" for _ in COMPARE_FIELDS) + "|"]
    for r in rows:
        if "only" in r:
            lines.append(f"| {r['concurrency']} | " + " | ".join(f"only in {r['only']}" for _ in COMPARE_FIELDS) + " |")
            continue
        cells = []
        for key, _label, _h in COMPARE_FIELDS:
            d = r[key]
            if d["delta"] is None:
                cells.append("-")
                continue
            pct = f" ({d['pct']:+.1f}%)" if d["pct"] is not None else ""
            cells.append(f"{d['a']:,.1f} -> {d['b']:,.1f}{pct}")
        lines.append(f"| {r['concurrency']} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def render_run(run_dir: Path) -> tuple[Path, Path]:
    """(Re)write ``results.md`` and ``pareto.png`` of a run directory from its points."""
    meta, points = load_run(run_dir)
    per = meta.get("gpu_basis", "GPU")
    sweep_cfg = meta.get("sweep", {})
    who = " ".join(str(meta[k]) for k in ("model", "engine", "engine_version", "topology") if meta.get(k))
    title = f"{who}, ISL {sweep_cfg.get('isl', '?')} / OSL {sweep_cfg.get('osl', '?')}"
    md = Path(run_dir) / "results.md"
    note = ""
    if per != "GPU":
        note = f"\nNo GPUs in this deployment: 'per GPU' columns are per {per}.\n"
    md.write_text(markdown_table(points, title) + note)
    png = pareto_png(points, Path(run_dir) / "pareto.png", title, per=per)
    return md, png


# ------------------------------------------------------------------------------ sweep runner
@dataclass
class BenchTarget:
    """What a sweep runs against (from the Plan): endpoint, model, tokenizer, GPUs."""

    endpoint: str
    model: str
    deployment: str = "endpoint"
    engine: str = ""
    engine_version: str = ""
    topology: str = ""
    gpus: int = 0
    gpu_basis: str = "GPU"
    tokenizer: str = "builtin"
    plan: dict[str, Any] = field(default_factory=dict)
    worker_urls: dict[str, str] = field(default_factory=dict)


def run_dir_for(out: Path, deployment: str, now: datetime | None = None) -> Path:
    """``<out>/<UTC yyyymmddTHHMMSSZ>-<deployment>`` (a suffix -2, -3 ... when taken)."""
    stamp = (now or datetime.now(UTC)).strftime("%Y%m%dT%H%M%SZ")
    base = Path(out) / f"{stamp}-{deployment}"
    path, n = base, 1
    while path.exists():
        n += 1
        path = Path(f"{base}-{n}")
    return path


def reported_versions(worker_urls: dict[str, str], timeout: float = 5.0) -> dict[str, Any]:
    """``GET <worker>/version`` of each worker (vLLM and trtllm-serve answer ``{"version": ...}``):
    ``{service: version}``; None for a worker that does not answer it."""
    import requests

    out: dict[str, Any] = {}
    for name, base in worker_urls.items():
        try:
            r = requests.get(base.rstrip("/") + "/version", timeout=timeout)
            out[name] = r.json().get("version") if r.status_code == 200 else None
        except (requests.RequestException, ValueError, AttributeError):
            out[name] = None
    return out


def sweep(target: BenchTarget, cfg: SweepConfig, out: Path, run_point: Callable[[int, Path], dict],
          progress: Callable[[int, int, int, dict | None], None] | None = None, client: str = "aiperf",
          bench_host: str = "controller", client_version: str = "") -> Path:
    """Run every point with ``run_point(concurrency, raw_dir) -> point dict``, write the run
    directory (see the module docstring), render table and PNG, return the directory.
    ``progress(i, n, concurrency, point or None)`` is called before (None) and after each
    point. A point that raises is recorded as ``{"concurrency", "error"}`` in
    ``errors.json`` and the sweep goes on; BenchError when no point succeeded."""
    run = run_dir_for(out, target.deployment)
    (run / "points").mkdir(parents=True)
    (run / "raw").mkdir()
    meta = {"deployment": target.deployment, "model": target.model, "endpoint": target.endpoint,
            "engine": target.engine, "engine_version": target.engine_version, "topology": target.topology,
            "gpus": target.gpus, "gpu_basis": target.gpu_basis, "tokenizer": target.tokenizer,
            "client": client, "client_version": client_version, "bench_host": bench_host,
            "reported_versions": reported_versions(target.worker_urls),
            "sweep": asdict(cfg), "started": datetime.now(UTC).isoformat(timespec="seconds")}
    (run / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    (run / "plan.json").write_text(json.dumps(target.plan, indent=2, default=str) + "\n")
    errors = []
    n = len(cfg.concurrency)
    for i, c in enumerate(cfg.concurrency, 1):
        if progress:
            progress(i, n, c, None)
        raw = run / "raw" / f"c{c:04d}"
        raw.mkdir()
        try:
            point = run_point(c, raw)
        except Exception as exc:  # noqa: BLE001 - keep sweeping; the report names the point
            errors.append({"concurrency": c, "error": f"{type(exc).__name__}: {exc}"})
            if progress:
                progress(i, n, c, {"concurrency": c, "error": str(exc)})
            continue
        (run / "points" / f"c{c:04d}.json").write_text(json.dumps(point, indent=2) + "\n")
        if progress:
            progress(i, n, c, point)
    meta["finished"] = datetime.now(UTC).isoformat(timespec="seconds")
    meta["errors"] = errors
    (run / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    if errors:
        (run / "errors.json").write_text(json.dumps(errors, indent=2) + "\n")
    if not list((run / "points").glob("*.json")):
        raise BenchError(f"no point of the sweep succeeded (see {run}/errors.json): {errors[0]['error']}")
    render_run(run)
    return run


#: runs a console script with ``--api-key <first stdin line>`` appended to its ``sys.argv`` inside
#: the process: the key reaches aiperf (which sends ``Authorization: Bearer``) through a pipe, never
#: through an argv word (``/proc/<pid>/cmdline``, ssh's remote command) or the command.txt record
KEY_SHIM = ("import runpy,sys;k=sys.stdin.readline().strip();sys.argv=sys.argv[1:]+(['--api-key',k] if k else []);"
            "runpy.run_path(sys.argv[0],run_name='__main__')")


def interpreter_of(binary: str, remote: bool = False) -> str:
    """The Python that runs the console script ``binary``: its venv's ``python3`` beside it (a remote
    host's aiperf venv), else the script's ``#!`` line (a local aiperf on PATH)."""
    if not remote:
        try:
            with open(binary, encoding="utf-8", errors="replace") as fh:
                first = fh.readline().strip()
            if first.startswith("#!") and "python" in first:
                return first[2:].strip().split()[0]
        except OSError:
            pass
    return str(Path(binary).parent / "python3")


def keyed_argv(argv: list[str], remote: bool = False) -> list[str]:
    """``argv`` (a console script first) run through :data:`KEY_SHIM`: the API key comes on stdin."""
    return [interpreter_of(argv[0], remote), "-c", KEY_SHIM, *argv]


def aiperf_point_runner(binary: str, target: BenchTarget, cfg: SweepConfig, timeout_s: float = 3600,
                        remote: Callable[[list[str]], list[str]] | None = None,
                        fetch: Callable[[str], str] | None = None, api_key: str = "") -> Callable[[int, Path], dict]:
    """A ``run_point`` for :func:`sweep` that runs aiperf locally (or through ``remote(argv)
    -> ssh argv`` on a bench host, then ``fetch(remote path) -> text`` for its export) and
    normalises its export. The client's stdout/stderr go to ``raw/c<N>/aiperf.log``. With
    ``api_key`` (glmops_api_key) aiperf gets it on stdin (:func:`keyed_argv`), never in argv."""
    def run_point(c: int, raw: Path) -> dict:
        art = str(raw / "aiperf") if remote is None else f"/tmp/glmops-bench/{raw.parent.parent.name}/c{c:04d}"
        argv = aiperf_argv(binary, target.endpoint, target.model, target.tokenizer, cfg, c, art)
        (raw / "command.txt").write_text(shlex.join(argv) + "\n")
        if api_key:
            argv = keyed_argv(argv, remote=remote is not None)
        run_argv = remote(argv) if remote else argv
        with open(raw / "aiperf.log", "w") as log:
            r = subprocess.run(run_argv, check=False, stdout=log, stderr=subprocess.STDOUT, timeout=timeout_s,
                               env={**os.environ, "PYTHONUNBUFFERED": "1"},
                               input=f"{api_key}\n".encode() if api_key else None)
        export_path = f"{art}/profile_export_aiperf.json"
        if r.returncode != 0:
            tail = (raw / "aiperf.log").read_text(errors="replace").strip().splitlines()[-5:]
            raise BenchError(f"aiperf exited {r.returncode} at concurrency {c}: {' / '.join(tail)}")
        text = fetch(export_path) if fetch else Path(export_path).read_text()
        if fetch:
            (raw / "profile_export_aiperf.json").write_text(text)
        return point_from_aiperf(json.loads(text), c, cfg, target.gpus, source=export_path)

    return run_point


def target_from_plan(plan: Any, dep: Any, tokenizer: str | None = None) -> BenchTarget:
    """A :class:`BenchTarget` from a Plan and its Deployment. GPUs = the GPUs of every
    worker service (no router); CPU deployments (the lab) count one per worker, and say so
    (``gpu_basis`` "CPU worker"). Tokenizer: ``tokenizer``, else the checkpoint's
    ``local_dir`` when it exists on this machine, else the lab cache copy of a lab model,
    else ``builtin`` (aiperf's offline tiktoken)."""
    workers = [s for s in plan.services if s.role in ("agg", "prefill", "decode")]
    gpus = sum(len(s.gpus) for s in workers)
    basis = "GPU"
    if gpus == 0:
        gpus, basis = len([s for s in workers if s.node_rank == 0]) or 1, "CPU worker"
    if tokenizer is None:
        tokenizer = "builtin"
        local = Path(dep.checkpoint.local_dir) if dep.checkpoint and dep.checkpoint.local_dir else None
        cache = Path(os.environ.get("GLMOPS_CACHE", Path.home() / ".cache" / "glmops")) / "models" / dep.checkpoint.repo
        for cand in (local, cache):
            if cand is not None and (cand / "tokenizer.json").exists():
                tokenizer = str(cand)
                break
    urls = {s.name: re.match(r"https?://[^/]+", s.health_url).group(0) for s in workers
            if s.health_url and s.node_rank == 0}
    return BenchTarget(endpoint=plan.endpoint_url.rstrip("/"), model=plan.served_model_name, worker_urls=urls,
                       deployment=plan.deployment, engine=plan.engine, engine_version=dep.engine_version,
                       topology=plan.topology, gpus=gpus, gpu_basis=basis, tokenizer=tokenizer,
                       plan=plan.to_dict())


def aiperf_version(binary: str) -> str:
    """``aiperf --version`` output's version, or "" when it does not answer."""
    try:
        r = subprocess.run([binary, "--version"], check=False, capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    text = (r.stdout or r.stderr).strip().split()
    return text[-1] if text else ""


def log(msg: str) -> None:  # pragma: no cover - trivial
    sys.stderr.write(msg + "\n")
