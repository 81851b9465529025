"""Small bad-input gaps, each refused before any host is touched, naming the key, the value and
what is accepted: unknown topology names (inventory, ``glmops_topologies`` keys, ``--topology``),
a misspelled or empty ``glmops_workers`` group, ``glmops upgrade -e engine_version=`` (empty),
``glmops download --endpoint`` that is not an http(s) URL, and ``--set`` reporting every bad item."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from inventory_factory import vllm_b200_disagg, write_inventory

from glmops import generations as G
from glmops import rules, runner
from glmops.cli import main
from glmops.inventory import load_deployment

REPO = Path(__file__).resolve().parents[2]


def _no_host(monkeypatch):
    """Fail the test if anything would reach a host (ansible-runner) or read generations."""
    from glmops.commands import day2

    monkeypatch.setattr(runner, "run", lambda *a, **k: pytest.fail("a host was contacted"))
    monkeypatch.setattr(day2, "read_history", lambda *a, **k: pytest.fail("generations were read from hosts"))


# ---------------------------------------------------------------------------- topology names


def test_unknown_glmops_topology_lists_the_accepted_names(tmp_path):
    dep = load_deployment(write_inventory(tmp_path / "i", vllm_b200_disagg(glmops_topology="disagregated")))
    problems = rules.check(dep)
    bad = [p for p in problems if p.code == "CHOICE"]
    assert len(bad) == 1 and bad[0].path.endswith("group_vars/all.yml:glmops_topology")
    assert "'disagregated'" in bad[0].message and "accepted: agg, disagg" in bad[0].message


def test_topology_option_unknown_name_exits_2(tmp_path):
    inv = write_inventory(tmp_path / "i", vllm_b200_disagg())
    for verb in ("validate", "plan", "upgrade", "download"):
        res = CliRunner().invoke(main, [verb, "-i", str(inv), "--topology", "disag"])
        assert res.exit_code == 2, verb
        assert "'disag' is not one of 'agg', 'disagg'" in res.output


def test_topology_override_through_load_deployment_is_checked(tmp_path):
    dep = load_deployment(write_inventory(tmp_path / "i", vllm_b200_disagg()), topology="bogus")
    (p,) = [p for p in rules.check(dep) if p.code == "CHOICE"]
    assert p.path == "--topology" and "'bogus'" in p.message and "agg, disagg" in p.message


def test_misspelled_glmops_topologies_key_is_reported(tmp_path):
    gv = vllm_b200_disagg()
    gv["glmops_topologies"]["disag"] = gv["glmops_topologies"].pop("disagg")
    dep = load_deployment(write_inventory(tmp_path / "i", gv))
    problems = rules.check(dep)
    (p,) = [p for p in problems if p.code == "UNKNOWN_KEY"]
    assert p.path.endswith("glmops_topologies.disag")
    assert "unknown topology 'disag'; accepted: agg, disagg" in p.message
    assert p.hint == "did you mean 'disagg'?"


# ---------------------------------------------------------------------------- worker groups


def _inventory(root: Path, hosts_yml: dict, gv: dict) -> Path:
    root.mkdir(parents=True)
    (root / "hosts.yml").write_text(yaml.safe_dump(hosts_yml))
    (root / "group_vars").mkdir()
    (root / "group_vars" / "all.yml").write_text(yaml.safe_dump(gv))
    return root


def test_misspelled_workers_group_is_reported(tmp_path):
    hosts = {"all": {"children": {
        "glmops_worker": {"hosts": {"gpu-a": {"ansible_host": "10.0.0.11"}}},
        "glmops_routers": {"hosts": {"edge": {"ansible_host": "10.0.0.9"}}}}}}
    dep = load_deployment(_inventory(tmp_path / "i", hosts, vllm_b200_disagg()))
    (p,) = [p for p in rules.check(dep) if p.code == "UNKNOWN_GROUP"]
    assert p.path.endswith(":glmops_worker") and p.hint == "did you mean 'glmops_workers'?"
    assert "glmops_workers is not defined" in p.message and "every host of the inventory (2)" in p.message


def test_empty_workers_group_is_reported(tmp_path):
    hosts = {"all": {"hosts": {"gpu-a": {"ansible_host": "10.0.0.11"}},
                     "children": {"glmops_workers": {"hosts": {}}}}}
    dep = load_deployment(_inventory(tmp_path / "i", hosts, vllm_b200_disagg()))
    (p,) = [p for p in rules.check(dep) if p.code == "UNKNOWN_GROUP"]
    assert "glmops_workers has no hosts" in p.message


def test_other_glmops_groups_are_fine(tmp_path):
    """Groups such as glmops_prefill (bench/plan_scale.py) are the user's own: no problem."""
    hosts = {"all": {"children": {"glmops_workers": {"children": {
        "glmops_prefill": {"hosts": {"gpu-a": {"ansible_host": "10.0.0.11"}}},
        "glmops_decode": {"hosts": {"gpu-b": {"ansible_host": "10.0.0.12"}}}}}}}}
    gv = vllm_b200_disagg()
    gv["glmops_topologies"]["disagg"]["pools"] = {"prefill": {"tp": 8, "hosts": ["glmops_prefill"]},
                                                  "decode": {"tp": 8, "hosts": ["glmops_decode"]}}
    problems = rules.validate(load_deployment(_inventory(tmp_path / "i", hosts, gv)))[1]
    assert not [p for p in problems if p.code in ("UNKNOWN_GROUP", "UNKNOWN_HOST", "POOLS")], problems


def test_pool_hosts_naming_a_misspelled_group_get_a_close_match(tmp_path):
    gv = vllm_b200_disagg()
    gv["glmops_topologies"]["disagg"]["pools"]["prefill"]["hosts"] = ["glmops_worker"]
    dep = load_deployment(write_inventory(tmp_path / "i", gv))
    (p,) = [p for p in rules.check(dep) if p.code == "UNKNOWN_HOST"]
    assert "'glmops_worker' is neither a host nor a group" in p.message
    assert p.hint == "did you mean 'glmops_workers'?"


# ---------------------------------------------------------------------------- upgrade --set


def test_parse_sets_refuses_an_empty_value():
    got, problems = G.parse_sets(["engine_version=", "glmops_image= ", "max_batch_size=8"])
    assert got == {"glmops_max_batch_size": 8}
    assert len(problems) == 2
    assert "'engine_version='" in problems[0] and "empty value for glmops_engine_version" in problems[0]
    assert "engine_version=0.33.0" in problems[0]


def test_parse_sets_reports_every_bad_item_at_once():
    got, problems = G.parse_sets(["engine_verison=1", "kv_cache=fp8", "novalue", "speculative={a: [",
                                  "engine_version=", "max_batch_size=4"])
    assert got == {"glmops_max_batch_size": 4}
    items = ["engine_verison=1", "kv_cache=fp8", "novalue", "speculative={a: [", "engine_version="]
    assert len(problems) == len(items)
    for item, problem in zip(items, problems):
        assert problem.startswith(f"--set {item!r}:"), problem
    assert "did you mean 'engine_version'?" in problems[0]


def test_upgrade_empty_engine_version_exits_2_before_any_host(monkeypatch):
    monkeypatch.chdir(REPO)
    _no_host(monkeypatch)
    res = CliRunner().invoke(main, ["upgrade", "-i", "inventories/lab", "-e", "engine_version="])
    assert res.exit_code == 2, res.output
    assert "empty value for glmops_engine_version" in res.output and "no host contacted" in res.output


def test_upgrade_lists_set_and_inventory_problems_together(monkeypatch):
    """Bad --set items and what the rules find with the good ones: one list, exit 2."""
    monkeypatch.chdir(REPO)
    _no_host(monkeypatch)
    res = CliRunner().invoke(main, ["upgrade", "-i", "inventories/lab", "-e", "engine_verison=0.33.0",
                                    "-e", "engine_version=", "-e", "kv_cache_dtype=fp5",
                                    "-e", "engine_args={tensor-paralel-size: 2}"])
    assert res.exit_code == 2, res.output
    out = res.output
    assert "4 problem(s)" in out or "5 problem(s)" in out
    for needle in ("glmops_engine_verison", "empty value for glmops_engine_version", "'fp5'",
                   "[ENGINE_FLAG]", "tensor-paralel-size"):
        assert needle in out, needle


# ---------------------------------------------------------------------------- download --endpoint


@pytest.mark.parametrize("url", ["ftp://hub.local", "hub.local:8080", "http://", "https://h:99999", "file:///x"])
def test_download_endpoint_must_be_http_url(monkeypatch, url):
    from glmops.commands import download as deploy

    monkeypatch.chdir(REPO)
    monkeypatch.setattr(runner, "run", lambda *a, **k: pytest.fail("a host was contacted"))
    monkeypatch.setattr(deploy, "load_plan", lambda *a, **k: pytest.fail("planned before checking --endpoint"))
    res = CliRunner().invoke(main, ["download", "-i", "inventories/lab", "--endpoint", url])
    assert res.exit_code == 2, res.output
    assert f"--endpoint {url!r}" in res.output and "http(s)://HOST[:PORT]" in res.output


def test_download_accepts_an_http_endpoint(monkeypatch):
    """A good URL gets past the check (to planning, stopped here)."""
    from glmops.commands import download as deploy

    monkeypatch.chdir(REPO)
    monkeypatch.setattr(runner, "run", lambda *a, **k: pytest.fail("a host was contacted"))

    def stop(*a, **k):
        raise SystemExit(7)

    monkeypatch.setattr(deploy, "load_plan", stop)
    res = CliRunner().invoke(main, ["download", "-i", "inventories/lab", "--endpoint", "http://10.0.0.5:8080"])
    assert res.exit_code == 7


# ---------------------------------------------------------------------------- SECRET_IN_ARGV names the key written


def test_secret_in_argv_names_the_key_the_user_wrote(tmp_path, monkeypatch):
    """A secret flag inside a mapping is named down to the key the user wrote (router.args.api-key,
    engine_config.auth.hf_token, not the mapping or its first segment); one passed with
    `upgrade --set` is named as `--set KEY` (the option the user typed), before any host."""
    gv = vllm_b200_disagg(glmops_engine_config={"auth": {"hf_token": "hf_B"}})
    gv["glmops_topologies"]["disagg"]["router"]["args"] = {"api-key": "sk-C"}
    inv = write_inventory(tmp_path / "i", gv)
    _plan, problems = rules.validate(load_deployment(inv))
    paths = {p.message.split("'")[1]: p.path for p in problems if p.code == "SECRET_IN_ARGV"}
    assert paths["api-key"].endswith("all.yml:glmops_topologies.disagg.router.args.api-key"), paths
    assert paths["auth.hf_token"].endswith("all.yml:glmops_engine_config.auth.hf_token"), paths
    _no_host(monkeypatch)
    clean = write_inventory(tmp_path / "c", vllm_b200_disagg())
    res = CliRunner().invoke(main, ["upgrade", "-i", str(clean), "--set", "engine_args={api-key: sk-ABCDEFGH}"])
    assert res.exit_code == 2, res.output
    assert "[SECRET_IN_ARGV] --set engine_args.api-key: engine flag 'api-key'" in res.output, res.output
    assert "--override" not in res.output and "sk-ABCDEFGH" not in res.output


# ---------------------------------------------------------------------------- glmops_engine: a part, not an engine


@pytest.mark.parametrize("part,kind", [("etcd", "store"), ("nats", "store"), ("vllm_router", "router"),
                                       ("mocker", "backend")])
def test_a_catalog_part_as_glmops_engine_is_one_clear_problem(tmp_path, part, kind):
    """glmops_engine naming a catalog entry that is no engine (Dynamo's discovery stores, a router,
    Dynamo's mocker backend) is one CATALOG_KEY problem naming the key, the value, what it is and
    the accepted engines; nothing else (no ENGINE_VERSION for a version it does not have)."""
    dep = load_deployment(write_inventory(tmp_path / "i", vllm_b200_disagg(glmops_engine=part)))
    _plan, problems = rules.validate(dep)
    assert [p.code for p in problems] == ["CATALOG_KEY"], problems
    (p,) = problems
    assert p.path.endswith("all.yml:glmops_engine"), p.path
    assert p.message.startswith(f"glmops_engine {part!r} is not an engine but the catalog's {kind} "), p.message
    assert p.message.endswith("accepted: trtllm, vllm, sglang, dynamo"), p.message
    res = CliRunner().invoke(main, ["validate", "-i", str(tmp_path / "i")])
    assert res.exit_code == 2 and res.output.count("[") == 1, res.output


def test_an_unknown_engine_lists_only_engines(tmp_path):
    dep = load_deployment(write_inventory(tmp_path / "i", vllm_b200_disagg(glmops_engine="vlm")))
    _plan, problems = rules.validate(dep)
    assert [str(p).split("(hint")[0].split(": ", 1)[1].strip() for p in problems if p.code == "CATALOG_KEY"] == [
        "glmops_engine 'vlm' is unknown; accepted: trtllm, vllm, sglang, dynamo"], problems
