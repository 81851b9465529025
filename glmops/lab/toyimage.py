"""A toy container image and an "upstream" registry for the lab (issue 19 item 4).

The lab hosts have no Docker engine; the image fan-out of ``roles/engine_runtime`` moves images
with Debian's ``skopeo`` and ``docker-registry``. To prove how many bytes leave the upstream
registry, the lab serves a generated image from Debian's ``docker-registry`` on the controller
(bound to the lab's bridge gateway) and reads the bytes it served from the registry's own JSON log
(``http.response.written`` of every completed request).

* :func:`make_oci_layout` writes an OCI image layout (one config, ``layers`` gzip layers of
  pseudo-random, incompressible bytes) and returns its sizes and digests;
* :class:`UpstreamRegistry` runs ``docker-registry`` with its own config and storage, pushes a
  layout into it with ``skopeo copy`` and counts the bytes it served since the last ``reset``.

Needs the controller's ``skopeo`` and ``docker-registry`` (``python3 -m glmops.bootstrap``).
"""
from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import random
import re
import shutil
import socket
import subprocess
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path

MiB = 1 << 20
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"


@dataclass
class ToyImage:
    """What :func:`make_oci_layout` wrote: digests and sizes of the blobs as a registry stores them."""
    layout: Path
    tag: str
    manifest_digest: str
    config_digest: str
    blobs: dict[str, int]       # digest -> bytes (config and layers)
    manifest_bytes: int

    @property
    def total_bytes(self) -> int:
        """Manifest + config + layers: what one fetch of the image moves (bodies only)."""
        return self.manifest_bytes + sum(self.blobs.values())


def _blob(layout: Path, data: bytes) -> tuple[str, int]:
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    path = layout / "blobs" / "sha256" / digest.split(":", 1)[1]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return digest, len(data)


def _layer(index: int, size: int, seed: int) -> tuple[bytes, str]:
    """A gzip tar layer holding ``/opt/toy/layer-<index>.bin`` of ``size`` pseudo-random bytes;
    returns (compressed bytes, diff_id)."""
    rng = random.Random(seed * 1000 + index)
    payload = rng.randbytes(size)
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo(f"opt/toy/layer-{index}.bin")
        info.size, info.mtime, info.mode = size, 0, 0o644
        tar.addfile(info, io.BytesIO(payload))
    tar_bytes = raw.getvalue()
    return gzip.compress(tar_bytes, compresslevel=1, mtime=0), "sha256:" + hashlib.sha256(tar_bytes).hexdigest()


def make_oci_layout(root: Path, tag: str = "1.0", layers: int = 2, layer_bytes: int = 4 * MiB,
                    seed: int = 1, label: str = "toy") -> ToyImage:
    """Write an OCI image layout at ``root`` (a fresh directory) with one image tagged ``tag``."""
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    (root / "oci-layout").write_text(json.dumps({"imageLayoutVersion": "1.0.0"}))
    descs, diff_ids, blobs = [], [], {}
    for i in range(layers):
        data, diff_id = _layer(i, layer_bytes, seed)
        digest, size = _blob(root, data)
        descs.append({"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": digest, "size": size})
        diff_ids.append(diff_id)
        blobs[digest] = size
    config = json.dumps({"architecture": "amd64", "os": "linux",
                         "config": {"Labels": {"org.glmops.toy": label}, "Cmd": ["/bin/true"]},
                         "rootfs": {"type": "layers", "diff_ids": diff_ids}}, sort_keys=True).encode()
    config_digest, config_size = _blob(root, config)
    blobs[config_digest] = config_size
    manifest = json.dumps({"schemaVersion": 2, "mediaType": OCI_MANIFEST,
                           "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                                      "digest": config_digest, "size": config_size},
                           "layers": descs}, sort_keys=True).encode()
    manifest_digest, manifest_size = _blob(root, manifest)
    (root / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [
        {"mediaType": OCI_MANIFEST, "digest": manifest_digest, "size": manifest_size,
         "annotations": {"org.opencontainers.image.ref.name": tag}}]}))
    return ToyImage(root, tag, manifest_digest, config_digest, blobs, manifest_size)


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class UpstreamRegistry:
    """Debian's ``docker-registry`` on ``host`` (plain HTTP), its storage and JSON log under ``work``."""

    def __init__(self, host: str, work: Path, port: int = 0):
        self.host, self.work = host, work
        self.port = port or _free_port(host)
        self.log_path = work / "registry.log"
        self.proc: subprocess.Popen | None = None
        self._offset = 0

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self, timeout: float = 30) -> "UpstreamRegistry":
        if shutil.which("docker-registry") is None or shutil.which("skopeo") is None:
            raise RuntimeError("the upstream registry needs skopeo and docker-registry: python3 -m glmops.bootstrap")
        self.work.mkdir(parents=True, exist_ok=True)
        config = self.work / "config.yml"
        config.write_text(json.dumps({  # JSON is YAML
            "version": 0.1,
            "log": {"level": "info", "formatter": "json", "accesslog": {"disabled": True}},
            "storage": {"filesystem": {"rootdirectory": str(self.work / "storage")}},
            "http": {"addr": self.address}}))
        self.proc = subprocess.Popen(["docker-registry", "serve", str(config)], stdout=subprocess.DEVNULL,
                                     stderr=self.log_path.open("ab"))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with socket.create_connection((self.host, self.port), timeout=1):
                    return self
            except OSError:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"docker-registry exited: {self.log_path.read_text()[-2000:]}") from None
                time.sleep(0.2)
        raise RuntimeError(f"docker-registry did not listen on {self.address} within {timeout} s")

    def push(self, image: ToyImage, repo: str) -> str:
        """Copy the layout into the registry as ``repo:<tag>``; returns the pullable reference."""
        ref = f"{self.address}/{repo}:{image.tag}"
        subprocess.run(["skopeo", "copy", "--quiet", "--preserve-digests", "--dest-tls-verify=false",
                        f"oci:{image.layout}:{image.tag}", f"docker://{ref}"], check=True, capture_output=True,
                       timeout=300)
        return ref

    def reset(self) -> None:
        """Count from here on."""
        self._offset = self.log_path.stat().st_size if self.log_path.exists() else 0

    def requests(self) -> list[dict]:
        """Completed requests since the last :meth:`reset`: method, uri, status, bytes written, client."""
        if not self.log_path.exists():
            return []
        with self.log_path.open("rb") as fh:
            fh.seek(self._offset)
            lines = fh.read().decode(errors="replace").splitlines()
        out = []
        for line in lines:
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            if "http.response.written" in ev or "http.response.status" in ev:
                out.append({"method": ev.get("http.request.method"), "uri": ev.get("http.request.uri"),
                            "status": ev.get("http.response.status"),
                            "bytes": int(ev.get("http.response.written") or 0),
                            "client": (ev.get("http.request.remoteaddr") or "").rsplit(":", 1)[0]})
        return out

    def bytes_served(self) -> int:
        """Body bytes of manifest and blob GETs since the last :meth:`reset` (HEADs carry none; the
        2-byte ``/v2/`` ping is not the image's)."""
        return sum(r["bytes"] for r in self.requests()
                   if r["method"] == "GET" and re.search(r"/(manifests|blobs)/", r["uri"] or ""))

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.proc = None


class ThrottledProxy:
    """A TCP proxy on ``host`` in front of ``target`` (host, port) whose connections together send
    at most ``bytes_per_s`` towards the clients: the upstream registry behind one WAN link (parallel
    blob fetches share it, as they would share a site's uplink). 0 means no limit."""

    def __init__(self, host: str, target: tuple[str, int], bytes_per_s: int):
        import threading

        self.target, self.rate = target, bytes_per_s
        self.sock = socket.create_server((host, 0))
        self.address = f"{host}:{self.sock.getsockname()[1]}"
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._free_at = 0.0  # when the link has sent everything handed to it so far
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        import threading

        while not self._stop.is_set():
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target)
            except OSError:
                client.close()
                continue
            threading.Thread(target=self._pipe, args=(client, upstream, False), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client, bool(self.rate)), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, throttled: bool) -> None:
        try:
            while data := src.recv(65536):
                if throttled:
                    with self._lock:
                        self._free_at = max(self._free_at, time.monotonic()) + len(data) / self.rate
                        wait = self._free_at - time.monotonic()
                    if wait > 0:
                        time.sleep(wait)
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()

    def stop(self) -> None:
        self._stop.set()
        self.sock.close()


def insecure_registries_conf(address: str) -> str:
    """containers-registries.conf(5) drop-in that lets skopeo on a lab host talk plain HTTP to
    ``address`` (what Docker's ``insecure-registries`` is to a Docker engine)."""
    return f'[[registry]]\nlocation = "{address}"\ninsecure = true\n'


if __name__ == "__main__":  # a quick look: python -m glmops.lab.toyimage DIR
    import sys

    img = make_oci_layout(Path(sys.argv[1] if len(sys.argv) > 1 else os.getcwd()) / "toy-oci")
    print(json.dumps({"manifest": img.manifest_digest, "config": img.config_digest,
                      "total_bytes": img.total_bytes}, indent=1))
