"""Issue 15's last part: ``--service`` on ``destroy`` (only those units and their files go;
asks only when the named services are every replica of a role the endpoint needs),
``upgrade``/``rollback`` (refused, exit 2 before any host: a generation is one consistent
deployment) and ``history`` (only the generations that changed the service's files). Bad
names exit 2 naming the value and the accepted units, nothing run."""
from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from day2_fakes import calls, day2_runner, history_of  # noqa: F401  (calls: the fixture)
from glmops import generations as G
from glmops import runner
from glmops.cli import main
from glmops.commands.lifecycle import outage_roles
from glmops.deploystate import destroy_picked
from glmops.planning import plan_view

REPO = Path(__file__).resolve().parents[2]
INV = str(REPO / "inventories" / "lab")
AGG_UNITS = ["glm-lab-agg-0.service", "glm-lab-agg-1.service", "glm-lab-router.service"]


def _invoke(*args: str, topology: str = "agg"):
    return CliRunner().invoke(main, [args[0], "-i", INV, "--topology", topology, *args[1:]], env={"COLUMNS": "250"})


# ------------------------------------------------------------------ destroy --service
@pytest.mark.parametrize("verb", [["destroy"], ["destroy", "--yes"], ["history"]])
def test_unknown_service_exits_2_naming_it_and_the_accepted_units_before_any_run(calls, verb):
    res = _invoke(*verb, "--service", "glm-lab-agg-0", "--service", "nope")
    assert res.exit_code == 2, res.output
    assert "'nope'" in res.stderr and "'glm-lab-agg-0'" not in res.stderr
    assert all(u in res.stderr for u in AGG_UNITS), res.stderr
    assert calls == []


def test_destroy_one_of_two_agg_replicas_does_not_ask_and_passes_only_that_unit(calls):
    res = _invoke("destroy", "--service", "glm-lab-agg-1")  # no terminal, no --yes: it does not need to ask
    assert res.exit_code == 0, res.output
    assert [c[0] for c in calls] == ["destroy.yml"]
    assert calls[0][1]["glmops_units"] == ["glm-lab-agg-1.service"]
    assert calls[0][1]["glmops_purge_checkpoints"] is False


@pytest.mark.parametrize("topology,service,roles", [
    ("agg", "glm-lab-router", "agg: router"),
    ("disagg", "glm-lab-prefill-0", "disagg: prefill"),
])
def test_destroy_of_every_replica_of_a_needed_role_needs_yes(calls, topology, service, roles):
    res = _invoke("destroy", "--service", service, topology=topology)
    assert res.exit_code == 2 and calls == [], res.output
    assert f"({roles})" in res.stderr and "pass --yes" in res.stderr, res.stderr
    res = _invoke("destroy", "--service", service, "--yes", topology=topology)
    assert res.exit_code == 0 and [c[0] for c in calls] == ["destroy.yml"], res.output
    assert calls[0][1]["glmops_units"] == [f"{service}.service"]


def test_destroy_both_agg_replicas_asks_on_a_terminal_default_no(calls, monkeypatch):
    from glmops.commands import common

    monkeypatch.setattr(common, "interactive", lambda: True)
    res = CliRunner().invoke(main, ["destroy", "-i", INV, "--topology", "agg", "--service", "glm-lab-agg-0",
                                    "--service", "glm-lab-agg-1"], input="\n")
    assert res.exit_code == 1 and calls == [], res.output
    assert "(agg: agg)" in res.output


def test_destroy_without_service_still_asks_and_passes_no_selection(calls):
    res = _invoke("destroy")
    assert res.exit_code == 2 and "--yes" in res.stderr and calls == [], res.output
    res = _invoke("destroy", "--yes")
    assert res.exit_code == 0 and "glmops_units" not in calls[0][1], res.output


def test_destroy_service_refuses_purge_checkpoints(calls):
    res = _invoke("destroy", "--service", "glm-lab-agg-1", "--purge-checkpoints", "--yes")
    assert res.exit_code == 2 and calls == [], res.output
    assert "--purge-checkpoints" in res.stderr and "not with --service" in res.stderr


def test_destroy_service_without_topology_passes_one_selection_per_topology(calls):
    """No --topology: the run acts on the recorded topology; a name of only one topology is a
    selection of that one, the other topology has none (the plan play then refuses it)."""
    res = CliRunner().invoke(main, ["destroy", "-i", INV, "--service", "glm-lab-agg-1"], env={"COLUMNS": "250"})
    assert res.exit_code == 0, res.output
    choices = calls[-1][1]["glmops_run_choices"]
    assert list(choices) == ["agg"] and choices["agg"]["glmops_units"] == ["glm-lab-agg-1.service"]


def test_outage_roles_counts_replicas_not_units():
    view = {"services": [
        {"unit": "p0a", "pool": "prefill", "replica": 0}, {"unit": "p0b", "pool": "prefill", "replica": 0},
        {"unit": "p1", "pool": "prefill", "replica": 1}, {"unit": "d0", "pool": "decode", "replica": 0},
        {"unit": "r", "pool": "router", "replica": 0}, {"unit": "s1", "pool": "store", "replica": 0},
        {"unit": "s2", "pool": "store", "replica": 0}]}
    picked = lambda *units: [s for s in view["services"] if s["unit"] in units]  # noqa: E731
    assert outage_roles(view, picked("p0b")) == []  # replica 1 still serves
    assert outage_roles(view, picked("p0b", "p1")) == ["prefill"]  # one unit breaks a multi-host replica
    assert outage_roles(view, picked("s1")) == []  # one store member of two
    assert outage_roles(view, picked("s1", "s2", "r", "d0")) == ["decode", "router", "store"]


def test_destroy_picked_keeps_files_a_staying_unit_shares():
    view = {"services": [
        {"unit": "a.service", "host": "h1", "paths": ["/etc/systemd/system/a.service", "/etc/g/a.env", "/etc/g/ov"]},
        {"unit": "b.service", "host": "h1", "paths": ["/etc/systemd/system/b.service", "/etc/g/b.env", "/etc/g/ov"]},
        {"unit": "c.service", "host": "h2", "paths": ["/etc/systemd/system/c.service", "/etc/g/ov"]}]}
    assert destroy_picked(view, ["a.service", "c.service"], "h1") == {
        "units": ["a.service"], "paths": ["/etc/systemd/system/a.service", "/etc/g/a.env"]}
    assert destroy_picked(view, ["a.service", "b.service"], "h1")["paths"][-1] == "/etc/g/b.env"
    assert "/etc/g/ov" in destroy_picked(view, ["a.service", "b.service"], "h1")["paths"]
    assert destroy_picked(view, ["a.service"], "h2") == {"units": [], "paths": []}


def test_destroy_picked_of_the_lab_plan_is_the_unit_and_env_file():
    view = plan_view(INV, "agg")
    assert destroy_picked(view, ["glm-lab-agg-1.service"], "lab-2") == {
        "units": ["glm-lab-agg-1.service"],
        "paths": ["/etc/systemd/system/glm-lab-agg-1.service", "/etc/glmops/lab/glm-lab-agg-1.env"]}


def test_the_destroy_playbook_hands_the_role_the_picked_list_and_keeps_monitoring():
    plays = yaml.safe_load((REPO / "playbooks" / "destroy.yml").read_text())
    remove = next(p for p in plays if p.get("name") == "Remove the deployment")
    task = remove["tasks"][0]
    assert "glmops_destroy_picked(glmops_units" in remove["vars"]["glmops_destroy_picked"]
    assert task["vars"]["engine_service_destroy_units"] == "{{ glmops_destroy_picked.units }}"
    assert task["vars"]["engine_service_destroy_paths"] == "{{ glmops_destroy_picked.paths }}"
    assert "glmops_destroy_picked.units | length > 0" in task["when"]
    scrape = next(p for p in plays if p.get("name") == "Remove the deployment's scrape targets")
    assert "glmops_units" in scrape["tasks"][0]["when"]
    spec = yaml.safe_load((REPO / "roles" / "engine_service" / "meta" / "argument_specs.yml").read_text())
    options = spec["argument_specs"]["destroy"]["options"]
    assert options["engine_service_destroy_units"]["elements"] == "str"
    assert options["engine_service_destroy_paths"]["type"] == "list"
    tasks = yaml.safe_load((REPO / "roles" / "engine_service" / "tasks" / "destroy.yml").read_text())
    by_name = {t["name"]: t for t in tasks}
    # with a list: no glob read, the target, the config dir and the checkpoint stay
    for name in ("Find this deployment's units on the host", "Stop and disable the deployment target",
                 "Remove env and config files", "Remove the checkpoint (--purge-checkpoints)"):
        when = by_name[name]["when"]
        assert "engine_service_destroy_units | length == 0" in (when if isinstance(when, list) else [when]), name
    assert by_name["Remove the env and config files of the units named"]["loop"] == "{{ engine_service_destroy_paths }}"


# ------------------------------------------------------------------ upgrade / rollback --service
@pytest.mark.parametrize("argv,why", [
    (["upgrade", "--set", "max_batch_size=3"], "a generation is one consistent deployment"),
    (["upgrade", "--check"], "pools.<role>.engine_args"),
    (["rollback"], "a generation is restored whole"),
    (["rollback", "--check", "--to", "1"], "restart --service NAME"),
])
def test_upgrade_and_rollback_refuse_service_before_any_host(monkeypatch, argv, why):
    monkeypatch.setattr(runner, "run", lambda *a, **k: pytest.fail("a playbook ran"))
    res = CliRunner().invoke(main, [argv[0], "-i", INV, *argv[1:], "--service", "glm-lab-agg-0"])
    assert res.exit_code == 2, res.output
    assert f"{argv[0]} --service glm-lab-agg-0: not accepted" in res.stderr and why in res.stderr, res.stderr


@pytest.mark.parametrize("verb,words", [("upgrade", "Not accepted (exit 2): a generation is one consistent"),
                                        ("rollback", "Not accepted (exit 2): a generation is restored whole")])
def test_upgrade_and_rollback_help_say_what_service_means(verb, words):
    res = CliRunner().invoke(main, [verb, "--help"], env={"COLUMNS": "2000"})
    assert words in " ".join(res.output.split()), res.output


# ------------------------------------------------------------------ history --service
def _three_generations() -> dict:
    """lab agg: 1 deployed, 2 a new max_batch_size (both agg workers' env change), 3 the router's
    unit file edited (only its sha in the record changes)."""
    g1 = history_of(plan_view(INV, "agg"), 1)
    g2 = history_of(plan_view(INV, "agg", {"glmops_max_batch_size": 3}), 2)
    hist = {}
    for host in g1:
        third = copy.deepcopy(g2[host]["generations"][0])
        third["number"] = 3
        for f in third["files"]:
            if f["unit"] == "glm-lab-router.service" and f["path"].endswith(".service"):
                f["sha256"] = "0" * 64
        hist[host] = {"current": 3, "generations": g1[host]["generations"] + g2[host]["generations"] + [third]}
    return hist


def _history(monkeypatch, *args):
    monkeypatch.chdir(REPO)
    calls, run = day2_runner(_three_generations())
    monkeypatch.setattr(runner, "run", run)
    res = CliRunner().invoke(main, ["history", "-i", INV, *args], env={"COLUMNS": "250"})
    return res, calls


def test_history_service_lists_only_the_generations_that_changed_its_files(monkeypatch):
    res, calls = _history(monkeypatch, "--service", "glm-lab-router", "--json")
    assert res.exit_code == 0, res.output
    got = json.loads(res.output)
    assert got["services"] == ["glm-lab-router.service"]
    numbers = {h: [g["number"] for g in v["generations"]] for h, v in got["hosts"].items()}
    assert numbers == {"lab-1": [], "lab-2": [], "lab-3": [1, 3]}
    assert got["hosts"]["lab-3"]["current"] == 3
    res, _ = _history(monkeypatch, "--service", "glm-lab-agg-1.service", "--service", "glm-lab-router", "--json")
    numbers = {h: [g["number"] for g in v["generations"]] for h, v in json.loads(res.output)["hosts"].items()}
    assert numbers == {"lab-1": [], "lab-2": [1, 2], "lab-3": [1, 3]}
    assert [c[0] for c in calls] == ["history.yml"]


def test_history_service_table_names_the_changed_units(monkeypatch):
    res, _ = _history(monkeypatch, "--service", "glm-lab-agg-1")
    assert res.exit_code == 0, res.output
    rows = [line for line in res.output.splitlines() if "lab-" in line]
    assert any("no change of glm-lab-agg-1.service recorded" in r for r in rows if "lab-1" in r), res.output
    lab2 = [r for r in rows if "lab-2" in r]
    assert len(lab2) == 2 and all("glm-lab-agg-1.service" in r for r in lab2), res.output
    assert not any("glm-lab-router.service" in r for r in rows), res.output


def test_history_service_accepts_a_unit_of_the_other_topology(monkeypatch):
    res, _ = _history(monkeypatch, "--service", "glm-lab-prefill-0", "--json")
    assert res.exit_code == 0, res.output
    assert all(v["generations"] == [] for v in json.loads(res.output)["hosts"].values())


def test_unit_changes_counts_added_changed_and_removed_files():
    def gen(number, sha=None):
        files = [] if sha is None else [{"path": "/u", "sha256": sha, "unit": "u.service"}]
        return {"number": number, "units": [{"unit": "u.service"}] if sha else [], "files": files}

    hist = {"h": {"current": 5, "generations": [gen(5, "b"), gen(1, "a"), gen(2, "a"), gen(3), gen(4, "b")]}}
    got = G.unit_changes(hist, ["u.service"])["h"]
    assert [g["number"] for g in got["generations"]] == [1, 3, 4]  # added, removed, added back; 2 and 5 same
    assert got["generations"][0]["changed_units"] == ["u.service"] and got["current"] == 5
    assert G.unit_changes(hist, ["other.service"])["h"]["generations"] == []
