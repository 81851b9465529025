"""Where glmops' Ansible content lives: :func:`data_root`, the one place that knows.

The playbooks, roles and glmops' own ``ansible.cfg`` sit at the repository's top level
(``playbooks/``, ``roles/``, ``ansible.cfg``). A built wheel carries copies of them under
``glmops/_data/`` (``glmops._build`` copies them at build time), so an installed glmops
works outside a git checkout. The Ansible plugins (``glmops/ansible/*_plugins``,
``library``, ``module_utils``) and the catalog are package data in both layouts:
:data:`PACKAGE` locates them.

Standard library only (``glmops.bootstrap`` and the build hook may import the package
before anything is installed).
"""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

#: the glmops package directory (``glmops/``): plugins under ``ansible/``, the catalog
PACKAGE = Path(__file__).resolve().parent
#: what a data root holds (directories, then the one file)
CONTENTS = ("playbooks", "roles", "ansible.cfg")
#: where a wheel puts the copies, relative to the package directory
INSTALLED = "_data"


def _holds_data(root: Path) -> bool:
    return (root / "playbooks").is_dir() and (root / "roles").is_dir() and (root / "ansible.cfg").is_file()


@lru_cache(maxsize=None)
def data_root() -> Path:
    """The directory holding ``playbooks/``, ``roles/`` and ``ansible.cfg``: an absolute path.

    Source, first match wins: the checkout's top level when this package runs from one
    (``glmops/`` beside ``pyproject.toml`` and the three entries: editable installs, the lab,
    the tests), else the installed copy ``<site-packages>/glmops/_data``. Cached: both
    layouts are fixed for the life of the process.

    Raises ``FileNotFoundError`` naming both places when neither holds the three entries
    (a wheel built without the build hook, or a partial copy).
    """
    top = PACKAGE.parent
    if (top / "pyproject.toml").is_file() and _holds_data(top):
        return top
    installed = PACKAGE / INSTALLED
    if _holds_data(installed):
        return installed
    raise FileNotFoundError(
        f"glmops: no playbooks/, roles/ and ansible.cfg in the checkout ({top}) nor in the installed "
        f"copy ({installed}); reinstall glmops from a wheel built with its build hook (pip wheel .)")
