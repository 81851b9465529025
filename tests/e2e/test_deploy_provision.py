"""`glmops deploy` provisions and checks the Plan's hosts first, and a failed precheck on one
host stops the whole deploy before anything on any host changes (issue 5: "deploy runs
provision first unless told --skip-provision"; "no engine unit is started").

Own lab ``e2eprov2`` (three cpu-profile hosts, ``--subnet auto``) and a copy of
``inventories/lab`` (disagg: prefill lab-1, decode lab-2, router lab-3) whose lab-2 asks for
more /dev/shm than the host has and an RDMA device it lacks. Nothing is installed, so no wheel set is needed
on the hosts; the run stops after the prechecks (~20 s).

Marks: lab (root + systemd-nspawn).
"""
from __future__ import annotations

import os
import shutil
import time

import deploylab as D
import pytest
import yaml

pytestmark = [
    pytest.mark.lab,
    pytest.mark.skipif(os.geteuid() != 0, reason="the lab needs root"),
    pytest.mark.skipif(shutil.which("systemd-nspawn") is None, reason="systemd-nspawn missing"),
]

LAB = "e2eprov2"
HOSTS = ["lab-1", "lab-2", "lab-3"]


@pytest.fixture(scope="module")
def lab():
    existed = (D.LAB_ROOT / LAB / "inventory.yml").exists()
    inv = D.lab_up(LAB, 3, "auto", D.lab_binds(LAB, "lab"))
    yield inv
    if not existed and not os.environ.get("GLMOPS_KEEP_LAB"):
        D.lab_down(LAB)


def test_failed_precheck_stops_deploy_before_any_host_changes(lab, tmp_path):
    inv = D.make_inventory(lab, "lab", tmp_path / "lab", ["lab-1", "lab-2"], ["lab-3"])
    (inv / "host_vars").mkdir()
    (inv / "host_vars" / "lab-2.yml").write_text(yaml.safe_dump(
        {"prechecks_shm_min_mib": 1048576, "prechecks_rdma_devices": ["mlx5_0"]}))
    before = {h: D.ssh(lab, h, "ls /etc/systemd/system /opt/glmops 2>&1; ls /etc/glmops 2>&1").stdout
              for h in HOSTS}

    started = time.monotonic()
    proc = D.glmops("deploy", "-i", str(inv), "--topology", "disagg",
                    env={"GLMOPS_RUNS_DIR": str(tmp_path / "runs"), "COLUMNS": "400"}, timeout=600)
    seconds = time.monotonic() - started
    print(f"\ndeploy refused by the prechecks in {seconds:.1f} s")
    out = " ".join(proc.stdout.split())
    assert proc.returncode == 1, proc.stdout[-4000:] + proc.stderr[-2000:]
    # the per-host report: every failure of lab-2 at once, each naming host, found and needed
    assert "FAILED lab-2: " in out and "needed 1048576 MiB)" in out, proc.stdout[-4000:]
    assert "(found none, needed ['mlx5_0'])" in out
    assert "FAILED lab-1" not in out and "FAILED lab-3" not in out
    # the gate held on every host: no runtime install, no unit, no env file
    assert "Install each engine venv" not in proc.stdout
    assert "Place" not in proc.stdout and "Wait for readiness" not in proc.stdout
    for host in HOSTS:
        assert D.ssh(lab, host, "ls /etc/systemd/system /opt/glmops 2>&1; ls /etc/glmops 2>&1").stdout \
            == before[host], host
        assert D.ssh(lab, host, "ls /etc/systemd/system | grep -c '^glm-' || true").stdout.strip() == "0"

    # --skip-provision skips the prechecks: check mode goes on to the runtime and unit steps
    proc = D.glmops("deploy", "-i", str(inv), "--topology", "disagg", "--skip-provision", "--check",
                    env={"GLMOPS_RUNS_DIR": str(tmp_path / "runs"), "COLUMNS": "400"}, timeout=600)
    assert "glmops output prechecks" not in proc.stdout
    assert "Install each engine venv" in proc.stdout, proc.stdout[-3000:]
