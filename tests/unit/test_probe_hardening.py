"""The adversarial probe's findings on glmops' controller-side read of the inventory: Jinja
lookups never run (they would execute commands, read files or the environment while only
validating), templates are bounded in time and size, the secret patterns are linear, Vault
values never reach argv or a problem, and a bad ``-e`` / Vault password source ends with exit 2
before anything runs. Inventories are written as a user would, in a tmp dir; nothing is contacted."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from inventory_factory import vllm_b200_disagg, without_venv_advice, write_inventory

from glmops import rules
from glmops.cli import main
from glmops.inventory import load_deployment
from glmops.model import ValidationError

BIN = Path(sys.executable).parent


def _problems(inv: Path) -> list:
    try:
        dep = load_deployment(inv)
    except ValidationError as exc:
        return without_venv_advice(exc.problems)
    return without_venv_advice(rules.validate(dep)[1])


def _timed(fn, limit_s: float = 15.0):
    start = time.monotonic()
    out = fn()
    assert time.monotonic() - start < limit_s, f"took {time.monotonic() - start:.1f} s"
    return out


# ------------------------------------------------------------------------ 1. no lookup runs


@pytest.mark.parametrize("where", ["served", "ansible_host", "indirect"])
def test_a_lookup_in_a_value_never_runs_and_is_a_template_problem(tmp_path, where):
    marker = tmp_path / "PWNED"
    lookup = f"{{{{ lookup('pipe', 'touch {marker}; echo pwned-output') }}}}"
    gv = vllm_b200_disagg()
    hosts = None
    if where == "served":
        gv["glmops_served_model_name"] = lookup
    elif where == "indirect":  # a lookup inside another variable the template uses
        gv["other_var"] = lookup.replace("lookup('pipe'", "query('pipe'")
        gv["glmops_served_model_name"] = "{{ other_var }}"
    else:
        hosts = {"gpu-a": {"ansible_host": lookup}}
    problems = _problems(write_inventory(tmp_path / "inv", gv, hosts=hosts))
    assert not marker.exists(), "the lookup ran on the controller"
    bad = [p for p in problems if p.code == "TEMPLATE"]
    assert bad, problems
    name = "ansible_host" if where == "ansible_host" else "glmops_served_model_name"
    assert name in bad[0].message and "lookups are not evaluated by glmops" in bad[0].message
    assert all("pwned-output" not in str(p) for p in problems)


def test_a_file_or_env_lookup_is_never_printed(tmp_path, monkeypatch):
    secret_file = tmp_path / "shadow"
    secret_file.write_text("root:$6$SHADOWHASH:19000:0:99999:7:::\nsecond line\n")
    monkeypatch.setenv("GLMOPS_PROBE_ENV", "envSECRETvalue")
    gv = vllm_b200_disagg(glmops_served_model_name=f"{{{{ lookup('file', '{secret_file}') }}}}",
                          glmops_env={"X_VALUE": "{{ lookup('env', 'GLMOPS_PROBE_ENV') }}"})
    problems = _problems(write_inventory(tmp_path / "inv", gv))
    text = "\n".join(str(p) for p in problems)
    assert "SHADOWHASH" not in text and "envSECRETvalue" not in text
    assert [p.code for p in problems].count("TEMPLATE") == 2, problems


def test_a_slow_lookup_does_not_make_validate_slow(tmp_path):
    gv = vllm_b200_disagg(glmops_served_model_name="{{ lookup('pipe', 'sleep 20') }}")
    problems = _timed(lambda: _problems(write_inventory(tmp_path / "inv", gv)), 10)
    assert [p.code for p in problems] == ["TEMPLATE"]


def test_jinja_over_other_variables_still_renders(tmp_path):
    gv = vllm_b200_disagg(served_base="glm", glmops_served_model_name="{{ served_base }}-{{ range(3)|list|length }}")
    dep = load_deployment(write_inventory(tmp_path / "inv", gv))
    assert dep.served_model_name == "glm-3" and not dep.problems


# -------------------------------------------------------------- 2. templates are bounded


@pytest.mark.parametrize("template,needle", [
    ("{{ range(10**9)|list|length }}", "larger than"),
    ("{{ 'a' * 10**9 }}", "larger than"),
    ("{{ 7 ** 99999999 }}", "larger than"),
    ("{% for i in range(99999) %}{% for j in range(99999) %}{% endfor %}{% endfor %}", "took longer than"),
])
def test_a_runaway_template_is_stopped_with_a_template_problem(tmp_path, template, needle):
    gv = vllm_b200_disagg(glmops_served_model_name=template)
    problems = _timed(lambda: _problems(write_inventory(tmp_path / "inv", gv)))
    assert [p.code for p in problems] == ["TEMPLATE"], problems
    assert needle in problems[0].message and "glmops_served_model_name" in problems[0].message


# ------------------------------------------------------------- 4. Vault values never leak


def _vaulted_inventory(tmp_path: Path, monkeypatch, plain: str, **lines: str) -> Path:
    """vllm_b200_disagg with ``my_secret`` an inline !vault value of ``plain`` and each of
    ``lines`` (variable: YAML text) appended to group_vars/all.yml."""
    import ansible.constants as C

    pw = tmp_path / "vault-pw"
    pw.write_text("probe-vault-pw\n")
    vaulted = subprocess.run([str(BIN / "ansible-vault"), "encrypt_string", "--vault-password-file", str(pw), plain,
                              "--name", "x"], capture_output=True, text=True, check=True).stdout
    gv = vllm_b200_disagg()
    for key in lines:
        gv.pop(key, None)
    inv = write_inventory(tmp_path / "inv", gv)
    block = vaulted.split("x: ", 1)[1].replace("\n", "\n  ")
    with open(inv / "group_vars" / "all.yml", "a") as fh:
        fh.write(f"my_secret: {block}\n")
        for key, text in lines.items():
            fh.write(f"{key}: {text}\n")
    monkeypatch.setattr(C, "DEFAULT_VAULT_PASSWORD_FILE", str(pw))
    return inv


def test_a_vault_served_model_name_is_secret_in_argv_and_never_shown(tmp_path, monkeypatch):
    inv = _vaulted_inventory(tmp_path, monkeypatch, "SUPERSECRETvaultname", glmops_served_model_name='"{{ my_secret }}"')
    dep = load_deployment(inv)
    plan, problems = rules.validate(dep)
    bad = [p for p in problems if p.code == "SECRET_IN_ARGV"]
    assert bad and "glmops_served_model_name" in bad[0].path + bad[0].message, problems
    assert all("SUPERSECRETvaultname" not in str(p) for p in problems)


def test_a_token_shaped_served_model_name_is_secret_in_argv(tmp_path):
    token = "hf_" + "Q" * 34
    problems = _problems(write_inventory(tmp_path / "inv", vllm_b200_disagg(glmops_served_model_name=token)))
    assert "SECRET_IN_ARGV" in [p.code for p in problems], problems
    assert all(token not in str(p) for p in problems)


@pytest.mark.parametrize("variable", ["glmops_engine", "glmops_deployment", "glmops_model"])
def test_a_vault_value_is_redacted_from_every_problem(tmp_path, monkeypatch, variable):
    inv = _vaulted_inventory(tmp_path, monkeypatch, "hfMAXSECRET", **{variable: '"{{ my_secret }}"'})
    problems = _problems(inv)
    assert problems and all("hfMAXSECRET" not in str(p) for p in problems), problems
    assert any("<redacted>" in str(p) for p in problems), problems


# ------------------------------------------- 5. a bad -e or Vault password source: exit 2 first


def _no_host(monkeypatch):
    import ansible_runner

    monkeypatch.setattr(ansible_runner, "run", lambda *a, **k: pytest.fail("ansible-runner was started"))


@pytest.mark.parametrize("verb", ["deploy", "known-hosts", "validate"])
@pytest.mark.parametrize("arg,needle", [("{junk", "'{junk'"), ("@/nonexistent/x.yml", "/nonexistent/x.yml"),
                                        ("[1, 2]", "'[1, 2]'")])
def test_a_bad_extra_vars_argument_exits_2_naming_it_before_any_run(tmp_path, monkeypatch, verb, arg, needle):
    _no_host(monkeypatch)
    import glmops.commands.hostkeys as hostkeys

    monkeypatch.setattr(hostkeys, "subprocess", None, raising=False)  # ssh-keyscan would fail loudly
    monkeypatch.setenv("GLMOPS_RUNS_DIR", str(tmp_path / "runs"))
    inv = write_inventory(tmp_path / "inv", vllm_b200_disagg())
    r = CliRunner().invoke(main, [verb, "-i", str(inv), "-e", arg])
    assert r.exit_code == 2, r.output
    assert "EXTRA_VARS" in r.output and needle in r.output and "group_vars" not in r.output, r.output


def test_ask_vault_pass_without_input_exits_2(tmp_path):
    inv = write_inventory(tmp_path / "inv", vllm_b200_disagg())
    r = CliRunner().invoke(main, ["validate", "-i", str(inv), "--ask-vault-pass"], input="")
    assert r.exit_code == 2 and "--ask-vault-pass" in r.output and "Aborted" not in r.output, r.output


def test_a_vault_password_fifo_or_hanging_script_exits_2_naming_it(tmp_path, monkeypatch):
    from glmops import ansible_options

    monkeypatch.setattr(ansible_options, "PASSWORD_SCRIPT_SECONDS", 1)
    inv = write_inventory(tmp_path / "inv", vllm_b200_disagg())
    fifo = tmp_path / "pw-fifo"
    os.mkfifo(fifo)
    script = tmp_path / "pw-script"
    script.write_text("#!/bin/sh\nsleep 600\n")
    script.chmod(0o755)
    for source in (fifo, script):
        r = _timed(lambda: CliRunner().invoke(main, ["validate", "-i", str(inv), "--vault-password-file", str(source)]))
        assert r.exit_code == 2 and str(source) in r.output, r.output
