"""``lookup('glmops_catalog', 'driver_min')`` / ``lookup('glmops_catalog', 'hardware', KEY)``.

Reads facts from the glmops catalog (glmops/catalog/*.yaml) on the controller, so roles keep
no copy of them:

* ``driver_min`` -> int: the lowest NVIDIA driver branch any engine needs
  (``engines.*.driver_min``; seed 000: "CUDA Driver 575 or later");
* ``driver_release``, BRANCH -> str: the point release glmops installs for a driver branch
  (``engines.yaml:cuda.driver_releases``); an unknown branch fails naming the known ones;
* ``hardware``, KEY -> dict: ``hardware.KEY`` (``{}`` for an empty KEY or ``cpu``);
  an unknown KEY fails naming the accepted keys.

Needs the glmops Python package on the controller; without it (the ``glmops.glmops``
collection used on its own) the lookup fails saying which role variables to set instead.
"""
from __future__ import annotations

from ansible.errors import AnsibleLookupError
from ansible.plugins.lookup import LookupBase


class LookupModule(LookupBase):
    """See the module docstring."""

    def run(self, terms, variables=None, **kwargs):
        try:
            from glmops import catalog as cat
            from glmops.prechecks import driver_min
        except ImportError as exc:
            raise AnsibleLookupError(
                f"glmops_catalog: the glmops Python package is not importable here ({exc}): install it on the "
                "controller (pip install glmops), or set the values this lookup supplies: nvidia_driver_planned_branch, "
                "nvidia_driver_version and nvidia_driver_hw (or nvidia_driver_enabled/_fabricmanager/_nvlsm), container_toolkit_enabled") from None

        if not terms:
            raise AnsibleLookupError("glmops_catalog: name what to read: driver_min | driver_release BRANCH | hardware KEY")
        what, args = terms[0], list(terms[1:])
        catalog = cat.load()
        if what == "driver_min":
            return [driver_min(catalog)]
        if what == "driver_release":
            releases = (catalog.data["engines"].get("cuda") or {}).get("driver_releases") or {}
            branch = str(args[0]).split(".")[0] if args else ""
            if branch not in releases:
                raise AnsibleLookupError(f"glmops_catalog: no driver release for branch {branch!r}; known: "
                                         f"{', '.join(sorted(releases))} (set nvidia_driver_version)")
            return [str(releases[branch])]
        if what == "hardware":
            key = args[0] if args else ""
            if not key or key == "cpu":
                return [{}]
            try:
                return [dict(catalog.hw(key))]
            except LookupError as exc:
                raise AnsibleLookupError(f"glmops_catalog: glmops_hardware: {exc}") from exc
        raise AnsibleLookupError(f"glmops_catalog: {what!r} is not one of: driver_min, driver_release, hardware")
