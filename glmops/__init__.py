"""glmops: deploy and run the GLM-5.3 family on bare-metal GPU nodes.

``__version__``: the installed distribution's version (``importlib.metadata``), whose one
source is ``[project] version`` in pyproject.toml; ``"0+unknown"`` when glmops runs from a
checkout that was never installed (``python3 -m glmops.bootstrap`` before its venv exists).
"""
from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("glmops")
except PackageNotFoundError:  # a bare checkout
    __version__ = "0+unknown"
