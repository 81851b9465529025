"""The deploy's one read per host (issue 4: a no-op redeploy costs about one look at each host).

glmops.hostread runs several standalone host scripts in one ``python3 -`` and reads their
answers; glmops.deploystate decides whether a host is in state; the glmops_deploy_read action
puts both together. Run here for real: the scripts in a real Python process, the action in
a real ansible-playbook against localhost (local connection, stdin like SSH pipelining).
The lab e2e (tests/e2e/test_deploy_b200sim.py) proves the whole deploy on a lab host.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from glmops import deploystate, hostread

REPO = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
       "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
HOSTCTL = hostread.script("engine_service", "glmops_hostctl.py")
PROBE = hostread.script("engine_runtime", "glmops_runtime_probe.py")
FACTS = hostread.script("prechecks", "glmops_precheck_facts.py")


def _on_host(jobs) -> dict:
    """What an action plugin gets: the program run by a real python3 reading stdin."""
    proc = subprocess.run(["python3", "-"], input=hostread.program(jobs), capture_output=True, text=True,
                          timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    return hostread.parse(proc.stdout)


def _owner(path: Path) -> str:
    import grp
    import pwd

    st = path.stat()
    return f"{st.st_mode & 0o7777:04o}:{pwd.getpwuid(st.st_uid).pw_name}:{grp.getgrgid(st.st_gid).gr_name}"


def test_one_program_runs_every_script_with_its_own_argv_and_exit_code(tmp_path):
    unit_file = tmp_path / "a.conf"
    unit_file.write_text("x\n")
    sha = hashlib.sha256(b"x\n").hexdigest()
    stamp = tmp_path / "stamp.json"
    stamp.write_text('{"key": "k"}\n')
    boom = tmp_path / "boom.py"
    boom.write_text("raise RuntimeError('disk on fire')\n")
    three = tmp_path / "three.py"
    three.write_text("import sys\nprint('{\"x\": 1}')\nsys.exit(3)\n")
    before = sorted(p.name for p in tmp_path.iterdir())
    out = _on_host([
        ("state", HOSTCTL, ["state", "--want", f"{unit_file}={sha}:{_owner(unit_file)}", "--stamp", str(stamp)]),
        ("drift", HOSTCTL, ["state", "--want", f"{unit_file}={'0' * 64}:{_owner(unit_file)}"]),
        ("probe", PROBE, ["--venv", str(tmp_path / "no-venv")]),
        ("facts", FACTS, ['{"listening": false, "memlock_properties": []}']),
        ("bad", FACTS, ['{"gpu_vendr": "nvidia"}']),
        ("boom", boom, []), ("three", three, []),
    ])
    assert out["state"]["rc"] == 0 and out["state"]["json"]["drifted"] == []
    assert out["state"]["json"]["stamp"] == {"key": "k"}
    assert out["drift"]["json"]["drifted"] == [str(unit_file)] and out["drift"]["json"]["stamp"] is None
    assert out["probe"]["json"] == {"manifest": None, "marker": None, "packages": {}, "platform": None, "zstd": shutil.which("zstd")}
    assert out["facts"]["json"]["facts"]["os"]["id"]
    assert out["bad"]["rc"] == 2 and "unknown option(s): gpu_vendr" in out["bad"]["json"]["msg"]
    assert out["boom"]["rc"] == 1 and "boom.py: RuntimeError: disk on fire" in out["boom"]["json"]["msg"]
    assert out["three"]["rc"] == 3 and out["three"]["json"] == {"x": 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # a read writes nothing


def test_an_unfinished_answer_is_an_error():
    with pytest.raises(ValueError, match="no answer from the host read"):
        hostread.parse("Traceback ... SyntaxError")
    with pytest.raises(FileNotFoundError, match="nope.py is missing"):
        hostread.script("engine_service", "nope.py")


def _probe(venv: Path, marker: dict | None, manifest: dict | None, wh: Path) -> dict:
    venv.mkdir(parents=True, exist_ok=True)
    wh.mkdir(parents=True, exist_ok=True)
    if marker is not None:
        (venv / ".glmops-runtime.json").write_text(json.dumps(marker))
    if manifest is not None:
        (wh / "wheelhouse.json").write_text(json.dumps(manifest))
    return _on_host([("p", PROBE, ["--venv", str(venv)])])["p"]["json"]


def test_runtime_in_state_follows_the_wheel_set_the_marker_names(tmp_path):
    wh, venv = tmp_path / "wh", tmp_path / "venv"
    rt = {"engine": "vllm", "version": "0.33.0", "venv": str(venv)}
    want = {"source": "wheelhouse", "wheelhouse": str(wh), "wheelhouse_key": "k1", "system_packages": []}
    assert deploystate.runtime_in_state(rt, _probe(venv, None, None, wh)) == [
        f"vllm 0.33.0: {venv} has no install marker"]
    probe = _probe(venv, {"hash": "h", "want": want}, {"key": "k1"}, wh)
    assert probe["manifest"] == {"key": "k1"}  # read from the wheelhouse the marker names
    assert deploystate.runtime_in_state(rt, probe) == []
    # the wheel set was rebuilt on the host: the runtime role would reinstall
    assert deploystate.runtime_in_state(rt, _probe(venv, None, {"key": "k2"}, wh)) == [
        f"vllm 0.33.0: the wheel set at {wh} is not the one installed"]
    # a Debian package the wheels need went missing
    want_pkg = want | {"system_packages": ["glmops-no-such-package"]}
    probe = _probe(venv, {"hash": "h", "want": want_pkg}, {"key": "k1"}, wh)
    assert probe["packages"] == {"glmops-no-such-package": "not-installed"}
    assert deploystate.runtime_in_state(rt, probe) == [
        "vllm 0.33.0: Debian package glmops-no-such-package is not installed"]
    assert deploystate.runtime_in_state(rt | {"mode": "container"}, probe)  # never in state here


def test_decide_lists_every_reason():
    clean = {"user": True, "drifted": [], "stale": [], "restart": [], "unhealthy": []}
    stamp = {"key": "k", "generation": 7}
    assert deploystate.decide([], [clean], [], stamp, "7", "k") == []
    why = deploystate.decide(["lab-1: shm 64 MiB, needed 1024 MiB"], [
        clean | {"user": False, "drifted": ["/etc/x"], "stale": ["old.service"]},
        clean | {"restart": ["a.service", "c.service", "d.service"], "unhealthy": ["b.service"],
                 "units": {"a.service": {"active": "inactive", "sub": "dead", "enabled": "enabled"},
                           "c.service": {"active": "active", "sub": "running", "enabled": "disabled"},
                           "d.service": {"active": "active", "sub": "running", "enabled": "enabled"}}}],
        [], None, None, "k")
    assert why == ["precheck failed: lab-1: shm 64 MiB, needed 1024 MiB", "the service user is missing",
                   "/etc/x differs from the Plan", "old.service is no longer in the Plan",
                   "a.service is not running (inactive/dead)", "c.service is not enabled (disabled)",
                   "d.service restarts for its changed files", "b.service does not answer /health 200",
                   "no deploy of this Plan was recorded on this host"]
    assert deploystate.decide([], [clean], [], {"key": "old", "generation": 7}, "7", "k") == [
        "the last deploy on this host was of another Plan, variables or glmops version"]
    # a rollback (or an upgrade) made another generation current since this Plan's deploy
    assert deploystate.decide([], [clean], [], stamp, "6", "k") == [
        "the current generation (6) is not the one this Plan's deploy recorded (7): a rollback or upgrade ran since"]
    # a stamp glmops did not write (valid JSON, but not its shape) is no crash
    for junk in ([1, 2], "x", {"key": 3}, {}):
        assert deploystate.decide([], [clean], [], junk, "7", "k") == ["the deploy stamp is not one glmops wrote"]


def test_deploy_key_follows_plan_host_role_vars_and_code(tmp_path):
    plan = {"deployment": "d", "services": [1]}
    key = deploystate.deploy_key(plan, "h1", {"engine_runtime_sets": {"a": "b"}, "glmops_x": 1}, "c")
    assert key == deploystate.deploy_key(plan, "h1", {"engine_runtime_sets": {"a": "b"}, "glmops_x": 2}, "c")
    assert key != deploystate.deploy_key(plan | {"services": [2]}, "h1", {"engine_runtime_sets": {"a": "b"}}, "c")
    assert key != deploystate.deploy_key(plan, "h2", {"engine_runtime_sets": {"a": "b"}}, "c")
    assert key != deploystate.deploy_key(plan, "h1", {"engine_runtime_sets": {"a": "c"}}, "c")
    assert key != deploystate.deploy_key(plan, "h1", {"engine_runtime_sets": {"a": "b"}}, "c2")
    for top in ("roles/r/tasks", "playbooks"):
        (tmp_path / top).mkdir(parents=True)
    (tmp_path / "roles/r/tasks/main.yml").write_text("a\n")
    first = deploystate.code_digest(tmp_path)
    deploystate._DIGEST.clear()
    (tmp_path / "roles/r/tasks/main.yml").write_text("b\n")
    assert deploystate.code_digest(tmp_path) != first


def test_provision_roles_follow_the_catalog_and_the_switches():
    assert deploystate.provision_roles("b200", "venv") == {"driver": True, "toolkit": False}
    assert deploystate.provision_roles("b200", None) == {"driver": True, "toolkit": True}
    assert deploystate.provision_roles("cpu", "container") == {"driver": False, "toolkit": False}
    assert deploystate.provision_roles("b200", "venv", "false", True) == {"driver": False, "toolkit": True}


def _read_play(tmp_path: Path, plan: dict, hostvars: dict, **args) -> dict:
    """glmops_deploy_read on localhost (local connection) -> its registered result."""
    out = tmp_path / "read.json"
    play = tmp_path / "read.yml"
    play.write_text(yaml.safe_dump([{
        "name": "read", "hosts": "localhost", "connection": "local", "gather_facts": False,
        "vars": {"the_plan": plan, "ansible_python_interpreter": sys.executable, **hostvars},
        "tasks": [{"name": "Read", "register": "r", "glmops_deploy_read": {"plan": "{{ the_plan }}", **args}},
                  {"name": "Keep", "ansible.builtin.copy": {"content": "{{ r | to_json }}", "dest": str(out)}}]}]))
    proc = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", str(play)],
                          capture_output=True, text=True, env=ENV, cwd=REPO, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:]
    return json.loads(out.read_text())


def test_read_action_finds_a_host_in_state_only_with_its_stamp_and_files(tmp_path):
    import getpass

    user = getpass.getuser()
    cfg, state = tmp_path / "etc", tmp_path / "state"
    cfg.mkdir(mode=0o750)
    state.mkdir(mode=0o755)
    conf = cfg / "w.yaml"
    conf.write_text("max_batch_size: 64\n")
    conf.chmod(0o644)
    import grp
    import pwd

    for d in (cfg, state):  # what engine_service keeps: config root:<user> 0750, state <user>:<user> 0755
        os.chown(d, pwd.getpwnam("root" if d == cfg else user).pw_uid, grp.getgrnam(user).gr_gid)
    group = grp.getgrgid(os.getgid()).gr_name
    plan = {"deployment": "t", "unit_glob": "glmops-test-nothing-*.service", "service_user": user,
            "config_dir": str(cfg), "state_dir": str(state),
            "hosts": {"localhost": {"units": [], "runtimes": [], "target": {},
                                    "workers": {"services": [], "secret_files": [], "files": [
                                        {"path": str(conf), "sha256": hashlib.sha256(conf.read_bytes()).hexdigest(),
                                         "mode": "0644", "owner": pwd.getpwuid(os.getuid()).pw_name,
                                         "group": group}]},
                                    "routers": {"services": [], "files": [], "secret_files": []}}}}
    # this machine has no NTP and no systemd as PID 1: those two checks are switched off as
    # an inventory would (prechecks_* variables)
    hostvars = {"prechecks_time_sync": False, "prechecks_memlock": False}
    first = _read_play(tmp_path, plan, hostvars)
    assert first["fast"] is False and first["groups"] == ["glmops_apply", "glmops_provision"], first
    assert first["why"] == ["no deploy of this Plan was recorded on this host"], first["why"]
    assert first["report"]["ok"] is True and first["changed"] is False
    stamp = Path(first["stamp_path"])
    assert stamp == state / "_records" / "t" / "deploy-stamp.json"
    (stamp.parent / "generations").mkdir(parents=True)
    (stamp.parent / "generations" / "current").write_text("3\n")
    stamp.write_text(json.dumps({"key": first["key"], "generation": 3}))

    again = _read_play(tmp_path, plan, hostvars)
    assert again["fast"] is True and again["groups"] == [] and again["msg"] == "in state: nothing to change"
    (stamp.parent / "generations" / "current").write_text("2\n")  # a rollback since
    assert "a rollback or upgrade ran since" in " ".join(_read_play(tmp_path, plan, hostvars)["why"])
    (stamp.parent / "generations" / "current").write_text("3\n")
    # a failing precheck keeps a host out of the fast path, unless the run skips provisioning
    # (and with it the prechecks): then the facts are not even read
    failing = hostvars | {"prechecks_shm_min_mib": 10 ** 9}
    assert _read_play(tmp_path, plan, failing)["fast"] is False
    skipped = _read_play(tmp_path, plan, failing, provision=False)
    assert skipped["fast"] is True and skipped["groups"] == [] and skipped["report"]["skipped"]
    # a role input variable changed: the key differs, the host goes the full way
    other = _read_play(tmp_path, plan, hostvars | {"engine_runtime_pip_args": ["--no-cache-dir"]})
    assert other["fast"] is False and other["key"] != first["key"]
    # a file drifted, and a precheck fails: both named
    conf.write_text("max_batch_size: 32\n")
    drift = _read_play(tmp_path, plan, hostvars | {"prechecks_shm_min_mib": 10 ** 9})
    assert drift["fast"] is False
    assert f"{conf} differs from the Plan" in drift["why"]
    assert any(w.startswith("precheck failed: localhost: ") and "shm" in w for w in drift["why"]), drift["why"]


def test_progress_prints_file_diffs_hides_empty_plays_and_passed_argument_checks():
    """What `glmops deploy --check --diff` prints: the diff under its task (the runner's
    runner_on_file_diff event), no header for a play with nothing to show, no line for a
    role's passing argument check (a failing one is shown)."""
    from rich.console import Console

    from glmops import runner

    console = Console(record=True, width=200, force_terminal=False)
    view = runner._Progress(console, quiet=False, diff=True)
    result = runner.RunResult(verb="deploy", rc=0, status="", artifacts=Path("."), seconds=0.0)
    events = [
        {"event": "playbook_on_play_start", "event_data": {"play": "Empty play"}},
        {"event": "runner_on_skipped", "event_data": {"host": "lab-1", "task": "Nothing here"}},
        {"event": "playbook_on_play_start", "event_data": {"play": "Start the workers"}},
        {"event": "runner_on_ok", "event_data": {"host": "lab-1", "task": "Validating arguments against arg spec 'main'",
                                                 "res": {}}},
        {"event": "runner_on_file_diff", "event_data": {"host": "lab-1", "task": "Place the units", "diff": [
            {"before_header": "/etc/x.service", "after_header": "/etc/x.service",
             "before": "a\n--max-num-seqs 4\n", "after": "a\n--max-num-seqs 8\n"}]}},
        {"event": "runner_on_ok", "event_data": {"host": "lab-1", "task": "Place the units", "res": {"changed": True}}},
        {"event": "runner_on_failed", "event_data": {"host": "lab-2", "task": "Validating arguments against arg spec 'main'",
                                                     "res": {"msg": "bad"}}},
    ]
    for ev in events:
        view.event(ev, result)
    out = console.export_text()
    assert "Empty play" not in out and "PLAY Start the workers" in out
    assert "--- lab-1: Place the units" in out and "--max-num-seqs 4" in out and "+--max-num-seqs 8" in out
    assert "runner_on_file_diff" not in out
    assert "lab-1" in out and "Validating arguments" in out.split("lab-2")[1].splitlines()[0]
    assert out.count("Validating arguments") == 1  # the failed one only
    quiet = Console(record=True, width=200, force_terminal=False)
    plain = runner._Progress(quiet, quiet=False, diff=False)
    for ev in events:
        plain.event(ev, result)
    assert "max-num-seqs" not in quiet.export_text()  # no --diff: no diff


def test_read_action_returns_the_hosts_the_current_generation_recorded(tmp_path):
    """The deploy finds the hosts that left its Plan from the Plan hosts' current generation
    (manifest ``hosts``, written by plays/record.yml), read in the same round trip."""
    import base64
    import getpass

    user = getpass.getuser()
    state = tmp_path / "state"
    state.mkdir()
    plan = {"deployment": "t", "unit_glob": "glmops-test-nothing-*.service", "service_user": user,
            "config_dir": str(tmp_path / "etc"), "state_dir": str(state),
            "hosts": {"localhost": {"units": [], "runtimes": [], "target": {},
                                    "workers": {"services": [], "files": [], "secret_files": []},
                                    "routers": {"services": [], "files": [], "secret_files": []}}}}
    hostvars = {"prechecks_time_sync": False, "prechecks_memlock": False}
    assert _read_play(tmp_path, plan, hostvars, provision=False)["recorded"] == {"current": None, "hosts": None}
    gen_dir = state / "_records" / "t" / "generations"
    hosts = [{"name": "localhost", "address": "127.0.0.1", "units": ["a.service"]},
             {"name": "gone-1", "address": "10.0.0.2", "units": ["b.service"]}]
    for number, manifest in ((1, {"files": [], "units": []}),  # an older glmops: no hosts list
                             (2, {"files": [], "units": [], "hosts": hosts})):
        proc = subprocess.run([sys.executable, str(REPO / "roles/generation/files/glmops_generation.py"), "record",
                               "--dir", str(gen_dir), "--number", str(number), "--manifest",
                               base64.b64encode(json.dumps(manifest).encode()).decode()],
                              capture_output=True, text=True, check=False)
        assert proc.returncode == 0, proc.stdout
        got = _read_play(tmp_path, plan, hostvars, provision=False)["recorded"]
        assert got == ({"current": 1, "hosts": None} if number == 1 else {"current": 2, "hosts": hosts})


def _sorted_groups(tmp_path: Path, fast: dict[str, bool]) -> dict[str, list[str]]:
    """plays/read.yml's tasks after the read, on local hosts whose read is stubbed (``fast`` per
    host, groups as the read action gives them) -> {group: sorted hosts} for the groups they set."""
    play = yaml.safe_load((REPO / "playbooks" / "plays" / "read.yml").read_text())[0]
    after = play["tasks"][1:]
    assert after and not any("glmops_deploy_read" in t for t in after)
    stub = {"name": "Stub the read", "ansible.builtin.set_fact": {"glmops_read": {
        "fast": "{{ glmops_stub_fast | bool }}",
        "groups": "{{ [] if glmops_stub_fast | bool else ['glmops_apply', 'glmops_provision'] }}"}}}
    out = tmp_path / "groups.json"
    keep = {"name": "Keep", "run_once": True, "delegate_to": "localhost", "ansible.builtin.copy": {
        "dest": str(out), "content": "{{ {'apply': groups['glmops_apply'] | default([]) | sort,"
                                     " 'provision': groups['glmops_provision'] | default([]) | sort,"
                                     " 'record': groups['glmops_record'] | default([]) | sort} | to_json }}"}}
    doc = [{**{k: v for k, v in play.items() if k != "tasks"}, "hosts": "all", "connection": "local",
            "vars": {"ansible_python_interpreter": sys.executable}, "tasks": [stub, *after]},
           {"name": "keep", "hosts": "localhost", "connection": "local", "gather_facts": False,
            "vars": {"ansible_python_interpreter": sys.executable}, "tasks": [keep]}]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(doc))
    inv = tmp_path / "hosts.yml"
    inv.write_text(yaml.safe_dump({"all": {"hosts": {h: {"glmops_stub_fast": f} for h, f in fast.items()},
                                           "children": {}}}))
    proc = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inv),
                           str(tmp_path / "play.yml")], capture_output=True, text=True, env=ENV, cwd=REPO,
                          timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:]
    return json.loads(out.read_text())


def test_read_play_sorts_hosts_and_records_all_when_any_is_not_in_state(tmp_path):
    groups = _sorted_groups(tmp_path, {"h1": True, "h2": False, "h3": True})
    assert groups == {"apply": ["h2"], "provision": ["h2"], "record": ["h1", "h2", "h3"]}


def test_read_play_records_nothing_when_every_host_is_in_state(tmp_path):
    assert _sorted_groups(tmp_path, {"h1": True, "h2": True}) == {"apply": [], "provision": [], "record": []}


def test_read_play_looks_at_every_hosts_read_once_not_once_per_host():
    """The any-host test (every host's hostvars) is one run_once task; the per-host sorting reads
    only its own host's groups, so the controller's work grows with the hosts, not their square."""
    tasks = yaml.safe_load((REPO / "playbooks" / "plays" / "read.yml").read_text())[0]["tasks"]
    over_all = [t for t in tasks if "ansible_play_hosts | map('extract', hostvars" in json.dumps(t)]
    assert len(over_all) == 2 and all(t.get("run_once") is True for t in over_all), over_all
    sort = next(t for t in tasks if "ansible.builtin.add_host" in t)
    assert "vars" not in sort and "map('extract'" not in json.dumps(sort)
    # and it loops only over the hosts that join a group (a no-op loops over none)
    assert sort["loop"] == "{{ glmops_read_joining }}"
