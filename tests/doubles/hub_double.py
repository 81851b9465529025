#!/usr/bin/env python3
"""Hugging Face hub double: the HTTP surface ``huggingface_hub.snapshot_download`` uses.

Standalone, stdlib only (copy it into a lab host that has python3). Written against
huggingface-hub 2.4.0 (``_snapshot_download.py``, ``file_download.py``, ``hf_api.py``,
``utils/_http.py``) and /work/shared/lab-recipe/FINDINGS.md "Hugging Face hub, offline":

* ``GET /api/models/{org}/{name}`` and ``.../revision/{rev}`` -> ``{"id", "sha", "siblings", ...}``;
  unknown revision: 404 + ``X-Error-Code: RevisionNotFound``; unknown repo: 401 +
  ``X-Error-Code: RepoNotFound`` (the hub answers 401 for missing/private repos).
* ``GET /api/models/{org}/{name}/tree/{rev}[/{path}]?recursive=&expand=`` -> list of
  ``{"type": "file"|"directory", "oid", "size", "path", "lfs": {"oid", "size", "pointerSize"}}``,
  paged with a ``Link: <...>; rel="next"`` header (``page_size``, the hub uses 1000).
* ``HEAD``/``GET /{org}/{name}/resolve/{rev}/{path}`` -> ``ETag`` (git blob sha1, or the sha256
  for LFS files), ``X-Repo-Commit``, ``Content-Length``, ``Accept-Ranges``; ``Range: bytes=K-``
  -> 206 (what the client sends to resume). Missing file: 404 + ``X-Error-Code: EntryNotFound``.
  With ``lfs_redirect_host`` set, LFS files answer 302 to ``http://{host}:{port}/_double/cdn/...``
  with ``X-Linked-Etag`` / ``X-Linked-Size`` like the hub's CDN redirect (a different host
  name, so the client drops its Authorization header as it does for the real CDN).

Repos
-----
``repo_dir/<org>/<name>/<40-hex commit>/<files...>``; ``repo_dir/<org>/<name>/refs/<rev>``
holds a commit hash (``main`` defaults to the only commit dir). A ``repo_dir/<org>/<name>/``
that is a git work tree (the lab's tiny model: ``glmops.lab.tinymodel`` builds
``<root>/glmops-lab/tiny-llama`` at a fixed commit) is served at its HEAD commit, so
``--repo-dir ~/.cache/glmops/models`` serves ``glmops-lab/tiny-llama``. In-process:
:meth:`HubDouble.add_repo` (a directory, e.g. the lab's tiny model from
``glmops/lab/tinymodel.py``, with its fixed commit) or :meth:`HubDouble.add_files` (bytes).
Files named like the hub's default LFS patterns (``*.safetensors``, ``*.bin``, ``*.pt``,
``*.gguf`` ...) or larger than 10 MiB are served as LFS.

Auth
----
``required_token`` (``--token-file`` on the CLI, never argv): requests without
``Authorization: Bearer <token>`` get 401 ``RepoNotFound`` (private repo), a wrong token gets
401 ``X-Error-Message: Invalid credentials in Authorization header``. The header value is never
logged; :meth:`stats` records only ``{"scheme", "sha256_12", "valid"}`` per request.

Faults (``set_faults`` / ``POST /_double/faults`` with a JSON list; ``path`` is an fnmatch glob
over the file path in the repo, default ``*``; ``times``: how often it fires, ``-1`` = always)
------------------------------------------------------------------------------------------
* ``{"kind": "drop", "after_bytes": K, "times": 1}``: send K body bytes then close the socket
  (client sees ``RemoteProtocolError: peer closed connection``; huggingface-hub retries with Range).
* ``{"kind": "omit_header", "header": "ETag"|"X-Repo-Commit"|"Content-Length"}`` on resolve.
* ``{"kind": "slow", "bytes_per_s": N}``: throttle resolve bodies.
* ``{"kind": "stall", "after_bytes": K, "times": 1}``: send K body bytes, then hold the connection open
  sending nothing (a hung transfer, the moment a node dies mid-file) until
  :meth:`HubDouble.release_stalls` (``POST /_double/release``), :meth:`reset` or :meth:`stop`;
  then close it. While held, :meth:`stats` lists it under ``stalled`` (``{path, bytes}``).
* ``{"kind": "status", "code": 500, "times": 1}``: answer resolve with that status.
* ``{"kind": "tree_wrong_size", "delta": 1}`` / ``{"kind": "tree_wrong_sha256"}``: lie in the
  tree listing (size + delta; lfs.oid of other content).
* ``{"kind": "wrong_content_length", "delta": -1}``: resolve HEAD announces a wrong size
  (the GET is right, so the client's size check fails: ``Consistency check failed``).

Admin endpoints (JSON): ``GET /_double/stats`` (bytes served per client IP, request log,
auth records, held transfers), ``POST /_double/faults``, ``POST /_double/release`` (end the
held transfers), ``POST /_double/reset`` (ends them too, then clears faults + counters).

CLI::

    hub_double.py --repo-dir DIR [--host 127.0.0.1] [--port 0] [--token-file F]
                  [--add org/name=DIR[@COMMIT]] [--lfs-redirect-host localhost]

prints ``HUB_DOUBLE_URL=http://host:port`` on stdout when listening. Point clients at it with
``HF_ENDPOINT`` (read by huggingface-hub at import time).
"""
from __future__ import annotations

import argparse
import fnmatch
import hashlib
import io
import json
import os
import re
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, quote, unquote, urlsplit

LFS_PATTERNS = ("*.7z", "*.arrow", "*.bin", "*.bz2", "*.ckpt", "*.ftz", "*.gz", "*.h5",
                "*.joblib", "*.mlmodel", "*.model", "*.msgpack", "*.npy", "*.npz", "*.onnx",
                "*.ot", "*.parquet", "*.pb", "*.pickle", "*.pkl", "*.pt", "*.pth", "*.rar",
                "*.safetensors", "*.tar", "*.tflite", "*.tgz", "*.wasm", "*.xz", "*.zip", "*.zst",
                "*tfevents*", "*.gguf")
LFS_MIN_SIZE = 10 * 1024 * 1024
FAULT_KINDS = {
    "drop": {"after_bytes"}, "omit_header": {"header"}, "slow": {"bytes_per_s"}, "stall": {"after_bytes"},
    "status": {"code"}, "tree_wrong_size": set(), "tree_wrong_sha256": set(),
    "wrong_content_length": set(),
}
FAULT_OPTIONAL = {"kind", "path", "times", "delta"}
HEX40 = re.compile(r"^[0-9a-f]{40}$")


def git_blob_id(data: bytes) -> str:
    """Git blob sha1 of ``data`` (what the hub uses as ETag / tree oid for regular files)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def lfs_pointer(sha256: str, size: int) -> bytes:
    """Git LFS pointer file text for a blob."""
    return f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {size}\n".encode()


def git_head(work_tree: str) -> str:
    """HEAD commit of a git work tree, read from ``.git`` (no git binary needed)."""
    gitdir = os.path.join(work_tree, ".git")
    with open(os.path.join(gitdir, "HEAD"), encoding="utf-8") as fh:
        head = fh.read().strip()
    if not head.startswith("ref: "):
        return head
    ref = head[5:]
    loose = os.path.join(gitdir, ref)
    if os.path.exists(loose):
        with open(loose, encoding="utf-8") as fh:
            return fh.read().strip()
    with open(os.path.join(gitdir, "packed-refs"), encoding="utf-8") as fh:
        for line in fh:
            parts = line.split()
            if len(parts) == 2 and parts[1] == ref:
                return parts[0]
    raise ValueError(f"{work_tree}: cannot resolve {ref}")


class RepoFile:
    """One file of a served commit: bytes on disk or in memory plus its hub metadata."""

    def __init__(self, path: str, data: bytes | None = None, disk: str | None = None):
        self.path, self._data, self.disk = path, data, disk
        sha256 = hashlib.sha256()
        if data is not None:
            sha256.update(data)
            self.size = len(data)
        else:
            self.size = os.path.getsize(disk)
            with open(disk, "rb") as fh:
                for block in iter(lambda: fh.read(1 << 20), b""):
                    sha256.update(block)
        self.sha256 = sha256.hexdigest()
        self.lfs = self.size >= LFS_MIN_SIZE or any(
            fnmatch.fnmatch(os.path.basename(path), p) for p in LFS_PATTERNS)
        if self.lfs:
            pointer = lfs_pointer(self.sha256, self.size)
            self.blob_id, self.pointer_size = git_blob_id(pointer), len(pointer)
            self.etag = self.sha256
        else:
            self.blob_id, self.pointer_size = git_blob_id(self.read()), 0
            self.etag = self.blob_id

    def read(self) -> bytes:
        """The file's bytes."""
        if self._data is not None:
            return self._data
        with open(self.disk, "rb") as fh:
            return fh.read()


class Repo:
    """A repo: commits (hash -> {path: RepoFile}) and refs (name -> hash)."""

    def __init__(self, repo_id: str):
        self.repo_id = repo_id
        self.commits: dict[str, dict[str, RepoFile]] = {}
        self.refs: dict[str, str] = {}

    def resolve(self, rev: str) -> str | None:
        """Commit for a commit id, ref name, or ``main`` of a one-commit repo; else None."""
        if rev in self.commits:
            return rev
        if rev in self.refs:
            return self.refs[rev]
        if rev == "main" and len(self.commits) == 1:
            return next(iter(self.commits))
        return None


def tree_commit(files: dict[str, bytes]) -> str:
    """A deterministic 40-hex commit id for a set of files (when none is given)."""
    h = hashlib.sha1()
    for path in sorted(files):
        h.update(path.encode() + b"\0" + git_blob_id(files[path]).encode() + b"\n")
    return h.hexdigest()


class _Server(ThreadingHTTPServer):
    request_queue_size = 128  # snapshot_download runs 8 workers per client
    daemon_threads = True


class HubDouble:
    """In-process hub double; ``with HubDouble() as hub: hub.url`` (threaded HTTP server).

    ``repo_dir``: optional directory in the layout above. ``required_token``: see module doc.
    ``page_size``: tree entries per page. ``lfs_redirect_host``: emulate the CDN redirect.
    """

    def __init__(self, repo_dir: str | None = None, host: str = "127.0.0.1", port: int = 0,
                 required_token: str | None = None, page_size: int = 1000,
                 lfs_redirect_host: str | None = None):
        self.repos: dict[str, Repo] = {}
        self.required_token = required_token
        self.page_size = page_size
        self.lfs_redirect_host = lfs_redirect_host
        self._lock = threading.Lock()
        self.reset()
        if repo_dir:
            self.load_repo_dir(repo_dir)
        self.server = _Server((host, port), _make_handler(self))
        self.server.daemon_threads = True
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ content
    def load_repo_dir(self, repo_dir: str) -> None:
        """Load every ``<org>/<name>/<commit>/`` tree (and ``refs/``) under ``repo_dir``."""
        for org in sorted(os.listdir(repo_dir)):
            if org.startswith(".") or not os.path.isdir(os.path.join(repo_dir, org)):
                continue
            for name in sorted(os.listdir(os.path.join(repo_dir, org))):
                base = os.path.join(repo_dir, org, name)
                if name.startswith(".") or not os.path.isdir(base):
                    continue
                if os.path.isdir(os.path.join(base, ".git")):  # a git work tree at its HEAD
                    self.add_repo(f"{org}/{name}", base, commit=git_head(base))
                    continue
                for entry in sorted(os.listdir(base)):
                    if HEX40.match(entry):
                        self.add_repo(f"{org}/{name}", os.path.join(base, entry), commit=entry)
                refs = os.path.join(base, "refs")
                if os.path.isdir(refs):
                    repo = self.repos[f"{org}/{name}"]
                    for ref in os.listdir(refs):
                        with open(os.path.join(refs, ref), encoding="utf-8") as fh:
                            repo.refs[ref] = fh.read().strip()

    def add_repo(self, repo_id: str, directory: str, commit: str | None = None,
                 refs: dict[str, str] | None = None) -> str:
        """Serve the files under ``directory`` as ``repo_id`` at ``commit``; return the commit.

        ``commit`` defaults to a hash of the content; ``main`` points at it unless ``refs``
        say otherwise. Hidden entries (``.git``, ``.cache``) are skipped.
        """
        files = {}
        for root, dirs, names in os.walk(directory):
            dirs[:] = sorted(d for d in dirs if d not in (".git", ".cache"))
            for n in sorted(names):
                full = os.path.join(root, n)
                files[os.path.relpath(full, directory).replace(os.sep, "/")] = full
        if commit is None:
            blobs = {}
            for p, f in files.items():
                with open(f, "rb") as fh:
                    blobs[p] = fh.read()
            commit = tree_commit(blobs)
        self._add(repo_id, commit, {p: RepoFile(p, disk=f) for p, f in files.items()}, refs)
        return commit

    def add_files(self, repo_id: str, files: dict[str, bytes], commit: str | None = None,
                  refs: dict[str, str] | None = None) -> str:
        """Serve in-memory ``files`` (path -> bytes) as ``repo_id``; return the commit."""
        commit = commit or tree_commit(files)
        self._add(repo_id, commit, {p: RepoFile(p, data=d) for p, d in files.items()}, refs)
        return commit

    def _add(self, repo_id, commit, files, refs):
        if not HEX40.match(commit):
            raise ValueError(f"commit {commit!r} must be 40 lowercase hex characters")
        if repo_id.count("/") != 1:
            raise ValueError(f"repo_id {repo_id!r} must be 'org/name'")
        repo = self.repos.setdefault(repo_id, Repo(repo_id))
        repo.commits[commit] = files
        repo.refs.update(refs if refs is not None else {"main": commit})

    # ------------------------------------------------------------------ control
    def reset(self) -> None:
        """End the held (stalled) transfers, clear faults and counters."""
        if hasattr(self, "_release"):
            self.release_stalls()
        with getattr(self, "_lock", threading.Lock()):
            self._release = threading.Event()
            self.stalled: dict[int, dict] = {}
            self.faults: list[dict] = []
            self.bytes_by_client: dict[str, int] = {}
            self.requests: list[dict] = []
            self.auth_log: list[dict] = []

    def set_faults(self, faults: list[dict]) -> None:
        """Replace the fault list; raise ValueError naming every bad entry/key."""
        problems = []
        if not isinstance(faults, list):
            raise ValueError(f"faults must be a list, got {type(faults).__name__}")
        for n, f in enumerate(faults):
            kind = f.get("kind") if isinstance(f, dict) else None
            if kind not in FAULT_KINDS:
                problems.append(f"faults[{n}].kind {kind!r} unknown; accepted: "
                                f"{', '.join(sorted(FAULT_KINDS))}")
                continue
            for k in sorted(set(f) - FAULT_KINDS[kind] - FAULT_OPTIONAL):
                problems.append(f"faults[{n}] ({kind}): unknown key {k!r}")
            for k in sorted(FAULT_KINDS[kind] - set(f)):
                problems.append(f"faults[{n}] ({kind}): missing key {k!r}")
        if problems:
            raise ValueError("; ".join(problems))
        with self._lock:
            self.faults = [dict(f, times=f.get("times", 1 if f["kind"] in ("drop", "stall", "status")
                                                else -1), fired=0) for f in faults]

    def _take_fault(self, kind: str, path: str, consume: bool = True) -> dict | None:
        with self._lock:
            for f in self.faults:
                if f["kind"] == kind and fnmatch.fnmatch(path, f.get("path", "*")):
                    if f["times"] != -1 and f["fired"] >= f["times"]:
                        continue
                    if consume:
                        f["fired"] += 1
                    return f
        return None

    def _has_fault(self, kind, path):
        return self._take_fault(kind, path, consume=False)

    def release_stalls(self) -> None:
        """End every transfer a ``stall`` fault holds (each closes its connection) and wait up
        to 60 s until their handlers have logged them in ``requests``."""
        with self._lock:
            release = self._release
            self._release = threading.Event()  # transfers stalled from now on wait for the next call
        release.set()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with self._lock:
                if not any(s["release"] is release for s in self.stalled.values()):
                    return
            time.sleep(0.01)

    def stats(self) -> dict:
        """Counters: ``bytes_by_client`` (resolve body bytes per client IP), ``requests``
        (method, path, status, range, client, bytes), ``auth`` records, ``faults`` (with
        ``fired`` counts)."""
        with self._lock:
            return {"bytes_by_client": dict(self.bytes_by_client),
                    "requests": list(self.requests), "auth": list(self.auth_log),
                    "faults": [dict(f) for f in self.faults],
                    "stalled": [{"path": s["path"], "bytes": s["bytes"]} for s in self.stalled.values()]}

    def _count(self, client: str, n: int) -> None:
        with self._lock:
            self.bytes_by_client[client] = self.bytes_by_client.get(client, 0) + n

    # ------------------------------------------------------------------ lifecycle
    @property
    def url(self) -> str:
        """``http://host:port`` of the running server."""
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> "HubDouble":
        """Serve in a daemon thread; returns self."""
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """End the held transfers, stop serving and close the socket."""
        self.release_stalls()
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


def _make_handler(hub: HubDouble):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "hub-double/1"

        def log_message(self, fmt, *args):  # quiet; stats() has the log
            pass

        # -------------------------------------------------------------- helpers
        def _record(self, status, nbytes=0):
            with hub._lock:
                hub.requests.append({"method": self.command, "path": self.path, "status": status,
                                     "range": self.headers.get("Range"),
                                     "client": self.client_address[0], "bytes": nbytes})

        def _send(self, status, body=b"", headers=None, ctype="application/json"):
            self.send_response(status)
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)
            self._record(status)

        def _json(self, status, obj, headers=None):
            self._send(status, json.dumps(obj).encode(), headers)

        def _error(self, status, code=None, message=None, extra=None):
            headers = dict(extra or {})
            if code:
                headers["X-Error-Code"] = code
            if message:
                headers["X-Error-Message"] = message
            self._json(status, {"error": message or code or "error"}, headers)

        def _auth_ok(self) -> bool:
            value = self.headers.get("Authorization")
            rec = {"path": self.path, "present": value is not None}
            if value is not None:
                scheme, _, cred = value.partition(" ")
                rec.update(scheme=scheme, sha256_12=hashlib.sha256(cred.encode()).hexdigest()[:12])
            ok = hub.required_token is None or value == f"Bearer {hub.required_token}"
            rec["valid"] = ok if hub.required_token is not None else None
            with hub._lock:
                hub.auth_log.append(rec)
            if ok:
                return True
            if value is None:
                self._error(401, "RepoNotFound", "Repository not found")
            else:
                self._error(401, None, "Invalid credentials in Authorization header")
            return False

        def _repo(self, repo_id):
            repo = hub.repos.get(repo_id)
            if repo is None:
                self._error(401, "RepoNotFound", "Repository not found")
            return repo

        # -------------------------------------------------------------- routes
        def do_POST(self):
            n = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(n) if n else b""
            path = urlsplit(self.path).path
            try:
                if path == "/_double/faults":
                    hub.set_faults(json.loads(body or b"[]"))
                    return self._json(200, {"faults": hub.stats()["faults"]})
                if path == "/_double/release":
                    hub.release_stalls()
                    return self._json(200, {"ok": True})
                if path == "/_double/reset":
                    hub.reset()
                    return self._json(200, {"ok": True})
            except ValueError as exc:
                return self._json(400, {"error": str(exc)})
            self._error(404, None, f"no route POST {path}")

        def do_HEAD(self):
            self.do_GET()

        def do_GET(self):
            parts = urlsplit(self.path)
            path, query = unquote(parts.path), parse_qs(parts.query)
            if path == "/_double/stats":
                return self._json(200, hub.stats())
            if path.startswith("/_double/cdn/"):
                return self._cdn(path)
            m = re.match(r"^/api/models/([^/]+/[^/]+)(?:/revision/([^/]+))?/?$", path)
            if m:
                return self._info(m.group(1), m.group(2) or "main")
            m = re.match(r"^/api/models/([^/]+/[^/]+)/tree/([^/]+)(?:/(.*))?$", path)
            if m:
                return self._tree(m.group(1), m.group(2), m.group(3) or "", query)
            m = re.match(r"^/([^/]+/[^/]+)/resolve/([^/]+)/(.+)$", path)
            if m:
                return self._resolve(m.group(1), m.group(2), m.group(3))
            self._error(404, None, f"hub double has no route {self.command} {path}")

        def _info(self, repo_id, rev):
            if not self._auth_ok():
                return
            repo = self._repo(repo_id)
            if repo is None:
                return
            commit = repo.resolve(rev)
            if commit is None:
                return self._error(404, "RevisionNotFound", f"Invalid rev id: {rev}")
            files = repo.commits[commit]
            self._json(200, {"_id": commit[:24], "id": repo_id, "modelId": repo_id,
                             "author": repo_id.split("/")[0], "sha": commit, "private": False,
                             "gated": False, "disabled": False, "tags": [],
                             "siblings": [{"rfilename": p} for p in sorted(files)]})

        def _tree(self, repo_id, rev, sub, query):
            if not self._auth_ok():
                return
            repo = self._repo(repo_id)
            if repo is None:
                return
            commit = repo.resolve(rev)
            if commit is None:
                return self._error(404, "RevisionNotFound", f"Invalid rev id: {rev}")
            recursive = query.get("recursive", ["false"])[0].lower() in ("true", "1")
            prefix = sub.strip("/") + "/" if sub.strip("/") else ""
            entries, dirs = [], set()
            for p, f in sorted(repo.commits[commit].items()):
                if not p.startswith(prefix):
                    continue
                rest = p[len(prefix):]
                if "/" in rest:
                    segs = rest.split("/")
                    upto = len(segs) - 1 if recursive else 1
                    for i in range(1, upto + 1):
                        dirs.add(prefix + "/".join(segs[:i]))
                    if not recursive:
                        continue
                entries.append(self._tree_entry(f))
            for d in sorted(dirs):
                entries.append({"type": "directory", "oid": hashlib.sha1(d.encode()).hexdigest(),
                                "size": 0, "path": d})
            entries.sort(key=lambda e: e["path"])
            if sub and not entries:
                return self._error(404, "EntryNotFound", f"{sub} does not exist on {rev}")
            start = int(query.get("cursor", ["0"])[0])
            page = entries[start:start + hub.page_size]
            headers = {}
            if start + hub.page_size < len(entries):
                host = self.headers.get("Host", "%s:%d" % self.server.server_address[:2])
                nxt = (f"http://{host}{urlsplit(self.path).path}?recursive={str(recursive).lower()}"
                       f"&expand=false&cursor={start + hub.page_size}")
                headers["Link"] = f'<{nxt}>; rel="next"'
            self._json(200, page, headers)

        def _tree_entry(self, f: RepoFile) -> dict:
            size, sha = f.size, f.sha256
            fault = hub._has_fault("tree_wrong_size", f.path)
            if fault:
                size += fault.get("delta", 1)
            if hub._has_fault("tree_wrong_sha256", f.path):
                sha = hashlib.sha256(b"not the content of " + f.path.encode()).hexdigest()
                if not f.lfs:
                    return {"type": "file", "oid": git_blob_id(b"other " + f.path.encode()),
                            "size": size, "path": f.path}
            entry = {"type": "file", "oid": f.blob_id, "size": size, "path": f.path}
            if f.lfs:
                entry["lfs"] = {"oid": sha, "size": size, "pointerSize": f.pointer_size}
            return entry

        def _resolve(self, repo_id, rev, fpath):
            if not self._auth_ok():
                return
            repo = self._repo(repo_id)
            if repo is None:
                return
            commit = repo.resolve(rev)
            if commit is None:
                return self._error(404, "RevisionNotFound", f"Invalid rev id: {rev}")
            f = repo.commits[commit].get(fpath)
            if f is None:
                return self._error(404, "EntryNotFound", f"{fpath} does not exist on {rev}",
                                   {"X-Repo-Commit": commit})
            fault = hub._take_fault("status", fpath)
            if fault:
                return self._error(int(fault["code"]), None, "hub double injected status")
            headers = {"X-Repo-Commit": commit, "ETag": f'"{f.etag}"', "Accept-Ranges": "bytes"}
            if f.lfs and hub.lfs_redirect_host:
                port = self.server.server_address[1]
                loc = (f"http://{hub.lfs_redirect_host}:{port}/_double/cdn/{quote(repo_id)}/"
                       f"{commit}/{quote(fpath)}")
                headers.update({"Location": loc, "X-Linked-Etag": f'"{f.etag}"',
                                "X-Linked-Size": str(f.size)})
                headers = self._omit(fpath, headers)
                return self._send(302, b"", headers, ctype="text/plain")
            self._serve_blob(f, fpath, headers)

        def _cdn(self, path):
            m = re.match(r"^/_double/cdn/([^/]+/[^/]+)/([0-9a-f]{40})/(.+)$", path)
            repo = hub.repos.get(m.group(1)) if m else None
            f = repo.commits.get(m.group(2), {}).get(m.group(3)) if repo else None
            if f is None:
                return self._error(404, None, "no such blob")
            with hub._lock:
                hub.auth_log.append({"path": self.path, "present": "Authorization" in self.headers,
                                     "valid": None})
            self._serve_blob(f, f.path, {"ETag": f'"{f.etag}"', "Accept-Ranges": "bytes"})

        def _hold(self, fpath, sent):
            """A ``stall`` fault: keep the connection open, silent, until released."""
            with hub._lock:
                release = hub._release
                hub.stalled[id(self)] = {"path": fpath, "bytes": sent, "release": release}
            release.wait()

        def _omit(self, fpath, headers):
            for fault in list(hub.faults):
                if fault["kind"] == "omit_header" and fnmatch.fnmatch(fpath, fault.get("path", "*")):
                    if hub._take_fault("omit_header", fpath):
                        drop = fault["header"].lower()
                        headers = {k: v for k, v in headers.items()
                                   if k.lower() not in (drop, "x-linked-" + drop.replace(
                                       "content-length", "size"))}
            return headers

        def _serve_blob(self, f: RepoFile, fpath: str, headers: dict):
            size = f.size
            start, end = 0, size
            rng = self.headers.get("Range")
            status = 200
            if rng:
                m = re.match(r"^bytes=(\d+)-(\d*)$", rng.strip())
                if not m or int(m.group(1)) >= size:
                    return self._error(416, None, f"Range Not Satisfiable: {rng}",
                                       {"Content-Range": f"bytes */{size}"})
                start = int(m.group(1))
                end = min(size, int(m.group(2)) + 1) if m.group(2) else size
                status = 206
                headers["Content-Range"] = f"bytes {start}-{end - 1}/{size}"
            length = end - start
            wrong = self.command == "HEAD" and hub._has_fault("wrong_content_length", fpath)
            headers = self._omit(fpath, dict(headers, **{
                "Content-Length": str(length + (wrong.get("delta", -1) if wrong else 0))}))
            self.send_response(status)
            for k, v in headers.items():
                self.send_header(k, v)
            self.send_header("Content-Type", "application/octet-stream")
            if "Content-Length" not in headers:
                self.send_header("Connection", "close")
                self.close_connection = True
            self.end_headers()
            if self.command == "HEAD":
                return self._record(status)
            drop = hub._take_fault("drop", fpath)
            stall = None if drop else hub._take_fault("stall", fpath)
            slow = hub._has_fault("slow", fpath)
            cut = drop or stall
            limit = min(cut["after_bytes"], length) if cut else length
            chunk = 1024 * 1024
            if slow:
                chunk = max(1, min(chunk, int(slow["bytes_per_s"]) // 10 or 1))
            client = self.client_address[0]
            sent = 0
            src = open(f.disk, "rb") if f.disk else io.BytesIO(f.read())
            try:
                src.seek(start)
                while sent < limit:
                    piece = src.read(min(chunk, limit - sent))
                    if not piece:
                        break
                    self.wfile.write(piece)
                    sent += len(piece)
                    hub._count(client, len(piece))
                    if slow:
                        self.wfile.flush()
                        time.sleep(len(piece) / float(slow["bytes_per_s"]))
                self.wfile.flush()
                if stall:
                    self._hold(fpath, sent)
            except (BrokenPipeError, ConnectionResetError):
                pass
            finally:
                src.close()
            with hub._lock:
                hub.requests.append({"method": self.command, "path": self.path, "status": status,
                                     "range": rng, "client": client, "bytes": sent,
                                     "dropped": bool(drop), "stalled": bool(stall)})
                hub.stalled.pop(id(self), None)
            if cut:
                try:
                    self.connection.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                self.close_connection = True

    return Handler


def main(argv: list[str] | None = None) -> int:
    """CLI entry point (see module docstring); serves until interrupted."""
    p = argparse.ArgumentParser(prog="hub_double.py", description=__doc__.split("\n")[0])
    p.add_argument("--repo-dir", help="<org>/<name>/<commit>/files layout")
    p.add_argument("--add", action="append", default=[], metavar="ORG/NAME=DIR[@COMMIT]")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--token-file", help="file holding the token clients must send")
    p.add_argument("--page-size", type=int, default=1000)
    p.add_argument("--lfs-redirect-host", help="emulate the CDN redirect for LFS files")
    ns = p.parse_args(argv)
    token = None
    if ns.token_file:
        with open(ns.token_file, encoding="utf-8") as fh:
            token = fh.read().strip()
    hub = HubDouble(ns.repo_dir, ns.host, ns.port, token, ns.page_size, ns.lfs_redirect_host)
    for spec in ns.add:
        repo_id, _, rest = spec.partition("=")
        directory, _, commit = rest.partition("@")
        hub.add_repo(repo_id, directory, commit or None)
    print(f"HUB_DOUBLE_URL={hub.url}", flush=True)
    try:
        hub.server.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
