"""glmops.inventory: Ansible inventory -> Deployment (values, precedence, sources, problems)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from inventory_factory import REV, trtllm_b200, vllm_b200_disagg, write_inventory

from glmops import inventory
from glmops.inventory import load_deployment
from glmops.model import ValidationError

ROOT = Path(__file__).resolve().parents[2]


def test_repo_b200_inventory_reads_seed_000_values():
    dep = load_deployment(ROOT / "inventories/b200", topology="disagg")
    assert (dep.model, dep.variant, dep.engine, dep.hardware) == ("glm-5.3-flash", "fp8", "trtllm", "b200")
    assert dep.topology == "disagg"
    assert [p.role for p in dep.pools] == ["prefill", "decode"]  # context/generation mapped
    pre, dec = dep.pools
    assert (pre.tp, pre.ep, pre.gpus, pre.port) == (4, 4, [0, 1, 2, 3], 8001)
    assert (dec.tp, dec.ep, dec.gpus, dec.port) == (4, 4, [4, 5, 6, 7], 8002)
    assert dep.hosts["b200-node-0"].address == "192.0.2.10"
    assert dep.hosts["b200-node-0"].gpus == list(range(8))
    assert dep.checkpoint.repo == "zai-org/GLM-5.3-Flash" and dep.checkpoint.size_gib == 306
    assert dep.extra["problems"] == []
    # plain Python types, not Ansible's tagged ones
    assert type(dep.model) is str and type(pre.tp) is int and type(dep.max_batch_size) is int


def test_sources_name_the_inventory_file_and_key(tmp_path):
    inv = write_inventory(tmp_path / "inv", vllm_b200_disagg(glmops_kv_cache_dtype="fp8"))
    dep = load_deployment(inv)
    gv = str(inv / "group_vars" / "all.yml")
    assert dep.source("kv_cache_dtype") == f"{gv}:glmops_kv_cache_dtype"
    assert dep.source("pools.prefill.tp") == f"{gv}:glmops_topologies.disagg.pools.prefill.tp"
    assert dep.source("checkpoint.revision") == f"{gv}:glmops_checkpoint.revision"
    assert dep.source("hosts.gpu-a").endswith("hosts.yml:gpu-a")


def test_precedence_group_files_and_host_vars(tmp_path):
    gv = vllm_b200_disagg(glmops_kv_cache_dtype="auto")
    inv = write_inventory(
        tmp_path / "inv", gv,
        hosts={"gpu-a": {"ansible_host": "10.0.0.11"}, "gpu-b": {"ansible_host": "10.0.0.12"}},
        group_files={"glmops_workers": {"glmops_kv_cache_dtype": "fp8", "glmops_rdma_devices": ["mlx5_0"]}},
        host_vars={"gpu-b": {"glmops_address": "10.1.0.12", "glmops_gpus": [0, 1, 2, 3], "glmops_rdma_devices": ["mlx5_1"]}},
    )
    dep = load_deployment(inv)
    # group_vars/glmops_workers.yml beats group_vars/all.yml (Ansible's order)
    assert dep.kv_cache_dtype == "fp8"
    assert dep.source("kv_cache_dtype").endswith("group_vars/glmops_workers.yml:glmops_kv_cache_dtype")
    a, b = dep.hosts["gpu-a"], dep.hosts["gpu-b"]
    assert (a.address, a.gpus, a.rdma_devices) == ("10.0.0.11", list(range(8)), ["mlx5_0"])
    assert (b.address, b.gpus, b.rdma_devices) == ("10.1.0.12", [0, 1, 2, 3], ["mlx5_1"])
    assert dep.source("hosts.gpu-b.gpus").endswith("host_vars/gpu-b.yml:glmops_gpus")


def test_topology_and_overrides(tmp_path):
    inv = write_inventory(tmp_path / "inv", trtllm_b200("agg"))
    assert load_deployment(inv).topology == "agg"
    dep = load_deployment(inv, topology="disagg", overrides={"max_batch_size": 16, "glmops_kv_cache_dtype": "fp8"})
    assert dep.topology == "disagg" and dep.source("topology") == "--topology"
    assert dep.max_batch_size == 16 and dep.kv_cache_dtype == "fp8"
    assert dep.source("max_batch_size") == "--set max_batch_size"


def test_pool_hosts_expand_groups_and_default_speculative(tmp_path):
    gv = vllm_b200_disagg(glmops_speculative={"method": "mtp", "num_speculative_tokens": 3})
    gv["glmops_topologies"]["disagg"]["pools"]["prefill"] = {"tp": 8, "hosts": ["glmops_prefill"]}
    gv["glmops_topologies"]["disagg"]["pools"]["decode"] = {"tp": 8, "hosts": ["gpu-b"], "speculative": {"method": "mtp", "num_speculative_tokens": 1}}
    inv = write_inventory(tmp_path / "inv", gv,
                          hosts={"gpu-a": {}, "gpu-b": {}}, groups={"glmops_prefill": ["gpu-a"]})
    dep = load_deployment(inv)
    assert dep.pool("prefill").hosts == ["gpu-a"] and dep.pool("decode").hosts == ["gpu-b"]
    assert dep.pool("prefill").speculative == {"method": "mtp", "num_speculative_tokens": 3}
    assert dep.pool("decode").speculative == {"method": "mtp", "num_speculative_tokens": 1}
    assert dep.router.host == "gpu-a"


def test_catalog_layout_fills_missing_pools(tmp_path):
    gv = trtllm_b200("disagg")
    del gv["glmops_topologies"]
    dep = load_deployment(write_inventory(tmp_path / "inv", gv))
    assert dep.extra["layout"] == "trtllm-b200-disagg"
    assert [(p.role, p.tp, p.ep, p.gpus) for p in dep.pools] == [
        ("prefill", 4, 4, [0, 1, 2, 3]), ("decode", 4, 4, [4, 5, 6, 7])]
    assert dep.source("pools.prefill.tp").startswith("catalog recipes.yaml:layouts[trtllm-b200-disagg]")


def test_type_errors_are_collected_not_raised(tmp_path):
    gv = vllm_b200_disagg(glmops_max_seq_len="lots", glmops_multimodal="maybe", glmops_env=["A=1"])
    gv["glmops_topologies"]["disagg"]["pools"]["prefill"]["tp"] = [4]
    gv["glmops_topologies"]["disagg"]["pools"]["decode"]["gpus"] = "four"
    dep = load_deployment(write_inventory(tmp_path / "inv", gv))
    problems = dep.extra["problems"]
    paths = [p.path for p in problems]
    assert all(p.code == "TYPE" for p in problems), problems
    for key in ("glmops_max_seq_len", "glmops_multimodal", "glmops_env",
                "glmops_topologies.disagg.pools.prefill.tp", "glmops_topologies.disagg.pools.decode.gpus"):
        assert any(p.endswith(key) for p in paths), (key, paths)
    msg = next(p.message for p in problems if p.path.endswith("glmops_max_seq_len"))
    assert "'lots'" in msg and "accepted: an integer" in msg
    # the bad values fell back to defaults, so later rules can still run
    assert dep.max_seq_len is None and dep.pool("prefill").tp == 1


def test_lenient_conversions_follow_ansible(tmp_path):
    gv = vllm_b200_disagg(glmops_max_seq_len="65536", glmops_multimodal="yes")
    dep = load_deployment(write_inventory(tmp_path / "inv", gv))
    assert dep.max_seq_len == 65536 and dep.multimodal is True
    assert dep.extra["problems"] == []


def test_unknown_variables_and_keys(tmp_path):
    gv = vllm_b200_disagg(glmops_kv_cache_dtyp="fp8", glmops_checkpoint={"revison": REV})
    gv["glmops_topologies"]["disagg"]["pools"]["prefill"]["tensor_parallel"] = 4
    dep = load_deployment(write_inventory(tmp_path / "inv", gv))
    by_path = {p.path.rsplit(":", 1)[-1]: p for p in dep.extra["problems"]}
    assert by_path["glmops_kv_cache_dtyp"].code == "UNKNOWN_KEY"
    assert "glmops_kv_cache_dtype" in by_path["glmops_kv_cache_dtyp"].hint
    assert "revision" in by_path["glmops_checkpoint.revison"].hint
    assert "accepted:" in by_path["glmops_topologies.disagg.pools.prefill.tensor_parallel"].message


def test_deployment_wide_values_must_agree_on_workers(tmp_path):
    inv = write_inventory(tmp_path / "inv", vllm_b200_disagg(),
                          hosts={"gpu-a": {}, "gpu-b": {}},
                          host_vars={"gpu-b": {"glmops_model": "glm-5.3"}})
    problems = load_deployment(inv).extra["problems"]
    conflict = [p for p in problems if p.code == "HOST_VAR_CONFLICT"]
    assert len(conflict) == 1
    assert "glm-5.3" in conflict[0].message and "gpu-b" in conflict[0].message
    assert conflict[0].path.endswith("host_vars/gpu-b.yml:glmops_model")


@pytest.mark.parametrize("where", ["host_vars", "inline"])
def test_a_deployment_wide_value_set_only_on_the_first_worker_is_a_conflict(tmp_path, where):
    """The first worker is the reference: its own override must not be taken as everyone's."""
    own = {"glmops_max_seq_len": 4096}
    hosts = {"gpu-a": dict(own) if where == "inline" else {}, "gpu-b": {}, "gpu-c": {}}
    inv = write_inventory(tmp_path / "inv", vllm_b200_disagg(), hosts=hosts,
                          host_vars={"gpu-a": own} if where == "host_vars" else None)
    conflict = [p for p in load_deployment(inv).extra["problems"] if p.code == "HOST_VAR_CONFLICT"]
    assert conflict, "gpu-a's own glmops_max_seq_len was not compared with gpu-b/gpu-c"
    assert all("4096" in p.message and "gpu-a" in p.message for p in conflict)


def test_unreadable_inventories_raise_validation_error(tmp_path):
    with pytest.raises(ValidationError) as err:
        load_deployment(tmp_path / "missing")
    assert err.value.problems[0].code == "INVENTORY" and "does not exist" in err.value.problems[0].message
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "hosts.yml").write_text("all:\n  hosts:\n    a: {ansible_host: [\n")
    with pytest.raises(ValidationError) as err:
        load_deployment(bad)
    assert err.value.problems[0].code == "INVENTORY"
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "hosts.yml").write_text("all:\n  vars:\n    glmops_model: glm-5.3\n")
    with pytest.raises(ValidationError) as err:
        load_deployment(empty)
    assert "no hosts" in err.value.problems[0].message


def test_variables_doc_is_generated_and_current():
    from glmops import variables

    doc = (ROOT / "docs" / "variables.md").read_text()
    assert doc == variables.markdown(), "docs/variables.md is stale: python -m glmops.variables > docs/variables.md"
    for name in list(inventory.VARIABLES) + list(inventory.HOST_VARIABLES):
        assert f"| `{name}` |" in doc, name
    for key in list(inventory.POOL_KEYS) + list(inventory.CHECKPOINT_KEYS) + list(inventory.ROUTER_KEYS):
        assert f"| `{key}` |" in doc, key
    # catalog keys are the choices (one source of truth)
    assert "`ascend_950pr_8x`" in doc and "`glm-5.3-flash`" in doc


def test_argument_spec_shape():
    from glmops import variables

    spec = variables.argument_spec()
    opts = spec["options"]
    assert set(opts) == set(inventory.VARIABLES) | set(inventory.HOST_VARIABLES)
    assert opts["glmops_model"]["required"] is True and "glm-5.3" in opts["glmops_model"]["choices"]
    assert opts["glmops_gpus"] == {"type": "list", "elements": "int", "description": [inventory.HOST_VARIABLES["glmops_gpus"].description]}
    assert opts["glmops_checkpoint"]["options"]["mode"]["choices"] == ["per_node", "fanout", "shared"]
    assert opts["glmops_readiness_timeout_s"]["default"] == 1800


def test_topology_without_pools_uses_the_layout_but_keeps_its_router(tmp_path):
    gv = trtllm_b200("disagg")
    gv["glmops_topologies"]["disagg"] = {"router": {"port": 9000}}
    dep = load_deployment(write_inventory(tmp_path / "inv", gv))
    assert dep.extra["layout"] == "trtllm-b200-disagg" and [p.role for p in dep.pools] == ["prefill", "decode"]
    assert dep.router.port == 9000


def test_inventory_file_path_reads_adjacent_group_vars(tmp_path):
    inv = write_inventory(tmp_path / "inv", vllm_b200_disagg(glmops_kv_cache_dtype="fp8"))
    dep = load_deployment(inv / "hosts.yml")
    assert dep.kv_cache_dtype == "fp8" and dep.name == "inv"


def test_yaml_error_in_group_vars_is_a_problem_not_a_traceback(tmp_path):
    import pytest as _pytest

    from glmops.model import ValidationError
    from inventory_factory import vllm_b200_disagg, write_inventory

    root = write_inventory(tmp_path / "inv", vllm_b200_disagg())
    with open(root / "group_vars" / "all.yml", "a") as fh:
        fh.write("glmops_env: [unclosed\n")
    with _pytest.raises(ValidationError) as err:
        load_deployment(root)
    (problem,) = err.value.problems
    assert problem.code == "INVENTORY" and "YAML" in problem.message


@pytest.mark.parametrize("over,path_part", [
    ({"glmops_engine_args": {"trust-remote-code": ["yes\n", "ExecStartPre=+/usr/bin/touch", "/tmp/pwned\n"]}},
     "glmops_engine_args.trust-remote-code[0]"),
    ({"glmops_served_model_name": "flash\nExecStartPre=+/bin/true"}, "glmops_served_model_name"),
    ({"glmops_engine_version": "0.32.0\n"}, "glmops_engine_version"),
    ({"glmops_env": {"FOO": "bar\nBAZ=1"}}, "glmops_env.FOO"),
])
def test_a_newline_in_any_value_is_refused_before_rendering(tmp_path, over, path_part):
    """A newline would end ExecStart= (or an env line) and start a directive of its own, run as
    root with '+': every string under glmops_* is one line, refused with the key path."""
    inv = write_inventory(tmp_path / "inv", vllm_b200_disagg(**over))
    problems = [p for p in load_deployment(inv).extra["problems"] if p.code == "CONTROL_CHAR"]
    assert problems, "a newline was accepted"
    assert any(path_part in p.path for p in problems), [p.path for p in problems]
    assert all("accepted: one line of printable text" in p.message for p in problems)


def test_env_names_and_secret_values_in_problems(tmp_path):
    gv = vllm_b200_disagg(glmops_env={"A=B": "x", "FOO\n": "y", "HF_TOKEN": ["hf_SECRETLIST"]})
    problems = load_deployment(write_inventory(tmp_path / "inv", gv)).extra["problems"]
    text = "\n".join(p.message for p in problems)
    assert "environment variable name 'A=B' is not accepted" in text
    assert "hf_SECRETLIST" not in text and "<redacted>" in text


@pytest.mark.parametrize("address", ["-oProxyCommand=touch /tmp/pwned", "bad address; rm -rf /", "10.0.0.1\n"])
def test_host_addresses_that_are_not_addresses_are_refused(tmp_path, address):
    inv = write_inventory(tmp_path / "inv", vllm_b200_disagg(), hosts={"gpu-a": {"ansible_host": address}})
    problems = [p for p in load_deployment(inv).extra["problems"] if p.code == "ADDRESS"]
    assert problems and "accepted: a host name, an IPv4 or an IPv6 address" in problems[0].message


def test_systemd_quote_refuses_control_characters():
    from glmops.render import systemd_quote

    with pytest.raises(ValueError, match="control character"):
        systemd_quote("yes\nExecStartPre=+/bin/true")
    assert systemd_quote("plain") == "plain"


def test_a_typo_in_another_hosts_vars_is_reported_once(tmp_path):
    inv = write_inventory(tmp_path / "inv", vllm_b200_disagg(glmops_bogus_all=1),
                          hosts={"gpu-a": {}, "gpu-b": {}, "gpu-c": {}},
                          host_vars={"gpu-c": {"glmops_max_seq_lenn": 4096}})
    problems = [p for p in load_deployment(inv).extra["problems"] if p.code == "UNKNOWN_KEY"]
    from glmops.rules import _dedupe

    problems = _dedupe(problems)
    paths = sorted(p.path.rsplit("/", 1)[-1] for p in problems)
    assert paths == ["all.yml:glmops_bogus_all", "gpu-c.yml:glmops_max_seq_lenn"], paths
    assert "did you mean 'glmops_max_seq_len'" in next(p.hint for p in problems if "lenn" in p.path)
