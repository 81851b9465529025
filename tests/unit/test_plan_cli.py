"""`glmops plan` end to end on a generated inventory: table, json/yaml, --out tree, exit 2
with every problem; and `glmops --help` stays light."""
from __future__ import annotations

import json
import stat
import subprocess
import sys
from pathlib import Path

import yaml
from click.testing import CliRunner

from glmops.cli import main

HOSTS = """all:
  children:
    glmops_workers:
      hosts:
        node-a: {ansible_host: 192.0.2.10}
"""

GROUP_VARS = {
    "glmops_deployment": "flash",
    "glmops_model": "glm-5.3-flash",
    "glmops_variant": "fp8",
    "glmops_engine": "trtllm",
    "glmops_engine_version": "1.3.0rc29",
    "glmops_hardware": "b200",
    "glmops_runtime": "venv",
    "glmops_topology": "agg",
    "glmops_served_model_name": "zai-org/GLM-5.3-Flash",
    "glmops_checkpoint": {"repo": "zai-org/GLM-5.3-Flash", "revision": "f" * 40, "model_dir": "/models"},
    "glmops_topologies": {
        "agg": {"pools": {"agg": {"tp": 4, "ep": 4, "replicas": 2, "port": 8001}}, "router": {"port": 8000}},
        "disagg": {"pools": {"prefill": {"tp": 4, "ep": 4, "gpus": [0, 1, 2, 3], "port": 8001},
                             "decode": {"tp": 4, "ep": 4, "gpus": [4, 5, 6, 7], "port": 8002}},
                   "router": {"port": 8000}},
    },
}


def inventory(tmp_path: Path, **overrides) -> str:
    inv = tmp_path / "inv"
    (inv / "group_vars").mkdir(parents=True)
    (inv / "hosts.yml").write_text(HOSTS)
    data = {**GROUP_VARS, **overrides}
    (inv / "group_vars" / "all.yml").write_text(yaml.safe_dump(data))
    return str(inv)


def run(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_table_shows_services_per_host(tmp_path):
    res = run("plan", "-i", inventory(tmp_path))
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert lines[1].split() == ["HOST", "SERVICE", "ROLE", "GPUS", "PORTS", "HEALTH"]
    rows = [line.split() for line in lines[2:5]]
    assert rows[0] == ["node-a", "glm-flash-agg-0.service", "agg", "0,1,2,3", "http=8001", "http://192.0.2.10:8001/health"]
    assert rows[1] == ["glm-flash-agg-1.service", "agg", "4,5,6,7", "http=8002", "http://192.0.2.10:8002/health"]
    assert rows[2][:2] == ["glm-flash-router.service", "router"]
    assert "endpoint: http://192.0.2.10:8000" in res.output


def test_json_and_yaml_formats(tmp_path):
    inv = inventory(tmp_path)
    data = json.loads(run("plan", "-i", inv, "--topology", "disagg", "--format", "json").output)
    assert data["topology"] == "disagg" and data["endpoint_url"] == "http://192.0.2.10:8000"
    assert [s["unit"] for s in data["services"]] == [
        "glm-flash-prefill-0.service", "glm-flash-decode-0.service", "glm-flash-orchestrator.service"]
    assert yaml.safe_load(run("plan", "-i", inv, "--format", "yaml").output)["services"][0]["gpus"] == [0, 1, 2, 3]


def test_out_writes_every_file_a_deploy_places(tmp_path):
    inv = inventory(tmp_path)
    out = tmp_path / "out"
    res = run("plan", "-i", inv, "--topology", "disagg", "--out", str(out))
    assert res.exit_code == 0, res.output
    host = out / "node-a"
    files = sorted(str(p.relative_to(host)) for p in host.rglob("*") if p.is_file())
    assert files == sorted([
        "etc/systemd/system/glm-flash-prefill-0.service",
        "etc/systemd/system/glm-flash-decode-0.service",
        "etc/systemd/system/glm-flash-orchestrator.service",
        "etc/systemd/system/glm-flash.target",
        "etc/glmops/flash/glm-flash-prefill-0.env",
        "etc/glmops/flash/glm-flash-decode-0.env",
        "etc/glmops/flash/glm-flash-orchestrator.env",
        "etc/glmops/flash/glm-flash-prefill-0.yml",
        "etc/glmops/flash/glm-flash-decode-0.yml",
        "etc/glmops/flash/disagg_config.yaml",
    ])
    for env in host.glob("etc/glmops/flash/*.env"):
        assert stat.S_IMODE(env.stat().st_mode) == 0o600
    disagg = yaml.safe_load((host / "etc/glmops/flash/disagg_config.yaml").read_text())
    assert disagg["context_servers"]["urls"] == ["192.0.2.10:8001"]
    assert disagg["generation_servers"]["urls"] == ["192.0.2.10:8002"]


def test_bad_inventory_exits_2_with_every_problem_and_writes_nothing(tmp_path):
    # two independent problems: revision not a commit (F12) and TP larger than the node
    bad = {"agg": {"pools": {"agg": {"tp": 16}}, "router": {"port": 8000}}}
    inv = inventory(tmp_path, glmops_checkpoint={"repo": "zai-org/GLM-5.3-Flash", "revision": "main"},
                    glmops_topologies=bad)
    out = tmp_path / "out"
    res = CliRunner().invoke(main, ["plan", "-i", inv, "--out", str(out)])
    assert res.exit_code == 2
    text = res.output
    assert "revision" in text and "main" in text
    assert "16" in text
    assert not out.exists()


def test_help_imports_nothing_heavy():
    code = (
        "import sys\n"
        "from glmops.cli import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        "heavy = [m for m in ('yaml', 'jinja2', 'ansible', 'glmops.plan', 'glmops.engines.base', 'glmops.render')"
        " if m in sys.modules]\n"
        "print(heavy)\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip().splitlines()[-1] == "[]"


def test_out_writes_secrets_redacted_unless_asked(tmp_path):
    """A fresh-user trial found the real API key in ``plan --out``'s env files (a tree a CI job
    may upload): it is ``<redacted>`` there, and nowhere else in the tree; ``--with-secrets``
    writes the files as a deploy places them (the env file 0600)."""
    key = "sk-plan-out-SECRET-0123456789abcdef"
    inv = inventory(tmp_path, glmops_engine="vllm", glmops_engine_version=None, glmops_api_key=key,
                    glmops_topologies={"agg": {"pools": {"agg": {"tp": 4, "replicas": 2, "port": 8001}},
                                               "router": {"port": 8000}}})
    out, full = tmp_path / "out", tmp_path / "full"
    res = CliRunner().invoke(main, ["plan", "-i", inv, "--out", str(out)])
    assert res.exit_code == 0, res.output
    texts = {p: p.read_text() for p in out.rglob("*") if p.is_file()}
    assert not [p for p, t in texts.items() if key in t]
    envs = [t for p, t in texts.items() if p.suffix == ".env" and "VLLM_API_KEY=" in t]
    assert envs and all("VLLM_API_KEY=<redacted>\n" in t for t in envs)
    res = CliRunner().invoke(main, ["plan", "-i", inv, "--out", str(full), "--with-secrets"])
    assert res.exit_code == 0, res.output
    holders = [p for p in full.rglob("*") if p.is_file() and key in p.read_text()]
    assert holders and all(p.suffix == ".env" and stat.S_IMODE(p.stat().st_mode) == 0o600 for p in holders)


def test_with_secrets_without_out_is_refused(tmp_path):
    res = CliRunner().invoke(main, ["plan", "-i", inventory(tmp_path), "--with-secrets"])
    assert res.exit_code == 2 and "--with-secrets together with --out DIR" in res.output
