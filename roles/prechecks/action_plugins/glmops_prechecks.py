"""``glmops_prechecks``: every host precheck at once, compared on the controller.

Runs the role's ``files/glmops_precheck_facts.py`` on the host (read-only, one round trip
through :mod:`glmops.hostread`), then compares the facts with what the host needs using
:mod:`glmops.prechecks` (no I/O there, unit-tested).

What a host needs, lowest precedence first:
  1. the catalog for the host's ``glmops_hardware`` and ``glmops_gpus``
     (GPU count and model, driver minimum, NVSwitch, nvlsm on Blackwell);
  2. the deployment, when the inventory has one (``glmops_model`` is set) and
     ``deployment`` is not false: checkpoint size and model dir, the ports the Plan binds on
     the host, its RDMA devices (planned for the run's ``glmops_topology``, as deploy does);
  3. ``needs``: explicit values (the role's ``prechecks_*`` variables; ``null`` = keep).

Options: ``needs`` (dict), ``deployment`` (bool, default true), ``inventory`` (path, default
the play's inventory), ``deployment_needs`` (dict: this host's needs from the deployment,
as the plan play's ``glmops_plan`` computed them; when given, 2. uses it instead of planning
the inventory again), ``handoff`` (path: the CLI's plan handoff, ``glmops_plan_handoff``; its
needs are used when it was planned from this inventory, ``glmops.planning.take_handoff``).
Otherwise the host's needs come from ``glmops.planning.load``, the one door into a Plan. Returns ``report`` = ``{host, ok, failed: [msg], warnings, checks}``
and never fails itself unless the facts cannot be read: the role decides what to refuse,
after every host has reported.
"""
from __future__ import annotations

import json
import os

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from glmops import hostread, planning, prechecks
from glmops.inventory import play_inventory

display = Display()
_PLAN_CACHE: dict = {}


def _deployment_needs(inventory: str, host: str, topology: str | None = None, handoff: str | None = None,
                      extra_vars: dict | None = None) -> dict:
    """needs_for_deployment of the inventory (``topology``: the run's ``glmops_topology``
    override, as deploy plans it): the CLI's handoff when it matches, else planned
    (``glmops.planning.load``), cached per inventory path, mtime and topology."""
    key = (inventory, os.path.getmtime(inventory), topology)
    if key not in _PLAN_CACHE:
        handed = planning.take_handoff(handoff, inventory, topology, None, extra_vars, say=display.warning) \
            if handoff and extra_vars is not None else None
        _PLAN_CACHE[key] = (handed["precheck_needs"] if handed and isinstance(handed.get("precheck_needs"), dict)
                            else planning.load(inventory, topology).precheck_needs())
    return _PLAN_CACHE[key].get(host, {})


class ActionModule(ActionBase):
    """See the module docstring."""

    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("needs", "deployment", "inventory", "deployment_needs", "handoff"))

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super().run(tmp, task_vars)
        result["changed"] = False
        result["glmops_event"] = "precheck_report"  # glmops.runner.event_of: the CLI collects the reports
        host = task_vars.get("inventory_hostname", "?")
        use_dep = self._task.args.get("deployment", True) and task_vars.get("glmops_model")
        planned = self._task.args.get("deployment_needs")
        if use_dep and not isinstance(planned, dict):
            inventory = self._task.args.get("inventory") or play_inventory(task_vars)
            planned = None
            if inventory:
                try:
                    handoff = self._task.args.get("handoff") or None
                    planned = _deployment_needs(inventory, host, task_vars.get("glmops_topology") or None, handoff,
                                                planning.play_extra_vars(self._loader) if handoff else None)
                except Exception as exc:  # the deployment's own problems are validate's job
                    raise AnsibleActionFail(
                        f"glmops_prechecks: cannot plan the deployment in {inventory} "
                        f"(run glmops validate): {exc}") from exc
        try:
            needs = prechecks.host_needs(task_vars.get("glmops_hardware"), task_vars.get("glmops_gpus"),
                                         planned if use_dep else None, self._task.args.get("needs"))
        except LookupError as exc:
            raise AnsibleActionFail(f"glmops_prechecks: {host}: glmops_hardware: {exc}") from exc
        script = hostread.script("prechecks", "glmops_precheck_facts.py")
        try:
            read = hostread.run(self, task_vars, [
                ("facts", script, [json.dumps(prechecks.facts_options(needs))])])["facts"]
        except RuntimeError as exc:
            read = {"rc": 1, "json": {"msg": str(exc)}}
        facts = read.get("json") or {}
        if read["rc"] != 0 or facts.get("failed"):
            result.update(failed=True, msg=f"glmops_prechecks: {host}: reading facts failed: {facts.get('msg')}")
            return result
        report = prechecks.host_report(host, facts.get("facts") or {}, needs)
        result["report"] = report
        result["msg"] = prechecks.report_msg(report)
        return result
