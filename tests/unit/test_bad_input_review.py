"""Bad input found by the bad-input review (feeding glmops the inputs a user may get wrong):
each ends with exit 2 and a problem naming the argument, the value and what is accepted, within
seconds, before any host is touched, without printing a secret. Inventories are written as a
user would, in a tmp dir; nothing is contacted."""
from __future__ import annotations

import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from inventory_factory import vllm_b200_disagg, write_inventory

from glmops.cli import main

_BOMB = "\n".join(['a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
                  + [f"{n}: &{n} [{', '.join([f'*{p}'] * 9)}]" for p, n in zip("abcdefgh", "bcdefghi")]) + "\n"


def _validate(inv: Path, *args: str, limit_s: float = 15.0):
    start = time.monotonic()
    r = CliRunner().invoke(main, ["validate", "-i", str(inv), *args])
    assert time.monotonic() - start < limit_s, f"took {time.monotonic() - start:.1f} s: {r.output}"
    return r


@pytest.mark.parametrize("how", ["file", "inline"])
def test_an_extra_vars_alias_bomb_exits_2_at_once(tmp_path, how):
    # it ran for minutes: the inventory's files had the alias-bomb limit, -e did not
    inv = write_inventory(tmp_path / "inv", vllm_b200_disagg())
    bomb = tmp_path / "bomb.yml"
    bomb.write_text(_BOMB)
    arg = f"@{bomb}" if how == "file" else "{" + ", ".join(_BOMB.strip().splitlines()) + "}"
    r = _validate(inv, "-e", arg)
    assert r.exit_code == 2, r.output
    assert "EXTRA_VARS" in r.output and "200,000 YAML nodes" in r.output and "accepted: at most" in r.output, r.output


def test_an_extra_vars_file_over_the_inventory_file_limit_exits_2_naming_it(tmp_path, monkeypatch):
    from glmops import inventory

    monkeypatch.setattr(inventory, "MAX_FILE_BYTES", 1000)
    inv = write_inventory(tmp_path / "inv", vllm_b200_disagg())
    big = tmp_path / "big.yml"
    big.write_text("".join(f"pad_{i}: xxxxxxxxxx\n" for i in range(200)))
    r = _validate(inv, "-e", f"@{big}")
    assert r.exit_code == 2, r.output
    assert "EXTRA_VARS" in r.output and str(big) in r.output and "accepted: at most 1,000 bytes" in r.output, r.output


def test_a_small_extra_vars_file_with_aliases_still_reads(tmp_path):
    inv = write_inventory(tmp_path / "inv", vllm_b200_disagg())
    ok = tmp_path / "ok.yml"
    ok.write_text("base: &b {glmops_max_batch_size: 8}\nglmops_max_batch_size: 16\n")
    r = _validate(inv, "-e", f"@{ok}")
    assert "EXTRA_VARS" not in r.output, r.output


@pytest.mark.parametrize("arg", ['{"glmops_api_key": "sk-TOPSECRETvalue123456"', '["glmops_api_key", "pw-TOPSECRETvalue"]',
                                 '{"glmops_env": {"HF_TOKEN": "TOPSECRETvalue"', '{"x": "https://u:TOPSECRETvalue@h.invalid/"'])
def test_a_bad_extra_vars_argument_holding_a_secret_is_not_quoted(tmp_path, arg):
    # the problem quoted the whole argument, API key and all (twice, and once more in Ansible's reason)
    inv = write_inventory(tmp_path / "inv", vllm_b200_disagg())
    r = _validate(inv, "-e", arg)
    assert r.exit_code == 2, r.output
    assert "EXTRA_VARS" in r.output and "'<redacted>'" in r.output and "TOPSECRET" not in r.output, r.output


def test_a_bad_extra_vars_argument_without_a_secret_is_quoted(tmp_path):
    inv = write_inventory(tmp_path / "inv", vllm_b200_disagg())
    r = _validate(inv, "-e", '{"glmops_max_batch_size": 1')
    assert r.exit_code == 2 and """-e '{"glmops_max_batch_size": 1'""" in r.output, r.output


@pytest.mark.parametrize("arg,words", [("glmops_max_batch_size 64", "'glmops_max_batch_size 64'"),
                                       ('glmops_checkpoint={"size_gib": 300}', "'300}'"), ("justaword", "'justaword'")])
def test_extra_vars_words_that_are_not_key_value_exit_2_naming_them(tmp_path, arg, words):
    # they passed (exit 0) as the variable _raw_params: -e 'glmops_max_batch_size 64' changed nothing
    inv = write_inventory(tmp_path / "inv", vllm_b200_disagg())
    r = _validate(inv, "-e", arg)
    assert r.exit_code == 2, r.output
    assert "EXTRA_VARS" in r.output and f"not key=value ({words})" in r.output and "accepted:" in r.output, r.output


def test_extra_vars_words_that_are_not_key_value_are_not_quoted_when_secret(tmp_path):
    inv = write_inventory(tmp_path / "inv", vllm_b200_disagg())
    r = _validate(inv, "-e", "glmops_api_key= sk-TOPSECRETvalue123456")
    assert r.exit_code == 2 and "not key=value" in r.output and "TOPSECRET" not in r.output, r.output


def test_key_value_words_with_a_quoted_space_still_read(tmp_path):
    inv = write_inventory(tmp_path / "inv", vllm_b200_disagg())
    r = _validate(inv, "-e", "glmops_max_batch_size=8 other_var='a b'")
    assert "EXTRA_VARS" not in r.output, r.output


def _plan_out(tmp_path, out: str):
    inv = write_inventory(tmp_path / "inv", vllm_b200_disagg())
    return CliRunner().invoke(main, ["plan", "-i", str(inv), "--out", out])


def test_plan_out_that_cannot_be_written_exits_2_naming_it(tmp_path):
    # it ended with exit 1 and 'error: NotADirectoryError: [Errno 20] ...'
    (tmp_path / "a-file").write_text("x")
    for out in (str(tmp_path / "a-file" / "sub"), "/dev/null"):
        r = _plan_out(tmp_path, out)
        assert r.exit_code == 2, r.output
        assert f"--out {out!r} cannot be written: Not a directory" in r.output and "accepted:" in r.output, r.output
        assert "NotADirectoryError" not in r.output, r.output


def test_plan_out_root_is_refused_before_writing(tmp_path, monkeypatch):
    # as root it wrote /node-0/etc/... and /_monitoring/...
    from glmops import render

    monkeypatch.setattr(render, "write_tree", lambda *a, **k: pytest.fail("write_tree was called"))
    for out in ("/", "//", "/."):
        r = _plan_out(tmp_path, out)
        assert r.exit_code == 2 and "is the root directory" in r.output and "accepted:" in r.output, r.output


def test_plan_out_with_secrets_never_leaves_a_file_readable_by_others_while_writing(tmp_path, monkeypatch):
    # write_text then chmod: the API key's env file was 0644 (umask 022) until the chmod
    import os
    import stat

    from glmops import render

    seen: list[tuple[str, int]] = []
    real_open = os.open

    def watching_open(path, flags, mode=0o777, *a, **k):
        fd = real_open(path, flags, mode, *a, **k)
        if flags & os.O_WRONLY and str(path).startswith(str(tmp_path / "out")):
            seen.append((str(path), stat.S_IMODE(os.fstat(fd).st_mode)))
        return fd

    import io

    real_io_open = io.open

    def watching_io_open(path, mode="r", *a, **k):  # Path.write_text's way in
        fh = real_io_open(path, mode, *a, **k)
        if "w" in mode and str(path).startswith(str(tmp_path / "out")):
            seen.append((str(path), stat.S_IMODE(os.fstat(fh.fileno()).st_mode)))
        return fh

    old = os.umask(0o022)
    try:
        monkeypatch.setattr(render.os, "open", watching_open)
        monkeypatch.setattr(io, "open", watching_io_open)
        inv = write_inventory(tmp_path / "inv", vllm_b200_disagg(glmops_api_key="sk-apikeyvalue0123456789"))
        r = CliRunner().invoke(main, ["plan", "-i", str(inv), "--out", str(tmp_path / "out"), "--with-secrets"])
    finally:
        os.umask(old)
    assert r.exit_code == 0, r.output
    env_files = [p for p, _m in seen if p.endswith(".env")]
    assert env_files and all(m & 0o077 == 0 for _p, m in seen), seen
    assert all(stat.S_IMODE(os.stat(p).st_mode) == 0o600 for p in env_files)


def test_memory_fit_from_an_inventory_size_gib_names_it(tmp_path):
    # it said 'weights 1000 GiB' with a hint about tp/pp and GPUs only, the place a catalog layout
    inv = write_inventory(tmp_path / "inv", vllm_b200_disagg())
    r = _validate(inv, "-e", '{"glmops_checkpoint": {"size_gib": 5000}}')
    assert r.exit_code == 2, r.output
    line = next(x for x in r.output.splitlines() if "MEMORY_FIT" in x)
    assert "5000 GiB (from -e:glmops_checkpoint.size_gib)" in line and "correct glmops_checkpoint.size_gib" in line, line
