"""``inventories/lab-dynamo`` on a fresh cpu lab: the real NVIDIA Dynamo 1.6.1 frontend with
its KV router on lab-3 and two of Dynamo's own mocker workers on lab-1/lab-2, as systemd
units from the ``dynamo`` wheel set, discovering each other through Dynamo's file store in
the lab's shared directory (lab-recipe/FINDINGS.md "NVIDIA Dynamo on CPU").

Exactly what a user runs: ``glmops lab up --hosts 3 --profile cpu`` (its default binds: the
tiny model and ``/var/lib/glmops/lab/kv-shared``), then ``glmops deploy -i`` a copy of
``inventories/lab-dynamo`` whose hosts are this lab's. Own lab ``e2edyn`` (subnet auto).
Marks ``lab`` (root + systemd-nspawn) and ``vllm`` (the cached wheel sets).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import time
import urllib.request

import deploylab as D
import pytest

pytestmark = [
    pytest.mark.lab,
    pytest.mark.vllm,
    pytest.mark.skipif(os.geteuid() != 0, reason="the lab needs root"),
    pytest.mark.skipif(shutil.which("systemd-nspawn") is None, reason="systemd-nspawn missing"),
]

# own lab; GLMOPS_E2E_DYNAMO_LAB / _SUBNET move it (several people share one machine)
LAB = os.environ.get("GLMOPS_E2E_DYNAMO_LAB", "e2edyn")
SUBNET = os.environ.get("GLMOPS_E2E_DYNAMO_SUBNET", "auto")
MODEL = "tiny-llama"
DEP = "lab-dynamo"
UNITS = {"lab-1": f"glm-{DEP}-agg-0.service", "lab-2": f"glm-{DEP}-agg-1.service",
         "lab-3": f"glm-{DEP}-frontend.service"}
STORE = "/var/lib/glmops/lab/kv-shared/dynamo-lab-dynamo"
TIMES: dict[str, float] = {}


@pytest.fixture(scope="module")
def lab():
    start = time.monotonic()
    existed = (D.LAB_ROOT / LAB / "inventory.yml").exists()
    inv = D.lab_up(LAB, 3, SUBNET, [], profile="cpu")
    TIMES["lab up"] = time.monotonic() - start
    yield inv
    if not existed and not os.environ.get("GLMOPS_KEEP_LAB"):
        start = time.monotonic()
        D.lab_down(LAB)
        TIMES["lab down"] = time.monotonic() - start
    print("\ntimings: " + ", ".join(f"{k} {v:.1f} s" for k, v in TIMES.items()))


@pytest.fixture(scope="module")
def inventory(lab, tmp_path_factory):
    return D.make_inventory(lab, DEP, tmp_path_factory.mktemp("inv") / DEP, ["lab-1", "lab-2"], ["lab-3"])


@pytest.fixture(scope="module", autouse=True)
def runs_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("runs")
    os.environ["GLMOPS_RUNS_DIR"] = str(path)
    yield path
    os.environ.pop("GLMOPS_RUNS_DIR", None)


def _endpoint(lab) -> str:
    return f"http://{lab['all']['children']['lab']['hosts']['lab-3']['ansible_host']}:8000"


def _get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as resp:
        return json.loads(resp.read())


@pytest.fixture(scope="module")
def deployed(lab, inventory):
    start = time.monotonic()
    proc = D.glmops("deploy", "-i", str(inventory), "--skip-provision", timeout=900)
    TIMES["deploy"] = time.monotonic() - start
    print(proc.stdout[-3000:])
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    return proc


def test_deploy_serves_text_through_the_dynamo_frontend(lab, deployed):
    for unit in UNITS.values():
        assert re.search(rf"{re.escape(unit)}\s*│\s*ready", deployed.stdout), deployed.stdout[-3000:]
    for host, unit in UNITS.items():
        res = D.ssh(lab, host, f"systemctl is-active {unit}; systemctl show -p ExecStart --value {unit}")
        assert res.stdout.startswith("active\n"), (host, res.stdout, res.stderr)
        tool = "dynamo.frontend" if host == "lab-3" else "dynamo.mocker"
        assert f"/opt/glmops/venvs/dynamo-1.6.1/bin/python -m {tool}" in res.stdout
    answer = D.completion(_endpoint(lab), MODEL, prompt="Hello, my name is", max_tokens=8)
    assert answer["model"] == MODEL and answer["usage"]["completion_tokens"] == 8
    assert answer["choices"][0]["text"], answer


def test_both_mockers_are_registered_and_the_router_is_kv(lab, deployed):
    health = _get_json(_endpoint(lab) + "/health")
    generate = {i["instance_id"]: i for i in health["instances"] if i["endpoint"] == "generate"}
    assert health["status"] == "healthy" and len(generate) == 2, health
    # each worker advertises its own host address (DYN_TCP_RPC_HOST = inventory address)
    hosts = lab["all"]["children"]["lab"]["hosts"]
    addrs = {i["transport"]["tcp"].split(":")[0] for i in generate.values()}
    assert addrs == {hosts["lab-1"]["ansible_host"], hosts["lab-2"]["ansible_host"]}, generate
    # the file store every host sees (the lab's shared bind) holds both instances
    listing = D.ssh(lab, "lab-1", f"ls {STORE}/v1/instances").stdout.split()
    assert len([n for n in listing if "generate" in n]) == 2, listing
    # each worker's own status server: what the deploy gated on
    for host in ("lab-1", "lab-2"):
        assert _get_json(f"http://{hosts[host]['ansible_host']}:9090/health")["status"] == "ready"
    cmd = D.ssh(lab, "lab-3", f"systemctl show -p ExecStart --value {UNITS['lab-3']}").stdout
    assert "--router-mode kv" in cmd and "--discovery-backend file" in cmd
    metrics = urllib.request.urlopen(_endpoint(lab) + "/metrics", timeout=10).read().decode()
    assert re.search(r'dynamo_frontend_model_kv_cache_block_size\{model="tiny-llama"\} 64', metrics), metrics[:2000]


def test_kv_router_sends_a_repeated_prefix_to_the_worker_that_holds_it(lab, deployed):
    """KV events from the mockers on lab-1/lab-2 reach the router on lab-3: a repeated ~340-token
    prompt lands on the worker whose (simulated) prefix cache holds it, every time. Round robin
    would send the second request to the other worker (0 cached tokens)."""
    prompt = f"run {time.time_ns()} " + " ".join(["the quick brown fox jumps over the lazy dog"] * 20)
    cached = []
    for _ in range(3):
        usage = D.completion(_endpoint(lab), MODEL, prompt=prompt, max_tokens=2)["usage"]
        cached.append(usage["prompt_tokens_details"]["cached_tokens"])
        time.sleep(0.5)  # the worker's KV events reach the router
    assert cached[0] == 0 and cached[1] >= 256 and cached[2] >= 256, cached


def test_second_deploy_changes_nothing(lab, inventory, deployed):
    start = time.monotonic()
    again = D.glmops("deploy", "-i", str(inventory), "--skip-provision", "--skip-smoke", timeout=600)
    TIMES["second deploy"] = time.monotonic() - start
    assert again.returncode == 0 and "changed: 0 " in again.stdout, again.stdout[-3000:]
