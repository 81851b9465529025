"""Tests for the strict nvidia-smi double (run as a program named ``nvidia-smi``)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
DOUBLE = HERE / "nvidia_smi_double.py"


@pytest.fixture
def smi(tmp_path):
    """Return run(args, profile=..., **profile_kwargs) -> CompletedProcess of `nvidia-smi args`."""
    binary = tmp_path / "bin" / "nvidia-smi"
    binary.parent.mkdir()
    binary.symlink_to(DOUBLE)
    cfg = tmp_path / "smi.json"

    def run(args, profile="b200-sim", extra=(), config=None):
        if config is not None:
            cfg.write_text(json.dumps(config))
        elif profile:
            subprocess.run([sys.executable, str(DOUBLE), "--write-profile", profile,
                            "--uuid-seed", "t", *extra, str(cfg)], check=True)
        env = dict(os.environ, NVIDIA_SMI_DOUBLE_CONFIG=str(cfg))
        return subprocess.run([str(binary), *args], capture_output=True, text=True, env=env,
                              timeout=20)
    run.cfg = cfg
    return run


def test_query_gpu_csv_b200(smi):
    r = smi(["--query-gpu=index,name,memory.total,driver_version,uuid,pci.bus_id",
             "--format=csv"], extra=["--driver", "575.57.08"])
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "index, name, memory.total [MiB], driver_version, uuid, pci.bus_id"
    assert len(lines) == 9
    idx, name, mem, drv, uuid, bus = lines[1].split(", ")
    assert (idx, name, mem, drv) == ("0", "NVIDIA B200", "183359 MiB", "575.57.08")
    assert uuid.startswith("GPU-") and bus == "00000000:18:00.0"
    uuids = {ln.split(", ")[4] for ln in lines[1:]}
    assert len(uuids) == 8


def test_noheader_nounits_and_id_selection_h200(smi):
    r = smi(["--query-gpu=name,memory.total", "--format=csv,noheader,nounits", "-i", "3"],
            profile="h200-sim")
    assert r.returncode == 0, r.stderr
    assert r.stdout == "NVIDIA H200, 143771\n"


def test_list_gpus_and_version(smi):
    r = smi(["-L"])
    assert r.returncode == 0
    assert len(r.stdout.splitlines()) == 8
    assert r.stdout.startswith("GPU 0: NVIDIA B200 (UUID: GPU-")
    v = smi(["--version"], profile=None)
    assert "DRIVER version      : 575.57.08" in v.stdout
    assert "CUDA Version        : 12.9" in v.stdout
    banner = smi([], profile=None)
    assert "Driver Version: 575.57.08" in banner.stdout and "CUDA Version: 12.9" in banner.stdout


def test_fabric_section_states(smi):
    r = smi(["-q", "-d", "FABRIC", "-i", "0"])
    assert r.returncode == 0, r.stderr
    text = r.stdout
    assert "    Fabric\n" in text
    assert [ln.split(":", 1)[1].strip() for ln in text.splitlines()
            if ln.strip().startswith(("State", "Status"))] == ["Completed", "Success"]
    assert "Product Name" not in text  # -d limits the sections
    r = smi(["-q"], extra=["--fabric-state", "In Progress"])
    states = [ln.split(":", 1)[1].strip() for ln in r.stdout.splitlines()
              if ln.strip().startswith("State ")]
    assert states == ["In Progress"] * 8
    assert "Status                          : N/A" in r.stdout
    assert "Product Name                        : NVIDIA B200" in r.stdout


def test_display_fabric_rejected_like_580_drivers(smi):
    r = smi(["-q", "-d", "FABRIC"], extra=["--no-display-fabric"])
    assert r.returncode == 2
    assert "Invalid combination of input arguments" in r.stderr
    full = smi(["-q"], profile=None)
    assert "State                           : Completed" in full.stdout


@pytest.mark.parametrize("args,code,needle", [
    (["--bogus"], 2, "unknown argument '--bogus'"),
    (["topo", "-m"], 2, "unsupported argument 'topo'"),
    (["nvlink", "--status"], 2, "unsupported argument 'nvlink'"),
    (["-q", "-d", "CLOCK"], 2, "unsupported argument '-d CLOCK'"),
    (["--query-gpu=name,fan.speed", "--format=csv"], 2, 'Field "fan.speed" is not a valid field'),
    (["--query-gpu=name"], 2, "--format is required"),
    (["--query-gpu=name", "--format=json"], 2, "is not a valid format"),
    (["-L", "-i", "8"], 6, "No devices were found"),
    (["--write-profile", "b200-sim", "/tmp/x"], 2, "unknown argument '--write-profile'"),
])
def test_unimplemented_or_invalid_fails_loudly(smi, args, code, needle):
    r = smi(args)
    assert r.returncode == code
    assert needle in r.stderr
    assert r.stdout == ""


def test_missing_config_is_driver_not_loaded(smi, tmp_path):
    smi.cfg.unlink(missing_ok=True)
    r = smi(["-L"], profile=None)
    assert r.returncode == 9
    assert "couldn't communicate with the NVIDIA driver" in r.stderr


def test_config_unknown_keys_all_reported(smi):
    r = smi(["-L"], config={"driver_version": "575.57.08", "cuda_version": "12.9",
                            "gpu_count": 8, "gpus": [{"name": "NVIDIA B200",
                                                      "memory_total_mib": "180GB", "mem": 1}]})
    assert r.returncode == 255
    assert "unknown key 'gpu_count'" in r.stderr
    assert "gpus[0]: unknown key 'mem'" in r.stderr
    assert "memory_total_mib must be an int (MiB), got '180GB'" in r.stderr


def test_minimal_hand_written_config(smi):
    r = smi(["--query-gpu=index,name,memory.total", "--format=csv,noheader"],
            config={"driver_version": "580.95.05", "cuda_version": "13.0",
                    "gpus": [{"name": "NVIDIA B200", "memory_total_mib": 183359}] * 2})
    assert r.returncode == 0, r.stderr
    assert r.stdout == "0, NVIDIA B200, 183359 MiB\n1, NVIDIA B200, 183359 MiB\n"


def test_python_api_profiles():
    sys.path.insert(0, str(HERE))
    try:
        import nvidia_smi_double as nsd
    finally:
        sys.path.remove(str(HERE))
    cfg = nsd.make_config("b200-sim", driver="580.95.05", uuid_seed="a")
    assert cfg["cuda_version"] == "13.0"
    assert cfg == nsd.make_config("b200-sim", driver="580.95.05", uuid_seed="a")
    assert cfg["gpus"][0]["uuid"] != nsd.make_config("b200-sim", uuid_seed="b")["gpus"][0]["uuid"]
    with pytest.raises(ValueError, match="profile 'a100' unknown; accepted: b200-sim"):
        nsd.make_config("a100")


# ------------------------------------------------------------------ GPU state (F28)
STATE_QUERY = ["--query-gpu=index,mig.mode.current,mig.mode.pending,persistence_mode,compute_mode",
               "--format=csv,noheader"]


def test_gpu_state_fields_default_to_a_host_ready_to_serve(smi):
    """nvidia-smi(1) --help-query-gpu names: mig.mode.current / mig.mode.pending (Enabled | Disabled),
    persistence_mode (Enabled | Disabled), compute_mode (Default | Exclusive_Process | Prohibited)."""
    r = smi(STATE_QUERY)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [f"{i}, Disabled, Disabled, Enabled, Default" for i in range(8)]


def test_mig_on_and_persistence_off_as_configured(smi):
    """Field case F28's state: MIG mode Enabled on all eight GPUs."""
    r = smi(STATE_QUERY, extra=["--mig-mode", "Enabled", "--persistence-mode", "Disabled"])
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [f"{i}, Enabled, Enabled, Disabled, Default" for i in range(8)]
    q = smi(["-q"], profile=None)
    assert "    Persistence Mode                    : Disabled" in q.stdout
    assert "    MIG Mode\n        Current                         : Enabled\n" in q.stdout
    table = smi([], profile=None)
    assert "|   0  NVIDIA B200                    Off |" in table.stdout


def test_per_gpu_state_in_a_hand_written_config(smi):
    cfg = {"driver_version": "580.95.05", "cuda_version": "13.0",
           "gpus": [{"name": "NVIDIA H200", "memory_total_mib": 143771, "mig_mode": "Enabled",
                     "mig_mode_pending": "Disabled", "compute_mode": "Exclusive_Process"},
                    {"name": "NVIDIA H200", "memory_total_mib": 143771}]}
    r = smi(STATE_QUERY, config=cfg)
    assert r.stdout.splitlines() == ["0, Enabled, Disabled, Enabled, Exclusive_Process",
                                     "1, Disabled, Disabled, Enabled, Default"]
    cfg["gpus"][1]["persistence_mode"] = "On"  # the table's spelling, not the query's
    bad = smi(STATE_QUERY, config=cfg)
    assert bad.returncode == 255 and "gpus[1].persistence_mode 'On' not one of ['Enabled', 'Disabled']" in bad.stderr


@pytest.mark.parametrize("field", ["mig_mode", "mig.mode", "persistence.mode", "persistence-mode", "mig.mode.Current"])
def test_gpu_state_names_the_real_tool_rejects_are_rejected(smi, field):
    """Only --help-query-gpu's own names; the real tool answers any other with this line, exit 2."""
    r = smi([f"--query-gpu=index,{field}", "--format=csv"])
    assert r.returncode == 2 and f'Field "{field}" is not a valid field to query.' in r.stderr
