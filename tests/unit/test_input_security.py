"""Issue 20, "no value can change what a unit, a path or ssh does; no input hangs": one test per
defect of the probe (1,973 mutated inventories), each built the way a user writes an inventory
(``inventory_factory.write_inventory``) and run through the same entry points as the CLI.

Accepted shapes are those of the tools that read the values: systemd.exec/systemd.syntax
(an ``ExecStart=`` prefix ``+!@:-`` changes privileges, ``%`` is a specifier, whitespace splits
``Environment=``), useradd(8)'s default NAME_REGEX ``[a-z_][a-z0-9_-]*``, the OCI reference
grammar (github.com/distribution/reference), OpenSSH (a leading ``-`` is an option)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from inventory_factory import REV, trtllm_b200, vllm_b200_disagg, without_venv_advice, write_inventory

from glmops import rules, runner
from glmops.cli import main
from glmops.inventory import load_deployment
from glmops.model import ValidationError

REPO = Path(__file__).resolve().parents[2]


def _problems(inv: Path) -> list:
    try:
        dep = load_deployment(inv)
    except ValidationError as exc:
        return without_venv_advice(exc.problems)
    return without_venv_advice(rules.validate(dep)[1])


def _codes(problems) -> list[str]:
    return [p.code for p in problems]


def _cpu_lab(**over) -> dict:
    """inventories/lab's variables (the shipped lab inventory, read from its file), agg on one host."""
    gv = yaml.safe_load((REPO / "inventories" / "lab" / "group_vars" / "all.yml").read_text())
    gv.update(glmops_topology="agg", glmops_topologies={"agg": {"pools": {"agg": {"tp": 1, "port": 8001}}}})
    gv.update(over)
    return gv


# ------------------------------------------------------------------------------- 1. host keys


def test_every_run_checks_host_keys(tmp_path, monkeypatch):
    """ansible-runner sets ANSIBLE_HOST_KEY_CHECKING=False when the environment lacks it; the
    run must see Ansible's HOST_KEY_CHECKING as True."""
    monkeypatch.setenv("GLMOPS_RUNS_DIR", str(tmp_path / "runs"))
    monkeypatch.delenv("ANSIBLE_HOST_KEY_CHECKING", raising=False)
    inv = tmp_path / "hosts.yml"
    inv.write_text("all:\n  hosts:\n    localhost:\n      ansible_connection: local\n"
                   f"      ansible_python_interpreter: {sys.executable}\n")
    book = tmp_path / "hkc.yml"
    book.write_text("- hosts: localhost\n  gather_facts: false\n  tasks:\n"
                    "    - ansible.builtin.debug:\n"
                    "        msg: \"hkc=[{{ lookup('ansible.builtin.config', 'HOST_KEY_CHECKING') }}]\"\n")
    result = runner.run("hkc-test", str(book), inv, quiet=True)
    assert result.rc == 0, result.failures
    stdout = (Path(result.artifacts) / "artifacts" / "run" / "stdout").read_text()
    assert "hkc=[True]" in stdout, stdout[-2000:]


def test_an_unknown_host_key_failure_names_how_to_accept_it():
    result = runner.RunResult(verb="deploy", rc=1, status="failed", artifacts=Path("."), seconds=0.0)
    runner._collect(result, {"event": "runner_on_unreachable", "event_data": {
        "host": "gpu-a", "task": "Gathering Facts",
        "res": {"msg": "Failed to connect to the host via ssh: Host key verification failed.", "unreachable": True}}})
    assert "glmops known-hosts -i" in result.failures[0] and "ssh-keygen -R" in result.failures[0]


def test_known_hosts_reads_the_inventory_s_known_hosts_file_and_refuses_option_addresses(tmp_path):
    from glmops.commands import hostkeys

    inv = REPO / "inventories" / "lab"
    rows = hostkeys.targets(str(inv), str(tmp_path / "kh"))
    assert [(r[0], r[1], r[2]) for r in rows] == [("lab-1", "10.77.0.11", 22), ("lab-2", "10.77.0.12", 22),
                                                  ("lab-3", "10.77.0.13", 22)]
    assert {r[3] for r in rows} == {"/var/lib/glmops-lab/glmops/known_hosts"}  # the lab's own file
    bad = write_inventory(tmp_path / "bad", vllm_b200_disagg(), hosts={"gpu-a": {"ansible_host": "-oProxyCommand=id"}})
    r = CliRunner().invoke(main, ["known-hosts", "-i", str(bad), "--file", str(tmp_path / "kh")])
    assert r.exit_code == 2 and "-oProxyCommand=id" in r.output and not (tmp_path / "kh").exists()


# ------------------------------------------------------------------------ 2. writers that stay


@pytest.mark.parametrize("host", ["/x/y", "../..", "/", "..", "-oProxyCommand=touch /tmp/x"])
def test_host_names_that_are_paths_or_options_are_refused(tmp_path, host):
    inv = write_inventory(tmp_path / "inv", vllm_b200_disagg(), hosts={host: {"ansible_host": "10.0.0.11"}})
    out = tmp_path / "out"
    r = CliRunner().invoke(main, ["plan", "-i", str(inv), "--out", str(out)])
    assert r.exit_code == 2, r.output
    assert "ADDRESS" in r.output and repr(host) in r.output
    assert not out.exists() and not (tmp_path / "x").exists()


def test_write_tree_refuses_any_path_outside_its_root_even_past_the_loader(tmp_path):
    from glmops import render

    inv = write_inventory(tmp_path / "inv", vllm_b200_disagg())
    dep = load_deployment(inv)
    plan, problems = rules.validate(dep)
    assert not without_venv_advice(problems)
    out = tmp_path / "out"
    for svc in plan.services:  # a host name the loader would refuse, forced in
        svc.host = "../.."
    with pytest.raises(ValueError, match="cannot name a directory"):
        render.write_tree(dep, plan, out)
    dep.config_dir = "/etc/glmops/../../tmp"
    with pytest.raises(ValueError, match="is not below"):
        render.host_files(dep, plan, "../..")
    assert not out.exists()


def test_a_symlink_inside_the_out_dir_cannot_redirect_a_write(tmp_path):
    from glmops import render

    dep = load_deployment(write_inventory(tmp_path / "inv", vllm_b200_disagg()))
    plan, _ = rules.validate(dep)
    out = tmp_path / "out"
    (out / "gpu-a").mkdir(parents=True)
    (tmp_path / "elsewhere").mkdir()
    (out / "gpu-a" / "etc").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(ValueError, match="outside"):
        render.write_tree(dep, plan, out)
    assert list((tmp_path / "elsewhere").iterdir()) == []


@pytest.mark.parametrize("key,value", [
    ("glmops_config_dir", "/etc/glmops/../../tmp"), ("glmops_config_dir", "etc/glmops"),
    ("glmops_state_dir", "/var/lib/../../tmp"), ("glmops_venv_root", "/opt/./venvs"),
])
def test_dirs_with_dot_segments_or_relative_are_refused(tmp_path, key, value):
    problems = _problems(write_inventory(tmp_path / "inv", vllm_b200_disagg(**{key: value})))
    bad = [p for p in problems if p.code == "PATH"]
    assert len(bad) == 1 and bad[0].path.endswith(key) and repr(value) in bad[0].message, problems


def test_checkpoint_repo_cannot_leave_model_dir(tmp_path):
    gv = vllm_b200_disagg(glmops_checkpoint={"repo": "org/../../etc", "revision": REV})
    problems = _problems(write_inventory(tmp_path / "inv", gv))
    bad = [p for p in problems if p.path.endswith("glmops_checkpoint.repo")]
    assert len(bad) == 1 and "'org/../../etc'" in bad[0].message and "repo id" in bad[0].message
    gv = vllm_b200_disagg(glmops_checkpoint={"revision": "../../../etc", "offline": False})
    problems = _problems(write_inventory(tmp_path / "inv2", gv))
    assert [p.code for p in problems if p.path.endswith("glmops_checkpoint.revision")] == ["SHAPE"]


def test_plan_out_empty_is_refused(tmp_path):
    inv = write_inventory(tmp_path / "inv", vllm_b200_disagg())
    r = CliRunner().invoke(main, ["plan", "-i", str(inv), "--out", ""])
    assert r.exit_code == 2 and "--out" in r.output


# -------------------------------------------------------------------- 3. one shape per value


@pytest.mark.parametrize("key,value,code", [
    # systemd.service(5) ExecStart= prefixes: + ! !! @ : - change privileges or meaning
    *[("glmops_venv_root", f"{c}/opt/glmops/venvs", "PATH") for c in ("+", "!", "!!", "@", ":", "-")],
    ("glmops_venv_root", "/opt/glm ops", "PATH"),
    ("glmops_state_dir", "/var/lib/glmops LD_PRELOAD=/tmp/x.so", "PATH"),  # splits Environment=HOME=
    ("glmops_state_dir", "/var/lib/%n", "PATH"),  # a specifier systemd expands
    ("glmops_config_dir", "/etc/%H", "PATH"),
    ("glmops_service_user", "", "USER"),  # empty User= is root
    ("glmops_service_user", "%n", "USER"), ("glmops_service_user", "a b", "USER"),
    ("glmops_service_user", "a;b", "USER"), ("glmops_service_user", "Root", "USER"),
    ("glmops_image", "--privileged", "IMAGE"), ("glmops_image", "Nvcr.io/UPPER", "IMAGE"),
    ("glmops_image", "repo/img:tag --privileged", "IMAGE"),
    ("glmops_served_model_name", "--trust-remote-code", "SHAPE"),
    ("glmops_engine_version", "--pre", "SHAPE"),
    ("glmops_pip_extra", ["--index-url=http://10.0.0.9/simple"], "SHAPE"),
    ("glmops_readiness_timeout_s", -1, "RANGE"), ("glmops_readiness_timeout_s", 1e300, "RANGE"),
    ("glmops_max_num_tokens", 1e300, "LIMIT"), ("glmops_max_batch_size", 10 ** 30, "LIMIT"),
])
def test_values_that_change_a_unit_s_meaning_are_refused(tmp_path, key, value, code):
    problems = _problems(write_inventory(tmp_path / "inv", vllm_b200_disagg(**{key: value})))
    mine = [p for p in problems if p.path.endswith(key) or p.path.endswith(f"{key}[0]")]
    assert [p.code for p in mine] == [code], problems
    assert "accepted:" in mine[0].message and len(mine[0].message) < 400


def test_host_addresses_and_nics_are_never_options(tmp_path):
    hosts = {"gpu-a": {"ansible_host": "10.0.0.11", "glmops_address": "-oProxyCommand=id",
                       "glmops_rdma_devices": ["-x", "mlx5_0"]}}
    problems = _problems(write_inventory(tmp_path / "inv", vllm_b200_disagg(), hosts=hosts))
    by = {p.path.rsplit(".", 1)[-1]: p.code for p in problems}
    assert by.get("glmops_address") == "ADDRESS" and by.get("glmops_rdma_devices") == "SHAPE", problems


@pytest.mark.parametrize("name", ["CUDA_VISIBLE_DEVICES", "HF_HUB_OFFLINE", "LD_PRELOAD", "LD_LIBRARY_PATH",
                                  "PYTHONPATH", "PATH"])
def test_reserved_env_names_are_refused(tmp_path, name):
    gv = vllm_b200_disagg(glmops_env={name: "/tmp/x"})
    gv["glmops_topologies"]["disagg"]["pools"]["decode"]["env"] = {name: "1"}
    problems = _problems(write_inventory(tmp_path / "inv", gv))
    bad = [p for p in problems if p.code == "ENV_RESERVED"]
    assert [p.path.rsplit(".", 1)[-1] for p in bad] == [name, name], problems


def test_the_shipped_values_keep_their_shapes():
    """Every catalog image and the defaults of the definitions pass their own shapes."""
    from glmops import catalog, variables

    for name, var in {**variables.VARIABLES, **variables.HOST_VARIABLES, **variables.CHECKPOINT_KEYS}.items():
        if var.default is not None:
            assert variables.value_problem(var, var.default) is None, name
    for key, engine in catalog.load().engines.items():
        images = engine.get("default_image")
        for image in (images.values() if isinstance(images, dict) else [images]):
            if isinstance(image, str):
                assert variables.value_problem(variables.VARIABLES["glmops_image"], image) is None, (key, image)


def test_variables_doc_shows_every_range_and_shape():
    doc = (REPO / "docs" / "variables.md").read_text()
    from glmops import variables

    for table in (variables.VARIABLES, variables.HOST_VARIABLES, variables.POOL_KEYS, variables.ROUTER_KEYS,
                  variables.CHECKPOINT_KEYS):
        for name, var in table.items():
            row = next(line for line in doc.splitlines() if line.startswith(f"| `{name}` |")
                       and (var.description.split("`")[0][:30] in line))
            if var.bounds:
                assert f"Range: {var.bounds[0]:,}..{var.bounds[1]:,}." in row, name
            if var.shape:
                assert "Shape: " in row, name


# -------------------------------------------------------------------------------- 4. secrets


def test_secret_names_with_care_and_no_false_positives():
    """The flag names are the engines' own option lists (glmops/catalog/flags/)."""
    from glmops.catalog import flags as F
    from glmops.model import SECRET_NAME

    names = set()
    for path in F.FLAGS_DIR.glob("*.txt"):
        for line in path.read_text().splitlines():
            if line.strip() and not line.startswith(("#", "[")):
                names.update(w.lstrip("-") for w in line.split() if w.startswith("--"))
    secret = sorted(n for n in names if SECRET_NAME.search(n))
    assert secret == ["admin-api-key", "api-key", "control-plane-api-keys", "hf-token", "oracle-password",
                      "ssl-keyfile-password"]
    for harmless in ("allow-credentials", "long-prefill-token-threshold", "speculative-token-map",
                     "dbo-decode-token-threshold", "bucket-time-to-first-token", "max-num-batched-tokens"):
        assert harmless in names and not SECRET_NAME.search(harmless)
    for env in ("OPENAI_KEY", "PRIVATE_KEY", "DB_PASS", "REDIS_PASSWORD", "API_KEYS", "HF_TOKEN", "AWS_SECRET_ACCESS_KEY"):
        assert SECRET_NAME.search(env), env


def test_harmless_flags_are_not_refused_as_secrets(tmp_path):
    gv = vllm_b200_disagg(glmops_engine_args={"long-prefill-token-threshold": 64, "allowed-origins": '["*"]'})
    problems = _problems(write_inventory(tmp_path / "inv", gv))
    assert "SECRET_IN_ARGV" not in _codes(problems), problems


SECRET_URL = "redis://admin:s3cretPa55@10.0.0.9:6379/0"


def test_env_values_that_are_credentials_are_never_printed(tmp_path):
    env = {"OPENAI_KEY": "sk-abcdefghijklmnopqrstuvwx", "PRIVATE_KEY": "pkvalue-1234", "DB_PASS": "dbpass-5678",
           "CACHE_URL": SECRET_URL}
    inv = write_inventory(tmp_path / "inv", vllm_b200_disagg(glmops_env=env))
    out = tmp_path / "out"
    r = CliRunner().invoke(main, ["plan", "-i", str(inv), "--format", "json", "--out", str(out)])
    assert r.exit_code == 0, r.output
    for value in env.values():
        assert value not in r.output
    files = [p for p in out.rglob("*.env")]  # --out redacts them too, unless --with-secrets
    assert files and all("CACHE_URL=<redacted>\n" in p.read_text() and SECRET_URL not in p.read_text() for p in files)
    full = tmp_path / "full"
    r = CliRunner().invoke(main, ["plan", "-i", str(inv), "--out", str(full), "--with-secrets"])
    assert r.exit_code == 0, r.output
    files = [p for p in full.rglob("*.env")]
    assert files and all(f"CACHE_URL={SECRET_URL}" in p.read_text() for p in files)
    assert all(oct(p.stat().st_mode & 0o777) == "0o600" for p in files)


def test_urls_with_userinfo_in_problems_are_redacted(tmp_path):
    gv = vllm_b200_disagg(glmops_readiness_timeout_s=SECRET_URL, glmops_env={"CACHE_URL": [SECRET_URL]})
    problems = _problems(write_inventory(tmp_path / "inv", gv))
    assert problems and all(SECRET_URL not in str(p) for p in problems)


def test_sglang_router_control_plane_api_list_never_reaches_argv(tmp_path):
    gv = vllm_b200_disagg()
    gv["glmops_topologies"]["disagg"]["router"]["args"] = {"control-plane-api-keys": ["k-123456789"]}
    inv = write_inventory(tmp_path / "inv", gv)
    problems = _problems(inv)
    assert "SECRET_IN_ARGV" in _codes(problems)
    r = CliRunner().invoke(main, ["plan", "-i", str(inv), "--format", "json"])
    assert r.exit_code == 2 and "k-123456789" not in r.output


def test_a_url_with_userinfo_as_a_flag_value_is_refused_in_argv(tmp_path):
    gv = vllm_b200_disagg(glmops_engine_args={"kv-events-config": SECRET_URL})
    problems = _problems(write_inventory(tmp_path / "inv", gv))
    bad = [p for p in problems if p.code == "SECRET_IN_ARGV"]
    assert bad and all(SECRET_URL not in str(p) for p in problems)


def test_the_runner_takes_its_secret_names_from_the_one_home():
    assert sorted(runner.secret_env_names({"OPENAI_KEY": "x", "DB_PASS": "x", "HOME": "/", "LONG_PREFILL_TOKEN_THRESHOLD": "1"})) \
        == ["DB_PASS", "OPENAI_KEY"]


# ------------------------------------------------------------------------------- 5. no hangs


def _timed(fn, limit_s: float = 30.0):
    """fn() within limit_s: far above the expected well under a second, far below a hang."""
    start = time.monotonic()
    out = fn()
    assert time.monotonic() - start < limit_s
    return out


BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)},"
    f" *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]\n" for i in range(9))


@pytest.mark.parametrize("where", ["group_vars", "hosts"])
def test_a_yaml_alias_bomb_is_refused_at_once(tmp_path, where):
    inv = write_inventory(tmp_path / "inv", vllm_b200_disagg())
    if where == "group_vars":
        text = (inv / "group_vars" / "all.yml").read_text() + "glmops_env:\n  " + \
            BOMB.replace("\n", "\n  ").rstrip() + "\n"
        (inv / "group_vars" / "all.yml").write_text(text)
    else:
        text = (inv / "hosts.yml").read_text().replace("all:\n", "all:\n  vars:\n    glmops_x:\n      "
                                                       + BOMB.replace("\n", "\n      ").rstrip() + "\n", 1)
        (inv / "hosts.yml").write_text(text)
    problems = _timed(lambda: _problems(inv))
    assert _codes(problems) == ["INVENTORY"] and "YAML nodes" in problems[0].message


def test_a_huge_disagg_replica_count_is_refused_at_once(tmp_path):
    gv = vllm_b200_disagg()
    gv["glmops_topologies"]["disagg"]["pools"]["decode"]["replicas"] = 10 ** 30
    problems = _timed(lambda: _problems(write_inventory(tmp_path / "inv", gv)))
    assert _codes(problems) == ["PARALLELISM"]


def test_many_replicas_and_hosts_give_one_problem_per_cause(tmp_path):
    """1,000 decode replicas over 120 hosts without RDMA NICs: one GPU_COUNT, one F06 problem."""
    gv = vllm_b200_disagg()
    gv["glmops_topologies"]["disagg"]["pools"]["decode"].update(replicas=1000, gpus=[])
    hosts = {f"h{i}": {"ansible_host": f"10.0.{i // 200}.{i % 200 + 1}"} for i in range(120)}
    problems = _timed(lambda: _problems(write_inventory(tmp_path / "inv", gv, hosts=hosts)))
    assert _codes(problems).count("F06_RDMA_DEVICES") == 1 and len(problems) <= 3, _codes(problems)
    assert all(len(p.message) < 600 for p in problems), [len(p.message) for p in problems]


def test_a_fifo_as_or_inside_the_inventory_is_refused(tmp_path):
    inv = write_inventory(tmp_path / "inv", vllm_b200_disagg())
    os.mkfifo(inv / "group_vars" / "gpu.yml")
    problems = _timed(lambda: _problems(inv))
    assert _codes(problems) == ["INVENTORY"] and "FIFO" in problems[0].message
    os.mkfifo(tmp_path / "fifo.yml")
    problems = _timed(lambda: _problems(tmp_path / "fifo.yml"))
    assert _codes(problems) == ["INVENTORY"] and "FIFO" in problems[0].message


@pytest.mark.parametrize("fmt", ["yaml", "ini"])
def test_a_huge_host_range_is_refused_before_ansible_expands_it(tmp_path, fmt):
    inv = write_inventory(tmp_path / "inv", vllm_b200_disagg())
    if fmt == "yaml":
        (inv / "hosts.yml").write_text("all:\n  children:\n    glmops_workers:\n      hosts:\n"
                                       "        n[0:99999999]:\n          ansible_host: 10.0.0.11\n")
    else:
        (inv / "hosts.yml").unlink()
        (inv / "hosts").write_text("[glmops_workers]\nn[0:99999999] ansible_host=10.0.0.11\n")
    problems = _timed(lambda: _problems(inv))
    assert _codes(problems) == ["INVENTORY"] and "n[0:99999999]" in problems[0].message


@pytest.mark.parametrize("text", [".inf", "-.inf", ".nan"])
def test_inf_and_nan_in_integers_are_type_problems_naming_the_key(tmp_path, text):
    inv = write_inventory(tmp_path / "inv", vllm_b200_disagg())
    with open(inv / "group_vars" / "all.yml", "a") as fh:
        fh.write(f"glmops_max_seq_len: {text}\n")
    problems = _timed(lambda: _problems(inv))
    bad = [p for p in problems if p.path.endswith("glmops_max_seq_len")]
    assert [p.code for p in bad] == ["TYPE"], problems


def test_yaml_errors_name_file_and_line_once(tmp_path):
    inv = write_inventory(tmp_path / "inv", vllm_b200_disagg())
    lines = (inv / "hosts.yml").read_text().splitlines()
    lines.insert(3, "      bad: [unclosed")
    (inv / "hosts.yml").write_text("\n".join(lines) + "\n")
    problems = _problems(inv)
    assert len(problems) == 1 and ":4:" in problems[0].path or ":5:" in problems[0].path, problems
    assert problems[0].path.split(":")[0].endswith("hosts.yml")


def test_validate_into_a_closed_pipe_ends_quietly(tmp_path):
    inv = write_inventory(tmp_path / "inv", vllm_b200_disagg(glmops_max_seq_len=0, glmops_service_user="",
                                                            glmops_image="--x", glmops_venv_root="+/x"))
    glmops = Path(sys.executable).parent / "glmops"
    proc = subprocess.run(f"'{glmops}' validate -i '{inv}' | head -c 1", shell=True, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr, proc.stderr


# ---------------------------------------------------------------------- 6. near-miss names


@pytest.mark.parametrize("name,meant", [("glmosp_multimodal", "glmops_multimodal"),
                                        ("glmops-checkpoint", "glmops_checkpoint"),
                                        ("GLMOPS_MODEL", "glmops_model"), ("Glmops_Engine", "glmops_engine")])
def test_near_miss_variable_names_are_problems_with_a_did_you_mean(tmp_path, name, meant):
    gv = vllm_b200_disagg(**{name: True if "multimodal" in name else "x"})
    problems = _problems(write_inventory(tmp_path / "inv", gv))
    bad = [p for p in problems if p.code == "UNKNOWN_KEY" and p.path.endswith(name)]
    assert len(bad) == 1 and f"did you mean {meant!r}?" in bad[0].hint, problems


def test_other_variables_are_not_near_misses():
    problems = _problems(REPO / "inventories" / "lab")
    assert problems == []


# --------------------------------------------------------------------------------- 7. CLI


def _no_host(monkeypatch):
    import ansible_runner

    monkeypatch.setattr(ansible_runner, "run", lambda *a, **k: pytest.fail("a host was contacted"))


@pytest.mark.parametrize("limit,needle", [("", "names no host"), (",", "names no host"),
                                          ("nosuchhost", "'nosuchhost'"), ("gpu-a,gpu-zz", "'gpu-zz'")])
def test_bad_limits_exit_2_before_any_host(tmp_path, monkeypatch, limit, needle):
    _no_host(monkeypatch)
    monkeypatch.setenv("GLMOPS_RUNS_DIR", str(tmp_path / "runs"))
    inv = write_inventory(tmp_path / "inv", vllm_b200_disagg())
    r = CliRunner().invoke(main, ["check", "-i", str(inv), "--limit", limit])
    assert r.exit_code == 2, r.output
    assert needle in r.output and "gpu-a" in r.output


def test_empty_inventory_exits_2_for_a_run(tmp_path, monkeypatch):
    _no_host(monkeypatch)
    monkeypatch.setenv("GLMOPS_RUNS_DIR", str(tmp_path / "runs"))
    (tmp_path / "empty").mkdir()
    r = CliRunner().invoke(main, ["provision", "-i", str(tmp_path / "empty")])
    assert r.exit_code == 2 and "no hosts" in r.output, r.output


@pytest.mark.parametrize("verb", ["history", "rollback"])
@pytest.mark.parametrize("over", [{"glmops_deployment": "../x"}, {"glmops_state_dir": "/var/lib/a b"}])
def test_history_and_rollback_check_what_they_use_before_any_host(tmp_path, monkeypatch, verb, over):
    _no_host(monkeypatch)
    inv = write_inventory(tmp_path / "inv", vllm_b200_disagg(**over))
    r = CliRunner().invoke(main, [verb, "-i", str(inv)])
    assert r.exit_code == 2, r.output
    assert list(over)[0].removeprefix("glmops_") in r.output.replace("deployment name", "deployment")


# ------------------------------------------------------------------- 4b. secret by Vault value


def test_a_vault_value_is_secret_wherever_it_lands(tmp_path, monkeypatch):
    """A value read from Ansible Vault is secret by value: as a flag value it is SECRET_IN_ARGV
    (whatever the flag's name), and it is never printed."""
    import ansible.constants as C

    pw = tmp_path / "vault-pw"
    pw.write_text("fuzz-vault-pw\n")
    vaulted = subprocess.run([str(Path(sys.executable).parent / "ansible-vault"), "encrypt_string",
                              "--vault-password-file", str(pw), "innocentLookingValue42", "--name", "x"],
                             capture_output=True, text=True, check=True).stdout
    inv = write_inventory(tmp_path / "inv", vllm_b200_disagg())
    block = vaulted.split("x: ", 1)[1].replace("\n", "\n  ")
    with open(inv / "group_vars" / "all.yml", "a") as fh:
        fh.write(f"glmops_engine_args:\n  kv-events-config: {block}\n")
    monkeypatch.setattr(C, "DEFAULT_VAULT_PASSWORD_FILE", str(pw))
    problems = _problems(inv)
    assert [p.code for p in problems] == ["SECRET_IN_ARGV"], problems
    assert all("innocentLookingValue42" not in str(p) for p in problems)


# ------------------------------------------------ 8. one machine, one booking (issue 20, the rest)


def _agg_b200(tp: int = 8, replicas: int = 2) -> dict:
    return vllm_b200_disagg(glmops_topology="agg",
                            glmops_topologies={"agg": {"pools": {"agg": {"tp": tp, "replicas": replicas}}}})


def _lab_hosts(**extra) -> dict:
    hosts = {"lab-1": {"ansible_host": "10.77.0.11"}, "lab-2": {"ansible_host": "10.77.0.12"}}
    for name, hv in extra.items():
        hosts.setdefault(name, {}).update(hv)
    return hosts


@pytest.mark.parametrize("hosts", [
    {"gpu-a": {"ansible_host": "10.0.0.11"}, "gpu-a2": {"ansible_host": "10.0.0.11"}},  # one machine, two names
    {"10.0.0.11": {}, "gpu-a2": {"ansible_host": "10.0.0.11"}},  # the name is the other's address
    {"gpu-a": {"ansible_host": "GPU-A.example"}, "gpu-a2": {"ansible_host": "gpu-a.example"}},  # DNS is case-blind
])
def test_one_machine_listed_twice_is_refused_naming_both_entries(tmp_path, hosts):
    inv = write_inventory(tmp_path / "inv", _agg_b200(), hosts=hosts)
    problems = _problems(inv)
    dup = [p for p in problems if p.code == "DUPLICATE_HOST"]
    first, second = list(hosts)
    assert len(dup) == 1, problems
    msg = dup[0].message
    assert f"hosts {first} ({inv}/hosts.yml:{first}) and {second} ({inv}/hosts.yml:{second})" in msg, msg
    address = (hosts[second].get("ansible_host") or second).lower()
    assert f"address {address}" in msg and "GPUs [0, 1, 2, 3, 4, 5, 6, 7]" in msg and "accepted:" in msg
    assert dup[0].path == f"{inv}/hosts.yml:{second}"


def test_one_address_with_overlapping_gpus_names_the_hosts_address_and_gpu_ids(tmp_path):
    hosts = {"gpu-a": {"ansible_host": "10.0.0.11", "glmops_gpus": [0, 1, 2, 3]},
             "gpu-b": {"ansible_host": "10.0.0.11", "glmops_gpus": [2, 3, 4, 5]}}
    problems = _problems(write_inventory(tmp_path / "inv", _agg_b200(tp=2, replicas=4), hosts=hosts))
    [dup] = [p for p in problems if p.code == "DUPLICATE_HOST"]
    assert "hosts gpu-a (" in dup.message and ") and gpu-b (" in dup.message
    assert "address 10.0.0.11" in dup.message and "both book GPUs [2, 3] there" in dup.message, dup.message


@pytest.mark.parametrize("hosts", [
    # one address, two sshd ports: two machines behind one NAT
    {"gpu-a": {"ansible_host": "10.0.0.11", "ansible_port": 2201},
     "gpu-b": {"ansible_host": "10.0.0.11", "ansible_port": 2202}},
])
def test_one_address_on_two_ssh_ports_is_accepted(tmp_path, hosts):
    inv = write_inventory(tmp_path / "inv", _agg_b200(tp=4, replicas=2), hosts=hosts)
    assert _problems(inv) == []


def test_two_disjoint_gpu_slices_of_one_machine_under_two_names_are_refused(tmp_path):
    """Two names of one 8-GPU node with disjoint glmops_gpus: each name's replica took the pool's
    port on the one address (both agg replicas on 10.0.0.11:8001) and each name's deploy would
    remove the other's units there as not its own: refused, naming why and the one accepted form."""
    hosts = {"gpu-a": {"ansible_host": "10.0.0.11", "glmops_gpus": [0, 1, 2, 3]},
             "gpu-b": {"ansible_host": "10.0.0.11", "glmops_gpus": [4, 5, 6, 7]}}
    problems = _problems(write_inventory(tmp_path / "inv", _agg_b200(tp=4, replicas=2), hosts=hosts))
    [dup] = [p for p in problems if p.code == "DUPLICATE_HOST"]
    assert "address 10.0.0.11" in dup.message and "same ports" in dup.message, dup.message
    assert "accepted: one inventory host per machine" in dup.message


@pytest.mark.parametrize("a,b,address", [
    ("2001:db8::1", "2001:DB8:0:0::1", "2001:db8::1"),
    ("node1.example.com", "NODE1.example.com.", "node1.example.com"),
    ("192.0.2.101", "192.000.002.101", "192.0.2.101"),
])
def test_one_machine_spelled_two_ways_is_one_machine(tmp_path, a, b, address):
    hosts = {"gpu-a": {"ansible_host": a}, "gpu-b": {"ansible_host": b}}
    problems = _problems(write_inventory(tmp_path / "inv", _agg_b200(), hosts=hosts))
    [dup] = [p for p in problems if p.code == "DUPLICATE_HOST"]
    assert f"address {address}," in dup.message, dup.message


def test_a_router_named_twice_on_a_worker_s_machine_books_no_gpu(tmp_path):
    gv = _agg_b200(tp=8, replicas=1)
    gv["glmops_topologies"]["agg"]["router"] = {"kind": "vllm-router", "host": "front", "port": 8000}
    inv = write_inventory(tmp_path / "inv", gv, groups={"glmops_routers": ["front"]},
                          host_vars={"front": {"ansible_host": "10.0.0.11"}})
    assert [p for p in _problems(inv) if p.code == "DUPLICATE_HOST"] == []


def test_two_names_of_one_lab_machine_are_refused_on_cpu_hardware(tmp_path):
    hosts = _lab_hosts(**{"lab-2": {"ansible_host": "10.77.0.11"}})
    problems = _problems(write_inventory(tmp_path / "inv", _lab_disagg(), hosts=hosts,
                                         groups={"glmops_routers": ["lab-3"]}))
    [dup] = [p for p in problems if p.code == "DUPLICATE_HOST"]
    assert "hosts lab-1 (" in dup.message and "address 10.77.0.11" in dup.message
    assert "whole machine" in dup.message and "disjoint glmops_gpus" not in dup.message


# ------------------------------------------------------------ 9. GPU checks on the lab's cpu hardware


def _lab_disagg() -> dict:
    gv = yaml.safe_load((REPO / "inventories" / "lab" / "group_vars" / "all.yml").read_text())
    gv["glmops_topology"] = "disagg"
    return gv


@pytest.mark.parametrize("gpus,needle", [
    ([0], "indices [0] outside CPU (lab)'s GPUs (it has none)"),
    ([0, 0, 3], "indices [0, 3] outside CPU (lab)'s GPUs (it has none), duplicates [0]"),
])
def test_glmops_gpus_on_cpu_hardware_are_out_of_range(tmp_path, gpus, needle):
    hosts = _lab_hosts(**{"lab-1": {"glmops_gpus": gpus}})
    problems = _problems(write_inventory(tmp_path / "inv", _lab_disagg(), hosts=hosts,
                                         groups={"glmops_routers": ["lab-3"]}))
    bad = [p for p in problems if p.code == "GPU_INDEX"]
    assert len(bad) == 1 and needle in bad[0].message and "accepted: no glmops_gpus" in bad[0].message, problems
    assert bad[0].path.endswith("lab-1.glmops_gpus")


def test_pool_gpus_on_cpu_hardware_are_out_of_range(tmp_path):
    gv = _lab_disagg()
    gv["glmops_topologies"]["disagg"]["pools"]["prefill"]["gpus"] = [0, 1]
    problems = _problems(write_inventory(tmp_path / "inv", gv, hosts=_lab_hosts(), groups={"glmops_routers": ["lab-3"]}))
    bad = [p for p in problems if p.code == "GPU_INDEX"]
    assert len(bad) == 1 and "pool prefill gpus [0, 1]" in bad[0].message and "(it has none)" in bad[0].message
    assert bad[0].path.endswith("pools.prefill.gpus")


def test_more_cpu_replicas_than_hosts_is_one_count_problem(tmp_path):
    gv = _cpu_lab(glmops_topologies={"agg": {"pools": {"agg": {"replicas": 5, "hosts": ["lab-1", "lab-2"], "port": 8001}}}})
    problems = _problems(write_inventory(tmp_path / "inv", gv, hosts=_lab_hosts(), groups={"glmops_routers": ["lab-3"]}))
    assert _codes(problems) == ["GPU_COUNT"], problems  # one per cause, no PLACEMENT per replica
    assert "pool agg replicas 5 need 5 hosts" in problems[0].message and "accepted: replicas <= 2" in problems[0].message


def test_two_cpu_pools_on_one_host_book_it_twice(tmp_path):
    gv = _lab_disagg()
    gv["glmops_topologies"]["disagg"]["pools"]["decode"]["hosts"] = ["lab-1"]
    problems = _problems(write_inventory(tmp_path / "inv", gv, hosts=_lab_hosts(), groups={"glmops_routers": ["lab-3"]}))
    assert _codes(problems) == ["GPU_COUNT"], problems
    assert "prefill 1 + decode 1" in problems[0].message and "share ['lab-1']" in problems[0].message
    assert problems[0].path.endswith("pools.decode.hosts")


@pytest.mark.parametrize("inventory", ["lab", "lab-dynamo", "lab-dynamo-etcd"])
@pytest.mark.parametrize("topology", ["agg", "disagg"])
def test_the_shipped_cpu_lab_inventories_still_pass(inventory, topology):
    from glmops import planning

    try:
        planning.load(str(REPO / "inventories" / inventory), topology=topology)
    except ValidationError as exc:  # a topology the inventory does not define is POOLS, not a GPU check
        assert not [p for p in exc.problems if p.code.startswith("GPU") or p.code == "DUPLICATE_HOST"], exc.problems


# ------------------------------------------------------------------- 10. Dynamo's router policy


def _dynamo_lab(policy: str) -> dict:
    gv = yaml.safe_load((REPO / "inventories" / "lab-dynamo" / "group_vars" / "all.yml").read_text())
    gv["glmops_topologies"]["agg"]["router"]["policy"] = policy
    return gv


@pytest.mark.parametrize("policy", ["least_busy", "round-robin-ish", "cache-aware-ish", "consistent_hash"])
def test_a_router_policy_dynamo_does_not_take_is_refused(tmp_path, policy):
    inv = write_inventory(tmp_path / "inv", _dynamo_lab(policy), hosts=_lab_hosts(), groups={"glmops_routers": ["lab-3"]})
    bad = [p for p in _problems(inv) if p.code == "ROUTER_POLICY"]
    assert len(bad) == 1 and repr(policy) in bad[0].message and "dynamo" in bad[0].message, bad
    assert "accepted: round_robin, random, power_of_two, kv_aware" in bad[0].message
    assert bad[0].path.endswith("router.policy")


@pytest.mark.parametrize("policy,mode", [("kv_aware", "kv"), ("power_of_two", "power-of-two"), ("kv", "kv"),
                                         ("least_loaded", "least-loaded"), ("round_robin", "round-robin")])
def test_dynamo_router_policies_render_a_mode_the_frontend_takes(tmp_path, policy, mode):
    from glmops.catalog import flags

    inv = write_inventory(tmp_path / "inv", _dynamo_lab(policy), hosts=_lab_hosts(), groups={"glmops_routers": ["lab-3"]})
    plan, problems = rules.validate(load_deployment(inv))
    assert problems == []
    [front] = [s for s in plan.services if s.role == "frontend"]
    got = front.argv[front.argv.index("--router-mode") + 1]
    assert got == mode and got in flags.load("dynamo-frontend").accepted_values("router-mode")


def test_dynamo_policies_in_the_catalog_match_the_frontend_s_router_modes():
    """Every policy the catalog lists spells a --router-mode choice of the 1.6.1 frontend's option
    list, and every choice is reachable from one (the two lists cannot drift apart)."""
    from glmops import catalog
    from glmops.catalog import flags
    from glmops.engines import dynamo

    choices = set(flags.load("dynamo-frontend").accepted_values("router-mode"))
    policies = catalog.load().engine("dynamo")["policies"]
    assert {dynamo.policy_mode(p) for p in policies} == choices


# ------------------------------------------- 11. files the checkpoint and generation scripts write


def test_checkpoint_local_dir_stays_below_model_dir():
    from glmops import checkpoint as ck

    assert ck.check_inputs("org/name", None, f"/models/org/name/{REV}", model_dir="/models") == []
    assert ck.check_inputs("org/name", None, "/models/../etc/cron.d", model_dir="/models") == [
        "local_dir '/models/../etc/cron.d' has '.', '..' or empty segments; accepted: a normalized absolute path"]
    assert ck.check_inputs("org/name", None, "/etc/cron.d", model_dir="/models") == [
        "local_dir '/etc/cron.d' is not below model_dir '/models'; accepted: <model_dir>/<owner>/<name>/..."]
    with pytest.raises(ck.CheckpointError, match="not below model_dir"):
        ck.download("org/name", REV, "/modelsx/org/name", model_dir="/models", dry_run=True)


@pytest.mark.parametrize("path", ["../../../etc/cron.d/x", "/etc/cron.d/x", "a/./b", "a//b", "dir/.."])
def test_a_hub_listing_cannot_place_a_file_outside_the_snapshot(monkeypatch, path):
    from types import SimpleNamespace

    from glmops import checkpoint as ck

    entry = SimpleNamespace(path=path, size=1, blob_id="0" * 40, lfs=None)
    api = SimpleNamespace(list_repo_tree=lambda *a, **k: [entry], model_info=lambda *a, **k: SimpleNamespace(sha=REV))
    monkeypatch.setattr(ck, "_api", lambda endpoint, token: api)
    with pytest.raises(ck.CheckpointError) as err:
        ck.resolve("org/name", REV)
    assert err.value.code == "HUB" and repr(path) in err.value.message and "outside" in err.value.message
    with pytest.raises(ck.CheckpointError, match="outside"):  # a manifest handed over for a peer copy
        ck.Manifest.from_dict({"repo": "org/name", "commit": REV, "files": [{"path": path, "size": 1}]})


def test_a_symlink_in_the_snapshot_cannot_redirect_a_file(tmp_path):
    from glmops import checkpoint as ck

    (tmp_path / "snap").mkdir()
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "snap" / "sub").symlink_to(tmp_path / "elsewhere")
    assert ck.inside(str(tmp_path / "snap"), "a/b.json") == str(tmp_path / "snap" / "a" / "b.json")
    manifest = ck.Manifest("org/name", REV, [ck.HubFile("a.json", 1, "0" * 40), ck.HubFile("sub/x", 1, "0" * 40)])
    with pytest.raises(ck.CheckpointError, match=r"'sub/x' resolves to .*/elsewhere/x, outside"):
        ck.fetch_files("org/name", manifest, str(tmp_path / "snap"), "http://127.0.0.1:9", None, stall_timeout_s=0)
    assert list((tmp_path / "elsewhere").iterdir()) == [] and sorted(p.name for p in (tmp_path / "snap").iterdir()) == ["sub"]


def _generation(*args: str) -> tuple[int, dict]:
    script = REPO / "roles" / "generation" / "files" / "glmops_generation.py"
    proc = subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, timeout=60, check=False)
    return proc.returncode, json.loads(proc.stdout)


def _b64(doc: dict) -> str:
    import base64

    return base64.b64encode(json.dumps(doc).encode()).decode()


def test_a_generation_manifest_cannot_copy_outside_its_generation(tmp_path):
    import hashlib

    target = tmp_path / "outside" / "x.env"
    target.parent.mkdir()
    target.write_bytes(b"A=1\n")
    gen = tmp_path / "state" / "_records" / "dep" / "generations"
    depth = len(Path(str(gen)).parts)  # climbs from <gen>/.N.tmp/files/ up to / and back down to target
    sneaky = "/" + "/".join([".."] * (depth + 2)) + str(target)
    files = [{"path": sneaky, "sha256": hashlib.sha256(b"A=1\n").hexdigest(), "mode": "0600", "owner": "root",
              "group": "root", "unit": "u.service"}]
    rc, out = _generation("record", "--dir", str(gen), "--number", "1",
                          "--manifest", _b64({"plan_hash": "h", "files": files, "units": [{"unit": "u.service"}]}))
    assert rc == 1 and "not normalized absolute paths" in out["msg"] and repr(sneaky) in out["msg"], out
    assert not (gen / "1").exists() and sorted(p.name for p in target.parent.iterdir()) == ["x.env"]


def test_a_stored_generation_with_a_dot_dot_path_is_not_restored(tmp_path):
    import hashlib

    gen = tmp_path / "gen"
    (gen / "1" / "files" / "etc").mkdir(parents=True)
    (gen / "1" / "files" / "etc" / "x.env").write_bytes(b"A=1\n")
    escape = tmp_path / "escaped"
    manifest = {"number": 1, "plan_hash": "h", "units": [{"unit": "u.service"}],
                "files": [{"path": f"{tmp_path}/gen/1/files/etc/../../../../escaped", "unit": "u.service", "mode": "0600",
                           "owner": "root", "group": "root", "sha256": hashlib.sha256(b"A=1\n").hexdigest()}]}
    (gen / "1" / "manifest.json").write_text(json.dumps(manifest))
    for d in (tmp_path, gen, gen / "1"):
        d.chmod(0o700)
    rc, out = _generation("restore", "--dir", str(gen), "--to", "1")
    assert rc == 1 and "not normalized absolute paths" in out["msg"], out
    assert not escape.exists()


def test_a_limit_file_that_does_not_exist_is_exit_2_naming_it(tmp_path):
    """``--limit @FILE`` with no such file: a LIMIT problem (Ansible raised 'Unable to find limit
    file', exit 1), before any host."""
    from glmops.inventory import check_run_target
    from glmops.model import ValidationError

    with pytest.raises(ValidationError) as exc:
        check_run_target(str(REPO / "inventories" / "lab"), f"@{tmp_path / 'nonexist'}")
    [problem] = exc.value.problems
    assert problem.code == "LIMIT" and "nonexist" in problem.message and "accepted: @<file" in problem.message
