"""Hashing on arrival (issue 19, checkpoint fan-out speed): a host receiving a fanout copy hashes
each file as it lands (glmops.checkpoint.hash_on_arrival, the role's ``action=hash`` job) and its
final verify (verify_copy) reuses a recorded digest only for a file unchanged since, from a record
of this run, manifest and directory; everything else is read again, and a refusal is the same as
without the record. Also the lower bound of ``checkpoint_relay_fanout``."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from glmops import checkpoint as ck

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_checkpoint_relay import COMMIT, ad_hoc, manifest_of, put  # noqa: E402

RUN = "20261205T010203000001"
OTHER_COMMIT = "0123456789abcdef0123456789abcdef01234567"
ROOT = Path(__file__).resolve().parents[2]


def files_of() -> dict[str, bytes]:
    """Two LFS-like shards (sha256) and a git file (blob sha1)."""
    return {"config.json": b'{"a": 1}', "model-0.safetensors": os.urandom(300_000),
            "sub/model-1.safetensors": os.urandom(200_000)}


def manifest_with_blob(files: dict[str, bytes], commit: str = COMMIT) -> ck.Manifest:
    """manifest_of, but config.json is a regular git file (checked by its git blob sha1)."""
    man = manifest_of(files)
    man.commit = commit
    for f in man.files:
        if f.path == "config.json":
            f.sha256 = None
            f.blob_id = hashlib.sha1(b"blob %d\0" % len(files[f.path]) + files[f.path]).hexdigest()
    return man


@pytest.fixture
def host(tmp_path):
    """A receiving host: its snapshot dir, its root-only state dir, the record path."""
    local = tmp_path / "models" / "o" / "m" / COMMIT
    local.mkdir(parents=True)
    state = tmp_path / "state"
    (state / "checkpoint").mkdir(parents=True, mode=0o700)
    return {"local": local, "models": tmp_path / "models", "state": state,
            "record": state / "checkpoint" / "hashes-o--m.json", "stop": state / "checkpoint" / f"hashes.{RUN}.stop"}


def watch(host, man, **kw):
    return ck.hash_on_arrival(str(host["local"]), man, str(host["record"]), run_id=RUN,
                              model_dir=str(host["models"]), stop_file=str(host["stop"]), poll_s=0.02, **kw)


def record(host) -> dict:
    return json.loads(host["record"].read_text())


@pytest.fixture
def reads(monkeypatch):
    """The files verify reads to hash (sha256_file / git_blob_sha1), in call order."""
    seen: list[str] = []
    sha, blob = ck.sha256_file, ck.git_blob_sha1
    monkeypatch.setattr(ck, "sha256_file", lambda p: seen.append(os.path.basename(p)) or sha(p))
    monkeypatch.setattr(ck, "git_blob_sha1", lambda p, n: seen.append(os.path.basename(p)) or blob(p, n))
    return seen


def verify(host, man, **kw):
    return ck.verify_copy(str(host["local"]), man, str(host["state"]), hashes_file=str(host["record"]),
                          run_id=RUN, remove_refused=True, **kw)


# ------------------------------------------------------------------------------ the watcher
def test_watcher_hashes_each_file_as_it_appears(host):
    files = files_of()
    man = manifest_with_blob(files)
    out: dict = {}
    t = threading.Thread(target=lambda: out.update(watch(host, man, timeout_s=60)))
    t.start()
    try:
        # a file still arriving (not the manifest size yet) is not hashed
        big = "model-0.safetensors"
        (host["local"] / big).write_bytes(files[big][:1000])
        order = ["config.json", big, "sub/model-1.safetensors"]
        for i, path in enumerate(order):
            put(host["local"], {path: files[path]})
            end = time.monotonic() + 20
            while path not in (record(host)["files"] if host["record"].exists() else {}) and time.monotonic() < end:
                time.sleep(0.02)
            got = record(host)["files"]
            assert sorted(got) == sorted(order[:i + 1])  # this file, before the next one exists
            entry, st = got[path], os.stat(host["local"] / path)
            assert {k: entry[k] for k in ck.STAT_KEY} == ck.stat_key(st)
            want = man.files[[f.path for f in man.files].index(path)]
            assert entry.get("sha256") == want.sha256 and entry.get("blob_id", want.blob_id) == want.blob_id
            assert t.is_alive() or i == len(order) - 1  # still watching while files are missing
    finally:
        t.join(30)
    assert out["stopped"] == "done" and out["hashed"] == 3 and out["files"] == 3
    data = record(host)
    assert (data["run_id"], data["repo"], data["commit"], data["local_dir"]) == (RUN, "o/m", COMMIT, str(host["local"]))
    assert stat.S_IMODE(os.stat(host["record"]).st_mode) == 0o600


def test_watcher_rehashes_a_file_replaced_after_it_was_recorded(host):
    """A file of the right size but wrong content before the run (recorded at once), then
    replaced by rsync's rename while another file is still missing: the record follows the new file."""
    files = files_of()
    man = manifest_with_blob(files)
    shard, last = "model-0.safetensors", "sub/model-1.safetensors"
    put(host["local"], {"config.json": files["config.json"], shard: b"\0" * len(files[shard])})
    out: dict = {}
    t = threading.Thread(target=lambda: out.update(watch(host, man, timeout_s=60)))
    t.start()
    try:
        end = time.monotonic() + 20
        while not (host["record"].exists() and shard in record(host)["files"]) and time.monotonic() < end:
            time.sleep(0.02)
        assert record(host)["files"][shard]["sha256"] == hashlib.sha256(b"\0" * len(files[shard])).hexdigest()
        put(host["local"], {shard: files[shard]})  # the parent's copy lands
        end = time.monotonic() + 20
        while record(host)["files"][shard]["sha256"] != man.files[1].sha256 and time.monotonic() < end:
            time.sleep(0.02)
        assert t.is_alive()
        put(host["local"], {last: files[last]})
    finally:
        t.join(30)
    assert out["stopped"] == "done" and out["hashed"] == 4
    assert record(host)["files"][shard]["sha256"] == man.files[1].sha256
    assert record(host)["files"][shard]["ino"] == os.stat(host["local"] / shard).st_ino


@pytest.mark.parametrize("how", ["stop", "abort", "timeout"])
def test_watcher_ends_at_the_stop_file_the_abort_file_or_the_timeout(host, how):
    files = files_of()
    man = manifest_with_blob(files)
    put(host["local"], {"config.json": files["config.json"]})  # the rest never arrives
    if how == "abort":
        abort = Path(ck.relay_abort_path(str(host["models"]), RUN))
        abort.parent.mkdir(parents=True)
        threading.Timer(0.3, lambda: abort.write_text("lab-1 stopped\n")).start()
    if how == "stop":
        threading.Timer(0.3, host["stop"].touch).start()
    t0 = time.monotonic()
    out = watch(host, man, timeout_s=0.5 if how == "timeout" else 30)
    assert out["stopped"] == how and time.monotonic() - t0 < 10
    assert out["files"] == 1 and list(record(host)["files"]) == ["config.json"]
    assert not host["stop"].exists()  # removed on the way out


def test_watcher_starts_a_fresh_record(host):
    """An earlier run's record (another run id) is emptied at the start."""
    host["record"].write_text(json.dumps({"version": 1, "run_id": "old", "files": {"x": {}}}))
    out = watch(host, manifest_with_blob(files_of()), timeout_s=0.2)
    assert out["stopped"] == "timeout" and record(host)["files"] == {} and record(host)["run_id"] == RUN


# ------------------------------------------------------------------------------ the verify
def test_verify_reuses_the_digests_of_files_unchanged_since_they_arrived(host, reads):
    files = files_of()
    man = manifest_with_blob(files)
    put(host["local"], files)
    assert watch(host, man, timeout_s=30)["stopped"] == "done"
    out = verify(host, man)
    assert out == {"changed": True, "verified": True, "files": 3, "hashed_on_arrival": 3}
    assert reads == []  # no file read again
    assert ck.status(str(host["local"]), "o/m", COMMIT, str(host["state"]))["verified"]


def test_verify_without_a_record_reads_every_file(host, reads):
    files = files_of()
    man = manifest_with_blob(files)
    put(host["local"], files)
    out = ck.verify_copy(str(host["local"]), man, str(host["state"]), hashes_file=str(host["record"]), run_id=RUN)
    assert out["hashed_on_arrival"] == 0 and sorted(reads) == ["config.json", "model-0.safetensors", "model-1.safetensors"]


@pytest.mark.parametrize("mtime", ["new", "restored"])
def test_file_modified_after_it_was_recorded_is_read_again_and_refused(host, reads, mtime):
    """Same size, other content, written in place after the record (same inode). With a new
    mtime, and also with the old mtime set back (an owner can: utimensat), the ctime gives it away."""
    files = files_of()
    man = manifest_with_blob(files)
    put(host["local"], files)
    assert watch(host, man, timeout_s=30)["stopped"] == "done"
    shard = host["local"] / "model-0.safetensors"
    before = os.stat(shard)
    bad = os.urandom(len(files["model-0.safetensors"]))
    time.sleep(0.02)
    with open(shard, "r+b") as fh:
        fh.write(bad)
    if mtime == "new":
        os.utime(shard, ns=(before.st_atime_ns, before.st_mtime_ns + 10**9))
    else:
        os.utime(shard, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = os.stat(shard)
    assert after.st_ino == before.st_ino and after.st_size == before.st_size
    assert (after.st_mtime_ns == before.st_mtime_ns) == (mtime == "restored")
    with pytest.raises(ck.CheckpointError) as err:
        verify(host, man)
    e = err.value
    assert e.code == "VERIFY" and e.files == ["model-0.safetensors"]
    assert (f"model-0.safetensors: sha256 {hashlib.sha256(bad).hexdigest()} on disk, the hub says "
            f"{man.files[1].sha256}") in e.message
    assert "removed on this host: model-0.safetensors" in e.message
    assert reads == ["model-0.safetensors"]  # the others came from the record
    assert not shard.exists()
    assert not Path(ck.marker_path(str(host["state"]), "o/m", COMMIT)).exists()


def test_refusal_is_the_same_with_and_without_the_record(tmp_path):
    """The refusal of a file corrupted before the watcher saw it: same message, same files."""
    files = files_of()
    man = manifest_with_blob(files)
    errors = []
    for use in (True, False):
        base = tmp_path / str(use)
        h = {"local": base / "local", "models": base / "models", "state": base / "state",
             "record": base / "state" / "hashes.json", "stop": base / "stop"}
        h["local"].mkdir(parents=True)
        put(h["local"], {**files, "config.json": b'{"a": 2}'})
        if use:
            assert watch(h, man, timeout_s=30)["stopped"] == "done"
        with pytest.raises(ck.CheckpointError) as err:
            ck.verify_copy(str(h["local"]), man, str(h["state"]), hashes_file=str(h["record"]) if use else None,
                           run_id=RUN, remove_refused=True)
        errors.append(err.value)
    assert [(e.code, e.files) for e in errors] == [("VERIFY", ["config.json"])] * 2
    assert errors[0].message.replace(str(tmp_path / "True"), "X") == errors[1].message.replace(str(tmp_path / "False"), "X")
    assert "config.json: git blob sha1 " in errors[0].message


def forged_record(host, man, **over) -> None:
    """A record claiming the hub's digests for the files on disk as they are now (their
    current stat): trusted, it would let a corrupted file through."""
    entries = {}
    for f in man.files:
        st = os.stat(host["local"] / f.path)
        entries[f.path] = {"path": f.path, **ck.stat_key(st), ck.digest_kind(f): f.sha256 or f.blob_id}
    data = {"version": ck.HASHES_VERSION, "run_id": RUN, "repo": man.repo, "commit": man.commit,
            "local_dir": str(host["local"]), "files": entries}
    data.update(over)
    host["record"].write_text(json.dumps(data))
    host["record"].chmod(0o600)


@pytest.mark.parametrize("over,mode", [
    ({"commit": OTHER_COMMIT}, 0o600),    # another manifest's commit
    ({"run_id": "20261204T000000"}, 0o600),  # another run
    ({"repo": "o/other"}, 0o600),
    ({"local_dir": "/elsewhere"}, 0o600),
    ({"version": 99}, 0o600),
    ({}, 0o664),                          # group-writable: the service group could have written it
])
def test_a_record_of_another_run_or_manifest_is_not_trusted(host, reads, over, mode):
    files = files_of()
    man = manifest_with_blob(files)
    put(host["local"], {**files, "model-0.safetensors": b"\0" * len(files["model-0.safetensors"])})
    forged_record(host, man, **over)
    host["record"].chmod(mode)
    with pytest.raises(ck.CheckpointError) as err:
        verify(host, man)
    assert err.value.code == "VERIFY" and err.value.files == ["model-0.safetensors"]
    assert len(reads) == 3  # every file read again


def test_forged_record_control_is_trusted(host):
    """The control of the test above: the same record, for this run and manifest, is used
    (so the refusals above come from the checks, not from the record's shape)."""
    files = files_of()
    man = manifest_with_blob(files)
    put(host["local"], {**files, "model-0.safetensors": b"\0" * len(files["model-0.safetensors"])})
    forged_record(host, man)
    assert verify(host, man)["hashed_on_arrival"] == 3


def test_a_record_of_the_watcher_for_another_commit_is_ignored(host, reads):
    files = files_of()
    put(host["local"], files)
    assert watch(host, manifest_with_blob(files, commit=OTHER_COMMIT), timeout_s=30)["stopped"] == "done"
    out = verify(host, manifest_with_blob(files))
    assert out["verified"] and out["hashed_on_arrival"] == 0 and len(reads) == 3


# ------------------------------------------------------------------------------ the module
def test_module_hash_then_verify_ends_the_job_and_reuses_its_digests(host):
    files = files_of()
    man = manifest_with_blob(files)
    put(host["local"], files)
    common = {"local_dir": str(host["local"]), "manifest": man.to_dict(), "run_id": RUN,
              "hashes_file": str(host["record"]), "stop_file": str(host["stop"])}
    res, _ = ad_hoc({"action": "hash", "model_dir": str(host["models"]), "relay_timeout_s": 60, **common})
    assert res["stopped"] == "done" and res["hashed"] == 3
    # the role's verify ends the hash job first: a job still running gets the stop file and the
    # verify goes on after wait_s without its result (reading what is not recorded)
    job = host["state"] / "job"
    job.write_text('{"started": 1, "finished": 0, "ansible_job_id": "9"}')
    res, _ = ad_hoc({"action": "verify", "async_results_file": str(job), "wait_s": 0.3, **common})
    assert res["verified"] and res["hash_job"] is None and host["stop"].exists() and job.exists()
    # a job that ended: its result reported, its results file and the stop file removed; the
    # digests it recorded are reused (no marker yet: no state_dir above)
    job.write_text('{"changed": true, "hashed": 3, "files": 3, "stopped": "stop", "seconds": 1.5}')
    res, _ = ad_hoc({"action": "verify", "state_dir": str(host["state"]), "async_results_file": str(job), **common})
    assert res["verified"] and res["changed"] and res["hashed_on_arrival"] == 3
    assert res["hash_job"] == {"hashed": 3, "files": 3, "stopped": "stop", "seconds": 1.5}
    assert not host["stop"].exists() and not job.exists()
    # a failed hash job does not fail the verify
    job.write_text('{"failed": true, "msg": "boom"}')
    os.unlink(ck.marker_path(str(host["state"]), "o/m", COMMIT))
    res, text = ad_hoc({"action": "verify", "state_dir": str(host["state"]), "async_results_file": str(job), **common})
    assert "FAILED" not in text and res["verified"] and res["hash_job"] == {"msg": "boom"}


def test_module_hash_never_fails(host):
    res, text = ad_hoc({"action": "hash", "local_dir": str(host["local"]), "model_dir": str(host["models"]),
                        "run_id": "../bad", "hashes_file": str(host["record"]),
                        "manifest": manifest_with_blob(files_of()).to_dict()})
    assert "FAILED" not in text and res["stopped"] == "error" and "run id" in res["error"]


# ------------------------------------------------------------------------------ checkpoint_relay_fanout
@pytest.mark.parametrize("bad", [-1, "-2", "x", 1.5, True, ""])
def test_relay_tree_refuses_a_fanout_below_zero_or_not_whole(bad):
    with pytest.raises(ck.CheckpointError) as err:
        ck.relay_tree(["a", "b"], bad)
    e = err.value
    assert e.code == "INPUT" and f"checkpoint_relay_fanout={bad!r}" in e.message and "accepted: a whole number >= 0" in e.message


def test_relay_tree_takes_a_whole_number_as_text():
    assert ck.relay_tree(["a", "b", "c"], "1") == ck.relay_tree(["a", "b", "c"], 1)
    assert ck.relay_tree(["a", "b", "c"], 0)["c"]["parent"] == "a"


@pytest.mark.skipif(shutil.which("ansible-playbook") is None and not (Path(sys.executable).parent / "ansible-playbook").exists(),
                    reason="ansible-playbook missing")
def test_role_refuses_a_negative_fanout_before_touching_a_host(tmp_path):
    """The role's first checks name the key, the value and what is accepted; no later task runs."""
    play = tmp_path / "play.yml"
    play.write_text(f"""
- hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - ansible.builtin.include_role:
        name: checkpoint
      vars:
        checkpoint_repo: o/m
        checkpoint_revision: "{COMMIT}"
        checkpoint_model_dir: "{tmp_path}/models"
        checkpoint_state_dir: "{tmp_path}/state"
        checkpoint_relay_fanout: -1
""")
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_LOCALHOST_WARNING="0",
               ANSIBLE_INVENTORY_UNPARSED_WARNING="0")
    r = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", str(play),
                        "-e", f"ansible_python_interpreter={sys.executable}"],
                       capture_output=True, text=True, env=env, cwd=str(ROOT), timeout=120)
    assert r.returncode != 0, r.stdout
    assert "TASK [checkpoint : Check the relay fan-out]" in r.stdout
    assert "checkpoint_relay_fanout=-1: accepted: a whole number >= 0" in r.stdout
    assert "Create the service group" not in r.stdout and not (tmp_path / "models").exists()
    assert not (tmp_path / "state").exists()


def test_module_documentation_parses_and_matches_its_argument_spec():
    """ansible-doc reads DOCUMENTATION as YAML: a ': ' in a plain line breaks it silently. (The
    module imports ansible.module_utils.glmops_checkpoint, shipped by AnsiballZ: read as text.)"""
    import ast

    import yaml

    tree = ast.parse((ROOT / "glmops/ansible/library/glmops_checkpoint.py").read_text())
    const = {n.targets[0].id: n.value for n in tree.body if isinstance(n, ast.Assign) and isinstance(n.targets[0], ast.Name)}
    doc = yaml.safe_load(ast.literal_eval(const["DOCUMENTATION"]))
    spec = {k.arg: k.value for k in const["_ARGUMENT_SPEC"].keywords}
    assert set(doc["options"]) == set(spec)
    choices = next(k.value for k in spec["action"].keywords if k.arg == "choices")
    assert doc["options"]["action"]["choices"] == ast.literal_eval(choices)
    assert {"hashed", "stopped", "hashed_on_arrival", "hash_job"} <= set(yaml.safe_load(ast.literal_eval(const["RETURN"])))
