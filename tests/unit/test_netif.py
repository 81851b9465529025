"""F17: NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME in the workers' env files of a Plan spanning hosts.

glmops_socket_ifname is rendered into the Plan; otherwise the env file is marked for the host,
whose ``glmops_hostctl.py state --ifname-env`` finds the interface holding the address (here a
stand-in ``ip`` with two interfaces) and counts the completed file in state.
"""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from glmops import deploystate, hostread, netif, planning, render
from glmops.ansible.filter_plugins.glmops_deploy import FilterModule
from glmops.model import ValidationError
from inventory_factory import vllm_b200_disagg, write_inventory

HOSTCTL = hostread.script("engine_service", "glmops_hostctl.py")
HOSTS = {"gpu-a": {"ansible_host": "10.0.0.11"}, "gpu-b": {"ansible_host": "10.0.0.12"}}
RDMA = {"glmops_rdma_devices": ["mlx5_0"]}


def _two_hosts(tmp_path: Path, host_vars=None, **over) -> planning.Planned:
    gv = vllm_b200_disagg(**over)
    gv["glmops_topologies"]["disagg"]["pools"]["prefill"]["hosts"] = ["gpu-a"]
    gv["glmops_topologies"]["disagg"]["pools"]["decode"]["hosts"] = ["gpu-b"]
    hv = {h: dict(RDMA, **(host_vars or {}).get(h, {})) for h in HOSTS}
    return planning.load(str(write_inventory(tmp_path / "inv", gv, hosts=HOSTS, host_vars=hv)))


def _workers_env(planned, host: str) -> list[dict]:
    return planned.view()["hosts"][host]["workers"]["secret_files"]


def _fake_ip(tmp_path: Path) -> dict:
    """PATH with an ``ip`` whose ``-j addr show`` lists lo, docker0 and eno1 (10.0.0.11)."""
    links = [{"ifname": "lo", "addr_info": [{"local": "127.0.0.1"}]},
             {"ifname": "docker0", "addr_info": [{"local": "172.17.0.1"}]},
             {"ifname": "eno1", "addr_info": [{"local": "10.0.0.11"}, {"local": "fe80::1"}]}]
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    ip = bin_dir / "ip"
    ip.write_text(f"#!/bin/sh\necho '{json.dumps(links)}'\n")
    ip.chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}


def _owner(path: Path) -> str:
    import grp
    import pwd

    st = path.stat()
    return f"{st.st_mode & 0o7777:04o}:{pwd.getpwuid(st.st_uid).pw_name}:{grp.getgrgid(st.st_gid).gr_name}"


def test_two_interface_host_env_file_names_the_interface_holding_the_address(tmp_path):
    planned = _two_hosts(tmp_path)
    env = _workers_env(planned, "gpu-a")[0]
    assert env["ifname_env"] == ["NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"]
    assert env["ifname_address"] == "10.0.0.11"
    assert "NCCL_SOCKET_IFNAME" not in env["content"]  # the Plan cannot know it: the host fills it in
    argv = deploystate.state_argv({"services": [], "files": [], "secret_files": [env]}, [], "", {}, "", "/c", "/s")
    assert argv[argv.index("--ifname-env") + 1] == f"{env['path']}|10.0.0.11|NCCL_SOCKET_IFNAME,GLOO_SOCKET_IFNAME"

    # what the engine_service role writes: the Plan's text plus the interface holding the address
    suffix = FilterModule().filters()["glmops_ifname_suffix"](env["ifname_env"], "eno1")
    assert suffix == "NCCL_SOCKET_IFNAME=eno1\nGLOO_SOCKET_IFNAME=eno1\n"
    path = tmp_path / "w.env"
    path.write_text(env["content"] + suffix)
    spec = f"{path}={env['sha256']}:{_owner(path)}"
    ifname = f"{path}|10.0.0.11|NCCL_SOCKET_IFNAME,GLOO_SOCKET_IFNAME"
    host_env = _fake_ip(tmp_path)

    def state(*extra):
        proc = subprocess.run([sys.executable, str(HOSTCTL), "state", "--want", spec, *extra],
                              capture_output=True, text=True, env=host_env, check=True, timeout=30)
        return json.loads(proc.stdout)

    out = state("--ifname-env", ifname)
    assert out["ifnames"] == {str(path): "eno1"} and out["drifted"] == []  # a second run: in state
    assert state()["drifted"] == [str(path)]  # without the host's part the text is not the Plan's
    path.write_text(env["content"] + "NCCL_SOCKET_IFNAME=docker0\nGLOO_SOCKET_IFNAME=docker0\n")
    assert state("--ifname-env", ifname)["drifted"] == [str(path)]  # the wrong NIC is drift
    path.write_text(env["content"] + suffix)
    other = f"{path}|10.9.9.9|NCCL_SOCKET_IFNAME,GLOO_SOCKET_IFNAME"
    out = state("--ifname-env", other)
    assert out["drifted"] == [str(path)] and out["ifnames"] == {}  # no interface holds it: never in state


def test_user_values_win(tmp_path):
    planned = _two_hosts(tmp_path, host_vars={"gpu-a": {"glmops_socket_ifname": "ens5"}},
                         glmops_env={"GLOO_SOCKET_IFNAME": "bond0"})
    a, b = _workers_env(planned, "gpu-a")[0], _workers_env(planned, "gpu-b")[0]
    assert "NCCL_SOCKET_IFNAME=ens5\n" in a["content"] and "GLOO_SOCKET_IFNAME=bond0\n" in a["content"]
    assert "ifname_env" not in a  # nothing left for the host to find
    assert "GLOO_SOCKET_IFNAME=bond0\n" in b["content"] and b["ifname_env"] == ["NCCL_SOCKET_IFNAME"]
    svc = next(s for s in planned.plan.services if s.host == "gpu-a" and s.role == "prefill")
    assert "NCCL_SOCKET_IFNAME=ens5" in render.env_text(planned.deployment, svc)


@pytest.mark.parametrize("value,pattern", [("lo", "lo"), ("docker0", "docker*")])
def test_loopback_and_docker_are_refused(tmp_path, value, pattern):
    with pytest.raises(ValidationError) as err:
        _two_hosts(tmp_path, host_vars={"gpu-b": {"glmops_socket_ifname": value}})
    problems = [p for p in err.value.problems if p.code == netif.CODE]
    assert len(problems) == 1, err.value.problems
    p = problems[0]
    assert "glmops_socket_ifname" in p.path and "gpu-b" in p.path
    assert repr(value) in p.message and repr(pattern) in p.message and "accepted" in p.message


def test_single_host_plan_renders_nothing(tmp_path):
    gv = vllm_b200_disagg()
    inv = write_inventory(tmp_path / "inv", gv, hosts={"gpu-a": {"ansible_host": "10.0.0.11"}},
                          host_vars={"gpu-a": {"glmops_socket_ifname": "eno1"}})
    planned = planning.load(str(inv))
    for f in _workers_env(planned, "gpu-a"):
        assert "ifname_env" not in f and "SOCKET_IFNAME" not in f["content"]
    argv = deploystate.state_argv(planned.view()["hosts"]["gpu-a"]["workers"], [], "", {}, "", "/c", "/s")
    assert "--ifname-env" not in argv
    assert hashlib.sha256(_workers_env(planned, "gpu-a")[0]["content"].encode()).hexdigest() == \
        _workers_env(planned, "gpu-a")[0]["sha256"]


def test_precheck_fails_when_the_named_interface_does_not_hold_the_address(tmp_path):
    from glmops import prechecks

    planned = _two_hosts(tmp_path, host_vars={"gpu-a": {"glmops_socket_ifname": "ens5"}})
    needs = prechecks.needs_for_deployment(planned.deployment, planned.plan)
    assert needs["gpu-a"]["interface"]["name"] == "ens5" and "name" not in needs["gpu-b"]["interface"]
    facts = {"interface": {"address": "10.0.0.11", "holders": ["eno1"],
                           "interfaces": [{"name": "eno1", "addresses": ["10.0.0.11"]}]}}
    [r] = prechecks.evaluate("gpu-a", facts, {"interface": needs["gpu-a"]["interface"]})
    assert not r["ok"] and "glmops_socket_ifname ens5 does not hold the inventory address 10.0.0.11" in r["message"]
    [r] = prechecks.evaluate("gpu-a", facts, {"interface": dict(needs["gpu-a"]["interface"], name="eno1")})
    assert r["ok"]


def test_generation_record_checks_the_plan_part_of_a_completed_env_file(tmp_path):
    """The record play's manifest carries the Plan's digest and ``ifname_env``: the host's lines
    do not make the record refuse the file, anything else still does."""
    import base64
    import grp
    import pwd

    script = hostread.script("generation", "glmops_generation.py")
    base = "# env\nA=1\n"
    path = tmp_path / "w.env"
    path.write_text(base + "NCCL_SOCKET_IFNAME=eno1\nGLOO_SOCKET_IFNAME=eno1\n")
    st = path.stat()
    entry = {"path": str(path), "sha256": hashlib.sha256(base.encode()).hexdigest(), "mode": "0644",
             "owner": pwd.getpwuid(st.st_uid).pw_name, "group": grp.getgrgid(st.st_gid).gr_name, "unit": "",
             "ifname_env": list(netif.NAMES)}

    def record(n, files):
        manifest = base64.b64encode(json.dumps({"plan_hash": "h", "units": [], "files": files}).encode()).decode()
        return subprocess.run([sys.executable, str(script), "record", "--dir", str(tmp_path / "gens"), "--number",
                               str(n), "--keep", "5", "--manifest", manifest], capture_output=True, text=True, timeout=30)

    assert record(1, [entry]).returncode == 0
    bad = record(2, [dict(entry, ifname_env=[])])
    assert bad.returncode != 0 and "not what the Plan placed" in bad.stdout
