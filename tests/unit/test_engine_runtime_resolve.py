"""F15: the venv runtime resolves the engine together with its pins before the host changes.

A strict stand-in wheelhouse (tiny real wheels built here): ``engine 1.0.0`` requires
``transformers<5`` and ``einops``; the lock holds engine, transformers 4.57.0 and einops;
``transformers 5.17.0`` and ``fla-core 0.4.0`` (requires einops) are in the wheelhouse too.

* ``glmops_pip_resolve.resolve`` (the module's own code) refuses ``transformers==5.17.0``
  naming both constraints, resolves a compatible set, names a pin the wheelhouse lacks;
* the real role (``roles/engine_runtime``, ansible-playbook on localhost against tmp dirs,
  no index: ``--no-index``) installs a compatible pin set (the venv imports the pinned
  versions), then refuses the conflict with the installed venv left file for file as it was;
  a third run changes nothing.
"""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from wheels import make_wheelhouse

from glmops.runtime import engine_pins, requirement_name

REPO = Path(__file__).resolve().parents[2]
PYTHON = "/usr/bin/python3" if Path("/usr/bin/python3").exists() else sys.executable
LOCK = ["engine==1.0.0", "transformers==4.57.0", "einops==0.8.1"]

pytestmark = pytest.mark.skipif(
    subprocess.run([PYTHON, "-c", "import ensurepip, venv"], capture_output=True).returncode != 0,
    reason=f"{PYTHON} has no venv/ensurepip")


def _module():
    path = REPO / "roles/engine_runtime/library/glmops_pip_resolve.py"
    spec = importlib.util.spec_from_file_location("glmops_pip_resolve", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def wheelhouse(tmp_path_factory):
    return make_wheelhouse(tmp_path_factory.mktemp("wh") / "engine", [
        ("engine", "1.0.0", ["transformers<5", "einops"]),
        ("transformers", "4.57.0"),
        ("transformers", "5.17.0"),
        ("einops", "0.8.1"),
        ("fla-core", "0.4.0", ["einops"], "fla"),
    ], LOCK)


def test_merge_replaces_the_pinned_projects_line():
    mod = _module()
    assert mod.merge(LOCK, ["Transformers==5.17.0"]) == ["engine==1.0.0", "einops==0.8.1", "Transformers==5.17.0"]
    assert mod.merge(LOCK, []) == LOCK


def test_conflicting_pin_is_refused_naming_both_constraints(wheelhouse, tmp_path):
    res = _module().resolve(PYTHON, LOCK, ["transformers==5.17.0"], str(wheelhouse), workdir=str(tmp_path),
                            label="engine 1.0.0")
    assert res["failed"]
    assert "The user requested transformers==5.17.0" in res["conflict"]
    assert "engine 1.0.0 depends on transformers<5" in res["conflict"]
    assert res["msg"].startswith("F15: the pins ['transformers==5.17.0'] conflict with engine 1.0.0's own")
    assert "nothing on this host was changed" in res["msg"]
    assert list(tmp_path.iterdir()) == []  # the throwaway venv is gone


def test_compatible_pins_resolve_to_the_exact_set(wheelhouse, tmp_path):
    res = _module().resolve(PYTHON, LOCK, ["fla-core==0.4.0"], str(wheelhouse), workdir=str(tmp_path))
    assert not res.get("failed"), res
    assert sorted(res["resolved"]) == ["einops==0.8.1", "engine==1.0.0", "fla-core==0.4.0", "transformers==4.57.0"]


def test_pin_missing_from_the_wheelhouse_is_named(wheelhouse, tmp_path):
    res = _module().resolve(PYTHON, LOCK, ["opencv-python-headless"], str(wheelhouse), workdir=str(tmp_path))
    assert res["failed"] and res["missing"] == ["opencv-python-headless"], res
    assert f"not found in wheelhouse {wheelhouse}" in res["msg"]


def _role(tmp: Path, wheelhouse: Path, pins: list[str]) -> subprocess.CompletedProcess:
    book = tmp / "play.yml"
    book.write_text("- hosts: localhost\n  gather_facts: false\n  roles:\n    - role: engine_runtime\n")
    extra = tmp / "vars.json"
    extra.write_text(json.dumps({
        "engine_runtime_engine": "engine", "engine_runtime_version": "1.0.0",
        "engine_runtime_venv": str(tmp / "venvs" / "engine-1.0.0"), "engine_runtime_wheelhouse": str(wheelhouse),
        "engine_runtime_python": PYTHON, "engine_runtime_pins": pins,
        # one host: it would only pack for nobody (and write the operator's cache)
        "engine_runtime_archive_dir": ""}))
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    for name in ("PIP_INDEX_URL", "PIP_FIND_LINKS", "PIP_EXTRA_INDEX_URL"):
        env.pop(name, None)
    return subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", "-c", "local",
                           "-e", f"ansible_python_interpreter={sys.executable}", "-e", f"@{extra}", str(book)],
                          capture_output=True, text=True, cwd=REPO, env=env, timeout=300)


def _tree(path: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(path)): (p.stat().st_mtime_ns, p.stat().st_size)
            for p in path.rglob("*") if p.is_file() and "__pycache__" not in p.parts}


def _version(venv: Path, module: str) -> str:
    return subprocess.run([str(venv / "bin/python"), "-c", f"import {module}; print({module}.__version__)"],
                          capture_output=True, text=True, check=True).stdout.strip()


def test_role_installs_pins_then_refuses_a_conflict_before_touching_the_venv(wheelhouse, tmp_path):
    venv = tmp_path / "venvs" / "engine-1.0.0"
    pins = ["fla-core==0.4.0", "einops==0.8.1"]
    pinned = _role(tmp_path, wheelhouse, pins)
    assert pinned.returncode == 0, pinned.stdout[-3000:]
    assert _version(venv, "fla") == "0.4.0" and _version(venv, "einops") == "0.8.1"
    assert _version(venv, "transformers") == "4.57.0"
    marker = json.loads((venv / ".glmops-runtime.json").read_text())
    assert marker["want"]["pins"] == pins
    installed = (venv / "glmops-requirements.txt").read_text().split()
    assert sorted(installed) == ["einops==0.8.1", "engine==1.0.0", "fla-core==0.4.0", "transformers==4.57.0"]
    before = _tree(venv)

    refused = _role(tmp_path, wheelhouse, ["transformers==5.17.0"])
    out = " ".join(refused.stdout.split())
    assert refused.returncode == 2, refused.stdout[-3000:]
    assert "F15: the pins ['transformers==5.17.0'] conflict with engine 1.0.0" in out
    assert "The user requested transformers==5.17.0; engine 1.0.0 depends on transformers<5" in out
    assert "Remove an outdated venv" not in refused.stdout
    assert _tree(venv) == before  # not one file of the installed venv changed
    assert _version(venv, "transformers") == "4.57.0"

    again = _role(tmp_path, wheelhouse, pins)
    assert again.returncode == 0 and "changed=0" in again.stdout, again.stdout[-2000:]
    assert _tree(venv) == before


def test_engine_pins_from_catalog_multimodal_and_inventory():
    from types import SimpleNamespace

    dep = SimpleNamespace(engine="trtllm", multimodal=True, pip_extra=["einops==0.8.1", "rich"])
    assert engine_pins(dep, "trtllm") == ["fla-core", "einops==0.8.1", "transformers==5.17.0",
                                          "opencv-python-headless", "rich"]
    assert engine_pins(dep, "vllm_router") == []  # routers do not load the model
    dep.multimodal, dep.pip_extra = False, []
    assert engine_pins(dep, "trtllm") == ["fla-core", "einops"]
    assert requirement_name("Fla_Core>=0.4") == "fla-core"
    with pytest.raises(ValueError, match="'==1'"):
        requirement_name("==1")


def test_plan_view_hands_the_pins_to_the_runtime_role(tmp_path):
    from inventory_factory import trtllm_b200, write_inventory

    from glmops.planning import plan_view

    inv = write_inventory(tmp_path / "inv", trtllm_b200("agg", glmops_runtime="venv", glmops_multimodal=True,
                                                        glmops_pip_extra=["einops==0.8.1"]))
    runtimes = [r for h in plan_view(str(inv), None)["hosts"].values() for r in h["runtimes"]]
    engine = [r for r in runtimes if r["engine"] == "trtllm"]
    assert engine and all(r["pins"] == ["fla-core", "einops==0.8.1", "transformers==5.17.0",
                                        "opencv-python-headless"] for r in engine), runtimes
    assert all(r["pins"] == [] for r in runtimes if r["engine"] != "trtllm")
