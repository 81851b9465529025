"""Helpers for the image fan-out on lab hosts (roles/engine_runtime container mode, issue 19 item 4),
shared by tests/e2e/test_image_fanout_lab.py and bench/image_fanout.py.

The lab hosts have no Docker engine: the strict docker CLI double (tests/doubles/docker_cli_double.py)
is installed as ``/usr/local/bin/docker``; the image moves with Debian's skopeo and docker-registry,
which the role installs. The "upstream" registry is Debian's docker-registry on the controller, bound
to the lab's bridge gateway, serving a generated toy image (glmops/lab/toyimage.py); the bytes it
served come from its own log.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOUBLE = REPO / "tests/doubles/docker_cli_double.py"
DOUBLE_ON_HOST = "/usr/local/lib/glmops-docker-cli-double.py"
PLAY = """\
- name: The engine image
  hosts: "{{ image_hosts | default('lab') }}"
  gather_facts: false
  roles:
    - role: engine_runtime
      engine_runtime_mode: container
      engine_runtime_engine: vllm
      engine_runtime_version: "0.0.0-toy"
"""
#: a ``docker`` for one host that changes the image's config before the double loads it (the
#: host ends up with other bytes than the pinned ones, as a corrupted or substituted load would)
TAMPERING_DOCKER = f"""#!/usr/bin/env python3
import io, os, sys, tarfile
args = sys.argv[1:]
if args[:2] == ["load", "--input"]:
    with tarfile.open(args[2]) as tar:
        members = [(m, tar.extractfile(m).read() if m.isfile() else None) for m in tar.getmembers()]
    with tarfile.open(args[2], "w") as tar:
        for m, data in members:
            if data is not None and "/" not in m.name and m.name.endswith(".json") and m.name != "manifest.json":
                data += b"\\n"
                m.size = len(data)
            tar.addfile(m, io.BytesIO(data) if data is not None else None)
os.execv(sys.executable, [sys.executable, "{DOUBLE_ON_HOST}", *args])
"""


def gateway(lab_inv: dict) -> str:
    """The lab's bridge gateway (``.1`` of the hosts' /24)."""
    first = next(iter(lab_inv["all"]["children"]["lab"]["hosts"].values()))["ansible_host"]
    return first.rsplit(".", 1)[0] + ".1"


def prepare_hosts(ssh, hosts: list[str], upstream: str) -> None:
    """On every host: the docker double as ``docker`` (empty store) and skopeo's permission to
    speak plain HTTP to the upstream registry (containers-registries.conf(5), what Docker's
    ``insecure-registries`` is to a Docker engine)."""
    from glmops.lab.toyimage import insecure_registries_conf

    source = DOUBLE.read_text()
    for h in hosts:
        proc = ssh(h, f"install -d /etc/containers/registries.conf.d && cat > {DOUBLE_ON_HOST} && "
                      f"chmod 0755 {DOUBLE_ON_HOST} && ln -sf {DOUBLE_ON_HOST} /usr/local/bin/docker && "
                      "rm -rf /var/lib/docker-cli-double", input=source)
        assert proc.returncode == 0, f"{h}: {proc.stderr}"
        proc = ssh(h, "cat > /etc/containers/registries.conf.d/glmops-lab-upstream.conf",
                   input=insecure_registries_conf(upstream))
        assert proc.returncode == 0, f"{h}: {proc.stderr}"


def wipe_images(ssh, hosts: list[str]) -> None:
    """Forget every image (the double's store) and put the plain double back as ``docker``."""
    for h in hosts:
        ssh(h, f"rm -rf /var/lib/docker-cli-double; ln -sf {DOUBLE_ON_HOST} /usr/local/bin/docker")


def tamper(ssh, host: str) -> None:
    proc = ssh(host, "rm -f /usr/local/bin/docker && cat > /usr/local/bin/docker && chmod 0755 /usr/local/bin/docker",
               input=TAMPERING_DOCKER)
    assert proc.returncode == 0, proc.stderr


def images(ssh, host: str) -> dict:
    out = ssh(host, "cat /var/lib/docker-cli-double/images.json 2>/dev/null || echo '{}'").stdout
    return json.loads(out)


def play(inventory: Path, image: str, tmp: Path, hosts: str = "lab", extra: dict | None = None):
    tmp.mkdir(parents=True, exist_ok=True)
    book = tmp / "image.yml"
    book.write_text(PLAY)
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_ROLES_PATH": str(REPO / "roles"),
           "ANSIBLE_FORCE_COLOR": "0", "ANSIBLE_NOCOLOR": "1",
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    argv = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inventory), str(book),
            "-e", json.dumps({"engine_runtime_image": image, "image_hosts": hosts, **(extra or {})})]
    return subprocess.run(argv, capture_output=True, text=True, timeout=900, env=env, cwd=tmp)


def recap(out: str) -> dict[str, dict[str, int]]:
    tail = out.rsplit("PLAY RECAP", 1)[-1]
    return {m.group(1): {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", m.group(2))}
            for m in re.finditer(r"^([\w.-]+)\s*:\s*(.*)$", tail, re.M)}
