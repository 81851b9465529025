"""The dcgm-exporter double is strict (refuses what DCGM-Exporter 4.5.3-4.8.2 refuses, with its
messages), accepts the command glmops renders, and serves the upstream metric names the shipped
GPU alerts read (catalog monitoring.dcgm_exporter.names), Xid faults included."""
from __future__ import annotations

import json
import re
import subprocess
import tarfile

import nvidia_smi_double
import pytest
from conftest import http, wait_status
from dcgm_exporter_double import FLAGS, build_archive
from engine_http_double import free_port
from test_metrics_doubles import exprs_naming, served

from glmops import monitoring


@pytest.fixture
def gpus(tmp_path):
    cfg = tmp_path / "smi.json"
    nvidia_smi_double.write_profile(str(cfg), "b200-sim", driver="575.57.08")
    return {"NVIDIA_SMI_DOUBLE_CONFIG": str(cfg)}


@pytest.fixture
def glmops_counters(tmp_path):
    path = tmp_path / "glmops-counters.csv"
    path.write_text(monitoring.dcgm_counters_csv())
    return path


def glmops_argv(exe, counters, listen: str) -> list[str]:
    """The command glmops renders (glmops.monitoring.dcgm_argv) with the double and a local counters file."""
    argv = monitoring.dcgm_argv(listen)
    argv[0] = str(exe)
    argv[argv.index(str(monitoring.exporter("dcgm_exporter")["counters_file"]))] = str(counters)
    return argv


def test_the_command_glmops_renders_is_accepted_as_written(procs, gpus, glmops_counters):
    exe = procs.link("dcgm-exporter", "dcgm_exporter_double.py")
    r = procs.run(glmops_argv(exe, glmops_counters, "10.77.0.11:9400"), env={**gpus, "DCGM_EXPORTER_DOUBLE_DRY_RUN": "1"})
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert got["address"] == "10.77.0.11:9400" and got["collectors"] == str(glmops_counters)
    assert got["remote-hostengine-info"] == "localhost:5555" and "remote-hostengine-info" in got["_given"]
    assert got["counters"] == list(monitoring.exporter("dcgm_exporter")["counters"])
    # every flag glmops renders is one of upstream's long names
    for flag in monitoring.exporter("dcgm_exporter")["flags"].values():
        assert flag[2:] in FLAGS, flag


@pytest.mark.parametrize("args, message", [
    (["--port", "9400"], "Incorrect Usage: flag provided but not defined: -port"),
    (["-address=:9400", "--web.listen-address", ":9400"], "flag provided but not defined: -web.listen-address"),
    (["--address"], "flag needs an argument: -address"),
    (["--address", "9400"], "missing port in address"),
    (["-c", "fast"], 'invalid value "fast" for flag -c'),
    (["--kubernetes=maybe"], 'invalid boolean value "maybe" for -kubernetes'),
    (["--kubernetes"], "kubelet"),
    (["--configmap-data", "default:dcgm"], "could not retrieve ConfigMap"),
    (["-d", "x:0"], "the only valid options preceding ':<range>' are 'g' or 'i', but found 'x'"),
    (["-d", "f:0"], "no range can be specified with the flex option 'f'"),
    (["-d", "g:0-1-2"], "range can only be '<number>-<number>'"),
    (["--dcgm-log-level", "LOUD"], "invalid dcgm-log-level parameter value: LOUD"),
    (["--log-format", "yaml"], "invalid log-format parameter value: yaml"),
    (["--kubernetes-gpu-id-type", "serial"], "invalid kubernetes-gpu-id-type"),
    (["--web-config-file", "/nonexistent/web.yml"], "no such file or directory"),
    (["serve"], "positional argument 'serve'"),
])
def test_refuses_what_the_real_exporter_refuses(procs, gpus, glmops_counters, args, message):
    exe = procs.link("dcgm-exporter", "dcgm_exporter_double.py")
    r = procs.run([exe, "-f", glmops_counters, *args], env={**gpus, "DCGM_EXPORTER_DOUBLE_DRY_RUN": "1"})
    assert r.returncode == 1 and message in r.stderr, (r.returncode, r.stderr)


@pytest.mark.parametrize("csv, message", [
    (None, "no such file or directory"),
    ("DCGM_FI_DEV_GPU_UTIL, gauge\n", "expected 3 fields"),
    ("DCGM_FI_DEV_GPU_UTIL, gauges, GPU utilization (in %).\n", "could not find Prometheus metric type 'gauges'"),
    ("DCGM_FI_DEV_XID_ERROR, gauge, typo\n", "could not find DCGM field"),
])
def test_refuses_a_bad_counters_file(procs, gpus, tmp_path, csv, message):
    exe = procs.link("dcgm-exporter", "dcgm_exporter_double.py")
    path = tmp_path / "c.csv"
    if csv is not None:
        path.write_text("# comment, lines, are skipped, even, with commas\n" + csv)
    r = procs.run([exe, "--collectors", path], env={**gpus, "DCGM_EXPORTER_DOUBLE_DRY_RUN": "1"})
    assert r.returncode == 1 and message in r.stderr, r.stderr


def test_no_gpus_no_exporter(procs, tmp_path, glmops_counters):
    exe = procs.link("dcgm-exporter", "dcgm_exporter_double.py")
    r = procs.run([exe, "-f", glmops_counters], env={"NVIDIA_SMI_DOUBLE_CONFIG": str(tmp_path / "none.json")})
    assert r.returncode == 1 and "Failed to initialize NVML" in r.stderr


def test_serves_the_names_the_gpu_alerts_read_with_an_injected_xid(procs, gpus, glmops_counters):
    exe = procs.link("dcgm-exporter", "dcgm_exporter_double.py")
    port = free_port()
    procs.start(glmops_argv(exe, glmops_counters, f"127.0.0.1:{port}"),
                env={**gpus, "DCGM_EXPORTER_DOUBLE_XID": "3:79", "DCGM_EXPORTER_DOUBLE_ECC_DBE": "3:2"}, name="dcgm")
    url = f"http://127.0.0.1:{port}"
    wait_status(url + "/health")
    status, text = http("GET", url + "/metrics")
    assert status == 200
    names = served(text)
    assert names == set(monitoring.known_metrics("dcgm_exporter")), names
    used = exprs_naming("DCGM_")
    assert {w for w, _ in used} >= {"GlmopsGPUXidError", "GlmopsGPUECCError"}
    for where, want in used:
        assert want <= names, (where, want - names)
    xid = re.findall(r'^DCGM_FI_DEV_XID_ERRORS\{gpu="(\d)",UUID="GPU-[^"]+",pci_bus_id="[^"]+",device="nvidia\1",'
                     r'modelName="NVIDIA B200",Hostname="[^"]+"\} (\S+)$', text, re.M)
    assert dict(xid) == {**{str(i): "0" for i in range(8)}, "3": "79"}
    assert "# TYPE DCGM_FI_DEV_ECC_DBE_VOL_TOTAL counter" in text
    assert re.search(r'^DCGM_FI_DEV_ECC_DBE_VOL_TOTAL\{gpu="3",.*\} 2$', text, re.M)
    # the listen address is the one given: nothing on another address of the host
    assert procs.run(["ss", "-ltnH", f"sport = :{port}"]).stdout.split()[3] == f"127.0.0.1:{port}"


def test_archive_has_nvidias_bare_metal_layout(tmp_path):
    archive = build_archive(tmp_path)
    assert archive.name == monitoring.dcgm_archive_name("x86_64")
    with tarfile.open(archive) as tar:
        members = {m.name: m for m in tar.getmembers()}
    spec = monitoring.exporter("dcgm_exporter")
    binary = f"{spec['archive_root']}/{spec['binary']}"
    assert binary in members and members[binary].mode & 0o111
    dest = tmp_path / "opt"
    dest.mkdir()
    # what roles/monitoring does: unpack with the archive's root stripped, run the binary from there
    subprocess.run(["tar", "-xzf", str(archive), "-C", str(dest), "--strip-components=1"], check=True)
    r = subprocess.run([str(dest / spec["binary"]), "--version"], capture_output=True, text=True)
    assert r.returncode == 0 and spec["version"] in r.stdout
