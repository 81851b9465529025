"""engine_runtime container mode (issue 5 item 4): pull the seed's image, build a small derived
image with the engine's pins (seed 000: fla-core, einops; transformers==5.17.0 and
opencv-python-headless for image/video input), tagged by content.

No Docker engine here: the real role runs on localhost (ansible-playbook, tmp dirs) against the
strict docker CLI double (tests/doubles/docker_cli_double.py). Golden files:
``golden/engine_runtime/Dockerfile.trtllm-multimodal`` (the rendered Dockerfile) and
``golden/engine_runtime/commands.trtllm.jsonl`` (every docker argv the role ran, in order).
Regenerate with ``GLMOPS_UPDATE_GOLDEN=1``.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from glmops.runtime import derived_image

REPO = Path(__file__).resolve().parents[2]
DOUBLE = REPO / "tests/doubles/docker_cli_double.py"
GOLDEN = Path(__file__).resolve().parent / "golden" / "engine_runtime"
BASE = "nvcr.io/nvidia/tensorrt-llm/release:1.3.0rc29"  # catalog engines.trtllm.default_image (seed 000)
PINS = ["fla-core", "einops", "transformers==5.17.0", "opencv-python-headless"]


class Docker:
    def __init__(self, tmp: Path):
        self.state = tmp / "docker"
        self.registry = tmp / "registry.json"
        self.registry.write_text(json.dumps({BASE: {"labels": {"com.nvidia.release": "1.3.0rc29"}},
                                             "vllm/vllm-openai:glm53-flash": {}}))
        self.env = {"GLMOPS_DOCKER_DOUBLE_STATE": str(self.state), "GLMOPS_DOCKER_DOUBLE_REGISTRY": str(self.registry)}

    def __call__(self, *argv: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(DOUBLE), *argv], capture_output=True, text=True, env={**os.environ, **self.env})

    def calls(self) -> list[list[str]]:
        log = self.state / "calls.log"
        return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []

    def images(self) -> dict:
        return json.loads((self.state / "images.json").read_text())


def _role(tmp: Path, docker: Docker, engine: str, version: str, image: str, pins: list[str],
          check: bool = False, fanout: bool = False) -> subprocess.CompletedProcess:
    book = tmp / "play.yml"
    book.write_text("- hosts: localhost\n  gather_facts: false\n  roles:\n    - role: engine_runtime\n")
    extra = tmp / "vars.json"
    extra.write_text(json.dumps({
        "engine_runtime_mode": "container", "engine_runtime_engine": engine, "engine_runtime_version": version,
        "engine_runtime_image": image, "engine_runtime_pins": pins, "engine_runtime_docker": str(DOUBLE),
        "engine_runtime_image_build_dir": str(tmp / "images"), "engine_runtime_image_fanout": fanout}))
    env = {**os.environ, **docker.env, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"}
    argv = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", "-c", "local",
            "-e", f"ansible_python_interpreter={sys.executable}", "-e", f"@{extra}", str(book)]
    return subprocess.run(argv + (["--check"] if check else []), capture_output=True, text=True, cwd=REPO,
                          env=env, timeout=300)


def _golden(name: str, text: str) -> str:
    path = GOLDEN / name
    if os.environ.get("GLMOPS_UPDATE_GOLDEN"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return path.read_text()


def test_derived_image_pulled_built_tagged_by_content_then_nothing_to_do(tmp_path):
    docker = Docker(tmp_path)
    want = derived_image("trtllm", "1.3.0rc29", BASE, PINS)
    assert want["dockerfile"] == _golden("Dockerfile.trtllm-multimodal", want["dockerfile"])

    dry = _role(tmp_path, docker, "trtllm", "1.3.0rc29", BASE, PINS, check=True)
    assert dry.returncode == 0, dry.stdout[-3000:]
    assert [c[:2] for c in docker.calls()] == [["image", "inspect"], ["image", "inspect"]]  # check mode: look only
    assert not (tmp_path / "images").exists()

    first = _role(tmp_path, docker, "trtllm", "1.3.0rc29", BASE, PINS)
    assert first.returncode == 0, first.stdout[-3000:]
    context = tmp_path / "images" / want["tag"].replace("/", "_").replace(":", "_")
    calls = [[a.replace(str(tmp_path), "<tmp>") for a in c] for c in docker.calls()[2:]]
    text = "".join(json.dumps(c) + "\n" for c in calls)
    assert text == _golden("commands.trtllm.jsonl", text)
    assert calls[-1][:3] == ["build", "--tag", want["tag"]]
    assert (context / "Dockerfile").read_text() == want["dockerfile"]  # the role renders what the Plan renders
    image = docker.images()[want["tag"]]
    assert image["Dockerfile"] == want["dockerfile"]
    assert image["Config"]["Labels"]["org.glmops.pins"] == " ".join(PINS)
    assert image["Config"]["Labels"]["com.nvidia.release"] == "1.3.0rc29"  # built FROM the seed's image

    again = _role(tmp_path, docker, "trtllm", "1.3.0rc29", BASE, PINS)
    assert again.returncode == 0 and "changed=0" in again.stdout, again.stdout[-2000:]
    assert docker.calls()[-1] == ["image", "inspect", want["tag"]] and len(docker.calls()) == 2 + len(calls) + 1
    # another pin set (or base, or version) is another tag
    assert derived_image("trtllm", "1.3.0rc29", BASE, PINS[:2])["tag"] != want["tag"]
    assert derived_image("trtllm", "1.3.0rc29", BASE + "-1", PINS)["tag"] != want["tag"]


def test_no_pins_means_the_seeds_image_only(tmp_path):
    docker = Docker(tmp_path)
    image = "vllm/vllm-openai:glm53-flash"
    assert derived_image("vllm", "0.33.0", image, []) == {"image": image, "tag": image, "dockerfile": ""}
    r = _role(tmp_path, docker, "vllm", "0.33.0", image, [])
    assert r.returncode == 0, r.stdout[-2000:]
    assert docker.calls() == [["image", "inspect", image], ["pull", image]]


def test_image_missing_from_the_registry_fails_the_role(tmp_path):
    docker = Docker(tmp_path)
    r = _role(tmp_path, docker, "trtllm", "9.9", "nvcr.io/nvidia/tensorrt-llm/release:9.9", PINS)
    assert r.returncode == 2
    assert "manifest for nvcr.io/nvidia/tensorrt-llm/release:9.9 not found" in " ".join(r.stdout.split())


def test_unsafe_pins_refused_naming_them():
    with pytest.raises(ValueError, match=r"pin 'x\"; rm -rf /'"):
        derived_image("trtllm", "1", BASE, ['x"; rm -rf /'])


def test_docker_double_is_strict(tmp_path):
    docker = Docker(tmp_path)
    r = docker("image", "inspect", "--format", "{{.Id}}", BASE)
    assert r.returncode == 125 and "unknown flag: --format" in r.stderr
    r = docker("run", BASE)
    assert r.returncode == 125 and "unknown command: docker run" in r.stderr
    r = docker("build", "--file", "x", str(tmp_path))
    assert r.returncode == 125 and "unknown flag: --file" in r.stderr
    r = docker("build", "--tag")
    assert r.returncode == 125 and "flag needs an argument: --tag" in r.stderr
    r = docker("image", "inspect", "nope:1")
    assert r.returncode == 1 and r.stdout.strip() == "[]" and "Error: No such image: nope:1" in r.stderr
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    (ctx / "Dockerfile").write_text(f"FROM {BASE}\nCOPY . /x\n")
    r = docker("build", "--tag", "t:1", str(ctx))
    assert r.returncode == 1 and "line 2: unknown instruction: COPY" in r.stderr
    (ctx / "Dockerfile").write_text("FROM nvcr.io/nope:1\nRUN true\n")
    r = docker("build", "--tag", "t:1", str(ctx))
    assert r.returncode == 1 and "failed to resolve source metadata for nvcr.io/nope:1" in r.stderr


def test_plan_units_run_the_derived_image_the_role_builds(tmp_path):
    from inventory_factory import trtllm_b200, write_inventory

    from glmops.planning import plan_view

    inv = write_inventory(tmp_path / "inv", trtllm_b200("agg", glmops_runtime="container", glmops_multimodal=True))
    view = plan_view(str(inv), None)
    want = derived_image("trtllm", "1.3.0rc29", BASE, PINS)
    runtimes = [r for h in view["hosts"].values() for r in h["runtimes"] if r["engine"] == "trtllm"]
    assert runtimes and all(r == {"engine": "trtllm", "version": "1.3.0rc29", "mode": "container", "image": BASE,
                                  "tag": want["tag"], "pins": PINS} for r in runtimes), runtimes
    workers = [s for s in view["services"] if s["engine"] == "trtllm"]
    assert workers and all(s["image"] == want["tag"] for s in workers)
    units = [f["content"] for h in view["hosts"].values() for f in h["workers"]["files"]
             if f["path"].endswith(".service")]
    assert units and all(f" {want['tag']} " in u for u in units)
