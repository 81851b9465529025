"""The lab for real: 3 systemd-nspawn hosts (booted once for the module), reboot, a sim host,
clear errors, `lab down` leaving no trace, and the Molecule scenario on lab hosts.

Needs root and systemd-nspawn (marked ``lab``). Uses its own lab names and ``--subnet auto`` so it
can run while other labs are up.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from glmops.lab import core, hosts as H, netsetup, spec

pytestmark = [
    pytest.mark.lab,
    pytest.mark.skipif(os.geteuid() != 0, reason="the lab needs root"),
    pytest.mark.skipif(shutil.which("systemd-nspawn") is None, reason="systemd-nspawn missing"),
]

REPO = Path(__file__).resolve().parents[2]
GLMOPS = [sys.executable, "-m", "glmops.cli"]
NAME = "pytest-lab3"


def ssh(lab: spec.LabState, host: spec.HostState, *cmd: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(core.ssh_argv(lab, host, *cmd), capture_output=True, text=True, timeout=timeout)


def traces(name: str, subnet: str | None, machines: list[str]) -> list[str]:
    """Everything a lab could leave behind, as readable lines (empty: nothing)."""
    left = []
    procs = subprocess.run(["ps", "-eo", "pid=,args="], capture_output=True, text=True).stdout
    for line in procs.splitlines():
        if ("systemd-nspawn" in line and any(f"--machine={m} " in line + " " for m in machines)) or \
                f"glmops.lab.supervisor {name}" in line:
            left.append(f"process: {line.strip()}")
    left += [f"mount: {m}" for m in H.mounts_under(spec.state_dir(name))]
    left += [f"cgroup: {c}" for c in H.cgroup_dirs(name) if c.exists()]
    if netsetup.link_exists(spec.bridge_name(name)):
        left.append(f"link: {spec.bridge_name(name)}")
    if netsetup.nft_table_exists(spec.nft_table(name)):
        left.append(f"nft table: {spec.nft_table(name)}")
    if spec.state_dir(name).exists():
        left.append(f"state dir: {spec.state_dir(name)}")
    if subnet:
        left += [f"address: {a} on {d}" for d, a in netsetup.ipv4_in_use() if str(a.network) == subnet]
    users = netsetup.RUN_DIR / "users"
    if users.exists() and name in users.read_text().split():
        left.append("host settings claim (ip_forward, inotify)")
    return left


@pytest.fixture(scope="module")
def forward_before() -> tuple[str, bool]:
    """(ip_forward before our lab, whether another lab already held the host settings)."""
    users = netsetup.RUN_DIR / "users"
    return netsetup.IP_FORWARD.read_text().strip(), users.exists() and bool(users.read_text().split())


@pytest.fixture(scope="module")
def lab3(forward_before):
    core.down(NAME, log=lambda m: None)  # a leftover of an interrupted run
    lab = core.up(name=NAME, hosts=3, profile="cpu", subnet="auto", binds=[], log=lambda m: None)
    yield lab
    core.down(NAME, log=lambda m: None)


def test_three_hosts_run_systemd(lab3):
    assert [h.name for h in lab3.hosts] == ["lab-1", "lab-2", "lab-3"]
    for h in lab3.hosts:
        r = ssh(lab3, h, "systemctl", "is-system-running")
        assert r.stdout.strip() == "running", (h.name, r.stdout, r.stderr)
        r = ssh(lab3, h, "hostname")
        assert r.stdout.strip() == h.name
        r = ssh(lab3, h, "ps", "-p", "1", "-o", "comm=")
        assert r.stdout.strip() == "systemd"


def test_each_host_reaches_the_others_by_ip(lab3):
    for src in lab3.hosts:
        for dst in lab3.hosts:
            if src is dst:
                continue
            r = ssh(lab3, src, "ping", "-c1", "-W2", dst.address)
            assert r.returncode == 0, (src.name, dst.address, r.stdout, r.stderr)
            r = ssh(lab3, src, "python3", "-c",
                    f"import socket; socket.create_connection(('{dst.address}', 22), 3); print('ok')")
            assert r.stdout.strip() == "ok", (src.name, dst.address, r.stderr)


def test_host_identities_are_distinct(lab3):
    ids = {ssh(lab3, h, "cat", "/etc/machine-id").stdout.strip() for h in lab3.hosts}
    keys = {ssh(lab3, h, "cat", "/etc/ssh/ssh_host_ed25519_key.pub").stdout.split()[1] for h in lab3.hosts}
    assert len(ids) == 3 and len(keys) == 3


def test_inventory_works_with_ansible(lab3):
    inv = lab3.dir / "inventory.yml"
    r = subprocess.run([str(REPO / ".venv/bin/ansible"), "-i", str(inv), "lab", "-m", "ansible.builtin.ping", "-o"],
                       capture_output=True, text=True, timeout=120, cwd=REPO)
    assert r.returncode == 0, r.stdout + r.stderr
    assert sorted(line.split()[0] for line in r.stdout.splitlines() if "SUCCESS" in line) == ["lab-1", "lab-2", "lab-3"]


def test_status_json_reports_hosts_up(lab3):
    r = subprocess.run([*GLMOPS, "lab", "status", "--name", NAME, "--json"], capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 0, r.stderr
    (st,) = json.loads(r.stdout)
    assert st["subnet"] == lab3.subnet and st["supervisor_alive"]
    assert [(h["name"], h["address"], h["up"]) for h in st["hosts"]] == \
        [(h.name, h.address, True) for h in lab3.hosts]


def test_reboot_comes_back_running(lab3):
    h = lab3.hosts[2]
    boot_before = ssh(lab3, h, "cat", "/proc/sys/kernel/random/boot_id").stdout.strip()
    machine_id = ssh(lab3, h, "cat", "/etc/machine-id").stdout
    pidfile = Path(h.dir) / "nspawn.pid"
    pid_before = pidfile.read_text()
    ssh(lab3, h, "systemctl", "reboot")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and (not pidfile.exists() or pidfile.read_text() == pid_before):
        time.sleep(0.1)
    assert pidfile.read_text() != pid_before, "the supervisor did not boot the host again"
    core._wait_ready(spec.LabState(**{**lab3.__dict__, "hosts": [h]}), lambda m: None, 60)
    assert ssh(lab3, h, "systemctl", "is-system-running").stdout.strip() == "running"
    assert ssh(lab3, h, "cat", "/proc/sys/kernel/random/boot_id").stdout.strip() != boot_before
    assert ssh(lab3, h, "cat", "/etc/machine-id").stdout == machine_id  # same host, new boot


def test_second_lab_with_same_name_is_refused(lab3):
    r = subprocess.run([*GLMOPS, "lab", "up", "--name", NAME, "--hosts", "1", "--subnet", "auto"],
                       capture_output=True, text=True, cwd=REPO, timeout=120)
    assert r.returncode == 2
    assert f"a lab named '{NAME}' already exists" in r.stderr
    assert f"glmops lab down --name {NAME}" in r.stderr
    # and the running lab was not disturbed
    assert ssh(lab3, lab3.hosts[0], "systemctl", "is-system-running").stdout.strip() == "running"


def test_bridge_address_in_use_is_refused(lab3):
    _, problems = core.preflight("pytest-other", 1, "cpu", lab3.subnet, [])
    (p,) = [p for p in problems if "--subnet" in p]
    assert "already in use" in p and lab3.bridge in p and "--subnet auto" in p


def test_lab_down_leaves_no_trace(lab3, forward_before):
    machines = [h.machine for h in lab3.hosts]
    assert traces(NAME, lab3.subnet, machines)  # sanity: the detector sees the running lab
    veths = [link["ifname"] for link in json.loads(subprocess.run(
        ["ip", "-j", "link", "show", "master", lab3.bridge], capture_output=True, text=True, check=True).stdout)]
    assert len(veths) == 3  # one host-side veth per host on the lab bridge
    assert core.down(NAME, log=lambda m: None) is True
    assert traces(NAME, lab3.subnet, machines) == []
    assert [v for v in veths if netsetup.link_exists(v)] == []
    before, others_held = forward_before
    users = netsetup.RUN_DIR / "users"
    if not others_held and not (users.exists() and users.read_text().split()):
        assert netsetup.IP_FORWARD.read_text().strip() == before
    assert core.down(NAME, log=lambda m: None) is False  # idempotent


def test_failed_network_setup_is_cleaned_up(monkeypatch):
    name = "pytest-netfail"
    core.down(name, log=lambda m: None)

    def broken_nat(*_a):
        raise netsetup.NetError("nft: simulated failure")

    monkeypatch.setattr(netsetup, "nat_up", broken_nat)
    with pytest.raises(core.LabError, match="network setup failed: nft: simulated failure") as exc:
        core.up(name=name, hosts=1, subnet="auto", binds=[], log=lambda m: None)
    assert exc.value.exit_code == 1
    assert traces(name, None, [f"{name}-lab-1"]) == []


def test_boot_timeout_is_reported_and_cleaned_up():
    name = "pytest-boottimeout"
    core.down(name, log=lambda m: None)
    with pytest.raises(core.LabError, match=r"lab-1 \(10\.77\.\d+\.11\) did not come up: timeout") as exc:
        core.up(name=name, hosts=1, subnet="auto", binds=[], log=lambda m: None, boot_timeout=0.2)
    assert "console tail" in str(exc.value)
    assert traces(name, None, [f"{name}-lab-1"]) == []


def test_sim_profile_host_has_strict_nvidia_smi():
    from glmops.lab import profiles

    if not profiles.nvsmi_double_path().is_file():
        pytest.skip("nvidia-smi double absent")
    name = "pytest-sim"
    core.down(name, log=lambda m: None)
    lab = core.up(name=name, hosts=1, profile="h200-sim", subnet="auto", binds=[], log=lambda m: None)
    try:
        h = lab.hosts[0]
        r = ssh(lab, h, "nvidia-smi", "--query-gpu=index,name,memory.total", "--format=csv,noheader")
        assert r.returncode == 0, r.stderr
        rows = r.stdout.strip().splitlines()
        assert len(rows) == 8 and rows[0] == "0, NVIDIA H200, 143771 MiB"
        r = ssh(lab, h, "nvidia-smi", "--no-such-flag")
        assert r.returncode != 0 and "--no-such-flag" in r.stdout + r.stderr
        inv = (lab.dir / "inventory.yml").read_text()
        assert "glmops_hardware: h200" in inv
    finally:
        core.down(name, log=lambda m: None)
    assert traces(name, None, [f"{name}-lab-1"]) == []

