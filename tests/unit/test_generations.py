"""Generations: the host script (record/list/restore on a scratch tree) and the pure
day-2 logic (glmops.generations: --set parsing, changed units, rolling steps, --to)."""
from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from glmops import generations as G

from day2_fakes import day2_runner
from day2_fakes import history_of as _history_of

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "roles" / "generation" / "files" / "glmops_generation.py"


def run(*args: str) -> tuple[int, dict]:
    proc = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=60,
                          check=False)
    return proc.returncode, json.loads(proc.stdout)


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def place(root: Path, files: dict[str, tuple[bytes, int]]) -> list[dict]:
    """Write files under root; return manifest entries (unit = the file's stem + .service)."""
    out = []
    for name, (data, mode) in files.items():
        p = root / "etc" / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
        p.chmod(mode)
        out.append({"path": str(p), "sha256": sha(data), "mode": f"{mode:04o}", "owner": "root",
                    "group": "root", "unit": f"{p.stem}.service"})
    return out


def manifest(files: list[dict], plan_hash: str) -> str:
    m = {"deployment": "t", "plan_hash": plan_hash, "files": files,
         "units": [{"unit": f["unit"]} for f in files], "runtimes": [{"engine": "vllm", "version": "0.32.0"}]}
    return base64.b64encode(json.dumps(m).encode()).decode()


@pytest.fixture
def tree(tmp_path):
    gdir = tmp_path / "state" / "t" / "generations"
    return tmp_path, gdir


def test_record_copies_files_keeps_modes_and_is_idempotent(tree):
    root, gdir = tree
    files = place(root, {"a.env": (b"SECRET=1\n", 0o600), "a.conf": (b"x: 1\n", 0o644)})
    rc, out = run("record", "--dir", str(gdir), "--number", "1", "--keep", "5", "--manifest", manifest(files, "h1"))
    assert rc == 0 and out == {"changed": True, "number": 1, "pruned": []}
    assert (gdir.stat().st_mode & 0o777) == 0o700
    copy = gdir / "1" / "files" / str(root / "etc" / "a.env").lstrip("/")
    assert copy.read_bytes() == b"SECRET=1\n" and (copy.stat().st_mode & 0o777) == 0o600
    assert (gdir / "current").read_text().strip() == "1"
    rc, out = run("record", "--dir", str(gdir), "--number", "1", "--keep", "5", "--manifest", manifest(files, "h1"))
    assert rc == 0 and out["changed"] is False
    rc, out = run("list", "--dir", str(gdir))
    assert out["current"] == 1 and out["generations"][0]["plan_hash"] == "h1"
    assert "SECRET" not in json.dumps(out)  # hashes only, never contents


def test_record_refuses_files_that_differ_from_the_plan(tree):
    root, gdir = tree
    files = place(root, {"a.env": (b"A=1\n", 0o600)})
    files[0]["sha256"] = sha(b"something else")
    rc, out = run("record", "--dir", str(gdir), "--number", "1", "--manifest", manifest(files, "h1"))
    assert rc == 1 and out["failed"] and "a.env" in out["msg"]
    assert not (gdir / "1").exists()


def test_restore_previous_is_byte_for_byte_and_prunes_old(tree):
    root, gdir = tree
    v1 = place(root, {"a.env": (b"V=1\n", 0o600), "a.conf": (b"one\n", 0o644)})
    assert run("record", "--dir", str(gdir), "--number", "1", "--keep", "2", "--manifest", manifest(v1, "h1"))[0] == 0
    v2 = place(root, {"a.env": (b"V=2\n", 0o640), "a.conf": (b"two\n", 0o644)})
    assert run("record", "--dir", str(gdir), "--number", "2", "--keep", "2", "--manifest", manifest(v2, "h2"))[0] == 0
    rc, out = run("restore", "--dir", str(gdir), "--to", "previous", "--check")
    assert rc == 0 and out["number"] == 1 and set(out["restart"]) == {"a.service"}
    assert (root / "etc" / "a.env").read_bytes() == b"V=2\n"  # --check changed nothing
    rc, out = run("restore", "--dir", str(gdir), "--to", "previous")
    assert rc == 0 and out["number"] == 1 and out["changed"]
    env = root / "etc" / "a.env"
    assert env.read_bytes() == b"V=1\n" and (env.stat().st_mode & 0o777) == 0o600
    assert (root / "etc" / "a.conf").read_bytes() == b"one\n"
    assert (gdir / "current").read_text().strip() == "1"
    rc, out = run("restore", "--dir", str(gdir), "--to", "1")
    assert rc == 0 and out["changed"] is False and out["restart"] == []
    # keep 2: a third generation prunes the oldest that is not current
    v3 = place(root, {"a.env": (b"V=3\n", 0o600), "a.conf": (b"three\n", 0o644)})
    rc, out = run("record", "--dir", str(gdir), "--number", "3", "--keep", "2", "--manifest", manifest(v3, "h3"))
    assert rc == 0 and out["pruned"] == [1]
    rc, out = run("restore", "--dir", str(gdir), "--to", "1")
    assert rc == 1 and "not recorded" in out["msg"] and "2, 3" in out["msg"]


def test_restore_units_only_touches_those_units(tree):
    root, gdir = tree
    v1 = place(root, {"a.env": (b"A=1\n", 0o600), "b.env": (b"B=1\n", 0o600)})
    run("record", "--dir", str(gdir), "--number", "1", "--manifest", manifest(v1, "h1"))
    (root / "etc" / "a.env").write_bytes(b"A=2\n")
    (root / "etc" / "b.env").write_bytes(b"B=2\n")
    rc, out = run("restore", "--dir", str(gdir), "--to", "current", "--units", "a.service")
    assert rc == 0 and out["restart"] == ["a.service"]
    assert (root / "etc" / "a.env").read_bytes() == b"A=1\n"
    assert (root / "etc" / "b.env").read_bytes() == b"B=2\n"


def test_restore_rejects_bad_to_and_empty_dir(tree):
    _, gdir = tree
    rc, out = run("restore", "--dir", str(gdir), "--to", "latest")
    assert rc == 1 and "'latest'" in out["msg"] and "previous" in out["msg"]
    rc, out = run("restore", "--dir", str(gdir))
    assert rc == 1 and "deploy first" in out["msg"]


def test_parse_sets_types_and_problems():
    got, problems = G.parse_sets(["engine_version=0.40", "glmops_max_batch_size=8",
                                  "engine_args={max-num-seqs: 2}"])
    assert problems == []
    assert got == {"glmops_engine_version": "0.40", "glmops_max_batch_size": 8,
                   "glmops_engine_args": {"max-num-seqs": 2}}
    got, problems = G.parse_sets(["engine_verison=1", "novalue"])
    assert len(problems) == 2
    assert "glmops_engine_verison" in problems[0] and "engine_version" in problems[0]
    assert "KEY=VALUE" in problems[1]


def _svc(unit, host, pool, replica, engine="vllm", port=8001):
    return {"unit": unit, "host": host, "pool": pool, "replica": replica, "engine": engine,
            "url": f"http://{host}:{port}", "health_url": f"http://{host}:{port}/health",
            "ready_url": f"http://{host}:{port}/v1/completions"}


def test_steps_agg_one_replica_at_a_time_router_last():
    services = [_svc("w0.service", "h1", "agg", 0), _svc("w1.service", "h2", "agg", 1),
                _svc("r.service", "h3", "router", 0, engine="vllm_router", port=8000)]
    steps = G.steps(services, {"w0.service", "w1.service"}, "agg")
    assert [s.name for s in steps] == ["agg replica 0", "agg replica 1", "router"]
    assert steps[0].router_out and steps[0].worker_urls == ["http://h1:8001"]
    assert steps[0].router == {"host": "h3", "url": "http://h3:8000"}
    assert steps[0].services == {"h1": [{"unit": "w0.service", "url": "http://h1:8001",
                                         "health_url": "http://h1:8001/health",
                                         "ready_url": "http://h1:8001/v1/completions"}]}
    assert steps[2].kind == "routers" and steps[2].units == []
    # only what changed gets a step
    assert [s.name for s in G.steps(services, {"w1.service"}, "agg")] == ["agg replica 1", "router"]


def test_steps_disagg_never_take_workers_out_and_single_worker_stays():
    services = [_svc("p.service", "h1", "prefill", 0), _svc("d.service", "h2", "decode", 0, port=8002),
                _svc("r.service", "h3", "router", 0, engine="vllm_router", port=8000)]
    steps = G.steps(services, {"p.service", "d.service", "r.service"}, "disagg")
    assert [s.name for s in steps] == ["prefill replica 0", "decode replica 0", "router"]
    assert not any(s.router_out for s in steps)
    one = [_svc("w0.service", "h1", "agg", 0), _svc("r.service", "h3", "router", 0, engine="vllm_router")]
    assert not G.steps(one, {"w0.service"}, "agg")[0].router_out  # never empty the router


def test_changed_units_and_resolve_target():
    old = {"a.service": {"/x": "1"}, "b.service": {"/y": "2"}}
    new = {"a.service": {"/x": "1"}, "b.service": {"/y": "3"}, "c.service": {"/z": "4"}}
    assert G.changed_units(old, new) == ["b.service", "c.service"]
    hist = {"h1": {"current": 3, "generations": [{"number": 2}, {"number": 3}]},
            "h2": {"current": 3, "generations": [{"number": 1}, {"number": 2}, {"number": 3}]}}
    assert G.resolve_target(hist, None) == (2, [])
    n, problems = G.resolve_target(hist, 1)
    assert n is None and "h1" in problems[0] and "2, 3" in problems[0]
    hist["h2"]["current"] = 2
    n, problems = G.resolve_target(hist, None)
    assert n is None and "h1=3" in problems[0] and "--to" in problems[0]
    assert G.resolve_target(hist, 2) == (2, [])
    assert G.resolve_target({"h1": {"current": None, "generations": []}}, None)[0] is None


def test_upgrade_bad_set_exits_2_before_any_host(monkeypatch):
    from click.testing import CliRunner

    from glmops import runner
    from glmops.cli import main

    monkeypatch.chdir(REPO)
    monkeypatch.setattr(runner, "run", lambda *a, **k: pytest.fail("a host was contacted"))
    res = CliRunner().invoke(main, ["upgrade", "-i", "inventories/lab", "--set", "engine_verison=0.33.0",
                                    "--set", "max_batch_size"])
    assert res.exit_code == 2
    assert "glmops_engine_verison" in res.output and "KEY=VALUE" in res.output
    # a value the rules reject: every problem printed, exit 2, nothing run
    res = CliRunner().invoke(main, ["upgrade", "-i", "inventories/lab", "--set", "kv_cache_dtype=fp5"])
    assert res.exit_code == 2 and "fp5" in res.output


@pytest.mark.parametrize("topology,out_of_router", [("agg", True), ("disagg", False)])
def test_upgrade_check_lists_changed_units_and_steps(monkeypatch, topology, out_of_router):
    from click.testing import CliRunner

    from glmops import runner
    from glmops.cli import main
    from glmops.commands import day2
    from glmops.planning import plan_view

    monkeypatch.chdir(REPO)
    deployed = plan_view("inventories/lab", topology)
    ok = runner.RunResult(verb="history", rc=0, status="successful", artifacts=Path("."), seconds=0.0)
    monkeypatch.setattr(day2, "read_history", lambda inv, topo, console=None, limit=None: (
        _history_of(deployed), ok, "/var/lib/glmops/_records/lab/generations", list(deployed["hosts"])))
    monkeypatch.setattr(runner, "run", lambda *a, **k: pytest.fail("--check ran a playbook"))
    cli = CliRunner()
    res = cli.invoke(main, ["upgrade", "-i", "inventories/lab", "--topology", topology, "--check"])
    assert res.exit_code == 0, res.output
    assert "changed units: none" in res.output
    res = cli.invoke(main, ["upgrade", "-i", "inventories/lab", "--topology", topology,
                            "--set", "max_batch_size=3", "--check"], env={"COLUMNS": "250"})
    assert res.exit_code == 0, res.output
    workers = [s["unit"] for s in deployed["services"] if s["pool"] != "router"]
    changed = res.output.split("changed units: ")[1].splitlines()[0]
    assert sorted(changed.split(", ")) == sorted(workers)  # the router's argv did not change
    steps = [line.strip() for line in res.output.splitlines() if line.strip().startswith("step ")]
    assert len(steps) == len(workers) + 1 and steps[-1].startswith(f"step {len(workers) + 1}: router")
    assert all(("out of the router first" in s) == out_of_router for s in steps[:-1])


def test_rollback_check_picks_previous_and_rejects_unknown(monkeypatch):
    from click.testing import CliRunner

    from glmops import runner
    from glmops.cli import main
    from glmops.commands import day2
    from glmops.planning import plan_view

    monkeypatch.chdir(REPO)
    g1 = _history_of(plan_view("inventories/lab", "agg"), 1)
    g2 = _history_of(plan_view("inventories/lab", "agg", {"glmops_max_batch_size": 3}), 2)
    hist = {h: {"current": 2, "generations": g1[h]["generations"] + g2[h]["generations"]} for h in g1}
    ok = runner.RunResult(verb="history", rc=0, status="successful", artifacts=Path("."), seconds=0.0)
    monkeypatch.setattr(day2, "read_history", lambda inv, topo, console=None, limit=None: (
        hist, ok, "/var/lib/glmops/_records/lab/generations", list(hist)))
    monkeypatch.setattr(runner, "run", lambda *a, **k: pytest.fail("--check ran a playbook"))
    res = CliRunner().invoke(main, ["rollback", "-i", "inventories/lab", "--check"], env={"COLUMNS": "250"})
    assert res.exit_code == 0, res.output
    assert "rolling back to generation 1; changed units: glm-lab-agg-0.service, glm-lab-agg-1.service" in res.output
    assert "agg replica 0" in res.output and "out of the router first" in res.output
    # without --check: one rollback.yml run, whose decision on the controller refuses
    calls, run = day2_runner(hist)
    monkeypatch.setattr(runner, "run", run)
    res = CliRunner().invoke(main, ["rollback", "-i", "inventories/lab", "--to", "5"])
    assert [c[0] for c in calls] == ["rollback.yml"]
    assert res.exit_code == 2 and "generation 5 is not recorded" in res.output and "1, 2" in res.output


@pytest.mark.skipif(os.geteuid() != 0, reason="chown needs root")
def test_record_and_restore_refuse_generations_another_user_could_swap(tmp_path):
    """The engines' service user owns its StateDirectory=: generations under a directory it
    can write could be replaced by ones whose files root then restores anywhere."""
    import pwd

    base = tmp_path / "state"
    (base / "dep").mkdir(parents=True)
    gen = base / "dep" / "generations"
    for d in (tmp_path, base, base / "dep"):
        d.chmod(0o755)
    os.chown(base, pwd.getpwnam("nobody").pw_uid, 0)
    for args in (["record", "--dir", str(gen), "--number", "1", "--manifest", "e30="],
                 ["restore", "--dir", str(gen), "--to", "1"]):
        rc, out = run(*args)
        assert rc == 1 and f"{base} (0755, uid {pwd.getpwnam('nobody').pw_uid})" in out["msg"], out
        assert "not trusting generations" in out["msg"]
    assert not gen.exists()
    base.chmod(0o777)  # root's but writable by anyone: as bad
    os.chown(base, 0, 0)
    rc, out = run("record", "--dir", str(gen), "--number", "1", "--manifest", "e30=")
    assert rc == 1 and "0777, uid 0" in out["msg"]
