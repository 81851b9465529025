"""The engine image fetched once and fanned out on lab hosts (roles/engine_runtime container mode,
issue 19 item 4): three b200-sim hosts need the same image, which an "upstream" registry (Debian's
docker-registry on the controller, bound to the lab's gateway) serves: a generated toy image of two
4 MiB layers (glmops/lab/toyimage.py). No Docker engine: the docker CLI double is the hosts' docker.

1. First run: the upstream registry serves the image's bytes once (its blobs exactly once, to the
   fan-out host lab-1 only); every host holds the image with the pinned config digest as its ID;
   the fan-out registry is stopped and emptied; no copy is left; Debian's own docker-registry unit
   was masked before the package came and never ran. A second run changes nothing and
   fetches nothing.
2. A host whose loaded image ID is not the pinned digest (lab-2's docker loads other bytes) is
   refused, named with both digests; the others get the image; the fan-out registry is stopped.
3. The same on the fan-out host itself (lab-1): it is refused, lab-2 and lab-3 still get the image
   from its registry, which is stopped after.

Own lab ``e2eimg`` (b200-sim, ``--subnet auto``), ansible-playbook with the repository's config.
"""
from __future__ import annotations

import re
import shutil

import pytest

import deploylab as D
import image_fanout_lab as F

pytestmark = [*D.LAB_MARKS, pytest.mark.skipif(shutil.which("docker-registry") is None or shutil.which("skopeo") is None,
                                                reason="the upstream registry needs skopeo and docker-registry")]

LAB = "e2eimg"
HOSTS = ["lab-1", "lab-2", "lab-3"]


@pytest.fixture(scope="module")
def lab():
    yield from D.lab_for_module(LAB, 3, "auto", [], profile="b200-sim")


@pytest.fixture(scope="module")
def upstream(lab, tmp_path_factory):
    from glmops.lab.toyimage import UpstreamRegistry, make_oci_layout

    work = tmp_path_factory.mktemp("upstream")
    image = make_oci_layout(work / "oci", tag="0.0.0-toy")
    registry = UpstreamRegistry(F.gateway(lab), work / "registry").start()
    ref = registry.push(image, "toy/vllm")
    F.prepare_hosts(lambda h, c, **kw: D.ssh(lab, h, c, **kw), HOSTS, registry.address)
    yield registry, image, ref
    registry.stop()


def _ssh(lab):
    return lambda h, c, **kw: D.ssh(lab, h, c, **kw)


def _fanout_left(lab, host: str = "lab-1") -> tuple[str, str]:
    state = D.ssh(lab, host, "systemctl is-active glmops-image-fanout.service").stdout.strip()
    storage = D.ssh(lab, host, "test -e /var/lib/glmops/image-fanout/storage && echo kept || echo gone").stdout.strip()
    return state, storage


def _run(lab, upstream, tmp_path, name: str):
    registry, image, ref = upstream
    registry.reset()
    proc = F.play(D.LAB_ROOT / LAB / "inventory.yml", ref, tmp_path / name)
    return proc, registry.requests()


def test_the_image_is_fetched_once_and_every_host_verifies_it(lab, upstream, tmp_path):
    registry, image, ref = upstream
    F.wipe_images(_ssh(lab), HOSTS)
    proc, served = _run(lab, upstream, tmp_path, "first")
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-2000:]
    blobs = [r for r in served if r["method"] == "GET" and "/blobs/" in r["uri"]]
    # every blob exactly once, to lab-1 only (the fan-out host); the manifest is read by the pin and the copy
    assert sorted(r["uri"].rsplit("/", 1)[-1] for r in blobs) == sorted(image.blobs), served
    assert {r["client"] for r in served if r["method"] == "GET"} == {lab["all"]["children"]["lab"]["hosts"]["lab-1"]["ansible_host"]}
    assert sum(r["bytes"] for r in blobs) == sum(image.blobs.values())
    assert image.total_bytes <= registry.bytes_served() <= image.total_bytes + 2 * image.manifest_bytes
    for h in HOSTS:
        held = F.images(_ssh(lab), h)
        assert held[ref]["Id"] == image.config_digest, (h, held)
    assert _fanout_left(lab) == ("inactive", "gone")
    # Debian's own registry unit was masked before its package came: it never ran
    assert D.ssh(lab, "lab-1", "systemctl is-enabled docker-registry.service").stdout.strip() == "masked"
    assert D.ssh(lab, "lab-1", "systemctl show -p ActiveEnterTimestampMonotonic --value docker-registry.service"
                 ).stdout.strip() == "0"
    for h in HOSTS:
        assert D.ssh(lab, h, "ls /var/tmp | grep -c glmops-image || true").stdout.strip() == "0"

    again, served = _run(lab, upstream, tmp_path, "again")
    assert again.returncode == 0, again.stdout[-4000:]
    assert {h: r.get("changed") for h, r in F.recap(again.stdout).items()} == dict.fromkeys(HOSTS, 0)
    assert [r for r in served if r["method"] == "GET"] == []


@pytest.mark.parametrize("bad", ["lab-2", "lab-1"])
def test_a_host_that_loads_other_bytes_is_refused_and_named(lab, upstream, tmp_path, bad):
    registry, image, ref = upstream
    F.wipe_images(_ssh(lab), HOSTS)
    F.tamper(_ssh(lab), bad)
    proc, served = _run(lab, upstream, tmp_path, f"tampered-{bad}")
    out = proc.stdout
    assert proc.returncode != 0
    m = re.search(rf"{bad}: refused the image {re.escape(ref)} from the fan-out registry on lab-1 \([\d.]+:5050\): "
                  rf"the loaded image ID is (sha256:[0-9a-f]{{64}}), the pinned config digest is "
                  rf"{image.config_digest} \(manifest {image.manifest_digest}\)", " ".join(out.split()))
    assert m and m.group(1) != image.config_digest, out[-4000:]
    assert "the refused image was removed from this host" in " ".join(out.split()), out[-3000:]
    assert {h: r["failed"] for h, r in F.recap(out).items()} == {h: int(h == bad) for h in HOSTS}, out[-3000:]
    assert ref not in F.images(_ssh(lab), bad)
    # the refused bytes do not stay on the host (the docker double's store: tests/doubles/docker_cli_double.py)
    assert m.group(1) not in {img["Id"] for img in F.images(_ssh(lab), bad).values()}
    for h in set(HOSTS) - {bad}:
        assert F.images(_ssh(lab), h)[ref]["Id"] == image.config_digest
    assert _fanout_left(lab) == ("inactive", "gone")  # also when the fan-out host itself was refused
    assert sum(r["bytes"] for r in served if "/blobs/" in (r["uri"] or "")) == sum(image.blobs.values())
