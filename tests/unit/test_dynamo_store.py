"""Dynamo across hosts: the discovery store in the Plan (issue 13, F20, F21).

Golden: ``glmops plan --out`` for ``inventories/h200-multinode`` and ``inventories/gb200`` (the
user's command on the shipped inventories) holds the etcd member's unit and env file, and every
``ETCD_ENDPOINTS`` of every Dynamo unit names the client URL of a planned member. Expected
addresses are read from the inventories' hosts.yml (as a user reads them); ports and the package
binary from Debian's etcd-server 3.4 (catalog ``engines.etcd``: client 2379, peer 2380,
/usr/bin/etcd). Then the rules: per-pool plane overrides (F20), member counts, NATS only when a
plane is NATS, the rolling restart steps.
"""
from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from inventory_factory import write_inventory

from glmops import rules
from glmops.cli import main
from glmops.commands.lifecycle import rolling_steps
from glmops.deployview import view
from glmops.inventory import load_deployment

ROOT = Path(__file__).resolve().parents[2]
ETCD = "/usr/bin/etcd"  # Debian etcd-server's binary (dpkg -L etcd-server)
CLIENT, PEER = 2379, 2380  # etcd's IANA ports (etcd 3.4 docs)


def _hosts_yml(inv: Path) -> dict[str, str]:
    """host -> ansible_host of an inventory's hosts.yml (nested groups)."""
    out: dict[str, str] = {}

    def walk(group: dict) -> None:
        for name, hv in (group.get("hosts") or {}).items():
            if (hv or {}).get("ansible_host"):
                out[name] = hv["ansible_host"]
        for child in (group.get("children") or {}).values():
            walk(child or {})

    walk(yaml.safe_load((inv / "hosts.yml").read_text())["all"])
    return out


def _plan_out(inv: Path, out: Path):
    res = CliRunner().invoke(main, ["plan", "-i", str(inv), "--out", str(out)])
    assert res.exit_code == 0, res.output
    units = {p.relative_to(out).parts[0] + ":" + p.name: p.read_text()
             for p in out.glob("*/etc/systemd/system/*.service")}
    envs = {p.relative_to(out).parts[0] + ":" + p.name: p for p in out.glob("*/etc/glmops/*/*.env")}
    return units, envs


def _exec_words(unit_text: str) -> list[str]:
    return re.search(r"^ExecStart=(.*)$", unit_text, re.M).group(1).split()


def _flag(words: list[str], name: str) -> str:
    return words[words.index(name) + 1]


@pytest.mark.parametrize("name,front", [("h200-multinode", "h200-prefill-0"), ("gb200", "gb200-tray-0")])
def test_plan_out_has_the_store_unit_and_every_endpoint_names_a_member(tmp_path, name, front):
    inv = ROOT / "inventories" / name
    addr = _hosts_yml(inv)
    units, envs = _plan_out(inv, tmp_path / "out")
    stores = {k: v for k, v in units.items() if re.search(r"-etcd-\d+\.service$", k)}
    # one member by default, on the front door's host (glmops_routers, else the first worker)
    assert [k.split(":")[0] for k in stores] == [front], list(units)
    (key, text), = stores.items()
    words = _exec_words(text)
    member = key.split(":")[1][: -len(".service")]
    want_client = f"http://{addr[front]}:{CLIENT}"
    assert words[0] == ETCD
    assert _flag(words, "--name") == member
    assert _flag(words, "--listen-client-urls") == want_client == _flag(words, "--advertise-client-urls")
    assert _flag(words, "--listen-peer-urls") == f"http://{addr[front]}:{PEER}"
    assert _flag(words, "--initial-cluster") == f"{member}=http://{addr[front]}:{PEER}"
    assert _flag(words, "--data-dir").startswith("/var/lib/glmops/") and "0.0.0.0" not in text
    # hardened like the engine units, the service user, part of the deployment target
    for line in ("User=glmops", "NoNewPrivileges=yes", "ProtectSystem=full", "PrivateTmp=yes", "Restart=always"):
        assert line in text.splitlines(), line
    assert f"{front}:{member}.env" in envs and oct(envs[f"{front}:{member}.env"].stat().st_mode & 0o777) == "0o600"
    members = {_flag(_exec_words(t), "--advertise-client-urls") for t in stores.values()}
    dynamo = {k: v for k, v in units.items() if "dynamo." in v}
    assert len(dynamo) >= 3, list(units)
    for k, text in dynamo.items():
        env = envs[k[: -len(".service")] + ".env"].read_text()
        endpoints = re.search(r"^ETCD_ENDPOINTS=(.*)$", env, re.M).group(1).split(",")
        assert set(endpoints) == members, (k, endpoints)
        # the planes once, as flags (never also as DYN_* env: F20)
        assert not re.search(r"^DYN_(REQUEST_PLANE|EVENT_PLANE|DISCOVERY_BACKEND)=", env, re.M), env
        if " -m dynamo.frontend" in text or "--headless" not in text:
            w = _exec_words(text)
            if "--discovery-backend" in w:
                assert (_flag(w, "--discovery-backend"), _flag(w, "--request-plane"), _flag(w, "--event-plane")) == \
                    ("etcd", "tcp", "zmq"), k
        # ordered after the store where they share its host
        if k.startswith(front + ":"):
            assert f"{member}.service" in re.search(r"^After=(.*)$", text, re.M).group(1), k


def test_three_store_hosts_make_a_three_member_cluster_named_in_every_endpoint(tmp_path):
    inv = tmp_path / "gb200"
    shutil.copytree(ROOT / "inventories" / "gb200", inv)
    gv = inv / "group_vars" / "all.yml"
    data = yaml.safe_load(gv.read_text())
    data["glmops_dynamo_etcd_hosts"] = ["glmops_workers"]  # a group: its three trays
    gv.write_text(yaml.safe_dump(data, sort_keys=False))
    addr = _hosts_yml(inv)
    units, envs = _plan_out(inv, tmp_path / "out")
    stores = {k: _exec_words(v) for k, v in units.items() if re.search(r"-etcd-\d+\.service$", k)}
    assert sorted(k.split(":")[0] for k in stores) == ["gb200-tray-0", "gb200-tray-1", "gb200-tray-2"]
    cluster = {_flag(w, "--initial-cluster") for w in stores.values()}
    assert len(cluster) == 1 and len(cluster.pop().split(",")) == 3
    want = {f"http://{addr[h]}:{CLIENT}" for h in ("gb200-tray-0", "gb200-tray-1", "gb200-tray-2")}
    for k, text in units.items():
        if "dynamo." in text:
            env = envs[k[: -len(".service")] + ".env"].read_text()
            assert set(re.search(r"^ETCD_ENDPOINTS=(.*)$", env, re.M).group(1).split(",")) == want


def _lab_vars() -> dict:
    return yaml.safe_load((ROOT / "inventories" / "lab-dynamo-etcd" / "group_vars" / "all.yml").read_text())


LAB_HOSTS = {"lab-1": {"ansible_host": "10.77.0.11"}, "lab-2": {"ansible_host": "10.77.0.12"},
             "lab-3": {"ansible_host": "10.77.0.13"}}


def _validate(tmp_path: Path, gv: dict):
    inv = write_inventory(tmp_path / "inv", gv, hosts=dict(LAB_HOSTS), groups={"glmops_routers": ["lab-3"]})
    return rules.validate(load_deployment(inv))


@pytest.mark.parametrize("key,value", [("DYN_REQUEST_PLANE", "nats"), ("DYN_EVENT_PLANE", "nats"),
                                       ("DYN_DISCOVERY_BACKEND", "file"), ("ETCD_ENDPOINTS", "http://10.0.0.9:2379")])
def test_f20_a_per_pool_plane_override_is_refused_naming_key_value_and_what_is_accepted(tmp_path, key, value):
    gv = _lab_vars()
    gv["glmops_topologies"]["agg"]["pools"]["agg"]["env"] = {key: value}
    plan, problems = _validate(tmp_path, gv)
    got = [p for p in problems if p.code == "F20_DYNAMO_PLANES"]
    assert len(got) == 1, problems
    assert got[0].path.endswith(f"pools.agg.env.{key}")
    assert f"{key}={value!r}" in got[0].message and "accepted: none" in got[0].message
    assert "glmops_dynamo_request_plane" in got[0].hint


def test_f20_plane_flags_in_engine_args_are_refused_too(tmp_path):
    gv = _lab_vars()
    gv["glmops_topologies"]["agg"]["pools"]["agg"]["engine_args"] = {"request-plane": "nats", "response-plane": "quic"}
    _plan, problems = _validate(tmp_path, gv)
    codes = {(p.code, p.path.rsplit(".", 1)[-1]) for p in problems}
    assert ("ENGINE_FLAG_OWNED", "request-plane") in codes or any(
        p.code == "ENGINE_FLAG_OWNED" and "request-plane" in p.path for p in problems), problems
    assert any(p.code == "F20_DYNAMO_PLANES" and p.path.endswith("engine_args.response-plane") for p in problems), problems


def test_f20_the_cli_exits_2_before_any_host(tmp_path):
    gv = _lab_vars()
    gv["glmops_topologies"]["agg"]["pools"]["agg"]["env"] = {"DYN_REQUEST_PLANE": "nats"}
    inv = write_inventory(tmp_path / "inv", gv, hosts=dict(LAB_HOSTS), groups={"glmops_routers": ["lab-3"]})
    res = CliRunner().invoke(main, ["validate", "-i", str(inv)])
    assert res.exit_code == 2 and "F20_DYNAMO_PLANES" in res.output and "Traceback" not in res.output


@pytest.mark.parametrize("hosts,ok", [(["lab-3"], True), (["lab-1", "lab-2"], False),
                                      (["lab-1", "lab-2", "lab-3"], True), (["lab-1", "lab-1", "lab-2"], False)])
def test_store_member_counts(tmp_path, hosts, ok):
    gv = _lab_vars()
    gv["glmops_dynamo_etcd_hosts"] = hosts
    plan, problems = _validate(tmp_path, gv)
    bad = [p for p in problems if p.code == "DYNAMO_ETCD_HOSTS"]
    if ok:
        assert problems == []
        assert sorted(s.host for s in plan.services if s.role == "store") == sorted(hosts)
    else:
        assert len(bad) == 1 and "accepted: 1, 3, 5 distinct hosts" in bad[0].message, problems


def test_no_nats_unless_a_plane_is_nats_and_the_plan_says_why(tmp_path):
    plan, problems = _validate(tmp_path / "a", _lab_vars())
    assert problems == []
    assert [s.engine for s in plan.services if s.role == "store"] == ["etcd"]
    assert "dynamo planes: request tcp, event zmq (set once for the frontend and every worker): no NATS needed" in plan.notes
    assert not any("NATS_SERVER" in s.env for s in plan.services)
    access = next(n for n in plan.notes if n.startswith("dynamo store access"))
    assert "10.77.0.11, 10.77.0.12, 10.77.0.13" in access and "firewall" in access
    gv = _lab_vars()
    gv["glmops_dynamo_event_plane"] = "nats"
    plan, problems = _validate(tmp_path / "b", gv)
    assert problems == []
    (nats,) = [s for s in plan.services if s.engine == "nats"]
    assert (nats.host, nats.port, nats.health_url) == ("lab-3", 4222, "http://10.77.0.13:8222/healthz")
    for svc in plan.services:
        if svc.engine == "dynamo":
            assert svc.env["NATS_SERVER"] == "nats://10.77.0.13:4222"
            assert svc.argv[svc.argv.index("--event-plane") + 1] == "nats"


def test_the_view_groups_store_hosts_and_the_frontend_waits_for_every_worker(tmp_path):
    gv = _lab_vars()
    gv["glmops_dynamo_etcd_hosts"] = ["lab-1", "lab-2", "lab-3"]
    inv = write_inventory(tmp_path / "inv", gv, hosts=dict(LAB_HOSTS), groups={"glmops_routers": ["lab-3"]})
    d = load_deployment(inv)
    plan, problems = rules.validate(d)
    assert problems == []
    v = view(d, plan)
    assert v["store_hosts"] == ["lab-1", "lab-2", "lab-3"]
    assert [s["unit"] for s in v["hosts"]["lab-3"]["stores"]["services"]] == ["glm-lab-dynamo-etcd-etcd-2.service"]
    assert v["hosts"]["lab-3"]["store_packages"] == [{"name": "etcd-server", "unit": "etcd.service"}]
    (front,) = v["hosts"]["lab-3"]["routers"]["services"]
    assert front["instances"] == 2
    # rolling restart: one store member per step, before the workers and the frontend
    steps = rolling_steps(v)
    assert [s for s, _ in steps][:3] == [f"store glm-lab-dynamo-etcd-etcd-{i}" for i in range(3)]
    assert all(len(units) == 1 for _, units in steps[:3]) and steps[-1][0] == "router"


def _frontend(doc: dict, status: int = 200):
    """A stdlib HTTP server answering GET /health with ``doc`` (Dynamo 1.6.1's frontend shape,
    as the lab measured it: ``instances`` with endpoint, instance_id, transport)."""
    import http.server
    import json
    import threading

    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            body = json.dumps(doc).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


def _inst(i: int, endpoint: str = "generate") -> dict:
    return {"namespace": "dynamo", "component": "backend", "endpoint": endpoint, "instance_id": i,
            "transport": {"tcp": f"10.77.0.1{i}:4000/x"}}


@pytest.mark.parametrize("listed,want_ok", [([_inst(1), _inst(2), _inst(2, "clear_kv_blocks")], True),
                                            ([_inst(1), _inst(1, "clear_kv_blocks")], False)])
def test_status_counts_the_registered_workers_and_fails_short_of_the_plan(tmp_path, listed, want_ok):
    from glmops import runner
    from glmops.commands.status import status_rows

    srv = _frontend({"status": "healthy", "instances": listed}, 200 if want_ok else 503)
    try:
        url = f"http://127.0.0.1:{srv.server_address[1]}/health"
        plan = {"services": [{"host": "lab-3", "name": "glm-x-frontend", "unit": "glm-x-frontend.service",
                              "role": "frontend", "gpus": [], "url": url[:-7], "health_url": url, "instances": 2}]}
        result = runner.RunResult(verb="status", rc=0, status="successful", artifacts=tmp_path, seconds=0.1,
                                  services=[{"host": "lab-3", "unit": "glm-x-frontend.service", "active": "active",
                                             "sub": "running", "pid": 7, "restarts": 0, "health": 200,
                                             "uptime_s": 3.0}])
        (row,) = status_rows(plan, result)
    finally:
        srv.shutdown()
    assert row["instances"] == {"have": 2 if want_ok else 1, "want": 2}


STORE_CHECK = ROOT / "roles" / "discovery_store" / "files" / "glmops_store_check.py"


def _check(*args: str):
    import json
    import subprocess
    import sys

    res = subprocess.run([sys.executable, str(STORE_CHECK), *args], capture_output=True, text=True, timeout=60)
    return res.returncode, json.loads(res.stdout)


def test_host_check_registered_waits_for_the_plans_count():
    srv = _frontend({"instances": [_inst(1), _inst(2)]})
    try:
        url = f"http://127.0.0.1:{srv.server_address[1]}/health"
        assert _check("registered", "--timeout", "0", "--url", url, "--want", "2")[0] == 0
        rc, doc = _check("registered", "--timeout", "1", "--url", url, "--want", "3")
        assert rc == 1 and doc["have"] == 2 and "lists 2 generate instance(s), the Plan has 3" in doc["reason"]
    finally:
        srv.shutdown()


def test_host_check_ports_names_the_stranger_and_reach_names_the_unit():
    import socket

    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    held.listen()
    port = held.getsockname()[1]
    try:
        rc, doc = _check("ports", "--port", f"127.0.0.1:{port}=glm-x-etcd-0.service")
        assert rc == 1 and f"port {port} on 127.0.0.1 is taken" in doc["ports"][0]["reason"]
        assert "not by glm-x-etcd-0.service" in doc["ports"][0]["reason"]
        assert _check("reach", "--timeout", "0", "--endpoint", f"glm-x-etcd-0.service|127.0.0.1|{port}")[0] == 0
    finally:
        held.close()
    assert _check("ports", "--port", f"127.0.0.1:{port}=glm-x-etcd-0.service")[0] == 0
    rc, doc = _check("reach", "--timeout", "0", "--endpoint", f"glm-x-etcd-0.service|127.0.0.1|{port}")
    assert rc == 1 and "glm-x-etcd-0.service" in doc["endpoints"][0]["reason"]
