"""glmops.runner: secrets in the controller's environment never reach ansible-runner's artifacts
(ansible-runner writes the run's whole environment into artifacts/<ident>/command)."""
from __future__ import annotations

import os
from pathlib import Path

from glmops import runner

TOKEN = "hf_runnerSECRETvalue0123456789"
API_KEY = "sk-runner-SECRET-api-key-42"


def test_secret_env_names_keeps_paths_to_secret_files():
    env = {"HF_TOKEN": "x", "VLLM_API_KEY": "x", "MY_PASSWORD": "x", "HOME": "/root",
           "ANSIBLE_VAULT_PASSWORD_FILE": "/etc/vault.pass", "PATH": "/bin"}
    assert sorted(runner.secret_env_names(env)) == ["HF_TOKEN", "MY_PASSWORD", "VLLM_API_KEY"]


def test_run_artifacts_hold_no_secret_and_environ_is_restored(tmp_path, monkeypatch):
    monkeypatch.setenv("GLMOPS_RUNS_DIR", str(tmp_path / "runs"))
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    monkeypatch.setenv("VLLM_API_KEY", API_KEY)
    inv = tmp_path / "hosts.yml"
    inv.write_text("all:\n  hosts:\n    localhost:\n      ansible_connection: local\n"
                   "      ansible_python_interpreter: " + os.sys.executable + "\n")
    book = tmp_path / "echo.yml"
    # the play would print the variable if it were in its environment
    book.write_text("- hosts: localhost\n  gather_facts: false\n  tasks:\n"
                    "    - ansible.builtin.debug:\n"
                    "        msg: \"token=[{{ lookup('ansible.builtin.env', 'HF_TOKEN') }}]\"\n")
    result = runner.run("secrets-test", str(book), inv, quiet=True)
    assert result.rc == 0, result.failures
    texts = [p.read_text(errors="replace") for p in Path(result.artifacts).rglob("*") if p.is_file()]
    assert texts, "the run left no artifacts to check"
    assert any("token=[]" in t for t in texts)  # the play ran and saw no token
    assert not any(TOKEN in t or API_KEY in t for t in texts)
    assert os.environ["HF_TOKEN"] == TOKEN and os.environ["VLLM_API_KEY"] == API_KEY
