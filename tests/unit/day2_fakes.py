"""Doubles for the day-2 verbs' tests: what ``glmops_generation.py list`` reports after a deploy
(:func:`history_of`) and ``glmops.runner.run`` as the day-2 playbooks would answer
(:func:`day2_runner`): the hosts' generation lists, the controller's decision (the playbooks'
own filters, ``glmops_upgrade_plan`` / ``glmops_rollback_plan``), one report per step, the
readiness gate of a failing step, the put-back, the result. Every call is recorded. :func:`calls`: a
fixture standing in for ``glmops.runner.run`` as a successful run of no host, recording each call."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

from glmops import runner

REPO = Path(__file__).resolve().parents[2]


def _filters() -> dict[str, Any]:
    spec = importlib.util.spec_from_file_location(
        "glmops_deploy_filters", REPO / "glmops" / "ansible" / "filter_plugins" / "glmops_deploy.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.FilterModule().filters()


def history_of(plan: dict, number: int = 1) -> dict:
    """What `glmops_generation.py list` would report after deploying ``plan`` (generation ``number``)."""
    out = {}
    for host, hp in plan["hosts"].items():
        services = hp["workers"]["services"] + hp["routers"]["services"]
        units = {s["name"]: s["unit"] for s in services}
        files = [{"path": f["path"], "sha256": f["sha256"], "mode": f["mode"], "unit": units.get(f["service"], "")}
                 for kind in ("workers", "routers") for key in ("files", "secret_files") for f in hp[kind][key]]
        out[host] = {"current": number, "generations": [{
            "number": number, "plan_hash": "x", "runtimes": hp["runtimes"], "files": files,
            "served_model_name": plan["served_model_name"], "topology": plan["topology"],
            "endpoint_ready_url": plan["endpoint_ready_url"], "readiness_timeout_s": plan["readiness_timeout_s"],
            "units": [{**{k: s[k] for k in ("unit", "pool", "replica", "engine", "url", "health_url", "ready_url",
                                              "start_order")}} for s in services]}]}
    return out


@pytest.fixture
def calls(monkeypatch):
    """``runner.run`` as a successful run of no host; ``calls`` gets (playbook, extravars, limit)."""
    got: list[tuple[str, dict, str | None]] = []

    def run(verb, playbook, inventory, extravars=None, *, limit=None, **kw):
        got.append((playbook, dict(extravars or {}), limit))
        return runner.RunResult(verb=verb, rc=0, status="successful", artifacts=Path("/tmp/x"), seconds=1.0)

    monkeypatch.setattr(runner, "run", run)
    return got


def _ok(on_event, host: str, res: dict) -> None:
    on_event({"event": "runner_on_ok", "event_data": {"host": host, "task": "a task", "res": res}})


def _report(on_event, key: str, msg: dict) -> None:
    _ok(on_event, "localhost", {"msg": {**msg, "glmops_event": key}})


def day2_runner(hist: dict, fail_at: str = "", put_back: bool = True):
    """(calls, run): ``run`` stands in for ``glmops.runner.run``; ``calls`` gets one
    ``(playbook, extravars)`` per call. ``fail_at``: the step whose gate fails (its first unit
    not ready); ``put_back``: whether the upgrade's put-back then serves."""
    calls: list[tuple[str, dict]] = []
    filters = _filters()

    def run(verb, playbook, inventory, extravars=None, *, console=None, on_event=None, planned=None, **kw):
        extravars = dict(extravars or {})
        calls.append((playbook, extravars))
        on_event = on_event or (lambda event: None)
        res = runner.RunResult(verb=verb, rc=0, status="successful", artifacts=Path("."), seconds=0.1)
        hosts = extravars["glmops_day2_hosts"].split(",")
        lists = {h: json.dumps({"glmops_event": "generations", **hist[h]}) if h in hist else "" for h in hosts}
        for host in hosts:
            res.hosts[host] = runner.HostStats(ok=1)
            if lists[host]:
                _ok(on_event, host, {"stdout": lists[host]})
        if playbook == "history.yml":
            return res
        day2 = extravars["glmops_day2"]
        if playbook == "upgrade.yml":
            decided = filters["glmops_upgrade_plan"](lists, planned.view(), day2["inventory"], day2["drain_timeout_s"])
            steps = decided["steps"]
        else:
            decided = filters["glmops_rollback_plan"](lists, day2["to"], day2["drain_timeout_s"])
            steps = [s for s in decided["steps"] if s["units"]] + ([decided["finish"]] if decided["go"] else [])
        _report(on_event, "day2_plan", decided)
        if decided["refuse"] or decided["unread"]:
            res.rc, res.status = 1, "failed"
            res.failures.append(f"localhost: Refuse: {decided['refuse'] or decided['unread']}")
            return res
        if not decided["go"]:
            return res
        names = [s["name"] for s in steps]
        failed: dict = {}
        for step in steps:
            _report(on_event, "day2_step", {"step": step["name"], "units": step["units"], "to": step.get("to")})
            if step["name"] == fail_at:
                host = next(iter(step["services"]))
                _ok(on_event, host, {"stdout": json.dumps({"glmops_event": "ready", "services": [
                    {"unit": step["units"][0], "ready": False, "reason": "exited (code 1)"}]})})
                failed = {"step": step, "host": host, "task": "Wait for readiness"}
                break
        if failed and playbook == "upgrade.yml":
            step = failed["step"]
            _report(on_event, "day2_step", {"step": step["name"], "units": step["units"], "to": decided["number"],
                                            "put_back": True})
            _ok(on_event, failed["host"], {"stdout": json.dumps({"glmops_event": "ready", "services": [
                {"unit": step["units"][0], "ready": put_back, "reason": "" if put_back else "exited (code 1)"}]})})
        at = names.index(failed["step"]["name"]) if failed else len(names)
        _report(on_event, "day2_result", {"number": decided["number"], "failed": failed, "put_back": put_back,
                                          "done": names[:at], "untouched": names[at + 1:]})
        if failed:
            res.rc, res.status = 1, "failed"
            res.failures.append(f"localhost: Stop naming what is down: {failed['step']['name']}")
        return res

    return calls, run
