"""glmops.checkpoint against the hub double with the REAL huggingface-hub client (in process:
every call passes ``endpoint=``, so HF_ENDPOINT is not needed)."""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from glmops import checkpoint as ck

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "doubles"))
from hub_double import HubDouble  # noqa: E402

REPO = "glmops-test/ckpt"
COMMIT = "89abcdef0123456789abcdef0123456789abcdef"
MiB = 1024 * 1024


def repo_files(big: int = 300_000) -> dict[str, bytes]:
    """A checkpoint-like repo: configs (git files), two LFS shards, a nested file."""
    rnd = __import__("random").Random(7)
    return {
        "config.json": json.dumps({"model_type": "llama", "head_dim": 64}).encode(),
        "tokenizer.json": b'{"version": "1.0"}' * 50,
        "model-00001-of-00002.safetensors": rnd.randbytes(big),
        "model-00002-of-00002.safetensors": rnd.randbytes(big // 2),
        "original/notes.txt": b"not for serving\n",
    }


@pytest.fixture(autouse=True)
def _no_hub_env(monkeypatch, tmp_path):
    for key in list(os.environ):
        if key.startswith("HF_"):
            monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.setenv("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    monkeypatch.setenv("HF_HUB_ETAG_TIMEOUT", "5")
    monkeypatch.setenv("HF_HUB_DOWNLOAD_TIMEOUT", "5")


@pytest.fixture
def files():
    return repo_files()


@pytest.fixture
def hub(files):
    with HubDouble() as h:
        h.add_files(REPO, files, commit=COMMIT)
        yield h


def resolve_gets(hub) -> list[dict]:
    return [r for r in hub.stats()["requests"] if r["method"] == "GET" and "/resolve/" in r["path"]]


def tree(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*"))
            if p.is_file() and ".cache" not in p.relative_to(path).parts}


def test_download_pins_verifies_and_reruns_without_hub_bytes(hub, files, tmp_path):
    state = tmp_path / "state"
    progress = tmp_path / "progress.json"
    res = ck.download(REPO, COMMIT, model_dir=str(tmp_path / "models"), endpoint=hub.url,
                      state_dir=str(state), progress_file=str(progress), margin_bytes=0)
    local = tmp_path / "models" / REPO / COMMIT
    assert res["local_dir"] == str(local) and res["commit"] == COMMIT
    assert res["changed"] and res["verified"]
    assert sorted(res["fetched"]) == sorted(files) and res["complete_before"] == []
    assert tree(local) == files
    assert hub.stats()["bytes_by_client"]["127.0.0.1"] == sum(map(len, files.values()))
    marker = json.loads(Path(ck.marker_path(str(state), REPO, COMMIT)).read_text())
    shard = next(f for f in marker["manifest"]["files"] if f["path"] == "model-00001-of-00002.safetensors")
    assert shard["sha256"] == hashlib.sha256(files[shard["path"]]).hexdigest()
    assert json.loads(progress.read_text())["state"] == "done"
    assert json.loads(progress.read_text())["bytes_done"] == sum(map(len, files.values()))

    hub.reset()
    again = ck.download(REPO, COMMIT, model_dir=str(tmp_path / "models"), endpoint=hub.url,
                        state_dir=str(state), margin_bytes=0)
    assert not again["changed"] and again["verified"]
    assert hub.stats()["bytes_by_client"] == {}  # nothing fetched again
    assert ck.status(str(local), REPO, COMMIT, str(state))["verified"]
    assert ck.status(str(local), REPO, None, str(state))["verified"]  # unpinned: any marker


def test_marker_goes_stale_when_a_file_changes(hub, tmp_path):
    state, local = tmp_path / "state", tmp_path / "m"
    ck.download(REPO, COMMIT, str(local), endpoint=hub.url, state_dir=str(state), margin_bytes=0)
    (local / "config.json").write_text('{"tampered": true}')
    assert not ck.status(str(local), REPO, COMMIT, str(state))["verified"]
    with pytest.raises(ck.CheckpointError) as err:
        ck.verify(str(local), ck.Manifest.from_dict(json.loads(
            Path(ck.marker_path(str(state), REPO, COMMIT)).read_text())["manifest"]))
    assert err.value.code == "VERIFY" and err.value.files == ["config.json"]


def test_allow_patterns_limit_the_files(hub, tmp_path):
    res = ck.download(REPO, COMMIT, str(tmp_path / "m"), endpoint=hub.url,
                      allow_patterns=["*.json", "*.safetensors"], margin_bytes=0)
    assert "original/notes.txt" not in res["fetched"]
    assert sorted(tree(tmp_path / "m")) == sorted(["config.json", "tokenizer.json",
                                                   "model-00001-of-00002.safetensors",
                                                   "model-00002-of-00002.safetensors"])
    assert all("notes.txt" not in r["path"] for r in resolve_gets(hub))


def test_branch_refused_offline_and_resolved_online(hub, tmp_path):
    with pytest.raises(ck.CheckpointError) as err:
        ck.download(REPO, "main", str(tmp_path / "m"), endpoint=hub.url)
    assert err.value.code == "INPUT" and "40-hex commit" in err.value.message and "F12" in err.value.message
    assert hub.stats()["requests"] == []  # refused before contacting the hub
    res = ck.download(REPO, "main", str(tmp_path / "m"), endpoint=hub.url, offline=False, margin_bytes=0)
    assert res["commit"] == COMMIT


def test_unknown_revision_names_it(hub, tmp_path):
    other = "0" * 40
    with pytest.raises(ck.CheckpointError) as err:
        ck.download(REPO, other, str(tmp_path / "m"), endpoint=hub.url)
    assert err.value.code == "REVISION" and other in err.value.message


@pytest.mark.parametrize("fault,needle", [
    ({"kind": "tree_wrong_size", "delta": 3}, "size"),
    ({"kind": "tree_wrong_sha256"}, "sha256"),
])
def test_wrong_hub_metadata_fails_naming_the_file(hub, tmp_path, fault, needle):
    bad = "model-00002-of-00002.safetensors"
    hub.set_faults([dict(fault, path=bad)])
    state = tmp_path / "state"
    with pytest.raises(ck.CheckpointError) as err:
        ck.download(REPO, COMMIT, str(tmp_path / "m"), endpoint=hub.url, state_dir=str(state), margin_bytes=0)
    assert err.value.files == [bad]
    assert bad in err.value.message and needle in err.value.message
    assert not Path(ck.marker_path(str(state), REPO, COMMIT)).exists()


def test_wrong_content_length_fails_naming_the_file(hub, tmp_path):
    bad = "model-00001-of-00002.safetensors"
    hub.set_faults([{"kind": "wrong_content_length", "path": bad}])
    with pytest.raises(ck.CheckpointError) as err:
        ck.download(REPO, COMMIT, str(tmp_path / "m"), endpoint=hub.url, margin_bytes=0)
    assert bad in err.value.files and bad in err.value.message


def test_too_little_disk_fails_before_any_blob(hub, tmp_path):
    """F10: an inflated tree listing (1 PiB more) against the real free space."""
    hub.set_faults([{"kind": "tree_wrong_size", "delta": 2 ** 50, "path": "model-00001-of-00002.safetensors"}])
    local = tmp_path / "m"
    with pytest.raises(ck.CheckpointError) as err:
        ck.download(REPO, COMMIT, str(local), endpoint=hub.url)
    e = err.value
    assert e.code == "F10_DISK"
    assert e.details["needed"] > e.details["available"] > 0
    assert "needed" in e.message and "available" in e.message and str(e.details["needed"]) in e.message
    assert resolve_gets(hub) == [] and hub.stats()["bytes_by_client"] == {}
    assert not local.exists()


def test_space_check_counts_complete_files_and_margin(hub, files, tmp_path):
    man = ck.resolve(REPO, COMMIT, endpoint=hub.url)
    local = tmp_path / "m"
    (local).mkdir()
    (local / "config.json").write_bytes(files["config.json"])
    sc = ck.space_check(str(local), man, margin_ratio=0.5, margin_bytes=10)
    assert sc.total == sum(map(len, files.values()))
    assert sc.present == len(files["config.json"])
    assert sc.margin == int(sc.total * 0.5)
    assert sc.needed == sc.total - sc.present + sc.margin
    assert sc.available == os.statvfs(local).f_bavail * os.statvfs(local).f_frsize


def test_dropped_connection_then_rerun_fetches_only_the_unfinished_file(hub, files, tmp_path):
    bad = "model-00001-of-00002.safetensors"
    hub.set_faults([{"kind": "drop", "path": bad, "after_bytes": 1000, "times": -1}])
    local = tmp_path / "m"
    with pytest.raises(ck.CheckpointError) as err:
        ck.download(REPO, COMMIT, str(local), endpoint=hub.url, margin_bytes=0)
    assert err.value.code == "HUB" and err.value.files == [bad] and bad in err.value.message
    assert (local / "config.json").read_bytes() == files["config.json"]
    hub.reset()
    res = ck.download(REPO, COMMIT, str(local), endpoint=hub.url, margin_bytes=0)
    assert res["fetched"] == [bad]
    assert [r["path"].rsplit("/", 1)[1] for r in resolve_gets(hub)] == [bad]
    assert tree(local) == files


def _partials(root: Path) -> dict[str, int]:
    """Every ``*.incomplete`` part under ``root`` (wherever the hub client puts them) -> bytes."""
    out = {}
    for p in root.rglob("*.incomplete"):
        with contextlib.suppress(OSError):
            out[str(p)] = p.stat().st_size
    return out


def _wait_for(what: str, cond, proc: subprocess.Popen | None = None, timeout_s: float = 300) -> None:
    """Poll ``cond()`` until true; fail naming ``what`` at the deadline, or at once (with the
    child's output) when ``proc`` exits first. The deadline is far above the seconds it takes."""
    deadline = time.monotonic() + timeout_s
    while not cond():
        if proc is not None and proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"the download exited {proc.returncode} before {what}:\n{out}\n{err}")
        if time.monotonic() > deadline:
            pytest.fail(f"no {what} after {timeout_s:.0f} s")
        time.sleep(0.05)


def test_killed_download_refetches_only_the_unfinished_file(tmp_path):
    """A download killed mid-file (node crash): the rerun requests only the file that was in
    flight, and the dead partial of the killed process is removed.

    Conditions, not timing: the hub double holds big.safetensors after K bytes (``stall``), so
    the download is mid-file for as long as it takes; the child is killed once the double holds
    it, the other files are complete as the client records them, and the client has written
    part of the file (it writes in ``DOWNLOAD_CHUNK_SIZE`` pieces: K is one piece and more).
    Partials are searched for under the whole test dir (local_dir and HF_HOME), wherever the
    client puts them."""
    from huggingface_hub import constants as hf_constants

    piece = hf_constants.DOWNLOAD_CHUNK_SIZE  # huggingface-hub 2.4.0: 10 MiB per write
    held = piece + 2 * MiB
    big = os.urandom(held + 4 * MiB)
    small = os.urandom(2 * MiB)
    with HubDouble() as h:
        h.add_files(REPO, {"config.json": b"{}", "a.safetensors": small, "big.safetensors": big}, commit=COMMIT)
        h.set_faults([{"kind": "stall", "after_bytes": held, "path": "big.safetensors"}])
        local = tmp_path / "m"
        code = ("from glmops import checkpoint as ck; "
                f"ck.download({REPO!r}, {COMMIT!r}, {str(local)!r}, endpoint={h.url!r}, margin_bytes=0)")
        # no read timeout while the double holds the transfer (the fixture's 5 s would retry it)
        env = dict(os.environ, HF_HUB_DOWNLOAD_TIMEOUT="3600")
        proc = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        man = ck.resolve(REPO, COMMIT, endpoint=h.url)
        try:
            _wait_for("held transfer of big.safetensors",
                      lambda: [s["path"] for s in h.stats()["stalled"]] == ["big.safetensors"], proc)
            _wait_for("complete config.json and a.safetensors",
                      lambda: sorted(ck._client_complete(str(local), man)) == ["a.safetensors", "config.json"], proc)
            _wait_for("partial of big.safetensors on disk",
                      lambda: sum(_partials(tmp_path).values()) >= piece, proc)
        finally:
            proc.kill()
            proc.communicate()
        assert (local / "a.safetensors").read_bytes() == small
        assert not (local / "big.safetensors").exists()
        partials = _partials(tmp_path)
        assert 0 < sum(partials.values()) <= held, partials
        in_local = sum(n for p, n in partials.items() if Path(p).is_relative_to(local))
        h.reset()  # ends the held transfer (logged) before clearing the log
        res = ck.download(REPO, COMMIT, str(local), endpoint=h.url, margin_bytes=0)
        assert res["fetched"] == ["big.safetensors"]
        assert sorted(res["complete_before"]) == ["a.safetensors", "config.json"]
        assert res["stale_partial_bytes"] == in_local
        assert [r["path"].rsplit("/", 1)[1] for r in resolve_gets(h)] == ["big.safetensors"]
        assert (local / "big.safetensors").read_bytes() == big
        assert not _partials(local)


def test_connection_dropped_mid_file_resumes_with_range_within_the_run(tmp_path):
    chunk = 10 * MiB
    big = os.urandom(chunk + 2 * MiB)
    with HubDouble() as h:
        h.add_files(REPO, {"big.safetensors": big}, commit=COMMIT)
        h.set_faults([{"kind": "drop", "path": "big.safetensors", "after_bytes": chunk + 500_000}])
        res = ck.download(REPO, COMMIT, str(tmp_path / "m"), endpoint=h.url, margin_bytes=0)
        assert res["verified"]
        gets = resolve_gets(h)
        assert [(g["status"], g["range"]) for g in gets] == [(200, None), (206, f"bytes={chunk}-")]
        assert h.stats()["bytes_by_client"]["127.0.0.1"] == len(big) + 500_000


def test_token_from_a_0600_file_and_never_in_errors(files, tmp_path):
    token = "hf_SECRETtoken0123456789"
    with HubDouble(required_token=token) as h:
        h.add_files(REPO, files, commit=COMMIT)
        tf = tmp_path / "token"
        tf.write_text(token + "\n")
        tf.chmod(0o644)
        with pytest.raises(ck.CheckpointError) as err:
            ck.read_token(str(tf))
        assert "0644" in err.value.message and token not in err.value.message
        tf.chmod(0o600)
        assert ck.read_token(str(tf)) == token
        with pytest.raises(ck.CheckpointError) as err:  # no token: private repo
            ck.download(REPO, COMMIT, str(tmp_path / "a"), endpoint=h.url, margin_bytes=0)
        assert err.value.code == "HUB"
        with pytest.raises(ck.CheckpointError) as err:
            ck.download(REPO, COMMIT, str(tmp_path / "b"), endpoint=h.url, token=token + "x", margin_bytes=0)
        assert token not in str(err.value.to_dict())
        res = ck.download(REPO, COMMIT, str(tmp_path / "c"), endpoint=h.url, token=ck.read_token(str(tf)),
                          margin_bytes=0)
        assert res["verified"] and token not in json.dumps(res)
        assert all(a.get("valid") for a in h.stats()["auth"][-3:])


def test_two_writers_never_race(files, tmp_path):
    """Shared mode: two writers of the same checkpoint; one waits on the lock, the hub serves one copy."""
    with HubDouble() as h:
        h.add_files(REPO, files, commit=COMMIT)
        h.set_faults([{"kind": "slow", "bytes_per_s": 400_000, "path": "*.safetensors"}])
        results, errors = [], []

        def writer():
            try:
                results.append(ck.download(REPO, COMMIT, model_dir=str(tmp_path / "shared"), endpoint=h.url,
                                           state_dir=str(tmp_path / "state"), margin_bytes=0))
            except Exception as exc:  # pragma: no cover - reported below
                errors.append(exc)

        threads = [threading.Thread(target=writer) for _ in range(2)]
        for t in threads:
            t.start()
            time.sleep(0.2)
        for t in threads:
            t.join(60)
        assert not errors
        assert sorted(r["changed"] for r in results) == [False, True]
        waiter = next(r for r in results if not r["changed"])
        assert waiter["lock_waited_s"] > 0.3 or waiter["verified"]
        assert h.stats()["bytes_by_client"]["127.0.0.1"] == sum(map(len, files.values()))
        lock = Path(ck.lock_path(str(tmp_path / "shared"), REPO, COMMIT))
        assert lock.exists()


def test_writer_lock_times_out(tmp_path):
    path = str(tmp_path / "l" / "x.lock")
    with ck.writer_lock(path):
        with pytest.raises(ck.CheckpointError) as err:
            with ck.writer_lock(path, timeout_s=0.3, poll_s=0.1):
                pass
    assert err.value.code == "LOCK"
    with ck.writer_lock(path, timeout_s=0.3):  # released
        pass


def test_verify_copy_names_a_corrupted_file(hub, files, tmp_path):
    src = tmp_path / "src"
    res = ck.download(REPO, COMMIT, str(src), endpoint=hub.url, margin_bytes=0)
    dst = tmp_path / "dst"
    subprocess.run(["cp", "-a", f"{src}/.", str(dst)], check=True)
    bad = "model-00002-of-00002.safetensors"
    data = bytearray((dst / bad).read_bytes())
    data[100] ^= 0xFF
    (dst / bad).write_bytes(bytes(data))
    with pytest.raises(ck.CheckpointError) as err:
        ck.verify_copy(str(dst), res["manifest"], str(tmp_path / "state"))
    assert err.value.files == [bad] and "sha256" in err.value.message
    (dst / bad).write_bytes(files[bad])
    out = ck.verify_copy(str(dst), res["manifest"], str(tmp_path / "state"))
    assert out["changed"] and out["verified"]
    assert not ck.verify_copy(str(dst), res["manifest"], str(tmp_path / "state"))["changed"]


def test_fix_ownership_modes(tmp_path):
    top = tmp_path / "m"
    (top / "sub").mkdir(parents=True)
    (top / "sub" / "f").write_text("x")
    os.chmod(top / "sub" / "f", 0o600)
    assert ck.fix_ownership([str(top)], None, None)
    assert stat.S_IMODE(os.stat(top / "sub").st_mode) == 0o2775
    assert stat.S_IMODE(os.stat(top / "sub" / "f").st_mode) == 0o664
    if not __import__("shutil").which("setfacl"):
        assert not ck.fix_ownership([str(top)], None, None)  # second run: nothing to change


def test_check_inputs_lists_every_problem():
    problems = ck.check_inputs("not a repo", "main", "relative/dir")
    assert len(problems) == 3
    assert ck.check_inputs("org/name", None, "/models/x") == []
    assert ck.check_inputs("org/name", "v1.0", "/m", offline=False) == []


# ---------------------------------------------------------------------------------- F31 watchdog
def _stall_repo(h):
    """config.json, a small shard and big.safetensors: one client write piece (huggingface-hub
    2.4.0 ``DOWNLOAD_CHUNK_SIZE``, 10 MiB) + 6 MiB, so a stall after piece + 2 MiB leaves exactly
    one piece on disk that then does not move."""
    from huggingface_hub import constants as hf_constants

    piece = hf_constants.DOWNLOAD_CHUNK_SIZE
    files = {"config.json": b"{}", "a.safetensors": os.urandom(2 * MiB),
             "big.safetensors": os.urandom(piece + 6 * MiB)}
    h.add_files(REPO, files, commit=COMMIT)
    return files, piece, piece + 2 * MiB


def test_a_stalled_file_is_named_fetched_again_and_the_download_recovers(tmp_path, monkeypatch):
    """F31 ("one file's bytes stop moving ... the download names the stalled file, retries it"):
    the hub double holds big.safetensors once after piece + 2 MiB on an open connection; the
    client has no read timeout that ends it (HF_HUB_DOWNLOAD_TIMEOUT 3600: a hung transfer it does
    not notice), so only the watchdog does: after 4 s (2 s flaked on a machine at load 12: a starved transfer looked stalled) without bytes it names the file, kills that
    transfer alone and fetches the file again, which completes and verifies."""
    monkeypatch.setenv("HF_HUB_DOWNLOAD_TIMEOUT", "3600")
    progress = tmp_path / "progress.json"
    with HubDouble() as h:
        files, piece, held = _stall_repo(h)
        h.set_faults([{"kind": "stall", "after_bytes": held, "path": "big.safetensors"}])
        t0 = time.monotonic()
        res = ck.download(REPO, COMMIT, str(tmp_path / "m"), endpoint=h.url, margin_bytes=0,
                          progress_file=str(progress), stall_timeout_s=4)
        assert time.monotonic() - t0 < 120
        assert res["verified"] and tree(tmp_path / "m") == files
        [stall] = res["stalls"]
        assert stall["path"] == "big.safetensors" and stall["attempt"] == 1 and stall["transfer"] == "default"
        assert piece <= stall["bytes"] <= held and stall["seconds"] >= 4
        assert not res["plain_http"]  # one stall: below the fallback (default 2)
        # the held transfer (logged when the double ends it) and the one that completed
        assert h.stats()["stalled"] == [{"path": "big.safetensors", "bytes": held}]
        assert [g["status"] for g in resolve_gets(h) if g["path"].endswith("/big.safetensors")] == [200]
        data = json.loads(progress.read_text())
        assert data["state"] == "done" and data["stalls"] == res["stalls"]
        assert data["stalled"].startswith("big.safetensors stalled at ")


def test_repeated_stalls_fall_back_to_plain_http_then_fail_naming_the_file(tmp_path, monkeypatch):
    """F31 ("falls back to plain HTTP after repeated stalls; it never polls for days"): a file
    that always stalls is fetched again; from the second stall on every transfer has hf_xet off
    (huggingface-hub 2.4.0: HF_HUB_DISABLE_XET), and its third stall fails the download with
    code STALL naming it and every stall; the other files are complete."""
    monkeypatch.setenv("HF_HUB_DOWNLOAD_TIMEOUT", "3600")
    with HubDouble() as h:
        files, _piece, held = _stall_repo(h)
        h.set_faults([{"kind": "stall", "after_bytes": held, "path": "big.safetensors", "times": -1}])
        local = tmp_path / "m"
        with pytest.raises(ck.CheckpointError) as err:
            ck.download(REPO, COMMIT, str(local), endpoint=h.url, margin_bytes=0, stall_timeout_s=4,
                        stall_fallback_after=2, stall_max=3)
        e = err.value
        assert e.code == "STALL" and e.files == ["big.safetensors"]
        assert "big.safetensors stalled 3 times" in e.message and "plain HTTP" in e.message
        assert [(s["attempt"], s["transfer"]) for s in e.details["stalls"]] == \
            [(1, "default"), (2, "default"), (3, "http")]
        assert (local / "a.safetensors").read_bytes() == files["a.safetensors"]
        assert not (local / "big.safetensors").exists() and not _partials(local)


def test_plain_http_env_turns_the_fast_transfers_off():
    """huggingface-hub 2.4.0 constants.py: HF_HUB_DISABLE_XET=1 disables hf_xet
    (utils/_runtime.is_xet_available), HF_XET_HIGH_PERFORMANCE only tunes it, hf_transfer is
    no longer used (HF_HUB_ENABLE_HF_TRANSFER only warns)."""
    env = ck.plain_http_env({"HF_XET_HIGH_PERFORMANCE": "1", "HF_HUB_ENABLE_HF_TRANSFER": "1", "PATH": "/bin"})
    assert env == {"HF_HUB_DISABLE_XET": "1", "HF_HUB_ENABLE_HF_TRANSFER": "0", "PATH": "/bin"}


def _transfers() -> list[int]:
    """Pids of running per-file transfers (their argv carries the child code)."""
    out = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            with contextlib.suppress(OSError):
                if b"hf_hub_download(repo_id" in Path(f"/proc/{pid}/cmdline").read_bytes():
                    out.append(int(pid))
    return out


def test_a_killed_download_leaves_no_transfer_behind(tmp_path):
    """Each file's transfer dies with the download that started it (PR_SET_PDEATHSIG): a node's
    killed run leaves no writer that could finish a file behind the next run's back."""
    with HubDouble() as h:
        _files, _piece, held = _stall_repo(h)
        h.set_faults([{"kind": "stall", "after_bytes": held, "path": "big.safetensors"}])
        code = ("from glmops import checkpoint as ck; "
                f"ck.download({REPO!r}, {COMMIT!r}, {str(tmp_path / 'm')!r}, endpoint={h.url!r}, margin_bytes=0)")
        env = dict(os.environ, HF_HUB_DOWNLOAD_TIMEOUT="3600")
        before = set(_transfers())
        proc = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        try:
            _wait_for("held transfer of big.safetensors", lambda: h.stats()["stalled"], proc)
            assert set(_transfers()) - before
        finally:
            proc.kill()
            proc.communicate()
        _wait_for("the transfers to end with their download", lambda: not set(_transfers()) - before, timeout_s=30)
