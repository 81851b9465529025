#!/usr/bin/env python3
"""Pin an image before it is fanned out (roles/engine_runtime, container mode; issue 19 item 4).

    glmops_image_pin.py REF [--arch ARCH] [--src-tls-verify=false]

Reads REF's manifest with ``skopeo inspect --raw`` (skopeo checks the bytes against a digest REF
names). A manifest list / OCI index is resolved to the entry for ARCH (default: this host's,
``linux``), whose manifest is read by digest. Prints one JSON object:

* ``manifest_digest``: sha256 of the image manifest's bytes (what every host copies by digest);
* ``config_digest``: the manifest's config digest, which is the image ID ``docker load`` gives;
* ``source``: ``<name>@<manifest_digest>``, the exact image to copy from REF's registry;
* ``media_type``, ``index_digest`` (the list's digest, or null).

Exit 1 with one line on stderr when skopeo fails, the manifest is not an image manifest or the
list has no entry for ARCH. Stdlib only (the host's python3).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import platform
import subprocess
import sys

LISTS = {"application/vnd.docker.distribution.manifest.list.v2+json", "application/vnd.oci.image.index.v1+json"}
IMAGES = {"application/vnd.docker.distribution.manifest.v2+json", "application/vnd.oci.image.manifest.v1+json"}
ARCH = {"x86_64": "amd64", "aarch64": "arm64", "ppc64le": "ppc64le", "s390x": "s390x"}


class PinError(Exception):
    """One line for stderr."""


def split_ref(ref: str) -> tuple[str, str | None, str | None]:
    """``name[:tag][@digest]`` -> (name, tag, digest); a port's colon is not a tag."""
    name, _, digest = ref.partition("@")
    head, slash, last = name.rpartition("/")
    tag = None
    if ":" in last:
        last, tag = last.split(":", 1)
    return (head + slash + last), tag, (digest or None)


def _raw(ref: str, tls: list[str]) -> bytes:
    proc = subprocess.run(["skopeo", "inspect", "--raw", *tls, f"docker://{ref}"], capture_output=True)
    if proc.returncode != 0:
        err = proc.stderr.decode(errors="replace").strip().splitlines()
        raise PinError(f"skopeo inspect --raw docker://{ref} failed: {err[-1] if err else proc.returncode}")
    return proc.stdout


def pin(ref: str, arch: str, tls: list[str], raw=_raw) -> dict:
    name, _, want = split_ref(ref)
    body = raw(ref, tls)
    digest = "sha256:" + hashlib.sha256(body).hexdigest()
    if want and want != digest:
        raise PinError(f"{ref}: the registry's manifest has digest {digest}, the reference names {want}")
    doc = json.loads(body)
    media = doc.get("mediaType") or ("application/vnd.oci.image.index.v1+json" if "manifests" in doc else "")
    index_digest = None
    if media in LISTS or "manifests" in doc:
        entries = [m for m in doc.get("manifests") or []
                   if (m.get("platform") or {}).get("architecture") == arch
                   and (m.get("platform") or {}).get("os", "linux") == "linux"]
        if not entries:
            have = sorted({(m.get("platform") or {}).get("architecture", "?") for m in doc.get("manifests") or []})
            raise PinError(f"{ref}: the manifest list has no linux/{arch} image (it has {', '.join(have) or 'none'})")
        index_digest, digest = digest, entries[0]["digest"]
        body = raw(f"{name}@{digest}", tls)
        if "sha256:" + hashlib.sha256(body).hexdigest() != digest:
            raise PinError(f"{name}@{digest}: the manifest's bytes do not hash to its digest")
        doc = json.loads(body)
        media = doc.get("mediaType") or entries[0].get("mediaType", "")
    config = (doc.get("config") or {}).get("digest")
    if doc.get("schemaVersion") != 2 or not config or (media and media not in IMAGES):
        raise PinError(f"{ref}: not an image manifest (mediaType {media or 'none'})")
    return {"manifest_digest": digest, "config_digest": config, "source": f"{name}@{digest}",
            "media_type": media, "index_digest": index_digest}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("ref")
    ap.add_argument("--arch", default=ARCH.get(platform.machine(), platform.machine()))
    ap.add_argument("--src-tls-verify", choices=["true", "false"], default=None)
    ns = ap.parse_args(argv)
    tls = [f"--tls-verify={ns.src_tls_verify}"] if ns.src_tls_verify else []
    try:
        print(json.dumps(pin(ns.ref, ns.arch, tls), sort_keys=True))
    except (PinError, ValueError) as exc:
        print(f"glmops_image_pin: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
