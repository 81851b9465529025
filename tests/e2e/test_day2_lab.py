"""Day 2 on the lab for real: generations, a rolling upgrade under load, a failed
upgrade that stops and leaves the old generation serving, and a rollback that puts the
first generation back byte for byte.

One lab (``e2eday2``, 3 hosts, subnet auto) and one deployment for the module: agg, two
vLLM-CPU replicas (lab-1, lab-2) behind a real vllm-router (lab-3, round robin). The
tests run in file order and build on each other:

1. deploy -> generation 1 on every host (env copies 0600);
2. ``glmops upgrade --set max_batch_size=3`` while 4 clients stream completions: 0 failed
   requests (time and request count printed), both workers restarted one at a time, the
   router untouched, generation 2 current;
3. ``glmops upgrade --set max_seq_len=100000`` (more than the tiny model's 2048
   positions: vLLM refuses to start): exit 1 naming glm-lab-agg-0.service, replica 0 back
   on generation 2, replica 1 never restarted, the endpoint serves, no generation 3;
4. ``glmops rollback`` (to 1): every unit/env file as generation 1 had it, byte for byte
   with mode and owner, the endpoint serves;
5. (issue 12) day-2 verbs follow what is deployed: ``status`` with an inventory whose default
   topology is disagg, without ``--topology``, reports the agg services serving (exit 0);
   an explicit ``--topology disagg`` still wins;
6. (issue 12) a scale-down to one replica (lab-1 alone serves the endpoint; lab-2 and lab-3
   leave the Plan): ``deploy --no-prune`` exits 1 naming both hosts and changes nothing; the
   deploy stops and removes their units, the old replica and router stop answering, and
   the summary says what was pruned.

``GLMOPS_E2E_DAY2_LAB`` / ``GLMOPS_E2E_DAY2_SUBNET`` choose another lab name and subnet (a
shared machine: one lab per person).

Needs root, systemd-nspawn and the vLLM-CPU wheelhouse (marks ``lab`` and ``vllm``).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import threading
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

LAB = os.environ.get("GLMOPS_E2E_DAY2_LAB", "e2eday2")
SUBNET = os.environ.get("GLMOPS_E2E_DAY2_SUBNET", "auto")
DEP = "lab"
MODEL = "tiny-llama"
WORKERS = {"lab-1": "glm-lab-agg-0.service", "lab-2": "glm-lab-agg-1.service"}
ROUTER = ("lab-3", "glm-lab-router.service")
FILES = "/etc/systemd/system/glm-lab* /etc/glmops/lab/*"
FINISHED = re.compile(r'"finish_reason":\s*"(length|stop)"')  # a complete stream's last choice


@pytest.fixture(scope="module")
def lab():
    existed = (D.LAB_ROOT / LAB / "inventory.yml").exists()
    inv = D.lab_up(LAB, 3, SUBNET, D.lab_binds(LAB, DEP))
    yield inv
    if not existed and not os.environ.get("GLMOPS_KEEP_LAB"):
        D.lab_down(LAB)
        shutil.rmtree(D.LAB_ROOT / f"{LAB}-shared", ignore_errors=True)


EXTRA_VARS = {"glmops_topology": "agg",
              # a replica restarting while 4 streams load the other one
              # on 2 shared cores has taken over 600 s to load
              "glmops_readiness_timeout_s": 1500,
              "glmops_env": {"GLMOPS_E2E_API_KEY": D.SECRET_API_KEY}}


@pytest.fixture(scope="module")
def inventory(lab, tmp_path_factory):
    out = tmp_path_factory.mktemp("inv") / "lab"
    return D.make_inventory(lab, "lab", out, ["lab-1", "lab-2"], ["lab-3"], extra_vars=EXTRA_VARS)


@pytest.fixture(scope="module")
def endpoint(lab):
    return f"http://{lab['all']['children']['lab']['hosts']['lab-3']['ansible_host']}:8000"


@pytest.fixture(scope="module")
def runs_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("runs")
    os.environ["GLMOPS_RUNS_DIR"] = str(path)
    yield path
    os.environ.pop("GLMOPS_RUNS_DIR", None)


def fingerprint(lab_inv: dict) -> dict[str, str]:
    """host -> 'sha256 mode owner group path' lines of every unit, env and config file."""
    out = {}
    for host in ("lab-1", "lab-2", "lab-3"):
        proc = D.ssh(lab_inv, host, f"for f in {FILES}; do [ -f $f ] && echo $(sha256sum $f | cut -c1-64) "
                                    f"$(stat -c '%a %U %G %n' $f); done | sort")
        assert proc.returncode == 0, proc.stderr
        out[host] = proc.stdout
    return out


def pids(lab_inv: dict) -> dict[str, int]:
    units = {**WORKERS, ROUTER[0]: ROUTER[1]}
    return {unit: D.main_pid(lab_inv, host, unit) for host, unit in units.items()}


def history(inventory) -> dict:
    proc = D.glmops("history", "-i", str(inventory), "--json", timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(proc.stdout)


@pytest.fixture(scope="module")
def deployed(lab, inventory, runs_dir, endpoint):
    for host in ("lab-1", "lab-2", "lab-3"):  # a kept lab (GLMOPS_KEEP_LAB) starts from no generation
        D.ssh(lab, host, "rm -rf /var/lib/glmops/_records/lab")
    start = time.monotonic()
    proc = D.glmops("deploy", "-i", str(inventory), "--skip-provision", "--skip-smoke", timeout=2400)
    print(f"first deploy: {time.monotonic() - start:.1f} s")
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    D.wait_serving(endpoint, MODEL, 120)
    return {"gen1": fingerprint(lab)}


class Streams:
    """4 clients streaming completions through the endpoint until stopped, each pausing
    ``think_s`` between its requests (like a user reading; without it the 4 loops keep the 2
    shared cores saturated and the restarted replica loads for minutes)."""

    def __init__(self, url: str, clients: int = 4, think_s: float = 0.2):
        self.think_s = think_s
        self.url = url.rstrip("/") + "/v1/completions"
        self.ok = 0
        self.failed: list[str] = []
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self.loop, args=(i,), daemon=True) for i in range(clients)]

    def one(self, i: int) -> None:
        body = json.dumps({"model": MODEL, "prompt": f"Client {i} says", "max_tokens": 16,
                           "stream": True}).encode()
        req = urllib.request.Request(self.url, data=body, headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=300) as resp:
            text = resp.read().decode(errors="replace")
        if resp.status != 200 or "data: [DONE]" not in text or not FINISHED.search(text):
            raise RuntimeError(f"status {resp.status}, stream ended without a finish_reason and [DONE]: "
                               f"{text[-200:]!r}")

    def loop(self, i: int) -> None:
        while not self.stop.is_set():
            try:
                self.one(i)
                with self.lock:
                    self.ok += 1
                time.sleep(self.think_s)
            except Exception as exc:  # noqa: BLE001 - every failure is counted and shown
                with self.lock:
                    self.failed.append(f"{time.strftime('%H:%M:%S')} client {i}: {exc!r}"[:400])
                time.sleep(0.5)

    def __enter__(self):
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        for t in self.threads:
            t.join(timeout=320)


def test_deploy_records_generation_1(lab, inventory, deployed):
    got = history(inventory)
    for host in ("lab-1", "lab-2", "lab-3"):
        h = got["hosts"][host]
        assert h["current"] == 1, h
        gen = h["generations"][-1]
        assert gen["source"] == "deploy" and len(gen["plan_hash"]) == 64
        assert gen["checkpoint"]["revision"] == "fe40d458d5998d162f66364ccee30bb27f5e658f"
        assert {r["engine"] for r in gen["runtimes"]} <= {"vllm", "vllm_router"} and gen["runtimes"]
    # the env copy is 0600 root in a 0700 directory, and holds what the env file holds
    proc = D.ssh(lab, "lab-1", "d=/var/lib/glmops/_records/lab/generations; stat -c '%a %U' $d "
                               "$d/1/files/etc/glmops/lab/glm-lab-agg-0.env; "
                               "cmp $d/1/files/etc/glmops/lab/glm-lab-agg-0.env /etc/glmops/lab/glm-lab-agg-0.env")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[:2] == ["700 root", "600 root"]
    # no directory above the records is the service user's: it could swap in generations that
    # root then restores from (the unit's StateDirectory= /var/lib/glmops/lab is the user's)
    proc = D.ssh(lab, "lab-1", "stat -c '%a %U' /var/lib/glmops /var/lib/glmops/_records /var/lib/glmops/_records/lab "
                               "/var/lib/glmops/lab")
    assert proc.stdout.split("\n")[:4] == ["755 root", "755 root", "755 root", "755 glmops"], proc.stdout
    # a second record of the same Plan changes nothing (no generation 2)
    proc = D.glmops("serve", "-i", str(inventory), timeout=1200)
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert history(inventory)["hosts"]["lab-1"]["current"] == 1


def test_status_follows_the_deployed_topology(lab, inventory, deployed, tmp_path_factory):
    """The same hosts and deployment, an inventory whose default is disagg: status without
    --topology reads agg from the hosts' records and finds every service serving."""
    other = D.make_inventory(lab, "lab", tmp_path_factory.mktemp("inv-disagg") / "lab", ["lab-1", "lab-2"],
                             ["lab-3"], extra_vars={**EXTRA_VARS, "glmops_topology": "disagg"})
    proc = D.glmops("status", "-i", str(other), "--json", timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = json.loads(proc.stdout)["services"]
    assert {r["unit"] for r in rows} == {*WORKERS.values(), ROUTER[1]}
    assert all(r["state"] == "active" and r["health"] == 200 for r in rows), rows
    assert "deployed topology agg (generation 1 on lab-1, lab-2, lab-3) differs from the inventory's default disagg" \
        in proc.stderr
    proc = D.glmops("status", "-i", str(other), "--topology", "disagg", "--json", timeout=600)
    assert proc.returncode == 1  # --topology wins: the disagg units are not deployed
    assert "glm-lab-prefill-0.service" in {r["unit"] for r in json.loads(proc.stdout)["services"]}


def test_rolling_upgrade_under_load_has_no_failed_request(lab, inventory, deployed, endpoint):
    before = pids(lab)
    start = time.monotonic()
    with Streams(endpoint) as streams:
        time.sleep(3)
        proc = D.glmops("upgrade", "-i", str(inventory), "--set", "max_batch_size=3", timeout=2400)
        time.sleep(2)
    took = time.monotonic() - start
    print(f"rolling upgrade of 2 replicas under 4 streams: {took:.1f} s, {streams.ok} requests ok, "
          f"{len(streams.failed)} failed")
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    assert streams.failed == [], streams.failed[:10]
    assert streams.ok >= 4
    after = pids(lab)
    assert after[WORKERS["lab-1"]] != before[WORKERS["lab-1"]]
    assert after[WORKERS["lab-2"]] != before[WORKERS["lab-2"]]
    assert after[ROUTER[1]] == before[ROUTER[1]], "the router was restarted"
    unit = D.ssh(lab, "lab-2", "systemctl cat glm-lab-agg-1.service").stdout
    assert "--max-num-seqs 3" in unit
    got = history(inventory)
    assert {h["current"] for h in got["hosts"].values()} == {2}
    assert got["hosts"]["lab-1"]["generations"][-1]["source"] == "upgrade"
    # the steps went one replica at a time: replica 0 first, then replica 1
    assert proc.stdout.index("agg replica 0") < proc.stdout.index("agg replica 1")


def test_failed_upgrade_stops_and_old_generation_serves(lab, inventory, deployed, endpoint):
    gen2 = fingerprint(lab)
    before = pids(lab)
    start = time.monotonic()
    proc = D.glmops("upgrade", "-i", str(inventory), "--set", "max_batch_size=3",
                    "--set", "max_seq_len=100000", "--set", "readiness_timeout_s=240", timeout=2400)
    print(f"failed upgrade stopped after {time.monotonic() - start:.1f} s")
    assert proc.returncode == 1, proc.stdout[-4000:] + proc.stderr[-3000:]
    assert "glm-lab-agg-0.service" in proc.stderr
    assert "upgrade FAILED at agg replica 0" in proc.stderr
    assert "still on generation 2 (untouched): agg replica 1" in proc.stderr
    assert "generation 2 put back and serving" in proc.stderr
    after = pids(lab)
    assert after[WORKERS["lab-2"]] == before[WORKERS["lab-2"]], "replica 1 was touched"
    assert fingerprint(lab) == gen2  # replica 0's files are generation 2's again
    assert D.completion(endpoint, MODEL, max_tokens=4)["choices"]
    assert {h["current"] for h in history(inventory)["hosts"].values()} == {2}


def test_rollback_restores_generation_1_byte_for_byte(lab, inventory, deployed, endpoint):
    assert fingerprint(lab) != deployed["gen1"]
    start = time.monotonic()
    proc = D.glmops("rollback", "-i", str(inventory), timeout=2400)
    print(f"rollback to generation 1: {time.monotonic() - start:.1f} s")
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    assert "rolling back to generation 1" in proc.stdout
    assert fingerprint(lab) == deployed["gen1"]
    unit = D.ssh(lab, "lab-1", "systemctl show -p ExecStart --value glm-lab-agg-0.service").stdout
    assert "--max-num-seqs 4" in unit  # the running unit is generation 1's
    assert D.completion(endpoint, MODEL, max_tokens=4)["choices"]
    assert {h["current"] for h in history(inventory)["hosts"].values()} == {1}


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5):
            return True
    except OSError:
        return False


def test_scale_down_prunes_the_hosts_that_left_the_plan(lab, inventory, deployed, tmp_path_factory):
    import yaml

    base = yaml.safe_load((D.REPO / "inventories" / "lab" / "group_vars" / "all.yml").read_text())
    topologies = base["glmops_topologies"]
    topologies["agg"]["pools"]["agg"] = {"replicas": 1, "hosts": ["lab-1"], "port": 8001}
    small = D.make_inventory(lab, "lab", tmp_path_factory.mktemp("inv-small") / "lab", ["lab-1", "lab-2"],
                             ["lab-3"], extra_vars={**EXTRA_VARS, "glmops_topologies": topologies})
    addr = {h: lab["all"]["children"]["lab"]["hosts"][h]["ansible_host"] for h in ("lab-1", "lab-2", "lab-3")}
    before, files = pids(lab), fingerprint(lab)
    proc = D.glmops("deploy", "-i", str(small), "--skip-provision", "--skip-smoke", "--no-prune", timeout=1200)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-4000:]
    assert ("--no-prune: 2 host(s) left the Plan but may still run units of lab: lab-2 (glm-lab-agg-1.service); "
            "lab-3 (glm-lab-router.service). Nothing was changed.") in out, out[-4000:]
    assert pids(lab) == before and fingerprint(lab) == files  # nothing changed

    start = time.monotonic()
    proc = D.glmops("deploy", "-i", str(small), "--skip-provision", "--skip-smoke", timeout=2400)
    print(f"scale-down deploy (2 replicas + router -> 1 replica): {time.monotonic() - start:.1f} s")
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    pruned = [line for line in proc.stdout.splitlines() if "pruned: left the Plan, stopped and removed" in line]
    assert any("lab-2" in ln and "glm-lab-agg-1.service" in ln for ln in pruned), proc.stdout[-4000:]
    assert any("lab-3" in ln and "glm-lab-router.service" in ln for ln in pruned), proc.stdout[-4000:]
    for host, unit in (("lab-2", WORKERS["lab-2"]), ROUTER):
        left = D.ssh(lab, host, f"ls {FILES} 2>/dev/null; systemctl is-active {unit}")
        assert left.stdout.split() in (["inactive"], ["unknown"]), (host, left.stdout)
    assert not _answers(f"http://{addr['lab-2']}:8001/health")  # the old replica stopped answering
    assert not _answers(f"http://{addr['lab-3']}:8000/health")  # and the old front door
    D.wait_serving(f"http://{addr['lab-1']}:8000", MODEL, 120)
    got = history(small)["hosts"]
    assert got["lab-2"]["current"] is None and got["lab-3"]["current"] is None
    assert got["lab-1"]["current"] == max(g["number"] for g in got["lab-1"]["generations"])
    proc = D.glmops("status", "-i", str(small), "--json", timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert [r["unit"] for r in json.loads(proc.stdout)["services"]] == [WORKERS["lab-1"]]
