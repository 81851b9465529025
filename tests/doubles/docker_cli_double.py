#!/usr/bin/env python3
"""Strict ``docker`` CLI double for image work (no Docker engine runs here). Stdlib only.

Only what ``roles/engine_runtime`` (container mode) uses, spelled as Docker 28's CLI spells it:

* ``docker image inspect NAME...``: exit 0 and the JSON list of the images when all exist;
  else ``[]`` on stdout, ``Error: No such image: NAME`` on stderr, exit 1.
* ``docker pull NAME``: copies NAME from the double's registry into the local
  store. Not in the registry: ``Error response from daemon: manifest for NAME not found:
  manifest unknown: manifest unknown``, exit 1. A reference without a tag gets ``:latest``.
* ``docker build [-t|--tag T]... [--label K=V]... CONTEXT``: reads ``CONTEXT/Dockerfile``.
  Instructions: ``FROM``, ``RUN``, ``LABEL``, ``ENV``, ``ARG``; any other
  -> ``dockerfile parse error on line N: unknown instruction: X``, exit 1. ``FROM`` a base not
  in the local store is pulled from the registry first (BuildKit does), not found ->
  ``failed to resolve source metadata for NAME: NAME: not found``, exit 1. ``RUN`` in JSON
  (exec) form must be valid JSON. The image gets an id = sha256 of (base id, Dockerfile, labels)
  and the tags.
* ``docker load [-i|--input FILE] [-q|--quiet]``: a docker-archive tar (``manifest.json`` with
  ``Config``, ``RepoTags``, ``Layers``; what ``skopeo copy ... docker-archive:`` writes). The image
  id is the sha256 of the config file's bytes (as Docker's); every layer must be in the archive and
  its sha256 must equal the config's ``rootfs.diff_ids`` entry, else ``Error processing tar file``/
  ``invalid diffID``, exit 1. Prints ``Loaded image: TAG`` per tag, or ``Loaded image ID: sha256:...``
  for an untagged image (stored under its id). Without ``--input`` it reads stdin.
* ``docker image rm [-f|--force] [--no-prune] IMAGE...`` (also ``docker rmi``): IMAGE a name or a
  full ``sha256:`` id. A name is untagged (``Untagged: NAME``) and the image deleted when no tag is
  left (``Deleted: ID``); an id with two or more tags -> ``Error response from daemon: conflict:
  unable to delete ID (must be forced) - image is referenced in multiple repositories``, exit 1
  unless ``--force`` (which removes every tag); missing -> ``Error response from daemon: No such
  image: IMAGE``, exit 1 (the others are still removed).
* ``docker tag SOURCE TARGET``: SOURCE a name or a full ``sha256:`` id; missing ->
  ``Error response from daemon: No such image: SOURCE``, exit 1; a TARGET with a digest ->
  ``refusing to create a tag with a digest reference``, exit 1.

Anything else (another subcommand, another flag, a missing value) exits 125 with Docker's
``unknown command`` / ``unknown flag`` / ``flag needs an argument`` wording.

State (env): ``GLMOPS_DOCKER_DOUBLE_STATE`` = a directory holding ``images.json`` (the local
store) and ``calls.log`` (one JSON argv per line, every call); ``GLMOPS_DOCKER_DOUBLE_REGISTRY``
= a JSON file ``{"name:tag": {"labels": {...}}}``, what ``pull`` can fetch.
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import sys
import tarfile

STATE = os.environ.get("GLMOPS_DOCKER_DOUBLE_STATE", "/var/lib/docker-cli-double")
REGISTRY = os.environ.get("GLMOPS_DOCKER_DOUBLE_REGISTRY", os.path.join(STATE, "registry.json"))
INSTRUCTIONS = {"FROM", "RUN", "LABEL", "ENV", "ARG"}


class Usage(Exception):
    """A CLI usage error: exit 125 with the message."""


def _load(path: str, default):
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return default


def _store() -> dict:
    return _load(os.path.join(STATE, "images.json"), {})


def _save(images: dict) -> None:
    os.makedirs(STATE, exist_ok=True)
    tmp = os.path.join(STATE, "images.json.tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(images, fh, indent=1, sort_keys=True)
    os.replace(tmp, os.path.join(STATE, "images.json"))


def _ref(name: str) -> str:
    """``repo`` -> ``repo:latest``; a tag or digest stays."""
    last = name.rsplit("/", 1)[-1]
    return name if (":" in last or "@" in name) else f"{name}:latest"


def _options(args: list[str], spec: dict[str, str]) -> tuple[dict[str, list], list[str]]:
    """Parse ``args`` with ``spec`` {flag: 'value'|'bool'} (short and long spelled out)."""
    opts: dict[str, list] = {}
    rest: list[str] = []
    i = 0
    while i < len(args):
        a = args[i]
        if a.startswith("-") and a != "-":
            name, eq, val = a.partition("=")
            if name not in spec:
                raise Usage(f"unknown flag: {name}")
            if spec[name] == "value":
                if not eq:
                    i += 1
                    if i >= len(args):
                        raise Usage(f"flag needs an argument: {name}")
                    val = args[i]
                opts.setdefault(spec.get("=" + name, name), []).append(val)
            else:
                opts.setdefault(spec.get("=" + name, name), []).append(True)
        else:
            rest.append(a)
        i += 1
    return opts, rest


def _pull(name: str, images: dict, quiet: bool = False) -> int:
    ref = _ref(name)
    registry = _load(REGISTRY, {})
    if ref not in registry:
        print(f"Error response from daemon: manifest for {ref} not found: manifest unknown: manifest unknown",
              file=sys.stderr)
        return 1
    image_id = "sha256:" + hashlib.sha256(("registry\0" + ref).encode()).hexdigest()
    images[ref] = {"Id": image_id, "RepoTags": [ref], "Config": {"Labels": registry[ref].get("labels") or {}}}
    _save(images)
    print(ref if quiet else f"{ref.rsplit(':', 1)[-1]}: Pulling from {ref.rsplit(':', 1)[0]}\n"
          f"Digest: {image_id}\nStatus: Downloaded newer image for {ref}\n{ref}")
    return 0


def _find(name: str, images: dict) -> dict | None:
    """The image a name or a full ``sha256:`` id refers to."""
    if _ref(name) in images:
        return images[_ref(name)]
    return next((img for img in images.values() if img["Id"] == name), None)


def inspect(args: list[str]) -> int:
    _, names = _options(args, {})
    if not names:
        raise Usage('"docker image inspect" requires at least 1 argument.')
    images = _store()
    missing = [name for name in names if _find(name, images) is None]
    if missing:
        print("[]")
        for name in missing:
            print(f"Error: No such image: {name}", file=sys.stderr)
        return 1
    print(json.dumps([_find(n, images) for n in names], indent=4))
    return 0


def load(args: list[str]) -> int:
    opts, rest = _options(args, {"--input": "value", "-i": "value", "=-i": "--input", "--quiet": "bool",
                                 "-q": "bool", "=-q": "--quiet"})
    if rest:
        raise Usage('"docker load" accepts no arguments.')
    source = (opts.get("--input") or [None])[-1]
    if source and not os.path.isfile(source):
        print(f"open {source}: no such file or directory", file=sys.stderr)
        return 1
    try:  # a file is read as a stream (layers are hashed in chunks, as the engine does)
        with (tarfile.open(source) if source else tarfile.open(fileobj=io.BytesIO(sys.stdin.buffer.read()))) as tar:
            def member(name: str) -> bytes:
                fh = tar.extractfile(name)
                if fh is None:
                    raise KeyError(name)
                return fh.read()

            def digest(name: str) -> str:
                fh = tar.extractfile(name)
                if fh is None:
                    raise KeyError(name)
                h = hashlib.sha256()
                while chunk := fh.read(1 << 20):
                    h.update(chunk)
                return "sha256:" + h.hexdigest()
            manifest = json.loads(member("manifest.json"))
            loaded = []
            images = _store()
            for entry in manifest:
                config = member(entry["Config"])
                diff_ids = json.loads(config)["rootfs"]["diff_ids"]
                layers = entry.get("Layers") or []
                if len(layers) != len(diff_ids):
                    print("Error processing tar file(exit status 1): invalid manifest, layers length mismatch",
                          file=sys.stderr)
                    return 1
                for layer, want in zip(layers, diff_ids):
                    got = digest(layer)
                    if got != want:
                        print(f"invalid diffID for layer {layer}: expected {want!r}, got {got!r}", file=sys.stderr)
                        return 1
                image_id = "sha256:" + hashlib.sha256(config).hexdigest()
                tags = [_ref(t) for t in entry.get("RepoTags") or []]
                labels = (json.loads(config).get("config") or {}).get("Labels") or {}
                for key in tags or [image_id]:
                    images[key] = {"Id": image_id, "RepoTags": tags, "Config": {"Labels": labels}}
                loaded += [f"Loaded image: {t}" for t in tags] or [f"Loaded image ID: {image_id}"]
    except (tarfile.TarError, KeyError, ValueError, TypeError) as exc:
        print(f"Error processing tar file(exit status 1): {exc}", file=sys.stderr)
        return 1
    _save(images)
    print("\n".join(loaded))
    return 0


def tag(args: list[str]) -> int:
    _, names = _options(args, {})
    if len(names) != 2:
        raise Usage('"docker tag" requires exactly 2 arguments.')
    source, target = names
    images = _store()
    image = _find(source, images)
    if image is None:
        print(f"Error response from daemon: No such image: {source}", file=sys.stderr)
        return 1
    if "@" in target:
        print(f"refusing to create a tag with a digest reference: {target}", file=sys.stderr)
        return 1
    tags = sorted(set(image.get("RepoTags") or []) | {_ref(target)})
    images[_ref(target)] = dict(image, RepoTags=tags)
    for key, other in images.items():
        if other["Id"] == image["Id"]:
            images[key] = dict(other, RepoTags=tags)
    _save(images)
    return 0


def rm(args: list[str]) -> int:
    opts, names = _options(args, {"--force": "bool", "-f": "bool", "=-f": "--force", "--no-prune": "bool"})
    if not names:
        raise Usage('"docker image rm" requires at least 1 argument.')
    images, rc = _store(), 0
    for name in names:
        image = _find(name, images)
        if image is None:
            print(f"Error response from daemon: No such image: {name}", file=sys.stderr)
            rc = 1
            continue
        by_id = image["Id"] == name
        tags = list(image.get("RepoTags") or [])
        if by_id and len(tags) > 1 and not opts.get("--force"):
            print(f"Error response from daemon: conflict: unable to delete {name[7:19]} (must be forced) - "
                  "image is referenced in multiple repositories", file=sys.stderr)
            rc = 1
            continue
        drop = tags if by_id else [_ref(name)]
        for t in drop:
            images.pop(t, None)
            print(f"Untagged: {t}")
        left = [t for t in tags if t not in drop]
        for key in [k for k, v in images.items() if v["Id"] == image["Id"]]:
            if left:
                images[key] = dict(images[key], RepoTags=left)
            else:
                images.pop(key)
        if not left:
            print(f"Deleted: {image['Id']}")
    _save(images)
    return rc


def pull(args: list[str]) -> int:
    _, names = _options(args, {})
    if len(names) != 1:
        raise Usage('"docker pull" requires exactly 1 argument.')
    return _pull(names[0], _store())


def build(args: list[str]) -> int:
    opts, rest = _options(args, {"--tag": "value", "-t": "value", "=-t": "--tag", "--label": "value"})
    if len(rest) != 1:
        raise Usage('"docker build" requires exactly 1 argument.')
    context = rest[0]
    if not os.path.isdir(context):
        print(f'ERROR: unable to prepare context: path "{context}" not found', file=sys.stderr)
        return 1
    dockerfile = os.path.join(context, "Dockerfile")
    try:
        with open(dockerfile, encoding="utf-8") as fh:
            text = fh.read()
    except OSError:
        print(f"ERROR: failed to solve: failed to read dockerfile: open {dockerfile}: no such file or directory",
              file=sys.stderr)
        return 1
    labels = {}
    for item in opts.get("--label") or []:
        key, _, value = item.partition("=")
        labels[key] = value
    base = None
    for n, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        word, _, rest_of_line = stripped.partition(" ")
        if word.upper() not in INSTRUCTIONS:
            print(f"ERROR: failed to solve: dockerfile parse error on line {n}: unknown instruction: {word}",
                  file=sys.stderr)
            return 1
        if word.upper() == "FROM" and base is None:
            base = rest_of_line.split()[0]
        if word.upper() == "RUN" and rest_of_line.lstrip().startswith("["):
            try:
                json.loads(rest_of_line)
            except ValueError:
                print(f"ERROR: failed to solve: dockerfile parse error on line {n}: RUN: invalid JSON",
                      file=sys.stderr)
                return 1
    if base is None:
        print("ERROR: failed to solve: no build stage in current context", file=sys.stderr)
        return 1
    images = _store()
    if _ref(base) not in images:
        if _ref(base) not in _load(REGISTRY, {}):
            print(f"ERROR: failed to solve: {base}: failed to resolve source metadata for {_ref(base)}: "
                  f"{_ref(base)}: not found", file=sys.stderr)
            return 1
        _pull(base, images, quiet=True)
        images = _store()
    image_id = "sha256:" + hashlib.sha256(json.dumps(
        [images[_ref(base)]["Id"], text, sorted(labels.items())]).encode()).hexdigest()
    tags = [_ref(t) for t in opts.get("--tag") or []]
    merged = dict(images[_ref(base)]["Config"]["Labels"], **labels)
    for tag in tags:
        images[tag] = {"Id": image_id, "RepoTags": tags, "Config": {"Labels": merged}, "Dockerfile": text}
    _save(images)
    print(f"#1 naming to {', '.join(tags) or image_id} done")
    return 0


def main(argv: list[str]) -> int:
    os.makedirs(STATE, exist_ok=True)
    with open(os.path.join(STATE, "calls.log"), "a", encoding="utf-8") as fh:
        fh.write(json.dumps(argv) + "\n")
    try:
        if argv[:2] == ["image", "inspect"]:
            return inspect(argv[2:])
        if argv[:1] == ["pull"]:
            return pull(argv[1:])
        if argv[:1] == ["build"]:
            return build(argv[1:])
        if argv[:1] == ["load"]:
            return load(argv[1:])
        if argv[:1] == ["tag"]:
            return tag(argv[1:])
        if argv[:2] == ["image", "rm"] or argv[:1] == ["rmi"]:
            return rm(argv[2:] if argv[0] == "image" else argv[1:])
        if argv[:1] == ["image"]:
            raise Usage(f"unknown command: docker image {' '.join(argv[1:2])}")
        raise Usage(f"unknown command: docker {' '.join(argv[:1])}")
    except Usage as exc:
        print(f"{exc}\nSee 'docker --help'.", file=sys.stderr)
        return 125


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
