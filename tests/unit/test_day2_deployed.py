"""Issue 12 items 5 and 6 without hosts: day-2 verbs follow the topology recorded on the hosts
(glmops.generations.deployed_topology and the CLI glue), and a deploy finds the hosts that left
its Plan (glmops.generations.prune_candidates / departed, the summary rows).

The records are written and listed by the real host script (roles/generation/files/
glmops_generation.py) on a scratch tree, with the manifest fields plays/record.yml writes;
the Plans come from the lab inventory (inventories/lab: default topology disagg; agg is two
replicas on lab-1/lab-2 behind the router on lab-3), copied and changed as a user would.
The lab e2e (tests/e2e/test_day2_lab.py) runs the same on real hosts.
"""
from __future__ import annotations

import base64
import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from rich.console import Console

from glmops import generations as G
from glmops import runner
from glmops.planning import plan_view

REPO = Path(__file__).resolve().parents[2]
LAB_INV = REPO / "inventories" / "lab"
SCRIPT = REPO / "roles" / "generation" / "files" / "glmops_generation.py"
HOSTS = ["lab-1", "lab-2", "lab-3"]


def _inventory(tmp_path: Path, name: str = "lab", drop_hosts: tuple[str, ...] = (), **group_vars) -> Path:
    """A copy of inventories/lab with group_vars changed (and hosts dropped) as a user would."""
    out = tmp_path / name
    shutil.copytree(LAB_INV, out)
    gv = out / "group_vars" / "all.yml"
    data = yaml.safe_load(gv.read_text())
    for key, value in group_vars.items():
        if key == "agg_pool":
            data["glmops_topologies"]["agg"]["pools"]["agg"] = value
        else:
            data[key] = value
    gv.write_text(yaml.safe_dump(data, sort_keys=False))
    if drop_hosts:
        hosts = yaml.safe_load((out / "hosts.yml").read_text())
        for group in hosts["all"]["children"].values():
            for h in drop_hosts:
                group["hosts"].pop(h, None)
        (out / "hosts.yml").write_text(yaml.safe_dump(hosts, sort_keys=False))
    return out


def _script(*args: str) -> dict:
    proc = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=60,
                          check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout)


def _record(gen_dir: Path, number: int, plan: dict, host: str) -> None:
    """What plays/record.yml records for ``host`` (no files: the host script checks them)."""
    manifest = {"deployment": plan["deployment"], "host": host, "source": "deploy", "plan_hash": f"h{number}",
                "topology": plan["topology"], "files": [],
                "units": [{"unit": s["unit"], "pool": s["pool"]} for s in plan["services"] if s["host"] == host],
                "hosts": G.plan_hosts(plan)}
    _script("record", "--dir", str(gen_dir), "--number", str(number), "--keep", "5",
            "--manifest", base64.b64encode(json.dumps(manifest).encode()).decode())


def _history(root: Path, hosts=HOSTS) -> dict:
    return {h: _script("list", "--dir", str(root / h)) for h in hosts}


# ----------------------------------------------------------------- item 5: deployed topology
def test_deployed_topology_follows_the_records_and_names_the_default(tmp_path):
    agg = plan_view(str(LAB_INV), "agg")
    for h in HOSTS:
        _record(tmp_path / h, 1, agg, h)
    top, line = G.deployed_topology(_history(tmp_path), "disagg")
    assert top == "agg"
    assert line == ("deployed topology agg (generation 1 on lab-1, lab-2, lab-3) differs from the inventory's "
                    "default disagg: using agg (--topology disagg to act on the default)")
    # the same as the default: nothing to say
    assert G.deployed_topology(_history(tmp_path), "agg") == ("agg", "")
    # a host not read still lets the others decide, and is named
    top, line = G.deployed_topology(_history(tmp_path, ["lab-1", "lab-3"]) | {"lab-2": {"generations": [],
                                                                                       "current": None}},
                                    "agg", unread=["lab-2"])
    assert top == "agg" and line.endswith("could not read the records on lab-2")


def test_deployed_topology_falls_back_to_the_default_when_hosts_disagree_or_nothing_is_recorded(tmp_path):
    empty = _history(tmp_path)
    assert G.deployed_topology(empty, "disagg") == (
        "disagg", "no deployment recorded on lab-1, lab-2, lab-3: using the inventory's default topology disagg")
    agg, disagg = plan_view(str(LAB_INV), "agg"), plan_view(str(LAB_INV), "disagg")
    _record(tmp_path / "lab-1", 1, agg, "lab-1")
    _record(tmp_path / "lab-2", 2, disagg, "lab-2")
    top, line = G.deployed_topology(_history(tmp_path), "disagg")
    assert top == "disagg"
    assert line == ("the hosts disagree on the deployed topology (lab-1: agg (generation 1), lab-2: disagg "
                    "(generation 2)): using the inventory's default topology disagg")


def _plugin():
    """The glmops_plan action plugin module (its choice of the deployed topology)."""
    spec = importlib.util.spec_from_file_location(
        "glmops_plan_plugin", REPO / "glmops" / "ansible" / "action_plugins" / "glmops_plan.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _plan_play(extravars: dict, tmp_path: Path) -> tuple[str | None, str, dict]:
    """What playbooks/plays/plan.yml does with ``glmops_deployed_read``: its read play lists each
    host's records (the real script on tmp_path/<host>), then glmops_plan (the real plugin
    function) chooses the topology and takes that topology's ``glmops_run_choices``.
    Returns (topology, line, run vars); without the read: (``glmops_topology``, "", {})."""
    read = extravars.get("glmops_deployed_read")
    if not read:
        return extravars.get("glmops_topology"), "", {}
    hostvars = {h: {"glmops_recorded_generations": _script("list", "--dir", str(tmp_path / h))}
                for h in read["hosts"].split(",")}
    top, line = _plugin()._deployed_topology(read, hostvars)
    return top, line, extravars["glmops_run_choices"][top]


def _fake_hosts(monkeypatch, tmp_path: Path, deployed: dict[str, list[str]]):
    """runner.run as the hosts would answer: history.yml lists the real records under
    tmp_path/<host>; a day-2 playbook without --topology first reads them (its plan play,
    :func:`_plan_play`, which adds ``chosen`` = (topology, run vars) to the recorded call);
    status.yml reads the units, and only ``deployed`` ones run and answer 200 (any other unit
    is inactive/dead and answers nothing, as glmops_hostctl.py status says)."""
    calls = []

    def run(verb, playbook, inventory, extravars=None, *, console=None, quiet=False, on_event=None, **kw):
        extravars = dict(extravars or {})
        res = runner.RunResult(verb=verb, rc=0, status="successful", artifacts=tmp_path, seconds=0.1)
        if playbook != "history.yml":
            top, line, chosen = _plan_play(extravars, tmp_path)
            res.plan = {"topology": top or plan_view(inventory)["topology"], "topology_line": line}
            extravars["chosen"] = (res.plan["topology"], chosen)
        calls.append((playbook, extravars))
        if playbook == "history.yml":
            for host in extravars["glmops_day2_hosts"].split(","):
                res.hosts[host] = runner.HostStats(ok=1)
                on_event({"event": "runner_on_ok", "event_data": {
                    "host": host, "task": "Read the recorded generations",
                    "res": {"stdout": json.dumps(_script("list", "--dir", str(tmp_path / host)))}}})
        elif playbook == "status.yml":
            plan = plan_view(inventory, res.plan["topology"])
            for s in plan["services"]:
                up = s["unit"] in deployed.get(s["host"], [])
                res.services.append({"host": s["host"], "unit": s["unit"], "active": "active" if up else "inactive",
                                     "sub": "running" if up else "dead", "pid": 7 if up else 0, "restarts": 0,
                                     "uptime_s": 9.0 if up else None, "health": 200 if up else -1})
        return res

    monkeypatch.setattr(runner, "run", run)
    return calls


def test_status_without_topology_reports_what_is_deployed(tmp_path, monkeypatch):
    """The issue's reproducer: `deploy --topology agg` on an inventory whose default is disagg,
    then `status` without --topology must show the agg services serving (exit 0)."""
    from glmops.cli import main

    agg = plan_view(str(LAB_INV), "agg")
    for h in HOSTS:
        _record(tmp_path / h, 1, agg, h)
    deployed = {h: [s["unit"] for s in agg["services"] if s["host"] == h] for h in HOSTS}
    calls = _fake_hosts(monkeypatch, tmp_path, deployed)
    res = CliRunner().invoke(main, ["status", "-i", str(LAB_INV), "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert sorted(r["unit"] for r in doc["services"]) == sorted(
        ["glm-lab-agg-0.service", "glm-lab-agg-1.service", "glm-lab-router.service"])
    assert all(r["state"] == "active" and r["health"] == 200 for r in doc["services"])
    assert "deployed topology agg (generation 1 on lab-1, lab-2, lab-3) differs from the inventory's default disagg" \
        in res.stderr
    # one run: its plan play read the records and chose agg (no history.yml run before it)
    assert [c[0] for c in calls] == ["status.yml"] and calls[0][1]["chosen"][0] == "agg"
    assert "glmops_topology" not in calls[0][1]
    # an explicit --topology wins: no records read, the disagg units are not there: exit 1
    calls.clear()
    res = CliRunner().invoke(main, ["status", "-i", str(LAB_INV), "--topology", "disagg", "--json"])
    assert res.exit_code == 1
    assert [c[0] for c in calls] == ["status.yml"]
    assert {r["unit"] for r in json.loads(res.stdout)["services"]} == {
        "glm-lab-prefill-0.service", "glm-lab-decode-0.service", "glm-lab-router.service"}


@pytest.mark.parametrize("verb", ["logs", "restart", "stop", "destroy"])
def test_other_day2_verbs_act_on_the_deployed_topology(tmp_path, monkeypatch, verb):
    from glmops.cli import main

    agg = plan_view(str(LAB_INV), "agg")
    for h in HOSTS:
        _record(tmp_path / h, 1, agg, h)
    calls = _fake_hosts(monkeypatch, tmp_path, {})
    yes = ["--yes"] if verb in ("destroy", "stop", "restart") else []  # the endpoint goes down: no terminal to ask on
    res = CliRunner().invoke(main, [verb, "-i", str(LAB_INV), *yes])
    # one run, whose plan play reads the records and acts on agg (the inventory's default is disagg)
    assert [c[0] for c in calls] == [f"{verb}.yml"], (res.output, calls)
    assert calls[0][1]["chosen"][0] == "agg", calls
    assert "deployed topology agg (generation 1 on lab-1, lab-2, lab-3) differs from the inventory's default disagg" \
        in res.stderr
    if verb == "logs":  # the units asked for are the deployed ones
        assert calls[0][1]["chosen"][1]["glmops_log_units"] == ["glm-lab-agg-0.service", "glm-lab-agg-1.service",
                                                                "glm-lab-router.service"]


def test_service_selection_follows_the_deployed_topology_in_the_one_run(tmp_path, monkeypatch):
    """--service may name a unit of any topology the inventory plans: the run acts on the one the
    hosts record (a prefill unit: disagg deployed, default agg); a name of no topology exits 2
    before any run, listing the accepted units."""
    from glmops.cli import main

    disagg = plan_view(str(LAB_INV), "disagg")
    inv = _inventory(tmp_path, glmops_topology="agg")
    for h in HOSTS:
        _record(tmp_path / h, 1, disagg, h)
    calls = _fake_hosts(monkeypatch, tmp_path, {})
    res = CliRunner().invoke(main, ["restart", "-i", str(inv), "--service", "glm-lab-prefill-0", "--yes"])
    assert [c[0] for c in calls] == ["restart.yml"], res.output
    top, chosen = calls[0][1]["chosen"]
    assert top == "disagg" and chosen["glmops_units"] == ["glm-lab-prefill-0.service"], calls
    assert chosen["glmops_restart_steps"] is None  # not --rolling
    assert set(calls[0][1]["glmops_run_choices"]) == {"disagg"}  # agg has no such unit
    calls.clear()
    res = CliRunner().invoke(main, ["restart", "-i", str(inv), "--service", "nosuch", "--yes"])
    assert res.exit_code == 2 and calls == []
    assert "--service 'nosuch': not a service of deployment" in res.stderr and "glm-lab-router.service" in res.stderr


def test_smoke_without_topology_targets_the_deployed_endpoint_and_workers(tmp_path, monkeypatch):
    from glmops import smoke as sm
    from glmops.cli import main

    disagg = plan_view(str(LAB_INV), "disagg")
    inv = _inventory(tmp_path, glmops_topology="agg")  # default agg, deployed disagg
    for h in HOSTS:
        _record(tmp_path / h, 1, disagg, h)
    _fake_hosts(monkeypatch, tmp_path, {})
    seen = []

    def fake_run(target, **kw):  # the checks themselves are test_smoke's: only the target matters here
        seen.append(target)
        return sm.SmokeReport(endpoint=target.endpoint, model=target.model, checks=[])

    monkeypatch.setattr(sm, "run", fake_run)
    res = CliRunner().invoke(main, ["smoke", "-i", str(inv)])
    assert res.exit_code == 0, res.output
    assert sorted(w.role for w in seen[0].workers) == ["decode", "prefill"]
    assert "deployed topology disagg" in res.stderr and "default agg" in res.stderr


# ----------------------------------------------------------------- item 6: hosts that leave the Plan
def _scaled_down(tmp_path: Path, **kw) -> dict:
    """One agg replica on lab-1: no front door (lab-1 serves the endpoint), lab-2 and lab-3 leave."""
    return plan_view(str(_inventory(tmp_path, "small", agg_pool={"replicas": 1, "hosts": ["lab-1"], "port": 8001},
                                    **kw)), "agg")


def test_prune_candidates_are_the_recorded_hosts_the_plan_no_longer_has(tmp_path):
    agg = plan_view(str(LAB_INV), "agg")
    small = _scaled_down(tmp_path)
    assert list(small["hosts"]) == ["lab-1"]
    recorded = {"lab-1": G.plan_hosts(agg)}  # lab-1's current generation: the 2-replica Plan
    got = G.prune_candidates(small, recorded, HOSTS, HOSTS)
    assert got == {"read": ["lab-2", "lab-3"], "gone": []}
    # lab-2 also left the inventory: it cannot be reached; named with its address and units
    got = G.prune_candidates(small, recorded, ["lab-1", "lab-3"], ["lab-1", "lab-3"])
    assert got == {"read": ["lab-3"], "gone": [{"name": "lab-2", "address": "10.77.0.12",
                                                 "units": ["glm-lab-agg-1.service"]}]}
    # no current generation on any Plan host: nothing is known, no host is contacted
    assert G.prune_candidates(small, {}, HOSTS, HOSTS) == {"read": [], "gone": []}
    # a record an older glmops wrote (no hosts list): the groups' hosts outside the Plan are read
    assert G.prune_candidates(small, {"lab-1": None}, HOSTS, HOSTS) == {"read": ["lab-2", "lab-3"], "gone": []}
    # the same Plan: nothing left it
    assert G.prune_candidates(agg, {h: G.plan_hosts(agg) for h in HOSTS}, HOSTS, HOSTS) == {"read": [], "gone": []}


def test_departed_prunes_reachable_hosts_and_refuses_with_no_prune():
    cands = {"read": ["lab-2", "lab-3", "lab-4"],
             "gone": [{"name": "lab-5", "address": "10.77.0.15", "units": ["glm-lab-agg-2.service"]}]}
    reads = {"lab-2": {"stale": ["glm-lab-agg-1.service"], "current": "1"},
             "lab-3": None,  # unreachable
             "lab-4": {"stale": [], "current": None}}  # a spare: nothing of the deployment there
    got = G.departed(cands, reads, True, "lab")
    assert got["prune"] == [{"host": "lab-2", "units": ["glm-lab-agg-1.service"]}]
    assert got["unreachable"] == [{"host": "lab-3", "units": []}] and got["refuse"] == ""
    assert got["lines"][0] == ("lab-2 left the Plan and still has glm-lab-agg-1.service: stopping and removing "
                               "them after the new Plan serves")
    assert "lab-3 left the Plan but could not be read (unreachable)" in got["lines"][1]
    assert got["lines"][2].startswith("lab-5 (10.77.0.15) left the Plan and the inventory: it cannot be reached, "
                                      "so glm-lab-agg-2.service may still run")
    refused = G.departed(cands, reads, False, "lab")
    assert refused["refuse"] == (
        "--no-prune: 3 host(s) left the Plan but may still run units of lab: lab-2 (glm-lab-agg-1.service); "
        "lab-3 (unreachable); lab-5 (not in the inventory: glm-lab-agg-2.service). Nothing was changed. "
        "Deploy without --no-prune to stop and remove them, or keep them in the Plan.")
    # records but no unit left (e.g. units removed by hand): its records still go
    assert G.departed({"read": ["lab-2"], "gone": []}, {"lab-2": {"stale": [], "current": "3"}}, True,
                      "lab")["prune"] == [{"host": "lab-2", "units": []}]
    assert G.departed({"read": ["lab-4"], "gone": []}, {"lab-4": {"stale": [], "current": None}}, False,
                      "lab")["refuse"] == ""


def test_summary_says_what_was_pruned_and_what_was_not(tmp_path):
    res = runner.RunResult(verb="deploy", rc=1, status="failed", artifacts=tmp_path, seconds=3.0)
    res.departed = {"prune": [{"host": "lab-2", "units": ["glm-lab-agg-1.service"]},
                              {"host": "lab-3", "units": ["glm-lab-router.service"]}],
                    "unreachable": [{"host": "lab-4", "units": []}],
                    "gone": [{"name": "lab-5", "address": "10.77.0.15", "units": ["glm-lab-agg-2.service"]}]}
    res.pruned = ["lab-2"]
    res.hosts = {"lab-2": runner.HostStats(ok=9, changed=4),
                 "lab-3": runner.HostStats(ok=2, failed=1, messages=["systemctl stop timed out"])}
    console = Console(record=True, width=300)
    runner.print_summary(res, console, {"services": []})
    text = console.export_text()
    rows = {line.split("│")[1].strip() + " " + line.split("│")[2].strip(): line.split("│")[3].strip()
            for line in text.splitlines() if line.count("│") >= 4 and "host" not in line}
    assert rows["lab-2 glm-lab-agg-1.service"] == "pruned: left the Plan, stopped and removed"
    assert rows["lab-3 glm-lab-router.service"] == "NOT pruned (left the Plan): FAILED: systemctl stop timed out"
    assert rows["lab-4 -"] == "NOT pruned (left the Plan): could not be read (unreachable)"
    assert rows["lab-5 glm-lab-agg-2.service"] == "NOT pruned: left the Plan and the inventory (cannot be reached)"


def test_no_prune_is_a_deploy_option_passed_to_the_playbook(tmp_path, monkeypatch):
    from glmops.cli import main

    seen = []

    def run(verb, playbook, inventory, extravars=None, **kw):
        seen.append(extravars)
        return runner.RunResult(verb=verb, rc=1, status="failed", artifacts=tmp_path, seconds=0.1)

    monkeypatch.setattr(runner, "run", run)
    res = CliRunner().invoke(main, ["deploy", "-i", str(LAB_INV), "--no-prune"])
    assert res.exit_code == 1 and seen[0]["glmops_prune"] is False
    CliRunner().invoke(main, ["deploy", "-i", str(LAB_INV)])
    assert "glmops_prune" not in seen[1]  # the playbook's default: prune


def test_record_play_writes_every_plan_host_into_the_manifest():
    """plays/record.yml records the Plan's hosts (glmops_plan_hosts) with each generation."""
    play = yaml.safe_load((REPO / "playbooks" / "plays" / "record.yml").read_text())
    task = next(t for t in play[0]["tasks"] if t["name"] == "Record the generation")
    assert task["vars"]["generation_manifest"]["hosts"] == "{{ glmops_deploy_plan | glmops_plan_hosts }}"
    agg = plan_view(str(LAB_INV), "agg")
    assert G.plan_hosts(agg) == [
        {"name": "lab-1", "address": "10.77.0.11", "units": ["glm-lab-agg-0.service"]},
        {"name": "lab-2", "address": "10.77.0.12", "units": ["glm-lab-agg-1.service"]},
        {"name": "lab-3", "address": "10.77.0.13", "units": ["glm-lab-router.service"]}]


@pytest.mark.parametrize("argv", [
    ["stop", "--yes", "--service", "glm-lab-router", "--limit", "lab-1"],
    ["restart", "--yes", "--service", "glm-lab-router", "--limit", "lab-1"],
    ["restart", "--rolling", "--service", "glm-lab-router", "--limit", "lab-1"],
    ["status", "--service", "glm-lab-router", "--limit", "lab-1"],
    ["logs", "glm-lab-router", "--limit", "lab-1"],
    ["logs", "-f", "glm-lab-router", "--limit", "lab-1"],
    ["logs", "-f", "--limit", "nosuch"],
    ["logs", "-f", "nope"],
])
def test_a_selection_the_limit_leaves_out_is_exit_2_before_any_host(monkeypatch, argv):
    """Services named with --service (or logs' SERVICE) that run only on hosts --limit leaves
    out: nothing would be done, so exit 2 naming both, before any run or ssh (they reported
    "ok", exit 0, having done nothing); logs -f checks its SERVICE and --limit first too."""
    from glmops import ssh
    from glmops.cli import main

    monkeypatch.setattr(runner, "run", lambda *a, **k: pytest.fail(f"a run started: {a[:2]}"))
    monkeypatch.setattr(ssh, "ssh_command", lambda *a, **k: pytest.fail("ssh started"))
    res = CliRunner().invoke(main, [argv[0], "-i", str(LAB_INV), *argv[1:]])
    assert res.exit_code == 2, res.output
    if "glm-lab-router" in argv:
        assert "glm-lab-router.service run(s) on lab-3, which --limit 'lab-1' leaves out" in res.stderr, res.stderr
