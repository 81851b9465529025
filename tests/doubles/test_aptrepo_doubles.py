"""The stand-in package doubles (tests/doubles/aptrepo) and the signed repos they are built into."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
APT = HERE / "aptrepo"
sys.path.insert(0, str(APT))
import build as aptrepo  # noqa: E402


@pytest.fixture
def env(tmp_path):
    """Version files + an nvidia-smi double config (8x B200, driver 575.57.08) in tmp."""
    share = tmp_path / "share"
    share.mkdir()
    for part, version in {"fabricmanager": "575.57.08", "driver": "580.95.05", "container-toolkit": "1.17.8",
                          "docker": "28.3.3", "persistenced": "575.57.08", "nvlsm": "575.57.08"}.items():
        (share / f"{part}.version").write_text(version + "\n")
    cfg = tmp_path / "smi.json"
    subprocess.run([sys.executable, str(HERE / "nvidia_smi_double.py"), "--write-profile", "b200-sim",
                    "--uuid-seed", "t", "--fabric-state", "In Progress", str(cfg)], check=True)
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "nvidia-smi").symlink_to(HERE / "nvidia_smi_double.py")
    (bindir / "dockerd").symlink_to(APT / "dockerd_double.py")
    (bindir / "docker").symlink_to(APT / "dockerd_double.py")
    return {**os.environ, "GLMOPS_DOUBLE_SHARE": str(share), "NVIDIA_SMI_DOUBLE_CONFIG": str(cfg),
            "GLMOPS_DOCKERD_DOUBLE_STATE": str(tmp_path / "dockerd.json"),
            "PATH": f"{bindir}:{os.environ['PATH']}", "TMP": str(tmp_path)}


def run(script: str, *args: str, env: dict, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(APT / script), *args], capture_output=True, text=True,
                          env=env, timeout=30, **kw)


def fm_cfg(tmp: Path, extra: str = "") -> Path:
    path = tmp / "fm.cfg"
    path.write_text("LOG_LEVEL=4\nDAEMONIZE=0\n" + extra)
    return path


def test_fabricmanager_refuses_a_driver_of_another_version(env, tmp_path):
    cfg = Path(env["NVIDIA_SMI_DOUBLE_CONFIG"])
    data = json.loads(cfg.read_text())
    data["driver_version"] = "575.51.03"
    cfg.write_text(json.dumps(data))
    r = run("nv_fabricmanager_double.py", "-c", str(fm_cfg(tmp_path)), env=env)
    assert r.returncode == 1
    assert "fabric manager version 575.57.08 is not matching with the driver version 575.51.03" in r.stderr
    assert json.loads(cfg.read_text())["fabric"]["state"] == "In Progress"


def test_fabricmanager_brings_the_fabric_up_and_down(env, tmp_path):
    cfg = Path(env["NVIDIA_SMI_DOUBLE_CONFIG"])
    p = subprocess.Popen([sys.executable, str(APT / "nv_fabricmanager_double.py"), "-c", str(fm_cfg(tmp_path))],
                         env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 10
        while json.loads(cfg.read_text())["fabric"]["state"] != "Completed":
            assert p.poll() is None and time.monotonic() < deadline, p.stderr.read() if p.poll() else "timeout"
            time.sleep(0.05)
        q = subprocess.run(["nvidia-smi", "-q", "-d", "FABRIC"], capture_output=True, text=True, env=env)
        assert q.stdout.count("State                           : Completed") == 8
    finally:
        p.send_signal(signal.SIGTERM)
        p.wait(timeout=10)
    assert json.loads(cfg.read_text())["fabric"]["state"] == "In Progress"


@pytest.mark.parametrize("args,needle", [
    (["--bogus"], "unrecognized option '--bogus'"),
])
def test_fabricmanager_rejects_unknown_options(env, args, needle):
    r = run("nv_fabricmanager_double.py", *args, env=env)
    assert r.returncode == 1 and needle in r.stderr


def test_fabricmanager_rejects_unknown_config_keys_and_daemonize(env, tmp_path):
    r = run("nv_fabricmanager_double.py", "-c", str(fm_cfg(tmp_path, "NOT_A_KEY=1\n")), env=env)
    assert r.returncode == 1 and "unknown config entry 'NOT_A_KEY'" in r.stderr
    path = tmp_path / "d.cfg"
    path.write_text("DAEMONIZE=1\n")
    r = run("nv_fabricmanager_double.py", "-c", str(path), env=env)
    assert r.returncode == 1 and "DAEMONIZE must be 0" in r.stderr


def test_fabricmanager_version(env):
    r = run("nv_fabricmanager_double.py", "--version", env=env)
    assert r.stdout.strip() == "Fabric Manager version is : 575.57.08"


def test_module_load_sets_the_installed_driver(env):
    r = run("nvidia_module_double.py", env=env)
    assert r.returncode == 0, r.stderr
    q = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                       capture_output=True, text=True, env=env)
    assert set(q.stdout.split()) == {"580.95.05"}
    assert json.loads(Path(env["NVIDIA_SMI_DOUBLE_CONFIG"]).read_text())["cuda_version"] == "13.0"
    assert run("nvidia_module_double.py", "extra", env=env).returncode == 2


def test_ctk_runtime_configure_keeps_other_keys(env, tmp_path):
    daemon = tmp_path / "daemon.json"
    daemon.write_text(json.dumps({"log-driver": "journald"}))
    r = run("nvidia_ctk_double.py", "runtime", "configure", "--runtime=docker", f"--config={daemon}",
            "--cdi.enabled", env=env)
    assert r.returncode == 0, r.stderr
    assert f"Wrote updated config to {daemon}" in r.stdout
    assert json.loads(daemon.read_text()) == {
        "log-driver": "journald", "runtimes": {"nvidia": {"args": [], "path": "nvidia-container-runtime"}},
        "features": {"cdi": True}}


@pytest.mark.parametrize("args,rc,needle", [
    (["runtime", "configure", "--runtime=podman"], 1, "unrecognized runtime 'podman'"),
    (["runtime", "configure", "--bogus"], 1, "flag provided but not defined: -bogus"),
    (["cdi", "generate", "--format=xml"], 1, "invalid output format: xml"),
    (["nothere"], 3, "No help topic for 'nothere'"),
])
def test_ctk_rejects(env, args, rc, needle):
    r = run("nvidia_ctk_double.py", *args, env=env)
    assert r.returncode == rc and needle in r.stderr


def test_ctk_cdi_generate_lists_every_gpu(env, tmp_path):
    out = tmp_path / "cdi" / "nvidia.yaml"
    r = run("nvidia_ctk_double.py", "cdi", "generate", f"--output={out}", env=env)
    assert r.returncode == 0, r.stderr
    text = out.read_text()
    assert 'kind: "nvidia.com/gpu"' in text and text.count('- name: "GPU-') == 8 and '- name: "all"' in text


def test_ctk_cdi_generate_fails_without_a_driver(env):
    env = dict(env, NVIDIA_SMI_DOUBLE_CONFIG="/nonexistent.json")
    r = run("nvidia_ctk_double.py", "cdi", "generate", env=env)
    assert r.returncode == 1 and "failed to initialize NVML" in r.stderr


def test_dockerd_rejects_unknown_daemon_keys(env, tmp_path):
    daemon = tmp_path / "daemon.json"
    daemon.write_text(json.dumps({"runtimes": {}, "gpus": "all"}))
    r = subprocess.run(["dockerd", "--config-file", str(daemon)], capture_output=True, text=True, env=env, timeout=10)
    assert r.returncode == 1
    assert "the following directives don't match any configuration option: gpus" in r.stderr


def test_dockerd_serves_its_runtimes_to_docker_info(env, tmp_path):
    daemon = tmp_path / "daemon.json"
    daemon.write_text(json.dumps({"runtimes": {"nvidia": {"args": [], "path": "nvidia-container-runtime"}}}))
    assert subprocess.run(["docker", "info"], capture_output=True, text=True, env=env).returncode == 1
    p = subprocess.Popen(["dockerd", "--config-file", str(daemon)], env=env, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while not Path(env["GLMOPS_DOCKERD_DOUBLE_STATE"]).exists():
            assert time.monotonic() < deadline
            time.sleep(0.05)
        r = subprocess.run(["docker", "info", "--format", "{{json .Runtimes}}"], capture_output=True, text=True, env=env)
        assert json.loads(r.stdout) == {"runc": {"path": "runc"},
                                        "nvidia": {"args": [], "path": "nvidia-container-runtime"}}
        bad = subprocess.run(["docker", "run", "x"], capture_output=True, text=True, env=env)
        assert bad.returncode == 125 and "unknown command" in bad.stderr
    finally:
        p.terminate()
        p.wait(timeout=10)


def test_persistenced_and_nvlsm_reject_unknown_options(env):
    r = run("nvidia_persistenced_double.py", "--daemonize", env=env)
    assert r.returncode == 1 and "Unrecognized option: '--daemonize'" in r.stderr
    assert run("nvidia_persistenced_double.py", "--version", env=env).stdout.strip().endswith("575.57.08")
    r = run("nvlsm_double.py", "--start", env=env)
    assert r.returncode == 1 and "'--start'" in r.stderr
    assert run("nvlsm_double.py", "--version", env=env).stdout.strip() == "nvlsm 575.57.08"


def test_repo_is_signed_and_lists_every_branch(tmp_path):
    info = aptrepo.build(tmp_path / "repo")
    cuda = Path(info["repos"]["cuda"])
    packages = (cuda / "Packages").read_text()
    for branch, version in aptrepo.DRIVERS.items():
        for name in (f"nvidia-driver-{branch}", f"nvidia-fabricmanager-{branch}"):
            assert f"Package: {name}\nVersion: {version}-1\n" in packages
    assert "Package: nvidia-fabricmanager-575\nVersion: 575.51.03-1\n" in packages
    # the clear-signed InRelease verifies with the exported keyring (what apt's signed-by does)
    r = subprocess.run(["gpgv", "--keyring", info["keyring"], str(cuda / "InRelease")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    tampered = tmp_path / "InRelease"
    tampered.write_text((cuda / "InRelease").read_text().replace("Packages.gz", "Packages.xz", 1))
    assert subprocess.run(["gpgv", "--keyring", info["keyring"], str(tampered)],
                          capture_output=True).returncode != 0
    # the driver package ships the nvidia-smi double and its boot unit
    deb = next(cuda.glob("nvidia-driver-575_*.deb"))
    listing = subprocess.run(["dpkg-deb", "-c", str(deb)], capture_output=True, text=True, check=True).stdout
    assert "./usr/bin/nvidia-smi" in listing and "nvidia-double-module.service" in listing
