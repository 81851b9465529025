"""Variables read as Ansible reads them (issue 15, items 1-2): Vault (an encrypted
``group_vars/all/vault.yml`` with ``vault_*`` indirection, inline ``!vault``), ``-e`` extra vars,
Jinja values; through ``glmops validate`` / ``glmops plan`` and through plain ``ansible-playbook``
with the glmops_plan plugin. Real ``ansible-vault``; inventories written as a user would, in a
tmp dir; nothing is contacted."""
from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
LAB = REPO / "inventories" / "lab"
API_KEY = "sk-vaulted-UNIT-7f3a9c1e"  # the plain text of the vaulted API key
INLINE = "hf_inlineVaultedToken0042"  # the plain text of an inline !vault value
PASSWORD = "unit-vault-pw"


def _env(**more: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_VAULT")}
    env.update(PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}", **more)
    return env


def _vault(args: list[str], pw: Path, cwd: Path | None = None) -> str:
    proc = subprocess.run([str(BIN / "ansible-vault"), *args, "--vault-password-file", str(pw)],
                          capture_output=True, text=True, env=_env(), cwd=cwd, timeout=120, check=True)
    return proc.stdout


@pytest.fixture()
def pw(tmp_path: Path) -> Path:
    path = tmp_path / "vault-pw"
    path.write_text(PASSWORD + "\n")
    path.chmod(0o600)
    return path


def _inventory(tmp_path: Path, pw: Path, inline: bool = True) -> Path:
    """The lab inventory laid out as Ansible's docs recommend: group_vars/all/main.yml (plain,
    pointing at vault_* names) and group_vars/all/vault.yml (encrypted with ansible-vault);
    with ``inline``, a ``!vault`` value inside glmops_env too."""
    inv = tmp_path / "inv"
    shutil.copytree(LAB, inv)
    gv = inv / "group_vars"
    main = yaml.safe_load((gv / "all.yml").read_text())
    (gv / "all.yml").unlink()
    (gv / "all").mkdir()
    main["glmops_env"] = {"VLLM_API_KEY": "{{ vault_api_key }}"}
    text = yaml.safe_dump(main, sort_keys=False)
    if inline:
        block = _vault(["encrypt_string", INLINE, "--name", "HF_TOKEN"], pw).split("HF_TOKEN: ", 1)[1]
        text = text.replace("glmops_env:\n", "glmops_env:\n  ENGINE_TOKEN: " + block.replace("\n", "\n  ").rstrip() + "\n", 1)
    (gv / "all" / "main.yml").write_text(text)
    vault = gv / "all" / "vault.yml"
    vault.write_text(yaml.safe_dump({"vault_api_key": API_KEY}))
    _vault(["encrypt", str(vault)], pw)
    assert vault.read_text().startswith("$ANSIBLE_VAULT")
    return inv


def _glmops(*args: str, cwd: Path | None = None, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "glmops"), *args], capture_output=True, text=True, env=_env(**env),
                          cwd=cwd or REPO, timeout=180)


def _no_traceback(proc: subprocess.CompletedProcess) -> None:
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stderr[-3000:]


@pytest.mark.parametrize("how", ["flag", "vault-id", "environment"])
def test_vault_values_reach_the_env_file_and_nothing_else(tmp_path, pw, how):
    inv = _inventory(tmp_path, pw)
    flags = {"flag": ["--vault-password-file", str(pw)], "vault-id": ["--vault-id", f"unit@{pw}"],
             "environment": []}[how]
    env = {"ANSIBLE_VAULT_PASSWORD_FILE": str(pw)} if how == "environment" else {}
    ok = _glmops("validate", "-i", str(inv), *flags, **env)
    assert ok.returncode == 0, ok.stderr[-3000:]
    assert "valid" in ok.stdout and API_KEY not in ok.stdout + ok.stderr
    redacted = tmp_path / "redacted"  # plan --out writes secrets as <redacted> unless --with-secrets
    proc = _glmops("plan", "-i", str(inv), "--out", str(redacted), *flags, **env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    texts = [p.read_text() for p in redacted.rglob("*") if p.is_file()]
    assert not [t for t in texts if API_KEY in t or INLINE in t]
    assert any("VLLM_API_KEY=<redacted>" in t and "ENGINE_TOKEN=<redacted>" in t for t in texts)
    out = tmp_path / "out"
    proc = _glmops("plan", "-i", str(inv), "--format", "json", "--out", str(out), "--with-secrets", *flags, **env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    printed = proc.stdout + proc.stderr
    assert API_KEY not in printed and INLINE not in printed and "{{" not in printed
    assert "<redacted>" in printed
    env_files = sorted(out.rglob("*.env"))
    engine_envs = [p for p in env_files if "router" not in p.name]
    assert engine_envs
    for path in engine_envs:
        text = path.read_text()
        assert f"VLLM_API_KEY={API_KEY}" in text and f"ENGINE_TOKEN={INLINE}" in text, text
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    # the key is in the env files only, not in units, configs or any other file written
    for path in out.rglob("*"):
        if path.is_file() and path not in env_files:
            assert API_KEY not in path.read_text(errors="replace") and INLINE not in path.read_text(errors="replace"), path


@pytest.mark.parametrize("case", ["wrong", "missing", "no-file"])
def test_a_wrong_or_missing_vault_password_is_exit_2_naming_the_file(tmp_path, pw, case):
    inv = _inventory(tmp_path, pw, inline=False)
    wrong = tmp_path / "wrong-pw"
    wrong.write_text("not-the-password\n")
    flags = {"wrong": ["--vault-password-file", str(wrong)], "missing": [],
             "no-file": ["--vault-password-file", str(tmp_path / "nowhere")]}[case]
    # deploy plans only in its run's plan play: the run's preflight names the file before
    # ansible-playbook reads the inventory (which would stop with a bare "Decryption failed", exit 1)
    for verb in (["validate"], ["plan", "--out", str(tmp_path / "out")], ["deploy", "--skip-provision"],
                 ["download"]):
        proc = _glmops(*verb, "-i", str(inv), *flags, GLMOPS_RUNS_DIR=str(tmp_path / "runs"))
        assert proc.returncode == 2, (case, proc.stdout, proc.stderr)
        _no_traceback(proc)
        said = proc.stdout + proc.stderr
        named = "nowhere" if case == "no-file" else "vault.yml"
        assert named in said and "[VAULT]" in said, said
        assert not (tmp_path / "out").exists()
        assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())  # no run started


def test_an_inline_vault_value_without_its_password_names_the_variable(tmp_path, pw):
    inv = _inventory(tmp_path, pw)
    vault = inv / "group_vars" / "all" / "vault.yml"
    vault.unlink()  # only the inline value is encrypted now
    main = inv / "group_vars" / "all" / "main.yml"
    main.write_text(main.read_text().replace("{{ vault_api_key }}", "plain-key"))
    proc = _glmops("validate", "-i", str(inv))
    said = proc.stdout + proc.stderr
    assert proc.returncode == 2 and "[VAULT]" in said and "glmops_env" in said and "main.yml" in said, said
    _no_traceback(proc)


def test_extra_vars_win_over_the_inventory(tmp_path):
    inv = tmp_path / "inv"
    shutil.copytree(LAB, inv)

    def plan(*flags: str) -> dict:
        proc = _glmops("plan", "-i", str(inv), "--format", "json", *flags)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return json.loads(proc.stdout)

    assert plan()["topology"] == "disagg"
    assert plan("-e", "glmops_topology=agg")["topology"] == "agg"
    assert plan("-e", '{"glmops_topology": "agg", "glmops_served_model_name": "from-json"}')["served_model_name"] == "from-json"
    extra = tmp_path / "extra.yml"
    extra.write_text("glmops_served_model_name: from-file\n")
    got = plan("--extra-vars", f"@{extra}", "-e", "glmops_topology=agg")
    assert got["served_model_name"] == "from-file" and got["topology"] == "agg"
    # a misspelt extra var is a problem like a misspelt inventory one
    bad = _glmops("validate", "-i", str(inv), "-e", "glmops_topolgy=agg")
    said = bad.stdout + bad.stderr
    assert bad.returncode == 2 and "-e:glmops_topolgy" in said and "did you mean 'glmops_topology'" in said
    _no_traceback(bad)


def test_jinja_values_are_rendered_and_an_undefined_one_is_named(tmp_path):
    inv = tmp_path / "inv"
    shutil.copytree(LAB, inv)
    gv = inv / "group_vars" / "all.yml"
    gv.write_text(gv.read_text().replace("glmops_served_model_name: tiny-llama",
                                         'glmops_served_model_name: "{{ glmops_deployment }}-{{ model_suffix }}"\n'
                                         "model_suffix: tiny\n"
                                         "glmops_env: {NOTE: 'plain {text} without jinja', OTHER: '${HOME} %s'}"))
    proc = _glmops("plan", "-i", str(inv), "--format", "json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout)["served_model_name"] == "lab-tiny"
    # -e reaches the template too
    proc = _glmops("plan", "-i", str(inv), "--format", "json", "-e", "model_suffix=other")
    assert json.loads(proc.stdout)["served_model_name"] == "lab-other"
    gv.write_text(gv.read_text().replace("model_suffix: tiny\n", ""))
    bad = _glmops("validate", "-i", str(inv))
    assert bad.returncode == 2, bad.stdout
    said = bad.stdout + bad.stderr
    assert "[TEMPLATE]" in said and "glmops_served_model_name" in said and "model_suffix" in said, said
    _no_traceback(bad)


def test_the_working_directory_does_not_change_the_answer(tmp_path):
    """group_vars/ in the working directory are not the inventory's (ansible-playbook reads the
    playbook directory's, not the shell's)."""
    inv = tmp_path / "inv"
    shutil.copytree(LAB, inv)
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "group_vars").mkdir(parents=True)
    (elsewhere / "group_vars" / "all.yml").write_text("glmops_topology: agg\nglmops_served_model_name: cwd\n")
    here = _glmops("plan", "-i", str(inv), "--format", "json")
    there = _glmops("plan", "-i", str(inv), "--format", "json", cwd=elsewhere)
    assert here.returncode == there.returncode == 0, there.stderr[-2000:]
    assert json.loads(here.stdout) == json.loads(there.stdout)


def test_the_plan_plugin_sees_extra_vars_and_vault_of_ansible_playbook(tmp_path, pw):
    """Plain ansible-playbook: the glmops_plan plugin plans with the command's -e and Vault secrets."""
    inv = _inventory(tmp_path, pw)
    play = tmp_path / "plan_only.yml"
    play.write_text(yaml.safe_dump([{
        "name": "plan", "hosts": "localhost", "connection": "local", "gather_facts": False,
        "tasks": [
            {"name": "Plan", "glmops_plan": {}, "register": "p"},
            {"name": "Show", "ansible.builtin.debug": {
                "msg": "{{ p.plan.topology }} {{ p.plan.served_model_name }}"}},
        ]}]))
    proc = subprocess.run([str(BIN / "ansible-playbook"), "-i", str(inv), str(play), "--vault-password-file", str(pw),
                           "-e", "glmops_topology=agg", "-e", "glmops_served_model_name=from-e"],
                          capture_output=True, text=True, timeout=180, cwd=REPO,
                          env=_env(ANSIBLE_CONFIG=str(REPO / "ansible.cfg")))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "agg from-e" in proc.stdout
    assert API_KEY not in proc.stdout + proc.stderr and INLINE not in proc.stdout + proc.stderr


def test_runner_argv_has_paths_never_passwords(tmp_path, pw, monkeypatch):
    """The options reach ansible-runner's cmdline as ansible-playbook flags: file paths and -e text."""
    from glmops.ansible_options import AnsibleOptions, using, current

    opts = AnsibleOptions(extra_vars=("glmops_topology=agg", "@x y.yml"), vault_ids=(f"dev@{pw}",),
                          vault_password_files=(str(pw),))
    with using(opts):
        assert current() is opts
        argv = current().argv()
    assert argv == ["--vault-id", f"dev@{pw}", "--vault-password-file", str(pw),
                    "-e", "glmops_topology=agg", "-e", "@x y.yml"]
    assert PASSWORD not in " ".join(argv)
    assert current().argv() == []


def test_ask_vault_pass_prompts_once_and_passes_a_0600_file(tmp_path, pw, monkeypatch):
    """--ask-vault-pass: one prompt; the controller read and the run get a 0600 file's path,
    removed when the verb ends."""
    import click
    from click.testing import CliRunner

    from glmops.ansible_options import current
    from glmops.commands.ansible_opts import ANSIBLE_OPTS

    seen = {}

    @click.command()
    @ANSIBLE_OPTS
    def verb():
        files = current().vault_password_files
        seen["files"] = files
        seen["mode"] = stat.S_IMODE(os.stat(files[0]).st_mode)
        seen["text"] = Path(files[0]).read_text()

    result = CliRunner().invoke(verb, ["--ask-vault-pass"], input=PASSWORD + "\n")
    assert result.exit_code == 0, result.output
    assert seen["mode"] == 0o600 and seen["text"].strip() == PASSWORD
    assert not os.path.exists(seen["files"][0])
    assert PASSWORD not in " ".join(seen["files"])


def test_an_inline_extra_var_reaches_ansible_as_a_0600_file_never_as_argv_text(tmp_path):
    """A fresh-user trial found ``-e glmops_api_key=sk-...`` in ansible-playbook's argv (ps) and in
    the run's ``env/cmdline``: each inline -e now goes on as ``@FILE`` (its parsed JSON, 0600,
    removed when the verb ends), in order; an ``@file`` stays as given; a secret-looking name warns."""
    import click
    from click.testing import CliRunner

    from glmops.ansible_options import current, extra_vars
    from glmops.commands.ansible_opts import ANSIBLE_OPTS

    seen = {}

    @click.command()
    @ANSIBLE_OPTS
    def verb():
        opts = current()
        seen["argv"] = opts.argv()
        seen["files"] = [e[1:] for e in opts.extra_vars if e.startswith("@") and "glmops-vault-" in e]
        seen["modes"] = [stat.S_IMODE(os.stat(f).st_mode) for f in seen["files"]]
        from ansible.parsing.dataloader import DataLoader
        seen["vars"] = extra_vars(DataLoader(), opts)

    given = tmp_path / "given.yml"
    given.write_text("glmops_max_batch_size: 3\n")
    result = CliRunner().invoke(verb, ["-e", "glmops_api_key=sk-INLINEsecret99 glmops_max_batch_size=8",
                                       "-e", f"@{given}", "-e", '{"glmops_served_model_name": "m", "n": 2}'])
    assert result.exit_code == 0, result.output
    assert "sk-INLINEsecret99" not in " ".join(seen["argv"]) and f"@{given}" in seen["argv"]
    assert len(seen["files"]) == 2 and seen["modes"] == [0o600, 0o600]
    assert not any(os.path.exists(f) for f in seen["files"])  # removed when the verb ended
    # same values, same precedence as ansible-playbook gives them (the @file between the two wins over the first)
    assert seen["vars"] == {"glmops_api_key": "sk-INLINEsecret99", "glmops_max_batch_size": 3,
                            "glmops_served_model_name": "m", "n": 2}
    assert "warning [SECRET_IN_ARGV] -e:glmops_api_key" in result.output and "sk-INLINEsecret99" not in result.output


def test_the_operators_ansible_cfg_is_honoured_and_glmops_paths_are_added(tmp_path, monkeypatch):
    """The run's environment (glmops.runner) keeps the operator's ansible.cfg, found as Ansible
    finds it (here: the working directory's), and appends glmops' plugin and role paths to
    theirs: a callback the operator enables runs beside glmops' own action plugin."""
    from glmops import runner
    from glmops.ansible_options import config_env

    op = tmp_path / "operator"
    (op / "cb").mkdir(parents=True)
    marker = tmp_path / "callback-ran"
    (op / "cb" / "operator_cb.py").write_text(
        "from ansible.plugins.callback import CallbackBase\n"
        "class CallbackModule(CallbackBase):\n"
        "    CALLBACK_VERSION = 2.0\n    CALLBACK_TYPE = 'aggregate'\n    CALLBACK_NAME = 'operator_cb'\n"
        "    CALLBACK_NEEDS_ENABLED = True\n"
        "    def v2_playbook_on_start(self, playbook):\n"
        f"        open({str(marker)!r}, 'w').write('ran')\n")
    (op / "ansible.cfg").write_text("[defaults]\ncallback_plugins = ./cb\ncallbacks_enabled = operator_cb\n"
                                    "roles_path = /opt/operator/roles\n")
    monkeypatch.delenv("ANSIBLE_CONFIG", raising=False)
    monkeypatch.chdir(op)
    env = config_env(str(runner.REPO), str(runner.ANSIBLE_CFG))
    assert env["ANSIBLE_CONFIG"] == str(op / "ansible.cfg")
    roles = env["ANSIBLE_ROLES_PATH"].split(os.pathsep)
    assert roles[0] == "/opt/operator/roles" and roles[-1] == str(REPO / "roles")
    assert env["ANSIBLE_ACTION_PLUGINS"].split(os.pathsep)[-1] == str(REPO / "glmops" / "ansible" / "action_plugins")

    inv = tmp_path / "inv"
    shutil.copytree(LAB, inv)
    play = tmp_path / "plan_only.yml"
    play.write_text(yaml.safe_dump([{
        "name": "plan", "hosts": "localhost", "connection": "local", "gather_facts": False,
        "tasks": [{"name": "Plan", "glmops_plan": {}, "register": "p"},
                  {"name": "Show", "ansible.builtin.debug": {"msg": "topology {{ p.plan.topology }}"}}]}]))
    clean = {k: v for k, v in _env().items() if not k.startswith("ANSIBLE_")}
    proc = subprocess.run([str(BIN / "ansible-playbook"), "-i", str(inv), str(play)], capture_output=True,
                          text=True, timeout=180, cwd=REPO, env={**clean, **env})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "topology disagg" in proc.stdout and marker.read_text() == "ran"


def test_without_an_operator_config_glmops_own_is_used(tmp_path, monkeypatch):
    from glmops import runner
    from glmops.ansible_options import config_env

    monkeypatch.delenv("ANSIBLE_CONFIG", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    if os.path.exists("/etc/ansible/ansible.cfg"):
        pytest.skip("this machine has /etc/ansible/ansible.cfg")
    env = config_env(str(runner.REPO), str(runner.ANSIBLE_CFG))
    assert env["ANSIBLE_CONFIG"] == str(runner.ANSIBLE_CFG)
    assert env["ANSIBLE_ROLES_PATH"].split(os.pathsep).count(str(REPO / "roles")) == 1


def test_a_vault_value_templated_into_argv_is_refused_and_not_shown(tmp_path, pw):
    """A value read from Vault stays secret by value after Jinja puts it somewhere else."""
    inv = _inventory(tmp_path, pw, inline=False)
    main = inv / "group_vars" / "all" / "main.yml"
    main.write_text(main.read_text().replace("glmops_engine_args:\n", "glmops_engine_args:\n  served-note: '{{ vault_api_key }}'\n", 1))
    proc = _glmops("validate", "-i", str(inv), "--vault-password-file", str(pw))
    said = proc.stdout + proc.stderr
    assert proc.returncode == 2 and "SECRET" in said, said
    assert API_KEY not in said
    _no_traceback(proc)


def test_a_deployment_from_a_plays_hostvars(tmp_path):
    """deployment_from_hostvars: the values come from the {host: vars} mapping an action
    plugin has (task_vars["hostvars"]), the hosts and groups from the inventory."""
    from glmops.inventory import deployment_from_hostvars, load_deployment

    inv = tmp_path / "inv"
    shutil.copytree(LAB, inv)
    base = load_deployment(inv)
    gv = yaml.safe_load((inv / "group_vars" / "all.yml").read_text())
    hosts = list(base.hosts)
    hostvars = {h: {**gv, "glmops_topology": "agg", "glmops_served_model_name": "from-hostvars",
                    "inventory_hostname": h} for h in hosts}
    dep = deployment_from_hostvars(inv, hostvars)
    assert dep.topology == "agg" and dep.served_model_name == "from-hostvars"
    assert list(dep.hosts) == hosts and dep.extra["problems"] == []


def test_provision_and_check_read_an_encrypted_vars_file_with_its_password(tmp_path, pw, monkeypatch):
    """``glmops check``/``provision`` first ask whether the inventory has a deployment: that read
    takes the run's Vault secrets (it used a plain DataLoader and refused every encrypted
    group_vars file, even with the right password); a wrong one is exit 2 naming the file."""
    from glmops.ansible_options import AnsibleOptions, using
    from glmops.commands import provision

    monkeypatch.delenv("ANSIBLE_VAULT_PASSWORD_FILE", raising=False)
    inv = _inventory(tmp_path, pw, inline=False)
    with using(AnsibleOptions(vault_password_files=(str(pw),))):
        assert provision.has_deployment(str(inv)) is True
    wrong = tmp_path / "wrong-pw"
    wrong.write_text("not-the-password\n")
    proc = _glmops("check", "-i", str(inv), "--vault-password-file", str(wrong))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "[VAULT]" in proc.stderr and "vault.yml" in proc.stderr, proc.stderr


def test_every_vault_file_no_secret_opens_is_named_at_once(tmp_path, pw):
    """Two encrypted files with two passwords, neither given: both are named in one answer."""
    inv = _inventory(tmp_path, pw, inline=False)
    other = tmp_path / "other-pw"
    other.write_text("another-password\n")
    second = inv / "group_vars" / "all" / "vault2.yml"
    second.write_text(yaml.safe_dump({"vault_other": "x"}))
    _vault(["encrypt", str(second)], other)
    proc = _glmops("validate", "-i", str(inv))
    assert proc.returncode == 2
    said = proc.stdout + proc.stderr
    assert said.count("[VAULT]") == 2 and "vault.yml" in said and "vault2.yml" in said, said


def test_a_bad_values_hint_names_where_it_came_from(tmp_path):
    """The hint names what the user wrote the value in: -e, the file of -e @FILE, the inventory
    file (it said "set it in group_vars/all.yml" for a value given with -e)."""
    from click.testing import CliRunner

    from glmops.cli import main

    inv = tmp_path / "inv"
    shutil.copytree(LAB, inv)
    given = tmp_path / "extra.yml"
    given.write_text("glmops_engine: vlm\n")

    def problems(*args: str) -> list[str]:
        res = CliRunner().invoke(main, ["validate", "-i", str(inv), *args])
        assert res.exit_code == 2, res.output
        return [line.strip() for line in res.output.splitlines() if line.strip().startswith("[")]

    assert problems("-e", "glmops_engine=vlm") == [
        "[CATALOG_KEY] -e:glmops_engine: glmops_engine 'vlm' is unknown; accepted: trtllm, vllm, sglang, dynamo "
        "(hint: fix glmops_engine given with -e)"]
    [by_file] = problems("-e", f"@{given}")
    assert by_file.startswith(f"[CATALOG_KEY] -e @{given}:glmops_engine: ")
    assert by_file.endswith(f"(hint: fix glmops_engine in {given} (the file given with -e @{given}))")
    # an inline -e after the file wins, and is named -e (it reaches Ansible as a 0600 file of its own)
    [inline] = problems("-e", f"@{given}", "-e", "glmops_engine=vllm2")
    assert inline.startswith("[CATALOG_KEY] -e:glmops_engine: ") and inline.endswith("(hint: fix glmops_engine given with -e)")
    [typed] = problems("-e", "glmops_max_batch_size=abc")
    assert typed.startswith("[TYPE] -e:glmops_max_batch_size: ") and typed.endswith("(hint: fix the value's type given with -e)")
    # the inventory file that holds it
    gv = inv / "group_vars" / "all.yml"
    gv.write_text(gv.read_text().replace("glmops_engine: vllm\n", "glmops_engine: vlm\n"))
    assert problems()[0].endswith(f"(hint: fix glmops_engine in {gv})")
    gv.write_text(gv.read_text().replace("glmops_engine: vlm\n", ""))
    assert problems()[0].endswith("glmops_engine missing; accepted: trtllm, vllm, sglang, dynamo "
                                  "(hint: set glmops_engine in group_vars/all.yml)")


@pytest.mark.parametrize("path, says", [
    ("-e:glmops_engine", "given with -e"),
    ("-e @vars/extra.yml:glmops_checkpoint.mode", "in vars/extra.yml (the file given with -e @vars/extra.yml)"),
    ("inventories/lab/hosts.yml:all.vars.glmops_engine", "in inventories/lab/hosts.yml"),
    ("inventories/lab/group_vars/all.yml:glmops_engine", "in inventories/lab/group_vars/all.yml"),
    ("glmops_engine", "in the inventory"),
])
def test_set_in_reads_the_inventory_labels(path, says):
    from glmops.model import set_in

    assert set_in(path) == says


def test_deploy_names_an_inline_e_as_given_with_e_not_its_temp_file(tmp_path):
    """A fresh-user trial: `deploy -e '{"glmops_max_seq_len": "5l2"}'` said "fix the value's type in
    /tmp/glmops-vault-.../extra-vars-0.json (the file given with -e @...)": the plan play inside
    ansible-playbook saw only the 0600 file the CLI wrote. The CLI now tells it which files hold an
    inline -e (ansible_options.INLINE_ENV). The lab inventory's hosts are not up: the problem
    stops the run before any host."""
    inv = tmp_path / "inv"
    shutil.copytree(LAB, inv)
    proc = _glmops("deploy", "-i", str(inv), "-e", '{"glmops_max_seq_len": "5l2"}', cwd=tmp_path)
    _no_traceback(proc)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out[-3000:]
    assert "[TYPE] -e:glmops_max_seq_len: value '5l2' is str" in out and "(hint: fix the value's type given with -e)" in out
    assert "glmops-vault-" not in out and "no host contacted" in out
