"""The host state that breaks serving, built on a lab host, and the prechecks naming what they
found and what is needed (issue 17 item 2; field cases F11, F28; seed 001's host memory).

Own lab ``e2eprechk`` (one ``b200-sim`` host: the strict nvidia-smi double, no GPU; ``--subnet
auto``) and a copy of ``inventories/lab-b200sim-sglang`` (two TP4 SGLang workers with the seed
001 recipe: HiCache 100 GB per TP rank). Nothing is installed and no engine runs (light:
``glmops check`` only, ~1 min after the lab is up). On the host:

* F11: the service user ``glmops`` exists and owns its HOME and the hub cache, but
  ``.locks/models--org--GLM-5.3-Flash/x.lock`` under it is root:root 0644;
* F28: the nvidia-smi double reports MIG mode Enabled on all eight GPUs;
* host memory: the lab host has far less RAM than 2 x 448 GiB (seed 001).

``glmops check --json`` fails naming each of them (host, path, owner, mode, user; the GPUs
and the needed state; the RAM found and the 896 GiB needed), all in one report; with
``prechecks_fix_writable: true`` the lock becomes the user's and the F11 failure is gone (the
others stay), and the next run fixes nothing.

Marks: lab (root + systemd-nspawn).
"""
from __future__ import annotations

import json
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

LAB = "e2eprechk"
HOME = "/var/lib/glmops/flash-b200-sglang"  # <state_dir>/<deployment>: the units' HOME (glmops/render.py)
LOCKS = f"{HOME}/.cache/huggingface/hub/.locks/models--org--GLM-5.3-Flash"
LOCK = f"{LOCKS}/x.lock"  # field case F11's path, under huggingface-hub's default cache in HOME


@pytest.fixture(scope="module")
def lab():
    yield from D.lab_for_module(LAB, 1, "auto", [], profile="b200-sim")


def _check(inv, tmp_path) -> tuple[dict, str]:
    proc = D.glmops("check", "-i", str(inv), "--json", env={"GLMOPS_RUNS_DIR": str(tmp_path / "runs")}, timeout=600)
    assert proc.stdout.strip().startswith("{"), proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(proc.stdout), proc.stderr


def test_prechecks_name_the_root_lock_mig_and_host_memory_then_the_fix(lab, tmp_path):
    build = D.ssh(lab, "lab-1", " && ".join([
        "id glmops >/dev/null 2>&1 || useradd --system --user-group --no-create-home --shell /usr/sbin/nologin glmops",
        f"mkdir -p {LOCKS}", f"chown -R glmops:glmops {HOME}", f"touch {LOCK}", f"chown root:root {LOCK}",
        f"chmod 0644 {LOCK}",
        # F28's state in the double: MIG Enabled on every GPU (its own admin command, as a copy: run as
        # `nvidia-smi` it accepts only nvidia-smi's arguments)
        "cp /usr/bin/nvidia-smi /tmp/nvidia_smi_double.py",
        "python3 /tmp/nvidia_smi_double.py --write-profile b200-sim --mig-mode Enabled --uuid-seed lab-1 "
        "/etc/nvidia-smi-double.json",
        "nvidia-smi --query-gpu=index,mig.mode.current --format=csv,noheader | sort -u | wc -l",
        "awk '/MemTotal/ {print $2}' /proc/meminfo"]))
    assert build.returncode == 0, build.stderr
    assert build.stdout.split()[-2] == "8"
    ram_gib = int(build.stdout.split()[-1]) / 2**20
    assert ram_gib < 896

    inv = D.make_inventory(lab, "lab-b200sim-sglang", tmp_path / "inv", ["lab-1"], [])
    started = time.monotonic()
    doc, err = _check(inv, tmp_path)
    print(f"\nglmops check reported in {time.monotonic() - started:.1f} s")
    rep = doc["nodes"]["lab-1"]
    assert not doc["ok"] and not rep["ok"]
    by_check = {}
    for c in rep["checks"]:
        by_check.setdefault(c["check"], []).append(c)
    # F11: the path, its owner and mode, the user that cannot write it
    [lock] = [c for c in by_check["writable"] if not c["ok"]]
    assert lock["message"].startswith(f"lab-1: the service user glmops cannot write {LOCK} "
                                      "(owner root:root, mode 0644; checked as glmops;"), lock["message"]
    # F28: the host, the GPUs and the needed state
    [mig] = by_check["gpu_state mig.mode.current"]
    assert mig["message"].startswith("lab-1: MIG mode (mig.mode.current) is Enabled on GPUs 0-7; set Disabled")
    assert mig["needed"] == "Disabled on every GPU"
    assert by_check["gpu_state persistence_mode"][0]["ok"]  # the double's default: Enabled
    # host memory (seed 001): 2 workers x (4 ranks x 100 GB HiCache + 75.5 GiB) = 896 GiB
    [mem] = by_check["host_memory"]
    assert not mem["ok"] and mem["found"] == f"{ram_gib:.1f} GiB RAM"
    assert mem["needed"].startswith("896.0 GiB (glm-flash-b200-sglang-agg-0: --hicache-size 100 GB x 4 TP ranks")
    # all of it in one report, before any engine unit exists
    assert all(m in rep["failed"] for m in (lock["message"], mig["message"], mem["message"]))
    assert D.ssh(lab, "lab-1", "ls /etc/systemd/system | grep -c '^glm-' || true").stdout.strip() == "0"

    # the opt-in fix: the lock becomes glmops', the F11 failure goes, the others stay; then nothing to fix
    gv = inv / "group_vars" / "all.yml"
    data = yaml.safe_load(gv.read_text())
    data["prechecks_fix_writable"] = True
    gv.write_text(yaml.safe_dump(data, sort_keys=False))
    doc, err = _check(inv, tmp_path)
    rep = doc["nodes"]["lab-1"]
    assert all(c["ok"] for c in rep["checks"] if c["check"] == "writable"), rep["failed"]
    assert any(m.startswith("lab-1: MIG mode") for m in rep["failed"])
    owner = D.ssh(lab, "lab-1", f"stat -c '%U:%G %a' {LOCK} {LOCKS}").stdout.split("\n")
    assert owner[0] == "glmops:glmops 664" and owner[1] == "glmops:glmops 2775", owner
    doc, err = _check(inv, tmp_path)
    assert all(c["ok"] for c in doc["nodes"]["lab-1"]["checks"] if c["check"] == "writable")
