"""Filters the deploy's roles and plays share with the deploy read (logic in glmops.deploystate).

``glmops_service_dirs(config_dir, state_dir, user)``  -> ``[{path, mode, owner, group}]``
``glmops_state_argv(bundle, host_units, unit_glob, target, user, config_dir, state_dir)``
    -> argv of ``glmops_hostctl.py state`` (a list; quote each item)
``glmops_provision_roles(hardware, runtime, driver_enabled, toolkit_enabled)``
    -> ``{driver: bool, toolkit: bool}``
"""
from __future__ import annotations


def _service_dirs(config_dir, state_dir, user):
    from glmops.deploystate import service_dirs

    return service_dirs(config_dir, state_dir, user)


def _state_argv(bundle, host_units, unit_glob, target, user, config_dir, state_dir):
    from glmops.deploystate import state_argv

    return state_argv(bundle, list(host_units), unit_glob, dict(target), user, config_dir, state_dir)


def _provision_roles(hardware, runtime=None, driver_enabled=None, toolkit_enabled=None):
    from ansible.errors import AnsibleFilterError

    from glmops.deploystate import provision_roles

    try:
        return provision_roles(hardware, runtime, driver_enabled, toolkit_enabled)
    except LookupError as exc:
        raise AnsibleFilterError(f"glmops_hardware: {exc}") from exc


class FilterModule:
    """glmops deploy filters (see the module docstring)."""

    def filters(self):
        return {"glmops_service_dirs": _service_dirs, "glmops_state_argv": _state_argv,
                "glmops_provision_roles": _provision_roles}
