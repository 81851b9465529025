"""Serving offline (issue 6 item 8, F12) through glmops.plan, the checkpoint plan view the
download playbook reads, and the glmops_checkpoint Ansible module run for real on localhost
(AnsiballZ ships glmops.checkpoint to it as module_utils) against the hub double."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from glmops import checkpoint as ck
from glmops import inventory, plan, rules
from glmops.planning import plan_view

sys.path.insert(0, str(Path(__file__).resolve().parent))
from inventory_factory import REV, write_inventory  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "doubles"))
from hub_double import HubDouble  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
ENGINES = {
    "vllm": {"glmops_engine": "vllm", "glmops_hardware": "b200"},
    "sglang": {"glmops_engine": "sglang", "glmops_hardware": "b200"},
    "trtllm": {"glmops_engine": "trtllm", "glmops_hardware": "b200"},
    "dynamo": {"glmops_engine": "dynamo", "glmops_hardware": "b200"},
}
TOKEN = "hf_planSecret_0123456789"


def gv(**over):
    base = {"glmops_model": "glm-5.3-flash", "glmops_variant": "fp8", "glmops_runtime": "venv",
            "glmops_checkpoint": {"revision": REV, "model_dir": "/data/models"},
            "glmops_env": {"HF_TOKEN": TOKEN, "HUGGING_FACE_HUB_TOKEN": TOKEN, "EXTRA": "1"}}
    base.update(over)
    return base


@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_engines_serve_the_local_snapshot_offline_without_token(tmp_path, engine):
    inv = write_inventory(tmp_path / engine, gv(**ENGINES[engine]))
    dep = inventory.load_deployment(str(inv))
    assert dep.checkpoint.local_dir == f"/data/models/zai-org/GLM-5.3-Flash/{REV}"
    p, problems = rules.validate(dep)
    assert p is not None, problems
    workers = [s for s in p.services if s.start_order < 50]
    assert workers
    for svc in workers:
        assert dep.checkpoint.local_dir in svc.argv, (svc.name, svc.argv)
        assert svc.env.get("HF_HUB_OFFLINE") == "1" and svc.env.get("TRANSFORMERS_OFFLINE") == "1", svc.env
        assert TOKEN not in json.dumps({"argv": svc.argv, "env": svc.env, "files": [str(f.content) for f in svc.files]})
        assert "zai-org/GLM-5.3-Flash" in svc.argv  # the served model name the seeds use is kept
    for svc in p.services:
        assert TOKEN not in json.dumps({"argv": svc.argv, "env": svc.env})
    view = plan_view(str(inv))
    assert TOKEN not in json.dumps(view)
    assert view["checkpoint"]["local_dir"] == dep.checkpoint.local_dir


def test_revision_main_is_refused_offline_and_allowed_online(tmp_path):
    dep = inventory.load_deployment(str(write_inventory(
        tmp_path / "a", gv(glmops_engine="vllm", glmops_hardware="b200",
                           glmops_checkpoint={"revision": "main"}))))
    codes = {p.code: p for p in rules.check(dep)}
    assert "F12_REVISION" in codes and "'main'" in codes["F12_REVISION"].message
    assert "glmops_checkpoint" in codes["F12_REVISION"].path
    dep2 = inventory.load_deployment(str(write_inventory(
        tmp_path / "b", gv(glmops_engine="vllm", glmops_hardware="b200",
                           glmops_checkpoint={"revision": "main", "offline": False}))))
    assert "F12_REVISION" not in {p.code for p in rules.check(dep2)}
    assert ck.check_inputs(dep2.checkpoint.repo, "main", dep2.checkpoint.local_dir, offline=False) == []


def test_plan_view_lists_every_host_that_loads_the_checkpoint():
    view = plan_view(str(ROOT / "inventories" / "lab"))["checkpoint"]
    assert view["hosts"] == ["lab-1", "lab-2"]  # prefill + decode; the router host needs no weights
    assert view["revision"] and ck.HEX40.match(view["revision"])
    assert view["local_dir"] == f"/models/{view['repo']}/{view['revision']}"
    one = plan_view(str(ROOT / "inventories" / "b200"))["checkpoint"]
    assert len(one["hosts"]) == 1 and one["mode"] == "per_node"


def test_ansible_module_downloads_and_reports_on_localhost(tmp_path):
    files = {"config.json": b'{"a": 1}', "model.safetensors": os.urandom(200_000)}
    commit = "fedcba9876543210fedcba9876543210fedcba98"
    with HubDouble(required_token=TOKEN) as hub:
        hub.add_files("org/model", files, commit=commit)
        token_file = tmp_path / "token"
        token_file.write_text(TOKEN)
        token_file.chmod(0o600)
        local = tmp_path / "models" / "org" / "model" / commit
        args = {"repo": "org/model", "revision": commit, "local_dir": str(local), "model_dir": str(tmp_path / "models"),
                "state_dir": str(tmp_path / "state"), "endpoint": hub.url, "token_file": str(token_file),
                "margin_bytes": 0, "progress_file": str(tmp_path / "progress.json")}

        def module(**a):
            env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_CALLBACK_RESULT_FORMAT="json",
                       ANSIBLE_LOCALHOST_WARNING="0")
            env.pop("HF_TOKEN", None)
            r = subprocess.run([str(Path(sys.executable).parent / "ansible"), "localhost", "-c", "local",
                                "-e", f"ansible_python_interpreter={sys.executable}",
                                "-m", "glmops_checkpoint", "-a", json.dumps(a)],
                               capture_output=True, text=True, env=env, cwd=str(ROOT), timeout=120)
            # ad-hoc output: "localhost | SUCCESS => {json}" (or FAILED!)
            assert "=>" in r.stdout, r.stdout + r.stderr
            return json.loads(r.stdout.split("=>", 1)[1]), r.stdout + r.stderr

        res, text = module(**args)
        assert res.get("changed") and res["verified"] and res["commit"] == commit, text
        assert sorted(res["fetched"]) == sorted(files) and TOKEN not in text
        assert (local / "model.safetensors").read_bytes() == files["model.safetensors"]
        res2, _ = module(**args)
        assert not res2["changed"] and res2["verified"]
        st, _ = module(action="status", repo="org/model", revision=commit, local_dir=str(local),
                       state_dir=str(tmp_path / "state"))
        assert st["verified"] and st["manifest"]["commit"] == commit
        prog, _ = module(action="progress", progress_file=str(tmp_path / "progress.json"))
        assert prog["state"] == "done" and prog["finished"] and prog["bytes_done"] == sum(map(len, files.values()))
        hub.set_faults([{"kind": "tree_wrong_size", "delta": 2 ** 50, "path": "model.safetensors"}])
        bad, text = module(**dict(args, local_dir=str(tmp_path / "models" / "other")))  # fresh, below model_dir
        assert "FAILED!" in text and bad["code"] == "F10_DISK" and bad["needed"] > bad["available"], text
        assert "needed" in bad["msg"] and "available" in bad["msg"]
