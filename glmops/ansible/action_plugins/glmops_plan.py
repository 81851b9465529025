"""``glmops_plan``: validate the inventory and build the Plan, on the controller.

The one plugin through which every glmops playbook gets its Plan, so plain
``ansible-playbook -i INV playbooks/deploy.yml`` does exactly what ``glmops deploy``
does. Use it in the first play (``hosts: localhost``, ``gather_facts: false``): it
reads the inventory the play runs with and plans through ``glmops.planning.load`` (the one
door: rules, ``glmops.plan.build``, the plan's checks), and renders every file with
``glmops.render``. No host is contacted. When the CLI already planned this run it hands the
Plan over (``handoff``): the plugin then only checks that it is this run's (an HMAC with the
run's key, ``GLMOPS_PLAN_HANDOFF_KEY_FILE``), well-formed and planned from the same inventory,
catalog, topology, overrides and ``-e`` (``glmops.planning.take_handoff``) and plans again,
printing one line why, when it is not.

Options:
  inventory: path of the inventory (default: the play's first inventory source)
  topology:  ``agg`` | ``disagg`` override (default: the inventory's ``glmops_topology``)
  overrides: dict of variable -> value that win over the inventory (``glmops upgrade --set``)
  summary:   path of a JSON file to write the Plan's secret-free summary into (the CLI's
             run dir: ``glmops.runner`` reads it for its summary table, so the CLI does not
             plan a second time): ``{deployment, model, served_model_name, engine, topology,
             endpoint_url, services: [service view without paths], smoke_target}`` (smoke_target:
             ``glmops.smoke.SmokeTarget`` as a dict: ``glmops deploy`` smokes it without planning
             again); the scrape targets go beside it
             as ``file_sd/glmops-<dep>.json`` (glmops.monitoring.targets)
  handoff:   path of the CLI's plan handoff (``glmops.runner`` passes ``glmops_plan_handoff``,
             a 0600 file outside the run's artifacts; see ``glmops.planning``)
  deployed:  ``{hosts: "h1,h2", default_topology, generation_dir}`` (``glmops_deployed_read``; a
             day-2 verb without ``--topology``): the topology is the one the hosts record as
             deployed (each host's ``glmops_recorded_generations``, set by the plan play's read
             play; :func:`glmops.generations.deployed_topology`), ``default_topology`` when they
             disagree or record none; the line saying so goes into the summary (``topology_line``)
  run_choices: ``{topology: {glmops_units, glmops_log_units, glmops_restart_steps}}``: the
             selection the CLI made for each topology; the chosen one is returned as
             ``run_vars`` (a topology the CLI made none for fails, naming it)
  precheck_needs: true (default) returns ``precheck_needs`` = ``{host: needs}`` beside ``plan``
             (:func:`glmops.prechecks.needs_for_deployment` of this Plan), so the prechecks
             role does not plan again per host

Returns (register it; plain data, no facts, so nothing lands in a fact cache):
  failed + msg listing every problem (``[CODE] path: message (hint: ...)``) on bad input;
  otherwise ``plan`` (see :func:`glmops.planning.plan_view`) with per-host services,
  the files each one needs, the deployment target and the endpoint URL. The success
  result is marked no-log: env files may hold secrets (API keys), so it is never
  displayed nor written to run artifacts.
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from glmops import planning
from glmops.generations import deployed_topology
from glmops.inventory import play_inventory
from glmops.model import ValidationError

display = Display()


class ActionModule(ActionBase):
    """Validate + plan on the controller; see the module docstring."""

    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("inventory", "topology", "overrides", "summary", "precheck_needs", "handoff",
                             "deployed", "run_choices"))

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super().run(tmp, task_vars)
        result["changed"] = False
        result["glmops_event"] = "plan"  # glmops.runner.event_of: a refusal's problems

        inventory = self._task.args.get("inventory") or play_inventory(task_vars, or_inventory_dir=True)
        if not inventory:
            raise AnsibleActionFail(
                "glmops_plan: no inventory: pass 'inventory:' or run with -i INVENTORY"
            )
        topology = self._task.args.get("topology") or None
        overrides = self._task.args.get("overrides") or None
        want_needs = bool(self._task.args.get("precheck_needs", True))
        topology_line = ""
        if self._task.args.get("deployed") and not topology:
            topology, topology_line = _deployed_topology(self._task.args["deployed"], task_vars.get("hostvars") or {})
            if topology_line:
                display.display(f"glmops: {topology_line}", stderr=True)
        handed = None
        if self._task.args.get("handoff"):
            extra = planning.play_extra_vars(self._loader)  # this run's -e, as the CLI's digest saw them
            if extra is None:
                display.warning("glmops: not using the plan handoff: this run's -e cannot be parsed; planning here")
            else:  # None unless authenticated, well-formed and planned from these inputs (one line why)
                handed = planning.take_handoff(self._task.args["handoff"], inventory, topology, overrides, extra,
                                               say=display.warning)
        warnings: list[str] = []
        if handed is not None:  # the CLI planned this run from the same inputs: no second Plan
            view, needs, smoke_target = handed["plan"], handed["precheck_needs"], handed["smoke_target"]
            warnings = list(handed.get("warnings") or [])
        else:
            try:
                planned = planning.load(inventory, topology, overrides)
            except ValidationError as exc:
                lines = [str(p) for p in exc.problems]
                result.update(
                    failed=True,
                    msg=f"glmops_plan: {len(lines)} problem(s) in {inventory}"
                    + (f" for topology {topology} ({topology_line})" if topology_line else "")
                    + ", no host contacted:\n" + "\n".join(lines),
                    problems=[p.__dict__ for p in exc.problems],
                )
                return result
            for warning in planned.warnings:  # deviations from a seed's recipe the engine accepts
                display.warning(f"glmops: {warning}")
            warnings = [str(w) for w in planned.warnings]
            view, smoke_target = planned.view(), asdict(planned.smoke_target())
            needs = planned.precheck_needs() if want_needs else None
        choices = self._task.args.get("run_choices")
        if choices is not None:  # after planning: a topology the inventory cannot plan failed above
            if not isinstance(choices, dict) or view["topology"] not in choices:
                result.update(failed=True, msg=(
                    f"glmops_plan: this run acts on topology {view['topology']!r} "
                    f"({topology_line or 'what the hosts record as deployed'}), but the services it was asked "
                    f"for are no services of it (they are of: {', '.join(sorted(choices or {})) or 'none'})"))
                return result
            result["run_vars"] = choices[view["topology"]]
        # beside the plan, not in it: the plan (and its hash in the generation records) stays as it was
        result["precheck_needs"] = needs if want_needs else None
        result["plan"] = view
        if self._task.args.get("summary"):
            write_summary(self._task.args["summary"], view, smoke_target, topology_line, warnings)
        # env files may carry API keys: never display or log this result
        result["_ansible_no_log"] = True
        return result


SUMMARY_KEYS = ("deployment", "model", "served_model_name", "engine", "topology", "endpoint_url")


def _deployed_topology(deployed: dict, hostvars) -> tuple[str, str]:
    """(topology, line) the hosts named in ``deployed`` record as deployed, from each one's
    ``glmops_recorded_generations`` (``glmops_generation.py list``'s JSON); a host without it
    could not be read (unreachable)."""
    hosts = [h for h in str(deployed.get("hosts") or "").split(",") if h]
    records, unread = {}, []
    for host in hosts:
        got = hostvars[host].get("glmops_recorded_generations") if host in hostvars else None
        if isinstance(got, dict):
            records[host] = {k: v for k, v in got.items() if k != "glmops_event"}
        else:
            unread.append(host)
            records[host] = {"generations": [], "current": None}
    return deployed_topology(records, str(deployed.get("default_topology") or "agg"), unread)


def write_summary(path: str, view: dict, smoke_target: dict | None = None, topology_line: str = "",
                  warnings: list[str] | None = None) -> None:
    """Write the secret-free part of a plan view (``SUMMARY_KEYS`` and the service views
    without their file paths), the smoke target, ``topology_line`` (why a day-2 run acts on
    this topology; "" when nothing to say) and the rules' ``warnings`` (one line each, as
    ``glmops validate`` prints them; the run's summary repeats them) as JSON to ``path``; the
    parent directory must exist."""
    out = {k: view.get(k) for k in SUMMARY_KEYS}
    out["topology_line"] = topology_line
    out["warnings"] = list(warnings or [])
    out["services"] = [{k: v for k, v in svc.items() if k != "paths"} for svc in view.get("services", [])]
    out["smoke_target"] = smoke_target
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(out, fh)
    # the deployment's Prometheus scrape targets beside it (glmops.monitoring): file_sd/glmops-<dep>.json
    mon = view.get("monitoring") or {}
    if mon.get("file_sd_name"):
        sd_dir = os.path.join(os.path.dirname(os.path.abspath(path)), "file_sd")
        os.makedirs(sd_dir, exist_ok=True)
        with open(os.path.join(sd_dir, mon["file_sd_name"]), "w", encoding="utf-8") as fh:
            json.dump(mon.get("targets") or [], fh, indent=2)
            fh.write("\n")
