"""Tiny wheels for tests: a real wheel file (METADATA with Requires-Dist, WHEEL, RECORD) holding
one module that records its version, so pip resolves and installs it like any other."""
from __future__ import annotations

import base64
import hashlib
import json
import re
import zipfile
from pathlib import Path


def _hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def make_wheel(directory: Path, name: str, version: str, requires: list[str] = (), module: str | None = None) -> Path:
    """Write ``<name>-<version>-py3-none-any.whl`` into ``directory``; ``module`` (default the
    name with ``-`` as ``_``) holds ``__version__ = version``. Returns the wheel path."""
    dist = re.sub(r"[-_.]+", "_", name)
    module = module or dist
    info = f"{dist}-{version}.dist-info"
    files = {
        f"{module}/__init__.py": f"__version__ = {version!r}\n".encode(),
        f"{info}/METADATA": ("Metadata-Version: 2.1\n" f"Name: {name}\n" f"Version: {version}\n"
                             + "".join(f"Requires-Dist: {r}\n" for r in requires)).encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: glmops-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(f"{path},{_hash(data)},{len(data)}\n" for path, data in files.items()) + f"{info}/RECORD,,\n"
    directory.mkdir(parents=True, exist_ok=True)
    out = directory / f"{dist}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(out, "w") as zf:
        for path, data in files.items():
            zf.writestr(path, data)
        zf.writestr(f"{info}/RECORD", record)
    return out


def make_wheelhouse(directory: Path, wheels: list[tuple], lock: list[str], key: str = "test") -> Path:
    """A wheelhouse as glmops.lab.wheelhouse writes it: the wheels, requirements.lock and
    wheelhouse.json (key, lock, uninstall, system_packages). ``wheels``: make_wheel arguments."""
    for spec in wheels:
        make_wheel(directory, *spec)
    (directory / "requirements.lock").write_text("\n".join(lock) + "\n")
    (directory / "wheelhouse.json").write_text(json.dumps(
        {"key": key, "lock": lock, "uninstall": [], "system_packages": [], "set": directory.name}))
    return directory
