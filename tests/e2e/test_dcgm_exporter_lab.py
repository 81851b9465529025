"""roles/monitoring's DCGM exporter on a b200-sim lab host, for real: NVIDIA's bare-metal archive
layout (the strict dcgm-exporter double as its binary, tests/doubles/dcgm_exporter_double.py
``build_archive``) unpacked by the role, glmops' hardened ``nvidia-dcgm-exporter.service``
(glmops.monitoring.dcgm_unit) serving the catalog's DCGM names for the sim host's eight GPUs
on the host's address only; a second run changes nothing.

Cheap (one b200-sim host, no engine, no apt): own lab ``dcgme2e`` on a free subnet. Marks ``lab``.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import urllib.request

import pytest

import deploylab as D

pytestmark = D.LAB_MARKS

LAB = "dcgme2e"
HOST = "lab-1"


@pytest.fixture(scope="module")
def lab():
    yield from D.lab_for_module(LAB, 1, "auto", [], profile="b200-sim")


def _play(lab, tmp_path, check: bool = False) -> subprocess.CompletedProcess:
    sys.path.insert(0, str(D.REPO / "tests" / "doubles"))
    from dcgm_exporter_double import build_archive

    from glmops import monitoring

    addr = lab["all"]["children"]["lab"]["hosts"][HOST]["ansible_host"]
    listen = f"{addr}:{monitoring.exporter('dcgm_exporter')['port']}"
    spec = monitoring.exporter("dcgm_exporter")
    variables = {
        "monitoring_dcgm_exporter_archive": str(build_archive(tmp_path / "archive")),
        "monitoring_dcgm_exporter_dir": monitoring.dcgm_install_dir(),
        "monitoring_dcgm_exporter_binary": f"{monitoring.dcgm_install_dir()}/{spec['binary']}",
        "monitoring_dcgm_exporter_unit_name": spec["unit"],
        "monitoring_dcgm_exporter_unit": monitoring.dcgm_unit(listen),
        "monitoring_dcgm_exporter_counters": monitoring.dcgm_counters_csv(),
        "monitoring_dcgm_exporter_counters_path": spec["counters_file"],
        "monitoring_dcgm_exporter_listen": listen,
    }
    (tmp_path / "vars.json").write_text(json.dumps(variables))
    (tmp_path / "play.yml").write_text(
        "- name: DCGM exporter\n  hosts: lab\n  gather_facts: false\n  tasks:\n"
        "    - name: Role monitoring, DCGM exporter entry point\n      ansible.builtin.include_role:\n"
        "        name: monitoring\n        tasks_from: dcgm_exporter\n")
    cmd = [str(D.REPO / ".venv/bin/ansible-playbook"), "-i", str(D.LAB_ROOT / LAB / "inventory.yml"),
           str(tmp_path / "play.yml"), "-e", f"@{tmp_path / 'vars.json'}"] + (["--check"] if check else [])
    env = {**os.environ, "ANSIBLE_ROLES_PATH": str(D.REPO / "roles"), "ANSIBLE_CONFIG": str(D.REPO / "ansible.cfg")}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path)


def _changed(out: str) -> int:
    m = re.search(rf"{HOST}\s*:.*changed=(\d+)", out)
    assert m, out[-2000:]
    return int(m.group(1))


def test_the_role_runs_the_exporter_from_nvidias_archive_on_the_hosts_address(lab, tmp_path):
    from glmops import monitoring

    proc = _play(lab, tmp_path)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert _changed(proc.stdout) > 0
    addr = lab["all"]["children"]["lab"]["hosts"][HOST]["ansible_host"]
    with urllib.request.urlopen(f"http://{addr}:9400/metrics", timeout=10) as resp:
        text = resp.read().decode()
    names = {m for m in re.findall(r"^(DCGM_[A-Z0-9_]+)\{", text, re.M)}
    assert names == monitoring.known_metrics("dcgm_exporter"), names
    # one series per simulated GPU, labelled as dcgm-exporter labels them
    assert len(re.findall(r'^DCGM_FI_DEV_XID_ERRORS\{gpu="\d",UUID="GPU-', text, re.M)) == 8
    listen = D.ssh(lab, HOST, "ss -ltnH 'sport = :9400'").stdout.split()
    assert listen[3] == f"{addr}:9400", listen
    show = D.ssh(lab, HOST, "systemctl show -p ActiveState -p NoNewPrivileges -p ProtectSystem -p ProtectHome "
                            "-p PrivateTmp nvidia-dcgm-exporter.service").stdout
    assert dict(line.split("=", 1) for line in show.split()) == {
        "ActiveState": "active", "NoNewPrivileges": "yes", "ProtectSystem": "full", "ProtectHome": "yes",
        "PrivateTmp": "yes"}, show
    exposure = D.ssh(lab, HOST, "systemd-analyze security nvidia-dcgm-exporter.service | tail -1").stdout
    print(f"\non the host: {exposure.strip()}")
    again = _play(lab, tmp_path)
    assert again.returncode == 0 and _changed(again.stdout) == 0, again.stdout[-3000:]
    check = _play(lab, tmp_path, check=True)
    assert check.returncode == 0 and _changed(check.stdout) == 0, check.stdout[-3000:]
