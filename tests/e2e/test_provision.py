"""Provisioning for real on one b200-sim lab host (booted once for the module), from the signed
stand-in apt repos (tests/doubles/aptrepo) bound read-only into the host.

Sequence (the tests depend on order, like the lifecycle they rehearse):
bare host -> `glmops provision` -> second run changed=0 -> every host fault refused by
`glmops check --json` naming host, found and needed -> a fabric manager out of step with the
driver refused and no engine unit started -> provision repairs the lockstep -> a branch below 575
refused -> a branch change refused without --upgrade-driver -> upgrade to 580 with a reboot.

Needs root and systemd-nspawn (marked ``lab``); uses its own lab name and ``--subnet auto``.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from glmops import runner
from glmops.lab import core, spec

pytestmark = [
    pytest.mark.lab,
    pytest.mark.skipif(os.geteuid() != 0, reason="the lab needs root"),
    pytest.mark.skipif(shutil.which("systemd-nspawn") is None, reason="systemd-nspawn missing"),
]

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "doubles" / "aptrepo"))
import build as aptrepo  # noqa: E402

NAME = "pytest-prov"
MOUNT = "/opt/glmops/test-aptrepo"
GLMOPS = [sys.executable, "-m", "glmops.cli"]
DRIVER = aptrepo.DRIVERS["575"]
PACKAGES = ["nvidia-driver-575", "nvidia-persistenced", "nvidia-fabricmanager-575", "nvlsm"]


def lab_vars(repo: dict) -> dict:
    """Point the roles at the stand-in repos. The lab's own limits: every service on these hosts
    gets the controller's 8 MiB memlock hard limit (no CAP_SYS_RESOURCE here, FINDINGS), and the
    controller clock is not NTP-synchronised: the good-host runs accept both, the refusal test
    runs with the defaults."""
    key = repo["keyring"]
    return {
        "nvidia_driver_repo_url": f"file://{MOUNT}/cuda/",
        "nvidia_driver_repo_key_src": key,
        "container_toolkit_repo_url": f"file://{MOUNT}/container-toolkit/",
        "container_toolkit_repo_key_src": key,
        "container_toolkit_docker_repo_url": f"file://{MOUNT}/docker/",
        "container_toolkit_docker_repo_key_src": key,
        "container_toolkit_docker_packages": ["docker-ce"],
        "prechecks_memlock": 8388608,
        "prechecks_time_sync": "warn",
    }


class Lab:
    def __init__(self, lab: spec.LabState, repo: dict, tmp: Path):
        self.lab, self.repo, self.tmp = lab, repo, tmp
        self.host = lab.hosts[0]
        self.base = yaml.safe_load((lab.dir / "inventory.yml").read_text())

    def inventory(self, name: str, **extra) -> str:
        """An inventory file: the lab's hosts + the test vars + ``extra`` (None drops a var)."""
        inv = json.loads(json.dumps(self.base))
        allvars = inv["all"].setdefault("vars", {})
        allvars.update(lab_vars(self.repo))
        for k, v in extra.items():
            if v is None:
                allvars.pop(k, None)
            else:
                allvars[k] = v
        path = self.tmp / f"{name}.yml"
        path.write_text(yaml.safe_dump(inv))
        return str(path)

    def ssh(self, script: str, check: bool = True) -> subprocess.CompletedProcess:
        r = subprocess.run(core.ssh_argv(self.lab, self.host, "sh", "-c", script),
                           capture_output=True, text=True, timeout=120)
        if check:
            assert r.returncode == 0, (script, r.stdout, r.stderr)
        return r

    def glmops(self, *args: str, timeout: float = 900) -> subprocess.CompletedProcess:
        env = dict(os.environ, GLMOPS_RUNS_DIR=str(self.tmp / "runs"), COLUMNS="400")
        r = subprocess.run([*GLMOPS, *args], capture_output=True, text=True, timeout=timeout,
                           cwd=REPO, env=env)
        r.flat = " ".join(r.stdout.split())  # the console wraps long lines
        return r

    def check_json(self, inventory: str) -> tuple[int, dict]:
        r = self.glmops("check", "-i", inventory, "--json", timeout=300)
        return r.returncode, json.loads(r.stdout)


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    repo = aptrepo.build()
    core.down(NAME, log=lambda m: None)
    state = core.up(name=NAME, hosts=1, profile="b200-sim", subnet="auto",
                    binds=[spec.Bind(repo["dir"], MOUNT)], log=lambda m: None)
    try:
        yield Lab(state, repo, tmp_path_factory.mktemp("prov"))
    finally:
        core.down(NAME, log=lambda m: None)


def test_bare_host_ends_provisioned_and_second_run_changes_nothing(lab):
    assert lab.ssh("dpkg-query -W 'nvidia-*' 2>/dev/null || true").stdout.strip() == ""
    inv = lab.inventory("good")
    # check mode on the bare host: shows what would change, changes nothing
    r = lab.glmops("provision", "-i", inv, "--check", "--diff")
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert "+Signed-By: /etc/apt/keyrings/glmops-nvidia-cuda.gpg" in r.stdout  # the --diff of the sources file
    assert lab.ssh("dpkg-query -W 'nvidia-*' 2>/dev/null || true").stdout.strip() == ""
    assert "glmops-" not in lab.ssh("ls /etc/apt/sources.list.d /etc/apt/keyrings").stdout

    r = lab.glmops("provision", "-i", inv)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]

    versions = dict(line.split() for line in lab.ssh(
        "dpkg-query -W -f '${Package} ${Version}\\n' " + " ".join(PACKAGES)).stdout.splitlines())
    assert versions == {p: f"{DRIVER}-1" for p in PACKAGES}
    assert sorted(lab.ssh("apt-mark showhold").stdout.split()) == sorted(PACKAGES)
    for unit in ("nvidia-persistenced", "nvidia-fabricmanager", "docker"):
        assert lab.ssh(f"systemctl is-enabled {unit}; systemctl is-active {unit}").stdout.split() == \
            ["enabled", "active"], unit
    smi = lab.ssh("nvidia-smi --query-gpu=name,driver_version --format=csv,noheader").stdout.splitlines()
    assert smi == [f"NVIDIA B200, {DRIVER}"] * 8
    fabric = lab.ssh("nvidia-smi -q -d FABRIC | grep 'State '").stdout.split("\n")
    assert [ln.split(":")[1].strip() for ln in fabric if ln] == ["Completed"] * 8
    runtimes = json.loads(lab.ssh("docker info --format '{{json .Runtimes}}'").stdout)
    assert runtimes["nvidia"]["path"] == "nvidia-container-runtime"
    cdi = lab.ssh("cat /etc/cdi/nvidia.yaml").stdout
    assert 'kind: "nvidia.com/gpu"' in cdi and cdi.count('- name: "GPU-') == 8
    pin = lab.ssh("apt-cache policy nvidia-fabricmanager-575").stdout
    assert f"Candidate: {DRIVER}-1" in pin and "1001" in pin  # the pin at the driver's version

    second = runner.run("provision", "provision.yml", inv, {}, quiet=True)
    assert second.ok, second.failures
    assert second.changed == 0, {h: s.last_task for h, s in second.hosts.items()}
    dry = lab.glmops("provision", "-i", inv, "--check")
    assert dry.returncode == 0 and "changed: 0 " in dry.flat


def test_check_json_good_host(lab):
    rc, doc = lab.check_json(lab.inventory("good"))
    assert rc == 0 and doc["ok"], doc
    checks = {c["check"]: c for c in doc["nodes"]["lab-1"]["checks"]}
    assert checks["driver"]["found"] == DRIVER and checks["driver"]["needed"] == ">= 575"
    assert checks["fabricmanager_version"]["ok"] and checks["fabric_state"]["found"] == "Completed"
    assert checks["gpu_count"]["found"] == 8


def test_every_fault_refused_together_with_host_found_needed(lab):
    cfg = "/etc/nvidia-smi-double.json"
    shm = lab.ssh("df -m --output=size /dev/shm | tail -n 1").stdout.strip()
    lab.ssh(f"cp {cfg} /root/smi.json.bak && python3 - <<'EOF'\n"
            "import json\n"
            f"c = json.load(open('{cfg}'))\n"
            "c['gpus'] = c['gpus'][:7]\n"
            "c['driver_version'] = '570.172.08'\n"
            f"json.dump(c, open('{cfg}', 'w'))\n"
            "EOF\n"
            "mount -o remount,size=64m /dev/shm")
    try:
        inv = lab.inventory("faults", prechecks_memlock=None, prechecks_disk_path="/var/lib/glmops-models",
                            prechecks_disk_gib=1000000)
        rc, doc = lab.check_json(inv)
    finally:
        lab.ssh(f"cp /root/smi.json.bak {cfg} && mount -o remount,size={shm}m /dev/shm")
    assert rc == 1 and not doc["ok"]
    failed = "\n".join(doc["nodes"]["lab-1"]["failed"])
    by_check = {c["check"]: c for c in doc["nodes"]["lab-1"]["checks"] if not c["ok"]}
    assert by_check["gpu_count"]["found"] == 7 and by_check["gpu_count"]["needed"] == 8
    assert by_check["driver"]["found"] == "570.172.08" and by_check["driver"]["needed"] == ">= 575"
    assert by_check["shm"]["found"] == "64 MiB" and by_check["shm"]["needed"] == "1024 MiB"
    assert by_check["memlock"]["found"] == "8388608 bytes" and by_check["memlock"]["needed"] == "infinity"
    assert by_check["disk"]["needed"] == "1000000.0 GiB" and "GiB free under /" in by_check["disk"]["found"]
    for line in ("lab-1: wrong GPU count (found 7, needed 8)",
                 "lab-1: NVIDIA driver 570.172.08 is below the minimum branch 575 (found 570.172.08, needed >= 575)",
                 "(found 64 MiB, needed 1024 MiB)",
                 "(found 8388608 bytes, needed infinity)",
                 "needed 1000000.0 GiB)"):
        assert line in failed, failed
    # every failure line names the host
    assert all(m.startswith("lab-1: ") for m in doc["nodes"]["lab-1"]["failed"])


def test_fabric_manager_out_of_step_refused_and_no_engine_unit(lab):
    lab.ssh("apt-mark unhold nvidia-fabricmanager-575 >/dev/null && DEBIAN_FRONTEND=noninteractive "
            "apt-get install -y -q --allow-downgrades nvidia-fabricmanager-575=575.51.03-1 >/dev/null 2>&1 && "
            "(systemctl restart nvidia-fabricmanager || true)")
    inv = lab.inventory("good")
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"))
    r = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", inv,
                        str(REPO / "tests/e2e/provision/gate.yml")],
                       capture_output=True, text=True, timeout=300, cwd=REPO, env=env)
    assert r.returncode != 0
    assert "fabric manager 575.51.03 differs from driver 575.57.08" in r.stdout, r.stdout[-3000:]
    assert "found nvidia-fabricmanager-575 575.51.03, needed driver 575.57.08" in r.stdout
    assert "Place and start the unit" not in r.stdout
    assert lab.ssh("test -e /etc/systemd/system/glm-gate-agg-0.service", check=False).returncode == 1
    assert lab.ssh("systemctl is-active glm-gate-agg-0.service", check=False).stdout.strip() == "inactive"


def test_provision_restores_the_lockstep(lab):
    r = lab.glmops("provision", "-i", lab.inventory("good"))
    assert r.returncode == 0, r.stdout[-4000:]
    assert lab.ssh("dpkg-query -W -f '${Version}' nvidia-fabricmanager-575").stdout == f"{DRIVER}-1"
    assert "nvidia-fabricmanager-575" in lab.ssh("apt-mark showhold").stdout.split()
    assert lab.ssh("systemctl is-active nvidia-fabricmanager").stdout.strip() == "active"


def test_branch_below_minimum_refused_before_any_change(lab):
    before = lab.ssh("dpkg-query -W -f '${Package} ${Version}\\n' 'nvidia-*' nvlsm").stdout
    r = lab.glmops("provision", "-i", lab.inventory("b570", nvidia_driver_branch="570",
                                                    nvidia_driver_version="570.172.08"))
    assert r.returncode == 1
    assert "lab-1: nvidia_driver_branch 570 is below the minimum branch 575" in r.flat
    assert "found 570, needed >= 575" in r.flat
    assert lab.ssh("dpkg-query -W -f '${Package} ${Version}\\n' 'nvidia-*' nvlsm").stdout == before


def test_branch_upgrade_only_when_asked_then_together_with_reboot(lab):
    inv = lab.inventory("b580", nvidia_driver_branch="580", nvidia_driver_version=aptrepo.DRIVERS["580"])
    r = lab.glmops("provision", "-i", inv)
    assert r.returncode == 1
    assert "installed nvidia-driver-575 575.57.08, requested nvidia-driver-580 580.95.05" in r.flat
    lab.ssh("touch /run/glmops-test-before-upgrade")
    r = lab.glmops("provision", "-i", inv, "--upgrade-driver")
    assert r.returncode == 0, r.stdout[-5000:]
    new = aptrepo.DRIVERS["580"]
    pkgs = ["nvidia-driver-580", "nvidia-persistenced", "nvidia-fabricmanager-580", "nvlsm"]
    versions = dict(line.split() for line in lab.ssh(
        "dpkg-query -W -f '${Package} ${Version} ${db:Status-Abbrev}\\n' 'nvidia-*' nvlsm "
        "| awk '$3 ~ /^.i/ {print $1, $2}'").stdout.splitlines())
    assert versions == {p: f"{new}-1" for p in pkgs} | {"nvidia-container-toolkit": f"{aptrepo.CTK_VERSION}-1"}
    assert sorted(lab.ssh("apt-mark showhold").stdout.split()) == sorted(pkgs)
    # the host rebooted into the new module: nvidia-smi reports it, fabric manager runs
    assert lab.ssh("nvidia-smi --query-gpu=driver_version --format=csv,noheader | sort -u").stdout.strip() == new
    assert lab.ssh("systemctl is-active nvidia-fabricmanager").stdout.strip() == "active"
    assert lab.ssh("test -e /run/glmops-test-before-upgrade", check=False).returncode == 1  # /run is new: rebooted
    assert "REBOOT NEEDED" not in r.flat
