"""``glmops_deploy_read``: one read of a host before the deploy changes anything.

One round trip (:mod:`glmops.hostread`) runs on the host: the precheck facts
(``roles/prechecks/files/glmops_precheck_facts.py``), the engine service ``state`` of the
host's stores, workers and routers bundles with the deploy stamp
(``roles/engine_service/files/glmops_hostctl.py``, the argv the engine_service role uses)
and the venv probe of each engine runtime glmops installs there
(``roles/engine_runtime/files/glmops_runtime_probe.py``). On the controller: the prechecks
are evaluated (``glmops.prechecks``, the needs the prechecks role would use) and
:func:`glmops.deploystate.decide` says whether the host is in state.

Options:
  plan:           the plan play's ``glmops_plan_result.plan``
  precheck_needs: this host's entry of ``glmops_plan_result.precheck_needs`` (optional)
  fast:           false sends the host the full way whatever it reads (``glmops deploy --full``)
  provision:      whether this run provisions and checks (false: ``--skip-provision``: the
                  precheck facts are not read and do not count)
  runtime_skip:   engines glmops does not install on this host (``engine_runtime_skip``)

Returns (never changed; fails only when the host cannot be read):
  fast (bool), why ([str]: every reason the host is not in state), key (this run's
  deploy key, written as the stamp by the record play), stamp_path,
  groups: the groups the host joins: ``glmops_apply`` (runtime, services, record plays)
  when not fast, ``glmops_provision`` (provision play) when this run provisions and the host
  is not fast or has NVIDIA roles enabled; report: the prechecks report; stdout: ``{"services":
  [{unit, ready, fresh, reason}]}`` of the units that answered /health 200 (the CLI's table);
  recorded: ``{"current": N | None, "hosts": [{name, address, units}] | None}``: the host's
  current generation of this deployment (``roles/generation``) and the hosts that generation's
  Plan used (None when an older glmops recorded it without them): how the deploy finds the
  hosts that left the Plan (:func:`glmops.generations.prune_candidates`).
"""
from __future__ import annotations

import json

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

#: the Plan bundles of a host, in start order
_BUNDLES = ("stores", "workers", "routers")


class ActionModule(ActionBase):
    """See the module docstring."""

    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("plan", "precheck_needs", "fast", "provision", "runtime_skip"))

    def _var(self, task_vars: dict, name: str, default=None):
        value = task_vars.get(name, default)
        return self._templar.template(value) if value is not None else default

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super().run(tmp, task_vars)
        result["changed"] = False
        result["glmops_event"] = "read"  # glmops.runner.event_of: the deploy's read of this host
        from glmops import deploystate, hostread

        args = self._task.args
        plan = args.get("plan") or {}
        host = task_vars.get("inventory_hostname", "?")
        host_plan = (plan.get("hosts") or {}).get(host)
        if not isinstance(host_plan, dict):
            raise AnsibleActionFail(f"glmops_deploy_read: {host} is not a host of the Plan")
        needs = self._needs(task_vars, host)
        stamp = deploystate.stamp_path(plan)
        provision = bool(args.get("provision", True))
        skip = set(args.get("runtime_skip") or [])
        runtimes = [r for r in host_plan.get("runtimes", []) if r.get("engine") not in skip]
        try:
            read = hostread.run(self, task_vars, _jobs(plan, host_plan, needs if provision else None, stamp, runtimes))
        except RuntimeError as exc:
            result.update(failed=True, msg=f"glmops_deploy_read: {host}: {exc}")
            return result

        report = _report(host, read.get("facts"), needs)
        states, services, broken, stamp_doc, current_doc = _states(read)
        recorded = _recorded((read.get("records") or {}).get("json"))
        pairs = [(rt, (read.get(f"runtime{i}") or {}).get("json")) for i, rt in enumerate(runtimes)]

        code = deploystate.code_digest()
        role_vars = {k: self._var(task_vars, k) for k in task_vars if k.startswith(deploystate.ROLE_VAR_PREFIXES)}
        key = deploystate.deploy_key(plan, host, role_vars, code)
        why = broken + deploystate.decide([] if report["ok"] else report["failed"], states, pairs,
                                          stamp_doc, current_doc, key)
        if not args.get("fast", True):
            why.insert(0, "every role runs (--full)")
        fast = not why
        roles = deploystate.provision_roles(self._var(task_vars, "glmops_hardware"), self._var(task_vars, "glmops_runtime"),
                                            self._var(task_vars, "nvidia_driver_enabled"),
                                            self._var(task_vars, "container_toolkit_enabled"))
        groups = [] if fast else ["glmops_apply"]
        if provision and (not fast or roles["driver"] or roles["toolkit"]):
            groups.append("glmops_provision")
        result.update(fast=fast, why=why, key=key, stamp_path=stamp, groups=groups, report=report, recorded=recorded,
                      stdout=json.dumps({"services": services}),
                      msg=("in state: nothing to change" if fast else
                           "not in state: " + "; ".join(why[:5])
                           + (f"; and {len(why) - 5} more" if len(why) > 5 else "")))
        return result

    def _needs(self, task_vars: dict, host: str) -> dict:
        """The prechecks' needs of ``host``, as the prechecks role computes them (catalog, the
        Plan's ``precheck_needs``, ``prechecks_*`` variables); an unknown hardware fails the task."""
        from glmops import prechecks

        args = self._task.args
        try:
            return prechecks.host_needs(
                self._var(task_vars, "glmops_hardware"), self._var(task_vars, "glmops_gpus"),
                args.get("precheck_needs") if task_vars.get("glmops_model") else None,
                {k: self._var(task_vars, f"prechecks_{k}") for k in prechecks.NEED_VARS})
        except LookupError as exc:
            raise AnsibleActionFail(f"glmops_deploy_read: {host}: glmops_hardware: {exc}") from exc


def _jobs(plan: dict, host_plan: dict, needs: dict | None, stamp: str, runtimes: list[dict]) -> list[tuple]:
    """The scripts of the one round trip (:func:`glmops.hostread.run`), ``(name, script, argv)``:
    the precheck facts (when ``needs`` is given: the prechecks belong to provisioning, so
    --skip-provision skips them here too), the state of each non-empty bundle (the first one
    also reads the deploy ``stamp`` and the current generation), the recorded generations,
    and the venv probe of each of ``runtimes`` installed as a venv."""
    from glmops import deploystate, hostread, prechecks

    current = f"{deploystate.records_dir(plan['state_dir'], plan['deployment'])}/generations/current"
    jobs = [("facts", hostread.script("prechecks", "glmops_precheck_facts.py"),
             [json.dumps(prechecks.facts_options(needs))])] if needs is not None else []
    hostctl = hostread.script("engine_service", "glmops_hostctl.py")
    for kind in _BUNDLES:
        bundle = host_plan.get(kind) or {}
        if bundle.get("services") or bundle.get("files"):
            jobs.append((kind, hostctl, deploystate.state_argv(
                bundle, host_plan.get("units", []), plan["unit_glob"], host_plan.get("target") or {},
                plan["service_user"], plan["config_dir"], plan["state_dir"],
                **({} if any(j[0] in _BUNDLES for j in jobs) else {"stamp": stamp, "current": current}))))
    jobs.append(("records", hostread.script("generation", "glmops_generation.py"),
                 ["list", "--dir", f"{deploystate.records_dir(plan['state_dir'], plan['deployment'])}/generations"]))
    probe = hostread.script("engine_runtime", "glmops_runtime_probe.py")
    for i, rt in enumerate(runtimes):
        if rt.get("mode", "venv") == "venv" and rt.get("venv"):
            jobs.append((f"runtime{i}", probe, ["--venv", rt["venv"]]))
    return jobs


def _report(host: str, facts: dict | None, needs: dict) -> dict:
    """The prechecks report from the facts job's answer (``{rc, json, stdout}``; None: not read,
    --skip-provision): ok, a failed read, or :func:`glmops.prechecks.host_report`."""
    from glmops import prechecks

    if facts is None:
        return {"host": host, "ok": True, "failed": [], "skipped": "--skip-provision"}
    if facts["rc"] != 0 or not isinstance(facts["json"], dict) or facts["json"].get("failed"):
        return {"host": host, "ok": False, "failed": [f"reading facts failed: {facts['stdout'][-300:]}"]}
    return prechecks.host_report(host, facts["json"].get("facts") or {}, needs)


def _states(read: dict) -> tuple[list[dict], list[dict], list[str], dict | None, dict | None]:
    """From the bundles' state answers in ``read``: ``(states, services, broken, stamp, current)``:
    the state documents that were read, their services, a reason per read that failed, and
    the deploy stamp and current generation the first bundle read (None when none did)."""
    states, services, broken = [], [], []
    stamp_doc = current_doc = None
    for kind in _BUNDLES:
        if kind not in read:
            continue
        doc = read[kind]["json"]
        if read[kind]["rc"] != 0 or not isinstance(doc, dict) or doc.get("failed"):
            broken.append(f"the {kind} state read failed: {read[kind]['stdout'][-300:]}")
            continue
        states.append(doc)
        services += doc.get("services", [])
        if "stamp" in doc and doc.get("stamp") is not None:
            stamp_doc, current_doc = doc["stamp"], doc.get("current")
    return states, services, broken, stamp_doc, current_doc


def _recorded(doc) -> dict:
    """``{"current": N | None, "hosts": [...] | None}`` from ``glmops_generation.py list``'s answer."""
    if not isinstance(doc, dict) or doc.get("failed"):
        return {"current": None, "hosts": None}
    cur = doc.get("current")
    for g in doc.get("generations") or []:
        if isinstance(g, dict) and g.get("number") == cur:
            hosts = g.get("hosts")
            return {"current": cur, "hosts": hosts if isinstance(hosts, list) else None}
    return {"current": None, "hosts": None}
