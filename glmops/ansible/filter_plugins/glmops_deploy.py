"""Filters the deploy's roles and plays share with the deploy read (logic in glmops.deploystate).

``glmops_service_dirs(config_dir, state_dir, user)``  -> ``[{path, mode, owner, group}]``
``glmops_state_argv(bundle, host_units, unit_glob, target, user, config_dir, state_dir)``
    -> argv of ``glmops_hostctl.py state`` (a list; quote each item)
``glmops_destroy_picked(plan, units, host)`` -> ``{units, paths}`` ``glmops destroy --service`` removes on the host
``glmops_ifname_suffix(names, ifname)`` -> the env file lines ``NAME=<ifname>`` the host adds (glmops.netif, F17)
``glmops_provision_roles(hardware, runtime, driver_enabled, toolkit_enabled)``
    -> ``{driver: bool, toolkit: bool}``
``glmops_plan_hosts(plan)`` -> ``[{name, address, units}]`` (the generation manifest's ``hosts``)
``glmops_prune_candidates(plan, recorded, inventory_hosts, group_hosts)`` -> ``{read, gone}``
``glmops_departed(candidates, reads, prune, deployment)`` -> ``{prune, unreachable, gone, refuse, lines}``
    (logic in glmops.generations: the hosts that left the Plan)
``glmops_upgrade_plan(lists, plan, inventory, drain_timeout_s)`` -> glmops.generations.upgrade_plan + ``unread``, ``go``
``glmops_rollback_plan(lists, to, drain_timeout_s)`` -> glmops.generations.rollback_plan + ``unread``, ``go``
    (``lists``: host -> the stdout of its ``glmops_generation.py list``, "" when it could not be read;
    ``unread``: those hosts; ``go``: the verb has something to do and nothing stops it)
"""
from __future__ import annotations

import json


def _service_dirs(config_dir, state_dir, user):
    from glmops.deploystate import service_dirs

    return service_dirs(config_dir, state_dir, user)


def _state_argv(bundle, host_units, unit_glob, target, user, config_dir, state_dir):
    from glmops.deploystate import state_argv

    return state_argv(bundle, list(host_units), unit_glob, dict(target), user, config_dir, state_dir)


def _destroy_picked(plan, units, host):
    from glmops.deploystate import destroy_picked

    return destroy_picked(dict(plan), list(units or []), str(host))


def _ifname_suffix(names, ifname):
    from glmops.netif import suffix

    return suffix(list(names or []), str(ifname)) if ifname else ""


def _provision_roles(hardware, runtime=None, driver_enabled=None, toolkit_enabled=None):
    from ansible.errors import AnsibleFilterError

    from glmops.deploystate import provision_roles

    try:
        return provision_roles(hardware, runtime, driver_enabled, toolkit_enabled)
    except LookupError as exc:
        raise AnsibleFilterError(f"glmops_hardware: {exc}") from exc


def _plan_hosts(plan):
    from glmops.generations import plan_hosts

    return plan_hosts(dict(plan))


def _prune_candidates(plan, recorded, inventory_hosts, group_hosts):
    from glmops.generations import prune_candidates

    return prune_candidates(dict(plan), dict(recorded), list(inventory_hosts), list(group_hosts))


def _departed(candidates, reads, prune, deployment):
    from glmops.generations import departed

    return departed(dict(candidates), dict(reads), bool(prune), str(deployment))


def _history(lists):
    """(host -> its generations as ``glmops_generation.py list`` reports them, [hosts not read])."""
    history, unread = {}, []
    for host, stdout in dict(lists).items():
        try:
            got = json.loads(stdout) if stdout else None
        except (TypeError, ValueError):
            got = None
        if not isinstance(got, dict):
            unread.append(host)
            continue
        got.pop("glmops_event", None)
        history[host] = got
    return history, unread


def _upgrade_plan(lists, plan, inventory="INVENTORY", drain_timeout_s=120):
    from glmops.generations import upgrade_plan

    history, unread = _history(lists)
    if unread:
        return {"unread": unread, "go": False, "refuse": "", "act": False, "steps": []}
    out = upgrade_plan(history, dict(plan), str(inventory), int(drain_timeout_s))
    return {**out, "unread": [], "go": bool(out["act"] and not out["refuse"])}


def _rollback_plan(lists, to=None, drain_timeout_s=120):
    from glmops.generations import rollback_plan

    history, unread = _history(lists)
    if unread:
        return {"unread": unread, "go": False, "refuse": [], "steps": []}
    out = rollback_plan(history, int(to) if to not in (None, "") else None, int(drain_timeout_s))
    return {**out, "unread": [], "go": not out["refuse"]}


class FilterModule:
    """glmops deploy filters (see the module docstring)."""

    def filters(self):
        return {"glmops_service_dirs": _service_dirs, "glmops_state_argv": _state_argv,
                "glmops_destroy_picked": _destroy_picked,
                "glmops_ifname_suffix": _ifname_suffix,
                "glmops_provision_roles": _provision_roles, "glmops_plan_hosts": _plan_hosts,
                "glmops_prune_candidates": _prune_candidates, "glmops_departed": _departed,
                "glmops_upgrade_plan": _upgrade_plan, "glmops_rollback_plan": _rollback_plan}
