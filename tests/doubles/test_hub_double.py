"""The hub double against the REAL huggingface-hub client (one subprocess per case,
because huggingface-hub reads HF_ENDPOINT at import time)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from hub_double import HubDouble, git_blob_id  # noqa: E402

REPO = "lab/tiny-model"
COMMIT = "0123456789abcdef0123456789abcdef01234567"

CLIENT = r"""
import json, sys
from huggingface_hub import snapshot_download
args = json.loads(sys.argv[1])
try:
    path = snapshot_download(**args)
    print(json.dumps({"ok": True, "path": path}))
except Exception as exc:
    print(json.dumps({"ok": False, "type": type(exc).__name__,
                      "mro": [c.__name__ for c in type(exc).__mro__], "msg": str(exc)}))
"""


def make_repo(root: Path) -> dict[str, bytes]:
    """A small checkpoint-like repo: JSON configs, an LFS safetensors blob, a nested file."""
    files = {
        "config.json": json.dumps({"model_type": "llama", "head_dim": 64}).encode(),
        "tokenizer_config.json": b'{"model_max_length": 2048}',
        "model.safetensors": os.urandom(300_000),
        "extra/notes.txt": b"nested file\n",
    }
    for rel, data in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    return files


@pytest.fixture
def repo(tmp_path):
    src = tmp_path / "src"
    return src, make_repo(src)


@pytest.fixture
def hub(repo):
    src, _ = repo
    with HubDouble(page_size=2) as h:
        h.add_repo(REPO, str(src), commit=COMMIT)
        yield h


def download(hub_url: str, tmp_path: Path, token: str | None = None, timeout: float = 60,
             **kwargs) -> dict:
    args = {"repo_id": REPO, "cache_dir": str(tmp_path / "cache"), **kwargs}
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env.update(HF_ENDPOINT=hub_url, HF_HOME=str(tmp_path / "hfhome"),
               HF_HUB_DISABLE_PROGRESS_BARS="1", HF_HUB_DISABLE_TELEMETRY="1",
               HF_HUB_ETAG_TIMEOUT="5", HF_HUB_DOWNLOAD_TIMEOUT="5")
    if token:
        env["HF_TOKEN"] = token
    r = subprocess.run([sys.executable, "-c", CLIENT, json.dumps(args)], capture_output=True,
                       text=True, env=env, timeout=timeout)
    assert r.stdout.strip(), r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def tree_of(path: str) -> dict[str, bytes]:
    base = Path(path)
    return {p.relative_to(base).as_posix(): p.read_bytes() for p in base.rglob("*")
            if p.is_file() and ".cache" not in p.parts}


def test_full_download_counts_bytes(hub, repo, tmp_path):
    _, files = repo
    res = download(hub.url, tmp_path, revision="main")
    assert res["ok"], res
    assert res["path"].endswith(f"snapshots/{COMMIT}")
    assert tree_of(res["path"]) == files
    stats = hub.stats()
    assert stats["bytes_by_client"] == {"127.0.0.1": sum(len(d) for d in files.values())}
    paths = [(r["method"], r["path"].split("?")[0]) for r in stats["requests"]]
    assert ("GET", f"/api/models/{REPO}/revision/main") in paths
    assert sum(1 for m, p in paths if m == "GET" and "/tree/" in p) == 3  # 4 files + 1 dir, pages of 2
    assert sum(1 for m, p in paths if m == "HEAD" and "/resolve/" in p) == len(files)


def test_drop_once_small_file_is_refetched(hub, repo, tmp_path):
    _, files = repo
    hub.set_faults([{"kind": "drop", "path": "model.safetensors", "after_bytes": 100_000}])
    res = download(hub.url, tmp_path, revision=COMMIT)
    assert res["ok"], res
    assert tree_of(res["path"]) == files
    gets = [r for r in hub.stats()["requests"]
            if r["method"] == "GET" and r["path"].endswith("model.safetensors")]
    # huggingface-hub 2.4.0 counts resumable bytes per 10 MiB read chunk: nothing to resume yet
    assert [(g["status"], g["range"], g["bytes"], g["dropped"]) for g in gets] == [
        (200, None, 100_000, True), (200, None, 300_000, False)]
    assert hub.stats()["bytes_by_client"]["127.0.0.1"] == sum(map(len, files.values())) + 100_000


def test_drop_once_big_file_resumes_with_range(tmp_path):
    chunk = 10 * 1024 * 1024
    big = os.urandom(chunk + 2_000_000)
    with HubDouble() as h:
        h.add_files(REPO, {"big.safetensors": big}, commit=COMMIT)
        h.set_faults([{"kind": "drop", "path": "big.safetensors", "after_bytes": chunk + 500_000}])
        res = download(h.url, tmp_path, revision=COMMIT)
        assert res["ok"], res
        assert tree_of(res["path"]) == {"big.safetensors": big}
        gets = [r for r in h.stats()["requests"] if r["method"] == "GET" and "/resolve/" in r["path"]]
        assert [(g["status"], g["range"], g["bytes"]) for g in gets] == [
            (200, None, chunk + 500_000), (206, f"bytes={chunk}-", len(big) - chunk)]


def test_drop_always_raises_real_error_then_rerun_completes(hub, repo, tmp_path):
    _, files = repo
    hub.set_faults([{"kind": "drop", "path": "model.safetensors", "after_bytes": 1000,
                     "times": -1}])
    res = download(hub.url, tmp_path, revision=COMMIT)
    assert not res["ok"]
    assert res["type"] == "RemoteProtocolError"
    assert "peer closed connection" in res["msg"]
    hub.reset()
    res = download(hub.url, tmp_path, revision=COMMIT)
    assert res["ok"], res
    assert tree_of(res["path"]) == files
    # the rerun fetched only what was missing
    gets = [r["path"] for r in hub.stats()["requests"] if r["method"] == "GET"
            and "/resolve/" in r["path"]]
    assert gets == [f"/{REPO}/resolve/{COMMIT}/model.safetensors"]


@pytest.mark.parametrize("header,needle", [
    ("ETag", "does not have an ETag"),
    ("X-Repo-Commit", "missing the 'X-Repo-Commit' header"),
])
def test_missing_header_real_error(hub, tmp_path, header, needle):
    hub.set_faults([{"kind": "omit_header", "header": header, "path": "config.json"}])
    res = download(hub.url, tmp_path, revision=COMMIT)
    assert not res["ok"]
    assert res["type"] == "LocalEntryNotFoundError"
    assert needle in res["msg"]


def test_missing_content_length_still_downloads(hub, repo, tmp_path):
    _, files = repo
    hub.set_faults([{"kind": "omit_header", "header": "Content-Length"}])
    res = download(hub.url, tmp_path, revision=COMMIT)
    assert res["ok"], res
    assert tree_of(res["path"]) == files


def test_wrong_content_length_consistency_error(hub, tmp_path):
    hub.set_faults([{"kind": "wrong_content_length", "path": "model.safetensors", "delta": 10}])
    res = download(hub.url, tmp_path, revision=COMMIT)
    assert not res["ok"]
    assert "Consistency check failed: file should be of size 300010 but has size 300000" in res["msg"]


def test_unknown_revision(hub, tmp_path):
    res = download(hub.url, tmp_path, revision="v9.9")
    assert res["type"] == "RevisionNotFoundError"
    assert "Revision Not Found" in res["msg"]


def test_unknown_repo(hub, tmp_path):
    res = download(hub.url, tmp_path, repo_id="lab/nope")
    assert res["type"] == "RepositoryNotFoundError"


def test_auth_token(repo, tmp_path):
    src, files = repo
    with HubDouble(required_token="hf_right") as h:
        h.add_repo(REPO, str(src), commit=COMMIT)
        wrong = download(h.url, tmp_path / "a", token="hf_wrong")
        assert wrong["type"] == "HfHubHTTPError"
        assert "401" in wrong["msg"]
        missing = download(h.url, tmp_path / "b")
        assert missing["type"] == "RepositoryNotFoundError"
        ok = download(h.url, tmp_path / "c", token="hf_right")
        assert ok["ok"], ok
        assert tree_of(ok["path"]) == files
        auth = h.stats()["auth"]
        assert {a["valid"] for a in auth if a["present"]} == {True, False}
        assert "hf_right" not in json.dumps(h.stats())
        assert "hf_wrong" not in json.dumps(h.stats())


def test_lfs_cdn_redirect_drops_auth(repo, tmp_path):
    src, files = repo
    with HubDouble(required_token="hf_right", lfs_redirect_host="localhost") as h:
        h.add_repo(REPO, str(src), commit=COMMIT)
        res = download(h.url, tmp_path, token="hf_right", revision=COMMIT)
        assert res["ok"], res
        assert tree_of(res["path"]) == files
        cdn = [a for a in h.stats()["auth"] if "/_double/cdn/" in a["path"]]
        assert cdn and not any(a["present"] for a in cdn)


def _get(url, headers=None):
    req = urllib.request.Request(url, headers=headers or {})
    with urllib.request.urlopen(req, timeout=10) as r:
        return r.status, dict(r.headers), r.read()


def test_tree_metadata_and_faults(hub, repo):
    _, files = repo
    base = f"{hub.url}/api/models/{REPO}/tree/{COMMIT}"
    hub.page_size = 100
    _, _, body = _get(base + "?recursive=true&expand=false")
    entries = {e["path"]: e for e in json.loads(body)}
    assert entries["extra"]["type"] == "directory"
    cfg = entries["config.json"]
    assert cfg["oid"] == git_blob_id(files["config.json"]) and "lfs" not in cfg
    st = entries["model.safetensors"]
    import hashlib
    assert st["lfs"]["oid"] == hashlib.sha256(files["model.safetensors"]).hexdigest()
    assert st["size"] == st["lfs"]["size"] == 300_000
    _, _, top = _get(base)
    assert sorted(e["path"] for e in json.loads(top)) == ["config.json", "extra",
                                                          "model.safetensors",
                                                          "tokenizer_config.json"]
    hub.set_faults([{"kind": "tree_wrong_size", "path": "model.safetensors", "delta": 7},
                    {"kind": "tree_wrong_sha256", "path": "model.safetensors"}])
    bad = {e["path"]: e for e in json.loads(_get(base + "?recursive=true")[2])}
    assert bad["model.safetensors"]["size"] == 300_007
    assert bad["model.safetensors"]["lfs"]["oid"] != st["lfs"]["oid"]
    _, h, _ = _get(f"{hub.url}/{REPO}/resolve/{COMMIT}/model.safetensors",
                   {"Range": "bytes=299990-"})
    assert h["Content-Range"] == "bytes 299990-299999/300000"
    assert h["ETag"] == f'"{st["lfs"]["oid"]}"'


def test_slow_fault_and_admin_endpoints(hub):
    req = urllib.request.Request(f"{hub.url}/_double/faults", method="POST", data=json.dumps(
        [{"kind": "slow", "bytes_per_s": 200_000, "path": "model.safetensors"}]).encode())
    with urllib.request.urlopen(req, timeout=10) as r:
        assert json.loads(r.read())["faults"][0]["kind"] == "slow"
    t0 = time.monotonic()
    _, _, body = _get(f"{hub.url}/{REPO}/resolve/{COMMIT}/model.safetensors")
    took = time.monotonic() - t0
    assert len(body) == 300_000 and 1.3 < took < 6, took
    bad = urllib.request.Request(f"{hub.url}/_double/faults", method="POST",
                                 data=b'[{"kind": "explode"}, {"kind": "drop"}]')
    with pytest.raises(urllib.error.HTTPError) as exc:
        urllib.request.urlopen(bad, timeout=10)
    msg = json.loads(exc.value.read())["error"]
    assert "faults[0].kind 'explode' unknown" in msg and "faults[1] (drop): missing key 'after_bytes'" in msg
    stats = json.loads(_get(f"{hub.url}/_double/stats")[2])
    assert stats["bytes_by_client"]["127.0.0.1"] == 300_000


def test_stall_fault_holds_the_transfer_until_released(hub):
    """``stall``: K bytes, then silence on an open connection until release; once by default."""
    hub.set_faults([{"kind": "stall", "after_bytes": 1000, "path": "model.safetensors"}])
    url = f"{hub.url}/{REPO}/resolve/{COMMIT}/model.safetensors"
    got: dict = {}

    def reader():
        with urllib.request.urlopen(url, timeout=600) as r:
            got["first"] = r.read(1000)
            try:
                got["rest"] = r.read()
            except Exception as exc:  # http.client.IncompleteRead: closed 1000 bytes in
                got["error"] = type(exc).__name__

    t = threading.Thread(target=reader, daemon=True)
    t.start()
    deadline = time.monotonic() + 60
    while not hub.stats()["stalled"] and time.monotonic() < deadline:
        time.sleep(0.02)
    assert hub.stats()["stalled"] == [{"path": "model.safetensors", "bytes": 1000}]
    assert t.is_alive()  # held: the reader still waits for the rest
    req = urllib.request.Request(f"{hub.url}/_double/release", method="POST", data=b"")
    with urllib.request.urlopen(req, timeout=60) as r:
        assert json.loads(r.read()) == {"ok": True}
    t.join(60)
    assert not t.is_alive() and len(got["first"]) == 1000 and got.get("error") == "IncompleteRead", got
    stats = hub.stats()
    assert stats["stalled"] == []
    gets = [r for r in stats["requests"] if r["method"] == "GET" and "/resolve/" in r["path"]]
    assert [(g["bytes"], g["stalled"]) for g in gets] == [(1000, True)]
    _, _, body = _get(url)  # fired once: the next GET is whole
    assert len(body) == 300_000


def test_cli_serves_repo_dir_layout(repo, tmp_path):
    src, files = repo
    layout = tmp_path / "repos" / "lab" / "tiny-model"
    (layout / COMMIT).parent.mkdir(parents=True)
    os.symlink(src, layout / COMMIT)
    (layout / "refs").mkdir()
    (layout / "refs" / "v1").write_text(COMMIT + "\n")
    proc = subprocess.Popen([sys.executable, str(Path(__file__).parent / "hub_double.py"),
                             "--repo-dir", str(tmp_path / "repos")], stdout=subprocess.PIPE,
                            text=True)
    try:
        line = proc.stdout.readline().strip()
        assert line.startswith("HUB_DOUBLE_URL=")
        url = line.split("=", 1)[1]
        info = json.loads(_get(f"{url}/api/models/{REPO}/revision/v1")[2])
        assert info["sha"] == COMMIT
        res = download(url, tmp_path, revision="v1")
        assert res["ok"], res
        assert tree_of(res["path"]) == files
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_serves_lab_tiny_model_work_tree(tmp_path):
    tinymodel = pytest.importorskip("glmops.lab.tinymodel")
    model = tinymodel.ensure_tiny_model(tmp_path / "models")
    with HubDouble(str(tmp_path / "models")) as h:
        res = download(h.url, tmp_path, repo_id=model.repo_id, revision="main")
        assert res["ok"], res
        assert res["path"].endswith(f"snapshots/{model.commit}")
        got = tree_of(res["path"])
        assert got == tinymodel.repo_files()
        served = h.stats()["bytes_by_client"]["127.0.0.1"]
        assert served == sum(len(d) for d in got.values())
        tree = json.loads(_get(f"{h.url}/api/models/{model.repo_id}/tree/{model.commit}"
                               "?recursive=true")[2])
        by_path = {e["path"]: e for e in tree}
        for f in model.files():
            entry = by_path[f["path"]]
            if "lfs" in entry:
                assert entry["lfs"]["oid"] == f["sha256"]
            else:
                assert entry["oid"] == f["blob_sha1"]


DRAFTER = "RedHatAI/GLM-5.3-speculator.dspark"  # seed 004 line 176: a dotted repo name
DRAFTER_COMMIT = "fedcba9876543210fedcba9876543210fedcba98"


def test_cli_serves_the_model_and_its_drafter_each_at_its_own_commit(repo, tmp_path):
    """Issue 14 item 9: `--add` serves seed 004's DSpark drafter repo beside the model's; the real
    client fetches each at its pinned commit and gets only that repo's files."""
    src, files = repo
    drafter_src = tmp_path / "drafter"
    drafter_files = {"config.json": json.dumps({"architectures": ["DSparkDraftModel"], "block_size": 8}).encode(),
                     "model.safetensors": os.urandom(120_000)}
    for rel, data in drafter_files.items():
        (drafter_src / rel).parent.mkdir(parents=True, exist_ok=True)
        (drafter_src / rel).write_bytes(data)
    proc = subprocess.Popen([sys.executable, str(Path(__file__).parent / "hub_double.py"),
                             "--add", f"{REPO}={src}@{COMMIT}", "--add", f"{DRAFTER}={drafter_src}@{DRAFTER_COMMIT}"],
                            stdout=subprocess.PIPE, text=True)
    try:
        url = proc.stdout.readline().strip().split("=", 1)[1]
        model = download(url, tmp_path / "m", revision=COMMIT)
        drafter = download(url, tmp_path / "d", repo_id=DRAFTER, revision=DRAFTER_COMMIT)
        assert model["ok"] and drafter["ok"], (model, drafter)
        assert model["path"].endswith(f"snapshots/{COMMIT}") and drafter["path"].endswith(f"snapshots/{DRAFTER_COMMIT}")
        assert tree_of(model["path"]) == files and tree_of(drafter["path"]) == drafter_files
        wrong = download(url, tmp_path / "w", repo_id=DRAFTER, revision=COMMIT)  # the model's commit is not the drafter's
        assert not wrong["ok"] and "RevisionNotFoundError" in wrong["mro"], wrong
    finally:
        proc.terminate()
        proc.wait(timeout=10)
