"""Rendered files: systemd units pass `systemd-analyze verify` with empty stderr, the env
file is 0600 and complete, the container form is the seeds' `docker run`, and ExecStart
quoting round-trips every argv word."""
from __future__ import annotations

import os
import shlex
import shutil
import stat
import subprocess
from pathlib import Path

import pytest
import yaml
from plan_helpers import dep

from glmops import plan, render
from glmops.model import PoolSpec

ANALYZE = shutil.which("systemd-analyze")


def vllm_disagg(tmp_path: Path, runtime: str = "venv", **kw):
    return dep(engine="vllm", hardware="b200", topology="disagg", runtime=runtime,
               venv_root=str(tmp_path / "venvs"), speculative={"method": "mtp", "num_speculative_tokens": 5},
               pools=[PoolSpec(role="prefill", tp=4, gpus=[0, 1, 2, 3]), PoolSpec(role="decode", tp=4, gpus=[4, 5, 6, 7])],
               **kw)


def trtllm_disagg(tmp_path: Path, runtime: str = "venv"):
    return dep(engine="trtllm", hardware="b200", topology="disagg", runtime=runtime, venv_root=str(tmp_path / "venvs"),
               pools=[PoolSpec(role="prefill", tp=4, ep=4, gpus=[0, 1, 2, 3]), PoolSpec(role="decode", tp=4, ep=4, gpus=[4, 5, 6, 7])])


def fake_exec(path: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    Path(path).write_text("#!/bin/sh\nexit 0\n")
    os.chmod(path, 0o755)


def verify(units: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run([ANALYZE, "verify", "--man=no", *units], capture_output=True, text=True, timeout=120)


def rendered_units(d, p, out: Path) -> list[str]:
    written = render.write_tree(d, p, out)
    return [str(x) for x in written if x.suffix in (".service", ".target")]


@pytest.mark.skipif(ANALYZE is None, reason="systemd-analyze missing (apt-get install systemd)")
@pytest.mark.parametrize("make", [vllm_disagg, trtllm_disagg])
def test_venv_units_verify_clean(tmp_path, make):
    d = make(tmp_path)
    p = plan.build(d)
    for svc in p.services:
        fake_exec(svc.argv[0])
    units = rendered_units(d, p, tmp_path / "out")
    assert len([u for u in units if u.endswith(".service")]) == len(p.services)
    r = verify(units)
    assert r.returncode == 0 and r.stderr == "", r.stderr


@pytest.mark.skipif(ANALYZE is None, reason="systemd-analyze missing")
def test_container_units_verify_clean(tmp_path, monkeypatch):
    docker = tmp_path / "bin" / "docker"
    fake_exec(str(docker))
    monkeypatch.setattr(render, "DOCKER", str(docker))
    # the docker engine's own unit, as the container runtime role installs it
    stub = tmp_path / "docker.service"
    stub.write_text(f"[Unit]\nDescription=stub\n[Service]\nExecStart={docker} daemon\n")
    d = trtllm_disagg(tmp_path, runtime="container")
    p = plan.build(d)
    r = verify(rendered_units(d, p, tmp_path / "out") + [str(stub)])
    assert r.returncode == 0 and r.stderr == "", r.stderr


@pytest.mark.skipif(ANALYZE is None, reason="systemd-analyze missing")
def test_verify_catches_a_broken_unit(tmp_path):
    # negative control: the check above can fail (missing binary, bad directive value)
    d = vllm_disagg(tmp_path)
    p = plan.build(d)
    units = rendered_units(d, p, tmp_path / "out")
    assert verify(units).stderr != ""  # ExecStart binaries do not exist
    for svc in p.services:
        fake_exec(svc.argv[0])
    unit = next(u for u in units if u.endswith("prefill-0.service"))
    Path(unit).write_text(Path(unit).read_text().replace("Restart=always", "Restart=sometimes"))
    assert verify(units).stderr != ""


def test_unit_directives(tmp_path):
    d = vllm_disagg(tmp_path)
    p = plan.build(d)
    svc = next(s for s in p.services if s.role == "prefill")
    text = render.unit_text(d, svc, p)
    unit_part, service_part = text.split("[Service]")
    assert "PartOf=glm-t.target" in unit_part and "WantedBy=glm-t.target" in text
    assert "StartLimitIntervalSec=" in unit_part and "StartLimitBurst=" in unit_part  # in [Unit]
    for line in ("Restart=always", "LimitMEMLOCK=infinity", "LimitNOFILE=1048576", "User=glmops",
                 "EnvironmentFile=/etc/glmops/t/glm-t-prefill-0.env", "NoNewPrivileges=yes"):
        assert line in service_part.splitlines(), line
    directives = [x for x in text.splitlines() if not x.startswith("#")]
    assert not [x for x in directives if x.startswith(("PrivateDevices", "DeviceAllow", "DevicePolicy"))]
    # 306 GiB checkpoint: at least the readiness timeout (1800 s), 600 s + 10 s/GiB
    assert "TimeoutStartSec=3660" in service_part
    exec_start = next(line for line in text.splitlines() if line.startswith("ExecStart="))
    assert shlex.split(exec_start[len("ExecStart="):]) == svc.argv
    assert svc.argv[0] == f"{tmp_path}/venvs/vllm-0.29.0/bin/vllm"


def test_env_file_mode_and_content(tmp_path):
    d = vllm_disagg(tmp_path, env={"HF_TOKEN": "hf_secret", "NCCL_DEBUG": "WARN"})
    p = plan.build(d)
    written = render.write_tree(d, p, tmp_path / "out")
    env_file = tmp_path / "out" / "gpu-1" / "etc/glmops/t/glm-t-decode-0.env"
    assert env_file in written
    assert stat.S_IMODE(env_file.stat().st_mode) == 0o600
    lines = [x for x in env_file.read_text().splitlines() if not x.startswith("#")]
    env = dict(x.split("=", 1) for x in lines)
    svc = next(s for s in p.services if s.name == "glm-t-decode-0")
    assert env == svc.env
    assert env["NCCL_DEBUG"] == "WARN" and env["VLLM_NIXL_SIDE_CHANNEL_PORT"] == "5558"
    # F12: no hub token in any env file, unit or argv
    for path in written:
        assert "hf_secret" not in path.read_text()
    # the host tree holds the units, the target and nothing for other hosts
    names = sorted(x.name for x in (tmp_path / "out" / "gpu-1" / "etc/systemd/system").iterdir())
    assert names == ["glm-t-decode-0.service", "glm-t-prefill-0.service", "glm-t-router.service", "glm-t.target"]
    target = (tmp_path / "out" / "gpu-1" / "etc/systemd/system/glm-t.target").read_text()
    assert "Wants=glm-t-decode-0.service glm-t-prefill-0.service glm-t-router.service" in target


def test_trtllm_configs_written_as_yaml(tmp_path):
    d = trtllm_disagg(tmp_path)
    p = plan.build(d)
    render.write_tree(d, p, tmp_path / "out")
    base = tmp_path / "out" / "gpu-1" / "etc/glmops/t"
    assert sorted(x.name for x in base.iterdir() if x.suffix in (".yml", ".yaml")) == [
        "disagg_config.yaml", "glm-t-decode-0.yml", "glm-t-prefill-0.yml"]
    ctx = yaml.safe_load((base / "glm-t-prefill-0.yml").read_text())
    assert ctx["cuda_graph_config"] is None and ctx["disable_overlap_scheduler"] is True


def test_container_form(tmp_path):
    d = vllm_disagg(tmp_path, runtime="container")
    p = plan.build(d)
    svc = next(s for s in p.services if s.role == "decode")
    argv = render.exec_argv(d, svc)
    assert argv[:2] == [render.DOCKER, "run"]
    text = " ".join(argv)
    for part in ("--ipc=host", "--network=host", "--ulimit memlock=-1", "-v /models:/models:ro",
                 "--env-file /etc/glmops/t/glm-t-decode-0.env", "--entrypoint vllm vllm/vllm-openai:glm53-flash serve"):
        assert part in text, part
    i = argv.index("--gpus")
    assert argv[i + 1] == '"device=4,5,6,7"'  # the seeds' --gpus '"device=..."' form
    unit = render.unit_text(d, svc, p)
    assert "--gpus '\"device=4,5,6,7\"'" in unit
    # GPU numbering inside the container starts at 0: no host CUDA_VISIBLE_DEVICES in the env file
    assert "CUDA_VISIBLE_DEVICES" not in render.env_text(d, svc)
    assert "ExecStop=/usr/bin/docker stop" in unit and "Requires=docker.service" in unit


def test_container_without_image_is_refused(tmp_path):
    d = dep(engine="sglang", hardware="b200", runtime="container", pools=[PoolSpec(role="agg", tp=4)],
            variant="nvfp4", repo="RadixArk/GLM-5.3-Flash-NVFP4")
    p = plan.build(d)
    with pytest.raises(ValueError, match="no image"):
        render.unit_text(d, p.services[0], p)


@pytest.mark.parametrize("word", ['{"a":"b c"}', "50%", "$HOME", "it's", "a\\b", 'x"y\'z', "plain-word_1.0"])
def test_systemd_quote_round_trips(word):
    quoted = render.systemd_quote(word)
    # systemd unescapes %% and $$; shlex stands in for its quote handling
    assert shlex.split(quoted)[0].replace("%%", "%").replace("$$", "$") == word


def test_write_tree_writes_nothing_when_a_later_host_cannot_be_rendered(tmp_path, monkeypatch):
    d = dep(engine="vllm", hardware="b200", topology="disagg", venv_root=str(tmp_path / "venvs"), n_hosts=2,
            pools=[PoolSpec(role="prefill", tp=8, hosts=["gpu-1"]), PoolSpec(role="decode", tp=8, hosts=["gpu-2"])])
    p = plan.build(d)
    real = render.host_files
    hosts = list(p.hosts)
    assert len(hosts) == 2, hosts  # the first host's files are rendered before the refusal

    def refuse_last(dep_, plan_, host):
        if host == hosts[-1]:
            raise ValueError(f"{host}: cannot render")
        return real(dep_, plan_, host)

    monkeypatch.setattr(render, "host_files", refuse_last)
    with pytest.raises(ValueError, match="cannot render"):
        render.write_tree(d, p, tmp_path / "out")
    assert not (tmp_path / "out").exists()
