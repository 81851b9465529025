"""tests/doubles/docker_cli_double.py's ``docker image rm`` (roles/engine_runtime removes an image the
fan-out refused). Docker's own wording and rules (docker-image-rm(1): "If an image has multiple
tags, using this command with the tag as a parameter only removes the tag. If the tag is the only
one for the image, both the image and the tag are removed"; options -f/--force, --no-prune; by ID
with several tags: "conflict: unable to delete <12-hex id> (must be forced) - image is referenced
in multiple repositories")."""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

DOUBLE = Path(__file__).resolve().parent / "docker_cli_double.py"


def _docker(state: Path, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(DOUBLE), *argv], capture_output=True, text=True,
                          env={**os.environ, "GLMOPS_DOCKER_DOUBLE_STATE": str(state)})


def _store(state: Path, images: dict) -> None:
    state.mkdir(parents=True, exist_ok=True)
    (state / "images.json").write_text(json.dumps(images))


A = "sha256:" + "a" * 64
B = "sha256:" + "b" * 64


def test_an_untagged_image_is_removed_by_id_and_a_tagged_one_by_tag(tmp_path):
    _store(tmp_path, {A: {"Id": A, "RepoTags": []},
                      "x/one:1": {"Id": B, "RepoTags": ["x/one:1", "x/two:2"]},
                      "x/two:2": {"Id": B, "RepoTags": ["x/one:1", "x/two:2"]}})
    r = _docker(tmp_path, "image", "rm", A)
    assert r.returncode == 0 and r.stdout == f"Deleted: {A}\n"
    r = _docker(tmp_path, "image", "rm", B)                   # by ID with two tags: refused
    assert r.returncode == 1 and r.stderr.strip() == ("Error response from daemon: conflict: unable to delete "
                                                      "bbbbbbbbbbbb (must be forced) - image is referenced in "
                                                      "multiple repositories")
    r = _docker(tmp_path, "rmi", "x/one:1")                    # one tag of two: only the tag goes
    assert r.returncode == 0 and r.stdout == "Untagged: x/one:1\n"
    assert _docker(tmp_path, "image", "inspect", "x/two:2").returncode == 0
    r = _docker(tmp_path, "image", "rm", "x/two:2")            # the last tag: the image goes too
    assert r.returncode == 0 and r.stdout == f"Untagged: x/two:2\nDeleted: {B}\n"
    assert json.loads((tmp_path / "images.json").read_text()) == {}


def test_force_removes_every_tag_missing_images_and_unknown_flags_are_refused(tmp_path):
    _store(tmp_path, {"x/one:1": {"Id": B, "RepoTags": ["x/one:1", "x/two:2"]},
                      "x/two:2": {"Id": B, "RepoTags": ["x/one:1", "x/two:2"]}})
    r = _docker(tmp_path, "image", "rm", "--force", B, "nosuch:1")
    assert r.returncode == 1 and "Error response from daemon: No such image: nosuch:1" in r.stderr
    assert r.stdout == f"Untagged: x/one:1\nUntagged: x/two:2\nDeleted: {B}\n"
    r = _docker(tmp_path, "image", "rm", "--prune", "x")
    assert r.returncode == 125 and "unknown flag: --prune" in r.stderr
    assert _docker(tmp_path, "image", "rm").returncode == 125
