"""glmops.prechecks: needs from the catalog and the Plan, and every check against host facts."""
from __future__ import annotations

import copy

import pytest

from glmops import prechecks
from glmops.inventory import load_deployment
from glmops.plan import build

from inventory_factory import vllm_b200_disagg, write_inventory

HOST = "gpu-a"
#: what nvidia-smi --query-gpu prints for a GPU ready to serve (catalog prechecks.yaml gpu_state, F28)
HEALTHY_GPU_STATE = {"mig.mode.current": "Disabled", "mig.mode.pending": "Disabled",
                     "persistence_mode": "Enabled", "compute_mode": "Default"}


def good_facts(**over) -> dict:
    """Facts of a healthy 8x B200 host on driver 575.57.08 (what glmops_precheck_facts returns)."""
    facts = {
        "os": {"id": "ubuntu", "version_id": "24.04", "pretty_name": "Ubuntu 24.04.3 LTS"},
        "gpu": {"gpus": [{"index": i, "name": "NVIDIA B200"} for i in range(8)], "driver_version": "575.57.08",
                "state": {str(i): dict(HEALTHY_GPU_STATE) for i in range(8)}},
        "fabric": {"states": ["Completed"] * 8},
        "packages": {"nvidia-driver-575": "575.57.08-1", "nvidia-fabricmanager-575": "575.57.08-1",
                     "nvlsm": "575.57.08-1", "nvidia-persistenced": "575.57.08-1"},
        "services": {"nvidia-fabricmanager": "active"},
        "disk": {"path": "/models", "free_bytes": 2000 * 2**30, "checkpoint_present": False},
        "shm": {"size_bytes": 256 * 2**30},
        "memlock": {"value": "infinity"},
        "listening": [{"address": "0.0.0.0:22", "port": 22, "process": "sshd (pid 1)", "unit": "ssh.service"}],
        "time": {"synchronized": True, "source": "chrony"},
        "rdma_devices": ["mlx5_0", "mlx5_1"],
    }
    facts.update(over)
    return facts


def b200_needs(**over) -> dict:
    needs = prechecks.needs_from_catalog("b200", list(range(8)))
    needs.update(disk_path="/models", disk_gib=700.0, ports={8001: "prefill http", 8002: "decode http"},
                 own_units="glm-demo-*.service", rdma_devices=["mlx5_0"])
    needs.update(over)
    return needs


def failures(facts, needs) -> dict[str, dict]:
    return {r["check"]: r for r in prechecks.evaluate(HOST, facts, needs) if not r["ok"]}


def test_catalog_needs_for_b200():
    needs = prechecks.needs_from_catalog("b200", [0, 1, 2, 3])
    assert needs["gpu_count"] == 8 and needs["gpu_name"] == "B200" and needs["gpu_vendor"] == "nvidia"
    assert needs["driver_min"] == 575  # catalog engines.trtllm.driver_min (seed 000)
    assert needs["nvswitch"] is True and needs["nvlsm"] is True
    assert needs["gpu_indices"] == [0, 1, 2, 3]


def test_catalog_needs_hopper_has_no_nvlsm_and_cpu_has_no_gpu_checks():
    assert prechecks.needs_from_catalog("h200")["nvlsm"] is False
    assert prechecks.needs_from_catalog("h200")["nvswitch"] is True
    cpu = prechecks.needs_from_catalog("cpu")
    assert cpu["gpu_vendor"] == "none" and "gpu_count" not in cpu and "driver_min" not in cpu


def test_unknown_hardware_names_the_accepted_keys():
    with pytest.raises(LookupError) as exc:
        prechecks.needs_from_catalog("b999")
    assert "b999" in str(exc.value) and "b200" in str(exc.value)


def test_healthy_host_passes_every_check():
    results = prechecks.evaluate(HOST, good_facts(), b200_needs())
    assert [r for r in results if not r["ok"]] == []
    assert {r["check"] for r in results} >= {
        "os", "gpu_count", "gpu_indices", "gpu_model", "driver", "driver_loaded", "fabricmanager_version",
        "fabricmanager_active", "fabric_state", "nvlsm_version", "disk", "shm", "memlock", "ports",
        "time_sync", "rdma_devices"}
    assert prechecks.report(HOST, results)["ok"] is True


def test_every_failure_is_reported_together_with_host_found_needed():
    facts = good_facts(
        os={"id": "centos", "version_id": "9"},
        gpu={"gpus": [{"index": i, "name": "NVIDIA B200"} for i in range(7)], "driver_version": "570.172.08"},
        disk={"path": "/models", "free_bytes": 400 * 2**30, "checkpoint_present": False},
        shm={"size_bytes": 64 * 2**20},
        memlock={"value": 8388608},
        rdma_devices=[],
    )
    bad = failures(facts, b200_needs())
    assert bad["os"]["message"] == ("gpu-a: unsupported operating system "
                                    "(found centos 9, needed ubuntu 22.04 | ubuntu 24.04 | debian 12)")
    assert bad["gpu_count"]["message"] == "gpu-a: wrong GPU count (found 7, needed 8)"
    assert bad["gpu_indices"]["message"].startswith("gpu-a: glmops_gpus names GPUs [7]")
    assert bad["driver"]["message"] == ("gpu-a: NVIDIA driver 570.172.08 is below the minimum branch 575 "
                                        "(found 570.172.08, needed >= 575)")
    assert bad["disk"]["message"] == ("gpu-a: too little disk for the checkpoint under /models "
                                      "(found 400.0 GiB free under /models, needed 700.0 GiB)")
    assert bad["shm"]["message"] == "gpu-a: /dev/shm is smaller than the floor for NCCL (F08) (found 64 MiB, needed 1024 MiB)"
    assert bad["memlock"]["message"] == ("gpu-a: a systemd service gets a locked-memory limit too low for RDMA "
                                         "(F07) (found 8388608 bytes, needed infinity)")
    assert "mlx5_0" in bad["rdma_devices"]["message"] and bad["rdma_devices"]["found"] == "none"
    report = prechecks.report(HOST, prechecks.evaluate(HOST, facts, b200_needs()))
    assert report["ok"] is False and len(report["failed"]) >= 8
    assert all(line.startswith("gpu-a: ") for line in report["failed"])


def test_fabric_manager_of_another_version_names_both():
    facts = good_facts(packages={**good_facts()["packages"], "nvidia-fabricmanager-575": "575.51.03-1"},
                       services={"nvidia-fabricmanager": "failed"}, fabric={"states": ["In Progress"] * 8})
    bad = failures(facts, b200_needs())
    assert bad["fabricmanager_version"]["message"] == (
        "gpu-a: fabric manager 575.51.03 differs from driver 575.57.08; they must be the same version "
        "(found nvidia-fabricmanager-575 575.51.03, needed driver 575.57.08)")
    assert bad["fabricmanager_active"]["found"] == "failed"
    assert bad["fabric_state"]["found"] == "In Progress" and bad["fabric_state"]["needed"] == "Completed"


def test_missing_fabric_manager_and_nvlsm_on_blackwell():
    pk = {"nvidia-driver-575": "575.57.08-1"}
    bad = failures(good_facts(packages=pk), b200_needs())
    assert bad["fabricmanager_version"]["found"] == "not installed"
    assert bad["nvlsm_version"]["found"] == "not installed"
    # Hopper NVSwitch: fabric manager yes, nvlsm not needed
    bad = failures(good_facts(packages=pk, gpu={"gpus": [{"index": i, "name": "NVIDIA H200"} for i in range(8)],
                                                "driver_version": "575.57.08"}),
                   {**prechecks.needs_from_catalog("h200")})
    assert "nvlsm_version" not in bad and "fabricmanager_version" in bad


def test_reboot_pending_when_running_driver_differs_from_installed():
    facts = good_facts(packages={**good_facts()["packages"], "nvidia-driver-575": "575.57.08-1"},
                       gpu={"gpus": good_facts()["gpu"]["gpus"], "driver_version": "575.51.03"})
    bad = failures(facts, b200_needs())
    assert "reboot pending" in bad["driver_loaded"]["message"]
    assert bad["driver_loaded"]["found"] == "575.51.03" and bad["driver_loaded"]["needed"] == "575.57.08"


def test_gpu_model_is_matched_as_a_word():
    gb = good_facts(gpu={"gpus": [{"index": i, "name": "NVIDIA GB200"} for i in range(8)],
                         "driver_version": "575.57.08"})
    bad = failures(gb, b200_needs())
    assert bad["gpu_model"]["found"] == "NVIDIA GB200" and bad["gpu_model"]["needed"] == "B200"
    b300 = good_facts(gpu={"gpus": [{"index": i, "name": "NVIDIA B300 SXM6 AC"} for i in range(8)],
                           "driver_version": "580.95.05"})
    assert "gpu_model" not in failures(b300, b200_needs(gpu_name="B300"))


def test_nvidia_smi_failure_is_reported_not_raised():
    facts = good_facts(gpu={"error": "rc 9: NVIDIA-SMI has failed", "gpus": []})
    bad = failures(facts, b200_needs())
    assert "nvidia-smi failed: rc 9" in bad["gpu_count"]["message"]


def test_ports_in_use_by_others_fail_but_own_units_do_not():
    listening = [
        {"port": 8001, "process": "python3 (pid 7) [glm-demo-prefill-0.service]", "unit": "glm-demo-prefill-0.service"},
        {"port": 8002, "process": "nginx (pid 9) [nginx.service]", "unit": "nginx.service"},
    ]
    bad = failures(good_facts(listening=listening), b200_needs())
    assert bad["ports"]["message"] == ("gpu-a: port 8002 is already listening (F05) "
                                       "(found port 8002 in use by nginx (pid 9) [nginx.service], "
                                       "needed port 8002 free for decode http)")
    assert "8001" not in bad["ports"]["message"]


def test_checkpoint_already_present_needs_no_disk():
    facts = good_facts(disk={"path": "/models", "free_bytes": 10 * 2**30, "checkpoint_present": True})
    assert "disk" not in failures(facts, b200_needs())


def test_memlock_floor_in_bytes():
    assert "memlock" not in failures(good_facts(memlock={"value": 8388608}), b200_needs(memlock=8388608))
    bad = failures(good_facts(memlock={"value": 65536}), b200_needs(memlock=8388608))
    assert bad["memlock"]["found"] == "65536 bytes" and bad["memlock"]["needed"] == 8388608
    bad = failures(good_facts(memlock={"error": "systemd-run rc 1: Failed to start transient service"}), b200_needs())
    assert "cannot read" in bad["memlock"]["message"]


def test_time_sync_warn_does_not_fail_the_report():
    facts = good_facts(time={"synchronized": False, "source": ""})
    results = prechecks.evaluate(HOST, facts, b200_needs(time_sync="warn"))
    report = prechecks.report(HOST, results)
    assert report["ok"] is True and report["warnings"] == [
        "gpu-a: the clock is not NTP-synchronized (found not synchronized, needed synchronized)"]
    assert prechecks.report(HOST, prechecks.evaluate(HOST, facts, b200_needs()))["ok"] is False


def test_needs_for_deployment_carries_plan_ports_checkpoint_and_rdma(tmp_path):
    gv = vllm_b200_disagg()
    inv = write_inventory(tmp_path / "inv", gv, hosts={HOST: {"ansible_host": "10.0.0.11",
                                                              "glmops_rdma_devices": ["mlx5_0"]}})
    dep = load_deployment(inv)
    plan = build(dep)
    needs = prechecks.needs_for_deployment(dep, plan)[HOST]
    assert needs["disk_path"] == dep.checkpoint.model_dir
    assert needs["disk_gib"] == pytest.approx(dep.checkpoint.size_gib) and needs["disk_gib"] > 0
    svc_ports = {p for s in plan.on_host(HOST) for v in s.ports.values() for p in (v if isinstance(v, list) else [v])}
    assert {8001, 8002} <= set(needs["ports"]) and svc_ports <= set(needs["ports"])
    assert needs["own_units"] == f"glm-{dep.name}-*.service"
    assert needs["rdma_devices"] == ["mlx5_0"]
    # vLLM 0.29.0's default wheel is a CUDA 13 build: R580 (F30; vllm-project/vllm#39878, catalog engines.vllm.builds)
    assert needs["driver_min"] == 580 and needs["gpu_count"] == 8


def test_evaluate_does_not_mutate_inputs():
    facts, needs = good_facts(), b200_needs()
    before = copy.deepcopy((facts, needs))
    prechecks.evaluate(HOST, facts, needs)
    assert (facts, needs) == before
