"""Filter ``glmops_upstream_versions``: ``ansible_facts.packages`` -> ``{name: upstream version}``.

``packages | glmops_upstream_versions(REGEX)`` keeps the packages whose name fully matches
REGEX and maps each to its upstream version (epoch and Debian revision dropped:
``575.57.08-1`` -> ``575.57.08``), the form NVIDIA's driver versions are compared in.
"""
from __future__ import annotations

import re


def glmops_upstream_versions(packages: dict, pattern: str) -> dict:
    """See the module docstring. ``packages``: package_facts' ``{name: [{version: ...}]}``."""
    rx = re.compile(pattern)
    out = {}
    for name, entries in (packages or {}).items():
        if rx.fullmatch(name) and entries:
            version = str(entries[0].get("version", "")).split(":", 1)[-1]
            out[name] = version.rsplit("-", 1)[0] if "-" in version else version
    return out


class FilterModule:
    """Ansible filter plugin entry point."""

    def filters(self):
        return {"glmops_upstream_versions": glmops_upstream_versions}
