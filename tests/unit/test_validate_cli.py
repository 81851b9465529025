"""``glmops validate``: exit 0 with a summary, exit 2 with every problem; never contacts a host."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from click.testing import CliRunner
from inventory_factory import REV, vllm_b200_disagg, write_inventory

from glmops.cli import main

ROOT = Path(__file__).resolve().parents[2]
# TEST-NET addresses (RFC 5737): unroutable by design.
BOGUS_HOSTS = {f"gpu-{i}": {"ansible_host": f"192.0.2.{10 + i}"} for i in range(4)}


def invalid_gv() -> dict:
    """Several independent problems: F01 layout mismatch, F12 revision, max_seq_len, F03-free."""
    gv = vllm_b200_disagg(glmops_checkpoint={"revision": "main"}, glmops_max_seq_len=2_000_000)
    pools = gv["glmops_topologies"]["disagg"]["pools"]
    pools["prefill"]["engine_args"] = {"disable_hybrid_kv_cache_manager": True, "block_size": 64}
    pools["decode"]["engine_args"] = {"block_size": 64}
    return gv


def test_valid_inventory_exits_0_with_a_summary():
    result = CliRunner().invoke(main, ["validate", "-i", str(ROOT / "inventories/b200"), "--topology", "disagg"])
    assert result.exit_code == 0, result.output
    assert "valid" in result.output and "trtllm" in result.output and "disagg" in result.output
    assert "prefill 1x(tp4 ep4)" in result.output


def test_invalid_inventory_exits_2_printing_every_problem(tmp_path):
    inv = write_inventory(tmp_path / "inv", invalid_gv())
    result = CliRunner().invoke(main, ["validate", "-i", str(inv)])
    assert result.exit_code == 2
    out = result.output
    assert "3 problem(s)" in out
    for code in ("F01_LAYOUT_MISMATCH", "F12_REVISION", "MAX_SEQ_LEN"):
        assert f"[{code}]" in out, out
    # each line names the key (inventory path), the value and what is accepted
    assert "glmops_checkpoint.revision: glmops_checkpoint.revision 'main'" in out
    assert "max_seq_len 2,000,000" in out and "accepted: 1..1,048,576" in out
    assert "prefill 'disabled', decode '(default)'" in out


def test_json_output(tmp_path):
    inv = write_inventory(tmp_path / "inv", invalid_gv())
    result = CliRunner().invoke(main, ["validate", "-i", str(inv), "--json"])
    assert result.exit_code == 2
    data = json.loads(result.output)
    assert data["valid"] is False
    assert {p["code"] for p in data["problems"]} == {"F01_LAYOUT_MISMATCH", "F12_REVISION", "MAX_SEQ_LEN"}
    assert all(p["path"] and p["message"] for p in data["problems"])
    ok = CliRunner().invoke(main, ["validate", "-i", str(ROOT / "inventories/b300"), "--json"])
    assert ok.exit_code == 0 and json.loads(ok.output) == {"inventory": str(ROOT / "inventories/b300"), "valid": True, "problems": []}


def test_unreadable_inventory_exits_2(tmp_path):
    result = CliRunner().invoke(main, ["validate", "-i", str(tmp_path / "nope")])
    assert result.exit_code == 2 and "[INVENTORY]" in result.output


def test_validate_opens_no_connection(tmp_path, monkeypatch):
    """In-process proof: any socket connect during validate would be recorded and refused."""
    attempts: list[object] = []

    def refuse(*args, **kwargs):
        attempts.append(args[1:] if len(args) > 1 else args)
        raise OSError("network access during validate")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    inv = write_inventory(tmp_path / "inv", invalid_gv(), hosts=BOGUS_HOSTS)
    result = CliRunner().invoke(main, ["validate", "-i", str(inv)])
    assert result.exit_code == 2, result.output
    valid = write_inventory(tmp_path / "ok", vllm_b200_disagg(glmops_checkpoint={"revision": REV}), hosts=BOGUS_HOSTS)
    result = CliRunner().invoke(main, ["validate", "-i", str(valid)])
    assert result.exit_code == 0, result.output
    assert attempts == []


def test_validate_runs_no_ssh(tmp_path):
    """Out-of-process proof: ssh/scp/sftp on PATH are traps that leave a marker when run."""
    trap = tmp_path / "bin"
    trap.mkdir()
    marker = tmp_path / "contacted"
    for name in ("ssh", "scp", "sftp", "ansible-playbook", "ansible"):
        script = trap / name
        script.write_text(f"#!/bin/sh\necho \"$0 $*\" >> {marker}\nexit 255\n")
        script.chmod(0o755)
    inv = write_inventory(tmp_path / "inv", invalid_gv(), hosts=BOGUS_HOSTS)
    env = dict(os.environ, PATH=f"{trap}{os.pathsep}{os.environ.get('PATH', '')}")
    proc = subprocess.run([sys.executable, "-m", "glmops.cli", "validate", "-i", str(inv)],
                          capture_output=True, text=True, env=env, timeout=120, cwd=ROOT)
    assert proc.returncode == 2, proc.stderr
    assert "F12_REVISION" in proc.stdout
    assert not marker.exists(), marker.read_text()


@pytest.mark.parametrize("verb", ["check", "provision", "history", "rollback", "status"])
def test_an_unreadable_inventory_is_exit_2_without_a_traceback_on_every_verb(tmp_path, verb):
    import shutil as _sh

    from click.testing import CliRunner

    from glmops.cli import main

    inv = tmp_path / "inv"
    _sh.copytree(Path(__file__).resolve().parents[2] / "inventories" / "b200", inv)
    with open(inv / "group_vars" / "all.yml", "a") as fh:
        fh.write("glmops_model: [unclosed\n")
    r = CliRunner().invoke(main, [verb, "-i", str(inv)], env={"COLUMNS": "300"})
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output and "YAML parsing failed" in r.output


def test_an_unexpected_error_is_one_line_and_exit_1(monkeypatch):
    from click.testing import CliRunner

    from glmops import cli

    @cli.click.command("boom")
    def boom():
        raise RuntimeError("disk on fire")

    monkeypatch.setitem(cli.VERBS, "boom", ("tests_boom:boom", "x"))
    monkeypatch.setattr(cli.LazyGroup, "get_command", lambda self, ctx, name: boom)
    monkeypatch.delenv("GLMOPS_DEBUG", raising=False)
    r = CliRunner().invoke(cli.main, ["boom"])
    assert r.exit_code == 1 and "error: RuntimeError: disk on fire" in r.output
    assert "GLMOPS_DEBUG=1" in r.output and "Traceback" not in r.output


@pytest.mark.parametrize("fmt", ["yaml", "json"])
def test_printed_plans_redact_secret_env_values_but_keep_token_counts(tmp_path, fmt):
    gv = vllm_b200_disagg(glmops_env={"VLLM_API_KEY": "sk-PLAN-SECRET"}, glmops_max_num_tokens=8192)
    inv = write_inventory(tmp_path / "inv", gv)
    r = CliRunner().invoke(main, ["plan", "-i", str(inv), "--format", fmt])
    assert r.exit_code == 0, r.output
    assert "sk-PLAN-SECRET" not in r.output and "<redacted>" in r.output
    assert "8192" in r.output
