#!/usr/bin/python
"""glmops_place: bring a host's directories and files to the Plan in one module call.

Issue 19 (deploy cost from 3 to 32 hosts): ``ansible.builtin.copy`` over a loop costs a stat,
a transfer and a copy module per file, three SSH round trips each; the first deploy of a
32-host lab spent 37.9 s of its wall time in that loop (``bench/deploy_scale.py``). This module
takes every drifted directory and file of the host at once (their content travels in the
module's own payload, never in argv) and writes them in one round trip.

Inputs (shapes):
  dirs          [{path, mode, owner, group}]             created first, in order
  files         [{path, content, mode, owner, group}]    written atomically (temp file in the
                                                          same directory, fsync, rename)
  secret_files  [{path, mode, owner, group}]             as ``files``, with the content of each in
  secret_contents [str] (same order)                      ``secret_contents``, a ``no_log`` option:
                                                          never in the host's journal, no diff, never
                                                          returned
  absent        [path]                                 files removed before anything is placed
                                                          (a stale progress file, say); a directory
                                                          there is refused
  pending_user  a user that does not exist yet (check mode on a bare host): an owner or group
  pending_group equal to one of them is neither applied nor compared

``mode`` is an octal string ("0644"). A file is rewritten when its content differs;
only its mode, owner or group is fixed in place when only they differ. Check mode reports what
would change and writes nothing; with ``--diff`` every changed non-secret file gives a
before/after diff. In that diff text only (never in the written file) a long ``ExecStart=`` or
``ExecStartPre=`` line is shown one argument per line (a flag with its value on one line) with
systemd's ``\\`` continuations (systemd.syntax(7)), so a one-flag change is a one-line diff.

Returns ``changed`` and ``paths`` (every directory and file changed, in order). Fails naming the
path and the OS error (``EACCES``, an unknown owner, a missing parent directory); what was
written before the failure stays written and is listed in ``paths``.
"""
from __future__ import annotations

import grp
import os
import pwd
import re
import shlex
import stat
import tempfile

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
module: glmops_place
short_description: Bring a host's directories and files to the Plan in one module call.
description:
  - Creates the given directories, then writes every given file whose content, mode, owner or
    group differs, atomically; one SSH round trip for all of them (issue 19).
options:
  dirs:
    description: Directories to create or fix, in order (path, mode, owner, group).
    type: list
    elements: dict
    default: []
  files:
    description: Files to place (path, content, mode, owner, group); diffs are returned for them.
    type: list
    elements: dict
    default: []
  secret_files:
    description: Files to place whose content is secret (no diff, never returned); without their content.
    type: list
    elements: dict
    default: []
    suboptions:
      path: {description: Absolute path., type: str, required: true}
      mode: {description: Octal mode., type: str, default: "0600"}
      owner: {description: Owner name., type: str, default: root}
      group: {description: Group name., type: str, default: root}
  secret_contents:
    description: The content of each of I(secret_files), in the same order (no_log; never logged on the host).
    type: list
    elements: str
    default: []
  absent:
    description: Files to remove before anything is placed (absolute paths; a directory there is refused).
    type: list
    elements: str
    default: []
  pending_user:
    description: A user or group not yet created (check mode); owners equal to it are skipped.
    type: str
    default: ""
  pending_group:
    description: A group not yet created (check mode); groups equal to it are skipped.
    type: str
    default: ""
"""

RETURN = r"""
paths:
  description: Every directory and file changed (or that would change in check mode), in order.
  type: list
  elements: str
"""

_DIFF_LIMIT = 256 * 1024
#: ``ExecStart=``/``ExecStartPre=`` lines longer than this (characters) are split in the diff text
_SPLIT_OVER = 100
_EXEC_LINE = re.compile(r"^(ExecStart(?:Pre)?=)(.*?)(\r?\n)?\Z", re.S)


class PlaceError(Exception):
    """A path could not be brought to the Plan; ``str()`` names the path and the cause."""


def _ids(spec: dict, pending: str | tuple[str, ...]) -> tuple[int, int]:
    """uid and gid wanted by ``spec`` (-1: leave as is; also for a name in ``pending``, a user or
    group check mode has not created). Raises PlaceError on an unknown name."""
    uid = gid = -1
    owner, group = spec.get("owner") or "", spec.get("group") or ""
    pending = (pending,) if isinstance(pending, str) else pending
    try:
        if owner and owner not in pending:
            uid = pwd.getpwnam(owner).pw_uid
        if group and group not in pending:
            gid = grp.getgrnam(group).gr_gid
    except KeyError as exc:
        raise PlaceError(f"{spec['path']}: no such owner or group {exc.args[0]}") from None
    return uid, gid


def _mode(spec: dict) -> int:
    raw = str(spec.get("mode") or "0644")
    try:
        return int(raw, 8)
    except ValueError:
        raise PlaceError(f"{spec['path']}: mode {raw!r} is not octal (e.g. '0644')") from None


def _attrs_differ(st: os.stat_result, mode: int, uid: int, gid: int) -> bool:
    return (stat.S_IMODE(st.st_mode) != mode or (uid != -1 and st.st_uid != uid)
            or (gid != -1 and st.st_gid != gid))


def place_dir(spec: dict, pending: str | tuple[str, ...] = "", check: bool = False) -> bool:
    """Create or fix one directory; True when it changed (or would, in check mode)."""
    path, mode = spec["path"], _mode(spec)
    uid, gid = _ids(spec, pending)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        st = None
    if st is not None and not stat.S_ISDIR(st.st_mode):
        raise PlaceError(f"{path}: exists and is not a directory")
    if st is not None and not _attrs_differ(st, mode, uid, gid):
        return False
    if check:
        return True
    try:
        if st is None:
            os.makedirs(path, mode=0o700, exist_ok=True)
        os.chown(path, uid, gid)
        os.chmod(path, mode)
    except OSError as exc:
        raise PlaceError(f"{path}: {exc.strerror or exc}") from None
    return True


def place_file(spec: dict, pending: str | tuple[str, ...] = "", check: bool = False) -> tuple[bool, str | None]:
    """Write or fix one file. Returns (changed, the text before when the content changed, else None).

    The content is written to a temporary file in the target's directory (0600 until its
    mode and owner are set), fsynced and renamed over the target, so a reader sees the old
    file or the new one, never a partial one.
    """
    path, mode = spec["path"], _mode(spec)
    data = str(spec.get("content", "")).encode()
    uid, gid = _ids(spec, pending)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        st = None
    before = None
    same = False
    if st is not None:
        if not stat.S_ISREG(st.st_mode):
            raise PlaceError(f"{path}: exists and is not a regular file")
        try:
            with open(path, "rb") as fh:
                old = fh.read()
        except OSError as exc:
            raise PlaceError(f"{path}: {exc.strerror or exc}") from None
        same = old == data
        if not same:
            before = old.decode(errors="replace")
    else:
        before = ""
    if same and not _attrs_differ(st, mode, uid, gid):
        return False, None
    if check:
        return True, before
    try:
        if same:
            os.chown(path, uid, gid)
            os.chmod(path, mode)
            return True, None
        fd, tmp = tempfile.mkstemp(prefix=".glmops-", dir=os.path.dirname(path) or ".")
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.chown(tmp, uid, gid)
            os.chmod(tmp, mode)
            os.replace(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
    except OSError as exc:
        raise PlaceError(f"{path}: {exc.strerror or exc}") from None
    return True, before


def _words(cmdline: str) -> list[str] | None:
    """A unit's command line split into its words as written (quotes and escapes kept):
    whitespace outside '...' and "..." separates words (systemd.syntax(7) quoting; stdlib
    ``shlex`` in its non-POSIX mode, which keeps the quotes). None when a quote is left open."""
    lex = shlex.shlex(cmdline, posix=False)
    lex.whitespace_split = True
    lex.commenters = ""
    try:
        return list(lex)
    except ValueError:  # "No closing quotation"
        return None


def diff_view(text: str) -> str:
    """``text`` as the ``--diff`` output shows it (str -> str).

    Each ``ExecStart=``/``ExecStartPre=`` line longer than ``_SPLIT_OVER`` characters becomes
    one line per argument, an option (a word starting with ``-``) and the value after it on one
    line, every line but the last ended by `` \\`` (systemd's line continuation,
    systemd.syntax(7)); a changed flag is then one changed diff line, not the whole command.
    Other lines, and a line with an unterminated quote, are kept as they are. Only the diff
    shows this: the file written keeps its one-line ``ExecStart=``.
    """
    out = []
    for line in text.splitlines(keepends=True):
        m = _EXEC_LINE.match(line)
        words = _words(m.group(2)) if m and len(m.group(2)) + len(m.group(1)) > _SPLIT_OVER else None
        if not words or len(words) < 2:
            out.append(line)
            continue
        rows, option = [words[0]], False
        for w in words[1:]:
            if option and not w.startswith("-"):
                rows[-1] += " " + w
                option = False
            else:
                rows.append(w)
                option = w.startswith("-")
        out.append(m.group(1) + " \\\n    ".join(rows) + (m.group(3) or ""))
    return "".join(out)


def remove_file(path: str, check: bool = False) -> bool:
    """Remove one file; True when it was there (or would be removed, in check mode). A missing
    file is no change; a directory at ``path`` raises PlaceError."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    if stat.S_ISDIR(st.st_mode):
        raise PlaceError(f"{path}: is a directory; only files are removed")
    if check:
        return True
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise PlaceError(f"{path}: {exc.strerror or exc}") from None
    return True


def place(dirs: list[dict], files: list[dict], secret_files: list[dict], pending: str | tuple[str, ...] = "",
          check: bool = False, want_diff: bool = False, absent: list[str] = ()) -> dict:
    """Remove ``absent``, then bring ``dirs``, ``files`` and ``secret_files`` to the Plan.

    Returns {"changed": bool, "paths": [str], "diff": [dict]} (``diff`` only for non-secret
    files whose content changed, and only when ``want_diff``). Raises PlaceError naming the
    first path that failed, with ``.paths`` holding what was changed before it.
    """
    paths: list[str] = []
    diff: list[dict] = []
    try:
        for path in absent:
            if remove_file(path, check):
                paths.append(path)
        for spec in dirs:
            if place_dir(spec, pending, check):
                paths.append(spec["path"])
        for secret, group in ((False, files), (True, secret_files)):
            for spec in group:
                changed, before = place_file(spec, pending, check)
                if not changed:
                    continue
                paths.append(spec["path"])
                if want_diff and not secret and before is not None:
                    after = str(spec.get("content", ""))
                    if len(before) + len(after) <= _DIFF_LIMIT:
                        diff.append({"before_header": spec["path"], "after_header": spec["path"],
                                     "before": diff_view(before), "after": diff_view(after)})
    except PlaceError as exc:
        exc.paths = paths  # type: ignore[attr-defined]
        raise
    return {"changed": bool(paths), "paths": paths, "diff": diff}


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "dirs": {"type": "list", "elements": "dict", "default": []},
            "files": {"type": "list", "elements": "dict", "default": []},
            # the secret files' paths, modes and owners, without their content; the contents go in
            # secret_contents (same order), a list of strings with no_log: Ansible then logs it as
            # NOT_LOGGING_PARAMETER in the host's journal ("Invoked with ...") and masks each in
            # what it returns. (A no_log suboption is not enough: the journal line is str() of the
            # list, where a multi-line value is escaped and escapes the mask.)
            "secret_files": {"type": "list", "elements": "dict", "default": [], "options": {
                "path": {"type": "str", "required": True},
                "mode": {"type": "str", "default": "0600"},
                "owner": {"type": "str", "default": "root"},
                "group": {"type": "str", "default": "root"},
            }},
            "secret_contents": {"type": "list", "elements": "str", "default": [], "no_log": True},
            "absent": {"type": "list", "elements": "str", "default": []},
            "pending_user": {"type": "str", "default": ""},
            "pending_group": {"type": "str", "default": ""},
        },
        supports_check_mode=True,
    )
    p = module.params
    if len(p["secret_contents"]) != len(p["secret_files"]):
        module.fail_json(msg=f"secret_contents has {len(p['secret_contents'])} entries for "
                             f"{len(p['secret_files'])} secret_files; give one content per file, in order")
    secret_files = [dict(spec, content=text) for spec, text in zip(p["secret_files"], p["secret_contents"])]
    for i, path in enumerate(p["absent"]):
        if not os.path.isabs(path):
            module.fail_json(msg=f"absent[{i}] must be an absolute path, got {path!r}")
    for key in ("dirs", "files", "secret_files"):
        for i, spec in enumerate(p[key]):
            if not isinstance(spec.get("path"), str) or not os.path.isabs(spec["path"]):
                module.fail_json(msg=f"{key}[{i}].path must be an absolute path, got {spec.get('path')!r}")
    try:
        out = place(p["dirs"], p["files"], secret_files, (p["pending_user"], p["pending_group"]),
                    check=module.check_mode, want_diff=module._diff, absent=p["absent"])
    except PlaceError as exc:
        module.fail_json(msg=str(exc), paths=getattr(exc, "paths", []), changed=bool(getattr(exc, "paths", [])))
    result = {"changed": out["changed"], "paths": out["paths"]}
    if out["diff"]:
        result["diff"] = out["diff"]
    module.exit_json(**result)


if __name__ == "__main__":
    main()
