"""Issue 6 acceptance on the lab: `glmops download` (playbooks/download.yml, roles/checkpoint)
against the hub double on the lab's bridge gateway, with the REAL huggingface-hub client in
the hub venv on the lab hosts. Four hosts booted once for the module (most tests use three; the
relay tree tests all four), plus a shared rw bind
(the same controller directory on every host) standing in for an NFS mount.

Needs root and systemd-nspawn (marked ``lab``).
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest

from glmops.lab import core, spec

from checkpoint_lab import (CK_COMMIT, CK_REPO, TOKEN, digests, download_json, glmops, lab_up,  # noqa: E402
                            make_checkpoint, ssh, start_hub, wipe, write_inventory)

pytestmark = [
    pytest.mark.lab,
    pytest.mark.skipif(os.geteuid() != 0, reason="the lab needs root"),
    pytest.mark.skipif(shutil.which("systemd-nspawn") is None, reason="systemd-nspawn missing"),
]

NAME = "pytest-ckpt"
HOSTS = ["lab-1", "lab-2", "lab-3"]
TREE_HOSTS = HOSTS + ["lab-4"]  # binary relay tree: lab-1 feeds lab-2 and lab-3, lab-2 feeds lab-4
LOCAL = f"/models/{CK_REPO}/{CK_COMMIT}"
SHARED_MNT = "/srv/glmops-shared"
SHARD2 = "model-00002-of-00003.safetensors"
# issue 14 item 9: a drafter repo under the same org (wipe() clears it), dotted like seed 004's
DRAFT_REPO = "glmops-test/ckpt-speculator.dspark"
DRAFT_COMMIT = "0123456789abcdef0123456789abcdef89abcdef"
DRAFT_LOCAL = f"/models/{DRAFT_REPO}/{DRAFT_COMMIT}"


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    base = tmp_path_factory.mktemp("ckpt")
    repo = base / "repo"
    files = make_checkpoint(repo, shards=3, shard_bytes=8 * 1024 * 1024)
    drafter = base / "drafter"  # a small second repo: the speculative drafter's own checkpoint
    drafter_files = make_checkpoint(drafter, shards=1, shard_bytes=2 * 1024 * 1024, seed=2)
    shared = base / "shared"
    shared.mkdir()
    lab = lab_up(NAME, 4, [spec.Bind(str(shared), SHARED_MNT, read_only=False)])
    hub = start_hub(lab, repo)
    hub.add_repo(DRAFT_REPO, str(drafter), commit=DRAFT_COMMIT)
    try:
        yield {"lab": lab, "hub": hub, "repo": repo, "files": files, "base": base,
               "runs": base / "runs", "total": sum(files.values()),
               "drafter": drafter, "drafter_total": sum(drafter_files.values())}
    finally:
        hub.stop()
        core.down(NAME, log=lambda *_: None)


@pytest.fixture
def clean(env):
    wipe(env["lab"])
    env["hub"].set_faults([])
    env["hub"].reset()
    return env


def resolve_gets(hub, client: str | None = None) -> list[dict]:
    return [r for r in hub.stats()["requests"] if r["method"] == "GET" and "/resolve/" in r["path"]
            and (client is None or r["client"] == client)]


def addr(env, host: str) -> str:
    return next(h.address for h in env["lab"].hosts if h.name == host)


def want_digests(env) -> dict[str, str]:
    return {p: hashlib.sha256((env["repo"] / p).read_bytes()).hexdigest() for p in env["files"]}


def test_fanout_three_hosts_pulls_one_copy_and_all_verify(clean, tmp_path):
    env = clean
    inv = write_inventory(env["lab"], tmp_path / "inv.yml", HOSTS, mode="fanout")
    r, out = download_json(inv, hub=env["hub"], runs_dir=env["runs"])
    assert r.returncode == 0, r.stdout + r.stderr
    # exactly one copy's bytes from the hub, all to the source host
    assert env["hub"].stats()["bytes_by_client"] == {addr(env, "lab-1"): env["total"]}
    sources = {h["host"]: h["source"] for h in out["hosts"]}
    assert sources == {"lab-1": "hub", "lab-2": "peer lab-1", "lab-3": "peer lab-1"}
    want = want_digests(env)
    for host in HOSTS:
        assert digests(env["lab"], host, LOCAL) == want, host
        marker = ssh(env["lab"], host, f"cat /var/lib/glmops/checkpoints/{CK_REPO.replace('/', '--')}@{CK_COMMIT}.json")
        assert marker.returncode == 0 and CK_COMMIT in marker.stdout
        # owned by the service user, group-writable, setgid directories, others read-only
        st = ssh(env["lab"], host, f"stat -c '%U:%G %a' {LOCAL} {LOCAL}/{SHARD2}").stdout.split("\n")
        assert st[0] == "glmops:glmops 2775" and st[1] == "glmops:glmops 664", (host, st)
    # a second run changes nothing and fetches nothing
    env["hub"].reset()
    r2, out2 = download_json(inv, hub=env["hub"], runs_dir=env["runs"])
    assert r2.returncode == 0, r2.stdout + r2.stderr
    assert out2["changed"] == 0
    assert resolve_gets(env["hub"]) == [] and env["hub"].stats()["bytes_by_client"] == {}
    assert {h["source"] for h in out2["hosts"]} == {"already verified"}


def test_relay_tree_of_three_targets_gets_every_file_with_one_hub_copy(clean, tmp_path):
    """Issue 19 item 3: the hosts form a tree rooted at the source; lab-2 passes on what it gets
    from lab-1 to lab-4 while the download still runs. One copy from the hub; each child
    accepts only its parent's key, from its parent's address, write-only into the model dir."""
    env = clean
    inv = write_inventory(env["lab"], tmp_path / "inv.yml", TREE_HOSTS, mode="fanout")
    # a throttled hub, so the download lasts long enough for the relays to overlap with it
    env["hub"].set_faults([{"kind": "slow", "bytes_per_s": 4 * 1024 * 1024, "path": "*.safetensors"}])
    r, out = download_json(inv, hub=env["hub"], runs_dir=env["runs"])
    assert r.returncode == 0, r.stdout + r.stderr
    assert env["hub"].stats()["bytes_by_client"] == {addr(env, "lab-1"): env["total"]}
    sources = {h["host"]: h["source"] for h in out["hosts"]}
    assert sources == {"lab-1": "hub", "lab-2": "peer lab-1", "lab-3": "peer lab-1", "lab-4": "peer lab-2"}
    want = want_digests(env)
    for host in TREE_HOSTS:
        assert digests(env["lab"], host, LOCAL) == want, host
    keys = ssh(env["lab"], "lab-4", "grep glmops-checkpoint-fanout /root/.ssh/authorized_keys").stdout.splitlines()
    assert len(keys) == 1 and keys[0].endswith("glmops-checkpoint-fanout@lab-2"), keys
    assert keys[0].startswith(f'restrict,from="{addr(env, "lab-2")}",command="/usr/bin/rrsync -wo /models" ')
    # the key lab-2 pushes with opens no shell on lab-4
    shell = ssh(env["lab"], "lab-2", f"ssh -i /var/lib/glmops/checkpoint/fanout_ed25519 -o BatchMode=yes "
                                     f"-o IdentitiesOnly=yes -o UserKnownHostsFile=/var/lib/glmops/checkpoint/fanout_known_hosts "
                                     f"root@{addr(env, 'lab-4')} id")
    assert shell.returncode != 0 and "uid=" not in shell.stdout
    env["hub"].reset()
    r2, out2 = download_json(inv, hub=env["hub"], runs_dir=env["runs"])
    assert r2.returncode == 0 and out2["changed"] == 0, r2.stdout + r2.stderr
    assert env["hub"].stats()["bytes_by_client"] == {}


def test_corrupted_file_on_an_interior_host_is_refused_and_named(clean, tmp_path):
    """lab-2 (interior: it feeds lab-4) holds a corrupted shard of the right size before the run.
    Its relay passes it on to lab-4 at once (complete by size); lab-4 refuses it against the
    source's manifest, naming itself, the file and the sha256, and removes it; the hub still
    served one copy. The next run heals lab-4 without the hub."""
    env = clean
    inv = write_inventory(env["lab"], tmp_path / "inv.yml", TREE_HOSTS, mode="fanout")
    size = env["files"][SHARD2]
    seeded = ssh(env["lab"], "lab-2", f"mkdir -p {LOCAL} && head -c {size} /dev/zero > {LOCAL}/{SHARD2}")
    assert seeded.returncode == 0, seeded.stderr
    # lab-1 gets the real shard only seconds later: lab-2's bad copy leaves first
    env["hub"].set_faults([{"kind": "slow", "bytes_per_s": 2 * 1024 * 1024, "path": "*.safetensors"}])
    r, out = download_json(inv, hub=env["hub"], runs_dir=env["runs"])
    assert r.returncode == 1, r.stdout + r.stderr
    assert env["hub"].stats()["bytes_by_client"] == {addr(env, "lab-1"): env["total"]}
    msgs = [f for f in out["failures"] if "lab-4" in f]
    assert msgs and SHARD2 in msgs[0] and "sha256" in msgs[0] and "VERIFY" in msgs[0], out["failures"]
    assert not [f for f in out["failures"] if "lab-4" not in f], out["failures"]
    assert ssh(env["lab"], "lab-4", f"test -e {LOCAL}/{SHARD2}").returncode != 0  # removed
    env["hub"].set_faults([])
    env["hub"].reset()
    r2, out2 = download_json(inv, hub=env["hub"], runs_dir=env["runs"])
    assert r2.returncode == 0, r2.stdout + r2.stderr
    assert env["hub"].stats()["bytes_by_client"] == {}
    assert {h["host"]: h["source"] for h in out2["hosts"]}["lab-4"] == "peer lab-1"
    assert digests(env["lab"], "lab-4", LOCAL) == want_digests(env)


def test_a_child_the_relay_cannot_reach_fails_alone_and_its_siblings_finish(clean, tmp_path):
    """lab-3's rrsync (the only command lab-1's push key may run there) fails every push: lab-1
    gives up on lab-3 alone after 3 tries, and lab-2 (its sibling) and lab-4 (below lab-2) still
    get and verify every file; the run fails naming lab-3, its parent and the files it lacks."""
    env = clean
    inv = write_inventory(env["lab"], tmp_path / "inv.yml", TREE_HOSTS, mode="fanout")
    broken = ssh(env["lab"], "lab-3", "cp -p /usr/bin/rrsync /usr/bin/rrsync.orig && "
                                      "printf '#!/bin/sh\\necho refused >&2\\nexit 1\\n' > /usr/bin/rrsync")
    assert broken.returncode == 0, broken.stderr
    try:
        r, out = download_json(inv, hub=env["hub"], runs_dir=env["runs"])
    finally:
        ssh(env["lab"], "lab-3", "mv -f /usr/bin/rrsync.orig /usr/bin/rrsync")
    assert r.returncode == 1, r.stdout + r.stderr
    assert [f for f in out["failures"] if "lab-3" in f] and not [
        f for f in out["failures"] if "lab-2" in f.split(":")[0] or "lab-4" in f.split(":")[0]], out["failures"]
    msg = next(f for f in out["failures"] if "lab-3" in f)
    assert "relay on lab-1: rsync to lab-3" in msg and "failed 3 times" in msg and "not sent" in msg, msg
    want = want_digests(env)
    for host in ("lab-1", "lab-2", "lab-4"):
        assert digests(env["lab"], host, LOCAL) == want, host
    assert env["hub"].stats()["bytes_by_client"] == {addr(env, "lab-1"): env["total"]}
    env["hub"].reset()
    r2, out2 = download_json(inv, hub=env["hub"], runs_dir=env["runs"])  # rrsync is back: the rerun heals lab-3
    assert r2.returncode == 0, r2.stdout + r2.stderr
    assert {h["host"]: h["source"] for h in out2["hosts"]}["lab-3"] == "peer lab-1"
    assert env["hub"].stats()["bytes_by_client"] == {}


def test_check_mode_reads_metadata_and_writes_nothing(clean, tmp_path):
    env = clean
    inv = write_inventory(env["lab"], tmp_path / "inv.yml", HOSTS, mode="fanout")
    r, out = download_json(inv, "--check", hub=env["hub"], runs_dir=env["runs"])
    assert r.returncode == 0, r.stdout + r.stderr
    assert resolve_gets(env["hub"]) == [] and env["hub"].stats()["bytes_by_client"] == {}
    assert any("/tree/" in q["path"] for q in env["hub"].stats()["requests"])  # the dry run read the listing
    for host in HOSTS:
        assert ssh(env["lab"], host, f"find {LOCAL} -type f 2>/dev/null").stdout.strip() == ""
        assert ssh(env["lab"], host, "ls /var/lib/glmops/checkpoints 2>/dev/null").stdout.strip() == ""


def test_second_group_member_cannot_break_group_writes(clean, tmp_path):
    """A file another member of the service group creates under a restrictive umask stays
    writable for the service user (setgid + default ACL); a user outside the group cannot write."""
    env = clean
    inv = write_inventory(env["lab"], tmp_path / "inv.yml", ["lab-1"], mode="per_node")
    r, _ = download_json(inv, hub=env["hub"], runs_dir=env["runs"])
    assert r.returncode == 0, r.stdout + r.stderr
    script = (
        "id op >/dev/null 2>&1 || useradd -M -G glmops op; id other >/dev/null 2>&1 || useradd -M other; "
        f"su -s /bin/sh op -c 'umask 077; echo x > {LOCAL}/op-note.txt' && "
        f"su -s /bin/sh glmops -c 'echo y >> {LOCAL}/op-note.txt' && echo SERVICE_OK; "
        f"su -s /bin/sh other -c 'echo z > {LOCAL}/other.txt' 2>/dev/null || echo OTHER_DENIED; "
        f"su -s /bin/sh other -c 'echo z >> {LOCAL}/{SHARD2}' 2>/dev/null || echo OTHER_DENIED_SHARD; "
        f"rm -f {LOCAL}/op-note.txt")
    out = ssh(env["lab"], "lab-1", script).stdout
    assert "SERVICE_OK" in out and "OTHER_DENIED" in out and "OTHER_DENIED_SHARD" in out, out


def test_dropped_connection_then_rerun_fetches_only_the_unfinished_file(clean, tmp_path):
    env = clean
    inv = write_inventory(env["lab"], tmp_path / "inv.yml", HOSTS, mode="fanout")
    env["hub"].set_faults([{"kind": "drop", "path": SHARD2, "after_bytes": 4096, "times": -1}])
    r, out = download_json(inv, hub=env["hub"], runs_dir=env["runs"])
    assert r.returncode == 1
    assert any(SHARD2 in f and "lab-1" in f for f in out["failures"]), out["failures"]
    done = ssh(env["lab"], "lab-1", f"ls {LOCAL}").stdout.split()
    assert "model-00001-of-00003.safetensors" in done and SHARD2 not in done
    # the relay passed on what lab-1 had completed while it downloaded, never the unfinished file,
    # and nothing is verified there; lab-2's failure names its parent
    got = ssh(env["lab"], "lab-2", f"ls {LOCAL} 2>/dev/null").stdout.split()
    assert SHARD2 not in got and set(got) <= set(done), got
    assert ssh(env["lab"], "lab-2", "ls /var/lib/glmops/checkpoints 2>/dev/null").stdout.strip() == ""
    assert any(f.startswith("lab-2") and "lab-1" in f for f in out["failures"]), out["failures"]
    env["hub"].set_faults([])
    env["hub"].reset()
    r2, out2 = download_json(inv, hub=env["hub"], runs_dir=env["runs"])
    assert r2.returncode == 0, r2.stdout + r2.stderr
    assert [g["path"].rsplit("/", 1)[1] for g in resolve_gets(env["hub"])] == [SHARD2]
    assert env["hub"].stats()["bytes_by_client"] == {addr(env, "lab-1"): env["files"][SHARD2]}
    want = want_digests(env)
    for host in HOSTS:
        assert digests(env["lab"], host, LOCAL) == want


@pytest.mark.parametrize("fault,needle", [
    ({"kind": "tree_wrong_size", "delta": 7}, "size"),
    ({"kind": "tree_wrong_sha256"}, "sha256"),
])
def test_wrong_size_or_sha256_fails_naming_the_file(clean, tmp_path, fault, needle):
    env = clean
    inv = write_inventory(env["lab"], tmp_path / "inv.yml", HOSTS, mode="fanout")
    env["hub"].set_faults([dict(fault, path=SHARD2)])
    r, out = download_json(inv, hub=env["hub"], runs_dir=env["runs"])
    assert r.returncode == 1
    msgs = [f for f in out["failures"] if "lab-1" in f]
    assert msgs and SHARD2 in msgs[0] and needle in msgs[0] and "VERIFY" in msgs[0], out["failures"]
    assert ssh(env["lab"], "lab-1", "ls /var/lib/glmops/checkpoints 2>/dev/null").stdout.strip() == ""


def test_too_little_disk_fails_before_any_blob(clean, tmp_path):
    """F10: the hub's tree listing says one shard is 1 PiB larger than it is."""
    env = clean
    inv = write_inventory(env["lab"], tmp_path / "inv.yml", HOSTS, mode="fanout")
    env["hub"].set_faults([{"kind": "tree_wrong_size", "delta": 2 ** 50, "path": SHARD2}])
    r, out = download_json(inv, hub=env["hub"], runs_dir=env["runs"])
    assert r.returncode == 1
    msg = next(f for f in out["failures"] if "lab-1" in f)
    assert "F10_DISK" in msg and "needed" in msg and "available" in msg and "PiB" not in msg.split("available")[1][:5]
    assert resolve_gets(env["hub"]) == [] and env["hub"].stats()["bytes_by_client"] == {}
    listing = ssh(env["lab"], "lab-1", f"find {LOCAL} -type f 2>/dev/null").stdout.strip()
    assert listing == ""


def test_revision_main_refused_with_offline_serving(clean, tmp_path):
    env = clean
    inv = write_inventory(env["lab"], tmp_path / "inv.yml", HOSTS, revision="main")
    v = glmops("validate", "-i", str(inv))
    assert v.returncode == 2 and "F12_REVISION" in v.stdout + v.stderr and "'main'" in v.stdout + v.stderr
    r, _ = download_json(inv, hub=env["hub"], runs_dir=env["runs"])
    assert r.returncode == 2 and "F12_REVISION" in r.stdout + r.stderr
    assert env["hub"].stats()["requests"] == []  # nothing contacted


def test_token_appears_in_no_log_artifact_unit_or_argv(clean, tmp_path):
    env = clean
    runs = tmp_path / "runs"
    inv = write_inventory(env["lab"], tmp_path / "inv.yml", HOSTS, mode="fanout")
    env["hub"].set_faults([{"kind": "slow", "bytes_per_s": 4 * 1024 * 1024, "path": "*.safetensors"}])
    seen_argv: list[str] = []
    stop = threading.Event()

    def watch():
        while not stop.is_set():
            seen_argv.append(subprocess.run(["ps", "-eo", "args="], capture_output=True, text=True).stdout)
            seen_argv.append(ssh(env["lab"], "lab-1", "ps -eo args=; cat /proc/[0-9]*/environ 2>/dev/null "
                                                      "| tr '\\0' '\\n' | grep -c HF_TOKEN= || true").stdout)
            time.sleep(0.5)

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    try:
        r, out = download_json(inv, hub=env["hub"], runs_dir=runs)
    finally:
        stop.set()
        t.join(10)
    assert r.returncode == 0, r.stdout + r.stderr
    # the hub saw the token (the repo is private) ...
    assert any(a.get("valid") for a in env["hub"].stats()["auth"])
    # ... and nothing else did: stdout/stderr, argv on controller and host, run artifacts
    assert TOKEN not in r.stdout + r.stderr
    assert len(seen_argv) > 4 and not any(TOKEN in s for s in seen_argv)
    for path in runs.rglob("*"):
        if path.is_file():
            assert TOKEN.encode() not in path.read_bytes(), path
    for host in HOSTS:
        grep = ssh(env["lab"], host, f"grep -rl '{TOKEN}' /etc /var/lib/glmops /models /root /tmp /var/log "
                                     "/run 2>/dev/null; journalctl --no-pager 2>/dev/null | grep -c '" + TOKEN + "'")
        assert grep.stdout.strip() in ("0", ""), (host, grep.stdout)
        assert ssh(env["lab"], host, "ls /var/lib/glmops/checkpoint/hf_token 2>&1").returncode != 0  # removed
    # the plan for this inventory: engines from the local snapshot, offline, no token anywhere
    from glmops import inventory, plan

    os.environ["HF_TOKEN"] = TOKEN
    try:
        p = plan.build(inventory.load_deployment(str(inv)))
    finally:
        os.environ.pop("HF_TOKEN", None)
    workers = [s for s in p.services if s.role == "agg"]
    assert len(workers) == 3
    for s in workers:
        assert LOCAL in s.argv
        assert s.env.get("HF_HUB_OFFLINE") == "1" and s.env.get("TRANSFORMERS_OFFLINE") == "1"
        assert TOKEN not in " ".join(s.argv) + repr(s.env)


def test_shared_mount_one_writer_under_the_lock(clean, tmp_path):
    """shared: every host runs the download against one mount; the lock lets one write, the
    others wait and find its marker. The hub serves one copy in total."""
    env = clean
    model_dir = f"{SHARED_MNT}/models"
    wipe(env["lab"], ["lab-1"], model_dir=model_dir)
    inv = write_inventory(env["lab"], tmp_path / "inv.yml", HOSTS, mode="shared", model_dir=model_dir)
    env["hub"].set_faults([{"kind": "slow", "bytes_per_s": 8 * 1024 * 1024, "path": "*.safetensors"}])
    r, out = download_json(inv, hub=env["hub"], runs_dir=env["runs"])
    assert r.returncode == 0, r.stdout + r.stderr
    by_client = env["hub"].stats()["bytes_by_client"]
    assert sum(by_client.values()) == env["total"] and len(by_client) == 1, by_client
    assert [h["source"] for h in out["hosts"]].count("hub") == 1
    local = f"{model_dir}/{CK_REPO}/{CK_COMMIT}"
    for host in HOSTS:
        assert digests(env["lab"], host, local) == want_digests(env)
    lock = ssh(env["lab"], "lab-2", f"ls {model_dir}/.glmops-locks/").stdout
    assert f"{CK_REPO.replace('/', '--')}@{CK_COMMIT}.lock" in lock
    wipe(env["lab"], ["lab-1"], model_dir=model_dir)


def test_drafter_checkpoint_is_fetched_fanned_out_and_named_by_the_unit(clean, tmp_path):
    """Issue 14 item 9: a Plan with a speculative drafter (its own repo at a pinned commit) gets
    both checkpoints: each fetched once from the hub at its commit, verified, fanned out to the
    hosts that load it; the rendered unit names both local snapshots, never a hub id."""
    env = clean
    hosts = HOSTS[:2]
    inv = write_inventory(env["lab"], tmp_path / "inv.yml", hosts, mode="fanout",
                          speculative={"method": "dspark", "model": DRAFT_REPO, "revision": DRAFT_COMMIT,
                                       "num_speculative_tokens": 8})
    r, out = download_json(inv, hub=env["hub"], runs_dir=env["runs"])
    assert r.returncode == 0, r.stdout + r.stderr
    # one copy of each repo from the hub, both to the source host; the peer got both by fanout
    assert env["hub"].stats()["bytes_by_client"] == {addr(env, "lab-1"): env["total"] + env["drafter_total"]}
    rows = {(h["host"], h["repo"]): (h["source"], h["commit"]) for h in out["hosts"]}
    assert rows == {("lab-1", CK_REPO): ("hub", CK_COMMIT), ("lab-2", CK_REPO): ("peer lab-1", CK_COMMIT),
                    ("lab-1", DRAFT_REPO): ("hub", DRAFT_COMMIT), ("lab-2", DRAFT_REPO): ("peer lab-1", DRAFT_COMMIT)}
    want_drafter = {p.relative_to(env["drafter"]).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
                    for p in env["drafter"].rglob("*") if p.is_file()}
    for host in hosts:
        assert digests(env["lab"], host, LOCAL) == want_digests(env), host
        assert digests(env["lab"], host, DRAFT_LOCAL) == want_drafter, host
        marker = f"/var/lib/glmops/checkpoints/{DRAFT_REPO.replace('/', '--')}@{DRAFT_COMMIT}.json"
        read = ssh(env["lab"], host, f"cat {marker}")
        assert read.returncode == 0 and DRAFT_COMMIT in read.stdout, host
    # the units these hosts run load both snapshots, offline
    from glmops import planning, render

    planned = planning.load(str(inv))
    for svc in [s for s in planned.plan.services if s.role == "agg"]:
        unit = render.unit_text(planned.deployment, svc, planned.plan)
        assert LOCAL in unit and DRAFT_LOCAL in unit and svc.env.get("HF_HUB_OFFLINE") == "1", unit
        assert f'"model":"{DRAFT_LOCAL}"' in " ".join(svc.argv)
