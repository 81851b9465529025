"""Prechecks of the host state that breaks serving (issue 17 item 2): GPU state (F28), the paths
the service user must write (F11), host memory against what the Plan keeps there (seed 001).

Each check's decision on given facts, then the host side (``glmops_precheck_facts.py``) on
real state: a root-owned 0644 lock checked as another user, the nvidia-smi double with MIG on."""
from __future__ import annotations

import importlib.util
import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from glmops import catalog, hostread, prechecks
from glmops.inventory import load_deployment
from glmops.model import Service
from glmops.plan import build

REPO = Path(__file__).resolve().parents[2]
DOUBLE = REPO / "tests" / "doubles" / "nvidia_smi_double.py"
HOST = "gpu-a"
GiB = 2**30
READY = {"mig.mode.current": "Disabled", "mig.mode.pending": "Disabled", "persistence_mode": "Enabled",
         "compute_mode": "Default"}


def _facts_module():
    spec = importlib.util.spec_from_file_location(
        "glmops_precheck_facts", hostread.script("prechecks", "glmops_precheck_facts.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def failed(results) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for r in results:
        if not r["ok"]:
            out.setdefault(r["check"], []).append(r)
    return out


def gpu_facts(state: dict[str, dict[str, str]]) -> dict:
    return {"gpu": {"gpus": [{"index": int(i), "name": "NVIDIA B200"} for i in state], "driver_version": "580.95.05",
                    "state": state}}


# ------------------------------------------------------------------ F28: GPU state
def test_gpu_state_needs_come_from_the_catalog():
    """catalog prechecks.yaml gpu_state: the nvidia-smi --help-query-gpu field names, each cited."""
    needs = prechecks.needs_from_catalog("b200", list(range(8)))
    assert sorted(needs["gpu_state"]) == ["compute_mode", "mig.mode.current", "mig.mode.pending", "persistence_mode"]
    assert needs["gpu_state"]["mig.mode.current"]["needed"] == "Disabled"
    assert needs["gpu_state"]["persistence_mode"]["accepted"] == ["Enabled"]
    assert "gpu_state" not in prechecks.needs_from_catalog("cpu")
    for field, entry in catalog.load().prechecks["gpu_state"].items():
        assert "nvidia-smi(1)" in entry["source"], field
    opts = prechecks.facts_options(needs)
    assert opts["gpu_state_fields"] == sorted(needs["gpu_state"])


def test_mig_enabled_on_all_eight_gpus_fails_naming_host_gpus_and_needed_state():
    """F28: "nvidia-smi reports MIG mode Enabled on all eight GPUs" -> the precheck fails naming
    the host, the GPUs and the needed state."""
    state = {str(i): dict(READY, **{"mig.mode.current": "Enabled", "mig.mode.pending": "Enabled"}) for i in range(8)}
    needs = {"gpu_vendor": "nvidia", "gpu_state": prechecks.needs_from_catalog("b200")["gpu_state"]}
    bad = failed(prechecks.evaluate(HOST, gpu_facts(state), needs))
    [mig] = bad["gpu_state mig.mode.current"]
    assert mig["message"] == (
        "gpu-a: MIG mode (mig.mode.current) is Enabled on GPUs 0-7; set Disabled: nvidia-smi -i <gpu> -mig 0, "
        "then reset the GPU (F28) (found Enabled on GPUs 0-7, needed Disabled on every GPU)")
    assert bad["gpu_state mig.mode.pending"][0]["found"] == "Enabled on GPUs 0-7"
    assert set(bad) == {"gpu_state mig.mode.current", "gpu_state mig.mode.pending"}


def test_persistence_off_and_prohibited_compute_mode_on_some_gpus():
    """catalog gpu_state: persistence_mode Enabled (F28), compute_mode Default (nvidia-smi(1))."""
    state = {str(i): dict(READY) for i in range(8)}
    for i in ("2", "3", "7"):
        state[i]["persistence_mode"] = "Disabled"
    state["5"]["compute_mode"] = "Prohibited"
    needs = {"gpu_vendor": "nvidia", "gpu_state": prechecks.gpu_state_needs()}
    bad = failed(prechecks.evaluate(HOST, gpu_facts(state), needs))
    assert bad["gpu_state persistence_mode"][0]["found"] == "Disabled on GPUs 2-3, 7"
    assert bad["gpu_state compute_mode"][0]["found"] == "Prohibited on GPU 5"
    assert "mig.mode.current" not in " ".join(bad)
    # GPUs without MIG print [N/A] (nvidia-smi(1)): not a failure
    na = {str(i): dict(READY, **{"mig.mode.current": "[N/A]", "mig.mode.pending": "[N/A]"}) for i in range(2)}
    assert failed(prechecks.evaluate(HOST, gpu_facts(na), needs)) == {}


def test_gpu_state_that_cannot_be_read_fails_saying_so():
    facts = {"gpu": {"gpus": [{"index": 0, "name": "NVIDIA B200"}], "driver_version": "580.95.05",
                     "state_error": 'rc 2: Field "mig.mode.pending" is not a valid field to query.'}}
    needs = {"gpu_vendor": "nvidia", "gpu_state": prechecks.gpu_state_needs()}
    [r] = failed(prechecks.evaluate(HOST, facts, needs))["gpu_state"]
    assert "cannot read the GPU state" in r["message"] and "mig.mode.pending" in r["message"]


def test_facts_script_reads_mig_on_from_the_nvidia_smi_double(tmp_path, monkeypatch):
    """The host side against the strict double (F28's state: MIG on, all eight GPUs): the facts,
    then the decision naming every GPU."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "nvidia-smi").symlink_to(DOUBLE)
    cfg = tmp_path / "smi.json"
    subprocess.run([sys.executable, str(DOUBLE), "--write-profile", "b200-sim", "--mig-mode", "Enabled",
                    "--uuid-seed", "t", str(cfg)], check=True)
    monkeypatch.setenv("NVIDIA_SMI_DOUBLE_CONFIG", str(cfg))
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    mod = _facts_module()
    needs = prechecks.needs_from_catalog("b200", list(range(8)))
    gpu = mod.nvidia_gpus()
    gpu.update(mod.nvidia_gpu_state(prechecks.facts_options(needs)["gpu_state_fields"]))
    assert gpu["state"]["0"] == dict(READY, **{"mig.mode.current": "Enabled", "mig.mode.pending": "Enabled"})
    bad = failed(prechecks.evaluate(HOST, {"gpu": gpu}, {"gpu_vendor": "nvidia", "gpu_state": needs["gpu_state"]}))
    assert bad["gpu_state mig.mode.current"][0]["found"] == "Enabled on GPUs 0-7"


# ------------------------------------------------------------------ F11: writable by the service user
def test_writable_needs_of_a_deployment():
    """The units run as the service user with HOME=<state_dir>/<deployment> (glmops/render.py);
    huggingface-hub 2.4.0's defaults put HF_HOME at ~/.cache/huggingface, the hub cache at
    $HF_HOME/hub and its locks at <hub>/.locks; vLLM's compile cache at ~/.cache/vllm (catalog
    prechecks.yaml writable)."""
    dep = load_deployment(str(REPO / "inventories" / "lab"))
    needs = prechecks.needs_for_deployment(dep, build(dep))
    home = f"/var/lib/glmops/{dep.name}"
    assert needs["lab-1"]["writable"] == {"user": dep.service_user, "home": home, "paths": [
        home, f"{home}/.cache/huggingface", f"{home}/.cache/huggingface/hub",
        f"{home}/.cache/huggingface/hub/.locks", f"{home}/.cache/vllm", f"{home}/.triton",
        f"{home}/.cache/flashinfer"]}
    opts = prechecks.facts_options(needs["lab-1"])
    assert opts["writable"] == needs["lab-1"]["writable"] and "writable" in prechecks.NEED_VARS


def test_a_root_lock_the_service_user_cannot_write_is_named_with_owner_mode_and_user():
    """F11: `.locks/models--org--GLM-5.3-Flash/x.lock` owned by root:root, mode 0644 -> the
    precheck fails naming that path, its owner and mode, and the user that cannot write it."""
    lock = "/var/lib/glmops/d/.cache/huggingface/hub/.locks/models--org--GLM-5.3-Flash/x.lock"
    facts = {"writable": {"user": "glmops", "exists": True, "checked": 9, "denied": [
        {"path": lock, "kind": "file", "owner": "root", "group": "root", "mode": "0644", "for": lock}]}}
    needs = {"writable": {"user": "glmops", "home": "/var/lib/glmops/d", "paths": ["/var/lib/glmops/d"]}}
    [r] = failed(prechecks.evaluate(HOST, facts, needs))["writable"]
    assert r["message"].startswith(
        f"gpu-a: the service user glmops cannot write {lock} (owner root:root, mode 0644; checked as glmops;")
    assert r["found"] == f"{lock} owned by root:root mode 0644" and r["needed"] == "writable by glmops"
    ok = prechecks.evaluate(HOST, {"writable": {"user": "glmops", "exists": True, "checked": 9, "denied": []}}, needs)
    assert [x["ok"] for x in ok] == [True]
    missing = prechecks.evaluate(HOST, {"writable": {"user": "glmops", "exists": False}}, needs)
    assert missing[0]["ok"] and "does not exist yet" in missing[0]["found"]
    many = {"writable": {"user": "glmops", "exists": True, "denied": [
        {"path": f"/x/{i}", "kind": "dir", "owner": "root", "group": "root", "mode": "0755"} for i in range(12)]}}
    bad = failed(prechecks.evaluate(HOST, many, needs))["writable"]
    assert len(bad) == prechecks.WRITABLE_SHOWN + 1 and "2 more paths" in bad[-1]["message"]


@pytest.fixture
def cache_tree():
    """A HOME owned by `nobody` holding the F11 state: the hub cache's lock dir nobody owns,
    a lock in it root:root 0644. Under a 0755 dir of /tmp so `nobody` can reach it."""
    if os.geteuid() != 0:
        pytest.skip("checking as another user needs root")
    base = Path(tempfile.mkdtemp(prefix="glmops-f11-"))
    base.chmod(0o755)
    nobody = pwd.getpwnam("nobody")
    home = base / "home"
    locks = home / ".cache" / "huggingface" / "hub" / ".locks" / "models--org--GLM-5.3-Flash"
    locks.mkdir(parents=True)
    for d in [home, *locks.relative_to(home).parents, locks.relative_to(home)]:
        os.chown(home / d, nobody.pw_uid, nobody.pw_gid)
    lock = locks / "x.lock"
    lock.write_text("")
    lock.chmod(0o644)
    yield home, lock
    shutil.rmtree(base)


def test_facts_script_checks_as_the_user_and_finds_the_root_lock(cache_tree):
    """The host side, as root, checking as `nobody` (fork, setgroups/setgid/setuid, access(2))."""
    home, lock = cache_tree
    mod = _facts_module()
    paths = [str(home), str(home / ".cache/huggingface/hub/.locks"), str(home / ".cache/vllm")]
    got = mod.writable({"user": "nobody", "home": str(home), "paths": paths})
    assert got["exists"] and got["checked"] >= 6 and not got["truncated"]
    assert got["denied"] == [{"path": str(lock), "kind": "file", "owner": "root", "group": "root", "mode": "0644",
                              "for": str(lock)}]
    # root can write it: the check really is the user's
    assert mod.writable({"user": "root", "home": str(home), "paths": paths})["denied"] == []
    os.chown(lock, pwd.getpwnam("nobody").pw_uid, -1)
    assert mod.writable({"user": "nobody", "home": str(home), "paths": paths})["denied"] == []
    # a HOME the user does not own: StateDirectory= chowns its whole tree at the next start
    os.chown(home, 0, 0)
    os.chown(lock, 0, 0)
    assert mod.writable({"user": "nobody", "home": str(home), "paths": paths})["checked"] == 0
    assert mod.writable({"user": "no-such-user-f11", "home": str(home), "paths": paths}) == {
        "user": "no-such-user-f11", "exists": False}


def test_facts_script_refuses_bad_writable_options():
    mod = _facts_module()
    with pytest.raises(ValueError) as err:
        mod.options(json.dumps({"writable": {"user": "glmops", "paths": ["relative/path"]}}))
    assert "writable: want {user: name, home: /path, paths: [/absolute/path]}" in str(err.value)
    with pytest.raises(ValueError) as err:
        mod.options(json.dumps({"gpu_state_fields": ["mig.mode.current; rm -rf /"]}))
    assert "gpu_state_fields" in str(err.value)


# ------------------------------------------------------------------ host memory
def _worker(name: str, gpus: list[int], argv: list[str], engine: str = "sglang") -> Service:
    return Service(name=name, host=HOST, role="worker", engine=engine, address="10.0.0.11", port=8001,
                   gpus=gpus, argv=argv)


def test_seed_001_hicache_worker_needs_448_gib():
    """seeds/001_45b716f972606a07.txt: HiCache 100 GB per TP rank, ~400 GB per TP4 worker, 448 GiB
    host memory per worker Pod (the rest: its 64 GiB shared memory and the process)."""
    need = prechecks.host_memory_needs([_worker("w0", [0, 1, 2, 3], ["python3", "-m", "sglang.launch_server",
                                                                      "--tp-size", "4", "--hicache-size", "100"])])
    assert need["bytes"] / GiB == pytest.approx(448, abs=0.01)
    assert need["parts"] == ["w0: --hicache-size 100 GB x 4 TP ranks = 372.5 GiB",
                             "w0: shared memory and process 75.5 GiB"]
    # decode without HiCache (seed 001 disagg: none on decode) keeps nothing there: no check
    assert prechecks.host_memory_needs([_worker("d", [4, 5, 6, 7], ["python3", "-m", "sglang.launch_server"])]) == {
        "bytes": 0, "parts": []}


def test_vllm_offload_flags_and_dynamo_backends():
    """vLLM engine args: --cpu-offload-gb GiB per GPU, --kv-offloading-size GiB for all TP ranks
    (reference/option-lists/vllm-0.33.0-serve.txt); a Dynamo worker counts its backend's flags."""
    vllm = _worker("v", [0, 1], ["vllm", "serve", "m", "--cpu-offload-gb=8", "--kv-offloading-size", "64"], "vllm")
    need = prechecks.host_memory_needs([vllm])
    assert need["bytes"] == 2 * 8 * GiB + 64 * GiB + int(75.47 * GiB)
    dyn = _worker("dy", [0, 1, 2, 3], ["python3", "-m", "dynamo.sglang", "--hicache-size", "100"], "dynamo")
    assert prechecks.host_memory_needs([dyn])["bytes"] / GiB == pytest.approx(448, abs=0.01)
    # a vLLM flag on an SGLang worker is not counted (the catalog names each flag's backend)
    assert prechecks.host_memory_needs([_worker("s", [0], ["x", "--kv-offloading-size", "64"])])["bytes"] == 0


def test_the_seed_001_plan_on_one_b200_host_needs_two_workers_of_448_gib():
    """inventories/lab-b200sim-sglang: two TP4 SGLang workers with the seed 001 recipe (HiCache
    100 GB per TP rank) on one host: 2 x 448 GiB, checked against MemTotal."""
    dep = load_deployment(str(REPO / "inventories" / "lab-b200sim-sglang"))
    needs = prechecks.needs_for_deployment(dep, build(dep))["lab-1"]
    assert needs["host_memory"]["bytes"] / GiB == pytest.approx(896, abs=0.02)
    assert prechecks.facts_options(needs)["memory"] is True
    small = failed(prechecks.evaluate("lab-1", {"memory": {"total_bytes": 448 * GiB}}, needs))["host_memory"][0]
    assert small["found"] == "448.0 GiB RAM" and small["needed"].startswith("896.0 GiB (glm-flash-b200-sglang-agg-0: "
                                                                            "--hicache-size 100 GB x 4 TP ranks")
    assert "host_memory" not in failed(prechecks.evaluate("lab-1", {"memory": {"total_bytes": 2048 * GiB}}, needs))
    assert "cannot read" in failed(prechecks.evaluate("lab-1", {"memory": {"error": "x"}}, needs))["host_memory"][0][
        "message"]


def test_facts_script_reads_memtotal():
    mem = _facts_module().memory()
    assert mem["total_bytes"] > 0 and mem["total_bytes"] % 1024 == 0


def test_catalog_prechecks_entries_cite_their_sources():
    pc = catalog.load().prechecks
    for entry in [*pc["gpu_state"].values(), *pc["host_memory"]["flags"], pc["host_memory"], pc["writable"]]:
        assert entry["source"].strip()
    assert "seeds/001_45b716f972606a07.txt" in pc["host_memory"]["source"]
    assert (Path("/work/shared/seeds/001_45b716f972606a07.txt").is_file()
            or not Path("/work/shared/seeds").is_dir())
    assert set(pc["writable"]["sources"]) <= set(pc["writable"])


# ------------------------------------------------------------------ the role: report, opt-in fix, idempotent
def _role_run(tmp_path: Path, name: str, role_vars: dict, check: bool = False) -> tuple[dict, str]:
    """The prechecks role on localhost (local connection), only the F11 check on: its last
    report and the play recap."""
    import yaml

    out = tmp_path / f"{name}.json"
    play = tmp_path / f"{name}.yml"
    play.write_text(yaml.safe_dump([{
        "name": name, "hosts": "localhost", "connection": "local", "gather_facts": False,
        "vars": {"ansible_python_interpreter": sys.executable, "prechecks_use_deployment": False,
                 "prechecks_os": [], "prechecks_shm_min_mib": 0, "prechecks_memlock": "", "prechecks_time_sync": False,
                 "prechecks_fail": False, **role_vars},
        "roles": ["prechecks"],
        "post_tasks": [{"name": "Keep", "check_mode": False, "changed_when": False,
                        "ansible.builtin.copy": {"content": "{{ prechecks_result.report | to_json }}", "dest": str(out)}}]}]))
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    proc = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", str(play),
                           *(["--check"] if check else [])],
                          capture_output=True, text=True, env=env, cwd=REPO, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:]
    recap = proc.stdout[proc.stdout.rindex("PLAY RECAP"):]
    return json.loads(out.read_text()), recap


def test_role_names_the_lock_then_the_opt_in_fix_makes_it_the_users_once(cache_tree, tmp_path):
    """F11 through the role: the report names the root 0644 lock and the user; with
    prechecks_fix_writable the lock becomes the user's and the directories setgid
    group-writable, the report passes, and a second run changes nothing (changed=0)."""
    import stat

    home, lock = cache_tree
    writable = {"user": "nobody", "home": str(home), "paths": [str(home)]}
    report, recap = _role_run(tmp_path, "report", {"prechecks_writable": writable})
    assert not report["ok"] and len(report["failed"]) == 1
    assert report["failed"][0].startswith(f"localhost: the service user nobody cannot write {lock} "
                                          "(owner root:root, mode 0644; checked as nobody;")
    assert lock.stat().st_uid == 0  # reporting changes nothing

    report, recap = _role_run(tmp_path, "check", {"prechecks_writable": writable, "prechecks_fix_writable": True},
                              check=True)
    assert lock.stat().st_uid == 0 and "changed=1" in recap  # check mode: would fix, fixes nothing

    report, recap = _role_run(tmp_path, "fix", {"prechecks_writable": writable, "prechecks_fix_writable": True})
    assert report["ok"] and "changed=1" in recap
    nobody = pwd.getpwnam("nobody")
    assert (lock.stat().st_uid, lock.stat().st_gid) == (nobody.pw_uid, nobody.pw_gid)
    assert stat.S_IMODE(lock.stat().st_mode) == 0o664
    locks_dir = lock.parent.stat()
    assert locks_dir.st_mode & stat.S_ISGID and stat.S_IMODE(locks_dir.st_mode) & 0o070 == 0o070

    report, recap = _role_run(tmp_path, "again", {"prechecks_writable": writable, "prechecks_fix_writable": True})
    assert report["ok"] and "changed=0" in recap


# ------------------------------------------------------------------ F17: the interface holding each address
def test_interface_needs_only_for_plans_over_several_hosts():
    """F17 is about traffic between hosts: inventories/lab (disagg over three hosts) checks each
    host's address; a one-host Plan (inventories/lab-b200sim-sglang) does not."""
    dep = load_deployment(str(REPO / "inventories" / "lab"), topology="disagg")
    needs = prechecks.needs_for_deployment(dep, build(dep))
    assert needs["lab-1"]["interface"] == {"address": dep.hosts["lab-1"].address, "refused": ["lo", "docker*"]}
    assert prechecks.facts_options(needs["lab-1"])["address"] == dep.hosts["lab-1"].address
    one = load_deployment(str(REPO / "inventories" / "lab-b200sim-sglang"))
    assert "interface" not in prechecks.needs_for_deployment(one, build(one))["lab-1"]


F17_IFACES = [{"name": "lo", "addresses": ["127.0.0.1"]}, {"name": "eno1", "addresses": ["10.0.0.11"]},
              {"name": "docker0", "addresses": ["172.17.0.1"]}]


@pytest.mark.parametrize("address, holders, fails, text", [
    # F17: gpu-a's address is on eno1 (both hosts also have docker0): passes, naming eno1
    ("10.0.0.11", ["eno1"], False, "eno1 holds 10.0.0.11"),
    # lo and docker* refused (F17)
    ("127.0.0.1", ["lo"], True, "the inventory address 127.0.0.1 is on lo, which other hosts cannot reach"),
    ("172.17.0.1", ["docker0"], True, "the inventory address 172.17.0.1 is on docker0"),
    # the named interface does not hold the address (F17): on no interface at all
    ("10.0.0.99", [], True, "the inventory address 10.0.0.99 is on no interface of the host"),
])
def test_interface_decision(address, holders, fails, text):
    facts = {"interface": {"address": address, "interfaces": F17_IFACES, "holders": holders}}
    needs = {"interface": {"address": address, "refused": ["lo", "docker*"]}}
    [r] = prechecks.evaluate(HOST, facts, needs)
    assert r["ok"] is not fails and text in (r["message"] if fails else r["found"])
    if fails:
        assert r["needed"] == f"an interface other than lo, docker* holding {address}"
        assert "eno1 10.0.0.11" in r["found"] or holders


def test_facts_script_finds_the_interface_of_an_address():
    """The host side: `ip -j addr` (iproute2) on this machine; loopback holds 127.0.0.1 and a
    name resolves first."""
    if shutil.which("ip") is None:
        pytest.skip("iproute2 missing")
    mod = _facts_module()
    got = mod.interfaces("127.0.0.1")
    assert got["holders"] == ["lo"] and any(i["name"] == "lo" for i in got["interfaces"])
    assert mod.interfaces("localhost")["holders"] == ["lo"]
    assert mod.interfaces("192.0.2.77")["holders"] == []  # TEST-NET-1 (RFC 5737): on no interface
