"""Build the ``glmops.glmops`` Ansible collection: ``python -m glmops.collection --out DIR``.

The collection holds the roles that work without glmops' Python package (:data:`ROLES`),
taken from :func:`glmops.resources.data_root` (the checkout, or an installed wheel's copy),
with this directory's ``galaxy.yml``, ``meta/runtime.yml`` and ``README.md``. The
repository keeps its fixed top level, so the collection tree is staged in a temporary
directory and built there with ``ansible-galaxy collection build``:

* a collection-hosted role gets no role-embedded plugins (Ansible loads ``filter_plugins/``,
  ``library/`` ... only for roles outside collections), so each role's plugin directories
  move to the collection's ``plugins/<type>/``, and ``glmops.ansible`` lookups the roles'
  defaults call (:data:`SHARED_PLUGINS`) are shipped beside them;
* filters and lookups are not found by short name inside a collection (the ``collections``
  search list covers modules and actions only), so the staged roles' ``| glmops_X`` and
  ``lookup('glmops_X'``/``query('glmops_X'`` become ``glmops.glmops.glmops_X``; a name the
  collection does not ship is an error;
* ``galaxy.yml``'s ``version`` is stamped with :data:`glmops.__version__` (pyproject's
  version, the one source; a test keeps the checked-in value equal).

Exit status of ``main``: 0 built (the tarball's path printed), 1 ``ansible-galaxy`` failed,
2 bad input (no glmops version, a role or plugin missing).
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from glmops.resources import PACKAGE, data_root

NAMESPACE, NAME = "glmops", "glmops"
#: roles usable without glmops' Python package (prechecks plans through glmops.plan: not here)
ROLES = ("nvidia_driver", "container_toolkit")
#: this directory: galaxy.yml, meta/runtime.yml, README.md
HERE = Path(__file__).resolve().parent
#: role-embedded plugin directory -> the collection's plugins/<type>
PLUGIN_DIRS = {"filter_plugins": "filter", "lookup_plugins": "lookup", "action_plugins": "action",
               "library": "modules", "module_utils": "module_utils", "test_plugins": "test"}
#: glmops' own plugins the roles' defaults use: (type, file under glmops/ansible/)
SHARED_PLUGINS = (("lookup", "lookup_plugins/glmops_catalog.py"),)
_FILTER_USE = re.compile(r"\|\s*(glmops_\w+)")
_LOOKUP_USE = re.compile(r"\b(lookup|query|q)\(\s*(['\"])(glmops_\w+)\2")
_FILTER_DEF = re.compile(r"""['"](glmops_\w+)['"]\s*:""")


def _ignore(_dir: str, names: list[str]) -> set[str]:
    return {n for n in names if n == "__pycache__" or n.endswith((".pyc", ".pyo")) or n in PLUGIN_DIRS}


def _shipped(plugins: Path) -> dict[str, set[str]]:
    """Names the staged plugins define: ``{"filter": {...}, "lookup": {...}}``."""
    filters = set()
    for path in (plugins / "filter").glob("*.py"):
        filters |= set(_FILTER_DEF.findall(path.read_text()))
    return {"filter": filters, "lookup": {p.stem for p in (plugins / "lookup").glob("*.py")}}


def _qualify(text: str, shipped: dict[str, set[str]], where: Path) -> str:
    """``text`` with the glmops filters and lookups it uses by short name as FQCNs."""
    prefix = f"{NAMESPACE}.{NAME}."

    def filt(m: re.Match) -> str:
        if m.group(1) not in shipped["filter"]:
            raise LookupError(f"{where}: filter {m.group(1)} is not shipped in the collection")
        return f"| {prefix}{m.group(1)}"

    def look(m: re.Match) -> str:
        if m.group(3) not in shipped["lookup"]:
            raise LookupError(f"{where}: lookup {m.group(3)} is not shipped in the collection")
        return f"{m.group(1)}({m.group(2)}{prefix}{m.group(3)}{m.group(2)}"

    return _LOOKUP_USE.sub(look, _FILTER_USE.sub(filt, text))


def stage(dest: Path, version: str) -> Path:
    """Write the collection tree into the empty or missing directory ``dest``; returns ``dest``.

    Raises ``FileNotFoundError`` for a missing role or plugin, ``LookupError`` for a role
    using a glmops filter or lookup the collection does not ship."""
    roots = data_root() / "roles"
    dest.mkdir(parents=True, exist_ok=True)
    galaxy = (HERE / "galaxy.yml").read_text()
    (dest / "galaxy.yml").write_text(re.sub(r"(?m)^version: .*$", f"version: {version}", galaxy, count=1))
    shutil.copytree(HERE / "meta", dest / "meta")
    shutil.copy2(HERE / "README.md", dest / "README.md")
    for extra in ("LICENSE", "docs/CHANGELOG.md"):  # a checkout has them; a wheel's copy need not
        if (PACKAGE.parent / extra).is_file():
            shutil.copy2(PACKAGE.parent / extra, dest / Path(extra).name)
    plugins = dest / "plugins"
    for role in ROLES:
        src = roots / role
        if not (src / "tasks" / "main.yml").is_file():
            raise FileNotFoundError(f"role {role} not found under {roots}")
        shutil.copytree(src, dest / "roles" / role, ignore=_ignore)
        for sub, kind in PLUGIN_DIRS.items():
            if (src / sub).is_dir():
                shutil.copytree(src / sub, plugins / kind, ignore=_ignore, dirs_exist_ok=True)
    for kind, rel in SHARED_PLUGINS:
        (plugins / kind).mkdir(parents=True, exist_ok=True)
        shutil.copy2(PACKAGE / "ansible" / rel, plugins / kind / Path(rel).name)
    shipped = _shipped(plugins)
    for path in sorted((dest / "roles").rglob("*")):
        if path.is_file() and path.suffix in (".yml", ".yaml", ".j2"):
            text = path.read_text()
            new = _qualify(text, shipped, path.relative_to(dest))
            if new != text:
                path.write_text(new)
    return dest


def _ansible_galaxy() -> str:
    beside = Path(sys.executable).parent / "ansible-galaxy"
    return str(beside) if beside.exists() else (shutil.which("ansible-galaxy") or "ansible-galaxy")


def build(out_dir: Path, version: str | None = None) -> Path:
    """Stage and build the collection; returns the tarball
    (``<out_dir>/glmops-glmops-<version>.tar.gz``, overwritten when present).

    ``version``: default :data:`glmops.__version__`. Raises ``ValueError`` when there is no
    version (a never-installed checkout), ``RuntimeError`` with ansible-galaxy's output when
    it fails, and what :func:`stage` raises."""
    import glmops

    version = version or glmops.__version__
    if not re.fullmatch(r"\d+\.\d+\.\d+", version):
        raise ValueError(f"collection version {version!r} is not X.Y.Z: install glmops (pip install -e .) first")
    out_dir = Path(out_dir).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="glmops-collection-") as tmp:
        tree = stage(Path(tmp) / f"{NAMESPACE}.{NAME}", version)
        proc = subprocess.run([_ansible_galaxy(), "collection", "build", str(tree), "--output-path", str(out_dir),
                               "--force"], capture_output=True, text=True, cwd=tmp,
                              env={**os.environ, "ANSIBLE_NOCOLOR": "1"})
    if proc.returncode != 0:
        raise RuntimeError(f"ansible-galaxy collection build failed ({proc.returncode}): {proc.stdout}{proc.stderr}")
    return out_dir / f"{NAMESPACE}-{NAME}-{version}.tar.gz"


def main(argv: list[str] | None = None) -> int:
    """``python -m glmops.collection --out DIR``: build, print the tarball's path; exit status
    as the module docstring says."""
    ap = argparse.ArgumentParser(prog="python -m glmops.collection", description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="directory the tarball is written to (outside the checkout)")
    args = ap.parse_args(argv)
    try:
        path = build(Path(args.out))
    except (ValueError, LookupError, FileNotFoundError) as exc:
        print(f"glmops.collection: {exc}", file=sys.stderr)
        return 2
    except RuntimeError as exc:
        print(f"glmops.collection: {exc}", file=sys.stderr)
        return 1
    print(path)
    return 0
