#!/usr/bin/python
"""Ansible module ``glmops_writable_fix``: give the service user the paths it must write (F11)."""
from __future__ import annotations

DOCUMENTATION = r"""
module: glmops_writable_fix
short_description: Make the paths the service user must write its own, directories setgid group-writable
description:
  - The opt-in fix of the prechecks role's C(writable) check (F11, C(prechecks_fix_writable)).
  - Every directory and file under each existing path of I(paths) that is not owned by I(user):I(group) is
    chowned to it; directories get C(g+rwxs,u+rwx) (setgid, so what another member of I(group) creates there
    keeps the group), files C(ug+rw). Symbolic links are not followed. Missing paths are left to whoever
    creates them (the units' C(StateDirectory=) creates HOME for the user).
  - Changes nothing already right (a second run reports C(changed=false)); supports check mode.
version_added: "0.1.0"
author: glmops
options:
  user:
    description: The service user (must exist).
    type: str
    required: true
  group:
    description: The group the paths get; default the user's primary group.
    type: str
  paths:
    description: Absolute paths (their trees) the user must write.
    type: list
    elements: path
    required: true
"""

EXAMPLES = r"""
- name: Give the service user its cache and state dirs
  glmops_writable_fix:
    user: glmops
    paths: [/var/lib/glmops/demo/.cache/huggingface]
"""

RETURN = r"""
fixed: {description: how many entries changed (or would change in check mode), type: int, returned: always}
examples: {description: up to 20 of them with their owner and mode before, type: list, returned: always}
"""

import grp
import os
import pwd
import stat

from ansible.module_utils.basic import AnsibleModule

DIR_BITS = stat.S_ISGID | stat.S_IRWXU | stat.S_IRWXG
FILE_BITS = stat.S_IRUSR | stat.S_IWUSR | stat.S_IRGRP | stat.S_IWGRP


def _name(table, key):
    try:
        return table(key)[0]
    except KeyError:
        return str(key)


def plan(paths, uid, gid):
    """``[(path, is_dir, st)]`` of every entry under ``paths`` whose owner, group or mode bits
    are not yet what the user needs."""
    out = []
    for top in paths:
        if not os.path.lexists(top) or os.path.islink(top):
            continue
        for root, dirs, files in os.walk(top):
            dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(root, d))]
            for path, is_dir in [(root, True)] + [(os.path.join(root, f), False) for f in files]:
                st = os.lstat(path)
                if stat.S_ISLNK(st.st_mode):
                    continue
                bits = DIR_BITS if is_dir else FILE_BITS
                if st.st_uid != uid or st.st_gid != gid or (stat.S_IMODE(st.st_mode) & bits) != bits:
                    out.append((path, is_dir, st))
    return out


def main():
    module = AnsibleModule(
        argument_spec=dict(user=dict(type="str", required=True), group=dict(type="str"),
                           paths=dict(type="list", elements="path", required=True)),
        supports_check_mode=True)
    p = module.params
    try:
        pw = pwd.getpwnam(p["user"])
    except KeyError:
        module.fail_json(msg=f"glmops_writable_fix: user={p['user']!r} does not exist on this host; "
                             "accepted: an existing user (the deploy creates the service user)")
    try:
        gid = grp.getgrnam(p["group"]).gr_gid if p["group"] else pw.pw_gid
    except KeyError:
        module.fail_json(msg=f"glmops_writable_fix: group={p['group']!r} does not exist on this host; "
                             "accepted: an existing group, or empty for the user's primary group")
    bad = [x for x in p["paths"] if not x.startswith("/")]
    if bad:
        module.fail_json(msg=f"glmops_writable_fix: paths={bad!r}; accepted: absolute paths")
    todo = plan(p["paths"], pw.pw_uid, gid)
    examples = [f"{path} ({_name(pwd.getpwuid, st.st_uid)}:{_name(grp.getgrgid, st.st_gid)} "
                f"{stat.S_IMODE(st.st_mode):04o})" for path, _d, st in todo[:20]]
    if not module.check_mode:
        for path, is_dir, st in todo:
            if st.st_uid != pw.pw_uid or st.st_gid != gid:
                os.lchown(path, pw.pw_uid, gid)
            os.chmod(path, stat.S_IMODE(st.st_mode) | (DIR_BITS if is_dir else FILE_BITS))
    module.exit_json(changed=bool(todo), fixed=len(todo), examples=examples)


if __name__ == "__main__":
    main()
