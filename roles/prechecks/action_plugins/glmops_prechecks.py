"""``glmops_prechecks``: every host precheck at once, compared on the controller.

Runs the ``glmops_precheck_facts`` module on the host (read-only), then compares the facts
with what the host needs using :mod:`glmops.prechecks` (no I/O there, unit-tested).

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
the inventory again). Returns ``report`` = ``{host, ok, failed: [msg], warnings, checks}``
and never fails itself unless the facts cannot be read: the role decides what to refuse,
after every host has reported.
"""
from __future__ import annotations

import os

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

_PLAN_CACHE: dict = {}


def _inventory_source(task_vars: dict) -> str | None:
    sources = task_vars.get("ansible_inventory_sources") or []
    if isinstance(sources, str):
        sources = [sources]
    return next((s for s in sources if s and os.path.exists(s)), None)


def _deployment_needs(inventory: str, host: str, topology: str | None = None) -> dict:
    """needs_for_deployment of the inventory (``topology``: the run's ``glmops_topology``
    override, as deploy plans it), cached per inventory path, mtime and topology."""
    from glmops import inventory as inv
    from glmops import plan as planner
    from glmops.prechecks import needs_for_deployment

    key = (inventory, os.path.getmtime(inventory), topology)
    if key not in _PLAN_CACHE:
        dep = inv.load_deployment(inventory, topology=topology)
        _PLAN_CACHE[key] = needs_for_deployment(dep, planner.build(dep))
    return _PLAN_CACHE[key].get(host, {})


class ActionModule(ActionBase):
    """See the module docstring."""

    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("needs", "deployment", "inventory", "deployment_needs"))

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super().run(tmp, task_vars)
        result["changed"] = False
        from glmops import prechecks

        host = task_vars.get("inventory_hostname", "?")
        try:
            needs = prechecks.needs_from_catalog(task_vars.get("glmops_hardware"), task_vars.get("glmops_gpus"))
        except LookupError as exc:
            raise AnsibleActionFail(f"glmops_prechecks: {host}: glmops_hardware: {exc}") from exc
        use_dep = self._task.args.get("deployment", True)
        planned = self._task.args.get("deployment_needs")
        if use_dep and task_vars.get("glmops_model") and isinstance(planned, dict):
            needs.update(planned)
        elif use_dep and task_vars.get("glmops_model"):
            inventory = self._task.args.get("inventory") or _inventory_source(task_vars)
            if inventory:
                try:
                    needs.update(_deployment_needs(inventory, host, task_vars.get("glmops_topology") or None))
                except Exception as exc:  # the deployment's own problems are validate's job
                    raise AnsibleActionFail(
                        f"glmops_prechecks: cannot plan the deployment in {inventory} "
                        f"(run glmops validate): {exc}") from exc
        for key, value in (self._task.args.get("needs") or {}).items():
            if value is not None:
                needs[key] = value

        vendor = needs.get("gpu_vendor", "none")
        module_args = {
            "gpu_vendor": vendor if vendor in ("nvidia", "amd") else "none",
            "fabric": bool(needs.get("nvswitch")),
            "packages": ["nvidia-driver-*", "nvidia-fabricmanager*", "nvlsm"] if vendor == "nvidia" else [],
            "services": ["nvidia-fabricmanager"] if needs.get("nvswitch") else [],
            "disk_path": needs.get("disk_path"),
            "checkpoint_dir": needs.get("checkpoint_dir"),
            "memlock_properties": needs.get("memlock_properties", ["LimitMEMLOCK=infinity"])
            if needs.get("memlock") else [],
            "listening": bool(needs.get("ports")),
        }
        facts = self._execute_module(module_name="glmops_precheck_facts", module_args=module_args,
                                     task_vars=task_vars)
        if facts.get("failed"):
            result.update(failed=True, msg=f"glmops_prechecks: {host}: reading facts failed: {facts.get('msg')}")
            return result
        results = prechecks.evaluate(host, facts.get("facts") or {}, needs)
        report = prechecks.report(host, results)
        report["needs"] = {k: v for k, v in needs.items() if k != "ports"} | {
            "ports": sorted(int(p) for p in (needs.get("ports") or {}))}
        result["report"] = report
        result["msg"] = ("all prechecks passed" if report["ok"]
                         else f"{len(report['failed'])} precheck(s) failed:\n" + "\n".join(report["failed"]))
        return result
