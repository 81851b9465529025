"""glmops/ansible/library/glmops_place.py: every drifted directory and file of a host in
one module call (issue 19: a copy loop cost three SSH round trips per file).

The functions are driven directly, and the module through ``ansible localhost`` (its real
argument parsing, check mode, ``--diff`` and no_log masking).
"""
from __future__ import annotations

import difflib
import importlib.util
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LIBRARY = REPO / "glmops/ansible/library"


def _load():
    spec = importlib.util.spec_from_file_location("glmops_place", LIBRARY / "glmops_place.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


place = _load()


def _f(path, content="a=1\n", mode="0644", owner="root", group="root"):
    return {"path": str(path), "content": content, "mode": mode, "owner": owner, "group": group}


def test_writes_dirs_then_files_and_a_second_run_changes_nothing(tmp_path):
    d = tmp_path / "etc" / "glmops"
    out = place.place([{"path": str(d), "mode": "0750", "owner": "root", "group": "root"}],
                      [_f(d / "x.yaml", "k: 1\n")], [_f(d / "x.env", "TOKEN=s3cret\n", "0600")])
    assert out["paths"] == [str(d), str(d / "x.yaml"), str(d / "x.env")]
    assert stat.S_IMODE(d.stat().st_mode) == 0o750
    assert (d / "x.yaml").read_text() == "k: 1\n" and stat.S_IMODE((d / "x.env").stat().st_mode) == 0o600
    again = place.place([{"path": str(d), "mode": "0750", "owner": "root", "group": "root"}],
                        [_f(d / "x.yaml", "k: 1\n")], [_f(d / "x.env", "TOKEN=s3cret\n", "0600")])
    assert again == {"changed": False, "paths": [], "diff": []}


def test_only_the_mode_is_fixed_in_place_when_the_content_is_the_same(tmp_path):
    p = tmp_path / "u.service"
    p.write_text("[Unit]\n")
    p.chmod(0o600)
    ino = p.stat().st_ino
    out = place.place([], [_f(p, "[Unit]\n", "0644")], [], want_diff=True)
    assert out["paths"] == [str(p)] and out["diff"] == []  # no content diff for a mode change
    assert stat.S_IMODE(p.stat().st_mode) == 0o644 and p.stat().st_ino == ino


def test_a_changed_file_is_replaced_whole_and_diffed_but_a_secret_never_is(tmp_path):
    p, s = tmp_path / "c.yaml", tmp_path / "c.env"
    p.write_text("max_num_seqs: 4\n")
    s.write_text("KEY=old\n")
    ino = p.stat().st_ino
    out = place.place([], [_f(p, "max_num_seqs: 8\n")], [_f(s, "KEY=new\n", "0600")], want_diff=True)
    assert out["paths"] == [str(p), str(s)]
    assert out["diff"] == [{"before_header": str(p), "after_header": str(p),
                            "before": "max_num_seqs: 4\n", "after": "max_num_seqs: 8\n"}]
    assert p.stat().st_ino != ino  # renamed over, never rewritten in place
    assert s.read_text() == "KEY=new\n"
    assert not [x for x in os.listdir(tmp_path) if x.startswith(".glmops-")]


#: the lab's prefill unit line as ``glmops plan -i inventories/lab --out`` renders it (514 characters)
_EXEC = ("ExecStart=/opt/glmops/venvs/vllm-0.32.0/bin/python -m vllm.entrypoints.openai.api_server "
         "--model /models/glmops-lab/tiny-llama/fe40d458d5998d162f66364ccee30bb27f5e658f "
         "--served-model-name tiny-llama --host 10.77.0.11 --port 8001 --tensor-parallel-size 1 "
         "--max-model-len 512 --max-num-seqs {seqs} --max-num-batched-tokens 512 --kv-transfer-config "
         "'{{\"kv_connector\":\"ExampleConnector\",\"kv_role\":\"kv_both\",\"kv_connector_extra_config\":"
         "{{\"shared_storage_path\":\"/var/lib/glmops/lab/kv-shared\"}}}}' --dtype float32 --enforce-eager{more}")
_UNIT = "[Service]\nExecStartPre=-/usr/bin/docker rm -f w0\n{exec}\nRestart=always\n"


def _changed_lines(d: dict) -> list[str]:
    diff = difflib.unified_diff(d["before"].splitlines(keepends=True), d["after"].splitlines(keepends=True))
    return [x for x in diff if x[:1] in "-+" and not x.startswith(("---", "+++"))]


def test_a_one_flag_change_of_a_long_execstart_is_a_one_line_diff_and_the_file_keeps_one_line(tmp_path):
    p = tmp_path / "w.service"
    old = _UNIT.format(exec=_EXEC.format(seqs=4, more=""))
    p.write_text(old)
    assert len(_EXEC.format(seqs=4, more="")) == 514
    new = _UNIT.format(exec=_EXEC.format(seqs=8, more=""))
    out = place.place([], [_f(p, new)], [], want_diff=True)
    assert _changed_lines(out["diff"][0]) == ["-    --max-num-seqs 4 \\\n", "+    --max-num-seqs 8 \\\n"]
    assert p.read_text() == new and sum(x.startswith("ExecStart=") for x in new.splitlines()) == 1
    shown = out["diff"][0]["after"].splitlines()
    # systemd's continuation: every split line but the last ends in " \\"; the short line is kept
    at = shown.index("ExecStart=/opt/glmops/venvs/vllm-0.32.0/bin/python \\")
    assert shown[at + 1] == "    -m vllm.entrypoints.openai.api_server \\" and shown[at - 1] == "ExecStartPre=-/usr/bin/docker rm -f w0"
    assert shown[at + 10].startswith("    --kv-transfer-config '{") and shown[at + 12:] == ["    --enforce-eager", "Restart=always"]
    assert " ".join(x.rstrip(" \\").strip() for x in shown[at:at + 13]) == _EXEC.format(seqs=8, more="")
    # an added flag is one added line; check mode shows the same and writes nothing
    more = _UNIT.format(exec=_EXEC.format(seqs=8, more=" --seed 7"))
    out = place.place([], [_f(p, more)], [], check=True, want_diff=True)
    assert _changed_lines(out["diff"][0]) == ["-    --enforce-eager\n", "+    --enforce-eager \\\n", "+    --seed 7\n"]
    assert p.read_text() == new


def test_check_mode_writes_nothing_and_skips_a_pending_owner(tmp_path):
    d = tmp_path / "state"
    out = place.place([{"path": str(d), "mode": "0755", "owner": "nosuchuser-glmops", "group": "nosuchuser-glmops"}],
                      [_f(tmp_path / "f", "x", owner="root", group="nosuchuser-glmops")], [],
                      pending="nosuchuser-glmops", check=True)
    assert out["paths"] == [str(d), str(tmp_path / "f")]
    assert not d.exists() and not (tmp_path / "f").exists()


def test_errors_name_the_path_and_keep_what_was_done(tmp_path):
    ok = tmp_path / "ok"
    with pytest.raises(place.PlaceError) as err:
        place.place([], [_f(ok), _f(tmp_path / "f", owner="nosuchuser-glmops")], [])
    assert str(tmp_path / "f") in str(err.value) and "nosuchuser-glmops" in str(err.value)
    assert err.value.paths == [str(ok)] and ok.exists()
    (tmp_path / "dir").mkdir()
    with pytest.raises(place.PlaceError, match="is not a regular file"):
        place.place([], [_f(tmp_path / "dir")], [])
    with pytest.raises(place.PlaceError, match="missing.*No such file"):
        place.place([], [_f(tmp_path / "missing" / "f")], [])
    with pytest.raises(place.PlaceError, match="not octal"):
        place.place([], [_f(tmp_path / "g", mode="rw")], [])


def _ansible(tmp_path, args: dict, *extra: str) -> tuple[int, dict, str]:
    env = dict(os.environ, ANSIBLE_LIBRARY=str(LIBRARY), ANSIBLE_LOCALHOST_WARNING="0",
               ANSIBLE_INVENTORY_UNPARSED_WARNING="0", ANSIBLE_NOCOLOR="1",
               ANSIBLE_CALLBACK_RESULT_FORMAT="json", ANSIBLE_CONFIG=str(tmp_path / "none.cfg"))
    bindir = Path(sys.executable).parent
    proc = subprocess.run([str(bindir / "ansible"), "localhost", "-c", "local", "-m", "glmops_place",
                           "-a", json.dumps(args), *extra], capture_output=True, text=True, env=env, timeout=120, cwd=tmp_path)
    # the minimal callback prints "localhost | CHANGED => {result}" after any diff
    res = json.loads(proc.stdout[proc.stdout.rindex("localhost | "):].split("=>", 1)[1])
    return proc.returncode, res, proc.stdout + proc.stderr


def test_the_module_masks_only_the_secret_content_and_diffs_in_diff_mode(tmp_path):
    p, s = tmp_path / "c.yaml", tmp_path / "c.env"
    p.write_text("a: 1\n")
    secret = _f(s, "HF_TOKEN=hf_abcdefghijklmnop\n", "0600")
    args = {"files": [_f(p, "a: 2\n") | {"service": "w0", "sha256": "x"}],
            "secret_files": [{k: v for k, v in secret.items() if k != "content"}],
            "secret_contents": [secret["content"]]}
    rc, res, out = _ansible(tmp_path, args, "--check", "--diff", "-v")
    assert rc == 0 and res["changed"] and res["paths"] == [str(p), str(s)]
    assert not s.exists() and p.read_text() == "a: 1\n"  # check mode
    # the callback prints the diff (and pops it from the result): the file's, never the secret's
    assert f"--- before: {p}" in out and "-a: 1" in out and "+a: 2" in out and f"before: {s}" not in out
    assert "hf_abcdefghijklmnop" not in out and str(s) in out  # the path stays readable
    rc, res, out = _ansible(tmp_path, args, "-vvv")
    assert rc == 0 and s.read_text() == "HF_TOKEN=hf_abcdefghijklmnop\n" and "hf_abcdefghijklmnop" not in out
    rc, res, out = _ansible(tmp_path, args)
    assert rc == 0 and res["changed"] is False


def test_the_module_refuses_a_relative_path_naming_the_key(tmp_path):
    rc, res, _ = _ansible(tmp_path, {"files": [_f("etc/x")]})
    assert rc != 0 and res["msg"] == "files[0].path must be an absolute path, got 'etc/x'"


def test_the_hosts_journal_line_never_holds_a_secret_content(tmp_path, monkeypatch):
    """AnsibleModule logs "Invoked with <args>" on the target (journal or syslog): a secret
    content must be NOT_LOGGING_PARAMETER there, multi-line values included."""
    from ansible.module_utils import basic
    from ansible.module_utils.testing import patch_module_args

    secret = "A=1\nVLLM_API_KEY=sk-JOURNALsecret42\nB=2\n"
    args = {"secret_files": [{"path": str(tmp_path / "w.env"), "mode": "0600", "owner": "root", "group": "root"}],
            "secret_contents": [secret], "files": [_f(tmp_path / "u.service", "[Unit]\n")]}
    logged = []
    monkeypatch.setattr(basic.AnsibleModule, "log", lambda self, msg, log_args=None: logged.append(msg))
    with patch_module_args(args), pytest.raises(SystemExit) as done:
        place.main()
    assert done.value.code == 0 and (tmp_path / "w.env").read_text() == secret
    line = "".join(logged)
    assert "Invoked with" in line and "NOT_LOGGING_PARAMETER" in line and str(tmp_path / "w.env") in line
    assert "JOURNALsecret42" not in line


def test_a_content_count_that_does_not_match_the_files_is_refused(tmp_path):
    rc, res, out = _ansible(tmp_path, {"secret_files": [{"path": str(tmp_path / "a.env")}], "secret_contents": []})
    assert rc != 0 and "secret_contents has 0 entries for 1 secret_files" in res["msg"]


def test_absent_files_go_first_a_missing_one_is_no_change_and_a_directory_is_refused(tmp_path):
    """The checkpoint role forgets an earlier run's progress and manifest and writes the hub
    token in one call (roles/checkpoint/tasks/fetch_start.yml)."""
    old, token = tmp_path / "progress.json", tmp_path / "hf_token"
    old.write_text("{}")
    secret = _f(token, "hf_x", "0600")
    checked = place.place([], [], [secret], absent=[str(old), str(tmp_path / "never")], check=True)
    assert checked["paths"] == [str(old), str(token)] and old.exists() and not token.exists()
    out = place.place([], [], [secret], absent=[str(old), str(tmp_path / "never")])
    assert out["paths"] == [str(old), str(token)] and not old.exists() and token.read_text() == "hf_x"
    assert place.place([], [], [], absent=[str(old)])["changed"] is False
    (tmp_path / "d").mkdir()
    with pytest.raises(place.PlaceError, match=r"d: is a directory; only files are removed"):
        place.place([], [], [], absent=[str(tmp_path / "d")])
    rc, res, _ = _ansible(tmp_path, {"absent": ["rel/progress.json"]})
    assert rc != 0 and res["msg"] == "absent[0] must be an absolute path, got 'rel/progress.json'"


def test_check_mode_skips_a_pending_group_that_differs_from_the_pending_user(tmp_path):
    """roles/checkpoint (host.yml): checkpoint_service_group may name a group other than the user;
    in check mode on a bare host neither exists yet."""
    d = tmp_path / "models"
    spec = {"path": str(d), "mode": "2775", "owner": "nosuchuser-glmops", "group": "nosuchgroup-glmops"}
    with pytest.raises(place.PlaceError, match="nosuchgroup-glmops"):
        place.place([spec], [], [], pending=("nosuchuser-glmops", ""), check=True)
    out = place.place([spec], [], [], pending=("nosuchuser-glmops", "nosuchgroup-glmops"), check=True)
    assert out["paths"] == [str(d)] and not d.exists()
    rc, res, _ = _ansible(tmp_path, {"dirs": [spec], "pending_user": "nosuchuser-glmops",
                                     "pending_group": "nosuchgroup-glmops"}, "--check")
    assert rc == 0 and res["changed"] and not d.exists()
