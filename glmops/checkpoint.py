"""Checkpoint download logic: pinned, size-checked, verified, resumable, locked.

This one file is all the checkpoint logic. It runs in two places:

* on the controller (``glmops download``, tests, ``bench/fanout.py``) as ``glmops.checkpoint``;
* on the target hosts, inside the ``glmops_checkpoint`` Ansible module
  (``glmops/ansible/library/glmops_checkpoint.py``), which imports it as the module_utils
  ``ansible.module_utils.glmops_checkpoint`` (a symlink to this file, shipped by AnsiballZ).
  There it runs under the hub venv's interpreter (``/opt/glmops/venvs/hub-<version>``,
  installed by ``roles/engine_runtime`` from the ``hub`` wheel set), the only place
  ``huggingface_hub`` is needed on a host.

So it imports only the standard library at module level; ``huggingface_hub`` is imported
inside the functions that talk to the hub (and ``HF_ENDPOINT`` is never needed: every call
passes ``endpoint=`` explicitly).

Flow of :func:`download` (issue 6, F10, F12):

1. :func:`resolve` the revision to a 40-hex commit (``GET /api/models/{repo}/revision/{rev}``,
   skipped when it already is one) and read the hub's tree listing at that commit
   (``GET /api/models/{repo}/tree/{sha}?recursive=true``), filtered by ``allow_patterns``
   exactly as ``snapshot_download`` filters (``huggingface_hub.utils.filter_repo_objects``).
2. :func:`space_check`: bytes still to fetch + margin against the free space of the
   filesystem holding ``local_dir``; not enough raises :class:`CheckpointError` code
   ``F10_DISK`` naming needed and available bytes, before the first blob request.
3. Take an exclusive ``flock`` on ``<model_dir>/.glmops-locks/<repo>@<commit>.lock`` (one
   writer per checkpoint, also across hosts on a shared NFS mount), then fetch each file not
   yet complete with ``huggingface_hub.hf_hub_download(repo, path, revision=commit,
   local_dir=...)``, ``max_workers`` at once, each in its own process (:func:`fetch_files`).
   Resume is the client's own: files already complete (with its ``.cache/huggingface``
   metadata at that commit) are not requested again, and a connection dropped mid-file is
   retried within the transfer with a ``Range`` request from the last 10 MiB boundary. Across
   runs the unit of resume is the file: huggingface-hub 2.4.0 writes each file to a
   process-unique ``*.incomplete`` name and does not reuse another process's part (its PR
   4228), so a killed run's parts are deleted here (:func:`remove_stale_partials`) and that
   file is fetched again. hf_xet is used by the client when it is installed. A watchdog
   (F31) ends the transfer of a file whose bytes do not move for ``stall_timeout_s``, names
   the file, fetches it again, switches to plain HTTP after repeated stalls and gives up
   (``STALL``) when one file keeps stalling. Progress (bytes on disk / expected, the stalls)
   goes to a JSON file.
4. :func:`verify`: every file's size against the tree listing, sha256 of LFS files, git blob
   sha1 of the others; a mismatch raises ``VERIFY`` naming each file.
5. Write the marker (:func:`write_marker`): the manifest (the hub's metadata) plus the size
   and mtime of each verified file, so a rerun sees "verified" without hashing again.

Source of the HTTP surface and client behaviour: huggingface-hub 2.4.0
(``_snapshot_download.py``, ``file_download.py``, ``hf_api.py``) and
/work/shared/lab-recipe/FINDINGS.md "Hugging Face hub, offline".
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import fnmatch
import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Iterator

HEX40 = re.compile(r"^[0-9a-f]{40}\Z")
REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*\Z")
MARKER_VERSION = 1
# Margin added to the bytes still to fetch before comparing with the free space: the larger
# of 2 % of the checkpoint and 512 MiB (room for the client's .incomplete parts and metadata).
DEFAULT_MARGIN_RATIO = 0.02
DEFAULT_MARGIN_BYTES = 512 * 1024 * 1024
CHUNK = 8 * 1024 * 1024
# snapshot_download's own working area inside local_dir (metadata, .incomplete parts)
CLIENT_CACHE = ".cache/huggingface"
#: F31: a file whose bytes on disk do not move for this long is stalled (the role's
#: ``checkpoint_stall_timeout_s``). The client writes in ``DOWNLOAD_CHUNK_SIZE`` (10 MiB) pieces,
#: so a transfer slower than 10 MiB per timeout also counts as stalled (17 KiB/s at 600 s).
DEFAULT_STALL_TIMEOUT_S = 600.0
#: after this many stalls in a run, every later transfer goes over plain HTTP (hf_xet off)
DEFAULT_STALL_FALLBACK_AFTER = 2
#: a file that stalls this many times fails the download, named
DEFAULT_STALL_MAX = 4



class CheckpointError(Exception):
    """A checkpoint step failed. ``code`` is stable (``F10_DISK``, ``VERIFY``, ``REVISION``,
    ``HUB``, ``LOCK``, ``INPUT``); ``files`` names the files concerned (for ``VERIFY`` and
    failed downloads); ``details`` carries numbers (needed/available bytes...)."""

    def __init__(self, code: str, message: str, files: list[str] | None = None,
                 details: dict[str, Any] | None = None):
        super().__init__(message)
        self.code = code
        self.message = message
        self.files = list(files or [])
        self.details = dict(details or {})

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, "files": self.files, **self.details}


@dataclass
class HubFile:
    """One file of the repo at the commit, as the hub's tree listing describes it.

    ``size`` in bytes; ``blob_id``: git blob sha1 (of the LFS pointer for LFS files);
    ``sha256``: the LFS object id (None for regular git files); ``xet_hash`` when Xet-backed.
    """

    path: str
    size: int
    blob_id: str
    sha256: str | None = None
    xet_hash: str | None = None

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> "HubFile":
        return cls(path=raw["path"], size=int(raw["size"]), blob_id=raw.get("blob_id", ""),
                   sha256=raw.get("sha256"), xet_hash=raw.get("xet_hash"))


@dataclass
class Manifest:
    """What the hub says the checkpoint is: repo, the commit and the (filtered) files."""

    repo: str
    commit: str
    files: list[HubFile] = field(default_factory=list)
    allow_patterns: list[str] = field(default_factory=list)

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)

    def to_dict(self) -> dict[str, Any]:
        return {"repo": self.repo, "commit": self.commit, "allow_patterns": list(self.allow_patterns),
                "total_bytes": self.total_bytes, "files": [asdict(f) for f in self.files]}

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> "Manifest":
        files = [HubFile.from_dict(f) for f in raw.get("files") or []]
        for f in files:  # a manifest handed over for a peer copy or a check: same paths as the hub's
            repo_path(f.path)
        return cls(repo=raw["repo"], commit=raw["commit"], files=files,
                   allow_patterns=list(raw.get("allow_patterns") or []))


@dataclass
class SpaceCheck:
    """F10 numbers, bytes: ``total`` of the checkpoint, ``present`` already complete on disk,
    ``margin``, ``needed`` = total - present + margin, ``available`` to unprivileged writers
    on the filesystem holding ``path`` (``statvfs`` f_bavail x f_frsize)."""

    path: str
    total: int
    present: int
    margin: int
    needed: int
    available: int

    @property
    def ok(self) -> bool:
        return self.available >= self.needed

    def message(self) -> str:
        return (f"not enough disk for the checkpoint under {self.path}: needed {human(self.needed)} "
                f"({self.needed} bytes = {human(self.total - self.present)} still to fetch of "
                f"{human(self.total)} + {human(self.margin)} margin), available {human(self.available)} "
                f"({self.available} bytes)")


def human(n: float) -> str:
    """Bytes as ``12.3 GiB`` (binary units)."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024.0
    return f"{n:.1f} TiB"  # pragma: no cover


# ---------------------------------------------------------------------------------- plan view
def plan_view(dep: Any, plan: Any) -> dict[str, Any]:
    """The checkpoint part of the playbooks' plan view (``glmops.deployview``): the model's
    checkpoint as ``{repo, revision, model_dir, local_dir, allow_patterns, mode, offline, size_gib,
    hosts, service_user, state_dir, kind}`` plus ``checkpoints``: that entry first, then one per
    drafter the Plan loads (``Deployment.drafters``, ``kind: drafter``), each with its own hosts.
    ``hosts``: every host running a service whose argv loads that checkpoint (for the model's also
    a frontend that reads it), in Plan order; ``mode`` is ``per_node`` when only one host needs it.
    ``dep``/``plan`` are glmops.model Deployment/Plan."""
    views = [_one_view(dep, plan, ck_spec) for ck_spec in dep.checkpoints()]
    return {**views[0], "checkpoints": views}


def _loads(argv: list[str], local_dir: str) -> bool:
    """True when a word of ``argv`` names ``local_dir`` or a path below it, also inside a JSON
    value (vLLM's ``--speculative-config '{"model": DIR}'``)."""
    pattern = re.compile(re.escape(local_dir) + r"(?:$|[/\"'])")
    return any(pattern.search(word) for word in argv)


def _one_view(dep: Any, plan: Any, ck_spec: Any) -> dict[str, Any]:
    model = getattr(ck_spec, "kind", "model") == "model"
    hosts: list[str] = []
    for svc in sorted(plan.services, key=lambda s: (s.start_order, s.host, s.name)):
        if _loads(svc.argv, ck_spec.local_dir) or (model and svc.start_order < 50):
            if svc.host not in hosts:
                hosts.append(svc.host)
    return {"repo": ck_spec.repo, "revision": ck_spec.revision or "", "model_dir": ck_spec.model_dir,
            "local_dir": ck_spec.local_dir, "allow_patterns": list(ck_spec.allow_patterns or []),
            "mode": ck_spec.mode if len(hosts) > 1 else "per_node", "offline": bool(ck_spec.offline),
            "size_gib": float(ck_spec.size_gib or 0), "hosts": hosts,
            "service_user": dep.service_user, "state_dir": dep.state_dir,
            "kind": getattr(ck_spec, "kind", "model")}


# ---------------------------------------------------------------------------------- inputs
def check_inputs(repo: str, revision: str | None, local_dir: str, offline: bool = True,
                 model_dir: str | None = None) -> list[str]:
    """Every problem with the download inputs at once (empty list: fine).

    ``repo`` must be ``owner/name``; ``revision`` a 40-hex commit when serving offline (F12;
    a branch or tag is accepted only with ``offline: false``, and None means "pin at
    download"); ``local_dir`` absolute, without ``.``/``..`` segments, and below ``model_dir``
    when that is given (the snapshot and its writer lock stay under the checkpoints' root).
    """
    problems = []
    if not REPO_ID.match(repo or ""):
        problems.append(f"repo {repo!r} is not a Hugging Face repo id; accepted: owner/name")
    if revision is not None and offline and not HEX40.match(str(revision)):
        problems.append(f"revision {revision!r} is not a 40-hex commit; serving offline needs a pinned commit (F12)")
    text = str(local_dir or "")
    if not text.startswith("/"):
        problems.append(f"local_dir {local_dir!r} must be an absolute path")
    elif not clean_path(text):
        problems.append(f"local_dir {local_dir!r} has '.', '..' or empty segments; accepted: a normalized absolute path")
    elif model_dir and not below(text, model_dir):
        problems.append(f"local_dir {local_dir!r} is not below model_dir {model_dir!r}; accepted: <model_dir>/<owner>/<name>/...")
    return problems


def clean_path(path: str) -> bool:
    """True when ``path`` (absolute or relative) has no ``.``, ``..`` or empty segment (a
    trailing ``/`` aside) and no NUL."""
    if "\0" in path:
        return False
    stripped = path.strip("/")
    if not stripped:
        return path.startswith("/")  # "/" itself
    return all(p not in ("", ".", "..") for p in stripped.split("/"))


def below(path: str, root: str) -> bool:
    """True when ``path`` is ``root`` or lies under it, compared as normalized text (no
    symlink is followed: :func:`inside` checks the resolved path where files are written)."""
    root = os.path.normpath(root)
    path = os.path.normpath(path)
    return path == root or path.startswith(root.rstrip("/") + "/")


def repo_path(rel: str, local_dir: str = "the snapshot") -> str:
    """``rel``, a repo file path from the hub's listing (or a manifest handed over for a peer
    copy), when it is relative without ``.``/``..``/empty segments; else ``CheckpointError("HUB")``."""
    if not rel or rel.startswith("/") or not clean_path(rel):
        raise CheckpointError("HUB", f"repo file path {rel!r} would be written outside {local_dir}; "
                              "accepted: a relative path without '.' or '..' segments", files=[str(rel)])
    return rel


def inside(local_dir: str, rel: str) -> str:
    """``<local_dir>/<rel>`` for a repo file path ``rel`` (:func:`repo_path`); raises
    ``CheckpointError("HUB")`` when it also resolves (symlinks followed) outside ``local_dir``."""
    full = os.path.join(local_dir, repo_path(rel, local_dir))
    if not below(os.path.realpath(full), os.path.realpath(local_dir)):
        raise CheckpointError("HUB", f"repo file path {rel!r} resolves to {os.path.realpath(full)}, outside {local_dir}",
                              files=[rel])
    return full


def local_dir_for(model_dir: str, repo: str, commit: str) -> str:
    """``<model_dir>/<repo>/<commit>`` (the layout of ``Deployment.checkpoint.local_dir``)."""
    return f"{model_dir.rstrip('/') or ''}/{repo}/{commit}"


def read_token(token_file: str | None) -> str | None:
    """The HF token from ``token_file`` (None when unset, missing or empty). The file must not
    be readable by group/others (0600 or stricter): a looser one raises ``INPUT``."""
    if not token_file or not os.path.exists(token_file):
        return None
    mode = stat.S_IMODE(os.stat(token_file).st_mode)
    if mode & 0o077:
        raise CheckpointError("INPUT", f"token file {token_file} has mode {mode:04o}; accepted: 0600 or stricter")
    with open(token_file, encoding="utf-8") as fh:
        return fh.read().strip() or None


# ---------------------------------------------------------------------------------- hub metadata
def _api(endpoint: str | None, token: str | None):
    from huggingface_hub import HfApi

    return HfApi(endpoint=endpoint, token=token if token else False)


def resolve(repo: str, revision: str | None, *, endpoint: str | None = None, token: str | None = None,
            allow_patterns: list[str] | None = None) -> Manifest:
    """The commit for ``revision`` (``main`` when None) and the hub's tree listing at it,
    filtered by ``allow_patterns`` (``snapshot_download``'s semantics: fnmatch, ``*`` crosses
    ``/``). Raises ``REVISION`` for an unknown revision, ``HUB`` for other hub errors."""
    from huggingface_hub.errors import RepositoryNotFoundError, RevisionNotFoundError
    from huggingface_hub.utils import filter_repo_objects

    api = _api(endpoint, token)
    try:
        commit = revision if revision and HEX40.match(revision) else api.model_info(repo, revision=revision or "main").sha
        entries = [e for e in api.list_repo_tree(repo, revision=commit, recursive=True, expand=False)
                   if hasattr(e, "size") and hasattr(e, "blob_id")]
    except RevisionNotFoundError as exc:
        raise CheckpointError("REVISION", f"revision {revision!r} of {repo} not found on the hub: {_first_line(exc)}") from None
    except RepositoryNotFoundError as exc:
        raise CheckpointError("HUB", f"repo {repo} not found or not accessible (token?): {_first_line(exc)}") from None
    except Exception as exc:  # network, HTTP 5xx ...
        raise CheckpointError("HUB", f"hub metadata for {repo}@{revision or 'main'}: {type(exc).__name__}: {_first_line(exc)}") from None
    if not commit or not HEX40.match(commit):
        raise CheckpointError("REVISION", f"the hub answered commit {commit!r} for {repo}@{revision}; expected 40 hex")
    picked = list(filter_repo_objects(entries, allow_patterns=allow_patterns or None, key=lambda e: e.path))
    files = [HubFile(path=e.path, size=int(e.size), blob_id=e.blob_id,
                     sha256=e.lfs.sha256 if e.lfs else None, xet_hash=getattr(e, "xet_hash", None))
             for e in picked]
    if not files:
        raise CheckpointError("INPUT", f"no file of {repo}@{commit} matches allow_patterns {allow_patterns}")
    for f in files:  # the listing names where each file lands: never outside the snapshot
        repo_path(f.path)
    return Manifest(repo=repo, commit=commit, files=sorted(files, key=lambda f: f.path),
                    allow_patterns=list(allow_patterns or []))


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


# ---------------------------------------------------------------------------------- disk
def free_bytes(path: str) -> tuple[str, int]:
    """``(existing ancestor, bytes available)`` for the filesystem that will hold ``path``."""
    probe = os.path.abspath(path)
    while not os.path.exists(probe):
        parent = os.path.dirname(probe)
        if parent == probe:
            break
        probe = parent
    st = os.statvfs(probe)
    return probe, st.f_bavail * st.f_frsize


def complete_files(local_dir: str, manifest: Manifest) -> list[str]:
    """Paths whose file already exists in ``local_dir`` with the expected size."""
    done = []
    for f in manifest.files:
        p = os.path.join(local_dir, f.path)
        try:
            if os.stat(p).st_size == f.size:
                done.append(f.path)
        except OSError:
            pass
    return done


def space_check(local_dir: str, manifest: Manifest, margin_ratio: float = DEFAULT_MARGIN_RATIO,
                margin_bytes: int = DEFAULT_MARGIN_BYTES) -> SpaceCheck:
    """F10: bytes still to fetch + margin vs free space (see :class:`SpaceCheck`)."""
    sizes = {f.path: f.size for f in manifest.files}
    present = sum(sizes[p] for p in complete_files(local_dir, manifest))
    total = manifest.total_bytes
    margin = int(max(total * margin_ratio, margin_bytes)) if total - present > 0 else 0
    probe, avail = free_bytes(local_dir)
    return SpaceCheck(path=probe, total=total, present=present, margin=margin,
                      needed=total - present + margin, available=avail)


# ---------------------------------------------------------------------------------- verify
def git_blob_sha1(path: str, size: int) -> str:
    """Git blob id of the file at ``path`` (sha1 over ``blob <size>\\0`` + content)."""
    with open(path, "rb") as fh:
        return _digest_fh(fh, "blob_id", size)


def sha256_file(path: str) -> str:
    """Hex sha256 of the file at ``path`` (read in 8 MiB chunks)."""
    with open(path, "rb") as fh:
        return _digest_fh(fh, "sha256", 0)


def _digest_fh(fh: Any, kind: str, size: int) -> str:
    """Hex digest of the open binary file ``fh`` read to its end in 8 MiB chunks: ``kind``
    ``sha256``, or ``blob_id`` (git blob sha1 over ``blob <size>\\0`` + content)."""
    h = hashlib.sha256() if kind == "sha256" else hashlib.sha1(b"blob %d\0" % size)
    for chunk in iter(lambda: fh.read(CHUNK), b""):
        h.update(chunk)
    return h.hexdigest()


#: what each digest kind of a manifest file is called in a VERIFY message
DIGEST_NAMES = {"sha256": "sha256", "blob_id": "git blob sha1"}


def digest_kind(f: HubFile) -> str | None:
    """Which digest checks ``f``: ``sha256`` (LFS files), ``blob_id`` (git blob sha1, the
    others), None when the listing gives neither (size only)."""
    return "sha256" if f.sha256 else ("blob_id" if f.blob_id else None)


def verify(local_dir: str, manifest: Manifest, hashes: bool = True,
           known: dict[str, dict[str, Any]] | None = None,
           reused: list[str] | None = None) -> list[dict[str, Any]]:
    """Check every manifest file in ``local_dir``. Returns one dict per file:
    ``{path, size, mtime_ns, sha256|blob_id}``. Raises ``VERIFY`` naming every missing file,
    size mismatch (on disk vs the hub's tree listing) and hash mismatch (sha256 for LFS files,
    git blob sha1 for regular ones) at once. ``hashes=False`` checks sizes only.

    ``known``: path -> digest recorded when the file arrived (:func:`read_hash_record`); a file
    whose stat still matches its record (:func:`same_file`) is checked with the recorded
    digest instead of being read again, the rest are hashed here. The paths checked that way
    are appended to ``reused``."""
    problems, bad, out = [], [], []
    for f in manifest.files:
        p = os.path.join(local_dir, f.path)
        try:
            st = os.stat(p)
        except OSError:
            problems.append(f"{f.path}: missing in {local_dir}")
            bad.append(f.path)
            continue
        if st.st_size != f.size:
            problems.append(f"{f.path}: size {st.st_size} on disk, the hub says {f.size}")
            bad.append(f.path)
            continue
        rec: dict[str, Any] = {"path": f.path, "size": st.st_size, "mtime_ns": st.st_mtime_ns}
        kind = digest_kind(f) if hashes else None
        if kind:
            want = f.sha256 if kind == "sha256" else f.blob_id
            seen = (known or {}).get(f.path)
            if seen and seen.get(kind) and same_file(seen, st):
                got = str(seen[kind])
                if reused is not None:
                    reused.append(f.path)
            else:
                got = sha256_file(p) if kind == "sha256" else git_blob_sha1(p, st.st_size)
            if got != want:
                problems.append(f"{f.path}: {DIGEST_NAMES[kind]} {got} on disk, the hub says {want}")
                bad.append(f.path)
                continue
            rec[kind] = got
        out.append(rec)
    if problems:
        raise CheckpointError("VERIFY", f"{len(bad)} file(s) of {manifest.repo}@{manifest.commit} failed "
                              f"verification: " + "; ".join(problems), files=bad)
    return out


# ---------------------------------------------------------------------------------- marker
def marker_path(state_dir: str, repo: str, commit: str) -> str:
    """``<state_dir>/checkpoints/<owner>--<name>@<commit>.json``."""
    return os.path.join(state_dir, "checkpoints", f"{repo.replace('/', '--')}@{commit}.json")


def write_marker(path: str, manifest: Manifest, local_dir: str, records: list[dict[str, Any]],
                 source: str = "hub") -> dict[str, Any]:
    """Record a verified checkpoint (atomic write, mode 0644; it holds no secret)."""
    data = {"version": MARKER_VERSION, "local_dir": local_dir, "source": source,
            "verified_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "manifest": manifest.to_dict(), "files": records}
    _atomic_json(path, data, 0o644)
    return data


def read_marker(path: str) -> dict[str, Any] | None:
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return None
    return data if data.get("version") == MARKER_VERSION else None


def marker_valid(marker: dict[str, Any] | None, local_dir: str, manifest: Manifest | None = None) -> bool:
    """True when ``marker`` says ``local_dir`` was verified and every file still has the size
    and mtime it had then (no rehash). With ``manifest``: also the same commit and file set."""
    if not marker or marker.get("local_dir") != local_dir:
        return False
    if manifest is not None:
        m = marker.get("manifest") or {}
        if m.get("commit") != manifest.commit or sorted(f["path"] for f in m.get("files", [])) != \
                sorted(f.path for f in manifest.files):
            return False
    for rec in marker.get("files") or []:
        try:
            st = os.stat(os.path.join(local_dir, rec["path"]))
        except OSError:
            return False
        if st.st_size != rec["size"] or st.st_mtime_ns != rec["mtime_ns"]:
            return False
    return bool(marker.get("files"))


def _atomic_json(path: str, data: Any, mode: int) -> None:
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = f"{path}.tmp-{os.getpid()}-{threading.get_ident()}"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(data, fh, indent=1, sort_keys=True)
    os.chmod(tmp, mode)
    os.replace(tmp, path)


# ---------------------------------------------------------------------------------- lock
def lock_path(model_dir: str, repo: str, commit: str) -> str:
    """``<model_dir>/.glmops-locks/<owner>--<name>@<commit>.lock`` (on the same filesystem as
    the checkpoint, so writers on every host of a shared mount see it)."""
    return os.path.join(model_dir, ".glmops-locks", f"{repo.replace('/', '--')}@{commit}.lock")


@contextlib.contextmanager
def writer_lock(path: str, timeout_s: float = 6 * 3600, poll_s: float = 1.0,
                on_wait: Callable[[], None] | None = None) -> Iterator[float]:
    """Exclusive ``flock`` on ``path`` (created 0664); yields the seconds waited. Raises
    ``LOCK`` after ``timeout_s``. On NFS, ``flock`` is forwarded to the server's lock
    manager (Linux >= 2.6.12), so two hosts never write the same checkpoint at once."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o664)
    start = time.monotonic()
    waited_once = False
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
                if not waited_once and on_wait:
                    on_wait()
                waited_once = True
                if time.monotonic() - start > timeout_s:
                    raise CheckpointError("LOCK", f"another writer holds {path} for more than {timeout_s:.0f} s") from None
                time.sleep(poll_s)
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.uname().nodename} {os.getpid()}\n".encode())
        yield time.monotonic() - start
    finally:
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


# ---------------------------------------------------------------------------------- progress
def bytes_on_disk(local_dir: str, manifest: Manifest) -> int:
    """Bytes of the manifest's files present in ``local_dir`` plus the client's
    ``*.incomplete`` parts (``.cache/huggingface/download/**``, named by a hash and the etag)."""
    total = 0
    for f in manifest.files:
        with contextlib.suppress(OSError):
            total += min(os.stat(os.path.join(local_dir, f.path)).st_size, f.size)
    for root, _dirs, names in os.walk(os.path.join(local_dir, CLIENT_CACHE, "download")):
        for name in names:
            if name.endswith(".incomplete"):
                with contextlib.suppress(OSError):
                    total += os.stat(os.path.join(root, name)).st_size
    return total


class ProgressWriter:
    """Writes ``{state, bytes_done, bytes_total, files_total, percent, rate_bps, updated}`` to
    ``path`` every ``interval_s`` while a download runs (read back by the role's progress
    task, shown by ``glmops download``)."""

    def __init__(self, path: str | None, local_dir: str, manifest: Manifest, interval_s: float = 1.0):
        self.path, self.local_dir, self.manifest, self.interval = path, local_dir, manifest, interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._t0 = time.monotonic()
        self._b0 = 0
        #: fields every later write carries (the stalls so far, F31)
        self.extra: dict[str, Any] = {}

    def __enter__(self) -> "ProgressWriter":
        if self.path:
            self._b0 = bytes_on_disk(self.local_dir, self.manifest)
            self.write("running")
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(5)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.write("running")

    def write(self, state: str, **extra: Any) -> None:
        if not self.path:
            return
        done = bytes_on_disk(self.local_dir, self.manifest)
        total = self.manifest.total_bytes
        elapsed = max(time.monotonic() - self._t0, 1e-6)
        data = {"state": state, "bytes_done": done, "bytes_total": total,
                "files_total": len(self.manifest.files),
                "percent": round(100.0 * done / total, 1) if total else 100.0,
                "rate_bps": int(max(done - self._b0, 0) / elapsed), "updated": time.time(), **self.extra, **extra}
        with contextlib.suppress(OSError):
            _atomic_json(self.path, data, 0o644)


def read_progress(path: str) -> dict[str, Any]:
    """The progress JSON (``{"state": "absent"}`` when there is none yet)."""
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return {"state": "absent"}


# ---------------------------------------------------------------------------------- ownership
def fix_ownership(paths: list[str], user: str | None, group: str | None) -> bool:
    """Make the checkpoint tree owned by ``user:group``, directories ``2775`` (setgid: new
    entries keep the group), files ``0664``, and a default ACL ``g::rwX`` on directories when
    ``setfacl`` exists, so a file another group member creates (with any umask) stays
    group-writable and the service user can always resume or replace it. Others get read
    access only. Returns True when anything changed."""
    import grp
    import pwd

    uid = pwd.getpwnam(user).pw_uid if user else -1
    gid = grp.getgrnam(group).gr_gid if group else -1
    changed = False
    acl_dirs = []
    for top in paths:
        if not os.path.exists(top):
            continue
        for root, dirs, files in os.walk(top):
            for name, is_dir in [(root, True)] + [(os.path.join(root, f), False) for f in files]:
                st = os.lstat(name)
                if stat.S_ISLNK(st.st_mode):
                    continue
                want = 0o2775 if is_dir else 0o664
                if (uid != -1 and st.st_uid != uid) or (gid != -1 and st.st_gid != gid):
                    os.chown(name, uid, gid)
                    changed = True
                if stat.S_IMODE(st.st_mode) != want:
                    os.chmod(name, want)
                    changed = True
                if is_dir:
                    acl_dirs.append(name)
    if acl_dirs and shutil.which("setfacl") and shutil.which("getfacl"):
        missing = []
        for d in acl_dirs:
            out = subprocess.run(["getfacl", "--absolute-names", "--omit-header", "--default", d],
                                 capture_output=True, text=True).stdout
            if "default:group::rwx" not in out:
                missing.append(d)
        for i in range(0, len(missing), 200):
            subprocess.run(["setfacl", "-d", "-m", "u::rwx,g::rwx,o::rx", *missing[i:i + 200]], check=True)
            changed = True
    return changed


# ---------------------------------------------------------------------------------- download
def xet_available() -> bool:
    """True when ``hf_xet`` is importable (huggingface-hub then uses it for Xet-backed files)."""
    try:
        import importlib.util

        return importlib.util.find_spec("hf_xet") is not None
    except Exception:  # pragma: no cover
        return False


def download(repo: str, revision: str | None, local_dir: str | None = None, *, model_dir: str | None = None,
             endpoint: str | None = None, token: str | None = None, allow_patterns: list[str] | None = None,
             state_dir: str | None = None, progress_file: str | None = None,
             margin_ratio: float = DEFAULT_MARGIN_RATIO, margin_bytes: int = DEFAULT_MARGIN_BYTES,
             lock: bool = True, lock_timeout_s: float = 6 * 3600, max_workers: int = 8,
             owner: str | None = None, group: str | None = None, offline: bool = True,
             dry_run: bool = False, stall_timeout_s: float = DEFAULT_STALL_TIMEOUT_S,
             stall_fallback_after: int = DEFAULT_STALL_FALLBACK_AFTER,
             stall_max: int = DEFAULT_STALL_MAX, manifest_file: str | None = None) -> dict[str, Any]:
    """Download ``repo`` at ``revision`` into ``local_dir`` (default
    ``<model_dir>/<repo>/<commit>``), verified. See the module docstring for the steps.
    ``stall_*``: the watchdog of :func:`fetch_files` (F31). ``manifest_file``: the resolved
    manifest is written there (0600) before the first blob, so the fanout relay
    (:func:`relay`) can start forwarding files while the download runs.

    Returns ``{changed, commit, local_dir, manifest, fetched (paths requested from the hub),
    complete_before (already complete, not requested), space (SpaceCheck dict), verified, seconds, xet, lock_waited_s,
    stalls, plain_http}``.
    ``dry_run``: steps 1-2 only (check mode), nothing written. Raises :class:`CheckpointError`.
    The token is only handed to huggingface-hub; it never appears in the result or errors.
    """
    if local_dir is None and model_dir is None:
        raise CheckpointError("INPUT", "give local_dir or model_dir")
    problems = check_inputs(repo, revision, local_dir or "/", offline, model_dir if local_dir else None)
    if problems:
        raise CheckpointError("INPUT", "; ".join(problems))
    t0 = time.monotonic()
    manifest = resolve(repo, revision, endpoint=endpoint, token=token, allow_patterns=allow_patterns)
    local_dir = local_dir or local_dir_for(model_dir or "/", repo, manifest.commit)
    model_dir = model_dir or os.path.dirname(local_dir.rstrip("/"))  # lock next to the snapshot
    if manifest_file and not dry_run:
        _atomic_json(manifest_file, manifest.to_dict(), 0o600)
    mpath = marker_path(state_dir, repo, manifest.commit) if state_dir else None
    result: dict[str, Any] = {"changed": False, "commit": manifest.commit, "local_dir": local_dir,
                              "manifest": manifest.to_dict(), "fetched": [], "complete_before": [],
                              "xet": xet_available(), "lock_waited_s": 0.0, "verified": False,
                              "stalls": [], "plain_http": False}
    if mpath and marker_valid(read_marker(mpath), local_dir, manifest):
        result.update(verified=True, complete_before=[f.path for f in manifest.files], seconds=time.monotonic() - t0)
        return result
    space = space_check(local_dir, manifest, margin_ratio, margin_bytes)
    result["space"] = asdict(space)
    if not space.ok:
        raise CheckpointError("F10_DISK", space.message(), details={"needed": space.needed, "available": space.available,
                                                                    "filesystem": space.path})
    if dry_run:
        result.update(changed=True, fetched=[f.path for f in manifest.files
                                             if f.path not in complete_files(local_dir, manifest)])
        return result

    ctx = writer_lock(lock_path(model_dir, repo, manifest.commit), lock_timeout_s) if lock else contextlib.nullcontext(0.0)
    with ctx as waited:
        result["lock_waited_s"] = round(waited or 0.0, 3)
        # another writer may have finished while we waited (shared mount)
        if mpath and marker_valid(read_marker(mpath), local_dir, manifest):
            result.update(verified=True, complete_before=[f.path for f in manifest.files], seconds=time.monotonic() - t0)
            return result
        before = set(_client_complete(local_dir, manifest))
        os.makedirs(local_dir, exist_ok=True)
        result["stale_partial_bytes"] = remove_stale_partials(local_dir)
        fetched, records = _fetch_verified(repo, manifest, local_dir, before, progress_file, endpoint, token,
                                           max_workers, (stall_timeout_s, stall_fallback_after, stall_max))
        result.update(fetched)
        result["fetched"] = [f.path for f in manifest.files if f.path not in before]
        result["complete_before"] = sorted(before)
        if owner or group:
            fix_ownership([local_dir], owner, group)
            records = verify(local_dir, manifest, hashes=False)  # refresh mtimes (chmod keeps them)
        if mpath:
            write_marker(mpath, manifest, local_dir, records)
        result.update(changed=True, verified=True, seconds=round(time.monotonic() - t0, 3))
    return result


def _fetch_verified(repo: str, manifest: Manifest, local_dir: str, before: set[str], progress_file: str | None,
                    endpoint: str | None, token: str | None, max_workers: int,
                    watchdog: tuple[float, int, int]) -> tuple[dict[str, Any], list]:
    """:func:`fetch_files` (but ``before``, already complete) then :func:`verify`, reporting to
    ``progress_file`` (running, each stall, verifying, done or failed). ``watchdog``:
    ``(stall_timeout_s, stall_fallback_after, stall_max)``. Returns (fetch_files' result,
    verify's records); raises CheckpointError as they do."""
    with ProgressWriter(progress_file, local_dir, manifest) as progress:
        def on_stall(stall: dict[str, Any], stalls: list[dict[str, Any]], plain_http: bool) -> None:
            # a new dict, not an update: the writer thread may be reading the old one
            progress.extra = {**progress.extra, "stalls": list(stalls), "plain_http": plain_http,
                              "stalled": stall_text(stall, plain_http)}
            progress.write("running")

        try:
            fetched = fetch_files(repo, manifest, local_dir, endpoint, token, max_workers, *watchdog,
                                  on_stall=on_stall, skip=before)
        except CheckpointError as exc:
            progress.write("failed", error=exc.message)
            raise
        progress.write("verifying")
        try:
            records = verify(local_dir, manifest)
        except CheckpointError as exc:
            progress.write("failed", error=exc.message)
            raise
        progress.write("done")
    return fetched, records


def remove_stale_partials(local_dir: str) -> int:
    """Delete the client's ``*.incomplete`` leftovers of an earlier, killed run; returns their
    bytes. huggingface-hub 2.4.0 writes each file to a process-unique temporary name and never
    reuses one from another process (huggingface_hub PR 4228), so after a crash they are only
    dead weight. Called under the writer lock, so no live writer owns them."""
    freed = 0
    for root, _dirs, names in os.walk(os.path.join(local_dir, CLIENT_CACHE, "download")):
        for name in names:
            if name.endswith(".incomplete"):
                p = os.path.join(root, name)
                with contextlib.suppress(OSError):
                    freed += os.stat(p).st_size
                    os.unlink(p)
    return freed


def _client_complete(local_dir: str, manifest: Manifest) -> list[str]:
    """Files the client will not request again: present with the right size and its own
    metadata at this commit (``.cache/huggingface/download/<path>.metadata``)."""
    done = []
    for path in complete_files(local_dir, manifest):
        meta = os.path.join(local_dir, CLIENT_CACHE, "download", path + ".metadata")
        try:
            with open(meta, encoding="utf-8") as fh:
                if fh.readline().strip() == manifest.commit:
                    done.append(path)
        except OSError:
            pass
    return done


# One file per child process, so a stalled transfer can be ended alone (a thread cannot be
# killed) and every other file keeps its progress. Arguments (token included) come on stdin,
# never argv; "ready" once the client is imported (the watchdog's clock starts there), then the
# first line of an error goes to stdout as JSON.
_CHILD = r"""
import json, sys
a = json.loads(sys.stdin.read())
try:
    from huggingface_hub import hf_hub_download
    print("ready", flush=True)
    hf_hub_download(repo_id=a["repo"], filename=a["path"], revision=a["commit"], local_dir=a["local_dir"],
                    endpoint=a["endpoint"], token=a["token"] or False)
except BaseException as exc:
    text = str(exc).strip()
    print(json.dumps({"error": type(exc).__name__ + ": " + (text.splitlines()[0] if text else "")}))
    sys.exit(1)
"""


def plain_http_env(env: dict[str, str]) -> dict[str, str]:
    """``env`` with huggingface-hub's fast transfer off, so files come over plain HTTP GETs
    with Range resume (``http_get``). huggingface-hub 2.4.0 (constants.py, utils/_runtime.py):
    ``HF_HUB_DISABLE_XET=1`` makes ``is_xet_available()`` false; ``HF_XET_HIGH_PERFORMANCE`` only
    tunes hf_xet; ``hf_transfer`` is no longer used (``HF_HUB_ENABLE_HF_TRANSFER`` only warns),
    set to 0 for older clients."""
    out = dict(env)
    out.pop("HF_XET_HIGH_PERFORMANCE", None)
    out.update(HF_HUB_DISABLE_XET="1", HF_HUB_ENABLE_HF_TRANSFER="0")
    return out


def partial_prefix(local_dir: str, path: str) -> str:
    """Where the client writes ``path`` while it downloads into ``local_dir``: huggingface-hub
    2.4.0 ``_local_folder.py`` (``incomplete_path``: ``<short_hash(<name>.metadata)>.<etag>``
    beside the metadata under ``.cache/huggingface/download/<dir>``) and ``file_download.py``
    (``_download_to_tmp_and_move`` adds ``.<uuid8>.incomplete``)."""
    import base64

    d, name = os.path.split(path)
    short = base64.urlsafe_b64encode(hashlib.sha1(f"{name}.metadata".encode()).digest()).decode()
    return os.path.join(local_dir, CLIENT_CACHE, "download", d, short + ".")


def file_bytes(local_dir: str, path: str) -> int:
    """Bytes of ``path`` on disk in ``local_dir``: the finished file, else its partials."""
    with contextlib.suppress(OSError):
        return os.stat(os.path.join(local_dir, path)).st_size
    prefix = partial_prefix(local_dir, path)
    total = 0
    with contextlib.suppress(OSError):
        for name in os.listdir(os.path.dirname(prefix)):
            full = os.path.join(os.path.dirname(prefix), name)
            if full.startswith(prefix) and name.endswith(".incomplete"):
                with contextlib.suppress(OSError):
                    total += os.stat(full).st_size
    return total


def _remove_partials(local_dir: str, path: str) -> None:
    prefix = partial_prefix(local_dir, path)
    with contextlib.suppress(OSError):
        for name in os.listdir(os.path.dirname(prefix)):
            full = os.path.join(os.path.dirname(prefix), name)
            if full.startswith(prefix) and name.endswith(".incomplete"):
                with contextlib.suppress(OSError):
                    os.unlink(full)


_PDEATHSIG: Callable[[], Any] | None = None


def _die_with_parent_fn() -> Callable[[], Any] | None:
    """A ``preexec_fn`` making the child die with this process (``prctl(PR_SET_PDEATHSIG,
    SIGKILL)``): a transfer never outlives the download that started it, so a killed run leaves
    no writer. Resolved here, in the parent: the child (forked, maybe beside other threads)
    only calls it, importing nothing."""
    global _PDEATHSIG
    if _PDEATHSIG is None:
        try:
            import ctypes
            import signal

            prctl = ctypes.CDLL(None, use_errno=True).prctl
            sig = int(signal.SIGKILL)
            _PDEATHSIG = lambda: prctl(1, sig)  # noqa: E731 - PR_SET_PDEATHSIG
        except (OSError, AttributeError):  # pragma: no cover - not Linux
            _PDEATHSIG = lambda: None  # noqa: E731
    return _PDEATHSIG


class _Transfer:
    """One file in flight in its own child process."""

    def __init__(self, hf: HubFile, attempt: int, plain_http: bool, args: dict[str, Any]):
        import tempfile

        self.file, self.attempt, self.plain_http = hf, attempt, plain_http
        env = dict(os.environ, HF_HUB_DISABLE_PROGRESS_BARS="1")
        if plain_http:
            env = plain_http_env(env)
        self.out = tempfile.TemporaryFile()
        self.proc = subprocess.Popen([_python(), "-c", _CHILD], stdin=subprocess.PIPE, stdout=self.out,
                                     stderr=subprocess.STDOUT, env=env, preexec_fn=_die_with_parent_fn())
        with contextlib.suppress(BrokenPipeError):  # a child that died at once: its exit says why
            self.proc.stdin.write(json.dumps(dict(args, path=hf.path)).encode())
            self.proc.stdin.close()
        self.bytes = -1
        self.moved_at = time.monotonic()
        self.ready = False

    def started(self) -> bool:
        """True once the child has imported the client (its "ready" line)."""
        if not self.ready:
            with contextlib.suppress(OSError, ValueError):
                self.ready = os.fstat(self.out.fileno()).st_size > 0
        return self.ready

    def error(self) -> str:
        self.out.seek(0)
        text = self.out.read().decode("utf-8", "replace").strip()
        for line in reversed(text.splitlines()):
            with contextlib.suppress(ValueError, AttributeError):
                return str(json.loads(line)["error"])
        return text.splitlines()[-1] if text else f"exit {self.proc.returncode}"

    def kill(self) -> None:
        with contextlib.suppress(OSError):
            self.proc.kill()
        self.proc.wait()
        self.out.close()


def _python() -> str:
    """The interpreter for the transfers: this one (the hub venv's on a host)."""
    import sys

    return sys.executable


def fetch_files(repo: str, manifest: Manifest, local_dir: str, endpoint: str | None, token: str | None,
                max_workers: int = 8, stall_timeout_s: float = DEFAULT_STALL_TIMEOUT_S,
                stall_fallback_after: int = DEFAULT_STALL_FALLBACK_AFTER, stall_max: int = DEFAULT_STALL_MAX,
                on_stall: Callable[[dict[str, Any], list[dict[str, Any]], bool], None] | None = None,
                skip: set[str] | frozenset = frozenset(), poll_s: float | None = None) -> dict[str, Any]:
    """Fetch the manifest's files (but ``skip``) into ``local_dir`` with huggingface-hub's
    ``hf_hub_download``, ``max_workers`` at once, each in its own process, under a watchdog (F31):

    * a file whose bytes on disk (:func:`file_bytes`) do not move for ``stall_timeout_s`` is a
      stall: its transfer is killed, its partial removed, and the file is fetched again;
    * after ``stall_fallback_after`` stalls in the run every later transfer is plain HTTP
      (:func:`plain_http_env`);
    * a file that stalls ``stall_max`` times raises ``STALL`` naming it, with every stall.

    ``stall_timeout_s`` 0 turns the watchdog off. ``on_stall(stall, stalls, plain_http)`` is
    called at each stall (the progress file names it). Returns ``{stalls, plain_http}``; each
    stall is ``{path, bytes, size, percent, seconds, attempt, transfer}``. A transfer that
    fails otherwise raises ``HUB`` naming it, after every other file was tried. A file whose
    path resolves outside ``local_dir`` (a symlink in the tree: :func:`inside`) raises ``HUB``
    before any transfer."""
    args = {"repo": repo, "commit": manifest.commit, "local_dir": local_dir, "endpoint": endpoint,
            "token": token or ""}
    queue = [f for f in manifest.files if f.path not in skip]
    for f in queue:  # root writes here: a symlinked directory in the snapshot must not redirect a file
        inside(local_dir, f.path)
    attempts: dict[str, int] = {}
    stalls: list[dict[str, Any]] = []
    running: list[_Transfer] = []
    errors: list[tuple[str, str]] = []
    plain_http = False
    poll = poll_s if poll_s is not None else (min(1.0, stall_timeout_s / 10) if stall_timeout_s else 1.0)
    try:
        while queue or running:
            while queue and len(running) < max(1, int(max_workers)):
                hf = queue.pop(0)
                attempts[hf.path] = attempts.get(hf.path, 0) + 1
                running.append(_Transfer(hf, attempts[hf.path], plain_http, args))
            time.sleep(poll)
            now = time.monotonic()
            for t in list(running):
                rc = t.proc.poll()
                if rc is not None:
                    running.remove(t)
                    if rc != 0:
                        errors.append((t.file.path, t.error()))
                    t.out.close()
                    continue
                if not t.started():
                    t.moved_at = now
                    continue
                size = file_bytes(local_dir, t.file.path)
                if size != t.bytes:
                    t.bytes, t.moved_at = size, now
                    continue
                if not stall_timeout_s or now - t.moved_at < stall_timeout_s:
                    continue
                t.kill()
                running.remove(t)
                stall = _stopped(t, local_dir, now)
                stalls.append(stall)
                plain_http = plain_http or len(stalls) >= stall_fallback_after
                if on_stall:
                    with contextlib.suppress(Exception):
                        on_stall(stall, stalls, plain_http)
                mine = [s for s in stalls if s["path"] == t.file.path]
                if len(mine) >= stall_max:
                    raise CheckpointError(
                        "STALL", f"{t.file.path} stalled {len(mine)} times (no bytes for "
                        f"{stall_timeout_s:g} s, last at {stall['percent']:.1f} % over "
                        f"{'plain HTTP' if t.plain_http else 'the default transfer'}); "
                        f"download of {repo}@{manifest.commit} given up; run again to resume",
                        files=[t.file.path], details={"stalls": stalls})
                queue.insert(0, t.file)
    finally:
        for t in running:
            t.kill()
    if errors:
        raise _hub_failure(repo, manifest.commit, errors, token)
    return {"stalls": stalls, "plain_http": plain_http}


def _stopped(t: _Transfer, local_dir: str, now: float) -> dict[str, Any]:
    """Remove the partial of the stalled (killed) transfer ``t`` and return the stall
    ``{path, bytes, size, percent, seconds, attempt, transfer}`` (``now``: time.monotonic())."""
    _remove_partials(local_dir, t.file.path)
    size = max(t.bytes, 0)
    return {"path": t.file.path, "bytes": size, "size": t.file.size,
            "percent": round(100.0 * size / t.file.size, 1) if t.file.size else 0.0,
            "seconds": round(now - t.moved_at, 1), "attempt": t.attempt,
            "transfer": "http" if t.plain_http else "default"}


def _hub_failure(repo: str, commit: str, errors: list[tuple[str, str]], token: str | None) -> CheckpointError:
    """The HUB error naming every transfer that failed (``errors``: (path, message)), the
    token masked."""
    named = [p for p, _ in errors]
    text = "; ".join(f"{p}: {e}" for p, e in errors)
    if token:
        text = text.replace(token, "***")
    return CheckpointError("HUB", f"download of {repo}@{commit} failed ({text}); unfinished: "
                           f"{', '.join(named)}; run again to resume", files=named)


def stall_text(stall: dict[str, Any], plain_http: bool) -> str:
    """One line naming a stalled file: ``big.safetensors stalled at 42.0 % (no bytes for 600 s),
    attempt 1; fetching it again [over plain HTTP]``."""
    return (f"{stall['path']} stalled at {stall['percent']:.1f} % (no bytes for {stall['seconds']:g} s), "
            f"attempt {stall['attempt']}; fetching it again{' over plain HTTP' if plain_http else ''}")


def _glob_escape(path: str) -> str:
    """An fnmatch pattern matching exactly ``path``."""
    return "".join(f"[{c}]" if c in "*?[]" else c for c in path)


# ---------------------------------------------------------------------------------- peer copy
def verify_copy(local_dir: str, manifest: dict[str, Any] | Manifest, state_dir: str | None,
                owner: str | None = None, group: str | None = None, source: str = "peer",
                remove_refused: bool = False, hashes_file: str | None = None,
                run_id: str | None = None) -> dict[str, Any]:
    """Verify a copy received from a peer (fanout) or read from a shared mount against the
    hub manifest the downloading node used; write the marker. Returns ``{changed, verified,
    files, hashed_on_arrival}``; raises ``VERIFY`` naming the files. ``remove_refused``: delete
    the files that failed, so the next run copies them again (rsync would otherwise keep a file
    of the right size and mtime). ``hashes_file`` + ``run_id``: the digests
    :func:`hash_on_arrival` recorded in this run (:func:`read_hash_record`); a file unchanged
    since then is not read again (``hashed_on_arrival`` counts them), the verdict is the same."""
    man = manifest if isinstance(manifest, Manifest) else Manifest.from_dict(manifest)
    mpath = marker_path(state_dir, man.repo, man.commit) if state_dir else None
    if mpath and marker_valid(read_marker(mpath), local_dir, man):
        return {"changed": False, "verified": True, "files": len(man.files), "hashed_on_arrival": 0}
    known = read_hash_record(hashes_file, man, local_dir, run_id) if hashes_file and run_id else {}
    reused: list[str] = []
    try:
        records = verify(local_dir, man, known=known, reused=reused)
    except CheckpointError as exc:
        if remove_refused:
            for rel in exc.files:
                with contextlib.suppress(OSError):
                    os.unlink(inside(local_dir, rel))
            exc.message += f"; removed on this host: {', '.join(exc.files)} (the next run copies them again)"
        raise
    if owner or group:
        fix_ownership([local_dir], owner, group)
        records = verify(local_dir, man, hashes=False)
    if mpath:
        write_marker(mpath, man, local_dir, records, source=source)
    return {"changed": True, "verified": True, "files": len(records), "hashed_on_arrival": len(reused)}


def status(local_dir: str, repo: str, commit: str | None, state_dir: str) -> dict[str, Any]:
    """``{verified, marker, manifest}``: is there a valid marker for ``repo`` (at ``commit``,
    or at any commit when None: an unpinned checkpoint) for ``local_dir``. No hub access, no
    hashing."""
    if commit:
        candidates = [marker_path(state_dir, repo, commit)]
    else:
        base = os.path.join(state_dir, "checkpoints")
        prefix = repo.replace("/", "--") + "@"
        candidates = sorted(os.path.join(base, n) for n in (os.listdir(base) if os.path.isdir(base) else [])
                            if n.startswith(prefix) and n.endswith(".json"))
    for mpath in candidates:
        marker = read_marker(mpath)
        if marker_valid(marker, local_dir):
            return {"verified": True, "marker": mpath, "manifest": marker["manifest"]}
    return {"verified": False, "marker": None, "manifest": None}


# ---------------------------------------------------------------------------------- relay (fanout)
#: The fanout relay (issue 19): instead of "download everything, then push one copy per target
#: from the source", the hosts form a tree rooted at the source (:func:`relay_tree`) and every
#: host with children runs :func:`relay` from the moment the download starts: it pushes each
#: manifest file it holds completely to each child as soon as it has it. "Complete" is
#: "present at its final path with the manifest's size": huggingface-hub moves its
#: ``*.incomplete`` part into place only when the file is complete, and rsync (without
#: ``--inplace``/``--partial``) renames its temporary file into place only after the transfer,
#: so on every host a file at its final path is whole. Every host still verifies every file
#: against the source's manifest at the end (:func:`verify_copy`).
RUN_ID = re.compile(r"^[A-Za-z0-9_.-]{1,80}\Z")
DEFAULT_RELAY_FANOUT = 2
RELAY_FANOUT_ACCEPTED = ("accepted: a whole number >= 0 of children per host (0 a star: the source feeds every host, "
                         "1 a chain, 2 a binary tree)")
DEFAULT_RELAY_IDLE_S = 1800.0
DEFAULT_RELAY_RETRIES = 2


def relay_tree(hosts: list[str], fanout: int = DEFAULT_RELAY_FANOUT) -> dict[str, dict[str, Any]]:
    """The fanout tree over ``hosts`` (the source first, then the hosts that need a copy, in
    order): breadth-first, each host feeds up to ``fanout`` children (1: a chain, every host
    sends one copy; 2: a binary tree; 0: a star, the source feeds every host). Returns
    ``host -> {parent (None for the source), children, depth}``. Raises ``INPUT`` naming
    ``checkpoint_relay_fanout`` for a ``fanout`` that is not a whole number >= 0, or a host
    named twice."""
    if isinstance(fanout, bool) or not re.fullmatch(r"[0-9]+", str(fanout).strip()):
        raise CheckpointError("INPUT", f"checkpoint_relay_fanout={fanout!r}: {RELAY_FANOUT_ACCEPTED}")
    if len(set(hosts)) != len(hosts):
        raise CheckpointError("INPUT", f"relay hosts {hosts} name a host twice")
    k = max(int(fanout) if int(fanout) > 0 else len(hosts) - 1, 1)
    out: dict[str, dict[str, Any]] = {h: {"parent": None, "children": [], "depth": 0} for h in hosts}
    for i, h in enumerate(hosts[1:], start=1):
        parent = hosts[(i - 1) // k]
        out[h].update(parent=parent, depth=out[parent]["depth"] + 1)
        out[parent]["children"].append(h)
    return out


class RelayBook:
    """What a relay has sent to which child. A manifest file goes to a child once it is
    complete here and neither sent nor in flight to that child; one batch per child at a time."""

    def __init__(self, paths: list[str], children: list[str]):
        self.paths = list(paths)
        self.sent: dict[str, set[str]] = {c: set() for c in children}
        self.flight: dict[str, list[str]] = {c: [] for c in children}

    def ready(self, child: str, complete: set[str] | frozenset) -> list[str]:
        """The files to send ``child`` now (manifest order); none while a batch is in flight."""
        if self.flight[child]:
            return []
        return [p for p in self.paths if p in complete and p not in self.sent[child]]

    def start(self, child: str, paths: list[str]) -> None:
        self.flight[child] = list(paths)

    def finish(self, child: str, ok: bool) -> list[str]:
        """End ``child``'s batch; ``ok``: its files count as sent. Returns the batch."""
        batch, self.flight[child] = self.flight[child], []
        if ok:
            self.sent[child].update(batch)
        return batch

    def unsent(self) -> dict[str, list[str]]:
        """child -> files not sent yet (children that have every file left out)."""
        out = {c: [p for p in self.paths if p not in s] for c, s in self.sent.items()}
        return {c: v for c, v in out.items() if v}

    def done(self) -> bool:
        return not self.unsent() and not any(self.flight.values())

    def drop(self, child: str) -> list[str]:
        """Give up on ``child`` (its rsync kept failing): it gets nothing more and no longer
        holds :meth:`done` back. Returns the files it did not get."""
        missing = [p for p in self.paths if p not in self.sent.pop(child, set())]
        self.flight.pop(child, None)
        return missing


def relay_rsh(key: str, known_hosts: str, cipher: str) -> str:
    """rsync's ``--rsh``: the parent's push key only, the child's pinned host key, no agent."""
    return (f"ssh -i {key} -o BatchMode=yes -o IdentitiesOnly=yes -o StrictHostKeyChecking=yes "
            f"-o UserKnownHostsFile={known_hosts} -c {cipher} -o Compression=no")


def relay_rsync_argv(local_dir: str, list_file: str, rsh: str, dest: str) -> list[str]:
    """One batch to one child: the files named (NUL-separated) in ``list_file``, whole files,
    each renamed into place on the child only when complete (no ``--partial``/``--inplace``)."""
    return ["rsync", "--archive", "--whole-file", "--from0", f"--files-from={list_file}", f"--rsh={rsh}",
            local_dir.rstrip("/") + "/", dest]


def relay_abort_path(model_dir: str, run_id: str) -> str:
    """``<model_dir>/.glmops-locks/relay-<run_id>.abort``: a failed relay pushes it to its
    children (it is inside their ``rrsync -wo <model_dir>``), whose relays then stop at once."""
    if not RUN_ID.match(run_id or ""):
        raise CheckpointError("INPUT", f"relay run id {run_id!r}; accepted: 1-80 of [A-Za-z0-9_.-]")
    return os.path.join(model_dir, ".glmops-locks", f"relay-{run_id}.abort")


def _tree_bytes(root: str) -> int:
    total = 0
    for d, _dirs, names in os.walk(root):
        for n in names:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(d, n)).st_size
    return total


def _upstream_failure(host: str, parent: str | None, abort_file: str, progress_file: str | None,
                      results_file: str | None, all_here: bool) -> str | None:
    """Why no more files will arrive here, or None: the parent's abort file, or (on the
    source) the download's progress file saying failed / its async job ended early."""
    with contextlib.suppress(OSError):
        with open(abort_file, encoding="utf-8") as fh:
            return f"{parent or 'the parent'} stopped: {fh.read().strip()[:2000]}"
    if progress_file:
        prog = read_progress(progress_file)
        if prog.get("state") == "failed":
            return f"the download on {host} failed: {prog.get('error', '')}"
    if results_file and not all_here:
        job = async_job(results_file)
        if job is not None:
            return f"the download on {host} ended without every file: {job.get('msg') or 'no message'}"
    return None


def async_job(results_file: str | None) -> dict[str, Any] | None:
    """The final result in an Ansible async job's results file, None while the job runs (or
    before it wrote the file)."""
    if not results_file:
        return None
    try:
        with open(results_file, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return None
    return None if (data.get("started") and not data.get("finished")) else data


class _Batch:
    """One rsync to one child, running."""

    def __init__(self, argv: list[str], list_file: str):
        import tempfile

        self.list_file = list_file
        self.out = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=self.out, stderr=subprocess.STDOUT,
                                     preexec_fn=_die_with_parent_fn())

    def close(self) -> str:
        self.out.seek(0)
        text = self.out.read().decode("utf-8", "replace").strip()
        self.out.close()
        with contextlib.suppress(OSError):
            os.unlink(self.list_file)
        return text.splitlines()[-1] if text else ""

    def kill(self) -> None:
        with contextlib.suppress(OSError):
            self.proc.kill()
        self.proc.wait()
        self.close()


def relay(local_dir: str, manifest: dict[str, Any] | Manifest, children: list[dict[str, str]], *, host: str,
          rsh: str, rel_dir: str, model_dir: str, run_id: str, ssh_user: str = "root", parent: str | None = None,
          timeout_s: float = 172800.0, idle_s: float = DEFAULT_RELAY_IDLE_S, poll_s: float = 0.5,
          progress_file: str | None = None, async_results_file: str | None = None,
          retries: int = DEFAULT_RELAY_RETRIES) -> dict[str, Any]:
    """Push every manifest file to every child (``[{name, address}]``) as soon as it is
    complete here, one rsync per child at a time, children in parallel, until every child has
    every file (see the section comment above). ``rel_dir``: ``local_dir`` relative to
    ``model_dir`` (the children's ``rrsync -wo <model_dir>`` root).

    A child whose rsync fails ``retries`` + 1 times in a row is given up alone: the abort file
    goes to it (so its own subtree stops), and the relay goes on serving its siblings; the
    result names it in ``lost`` ({child: message naming this host, the child, its address, the
    exit and the files it lacks}), and the role fails that child with the message, not this host.

    Stops with ``RELAY`` naming this host and the files when: upstream failed (the parent's abort
    file; on the source, ``progress_file``/``async_results_file`` of the download); no byte moved
    under ``local_dir`` for ``idle_s`` while files are missing here; or ``timeout_s`` passed.
    Before raising it pushes the abort file to its children, so the whole subtree stops at once.
    Returns ``{changed, sent: {child: files}, batches, seconds, lost: {child: message}}``."""
    import tempfile

    man = manifest if isinstance(manifest, Manifest) else Manifest.from_dict(manifest)
    by_name = {c["name"]: c for c in children}
    sizes = {f.path: f.size for f in man.files}
    for p in sizes:
        inside(local_dir, p)
    abort_file = relay_abort_path(model_dir, run_id)
    book = RelayBook([f.path for f in man.files], list(by_name))
    running: dict[str, _Batch] = {}
    failures: dict[str, int] = {c: 0 for c in by_name}
    lost: dict[str, str] = {}
    aborts: list[subprocess.Popen] = []
    batches = 0
    t0 = last_move = last_probe = time.monotonic()
    bytes_seen = -1
    try:
        while True:
            complete = set(complete_files(local_dir, man))
            for child, b in list(running.items()):
                rc = b.proc.poll()
                if rc is None:
                    continue
                del running[child]
                err = b.close()
                batch = book.finish(child, rc == 0)
                if rc == 0:
                    failures[child] = 0
                    continue
                failures[child] += 1
                if failures[child] > retries:  # this child alone: its siblings keep their copies coming
                    c = by_name[child]
                    missing = book.drop(child)
                    lost[child] = (f"relay on {host}: rsync to {child} ({c['address']}) failed {failures[child]} "
                                   f"times (exit {rc}: {err}) sending {', '.join(batch[:5])}"
                                   f"{' ...' if len(batch) > 5 else ''}; {len(missing)} file(s) not sent")
                    aborts += _push_abort_file(abort_file, lost[child], {child: c}, rsh, ssh_user)
            if book.done():
                break
            why = _upstream_failure(host, parent, abort_file, progress_file, async_results_file,
                                    len(complete) == len(sizes))
            now = time.monotonic()
            if why:  # the download may have completed the last files since the scan above
                complete = set(complete_files(local_dir, man))
            if why and len(complete) < len(sizes):
                raise CheckpointError("RELAY", f"relay on {host}: {why}", files=sorted(set(sizes) - complete),
                                      details={"host": host})
            if now - last_probe >= 5 or bytes_seen < 0:
                last_probe = now
                seen = _tree_bytes(local_dir)
                if seen != bytes_seen:
                    bytes_seen, last_move = seen, now
            if len(complete) < len(sizes) and idle_s and now - last_move > idle_s:
                raise _relay_stuck(host, parent, book, complete, f"no byte arrived for {idle_s:g} s")
            if now - t0 > timeout_s:
                raise _relay_stuck(host, parent, book, complete, f"not done after {timeout_s:g} s")
            for child, c in by_name.items():
                if child in running or child in lost:
                    continue
                todo = book.ready(child, complete)
                if not todo:
                    continue
                fd, list_file = tempfile.mkstemp(prefix="glmops-relay-")
                with os.fdopen(fd, "wb") as fh:
                    fh.write(b"\0".join(p.encode() for p in todo))
                book.start(child, todo)
                running[child] = _Batch(relay_rsync_argv(local_dir, list_file, rsh,
                                                         f"{ssh_user}@{c['address']}:{rel_dir}/"), list_file)
                batches += 1
            time.sleep(poll_s)
    except CheckpointError as exc:
        for b in running.values():
            b.kill()
        running.clear()
        _push_abort(abort_file, exc.message, {c: v for c, v in by_name.items() if c not in lost}, rsh, ssh_user)
        raise
    finally:
        for b in running.values():
            b.kill()
        _reap(aborts)
    with contextlib.suppress(OSError):
        os.unlink(abort_file)
    return {"changed": bool(by_name), "sent": {c: len(s) for c, s in book.sent.items()}, "batches": batches,
            "seconds": round(time.monotonic() - t0, 3), "verified": False, "lost": lost}


def _relay_stuck(host: str, parent: str | None, book: RelayBook, complete: set[str], why: str) -> CheckpointError:
    unsent = book.unsent()
    missing = sorted({p for files in unsent.values() for p in files} - complete)
    parts = [f"{c}: {len(v)} file(s) not sent ({', '.join(v[:3])}{' ...' if len(v) > 3 else ''})"
             for c, v in unsent.items()]
    if missing:
        parts.append(f"not complete here, waited for from {parent or 'the hub download'}: {', '.join(missing[:5])}")
    return CheckpointError("RELAY", f"relay on {host}: {why}; " + "; ".join(parts),
                           files=sorted({p for v in unsent.values() for p in v}), details={"host": host})


def _push_abort(abort_file: str, message: str, children: dict[str, dict[str, str]], rsh: str, ssh_user: str) -> None:
    """Best effort: write ``message`` to the abort file and push it to every child."""
    if not children:
        return
    with contextlib.suppress(OSError):
        if not os.path.exists(abort_file):
            os.makedirs(os.path.dirname(abort_file), exist_ok=True)
            with open(abort_file, "w", encoding="utf-8") as fh:
                fh.write(message + "\n")
    _reap([subprocess.Popen(["rsync", f"--rsh={rsh}", abort_file, f"{ssh_user}@{c['address']}:.glmops-locks/"],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
           for c in children.values()])


def _push_abort_file(abort_file: str, message: str, children: dict[str, dict[str, str]], rsh: str,
                     ssh_user: str) -> list[subprocess.Popen]:
    """Start pushing ``message`` as the abort file to ``children`` only (one given-up child),
    without writing this host's own abort file (that would stop this relay and its siblings).
    Returns the rsync processes (:func:`_reap` them); best effort, never raises."""
    import tempfile

    try:
        tmp = tempfile.mkdtemp(prefix="glmops-abort-")
        one = os.path.join(tmp, os.path.basename(abort_file))
        with open(one, "w", encoding="utf-8") as fh:
            fh.write(message + "\n")
        procs = [subprocess.Popen(["rsync", f"--rsh={rsh}", one, f"{ssh_user}@{c['address']}:.glmops-locks/"],
                                  stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                 for c in children.values()]
    except OSError:
        return []
    for p in procs:
        p.glmops_tmp = tmp  # type: ignore[attr-defined]  # removed by _reap
    return procs


def _reap(procs: list[subprocess.Popen], timeout_s: float = 30) -> None:
    """Wait up to ``timeout_s`` for each push, kill what is left, remove their temp dirs."""
    for p in procs:
        with contextlib.suppress(subprocess.TimeoutExpired, OSError):
            p.wait(timeout_s)
        with contextlib.suppress(OSError):
            p.kill()
        tmp = getattr(p, "glmops_tmp", None)
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)


# ---------------------------------------------------------------------------------- hash on arrival
#: fanout (issue 19): every receiving host hashes each file as it arrives (:func:`hash_on_arrival`,
#: an async job beside the relays), so the final :func:`verify_copy` reads again only the files
#: that changed since or were not hashed yet. The record is trusted only for this run, this
#: manifest and this directory, only from a root-owned file nobody else can write, and a digest
#: only for a file whose size, mtime, ctime, inode and device are still those it had while it was
#: hashed (an owner can set the mtime back with utimensat after writing in place; the ctime moves
#: with every write or chmod and cannot be set).
HASHES_VERSION = 1
#: the stat fields a recorded digest is tied to
STAT_KEY = ("size", "mtime_ns", "ctime_ns", "ino", "dev")


def stat_key(st: os.stat_result) -> dict[str, int]:
    """``{size, mtime_ns, ctime_ns, ino, dev}`` of ``st`` (sizes in bytes, times in ns)."""
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "ctime_ns": st.st_ctime_ns, "ino": st.st_ino,
            "dev": st.st_dev}


def same_file(record: dict[str, Any], st: os.stat_result) -> bool:
    """True when ``record`` (a :func:`stat_key` plus a digest) still describes the file ``st``."""
    return all(record.get(k) == v for k, v in stat_key(st).items())


def read_hash_record(path: str | None, manifest: Manifest, local_dir: str, run_id: str | None) -> dict[str, dict[str, Any]]:
    """path -> entry ``{path, size, mtime_ns, ctime_ns, ino, dev, sha256|blob_id}`` of the
    record :func:`hash_on_arrival` wrote to ``path``, for the manifest's files; empty (nothing
    trusted) when the file is missing or unreadable, not owned by this process's user, writable
    by group or others, of another version, or made for another run id, repo, commit or
    ``local_dir``."""
    if not path or not run_id:
        return {}
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return {}
    try:
        st = os.fstat(fd)
        if st.st_uid != os.geteuid() or st.st_mode & 0o022 or not stat.S_ISREG(st.st_mode):
            return {}
        with os.fdopen(fd, encoding="utf-8") as fh:
            fd = -1
            data = json.load(fh)
    except (OSError, ValueError):
        return {}
    finally:
        if fd >= 0:
            os.close(fd)
    if not isinstance(data, dict) or [data.get(k) for k in ("version", "run_id", "repo", "commit", "local_dir")] != \
            [HASHES_VERSION, run_id, manifest.repo, manifest.commit, local_dir]:
        return {}
    files = data.get("files") if isinstance(data.get("files"), dict) else {}
    paths = {f.path for f in manifest.files}
    return {p: e for p, e in files.items() if p in paths and isinstance(e, dict)}


def _hash_entry(path: str, f: HubFile, st0: os.stat_result) -> dict[str, Any] | None:
    """The record entry of manifest file ``f`` at ``path`` (stat ``st0`` taken just before),
    or None when it changed while it was read (another stat, or the open file not the one
    stat'ed)."""
    kind = digest_kind(f)
    entry: dict[str, Any] = {"path": f.path, **stat_key(st0)}
    with open(path, "rb") as fh:
        st_fd = os.fstat(fh.fileno())
        if (st_fd.st_ino, st_fd.st_dev) != (st0.st_ino, st0.st_dev):
            return None
        if kind:
            entry[kind] = _digest_fh(fh, kind, st0.st_size)
    st1 = os.stat(path)
    return entry if stat_key(st1) == stat_key(st0) else None


def hash_on_arrival(local_dir: str, manifest: dict[str, Any] | Manifest, record_file: str, *, run_id: str,
                    model_dir: str | None = None, stop_file: str | None = None, timeout_s: float = 172800.0,
                    idle_s: float = DEFAULT_RELAY_IDLE_S, poll_s: float = 0.2) -> dict[str, Any]:
    """Watch ``local_dir`` on a host receiving a fanout copy and hash each manifest file as soon
    as it is present at its final path with the manifest's size (whole: see the relay section),
    sha256 for LFS files, git blob sha1 for the others, in manifest order. Each digest goes with
    the file's :func:`stat_key` (taken before and after the read: a file that changed meanwhile
    is not recorded) into ``record_file``: JSON ``{version, run_id, repo, commit, local_dir,
    files: {path: entry}}``, rewritten (atomic, mode 0600) after each file and emptied at the
    start, so no earlier run's digests stay in it. A recorded file that changes (rsync replaced
    it) is hashed again. The digests are not judged here: :func:`verify_copy` compares them.

    Ends when every file is recorded and unchanged (``done``), ``stop_file`` exists (``stop``,
    checked between files; removed on the way out), the relay abort file of ``run_id`` under
    ``model_dir`` exists (``abort``), files are missing and no byte arrived in ``local_dir`` for
    ``idle_s`` (``idle``), or after ``timeout_s`` (``timeout``). Never raises for a file (one it
    cannot read is left to the verify); raises ``INPUT``/``HUB`` for a bad run id or a manifest
    path outside ``local_dir``. Returns ``{changed, hashed (digests computed), files (recorded),
    stopped, seconds, verified: false}``."""
    man = manifest if isinstance(manifest, Manifest) else Manifest.from_dict(manifest)
    if not RUN_ID.match(run_id or ""):
        raise CheckpointError("INPUT", f"relay run id {run_id!r}; accepted: 1-80 of [A-Za-z0-9_.-]")
    for f in man.files:
        inside(local_dir, f.path)
    abort_file = relay_abort_path(model_dir, run_id) if model_dir else None
    files: dict[str, dict[str, Any]] = {}
    data = {"version": HASHES_VERSION, "run_id": run_id, "repo": man.repo, "commit": man.commit,
            "local_dir": local_dir, "files": files}
    _atomic_json(record_file, data, 0o600)
    unreadable: dict[str, dict[str, int]] = {}  # path -> stat_key of a file that could not be read
    hashed = 0
    t0 = last_move = time.monotonic()
    last_probe, bytes_seen = t0, _tree_bytes(local_dir)

    def end() -> str | None:
        if stop_file and os.path.exists(stop_file):
            return "stop"
        if abort_file and os.path.exists(abort_file):
            return "abort"
        return "timeout" if time.monotonic() - t0 > timeout_s else None

    stopped = end()
    try:
        while stopped is None:
            missing = progressed = False
            for f in man.files:
                p = os.path.join(local_dir, f.path)
                try:
                    st = os.stat(p)
                except OSError:
                    missing = True
                    continue
                if st.st_size != f.size:
                    missing = True
                    continue
                if (f.path in files and same_file(files[f.path], st)) or unreadable.get(f.path) == stat_key(st):
                    continue
                progressed = True
                try:
                    entry = _hash_entry(p, f, st)
                except OSError:
                    entry, unreadable[f.path] = None, stat_key(st)
                if entry is not None:
                    files[f.path] = entry
                    hashed += 1
                    _atomic_json(record_file, data, 0o600)
                if (stopped := end()) is not None:
                    break
            if stopped is not None:
                break
            if not missing and not progressed:
                stopped = "done"
                break
            now = time.monotonic()
            if progressed:
                last_move = now
                continue
            if now - last_probe >= 5:
                last_probe, seen = now, _tree_bytes(local_dir)
                if seen != bytes_seen:
                    bytes_seen, last_move = seen, now
            if idle_s and now - last_move > idle_s:
                stopped = "idle"
                break
            time.sleep(poll_s)
            stopped = end()
    finally:
        if stop_file:
            with contextlib.suppress(OSError):
                os.unlink(stop_file)
    return {"changed": hashed > 0, "hashed": hashed, "files": len(files), "stopped": stopped,
            "seconds": round(time.monotonic() - t0, 3), "verified": False}


# ---------------------------------------------------------------------------------- relay keys
#: the comment that names a parent's push key in its children's authorized_keys
KEY_COMMENT = "glmops-checkpoint-fanout@"


def relay_keys(key_path: str | None, host: str, host_key_path: str | None) -> dict[str, Any]:
    """One call per host of the relay tree: create this host's push key when ``key_path`` is
    given and it is missing (ed25519, no passphrase, comment ``glmops-checkpoint-fanout@<host>``;
    it feeds children), and read the public key and the SSH host key (``host_key_path``; it
    receives). Returns ``{changed, pubkey, host_key}``."""
    out: dict[str, Any] = {"changed": False, "pubkey": None, "host_key": None}
    if key_path:
        if not os.path.exists(key_path):
            os.makedirs(os.path.dirname(key_path), mode=0o700, exist_ok=True)
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", KEY_COMMENT + host, "-f", key_path],
                           check=True, capture_output=True)
            out["changed"] = True
        with open(key_path + ".pub", encoding="utf-8") as fh:
            out["pubkey"] = fh.read().strip()
    if host_key_path:
        with open(host_key_path, encoding="utf-8") as fh:
            out["host_key"] = " ".join(fh.read().split()[:2])
    return out


def _write_if_changed(path: str, text: str, mode: int, uid: int = -1, gid: int = -1) -> bool:
    with contextlib.suppress(OSError):
        with open(path, encoding="utf-8") as fh:
            if fh.read() == text and stat.S_IMODE(os.stat(path).st_mode) == mode:
                return False
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.chmod(tmp, mode)
    if uid != -1 or gid != -1:
        os.chown(tmp, uid, gid)
    os.replace(tmp, path)
    return True


def relay_trust(*, known_hosts: str | None = None, children: list[dict[str, str]] | None = None,
                authorized_keys: str | None = None, parent: str | None = None, parent_address: str | None = None,
                parent_pubkey: str | None = None, model_dir: str | None = None, user: str = "root") -> dict[str, Any]:
    """One call per host of the relay tree. With ``children`` (``[{address, host_key}]``): pin
    their SSH host keys in ``known_hosts`` (0644). With ``parent``: ``authorized_keys`` (of
    ``user``, 0600 in a 0700 ``.ssh``) accepts the parent's push key only as
    ``restrict,from="<parent address>",command="/usr/bin/rrsync -wo <model_dir>"`` and holds no
    other host's push key. Returns ``{changed}``."""
    import pwd

    changed = False
    if children:
        text = "".join(f"{c['address']} {c['host_key']}\n" for c in children)
        changed |= _write_if_changed(known_hosts, text, 0o644)
    if parent:
        if not (parent_pubkey and parent_address and model_dir and parent_pubkey.endswith(KEY_COMMENT + parent)):
            raise CheckpointError("INPUT", f"no push key of {parent} for this host (it failed before it could feed it)")
        pw = pwd.getpwnam(user)
        ssh_dir = os.path.dirname(authorized_keys)
        if not os.path.isdir(ssh_dir):
            os.makedirs(ssh_dir, mode=0o700)
            os.chown(ssh_dir, pw.pw_uid, pw.pw_gid)
            changed = True
        lines: list[str] = []
        with contextlib.suppress(FileNotFoundError):
            with open(authorized_keys, encoding="utf-8") as fh:
                lines = fh.read().splitlines()
        keep = [ln for ln in lines if not re.search(re.escape(KEY_COMMENT) + r"\S+$", ln)]
        keep.append(f'restrict,from="{parent_address}",command="/usr/bin/rrsync -wo {model_dir}" {parent_pubkey}')
        changed |= _write_if_changed(authorized_keys, "\n".join(keep) + "\n", 0o600, pw.pw_uid, pw.pw_gid)
    return {"changed": changed}
