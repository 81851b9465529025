#!/usr/bin/env python3
"""glmops generations on one host, run by ``ansible.builtin.script`` (stdlib only).

A generation is what one successful deploy (or upgrade) placed on this host: a copy of
every unit, env and config file byte for byte (mode, owner, group kept) plus
``manifest.json`` (deployment, number, Plan hash, engine runtimes, checkpoint revision,
units and the files' sha256). Layout under ``--dir`` (``<state_dir>/_records/<dep>/generations``,
mode 0700 root, so the 0600 env copies stay private)::

    <N>/manifest.json
    <N>/files/<absolute path without the leading />
    current                      # the number of the generation the host runs now

Every subcommand prints one JSON document.

  list --dir D
      -> {"generations": [manifest ...] (oldest first, without file lists' contents), "current": N|null}
  record --dir D --number N --keep K --manifest B64JSON [--check]
      Copy the manifest's files as they are on the host now into generation N. Each file's
      sha256 must equal the manifest's (what the Plan placed), else exit 1 naming the files.
      When generation N exists with the same Plan hash and files, it only becomes
      ``current`` (``changed`` false when it already is); with other files: exit 1. Keeps the newest K generations (the current one always stays).
      -> {"changed": bool, "number": N, "pruned": [N ...]}
  restore --dir D --to N|previous|current [--units UNIT ...] [--check]
      Put generation N's files back (``previous``: the newest one older than ``current``) byte for byte (atomic rename, mode/owner/group as
      recorded). With --units only those units' files; without, every file of the
      generation, files of the current generation that N does not have are removed and
      ``current`` points at N. systemd is reloaded when a unit file changed, and the units
      to restart get ``systemctl reset-failed`` (a unit stopped by its start limit).
      -> {"changed": bool, "number": N, "files": [PATH changed], "restart": [UNIT],
          "remove_units": [UNIT]}
  next  (stdin: {"lists": {host: list output}, "plan_hash": H}; reads no file)
      The deployment's next generation: the current one when every host runs this Plan as
      the same current generation, else the highest number on any host + 1.
      -> {"number": N, "same": bool}

Every manifest file path must be a normalized absolute path (no ``.``/``..`` segment) and each
copy resolves under ``<N>/files/`` (symlinks followed), else exit 1 before anything is written.

Exit 0 ok, 1 a check failed (message on stdout as {"failed": true, "msg": ...}).
"""
from __future__ import annotations

import argparse
import base64
import grp
import hashlib
import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from datetime import UTC, datetime

UNIT_DIR = "/etc/systemd/system"


class Failure(Exception):
    """A check failed; the message is printed as {"failed": true, "msg": ...}."""


def sha256(path: str, host_names=()) -> str | None:
    """The file's sha256 hex digest (:func:`plan_digest` with ``host_names``), None when it does not exist."""
    try:
        with open(path, "rb") as fh:
            if host_names:
                return plan_digest(fh.read(), host_names)
            return hashlib.file_digest(fh, "sha256").hexdigest()
    except FileNotFoundError:
        return None


def plan_digest(data: bytes, host_names=()) -> str:
    """sha256 of ``data`` without its trailing ``NAME=...`` lines of ``host_names``: the lines a
    host adds to the Plan's env file (the manifest's ``ifname_env``: the interface holding the
    host's address, F17), so the Plan's digest still checks the rest."""
    lines = data.splitlines(keepends=True)
    names = tuple(f"{n}=".encode() for n in host_names)
    while names and lines and lines[-1].startswith(names) and lines[-1].endswith(b"\n"):
        lines.pop()
    return hashlib.sha256(b"".join(lines)).hexdigest()


def owner_of(st: os.stat_result) -> tuple[str, str]:
    try:
        user = pwd.getpwuid(st.st_uid).pw_name
    except KeyError:
        user = str(st.st_uid)
    try:
        group = grp.getgrgid(st.st_gid).gr_name
    except KeyError:
        group = str(st.st_gid)
    return user, group


def numbers(gen_dir: str) -> list[int]:
    """Generation numbers present under ``gen_dir``, ascending."""
    if not os.path.isdir(gen_dir):
        return []
    return sorted(int(n) for n in os.listdir(gen_dir)
                  if n.isdigit() and os.path.isfile(os.path.join(gen_dir, n, "manifest.json")))


def read_manifest(gen_dir: str, number: int) -> dict:
    with open(os.path.join(gen_dir, str(number), "manifest.json")) as fh:
        return json.load(fh)


def current(gen_dir: str) -> int | None:
    try:
        with open(os.path.join(gen_dir, "current")) as fh:
            text = fh.read().strip()
        return int(text) if text.isdigit() else None
    except FileNotFoundError:
        return None


def write_atomic(path: str, data: bytes, mode: int, owner: str, group: str) -> None:
    """Write ``data`` to ``path`` through a temp file + rename; mode/owner set before the rename."""
    directory = os.path.dirname(path)
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".glmops-gen.")
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        try:
            os.chown(tmp, pwd.getpwnam(owner).pw_uid if not owner.isdigit() else int(owner),
                     grp.getgrnam(group).gr_gid if not group.isdigit() else int(group))
        except KeyError as exc:
            raise Failure(f"{path}: owner {owner}:{group} does not exist on this host") from exc
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def checked_paths(manifest: dict) -> None:
    """Raise Failure unless every file path of ``manifest`` is absolute and normalized (no
    ``.``/``..``/empty segment, no NUL): the copy under ``files/`` and the restore target are
    both built from it, so a ``..`` would leave the generation directory or the Plan's roots."""
    bad = [str(f.get("path")) for f in manifest.get("files", [])
           if not isinstance(f.get("path"), str) or not f["path"].startswith("/") or "\0" in f["path"]
           or any(part in ("", ".", "..") for part in f["path"][1:].split("/"))]
    if bad:
        raise Failure("not using a manifest whose file paths are not normalized absolute paths: "
                      + ", ".join(repr(b) for b in bad[:5]) + "; accepted: /dir/file without '.' or '..' segments")


def under(root: str, path: str) -> str:
    """``path`` when it resolves (symlinks followed) inside ``root``, else Failure."""
    real, top = os.path.realpath(path), os.path.realpath(root)
    if real != top and not real.startswith(top.rstrip("/") + "/"):
        raise Failure(f"{path} resolves to {real}, outside {root}: not writing there")
    return path


def identity(manifest: dict) -> list:
    """What makes two generations the same: the Plan hash and every file's hash/mode/owner."""
    return [manifest.get("plan_hash"),
            sorted((f["path"], f["sha256"], f["mode"], f["owner"], f["group"])
                   for f in manifest.get("files", []))]


def cmd_list(args) -> dict:
    out = []
    for n in numbers(args.dir):
        m = read_manifest(args.dir, n)
        m["files"] = [{k: f[k] for k in ("path", "sha256", "mode", "unit")} for f in m.get("files", [])]
        out.append(m)
    return {"glmops_event": "generations", "generations": out, "current": current(args.dir)}


def next_generation(lists: dict[str, dict], plan_hash: str) -> dict:
    """``{number, same}`` for the deployment's next record from every host's ``list`` output:
    ``same`` when every host's current generation is the same number and records this Plan
    (``plan_hash``), then ``number`` is that one; else the highest number recorded on any host
    + 1 (one number for the whole deployment)."""
    top, same, currents = 0, bool(lists), set()
    for got in lists.values():
        for g in got.get("generations") or []:
            top = max(top, int(g["number"]))
            if g["number"] == got.get("current") and g.get("plan_hash") != plan_hash:
                same = False
        currents.add(got.get("current"))
    if None in currents or len(currents) != 1:
        same = False
    return {"number": next(iter(currents)) if same else top + 1, "same": same}


def cmd_next(args) -> dict:
    """``next``: stdin is ``{"lists": {host: list output}, "plan_hash": H}``; no file is read."""
    doc = json.load(sys.stdin)
    return next_generation(doc.get("lists") or {}, str(doc.get("plan_hash") or ""))


def cmd_record(args) -> dict:
    manifest = json.loads(base64.b64decode(args.manifest))
    manifest["number"] = args.number
    manifest["recorded_at"] = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    checked_paths(manifest)
    bad = []
    for f in manifest["files"]:
        got = sha256(f["path"], f.get("ifname_env") or ())
        if got != f["sha256"]:
            bad.append(f"{f['path']} (on the host: {got or 'missing'}, planned: {f['sha256'][:12]})")
    if bad:
        raise Failure("not recording a generation: the host's files are not what the Plan placed: "
                      + "; ".join(bad))
    have = numbers(args.dir)
    cur = current(args.dir)
    if args.number in have:
        if identity(read_manifest(args.dir, args.number)) == identity(manifest):
            if cur == args.number:
                return {"changed": False, "number": cur, "pruned": []}
            if not args.check:
                write_atomic(os.path.join(args.dir, "current"), f"{args.number}\n".encode(), 0o600, "root", "root")
            return {"changed": True, "number": args.number, "pruned": []}
        raise Failure(f"generation {args.number} already exists with other files; "
                      f"the next free number is {max(have) + 1}")
    keep = set(sorted(have + [args.number])[-args.keep:]) if args.keep > 0 else set(have + [args.number])
    pruned = [n for n in have if n not in keep]
    if args.check:
        return {"changed": True, "number": args.number, "pruned": pruned}
    os.makedirs(args.dir, mode=0o700, exist_ok=True)
    os.chmod(args.dir, 0o700)
    stage = tempfile.mkdtemp(dir=args.dir, prefix=f".{args.number}.")
    try:
        for f in manifest["files"]:
            st = os.stat(f["path"])
            with open(f["path"], "rb") as fh:
                data = fh.read()
            dest = under(os.path.join(stage, "files"), os.path.join(stage, "files", f["path"].lstrip("/")))
            os.makedirs(os.path.dirname(dest), mode=0o700, exist_ok=True)
            write_atomic(dest, data, st.st_mode & 0o7777, "root", "root")
            f["mode"] = f"{st.st_mode & 0o7777:04o}"
            f["owner"], f["group"] = owner_of(st)
        with open(os.path.join(stage, "manifest.json"), "w") as fh:
            json.dump(manifest, fh, indent=2, sort_keys=True)
        os.replace(stage, os.path.join(args.dir, str(args.number)))
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    write_atomic(os.path.join(args.dir, "current"), f"{args.number}\n".encode(), 0o600, "root", "root")
    for n in pruned:
        shutil.rmtree(os.path.join(args.dir, str(n)), ignore_errors=True)
    return {"changed": True, "number": args.number, "pruned": pruned}


def cmd_restore(args) -> dict:
    have = numbers(args.dir)
    cur = current(args.dir)
    if not have:
        raise Failure(f"no generation recorded under {args.dir}: deploy first")
    if args.to == "current":  # e.g. a failed upgrade step: what the host ran before it
        if cur is None or cur not in have:
            raise Failure(f"no current generation under {args.dir}")
        target = cur
    elif args.to == "previous":
        older = [n for n in have if cur is None or n < cur]
        if not older:
            raise Failure(f"no generation before the current one ({cur}) under {args.dir}; "
                          f"recorded: {', '.join(map(str, have))}")
        target = older[-1]
    else:
        target = int(args.to)
        if target not in have:
            raise Failure(f"generation {target} is not recorded on this host; recorded: "
                          f"{', '.join(map(str, have))}")
    manifest = read_manifest(args.dir, target)
    checked_paths(manifest)
    files = [f for f in manifest["files"] if not args.units or f.get("unit") in args.units]
    changed, restart = [], []
    for f in files:
        src = under(os.path.join(args.dir, str(target), "files"),
                    os.path.join(args.dir, str(target), "files", f["path"].lstrip("/")))
        st = os.stat(f["path"]) if os.path.exists(f["path"]) else None
        same = (sha256(f["path"], f.get("ifname_env") or ()) == f["sha256"] and st is not None
                and f"{st.st_mode & 0o7777:04o}" == f["mode"] and owner_of(st) == (f["owner"], f["group"]))
        if same:
            continue
        changed.append(f["path"])
        if f.get("unit") and f["unit"] not in restart:
            restart.append(f["unit"])
        if not args.check:
            with open(src, "rb") as fh:
                data = fh.read()
            if plan_digest(data, f.get("ifname_env") or ()) != f["sha256"]:
                raise Failure(f"generation {target}: the stored copy of {f['path']} does not match its manifest")
            write_atomic(f["path"], data, int(f["mode"], 8), f["owner"], f["group"])
    remove_units: list[str] = []
    if not args.units and cur is not None and cur != target and cur in have:
        keep = {f["path"] for f in manifest["files"]}
        old = read_manifest(args.dir, cur)
        checked_paths(old)
        mine = {u["unit"] for u in manifest.get("units", [])}
        remove_units = [u["unit"] for u in old.get("units", []) if u["unit"] not in mine]
        for f in old["files"]:
            if f["path"] not in keep and os.path.exists(f["path"]):
                changed.append(f["path"])
                if not args.check:
                    if f.get("unit") in remove_units:
                        subprocess.run(["systemctl", "disable", "--now", f["unit"]], check=False,
                                       capture_output=True)
                    os.unlink(f["path"])
    if not args.check:
        if any(p.startswith(UNIT_DIR + "/") for p in changed):
            subprocess.run(["systemctl", "daemon-reload"], check=True)
        if restart:  # a unit that failed its way to the start limit must be startable again
            try:
                subprocess.run(["systemctl", "reset-failed", *restart], check=False, capture_output=True)
            except OSError:
                pass
        if not args.units and cur != target:
            write_atomic(os.path.join(args.dir, "current"), f"{target}\n".encode(), 0o600, "root", "root")
            changed.append(os.path.join(args.dir, "current"))
    return {"changed": bool(changed), "number": target, "files": changed, "restart": restart,
            "remove_units": remove_units}


def trusted(gen_dir: str) -> None:
    """Raise Failure unless no one but root can replace ``gen_dir`` or any directory above it:
    each existing one is root's and not writable by group or others (unless sticky, as /tmp).
    Otherwise another user (the engines' service user owns its StateDirectory=) could swap in
    generations whose files root would then write anywhere."""
    path = os.path.abspath(gen_dir)
    while True:
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            st = None
        if st is not None:
            if os.path.islink(path) or st.st_uid != 0 or (st.st_mode & 0o022 and not st.st_mode & 0o1000):
                raise Failure(f"{path} ({st.st_mode & 0o7777:04o}, uid {st.st_uid}{', a symlink' if os.path.islink(path) else ''})"
                              f" can be changed by a user other than root: not trusting generations under {gen_dir}")
        parent = os.path.dirname(path)
        if parent == path:
            return
        path = parent


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="glmops_generation")
    sub = ap.add_subparsers(dest="cmd", required=True)
    ls = sub.add_parser("list")
    ls.add_argument("--dir", required=True)
    rec = sub.add_parser("record")
    rec.add_argument("--dir", required=True)
    rec.add_argument("--number", type=int, required=True)
    rec.add_argument("--keep", type=int, default=5)
    rec.add_argument("--manifest", required=True, help="base64 of the manifest JSON (no secrets)")
    rec.add_argument("--check", action="store_true")
    rs = sub.add_parser("restore")
    rs.add_argument("--dir", required=True)
    rs.add_argument("--to", default="previous")
    rs.add_argument("--units", nargs="*", default=[])
    rs.add_argument("--check", action="store_true")
    sub.add_parser("next", help="the next generation number of the deployment (stdin: every host's list)")
    args = ap.parse_args(argv)
    if args.cmd == "restore" and args.to not in ("previous", "current") and not str(args.to).isdigit():
        print(json.dumps({"failed": True,
                          "msg": f"--to {args.to!r}: accepted: a generation number, 'previous' or 'current'"}))
        return 1
    try:
        if args.cmd in ("record", "restore"):  # root writes here, and restores files from here
            trusted(args.dir)
        out = {"list": cmd_list, "record": cmd_record, "restore": cmd_restore, "next": cmd_next}[args.cmd](args)
    except Failure as exc:
        print(json.dumps({"failed": True, "msg": str(exc)}))
        return 1
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
