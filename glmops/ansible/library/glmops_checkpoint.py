#!/usr/bin/python
"""Ansible module ``glmops_checkpoint``: the host side of roles/checkpoint.

All logic is ``glmops.checkpoint`` (shipped to the host as the module_utils
``glmops_checkpoint``, a symlink to that file); this module maps arguments and results.
"""
from __future__ import annotations

DOCUMENTATION = r"""
module: glmops_checkpoint
short_description: Download, verify and inspect a pinned Hugging Face checkpoint on a host
description:
  - C(action=download) resolves the revision to a commit, checks the free space against the hub's tree
    listing plus a margin (fails before the first blob, naming needed and available bytes, F10), takes the
    writer lock, runs huggingface_hub C(snapshot_download) into I(local_dir), verifies every file (size;
    sha256 for LFS files; git blob sha1 for the others) and writes a marker under I(state_dir).
    Needs huggingface-hub on the interpreter running the module (the role sets the hub venv's python).
  - C(action=status) reports whether a valid marker exists (no hub access, no hashing).
  - C(action=resolve) returns the commit and the manifest without downloading.
  - C(action=verify) checks a copy received from a peer against a I(manifest) and writes the marker; with
    I(hashes_file) and I(run_id) a file unchanged since C(action=hash) recorded it in this run is not read again.
    With I(async_results_file) (that C(action=hash) job) and I(stop_file) it first ends the job (creates the stop
    file, waits up to I(wait_s) for the job's result, removes both files); the job's failure does not fail the verify.
  - C(action=space) checks the free space for a I(manifest) in I(local_dir) (F10), before a peer copy.
  - C(action=progress) reads the progress file a running download writes (for the role's poll loop).
  - C(action=keys) creates this host's push key (I(fanout_key), when it feeds children) and returns it and the
    SSH host key (I(host_key_file), when it receives), in one call.
  - C(action=trust) pins the children's host keys in I(known_hosts) and makes the receiving user's
    authorized_keys accept only the parent's push key, from its address, for C(rrsync -wo <model_dir>).
  - C(action=wait) waits up to I(wait_s) for the async job of I(async_results_file) to end (reads the
    file every 0.2 s, so the role's loop sees the end at once instead of at its next poll); then returns
    the job's own result (failing with its message when it failed) and removes the results file.
  - C(action=manifest) reads the manifest a running download wrote to I(manifest_file), waiting up to
    I(wait_s) for it (None until then; finished when it is there or the job ended).
  - C(action=relay) pushes every file of I(manifest) to each of I(children) as soon as it is complete in
    I(local_dir) (fanout tree, issue 19), with the parent's push key; fails naming the host, child and files.
  - C(action=hash) runs on a host receiving a fanout copy (an async job beside the relays) and hashes each file of
    I(manifest) as soon as it is complete in I(local_dir) and records the digests with each file's stat in
    I(hashes_file) (0600) for this I(run_id); ends when every file is recorded, at I(stop_file), at the relay's
    abort file, when no byte arrived for I(relay_idle_s) or after I(relay_timeout_s). Never fails for a file
    (the verify hashes what is not recorded); runs at nice 10.
  - The HF token is read from I(token_file) (mode 0600) and never returned.
version_added: "0.1.0"
author: glmops
options:
  action:
    description: What to do.
    type: str
    choices: [download, status, resolve, verify, progress, space, manifest, relay, wait, keys, trust, hash]
    default: download
  repo:
    description: Hugging Face repo id (owner/name).
    type: str
  revision:
    description: 40-hex commit; empty resolves C(main) (only with I(offline=false) for a branch name).
    type: str
  local_dir:
    description: Directory the snapshot lives in (the engines' model path).
    type: path
  model_dir:
    description: Root of the checkpoints; the writer lock lives in C(<model_dir>/.glmops-locks).
    type: path
  state_dir:
    description: Where the verified marker is written (C(<state_dir>/checkpoints/...)).
    type: path
  endpoint:
    description: Hub URL; empty uses huggingface-hub's default.
    type: str
    default: ""
  token_file:
    description: File holding the HF token (mode 0600 or stricter); missing or empty means no token.
    type: path
    no_log: false
  remove_token_file:
    description: Delete I(token_file) as soon as it has been read (the token then lives only in this process).
    type: bool
    default: false
  allow_patterns:
    description: Glob patterns of the files to fetch (snapshot_download semantics); empty means all.
    type: list
    elements: str
    default: []
  offline:
    description: Serving is offline, so I(revision) must be a commit (F12).
    type: bool
    default: true
  margin_ratio:
    description: Free-space margin as a fraction of the checkpoint size.
    type: float
    default: 0.02
  margin_bytes:
    description: Minimum free-space margin in bytes.
    type: int
    default: 536870912
  lock_timeout_s:
    description: Seconds to wait for another writer of the same checkpoint.
    type: int
    default: 21600
  max_workers:
    description: Parallel file downloads.
    type: int
    default: 8
  owner:
    description: Service user owning the checkpoint tree.
    type: str
  group:
    description: Group owning the checkpoint tree (group-writable, setgid directories).
    type: str
  progress_file:
    description: JSON progress file written while downloading and read by C(action=progress).
    type: path
  async_results_file:
    description: >-
      For C(action=progress), the async job's results file; a finished job ends the poll. For C(action=wait), the
      job to wait for; for C(action=verify), the C(action=hash) job to end first.
    type: path
  manifest:
    description: For C(action=verify) and C(action=space), the manifest the downloading node returned.
    type: dict
  hashes:
    description: For C(action=verify), also check hashes (false checks sizes only).
    type: bool
    default: true
  source:
    description: For C(action=verify), where the copy came from (recorded in the marker).
    type: str
    default: peer
  manifest_file:
    description: For C(action=download), write the resolved manifest here before the first blob; read by C(action=manifest).
    type: path
  children:
    description: For C(action=relay), the hosts this one feeds, each C({name, address}).
    type: list
    elements: dict
    default: []
  parent:
    description: For C(action=relay), the host feeding this one (empty on the source; named in errors).
    type: str
    default: ""
  host:
    description: For C(action=relay), this host's name (named in errors).
    type: str
    default: ""
  rel_dir:
    description: For C(action=relay), I(local_dir) relative to I(model_dir) (the children's rrsync root).
    type: str
  run_id:
    description: >-
      For C(action=relay), this run's id (names the abort file a failed relay pushes to its children); for
      C(action=hash) and C(action=verify), the run the digests of I(hashes_file) belong to.
    type: str
  hashes_file:
    description: >-
      For C(action=hash), where the digests go (root-owned JSON, 0600); for C(action=verify), the digests to reuse
      (ignored unless written by this user, not group/other-writable, for this I(run_id), repo, commit and I(local_dir)).
    type: path
  stop_file:
    description: For C(action=hash), the file that ends the job (checked between files); for C(action=verify), created first.
    type: path
  fanout_key:
    description: For C(action=relay), the private key pushing to the children.
    type: path
  known_hosts:
    description: For C(action=relay), the file pinning the children's host keys.
    type: path
  cipher:
    description: For C(action=relay), the SSH cipher.
    type: str
    default: aes128-gcm@openssh.com
  ssh_user:
    description: For C(action=relay), the user the children accept the key for.
    type: str
    default: root
  relay_timeout_s:
    description: For C(action=relay) and C(action=hash), the longest the job runs.
    type: float
    default: 172800
  host_key_file:
    description: For C(action=keys), the SSH host public key to return (empty returns none).
    type: path
  parent_address:
    description: For C(action=trust), the parent's address (the only one its key is accepted from).
    type: str
  parent_pubkey:
    description: For C(action=trust), the parent's push key (public).
    type: str
  authorized_keys:
    description: For C(action=trust), the receiving user's authorized_keys file.
    type: path
  remove_refused:
    description: For C(action=verify), delete the files that fail, so the next run copies them again.
    type: bool
    default: false
  wait_s:
    description: >-
      For C(action=wait) and C(action=manifest), the longest one call waits; for C(action=verify), the longest it waits
      for the C(action=hash) job to end.
    type: float
    default: 60
  relay_idle_s:
    description: >-
      For C(action=relay), fail when files are missing here and no byte arrived for this long; for C(action=hash),
      end then.
    type: float
    default: 1800
  stall_timeout_s:
    description: >-
      F31 watchdog: a file whose bytes on disk do not move for this many seconds is stalled; its transfer is
      ended, the file named (progress file, result) and fetched again. 0 turns the watchdog off.
    type: float
    default: 600
  stall_fallback_after:
    description: After this many stalls in a run, every later transfer goes over plain HTTP (hf_xet off).
    type: int
    default: 2
  stall_max:
    description: A file that stalls this many times fails the download (code STALL), named.
    type: int
    default: 4
"""

EXAMPLES = r"""
- name: Download the checkpoint
  glmops_checkpoint:
    repo: glmops-lab/tiny-llama
    revision: fe40d458d5998d162f66364ccee30bb27f5e658f
    local_dir: /models/glmops-lab/tiny-llama/fe40d458d5998d162f66364ccee30bb27f5e658f
    model_dir: /models
    state_dir: /var/lib/glmops
    token_file: /var/lib/glmops/checkpoint/hf_token
  vars:
    ansible_python_interpreter: /opt/glmops/venvs/hub-2.4.0/bin/python
"""

RETURN = r"""
commit: {description: the 40-hex commit, type: str, returned: download resolve}
manifest: {description: repo, commit, files (path, size, blob_id, sha256), total_bytes, type: dict, returned: download resolve status}
fetched: {description: files requested from the hub in this run, type: list, returned: download}
complete_before: {description: files already complete (not requested again), type: list, returned: download}
verified: {description: the local copy matches the manifest, type: bool, returned: always}
stalls: {description: "files that stalled and were fetched again (path, bytes, percent, seconds, attempt, transfer)", type: list, returned: download}
sent: {description: "files sent to each child (child: count)", type: dict, returned: relay}
hashed: {description: digests computed as the files arrived, type: int, returned: hash}
stopped: {description: "why the hash job ended: done, stop, abort, idle, timeout or error", type: str, returned: hash}
hashed_on_arrival: {description: files verified with the digest recorded on arrival (not read again), type: int, returned: verify}
hash_job: {description: "the action=hash job's result (hashed, files, stopped, seconds), or null", type: dict, returned: verify}
code: {description: error code on failure (F10_DISK, VERIFY, HUB, REVISION, LOCK, INPUT, STALL, RELAY), type: str, returned: failure}
files: {description: files a failure concerns, type: list, returned: failure}
needed: {description: bytes needed (F10), type: int, returned: F10 failure}
available: {description: bytes available (F10), type: int, returned: F10 failure}
"""

import os
import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils import glmops_checkpoint as ck


#: the module's options (DOCUMENTATION says what each means)
_ARGUMENT_SPEC = dict(
    action=dict(type="str", default="download",
                choices=["download", "status", "resolve", "verify", "progress", "space", "manifest", "relay", "wait",
                         "keys", "trust", "hash"]),
    repo=dict(type="str"),
    revision=dict(type="str"),
    local_dir=dict(type="path"),
    model_dir=dict(type="path"),
    state_dir=dict(type="path"),
    endpoint=dict(type="str", default=""),
    token_file=dict(type="path", no_log=False),
    remove_token_file=dict(type="bool", default=False),
    allow_patterns=dict(type="list", elements="str", default=[]),
    offline=dict(type="bool", default=True),
    margin_ratio=dict(type="float", default=ck.DEFAULT_MARGIN_RATIO),
    margin_bytes=dict(type="int", default=ck.DEFAULT_MARGIN_BYTES),
    lock_timeout_s=dict(type="int", default=21600),
    max_workers=dict(type="int", default=8),
    owner=dict(type="str"),
    group=dict(type="str"),
    progress_file=dict(type="path"),
    async_results_file=dict(type="path"),
    manifest=dict(type="dict"),
    hashes=dict(type="bool", default=True),
    source=dict(type="str", default="peer"),
    manifest_file=dict(type="path"),
    children=dict(type="list", elements="dict", default=[]),
    parent=dict(type="str", default=""),
    host=dict(type="str", default=""),
    rel_dir=dict(type="str"),
    run_id=dict(type="str"),
    hashes_file=dict(type="path"),
    stop_file=dict(type="path"),
    fanout_key=dict(type="path", no_log=False),
    known_hosts=dict(type="path"),
    cipher=dict(type="str", default="aes128-gcm@openssh.com"),
    ssh_user=dict(type="str", default="root"),
    relay_timeout_s=dict(type="float", default=172800.0),
    relay_idle_s=dict(type="float", default=ck.DEFAULT_RELAY_IDLE_S),
    wait_s=dict(type="float", default=60.0),
    remove_refused=dict(type="bool", default=False),
    host_key_file=dict(type="path"),
    parent_address=dict(type="str"),
    parent_pubkey=dict(type="str"),
    authorized_keys=dict(type="path", no_log=False),
    stall_timeout_s=dict(type="float", default=ck.DEFAULT_STALL_TIMEOUT_S),
    stall_fallback_after=dict(type="int", default=ck.DEFAULT_STALL_FALLBACK_AFTER),
    stall_max=dict(type="int", default=ck.DEFAULT_STALL_MAX),
)

#: the options each action needs
_REQUIRED_IF = [
    ("action", "download", ("repo", "local_dir", "model_dir", "state_dir")),
    ("action", "status", ("repo", "local_dir", "state_dir")),
    ("action", "resolve", ("repo",)),
    ("action", "verify", ("local_dir", "manifest")),
    ("action", "space", ("local_dir", "manifest")),
    ("action", "progress", ("progress_file",)),
    ("action", "manifest", ("manifest_file",)),
    ("action", "wait", ("async_results_file",)),
    ("action", "relay", ("local_dir", "model_dir", "manifest", "rel_dir", "run_id", "fanout_key", "known_hosts")),
    ("action", "hash", ("local_dir", "model_dir", "manifest", "run_id", "hashes_file")),
]


def main():
    module = AnsibleModule(
        argument_spec=_ARGUMENT_SPEC,
        supports_check_mode=True,
        required_if=_REQUIRED_IF,
    )
    p = module.params
    action = p["action"]
    bad = [f"{k}={p[k]!r} (accepted: {what})" for k, ok, what in (
        ("stall_timeout_s", p["stall_timeout_s"] >= 0, "0 (off) or more seconds"),
        ("stall_fallback_after", p["stall_fallback_after"] >= 1, "1 or more"),
        ("stall_max", p["stall_max"] >= 1, "1 or more")) if not ok]
    if bad:
        module.fail_json(msg="glmops_checkpoint: " + "; ".join(bad), code="INPUT")
    revision = p["revision"] or None
    try:
        token = None
        if action in ("download", "resolve"):
            token = ck.read_token(p["token_file"])
            if p["remove_token_file"] and p["token_file"] and os.path.exists(p["token_file"]):
                os.unlink(p["token_file"])
        if action == "progress":
            data = ck.read_progress(p["progress_file"])
            data["finished"] = data.get("state") in ("done", "failed") or _job_finished(p["async_results_file"])
            # glmops.runner.event_of: glmops download prints these polls itself
            module.exit_json(changed=False, glmops_event="download_progress", **data)
        if action == "wait":
            _wait(module, p)
        if action == "keys":
            if module.check_mode:
                module.exit_json(changed=bool(p["fanout_key"]) and not os.path.exists(p["fanout_key"]), verified=False)
            module.exit_json(verified=False, **ck.relay_keys(p["fanout_key"], p["host"], p["host_key_file"]))
        if action == "trust":
            if module.check_mode:
                module.exit_json(changed=False, verified=False)
            module.exit_json(verified=False, **ck.relay_trust(
                known_hosts=p["known_hosts"], children=p["children"], authorized_keys=p["authorized_keys"],
                parent=p["parent"] or None, parent_address=p["parent_address"], parent_pubkey=p["parent_pubkey"],
                model_dir=p["model_dir"], user=p["ssh_user"]))
        if action == "manifest":
            end = time.monotonic() + max(p["wait_s"], 0)
            while True:
                data = ck.read_progress(p["manifest_file"])
                manifest = data if data.get("files") else None
                finished = manifest is not None or _job_finished(p["async_results_file"])
                if finished or time.monotonic() >= end:
                    break
                time.sleep(0.2)
            module.exit_json(changed=False, manifest=manifest, verified=False, finished=finished)
        if action == "relay":
            if module.check_mode:
                module.exit_json(changed=bool(p["children"]), verified=False)
            out = ck.relay(p["local_dir"], p["manifest"], [{"name": str(c["name"]), "address": str(c["address"])}
                                                           for c in p["children"]],
                           host=p["host"], rsh=ck.relay_rsh(p["fanout_key"], p["known_hosts"], p["cipher"]),
                           rel_dir=p["rel_dir"], model_dir=p["model_dir"], run_id=p["run_id"],
                           ssh_user=p["ssh_user"], parent=p["parent"] or None, timeout_s=p["relay_timeout_s"],
                           idle_s=p["relay_idle_s"], progress_file=p["progress_file"],
                           async_results_file=p["async_results_file"])
            module.exit_json(**out)
        if action == "hash":
            _hash(module, p)
        if action == "status":
            out = ck.status(p["local_dir"], p["repo"], revision, p["state_dir"])
            module.exit_json(changed=False, **out)
        if action == "resolve":
            problems = ck.check_inputs(p["repo"], revision, p["local_dir"] or "/", p["offline"])
            if problems:
                raise ck.CheckpointError("INPUT", "; ".join(problems))
            man = ck.resolve(p["repo"], revision, endpoint=p["endpoint"] or None,
                             token=token, allow_patterns=p["allow_patterns"] or None)
            module.exit_json(changed=False, commit=man.commit, manifest=man.to_dict(), verified=False)
        if action == "space":
            sc = ck.space_check(p["local_dir"], ck.Manifest.from_dict(p["manifest"]), p["margin_ratio"], p["margin_bytes"])
            if not sc.ok:
                raise ck.CheckpointError("F10_DISK", sc.message(), details={"needed": sc.needed, "available": sc.available,
                                                                            "filesystem": sc.path})
            module.exit_json(changed=False, needed=sc.needed, available=sc.available, verified=False)
        if action == "verify":
            _verify(module, p)
        # download
        out = ck.download(
            p["repo"], revision, p["local_dir"], model_dir=p["model_dir"], endpoint=p["endpoint"] or None,
            token=token, allow_patterns=p["allow_patterns"] or None,
            state_dir=p["state_dir"], progress_file=p["progress_file"], margin_ratio=p["margin_ratio"],
            margin_bytes=p["margin_bytes"], lock_timeout_s=p["lock_timeout_s"], max_workers=p["max_workers"],
            owner=p["owner"], group=p["group"], offline=p["offline"], dry_run=module.check_mode,
            stall_timeout_s=p["stall_timeout_s"], stall_fallback_after=p["stall_fallback_after"],
            stall_max=p["stall_max"], manifest_file=p["manifest_file"])
        module.exit_json(**out)
    except ck.CheckpointError as exc:
        module.fail_json(msg=f"[{exc.code}] {exc.message}", **exc.to_dict())


def _verify(module, p):
    """action=verify: check a copy received from a peer against ``p["manifest"]`` (sizes only
    without ``hashes``) and write the marker; check mode only reports whether it is verified.
    Exits the module (CheckpointError propagates to main)."""
    man = ck.Manifest.from_dict(p["manifest"])
    if module.check_mode:
        st = ck.status(p["local_dir"], man.repo, man.commit, p["state_dir"]) if p["state_dir"] else {"verified": False}
        module.exit_json(changed=not st["verified"], verified=st["verified"])
    hash_job = _end_hash_job(p) if p["async_results_file"] else None
    if not p["hashes"]:
        records = ck.verify(p["local_dir"], man, hashes=False)
        changed = False
        if p["owner"] or p["group"]:
            changed = ck.fix_ownership([p["local_dir"]], p["owner"], p["group"])
        module.exit_json(changed=changed, verified=True, files=len(records))
    out = ck.verify_copy(p["local_dir"], man, p["state_dir"], p["owner"], p["group"], p["source"],
                         remove_refused=p["remove_refused"], hashes_file=p["hashes_file"], run_id=p["run_id"])
    module.exit_json(hash_job=hash_job, **out)


def _end_hash_job(p):
    """End the action=hash job of ``p["async_results_file"]`` before the verify reads its
    record: create ``p["stop_file"]`` (the job stops after the file it is reading), wait up to
    ``wait_s`` for its result, remove the results and stop files. Returns the job's result
    ``{hashed, files, stopped, seconds}`` (None when it did not end in time: the verify then
    reads what is not recorded). Its failure is only reported: the verify does not need it."""
    try:
        if p["stop_file"]:
            with open(p["stop_file"], "a", encoding="utf-8"):
                pass
        end = time.monotonic() + max(p["wait_s"], 0)
        while (job := ck.async_job(p["async_results_file"])) is None and time.monotonic() < end:
            time.sleep(0.1)
        if job is None:
            return None
        for path in (p["async_results_file"], p["stop_file"]):
            if path and os.path.exists(path):
                os.unlink(path)
    except OSError as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}
    return {k: job.get(k) for k in ("hashed", "files", "stopped", "seconds", "error", "msg") if k in job}


def _hash(module, p):
    """action=hash: the digests of the files as they arrive (ck.hash_on_arrival), at nice 10 so
    the relays on this host go first. Exits the module; never fails (the verify hashes whatever
    is not recorded): an error is returned as ``error`` with ``stopped: error``."""
    if module.check_mode:
        module.exit_json(changed=False, verified=False)
    try:
        os.nice(10)
        out = ck.hash_on_arrival(p["local_dir"], p["manifest"], p["hashes_file"], run_id=p["run_id"],
                                 model_dir=p["model_dir"], stop_file=p["stop_file"], timeout_s=p["relay_timeout_s"],
                                 idle_s=p["relay_idle_s"])
    except Exception as exc:  # noqa: BLE001 - reported, never fatal: the verify reads the files itself
        text = exc.message if isinstance(exc, ck.CheckpointError) else f"{type(exc).__name__}: {exc}"
        module.exit_json(changed=False, verified=False, hashed=0, files=0, stopped="error", error=text)
    module.exit_json(**out)


def _wait(module, p):
    """action=wait: up to ``wait_s`` for the async job to end; then its own result (failed when
    it failed, with its message), and its results file removed (async_status cleanup)."""
    end = time.monotonic() + max(p["wait_s"], 0)
    while (job := ck.async_job(p["async_results_file"])) is None and time.monotonic() < end:
        time.sleep(0.2)
    if job is None:
        module.exit_json(changed=False, finished=False, verified=False)
    if not module.check_mode:
        os.unlink(p["async_results_file"])
    out = {k: v for k, v in job.items() if k not in ("invocation", "_ansible_no_log", "finished", "changed")}
    out.update(finished=True, changed=bool(job.get("changed")))
    if job.get("failed"):
        out.pop("failed", None)
        module.fail_json(**{"msg": "the job failed", **out})
    module.exit_json(**out)


def _job_finished(path):
    """True when the async job's results file holds its final result."""
    return ck.async_job(path) is not None


if __name__ == "__main__":
    main()
