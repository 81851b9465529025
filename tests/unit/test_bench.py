"""glmops.bench on synthetic JSON: normalising client output, the Markdown table (its numbers
come from the point JSON), the Pareto frontier and PNG, run directories and compare."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from datetime import UTC
from pathlib import Path

import pytest

from glmops import bench as b

REPO = Path(__file__).resolve().parents[2]


def metric(avg, p50=None, p99=None, unit="ms"):
    d = {"unit": unit, "avg": avg}
    if p50 is not None:
        d.update(p50=p50, p99=p99, p1=p50 * 0.5, min=p50 * 0.4, max=p99 * 1.1, std=1.0, count=10)
    return d


def aiperf_export(scale: float = 1.0, completed: int = 10) -> dict:
    """Shaped like aiperf 0.13.0's profile_export_aiperf.json (schema 1.4)."""
    return {
        "schema_version": "1.4", "aiperf_version": "0.13.0",
        "output_token_throughput": metric(1200.0 * scale, unit="tokens/sec"),
        "output_token_throughput_per_user": metric(80.0 / scale, 75.5 / scale, 90.0 / scale, "tokens/sec/user"),
        "e2e_output_token_throughput": metric(60.0, 61.0, 70.0, "tokens/sec/user"),
        "time_to_first_token": metric(150.0 * scale, 140.25 * scale, 400.0 * scale),
        "inter_token_latency": metric(12.5 * scale, 12.0 * scale, 20.75 * scale),
        "inter_chunk_latency": metric(12.25 * scale, 11.0 * scale, 33.5 * scale),
        "request_latency": metric(13000.0 * scale, 12900.0 * scale, 15100.0 * scale),
        "request_throughput": metric(1.17, unit="requests/sec"),
        "completed_request_count": {"unit": "requests", "avg": float(completed)},
        "benchmark_duration": {"unit": "sec", "avg": 42.0},
    }


CFG = b.SweepConfig(concurrency=[2], multi_round=5, isl=1024, osl=1024)


def test_point_from_aiperf_maps_the_seed_metrics():
    p = b.point_from_aiperf(aiperf_export(), 2, CFG, gpus=4, source="x.json")
    assert p["num_prompts"] == 10 and p["completed"] == 10 and p["errors"] == 0
    assert p["output_tok_s"] == 1200.0 and p["output_tok_s_per_gpu"] == 300.0
    assert p["user_tok_s_p50"] == 75.5  # output_token_throughput_per_user P50
    assert p["ttft_ms_p50"] == 140.25 and p["ttft_ms_p99"] == 400.0
    assert (p["tpot_ms_mean"], p["tpot_ms_p99"]) == (12.5, 20.75)   # aiperf inter_token_latency = TPOT
    assert (p["itl_ms_mean"], p["itl_ms_p99"]) == (12.25, 33.5)     # aiperf inter_chunk_latency = ITL
    assert (p["e2el_ms_mean"], p["e2el_ms_p99"]) == (13000.0, 15100.0)
    assert p["client"] == "aiperf 0.13.0" and set(p) == set(b.POINT_FIELDS)


def test_point_from_aiperf_falls_back_and_counts_errors():
    exp = aiperf_export(completed=7)
    del exp["output_token_throughput_per_user"]
    p = b.point_from_aiperf(exp, 2, CFG, gpus=0)
    assert p["user_tok_s_p50"] == 61.0 and p["errors"] == 3 and p["output_tok_s_per_gpu"] is None
    with pytest.raises(b.BenchError, match="no output_token_throughput"):
        b.point_from_aiperf({"error_summary": [{"code": 500}]}, 2, CFG, gpus=1)


def test_point_from_benchmark_serving_result():
    res = {"output_throughput": 900.0, "completed": 10, "duration": 12.0, "request_throughput": 0.8,
           "median_ttft_ms": 100.0, "mean_ttft_ms": 110.0, "p99_ttft_ms": 300.0, "median_tpot_ms": 10.0,
           "mean_tpot_ms": 11.0, "p99_tpot_ms": 15.0, "mean_itl_ms": 10.5, "p99_itl_ms": 30.0,
           "mean_e2el_ms": 11500.0, "p99_e2el_ms": 12500.0}
    p = b.point_from_benchmark_serving(res, 2, CFG, gpus=4)
    assert p["user_tok_s_p50"] == 100.0 and p["output_tok_s_per_gpu"] == 225.0
    assert p["tpot_ms_p99"] == 15.0 and p["client"] == "benchmark_serving"


def test_table_numbers_come_from_the_json():
    points = [b.point_from_aiperf(aiperf_export(s), c, CFG, gpus=4) for c, s in ((4, 2.0), (1, 0.5), (2, 1.0))]
    md = b.markdown_table(points, "t")
    lines = [ln for ln in md.splitlines() if ln.startswith("|")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    assert header[:4] == ["Concurrency", "System output tok/s/GPU", "User output tok/s (P50)", "TTFT P50 (ms)"]
    assert header[4:] == ["TPOT mean (ms)", "TPOT P99 (ms)", "ITL mean (ms)", "ITL P99 (ms)",
                          "E2EL mean (ms)", "E2EL P99 (ms)"]
    rows = [[c.strip() for c in ln.strip("|").split("|")] for ln in lines[2:]]
    assert [int(r[0]) for r in rows] == [1, 2, 4]  # sorted by concurrency
    by_c = {p["concurrency"]: p for p in points}
    for r in rows:
        p = by_c[int(r[0])]
        for (_, key, _), cell in zip(b.TABLE_COLUMNS, r):
            assert float(cell.replace(",", "")) == pytest.approx(p[key], rel=1e-3, abs=0.051), (key, cell)


def test_table_shows_missing_values_as_dash():
    p = b.point_from_aiperf(aiperf_export(), 1, CFG, gpus=0)
    row = b.markdown_table([p]).splitlines()[-1]
    assert row.split("|")[2].strip() == "-"


PTS = [  # x = user tok/s, y = tok/s per GPU
    {"concurrency": 1, "user_tok_s_p50": 100.0, "output_tok_s_per_gpu": 50.0},    # front
    {"concurrency": 2, "user_tok_s_p50": 90.0, "output_tok_s_per_gpu": 45.0},     # dominated by c1
    {"concurrency": 4, "user_tok_s_p50": 80.0, "output_tok_s_per_gpu": 150.0},    # front
    {"concurrency": 8, "user_tok_s_p50": 40.0, "output_tok_s_per_gpu": 150.0},    # dominated by c4 (tie on y)
    {"concurrency": 16, "user_tok_s_p50": 20.0, "output_tok_s_per_gpu": 400.0},   # front
    {"concurrency": 32, "user_tok_s_p50": None, "output_tok_s_per_gpu": 10.0},    # not plotted
]


def test_pareto_front_and_fading():
    assert [PTS[i]["concurrency"] for i in b.pareto_front(PTS)] == [16, 4, 1]  # by x
    assert b.pareto_styles(PTS) == [1.0, 0.25, 1.0, 0.25, 1.0, None]


def test_pareto_png_draws_full_and_faded_markers(tmp_path):
    import matplotlib.image as mpimg
    import numpy as np

    path = b.pareto_png(PTS, tmp_path / "p.png", "t")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    img = (mpimg.imread(path)[..., :3] * 255).round()
    full = np.array([31, 119, 180])  # tab:blue
    faded = 255 - 0.25 * (255 - full)  # tab:blue at alpha 0.25 on white
    assert (np.abs(img - full).max(axis=-1) <= 3).sum() > 20
    assert (np.abs(img - faded).max(axis=-1) <= 3).sum() > 20


def test_compare_deltas():
    a = [{"concurrency": 1, "output_tok_s_per_gpu": 100.0, "user_tok_s_p50": 50.0, "ttft_ms_p50": 200.0,
          "tpot_ms_mean": 20.0, "e2el_ms_p99": 1000.0},
         {"concurrency": 2, "output_tok_s_per_gpu": 150.0, "user_tok_s_p50": 40.0, "ttft_ms_p50": 250.0,
          "tpot_ms_mean": 25.0, "e2el_ms_p99": 1200.0}]
    bb = [{"concurrency": 1, "output_tok_s_per_gpu": 110.0, "user_tok_s_p50": 45.0, "ttft_ms_p50": 150.0,
           "tpot_ms_mean": 22.0, "e2el_ms_p99": None},
          {"concurrency": 4, "output_tok_s_per_gpu": 1.0, "user_tok_s_p50": 1.0, "ttft_ms_p50": 1.0,
           "tpot_ms_mean": 1.0, "e2el_ms_p99": 1.0}]
    rows = b.compare(a, bb)
    assert [r["concurrency"] for r in rows] == [1, 2, 4]
    r1 = rows[0]
    assert r1["output_tok_s_per_gpu"] == {"a": 100.0, "b": 110.0, "delta": 10.0, "pct": pytest.approx(10.0),
                                          "better": True}
    assert r1["user_tok_s_p50"]["better"] is False and r1["user_tok_s_p50"]["pct"] == pytest.approx(-10.0)
    assert r1["ttft_ms_p50"]["delta"] == -50.0 and r1["ttft_ms_p50"]["better"] is True  # lower latency
    assert r1["e2el_ms_p99"]["delta"] is None
    assert rows[1] == {"concurrency": 2, "only": "A"} and rows[2] == {"concurrency": 4, "only": "B"}
    md = b.compare_markdown(rows, "runA", "runB")
    assert "100.0 -> 110.0 (+10.0%)" in md and "200.0 -> 150.0 (-25.0%)" in md and "only in A" in md


def test_sweep_writes_the_run_directory_and_keeps_going_after_a_failed_point(tmp_path):
    cfg = b.SweepConfig(concurrency=[1, 2, 4], multi_round=2, isl=64, osl=16)
    target = b.BenchTarget(endpoint="http://x:8000", model="m", deployment="dep", engine="vllm",
                           engine_version="0.32.0", topology="agg", gpus=2, plan={"deployment": "dep"})
    seen = []

    def run_point(c, raw):
        assert raw.is_dir() and raw.name == f"c{c:04d}"
        if c == 2:
            raise b.BenchError("aiperf exited 1")
        return b.point_from_aiperf(aiperf_export(c), c, cfg, gpus=2)

    run = b.sweep(target, cfg, tmp_path, run_point, lambda i, n, c, p: seen.append((i, n, c, p is None)))
    assert re.fullmatch(r"\d{8}T\d{6}Z-dep", run.name)
    assert seen == [(1, 3, 1, True), (1, 3, 1, False), (2, 3, 2, True), (2, 3, 2, False),
                    (3, 3, 4, True), (3, 3, 4, False)]
    assert sorted(p.name for p in (run / "points").iterdir()) == ["c0001.json", "c0004.json"]
    meta = json.loads((run / "meta.json").read_text())
    assert meta["engine_version"] == "0.32.0" and meta["sweep"]["concurrency"] == [1, 2, 4]
    assert meta["errors"] == [{"concurrency": 2, "error": "BenchError: aiperf exited 1"}]
    assert json.loads((run / "plan.json").read_text()) == {"deployment": "dep"}
    assert (run / "pareto.png").read_bytes()[:4] == b"\x89PNG"
    md = (run / "results.md").read_text()
    p4 = json.loads((run / "points" / "c0004.json").read_text())
    assert f"| 4 | {p4['output_tok_s_per_gpu']:,.1f} | {p4['user_tok_s_p50']:,.1f} | {p4['ttft_ms_p50']:,.1f} |" in md
    with pytest.raises(b.BenchError, match="no point of the sweep succeeded"):
        b.sweep(target, cfg, tmp_path, lambda c, raw: (_ for _ in ()).throw(RuntimeError("down")))


def test_run_dir_for_never_reuses_a_directory(tmp_path):
    from datetime import datetime

    now = datetime(2026, 11, 29, 9, 0, 0, tzinfo=UTC)
    first = b.run_dir_for(tmp_path, "lab", now)
    assert first.name == "20261129T090000Z-lab"
    first.mkdir()
    assert b.run_dir_for(tmp_path, "lab", now).name == "20261129T090000Z-lab-2"


def test_sweep_config_defaults_are_seed_000():
    cfg = b.SweepConfig()
    assert cfg.concurrency == [1, 2, 4, 8, 16, 32, 64, 128, 256]
    assert (cfg.multi_round, cfg.isl, cfg.osl, cfg.seed, cfg.ignore_eos) == (5, 1024, 1024, 0, True)
    assert cfg.num_prompts(64) == 320
    assert b.parse_concurrency("1..256") == cfg.concurrency
    assert b.parse_concurrency("3,5") == [3, 5]
    with pytest.raises(b.BenchError, match="accepted: a comma list"):
        b.parse_concurrency("a,b")
    assert b.SweepConfig(concurrency=[0], isl=0).problems() == [
        "--concurrency: [0] not >= 1; accepted: integers >= 1", "--isl: 0 not >= 1"]


def test_aiperf_argv_for_one_point():
    argv = b.aiperf_argv("aiperf", "http://h:8000", "m", "/tok", CFG, 8, "/art")
    s = " ".join(argv)
    assert argv[:2] == ["aiperf", "profile"] and "--streaming" in argv
    for flag in ("--concurrency 8", "--request-count 40", "--isl 1024", "--osl 1024", "--random-seed 0",
                 "--endpoint-type completions", "--tokenizer /tok", "--artifact-dir /art", "--ui-type none"):
        assert flag in s
    assert argv[argv.index("--extra-inputs") + 1] == '{"ignore_eos": true}'


def test_engine_client_is_seed_000_benchmark_serving():
    argv = b.engine_client_argv("trtllm", "python3", "zai-org/GLM-5.3-Flash", "h", 8000, "/tok", CFG, 4, "/r", "c4.json")
    s = " ".join(argv)
    assert argv[1:3] == ["-m", "tensorrt_llm.serve.scripts.benchmark_serving"]
    for flag in ("--backend openai", "--dataset-name random", "--random-input-len 1024", "--random-output-len 1024",
                 "--random-prefix-len 0", "--random-ids", "--num-prompts 20", "--max-concurrency 4", "--ignore-eos",
                 "--tokenize-on-client", "--seed 0", "--percentile-metrics ttft,tpot,itl,e2el", "--save-result"):
        assert flag in s
    with pytest.raises(b.BenchError, match="only trtllm"):
        b.engine_client_argv("vllm", "python3", "m", "h", 1, "/t", CFG, 1, "/r", "f")


def test_target_from_lab_plan_counts_cpu_workers():
    from glmops import rules
    from glmops.inventory import load_deployment

    dep = load_deployment(str(REPO / "inventories" / "lab"), topology="disagg")
    plan, problems = rules.validate(dep)
    assert not problems
    t = b.target_from_plan(plan, dep, tokenizer="builtin")
    assert (t.endpoint, t.model, t.gpus, t.gpu_basis) == ("http://10.77.0.13:8000", "tiny-llama", 2, "CPU worker")
    dep8 = load_deployment(str(REPO / "inventories" / "b200"), topology="disagg")
    plan8, _ = rules.validate(dep8)
    assert b.target_from_plan(plan8, dep8, tokenizer="builtin").gpus == sum(
        len(s.gpus) for s in plan8.services if s.role in ("prefill", "decode"))


def glmops(*args):
    return subprocess.run([sys.executable, "-m", "glmops.cli", *args], check=False, capture_output=True, text=True,
                          timeout=120, cwd=REPO)


def write_run(root: Path, name: str, points: list[dict]) -> Path:
    run = root / name
    (run / "points").mkdir(parents=True)
    (run / "meta.json").write_text(json.dumps({"engine": "vllm", "engine_version": "0.32.0"}))
    for p in points:
        (run / "points" / f"c{p['concurrency']:04d}.json").write_text(json.dumps(p))
    return run


def test_compare_cli(tmp_path):
    pa = b.point_from_aiperf(aiperf_export(1.0), 1, CFG, gpus=4)
    pb = b.point_from_aiperf(aiperf_export(2.0), 1, CFG, gpus=4)
    a, bb = write_run(tmp_path, "a", [pa]), write_run(tmp_path, "b", [pb])
    r = glmops("bench", "compare", str(a), str(bb))
    assert r.returncode == 0, r.stderr
    assert "300.0 -> 600.0 (+100.0%)" in r.stdout  # tok/s/GPU doubled
    r = glmops("bench", "compare", str(a), str(bb), "--json")
    row = json.loads(r.stdout)["rows"][0]
    assert row["ttft_ms_p50"]["delta"] == pytest.approx(140.25)
    (tmp_path / "empty").mkdir()
    r = glmops("bench", "compare", str(a), str(tmp_path / "empty"))
    assert r.returncode == 2 and "no points/*.json" in r.stderr


def test_bench_cli_bad_input_lists_every_problem():
    r = glmops("bench", "--endpoint", "http://127.0.0.1:9", "--model", "m", "--concurrency", "0,2", "--isl", "0",
               "--bench-host", "controller")
    assert r.returncode == 2
    assert "--concurrency: [0] not >= 1" in r.stderr and "--isl: 0 not >= 1" in r.stderr
