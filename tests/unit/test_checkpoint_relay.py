"""The fanout relay of roles/checkpoint (issue 19): the tree layout, the relay's bookkeeping,
and glmops.checkpoint.relay moving files with the REAL rsync, through a local stand-in for ssh
(``fake_rsh``: it drops the ``-l user host`` words and runs the remote rsync in the child's
directory), so no host, key or sshd is needed."""
from __future__ import annotations

import hashlib
import os
import stat
import threading
import time
from pathlib import Path

import pytest

from glmops import checkpoint as ck

COMMIT = "89abcdef0123456789abcdef0123456789abcdef"


# ------------------------------------------------------------------------------ tree
@pytest.mark.parametrize("n,fanout,parents", [
    (4, 1, [None, "h0", "h1", "h2"]),                       # chain
    (8, 2, [None, "h0", "h0", "h1", "h1", "h2", "h2", "h3"]),  # binary, breadth-first
    (5, 0, [None, "h0", "h0", "h0", "h0"]),                  # star: the source feeds all
    (4, 3, [None, "h0", "h0", "h0"]),
    (1, 2, [None]),
])
def test_tree_parents(n, fanout, parents):
    hosts = [f"h{i}" for i in range(n)]
    tree = ck.relay_tree(hosts, fanout)
    assert [tree[h]["parent"] for h in hosts] == parents
    for h in hosts:  # children are the inverse of parents, in host order
        assert tree[h]["children"] == [c for c in hosts if tree[c]["parent"] == h]


def test_tree_depth_binary_is_logarithmic_and_degree_bounded():
    hosts = [f"h{i}" for i in range(15)]
    tree = ck.relay_tree(hosts, 2)
    assert max(t["depth"] for t in tree.values()) == 3
    assert max(len(t["children"]) for t in tree.values()) == 2
    assert ck.relay_tree(hosts, 1)["h14"]["depth"] == 14


def test_tree_refuses_a_host_twice():
    with pytest.raises(ck.CheckpointError) as err:
        ck.relay_tree(["a", "b", "a"], 2)
    assert err.value.code == "INPUT" and "twice" in err.value.message


def test_relay_tree_filter_is_the_module_function():
    from glmops.ansible.filter_plugins.glmops_checkpoint import FilterModule

    f = FilterModule().filters()["glmops_relay_tree"]
    assert f(["a", "b", "c"], "1") == ck.relay_tree(["a", "b", "c"], 1)


# ------------------------------------------------------------------------------ bookkeeping
def test_book_sends_each_complete_file_once_per_child_one_batch_at_a_time():
    book = ck.RelayBook(["a", "b", "c"], ["x", "y"])
    assert book.ready("x", {"b"}) == ["b"]
    book.start("x", ["b"])
    assert book.ready("x", {"a", "b"}) == []          # a batch in flight: wait for it
    assert book.ready("y", {"a", "b"}) == ["a", "b"]  # the other child independently
    assert book.finish("x", ok=True) == ["b"]
    assert book.ready("x", {"a", "b"}) == ["a"]       # b is not sent twice
    book.start("x", ["a"])
    book.finish("x", ok=False)                         # failed: a is still to send
    assert book.ready("x", {"a", "b"}) == ["a"]
    assert book.unsent() == {"x": ["a", "c"], "y": ["a", "b", "c"]}
    assert not book.done()
    for child in ("x", "y"):
        book.start(child, book.ready(child, {"a", "b", "c"}))
        book.finish(child, ok=True)
    assert book.unsent() == {} and book.done()


def test_book_with_no_children_is_done():
    assert ck.RelayBook(["a"], []).done()


def test_abort_path_refuses_odd_run_ids():
    assert ck.relay_abort_path("/models", "20261205T0123") == "/models/.glmops-locks/relay-20261205T0123.abort"
    for bad in ("", "../x", "a/b", "x" * 81):
        with pytest.raises(ck.CheckpointError):
            ck.relay_abort_path("/models", bad)


def test_async_job_running_vs_ended(tmp_path):
    f = tmp_path / "job"
    assert ck.async_job(str(f)) is None
    f.write_text('{"started": 1, "finished": 0, "ansible_job_id": "1"}')
    assert ck.async_job(str(f)) is None
    f.write_text('{"failed": true, "msg": "boom"}')
    assert ck.async_job(str(f))["msg"] == "boom"


# ------------------------------------------------------------------------------ relay with real rsync
def files_of(n: int = 3, size: int = 200_000) -> dict[str, bytes]:
    out = {"config.json": b'{"a": 1}', "sub/dir/notes.txt": b"x" * 1000}
    for i in range(n):
        out[f"model-{i}.safetensors"] = os.urandom(size)
    return out


def manifest_of(files: dict[str, bytes]) -> ck.Manifest:
    return ck.Manifest(repo="o/m", commit=COMMIT, files=[
        ck.HubFile(path=p, size=len(b), blob_id="", sha256=hashlib.sha256(b).hexdigest()) for p, b in sorted(files.items())])


@pytest.fixture
def lab(tmp_path):
    """Hosts as directories: <tmp>/<name>/models/<rel>; a fake rsh running the remote rsync in
    <tmp>/<address>/models (the address is the host's name)."""
    rsh = tmp_path / "fake_rsh"
    rsh.write_text("#!/bin/sh\n# rsync calls: RSH [-l user] host rsync --server ...\n"
                   "if [ \"$1\" = -l ]; then shift 2; fi\n"
                   f"host=$1; shift\ncd '{tmp_path}'/$host/models || exit 255\nexec \"$@\"\n")
    rsh.chmod(rsh.stat().st_mode | stat.S_IEXEC)
    rel = f"o/m/{COMMIT}"

    def local(host: str) -> Path:
        d = tmp_path / host / "models" / rel
        d.mkdir(parents=True, exist_ok=True)
        return d

    return {"tmp": tmp_path, "rsh": str(rsh), "rel": rel, "local": local}


def run_relay(lab, host, children, manifest, parent=None, **kw):
    for c in children:  # the role creates the snapshot directory on every host first
        lab["local"](c)
    return ck.relay(str(lab["local"](host)), manifest, [{"name": c, "address": c} for c in children],
                    host=host, rsh=lab["rsh"], rel_dir=lab["rel"], model_dir=str(lab["tmp"] / host / "models"),
                    run_id="r1", parent=parent, poll_s=0.05, **kw)


def put(d: Path, files: dict[str, bytes]) -> None:
    for p, b in files.items():
        (d / p).parent.mkdir(parents=True, exist_ok=True)
        tmp = d / (p + ".part")
        tmp.write_bytes(b)
        tmp.rename(d / p)  # like the hub client and rsync: whole at the final path


def test_relay_through_a_tree_while_the_source_still_downloads(lab):
    files = files_of()
    man = manifest_of(files)
    src = lab["local"]("s")
    tree = ck.relay_tree(["s", "a", "b", "c"], 2)  # s -> a, b; a -> c
    put(src, {"config.json": files["config.json"]})  # the download has only started
    results, errors = {}, []

    def go(host):
        try:
            results[host] = run_relay(lab, host, tree[host]["children"], man, parent=tree[host]["parent"],
                                      timeout_s=60)
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=go, args=(h,)) for h in ("s", "a")]
    for t in threads:
        t.start()
    # the leaf c gets config.json while the rest is still missing on the source: a sent it on
    # as soon as it had it
    leaf = lab["local"]("c") / "config.json"
    end = time.monotonic() + 60
    while not leaf.exists() and time.monotonic() < end:
        time.sleep(0.05)
    assert leaf.read_bytes() == files["config.json"]
    assert not (lab["local"]("a") / "model-0.safetensors").exists()
    rest = {p: b for p, b in files.items() if p != "config.json"}
    put(src, rest)  # the download finishes
    for t in threads:
        t.join(60)
    assert not errors, errors
    for host in ("a", "b", "c"):
        got = {p: (lab["local"](host) / p).read_bytes() for p in files}
        assert got == files, host
    assert results["s"]["sent"] == {"a": len(files), "b": len(files)}
    assert results["a"]["sent"] == {"c": len(files)}
    assert results["s"]["batches"] >= 2  # the first file left before the others existed


def test_relay_ignores_files_not_yet_complete(lab):
    files = files_of(n=1)
    man = manifest_of(files)
    src = lab["local"]("s")
    big = "model-0.safetensors"
    (src / big).write_bytes(files[big][:1000])  # wrong size: not complete, never sent
    put(src, {p: b for p, b in files.items() if p != big})
    with pytest.raises(ck.CheckpointError) as err:
        run_relay(lab, "s", ["a"], man, timeout_s=1.0)
    e = err.value
    assert e.code == "RELAY" and "relay on s" in e.message and big in e.message and "a: 1 file(s) not sent" in e.message
    assert e.files == [big]
    assert not (lab["local"]("a") / big).exists()
    assert (lab["local"]("a") / "config.json").exists()


def test_relay_names_the_child_when_rsync_keeps_failing(lab):
    files = files_of(n=1)
    put(lab["local"]("s"), files)
    out = ck.relay(str(lab["local"]("s")), manifest_of(files), [{"name": "gone", "address": "nohost"}], host="s",
                   rsh=lab["rsh"], rel_dir=lab["rel"], model_dir=str(lab["tmp"] / "s" / "models"), run_id="r1",
                   poll_s=0.05, timeout_s=30, retries=1)
    assert list(out["lost"]) == ["gone"]
    assert "relay on s: rsync to gone (nohost) failed 2 times" in out["lost"]["gone"]
    assert f"{len(files)} file(s) not sent" in out["lost"]["gone"]


def test_a_child_given_up_does_not_stop_its_siblings(lab):
    """One child's rsync keeps failing: the relay gives up on that child alone, pushes the abort
    file to it only (never to its siblings, never its own), and serves the siblings to the end."""
    files = files_of(n=2)
    man = manifest_of(files)
    src = lab["local"]("s")
    put(src, {"config.json": files["config.json"]})
    for c in ("a", "b"):
        lab["local"](c)
    (lab["tmp"] / "bad" / "models").mkdir(parents=True)  # its snapshot dir is missing: every rsync fails
    done = {}

    def go():
        done["out"] = ck.relay(str(src), man, [{"name": c, "address": c} for c in ("a", "bad", "b")], host="s",
                               rsh=lab["rsh"], rel_dir=lab["rel"], model_dir=str(lab["tmp"] / "s" / "models"),
                               run_id="r1", poll_s=0.05, timeout_s=60, retries=1)

    t = threading.Thread(target=go)
    t.start()
    time.sleep(1.0)  # the lost child is given up while the download still runs
    put(src, {p: b for p, b in files.items() if p != "config.json"})
    t.join(60)
    out = done["out"]
    assert list(out["lost"]) == ["bad"] and "rsync to bad (bad) failed 2 times" in out["lost"]["bad"]
    for c in ("a", "b"):
        assert {p: (lab["local"](c) / p).read_bytes() for p in files} == files, c
    assert out["sent"] == {"a": len(files), "b": len(files)}
    abort = ".glmops-locks/relay-r1.abort"
    assert "rsync to bad" in (lab["tmp"] / "bad" / "models" / abort).read_text()
    assert not (lab["tmp"] / "a" / "models" / abort).exists() and not (lab["tmp"] / "s" / "models" / abort).exists()


def test_failed_download_stops_the_source_relay_and_the_subtree(lab, tmp_path):
    files = files_of(n=1)
    man = manifest_of(files)
    put(lab["local"]("s"), {"config.json": files["config.json"]})
    progress = tmp_path / "progress.json"
    progress.write_text('{"state": "failed", "error": "[VERIFY] model-0.safetensors: sha256 ..."}')
    errors = {}

    def child():
        try:
            run_relay(lab, "a", ["b"], man, parent="s", timeout_s=30)
        except ck.CheckpointError as exc:
            errors["a"] = exc

    t = threading.Thread(target=child)
    t.start()
    with pytest.raises(ck.CheckpointError) as err:
        run_relay(lab, "s", ["a"], man, timeout_s=30, progress_file=str(progress))
    assert "the download on s failed" in err.value.message and "VERIFY" in err.value.message
    t.join(30)
    # the abort file reached a, whose relay stopped naming its parent and the reason
    assert "s stopped" in errors["a"].message and "VERIFY" in errors["a"].message
    assert errors["a"].code == "RELAY"


def test_download_job_ending_early_stops_the_source_relay(lab, tmp_path):
    files = files_of(n=1)
    job = tmp_path / "job"
    job.write_text('{"failed": true, "msg": "[F10_DISK] not enough disk"}')
    with pytest.raises(ck.CheckpointError) as err:
        run_relay(lab, "s", ["a"], manifest_of(files), timeout_s=30, async_results_file=str(job))
    assert "ended without every file" in err.value.message and "F10_DISK" in err.value.message


def test_relay_refuses_a_manifest_path_outside_the_snapshot(lab):
    man = {"repo": "o/m", "commit": COMMIT, "files": [{"path": "../x", "size": 1, "blob_id": ""}]}
    with pytest.raises(ck.CheckpointError) as err:
        run_relay(lab, "s", ["a"], man, timeout_s=1)
    assert err.value.code == "HUB"


def test_download_writes_the_manifest_before_the_first_blob(tmp_path, monkeypatch):
    """The relay starts from the manifest file: download() writes it (0600) right after
    resolving, before the space check and before any blob."""
    man = manifest_of({"config.json": b"{}"})
    seen = {}
    monkeypatch.setattr(ck, "resolve", lambda *a, **k: man)

    def no_blob(*a, **k):
        seen["manifest"] = (tmp_path / "m.json").read_text()
        raise ck.CheckpointError("F10_DISK", "stop here")

    monkeypatch.setattr(ck, "space_check", no_blob)
    with pytest.raises(ck.CheckpointError):
        ck.download("o/m", COMMIT, str(tmp_path / "models/o/m" / COMMIT), model_dir=str(tmp_path / "models"),
                    manifest_file=str(tmp_path / "m.json"))
    assert COMMIT in seen["manifest"]
    assert stat.S_IMODE(os.stat(tmp_path / "m.json").st_mode) == 0o600


# ------------------------------------------------------------------------------ the module's waits
def ad_hoc(args: dict) -> tuple[dict, str]:
    """glmops_checkpoint on localhost through the ansible CLI; (result, output)."""
    import json
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ, ANSIBLE_CONFIG=str(root / "ansible.cfg"), ANSIBLE_CALLBACK_RESULT_FORMAT="json",
               ANSIBLE_LOCALHOST_WARNING="0")
    r = subprocess.run([str(Path(sys.executable).parent / "ansible"), "localhost", "-c", "local", "-e",
                        f"ansible_python_interpreter={sys.executable}", "-m", "glmops_checkpoint", "-a",
                        json.dumps(args)], capture_output=True, text=True, env=env, cwd=str(root), timeout=120)
    assert "=>" in r.stdout, r.stdout + r.stderr
    return json.loads(r.stdout.split("=>", 1)[1]), r.stdout


def test_module_manifest_and_wait_actions(tmp_path):
    job = tmp_path / "job"
    job.write_text('{"started": 1, "finished": 0, "ansible_job_id": "7"}')
    mfile = tmp_path / "manifest.json"
    res, _ = ad_hoc({"action": "manifest", "manifest_file": str(mfile), "async_results_file": str(job), "wait_s": 0.3})
    assert res["manifest"] is None and not res["finished"]  # the download has not resolved yet
    mfile.write_text('{"repo": "o/m", "commit": "%s", "files": [{"path": "a", "size": 1, "blob_id": ""}]}' % COMMIT)
    res, _ = ad_hoc({"action": "manifest", "manifest_file": str(mfile), "async_results_file": str(job)})
    assert res["finished"] and res["manifest"]["commit"] == COMMIT
    res, _ = ad_hoc({"action": "wait", "async_results_file": str(job), "wait_s": 0.3})
    assert not res["finished"] and job.exists()
    job.write_text('{"changed": true, "sent": {"lab-4": 8}, "batches": 3}')
    res, _ = ad_hoc({"action": "wait", "async_results_file": str(job)})
    assert res["finished"] and res["sent"] == {"lab-4": 8} and res["changed"] and not job.exists()
    job.write_text('{"failed": true, "msg": "[RELAY] relay on lab-2: rsync to lab-4 (10.0.0.4) failed 3 times",'
                   ' "code": "RELAY", "files": ["a"]}')
    res, text = ad_hoc({"action": "wait", "async_results_file": str(job)})
    assert "FAILED!" in text and "relay on lab-2" in res["msg"] and res["files"] == ["a"] and not job.exists()


# ------------------------------------------------------------------------------ keys and trust
def test_keys_made_once_and_trust_accepts_only_the_parent(tmp_path):
    import pwd

    me = pwd.getpwuid(os.getuid()).pw_name
    key = tmp_path / "state" / "fanout_ed25519"
    hostkey = tmp_path / "ssh_host_ed25519_key.pub"
    hostkey.write_text("ssh-ed25519 AAAAhost root@h\n")
    first = ck.relay_keys(str(key), "lab-2", str(hostkey))
    assert first["changed"] and first["pubkey"].endswith("glmops-checkpoint-fanout@lab-2")
    assert first["host_key"] == "ssh-ed25519 AAAAhost"
    assert stat.S_IMODE(os.stat(key).st_mode) == 0o600
    again = ck.relay_keys(str(key), "lab-2", None)
    assert not again["changed"] and again["pubkey"] == first["pubkey"] and again["host_key"] is None

    auth = tmp_path / "home" / ".ssh" / "authorized_keys"
    auth.parent.mkdir(parents=True)
    auth.write_text("ssh-ed25519 AAAAop operator@laptop\n"
                    'restrict,from="10.0.0.1",command="/usr/bin/rrsync -wo /models" ssh-ed25519 AAAAold '
                    "glmops-checkpoint-fanout@lab-1\n")
    kh = tmp_path / "known_hosts"
    args = dict(known_hosts=str(kh), children=[{"address": "10.0.0.4", "host_key": "ssh-ed25519 AAAA4"}],
                authorized_keys=str(auth), parent="lab-2", parent_address="10.0.0.2",
                parent_pubkey=first["pubkey"], model_dir="/models", user=me)
    assert ck.relay_trust(**args)["changed"]
    lines = auth.read_text().splitlines()
    assert lines == ["ssh-ed25519 AAAAop operator@laptop",  # other keys stay; lab-1's push key is gone
                     f'restrict,from="10.0.0.2",command="/usr/bin/rrsync -wo /models" {first["pubkey"]}']
    assert stat.S_IMODE(os.stat(auth).st_mode) == 0o600
    assert kh.read_text() == "10.0.0.4 ssh-ed25519 AAAA4\n"
    assert not ck.relay_trust(**args)["changed"]  # a second run changes nothing
    with pytest.raises(ck.CheckpointError) as err:  # the parent failed before it made its key
        ck.relay_trust(**dict(args, parent_pubkey=""))
    assert "no push key of lab-2" in err.value.message
