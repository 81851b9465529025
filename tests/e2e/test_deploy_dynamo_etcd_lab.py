"""``inventories/lab-dynamo-etcd`` on a fresh cpu lab: Dynamo across three hosts the way real
nodes run it, with no shared directory. The real Dynamo 1.6.1 frontend with its KV router on
lab-3, two of Dynamo's own mocker workers on lab-1/lab-2, and the discovery store glmops plans
for it: one etcd member (Debian's ``etcd-server``) on lab-3, started and gated before any worker,
``--discovery-backend etcd`` and ``ETCD_ENDPOINTS`` on every Dynamo unit (issue 13, F21).

One deployment, several assertions: a deploy refused while the store's port is held by a
stranger (no worker starts, the store's unit is named), the deploy, the two registered
instances, a completion with text, KV routing across hosts, a changed=0 redeploy, then each
component restarted alone (``systemctl restart`` and ``kill -9``) with the time until the
endpoint serves again with both workers registered. Own lab ``etcde2e`` on 10.77.130.0/24.
Day 2 at the end: ``status`` shows the store and the registered count, ``restart --rolling``
restarts the store member in a step of its own before the workers, ``destroy`` removes the store's
unit and says that its data stays.
Marks ``lab`` (root + systemd-nspawn) and ``vllm`` (the cached wheel sets).
"""
from __future__ import annotations

import base64
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

LAB = "etcde2e"
SUBNET = "10.77.130.0/24"
MODEL = "tiny-llama"
DEP = "lab-dynamo-etcd"
STORE_UNIT = f"glm-{DEP}-etcd-0.service"
UNITS = {"lab-1": f"glm-{DEP}-agg-0.service", "lab-2": f"glm-{DEP}-agg-1.service",
         "lab-3": f"glm-{DEP}-frontend.service"}
TIMES: dict[str, float] = {}
RECOVERY_DEADLINE_S = 240.0  # measured recoveries are ~10-25 s (RestartSec=10); far above that


@pytest.fixture(scope="module")
def lab():
    start = time.monotonic()
    existed = (D.LAB_ROOT / LAB / "inventory.yml").exists()
    inv = D.lab_up(LAB, 3, SUBNET, [], profile="cpu")
    TIMES["lab up"] = time.monotonic() - start
    yield inv
    if not existed and not os.environ.get("GLMOPS_KEEP_LAB"):
        D.lab_down(LAB)
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


def _addr(lab, host: str) -> str:
    return lab["all"]["children"]["lab"]["hosts"][host]["ansible_host"]


def _endpoint(lab) -> str:
    return f"http://{_addr(lab, 'lab-3')}:8000"


def _get_json(url: str, body: dict | None = None) -> dict:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"} if data else {})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return json.loads(resp.read())
    except urllib.error.HTTPError as exc:  # the frontend answers 503 with the same document
        return json.loads(exc.read() or b"{}")


def _generate_instances(lab) -> dict:
    health = _get_json(_endpoint(lab) + "/health")
    return {i["instance_id"]: i for i in health.get("instances") or [] if i.get("endpoint") == "generate"}


def _worker_pids(lab) -> dict[str, int]:
    return {h: D.main_pid(lab, h, UNITS[h]) for h in ("lab-1", "lab-2")}


@pytest.fixture(scope="module")
def refused(lab, inventory):
    """The store stopped (on a fresh lab: never started) and a stranger holding its client port on
    lab-3: the deploy is refused before any worker starts."""
    addr = _addr(lab, "lab-3")
    D.ssh(lab, "lab-3", f"systemctl stop {STORE_UNIT}")
    before = _worker_pids(lab)
    D.ssh(lab, "lab-3", "systemctl reset-failed etcde2e-squatter")  # a failed one left by an earlier run
    D.ssh(lab, "lab-3", f"systemd-run --unit=etcde2e-squatter python3 -m http.server --bind {addr} 2379")
    deadline = time.monotonic() + 30
    while f"{addr}:2379" not in D.ssh(lab, "lab-3", "ss -ltnH 'sport = :2379'").stdout:
        assert time.monotonic() < deadline, "the squatter did not listen on 2379"
        time.sleep(0.5)
    try:
        start = time.monotonic()
        proc = D.glmops("deploy", "-i", str(inventory), "--skip-provision", timeout=900)
        TIMES["refused deploy"] = time.monotonic() - start
        after = _worker_pids(lab)
    finally:
        D.ssh(lab, "lab-3", "systemctl stop etcde2e-squatter")
    return proc, before, after


def test_store_stopped_and_its_port_taken_fails_before_any_worker_starts(lab, refused):
    proc, before, after = refused
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-4000:]
    assert f"{STORE_UNIT} on lab-3 cannot start: port 2379 on {_addr(lab, 'lab-3')} is taken" in out, out[-4000:]
    # no worker was started or restarted (fresh lab: none exists; a rerun: the same processes, or
    # none: measured, a 1.6.1 worker exits once its etcd lease is gone while the store is down)
    assert all(after[h] in (0, before[h]) for h in before), (before, after)
    if not any(before.values()):
        for host in ("lab-1", "lab-2"):
            res = D.ssh(lab, host, f"test -e /etc/systemd/system/{UNITS[host]}; echo $?")
            assert res.stdout.split() == ["1"], (host, res.stdout)


@pytest.fixture(scope="module")
def deployed(lab, inventory, refused):
    start = time.monotonic()
    proc = D.glmops("deploy", "-i", str(inventory), "--skip-provision", timeout=900)
    TIMES["deploy"] = time.monotonic() - start
    print(proc.stdout[-3000:])
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    return proc


def test_deploy_serves_text_with_both_workers_registered_through_etcd(lab, deployed):
    for unit in [STORE_UNIT, *UNITS.values()]:
        assert re.search(rf"{re.escape(unit)}\s*│\s*ready", deployed.stdout), deployed.stdout[-3000:]
    generate = _generate_instances(lab)
    assert len(generate) == 2, generate
    addrs = {i["transport"]["tcp"].split(":")[0] for i in generate.values()}
    assert addrs == {_addr(lab, "lab-1"), _addr(lab, "lab-2")}, generate
    want = f"http://{_addr(lab, 'lab-3')}:2379"
    for host, unit in UNITS.items():
        cmd = D.ssh(lab, host, f"systemctl show -p ExecStart --value {unit}").stdout
        assert "--discovery-backend etcd" in cmd and "--request-plane tcp" in cmd and "--event-plane zmq" in cmd, cmd
        env = D.ssh(lab, host, f"cat /etc/glmops/{DEP}/{unit[:-len('.service')]}.env").stdout
        assert f"ETCD_ENDPOINTS={want}\n" in env and "DYN_FILE_KV" not in env and "DYN_REQUEST_PLANE" not in env, env
        if host != "lab-3":  # F17: the workers' env names the interface holding the host's address (host0)
            nic = D.ssh(lab, host, f"ip -o addr show to {_addr(lab, host)}").stdout.split()[1].split("@")[0]
            assert nic != "lo" and f"NCCL_SOCKET_IFNAME={nic}\nGLOO_SOCKET_IFNAME={nic}\n" in env, (nic, env)
        assert not D.ssh(lab, host, "ls /var/lib/glmops/lab-dynamo-etcd/kv-shared 2>/dev/null").stdout
    answer = D.completion(_endpoint(lab), MODEL, prompt="Hello, my name is", max_tokens=8)
    assert answer["model"] == MODEL and answer["usage"]["completion_tokens"] == 8
    assert answer["choices"][0]["text"], answer


def test_the_store_is_etcd_bound_to_the_inventory_address_and_holds_the_registrations(lab, deployed):
    addr = _addr(lab, "lab-3")
    assert _get_json(f"http://{addr}:2379/health")["health"] == "true"
    listen = D.ssh(lab, "lab-3", "ss -ltnH '( sport = :2379 or sport = :2380 )'").stdout
    local = sorted(line.split()[3] for line in listen.splitlines() if line.strip())
    assert local == [f"{addr}:2379", f"{addr}:2380"], listen
    cmd = D.ssh(lab, "lab-3", f"systemctl show -p ExecStart -p User -p NoNewPrivileges --value {STORE_UNIT}").stdout
    assert "/usr/bin/etcd --name glm-lab-dynamo-etcd-etcd-0" in cmd and "glmops" in cmd, cmd
    # Debian's own etcd.service (localhost) is stopped and disabled
    own = D.ssh(lab, "lab-3", "systemctl is-active etcd.service; systemctl is-enabled etcd.service").stdout.split()
    assert own[0] != "active" and own[1] == "disabled", own
    everything = {"key": base64.b64encode(b"\0").decode(), "range_end": base64.b64encode(b"\0").decode(),
                  "keys_only": True}
    keys = [base64.b64decode(kv["key"]).decode() for kv in
            _get_json(f"http://{addr}:2379/v3/kv/range", everything).get("kvs", [])]
    assert len([k for k in keys if "generate" in k]) >= 2, keys


def test_the_store_member_serves_its_metrics_at_its_scrape_target(lab, inventory, deployed):
    """The etcd member's file_sd target (role etcd) is the address it serves Prometheus text on,
    with the names the shipped etcd alerts read, and a leader (etcd_server_has_leader 1)."""
    from glmops.engines.base import CATALOG
    from glmops.smoke import parse_prometheus

    proc = D.glmops("targets", "-i", str(inventory))
    assert proc.returncode == 0, proc.stderr
    etcd = [g for g in json.loads(proc.stdout) if g["labels"]["role"] == "etcd"]
    assert [g["targets"] for g in etcd] == [[f"{_addr(lab, 'lab-3')}:2379"]], etcd
    url = f"http://{etcd[0]['targets'][0]}{etcd[0]['labels']['__metrics_path__']}"
    with urllib.request.urlopen(url, timeout=10) as resp:
        samples = parse_prometheus(resp.read().decode())
    assert set(CATALOG.engine("etcd")["metrics"]["names"]) <= set(samples), sorted(samples)[:40]
    assert samples["etcd_server_has_leader"] == 1


def test_kv_router_sends_a_repeated_prefix_to_the_worker_that_holds_it(lab, deployed):
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


def _recovered(lab, since: float, host: str, unit: str, old_pid: int, old_ids: set) -> float:
    """Seconds from ``since`` until the unit runs a new process, the frontend lists both workers
    (for a worker: a new registration instead of the old one) and a completion succeeds."""
    worker = host != "lab-3"
    while True:
        try:
            ids = set(_generate_instances(lab))
            if (D.main_pid(lab, host, unit) not in (0, old_pid) and len(ids) == 2
                    and (not worker or ids != old_ids)
                    and D.completion(_endpoint(lab), MODEL, max_tokens=2, timeout=10).get("choices")):
                return time.monotonic() - since
        except OSError:
            pass
        if time.monotonic() - since > RECOVERY_DEADLINE_S:
            raise AssertionError(f"{unit}: not serving with 2 workers {RECOVERY_DEADLINE_S} s after the fault: "
                                 f"{_generate_instances(lab)}")
        time.sleep(0.5)


@pytest.mark.parametrize("how", ["restart", "kill"])
@pytest.mark.parametrize("host,unit", [("lab-3", STORE_UNIT), ("lab-3", UNITS["lab-3"]), ("lab-1", UNITS["lab-1"])],
                         ids=["store", "frontend", "worker"])
def test_each_component_restarted_alone_comes_back_with_every_worker(lab, deployed, host, unit, how):
    pid = D.main_pid(lab, host, unit)
    assert pid > 0
    old_ids = set(_generate_instances(lab))
    assert len(old_ids) == 2, old_ids
    since = time.monotonic()
    if how == "restart":
        D.ssh(lab, host, f"systemctl restart {unit}")
    else:
        D.ssh(lab, host, f"kill -9 {pid}")
    seconds = _recovered(lab, since, host, unit, pid, old_ids)
    TIMES[f"recover {unit[len(f'glm-{DEP}-'):-len('.service')]} {how}"] = seconds
    print(f"\n{unit} {how}: serving with both workers after {seconds:.1f} s")


def test_status_shows_the_store_and_both_registered_workers(lab, inventory, deployed):
    res = D.glmops("status", "-i", str(inventory), "--json", timeout=300)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    rows = {r["unit"]: r for r in json.loads(res.stdout)["services"]}
    assert rows[STORE_UNIT]["role"] == "store" and rows[STORE_UNIT]["health"] == 200, rows
    assert rows[UNITS["lab-3"]]["instances"] == {"have": 2, "want": 2}, rows
    text = D.glmops("status", "-i", str(inventory), timeout=300).stdout
    assert "glm-lab-dynamo-etcd-frontend: 2 of 2 planned worker instance(s) registered" in text, text[-2000:]


def test_rolling_restart_restarts_the_store_member_alone_first(lab, inventory, deployed):
    start = time.monotonic()
    res = D.glmops("restart", "-i", str(inventory), "--rolling", timeout=900)
    TIMES["rolling restart"] = time.monotonic() - start
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
    steps = re.findall(r"restart step (.+?): (.+)", res.stdout)
    assert steps[0] == (f"store glm-{DEP}-etcd-0", STORE_UNIT), steps
    assert [s for s, _ in steps][-1] == "router" and len(_generate_instances(lab)) == 2


def test_destroy_removes_the_store_unit_and_says_its_data_stays(lab, inventory, deployed):
    res = D.glmops("destroy", "-i", str(inventory), "--yes", timeout=600)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    assert f"kept on lab-3: glm-{DEP}-etcd-0's data under /var/lib/glmops/{DEP}/" in res.stdout, res.stdout[-2000:]
    out = D.ssh(lab, "lab-3", f"test -e /etc/systemd/system/{STORE_UNIT}; echo $?; systemctl is-active {STORE_UNIT};"
                f" ls /var/lib/glmops/{DEP}/").stdout.split()
    assert out[:2] == ["1", "inactive"] and f"glm-{DEP}-etcd-0" in out[2:], out
