"""Build hook (setuptools commands named in pyproject's ``[tool.setuptools.cmdclass]``).

The repository keeps ``playbooks/``, ``roles/`` and ``ansible.cfg`` at its top level; an
installed glmops needs them too (:func:`glmops.resources.data_root`). So:

* ``build_py`` copies them into the wheel under ``glmops/_data/`` (not in editable
  installs: those run from the checkout, which already has them). The copy of
  ``ansible.cfg`` gets its plugin paths rewritten from ``./glmops/ansible/...`` (beside the
  checkout's top level) to ``../ansible/...`` (beside ``glmops/_data/``), so either file
  names the same plugins relative to itself, as Ansible resolves them;
* ``sdist`` adds them to the source tree, so a wheel built from the sdist
  (``python -m build``) carries them as well (``LICENSE`` comes in through pyproject's
  ``license-files``).

``__pycache__`` and ``*.pyc`` are never copied. Imports setuptools: build time only.
"""
from __future__ import annotations

import shutil
from pathlib import Path

from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

#: the source tree's top level (the checkout, or an unpacked sdist)
TOP = Path(__file__).resolve().parent.parent
#: top-level entries the wheel carries under glmops/_data (directories and files)
DATA = ("playbooks", "roles", "ansible.cfg")
_IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", "*.pyo")


def installed_cfg(text: str) -> str:
    """glmops' ``ansible.cfg`` as it reads from ``glmops/_data/ansible.cfg``: the plugin
    paths ``./glmops/ansible/X`` become ``../ansible/X``; nothing else changes."""
    return text.replace("./glmops/ansible/", "../ansible/")


def copy_data(top: Path, dest: Path) -> list[str]:
    """Copy ``DATA`` from ``top`` into ``dest`` (emptied first); returns the files written."""
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    for name in DATA:
        src = top / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=_IGNORE)
        else:
            text = src.read_text()
            (dest / name).write_text(installed_cfg(text) if name == "ansible.cfg" else text)
    return [str(p) for p in sorted(dest.rglob("*")) if p.is_file()]


class BuildPy(build_py):
    """``build_py`` that also copies the top-level Ansible content into ``glmops/_data``."""

    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return
        self._data_files = copy_data(TOP, Path(self.build_lib) / "glmops" / "_data")

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:  # noqa: FBT001, FBT002 - setuptools' signature
        return [*super().get_outputs(include_bytecode), *getattr(self, "_data_files", [])]


class SDist(sdist):
    """``sdist`` that also ships the top-level Ansible content."""

    def make_release_tree(self, base_dir: str, files: list[str]) -> None:
        super().make_release_tree(base_dir, files)
        for name in DATA:
            src, dst = TOP / name, Path(base_dir) / name
            if src.is_dir():
                shutil.copytree(src, dst, ignore=_IGNORE, dirs_exist_ok=True)
            elif src.is_file() and not dst.exists():
                shutil.copy2(src, dst)
