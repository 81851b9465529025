"""Packaging: the wheel works outside the checkout, the collection's roles run without glmops'
Python package, one version everywhere, the controller's constraints pin every dependency.

The installed copies run in a fresh venv (``venv --without-pip``) whose only other import path
is this venv's site-packages, added by a ``.pth`` line: the third-party dependencies come from
there, while the editable install of glmops (its ``.pth`` finder lives in that directory and
a ``.pth`` line does not process the ``.pth`` files of the directory it adds) does not. Every
command runs from a directory outside the checkout. Builds use this venv's setuptools with no
build isolation (offline, seconds).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tomllib
from importlib.metadata import version as dist_version
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
VERSION = PYPROJECT["project"]["version"]
CONSTRAINTS = REPO / ".ci" / "constraints.txt"
#: what a build needs from the checkout
BUILD_INPUTS = ("pyproject.toml", "README.md", "LICENSE", "glmops", "playbooks", "roles", "ansible.cfg")


def _run(argv: list, cwd: Path, env: dict | None = None, timeout: int = 120) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(a) for a in argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{argv}: rc {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


def _clean_env() -> dict:
    """The environment minus anything that would point Python or Ansible back at the checkout."""
    return {k: v for k, v in os.environ.items()
            if not k.startswith(("ANSIBLE_", "PYTHON", "VIRTUAL_ENV", "GLMOPS_"))}


def _fresh_venv(where: Path) -> Path:
    """A venv without glmops whose dependencies are this venv's; returns its python."""
    _run([sys.executable, "-m", "venv", "--without-pip", where], cwd=where.parent)
    py = where / "bin" / "python"
    purelib = _run([py, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], cwd=where.parent).stdout.strip()
    (Path(purelib) / "glmops-deps.pth").write_text(sysconfig.get_path("purelib") + "\n")
    return py


def _build(hook: str, src: Path, out: Path) -> Path:
    """Call setuptools' PEP 517 ``hook`` (build_sdist/build_wheel) in ``src``; returns the file."""
    name = _run([sys.executable, "-c", f"from setuptools import build_meta as b; print(b.{hook}({str(out)!r}))"],
                cwd=src, env=_clean_env()).stdout.strip().splitlines()[-1]
    return out / name


@pytest.mark.packaging
def test_wheel_from_the_sdist_works_installed_outside_the_checkout(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    for name in BUILD_INPUTS:
        copy = shutil.copytree if (REPO / name).is_dir() else shutil.copy2
        copy(REPO / name, src / name, **({"ignore": shutil.ignore_patterns("__pycache__", "*.pyc")}
                                         if (REPO / name).is_dir() else {}))
    dist = tmp_path / "dist"
    sdist = _build("build_sdist", src, dist)
    with tarfile.open(sdist) as tar:
        tar.extractall(tmp_path / "unpacked", filter="data")
    wheel = _build("build_wheel", tmp_path / "unpacked" / f"glmops-{VERSION}", dist)
    assert wheel.name == f"glmops-{VERSION}-py3-none-any.whl"

    py = _fresh_venv(tmp_path / "venv")
    _run([BIN / "pip", "--python", py, "install", "-q", "--no-deps", "--no-index", wheel], cwd=tmp_path, env=_clean_env())
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = _clean_env()
    where = json.loads(_run([py, "-c", "import json, glmops, glmops.resources as r; "
                                       "print(json.dumps([glmops.__file__, str(r.data_root()), glmops.__version__]))"],
                            cwd=elsewhere, env=env).stdout)
    site = tmp_path / "venv"
    assert Path(where[0]).is_relative_to(site) and Path(where[1]).is_relative_to(site), where
    assert Path(where[1]).name == "_data" and where[2] == VERSION, where

    glmops = tmp_path / "venv" / "bin" / "glmops"
    assert VERSION in _run([glmops, "--version"], cwd=elsewhere, env=env).stdout
    inv = REPO / "inventories" / "b200"
    out = _run([glmops, "validate", "-i", inv], cwd=elsewhere, env=env).stdout
    assert "valid" in out, out
    _run([glmops, "plan", "-i", inv, "--out", tmp_path / "plan"], cwd=elsewhere, env=env)
    assert any((tmp_path / "plan").rglob("*.service")), sorted(p.name for p in (tmp_path / "plan").rglob("*"))

    # the installed playbooks, roles, plugins and ansible.cfg load under ansible-playbook with the
    # environment the installed runner gives it (no operator config here: glmops' own)
    env["HOME"] = str(tmp_path)
    data = Path(where[1])
    ansible = json.loads(_run([py, "-c", "import json; from glmops import ansible_options as a, runner as r; "
                                         "print(json.dumps(a.config_env(str(r.REPO), str(r.ANSIBLE_CFG))))"],
                              cwd=elsewhere, env=env).stdout)
    if not os.path.exists("/etc/ansible/ansible.cfg"):
        assert ansible["ANSIBLE_CONFIG"] == str(data / "ansible.cfg")
    assert ansible["ANSIBLE_ROLES_PATH"].split(os.pathsep)[-1] == str(data / "roles")
    assert ansible["ANSIBLE_ACTION_PLUGINS"].split(os.pathsep)[-1] == str(data.parent / "ansible" / "action_plugins")
    proc = _run([py, "-m", "ansible.cli.playbook", "--syntax-check", "-i", inv, data / "playbooks" / "deploy.yml"],
                cwd=elsewhere, env={**env, **ansible})
    assert "playbook: " in proc.stdout, proc.stdout


@pytest.mark.packaging
def test_collection_roles_run_by_fqcn_without_the_glmops_package(tmp_path):
    out = tmp_path / "built"
    proc = _run([sys.executable, "-m", "glmops.collection", "--out", out], cwd=tmp_path, env=_clean_env())
    tarball = Path(proc.stdout.strip().splitlines()[-1])
    assert tarball == out / f"glmops-glmops-{VERSION}.tar.gz" and tarball.is_file()
    with tarfile.open(tarball) as tar:
        manifest = json.load(tar.extractfile("MANIFEST.json"))
        names = tar.getnames()
        texts = {n: tar.extractfile(n).read().decode() for n in names if n.startswith("roles/") and n.endswith((".yml", ".j2"))}
    assert manifest["collection_info"]["version"] == VERSION
    assert "LICENSE" in names and "plugins/filter/glmops_packages.py" in names
    assert not any("/filter_plugins/" in n or "__pycache__" in n for n in names), names
    for name, text in texts.items():  # short names of filters/lookups do not resolve inside a collection
        assert "lookup('glmops_" not in text and "| glmops_" not in text, name

    collections = tmp_path / "collections"
    _run([BIN / "ansible-galaxy", "collection", "install", tarball, "-p", collections], cwd=tmp_path, env=_clean_env())
    py = _fresh_venv(tmp_path / "venv")
    env = {**_clean_env(), "ANSIBLE_COLLECTIONS_PATH": str(collections), "ANSIBLE_LOCAL_TEMP": str(tmp_path / "tmp"),
           "ANSIBLE_CONFIG": str(tmp_path / "none.cfg"), "HOME": str(tmp_path)}
    no_glmops = subprocess.run([py, "-c", "import glmops"], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert no_glmops.returncode != 0 and "No module named 'glmops'" in no_glmops.stderr

    play = tmp_path / "site.yml"
    play.write_text(yaml.safe_dump([{
        "name": "Another project's play", "hosts": "localhost", "connection": "local", "gather_facts": True,
        "vars": {"ansible_python_interpreter": str(py)},
        "tasks": [
            {"name": "Driver role, values glmops' catalog would give", "ansible.builtin.include_role": {
                "name": "glmops.glmops.nvidia_driver"},
             "vars": {"nvidia_driver_planned_branch": "575", "nvidia_driver_version": "575.57.08",
                          "nvidia_driver_enabled": False,
                      "nvidia_driver_hw": {"vendor": "nvidia", "nvswitch": True, "arch_family": "blackwell"}}},
            {"name": "Toolkit role", "ansible.builtin.include_role": {"name": "glmops.glmops.container_toolkit"},
             "vars": {"container_toolkit_enabled": False}},
            {"name": "The driver role's filter, shipped in the collection", "ansible.builtin.debug": {
                "msg": "{{ {'nvidia-driver-575': [{'version': '1:575.57.08-1'}], 'zlib1g': [{'version': '1'}]}"
                       " | glmops.glmops.glmops_upstream_versions('nvidia-driver-[0-9]+') | to_json }}"}},
            {"name": "The catalog lookup says what to set without glmops", "ansible.builtin.debug": {
                "msg": "{{ lookup('glmops.glmops.glmops_catalog', 'driver_min') }}"}, "ignore_errors": True},
        ]}]))
    playbook = [py, "-m", "ansible.cli.playbook", "-i", "localhost,", play]
    _run([*playbook, "--syntax-check"], cwd=tmp_path, env=env)
    proc = _run([*playbook, "--check"], cwd=tmp_path, env=env)
    assert '{\\"nvidia-driver-575\\": \\"575.57.08\\"}' in proc.stdout or '{"nvidia-driver-575": "575.57.08"}' in proc.stdout, \
        proc.stdout
    assert "glmops Python package is not importable" in proc.stdout and "nvidia_driver_planned_branch" in proc.stdout
    assert "failed=0" in proc.stdout and "ignored=1" in proc.stdout, proc.stdout[-2000:]


def test_one_version_pyproject_metadata_cli_and_galaxy():
    from click.testing import CliRunner

    import glmops
    from glmops.cli import main

    galaxy = yaml.safe_load((REPO / "glmops" / "collection" / "galaxy.yml").read_text())
    assert dist_version("glmops") == glmops.__version__ == VERSION == str(galaxy["version"])
    result = CliRunner().invoke(main, ["--version"])
    assert result.exit_code == 0 and VERSION in result.output
    assert "## " + VERSION in (REPO / "docs" / "CHANGELOG.md").read_text()


def _requirements() -> list[Requirement]:
    project = PYPROJECT["project"]
    reqs = [*project["dependencies"], *(r for extra in project["optional-dependencies"].values() for r in extra)]
    return [Requirement(r) for r in reqs]


def test_constraints_pin_every_declared_dependency_within_its_range():
    pins = {}
    for line in CONSTRAINTS.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            req = Requirement(line)
            spec = list(req.specifier)
            assert len(spec) == 1 and spec[0].operator == "==", f"{line}: pin an exact version"
            pins[canonicalize_name(req.name)] = spec[0].version
    for req in _requirements():
        name = canonicalize_name(req.name)
        assert name in pins, f"{req}: not pinned in {CONSTRAINTS.relative_to(REPO)}"
        assert req.specifier.contains(pins[name], prereleases=True), f"{req}: pin {pins[name]} outside the range"


def test_declared_dependencies_are_used_and_listed_once():
    names = [r.name.lower() for r in _requirements()]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)
    assert "paramiko" not in names  # logs -f uses the system ssh with the inventory's settings


def test_data_root_is_the_checkout_here_and_the_installed_copy_rewrites_plugin_paths(tmp_path):
    from glmops import resources
    from glmops._build import copy_data

    assert resources.data_root() == REPO
    files = copy_data(REPO, tmp_path / "_data")
    assert str(tmp_path / "_data" / "playbooks" / "deploy.yml") in files
    assert not any("__pycache__" in f for f in files)
    cfg = (tmp_path / "_data" / "ansible.cfg").read_text()
    assert "./glmops/ansible/" not in cfg and "action_plugins = ../ansible/action_plugins" in cfg
    # relative to glmops/_data/, "../ansible/X" is the package's glmops/ansible/X, as in the checkout
    assert (resources.PACKAGE / "_data" / ".." / "ansible" / "action_plugins").resolve() == \
        REPO / "glmops" / "ansible" / "action_plugins"
