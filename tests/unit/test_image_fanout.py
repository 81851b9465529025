"""The container image fan-out of roles/engine_runtime (issue 19 item 4), without lab hosts:
the pin script (roles/engine_runtime/files/glmops_image_pin.py), the role's wiring (which host
fans out, when the fan-out is skipped), the docker CLI double's ``load`` and ``tag``, and the lab's
toy image and upstream registry log. The fan-out itself on lab hosts: tests/e2e/test_image_fanout_lab.py.
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml

from glmops.lab.toyimage import UpstreamRegistry, make_oci_layout

REPO = Path(__file__).resolve().parents[2]
ROLE = REPO / "roles/engine_runtime"
sys.path.insert(0, str(ROLE / "files"))
import glmops_image_pin as P  # noqa: E402

from test_engine_runtime_container import DOUBLE, Docker, _role  # noqa: E402

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"


def _sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _manifest(config: bytes = b'{"rootfs": {"diff_ids": []}}') -> bytes:
    return json.dumps({"schemaVersion": 2, "mediaType": OCI_MANIFEST,
                       "config": {"digest": _sha(config), "size": len(config)}, "layers": []}).encode()


class Registry:
    """``skopeo inspect --raw`` answers by reference, and the references asked."""

    def __init__(self, docs: dict[str, bytes]):
        self.docs, self.asked = docs, []

    def __call__(self, ref: str, tls: list[str]) -> bytes:
        self.asked.append(ref)
        if ref not in self.docs:
            raise P.PinError(f"skopeo inspect --raw docker://{ref} failed: manifest unknown")
        return self.docs[ref]


@pytest.mark.parametrize("ref,want", [
    ("vllm/vllm-openai:v0.11", ("vllm/vllm-openai", "v0.11", None)),
    ("10.1.2.1:5000/toy/vllm:1.0", ("10.1.2.1:5000/toy/vllm", "1.0", None)),
    ("10.1.2.1:5000/toy/vllm", ("10.1.2.1:5000/toy/vllm", None, None)),
    ("nvcr.io/x/y:1@sha256:" + "a" * 64, ("nvcr.io/x/y", "1", "sha256:" + "a" * 64)),
])
def test_split_ref(ref, want):
    assert P.split_ref(ref) == want


def test_pin_an_image_manifest():
    config = b'{"rootfs": {"diff_ids": []}, "os": "linux"}'
    body = _manifest(config)
    reg = Registry({"r.example:5000/toy:1": body})
    pin = P.pin("r.example:5000/toy:1", "amd64", [], raw=reg)
    assert pin == {"manifest_digest": _sha(body), "config_digest": _sha(config),
                   "source": f"r.example:5000/toy@{_sha(body)}", "media_type": OCI_MANIFEST, "index_digest": None}


def test_pin_resolves_a_list_to_this_architecture_and_checks_the_bytes():
    amd, arm = _manifest(b'{"a": 1}'), _manifest(b'{"b": 2}')
    index = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": [
        {"digest": _sha(arm), "mediaType": OCI_MANIFEST, "platform": {"architecture": "arm64", "os": "linux"}},
        {"digest": _sha(amd), "mediaType": OCI_MANIFEST, "platform": {"architecture": "amd64", "os": "linux"}},
    ]}).encode()
    reg = Registry({"toy:1": index, f"toy@{_sha(amd)}": amd, f"toy@{_sha(arm)}": arm})
    pin = P.pin("toy:1", "amd64", [], raw=reg)
    assert (pin["manifest_digest"], pin["config_digest"], pin["index_digest"]) == (_sha(amd), _sha(b'{"a": 1}'), _sha(index))
    assert reg.asked == ["toy:1", f"toy@{_sha(amd)}"]
    with pytest.raises(P.PinError, match=r"no linux/s390x image \(it has amd64, arm64\)"):
        P.pin("toy:1", "s390x", [], raw=reg)
    reg.docs[f"toy@{_sha(amd)}"] = arm  # a registry that answers other bytes for the digest
    with pytest.raises(P.PinError, match="do not hash to its digest"):
        P.pin("toy:1", "amd64", [], raw=reg)


def test_pin_refuses_a_digest_reference_the_registry_does_not_match_and_non_images():
    body = _manifest()
    other = "sha256:" + "0" * 64
    with pytest.raises(P.PinError, match=f"has digest {_sha(body)}, the reference names {other}"):
        P.pin(f"toy@{other}", "amd64", [], raw=Registry({f"toy@{other}": body}))
    assert P.pin(f"toy@{_sha(body)}", "amd64", [], raw=Registry({f"toy@{_sha(body)}": body}))["manifest_digest"] == _sha(body)
    schema1 = json.dumps({"schemaVersion": 1, "fsLayers": []}).encode()
    with pytest.raises(P.PinError, match="not an image manifest"):
        P.pin("toy:1", "amd64", [], raw=Registry({"toy:1": schema1}))


def test_pin_script_exits_1_with_skopeos_error(tmp_path):
    fake = tmp_path / "skopeo"
    fake.write_text("#!/bin/sh\necho 'time=x level=fatal msg=\"manifest unknown\"' >&2\nexit 1\n")
    fake.chmod(0o755)
    proc = subprocess.run([sys.executable, str(ROLE / "files/glmops_image_pin.py"), "toy:1"], capture_output=True,
                          text=True, env={**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"})
    assert proc.returncode == 1 and proc.stdout == ""
    assert "glmops_image_pin: skopeo inspect --raw docker://toy:1 failed: " in proc.stderr and "manifest unknown" in proc.stderr


def test_variables_are_declared_with_their_defaults():
    defaults = yaml.safe_load((ROLE / "defaults/main.yml").read_text())
    options = yaml.safe_load((ROLE / "meta/argument_specs.yml").read_text())["argument_specs"]["main"]["options"]
    assert defaults["engine_runtime_image_fanout"] is True and defaults["engine_runtime_image_fanout_port"] == 5050
    assert options["engine_runtime_image_fanout"]["type"] == "bool" and options["engine_runtime_image_fanout"]["default"] is True
    assert options["engine_runtime_image_fanout_port"] == {**options["engine_runtime_image_fanout_port"],
                                                            "type": "int", "default": 5050}


def test_container_mode_includes_the_fanout_and_pulls_only_without_it():
    tasks = yaml.safe_load((ROLE / "tasks/container.yml").read_text())
    block = next(t for t in tasks if t["name"] == "Pull and build")["block"]
    by_name = {t["name"]: t for t in block}
    include = by_name["Fetch the seed's image once and fan it out to the hosts that need it"]
    assert include["ansible.builtin.include_tasks"] == "container_fanout.yml"
    assert "engine_runtime__fanout_on | bool" in include["when"] and "not ansible_check_mode" in include["when"]
    assert "not engine_runtime__fanout_on | bool" in by_name["Pull the seed's image"]["when"]
    names = [t["name"] for t in block]
    assert names.index("Note that this host needs the seed's image") < names.index(include["name"]) \
        < names.index("Pull the seed's image") < names.index("Build the derived image")


def _vars_play(tmp: Path, pulls: dict[str, str], image: str, fanout: bool = True, ipv6: bool = False) -> str:
    """Evaluate the role's fan-out vars on three local hosts; ``pulls``: host -> the image it needs."""
    inv = tmp / "hosts.yml"
    inv.write_text(yaml.safe_dump({"all": {"hosts": {
        h: {"ansible_connection": "local", "ansible_python_interpreter": sys.executable, "ansible_host": f"fd00::{i}" if ipv6 else f"10.0.0.{i}"}
        for i, h in enumerate(["h1", "h2", "h3"], 1)}}}))
    book = tmp / "vars.yml"
    book.write_text(yaml.safe_dump([{"hosts": "all", "gather_facts": False, "vars": {
        "engine_runtime_image": image, "engine_runtime_image_fanout": fanout, "engine_runtime_image_fanout_port": 5050,
        "engine_runtime_archive_host_dir": "/var/tmp", "pulls": pulls}, "tasks": [
        {"ansible.builtin.include_vars": str(ROLE / "vars/main.yml")},
        {"ansible.builtin.set_fact": {"engine_runtime__pull_image": "{{ pulls[inventory_hostname] }}"},
         "when": "inventory_hostname in pulls"},
        # as container_fanout.yml does first
        {"ansible.builtin.set_fact": {"engine_runtime__fanout_host": "{{ engine_runtime__fanout_first }}"}},
        {"ansible.builtin.debug": {"msg": "VARS {{ inventory_hostname }} {{ engine_runtime__fanout_first }} "
                                          "{{ engine_runtime__fanout_repo }} {{ engine_runtime__fanout_on }}"}}]}]))
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"}
    proc = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inv), str(book)],
                          capture_output=True, text=True, env=env, cwd=tmp, timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:]
    return proc.stdout


def test_the_fanout_host_is_the_first_host_that_needs_the_image(tmp_path):
    out = _vars_play(tmp_path, {"h2": "toy:1", "h3": "toy:1"}, "toy:1")
    for h in ("h1", "h2", "h3"):
        assert f"VARS {h} h2 10.0.0.2:5050/glmops-fanout/image True" in out, out[-2000:]
    # a host that needs another image is not chosen for this one
    out = _vars_play(tmp_path, {"h1": "other:2", "h3": "toy:1"}, "toy:1")
    assert "VARS h3 h3 10.0.0.3:5050/glmops-fanout/image True" in out, out[-2000:]
    # an IPv6 inventory address is bracketed
    out = _vars_play(tmp_path, {"h2": "toy:1"}, "toy:1", ipv6=True)
    assert "VARS h2 h2 [fd00::2]:5050/glmops-fanout/image True" in out, out[-2000:]
    # digest references, and fan-out off: each host pulls
    assert "VARS h1 h1 10.0.0.1:5050/glmops-fanout/image False" in _vars_play(
        tmp_path, {"h1": "toy@sha256:" + "a" * 64}, "toy@sha256:" + "a" * 64)
    assert "VARS h1 h1 10.0.0.1:5050/glmops-fanout/image False" in _vars_play(tmp_path, {"h1": "toy:1"}, "toy:1", False)


def test_check_mode_with_the_fanout_on_only_looks_and_a_digest_reference_is_pulled(tmp_path):
    docker = Docker(tmp_path)
    dry = _role(tmp_path, docker, "vllm", "0.33.0", "vllm/vllm-openai:glm53-flash", [], check=True, fanout=True)
    assert dry.returncode == 0, dry.stdout[-3000:]
    assert docker.calls() == [["image", "inspect", "vllm/vllm-openai:glm53-flash"]]
    pinned = "vllm/vllm-openai@sha256:" + "b" * 64
    docker.registry.write_text(json.dumps({pinned: {}}))
    r = _role(tmp_path, docker, "vllm", "0.33.0", pinned, [], fanout=True)
    assert r.returncode == 0, r.stdout[-3000:]
    assert docker.calls()[1:] == [["image", "inspect", pinned], ["pull", pinned]]


def _archive(tmp: Path, layer: bytes, diff_id: str | None = None, tags: list[str] | None = None) -> tuple[Path, str]:
    config = json.dumps({"rootfs": {"type": "layers", "diff_ids": [diff_id or _sha(layer)]},
                         "config": {"Labels": {"k": "v"}}}).encode()
    cfg_name = _sha(config).split(":")[1] + ".json"
    manifest = json.dumps([{"Config": cfg_name, "RepoTags": tags or [], "Layers": ["l1.tar"]}]).encode()
    path = tmp / "image.tar"
    with tarfile.open(path, "w") as tar:
        for name, data in (("manifest.json", manifest), (cfg_name, config), ("l1.tar", layer)):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path, _sha(config)


def test_docker_double_load_and_tag(tmp_path):
    docker = Docker(tmp_path)
    path, image_id = _archive(tmp_path, b"layer bytes")
    r = docker("load", "--input", str(path))
    assert r.returncode == 0 and r.stdout.strip() == f"Loaded image ID: {image_id}", r.stderr
    assert json.loads(docker("image", "inspect", image_id).stdout)[0]["Config"]["Labels"] == {"k": "v"}
    assert docker("image", "inspect", "toy:1").returncode == 1
    assert docker("tag", image_id, "toy:1").returncode == 0
    assert json.loads(docker("image", "inspect", "toy:1").stdout)[0]["Id"] == image_id
    r = docker("tag", "sha256:" + "f" * 64, "toy:2")
    assert r.returncode == 1 and f"No such image: sha256:{'f' * 64}" in r.stderr
    r = docker("tag", image_id, "toy@sha256:" + "a" * 64)
    assert r.returncode == 1 and "refusing to create a tag with a digest reference" in r.stderr
    path, tagged_id = _archive(tmp_path, b"other", tags=["toy:3"])
    r = docker("load", "-i", str(path), "-q")
    assert r.returncode == 0 and r.stdout.strip() == "Loaded image: toy:3"


def test_docker_double_load_is_strict(tmp_path):
    docker = Docker(tmp_path)
    path, _ = _archive(tmp_path, b"layer bytes", diff_id="sha256:" + "0" * 64)
    r = docker("load", "--input", str(path))
    assert r.returncode == 1 and "invalid diffID for layer l1.tar" in r.stderr
    (tmp_path / "junk.tar").write_bytes(b"not a tar")
    r = docker("load", "--input", str(tmp_path / "junk.tar"))
    assert r.returncode == 1 and "Error processing tar file" in r.stderr
    assert docker("load", "--platform", "x").returncode == 125
    assert docker("load", str(path)).returncode == 125
    r = docker("tag", "only-one")
    assert r.returncode == 125 and '"docker tag" requires exactly 2 arguments.' in r.stderr
    assert DOUBLE.exists()


def test_toy_image_layout_is_content_addressed_and_deterministic(tmp_path):
    img = make_oci_layout(tmp_path / "a", layers=2, layer_bytes=4096, seed=3)
    blobs = tmp_path / "a/blobs/sha256"
    for f in blobs.iterdir():
        assert _sha(f.read_bytes()) == "sha256:" + f.name
    manifest = json.loads((blobs / img.manifest_digest.split(":")[1]).read_text())
    assert manifest["config"]["digest"] == img.config_digest
    assert {d["digest"] for d in manifest["layers"]} | {img.config_digest} == set(img.blobs)
    assert img.total_bytes == img.manifest_bytes + sum(f.stat().st_size for f in blobs.iterdir()
                                                       if "sha256:" + f.name != img.manifest_digest)
    assert make_oci_layout(tmp_path / "b", layers=2, layer_bytes=4096, seed=3).manifest_digest == img.manifest_digest
    assert make_oci_layout(tmp_path / "c", layers=2, layer_bytes=4096, seed=4).manifest_digest != img.manifest_digest


def test_upstream_registry_counts_image_bytes_from_its_log(tmp_path):
    reg = UpstreamRegistry("127.0.0.1", tmp_path, port=1)
    lines = [{"http.request.method": "GET", "http.request.uri": "/v2/", "http.response.written": 2,
              "http.request.remoteaddr": "10.0.0.11:4000"},
             {"http.request.method": "HEAD", "http.request.uri": "/v2/toy/blobs/sha256:a", "http.response.written": 0},
             {"http.request.method": "GET", "http.request.uri": "/v2/toy/manifests/1", "http.response.written": 500,
              "http.request.remoteaddr": "10.0.0.11:4001"}]
    reg.log_path.write_text("not json\n" + "".join(json.dumps(x) + "\n" for x in lines))
    assert reg.bytes_served() == 500 and [r["client"] for r in reg.requests()][0] == "10.0.0.11"
    reg.reset()
    with reg.log_path.open("a") as fh:
        fh.write(json.dumps({"http.request.method": "GET", "http.request.uri": "/v2/toy/blobs/sha256:b",
                             "http.response.written": 7000}) + "\n")
    assert reg.bytes_served() == 7000


def test_throttled_proxy_shares_one_rate_over_its_connections():
    import socket
    import threading
    import time

    from glmops.lab.toyimage import MiB, ThrottledProxy

    payload = bytes(range(256)) * 4096  # 1 MiB
    server = socket.create_server(("127.0.0.1", 0))

    def serve():
        for _ in range(2):
            conn, _ = server.accept()
            threading.Thread(target=lambda c=conn: (c.sendall(payload), c.close()), daemon=True).start()
    threading.Thread(target=serve, daemon=True).start()
    proxy = ThrottledProxy("127.0.0.1", server.getsockname(), 4 * MiB)
    got = []

    def fetch():
        host, port = proxy.address.rsplit(":", 1)
        with socket.create_connection((host, int(port))) as c:
            buf = b""
            while chunk := c.recv(65536):
                buf += chunk
            got.append(buf)
    start = time.monotonic()
    threads = [threading.Thread(target=fetch) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    took = time.monotonic() - start
    proxy.stop()
    server.close()
    assert got == [payload, payload]
    assert took >= 2 * len(payload) / (4 * MiB) - 0.05  # 2 MiB through one 4 MiB/s link: >= 0.5 s, not 0.25 s
