"""The Dynamo mocker backend (``glmops_dynamo_backend: mocker``) and ``inventories/lab-dynamo``:
the Plan flag for flag (every mocker flag one the real 1.6.1 parser accepts: catalog
``engines.mocker.flags``, compared with the parser itself in
tests/e2e/test_dynamo_mocker_parsers.py; frontend flags against the reference option list),
discovery through one shared file store, health gating, and the rules around the backend.
"""
from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest
import yaml
from inventory_factory import write_inventory
from plan_helpers import flags

from glmops import catalog, rules
from glmops.inventory import load_deployment

ROOT = Path(__file__).resolve().parents[2]
LAB_DYNAMO = ROOT / "inventories" / "lab-dynamo"
FRONTEND_OPTIONS = Path("/work/shared/reference/option-lists/dynamo-1.6.1-frontend.txt")
PY = "/opt/glmops/venvs/dynamo-1.6.1/bin/python"
SNAPSHOT = "/models/glmops-lab/tiny-llama/fe40d458d5998d162f66364ccee30bb27f5e658f"
STORE = "/var/lib/glmops/lab/kv-shared/dynamo-lab-dynamo"
ADDR = {"lab-1": "10.77.0.11", "lab-2": "10.77.0.12", "lab-3": "10.77.0.13"}
LAB_HOSTS = {h: {"ansible_host": a} for h, a in ADDR.items()}


def lab_vars() -> dict:
    return yaml.safe_load((LAB_DYNAMO / "group_vars" / "all.yml").read_text())


def validate(tmp_path: Path, gv: dict, hosts: dict | None = None):
    inv = write_inventory(tmp_path / "inv", gv, hosts=hosts or dict(LAB_HOSTS),
                          groups={"glmops_routers": ["lab-3"]} if not hosts else None)
    return rules.validate(load_deployment(inv))


@pytest.fixture(scope="module")
def plan():
    built, problems = rules.validate(load_deployment(LAB_DYNAMO))
    assert problems == []
    return built


def _flag_names(argv: list[str]) -> list[str]:
    return [w[2:] for w in argv if w.startswith("--")]


def test_lab_dynamo_plan_places_two_mockers_and_the_frontend(plan):
    got = {(s.host, s.name, s.role) for s in plan.services}
    assert got == {("lab-1", "glm-lab-dynamo-agg-0", "agg"), ("lab-2", "glm-lab-dynamo-agg-1", "agg"),
                   ("lab-3", "glm-lab-dynamo-frontend", "frontend")}
    assert plan.endpoint_url == "http://10.77.0.13:8000"
    assert "dynamo discovery: file store " + STORE + " (one directory shared by every host)" in plan.notes


def test_mocker_worker_golden(plan):
    accepted = set(catalog.load().engine("mocker")["flags"])
    for svc in (s for s in plan.services if s.role == "agg"):
        assert svc.argv[:3] == [PY, "-m", "dynamo.mocker"]
        assert set(_flag_names(svc.argv)) <= accepted, set(_flag_names(svc.argv)) - accepted
        assert flags(svc.argv, 3) == {
            "_pos": [PY, "-m", "dynamo.mocker"],
            "model-path": SNAPSHOT,               # the tiny model's snapshot (config + tokenizer)
            "model-name": "tiny-llama",           # glmops_served_model_name
            "block-size": 64.0,                   # catalog engines.mocker.block_size, = the router's
            "max-model-len": 512.0,               # glmops_max_seq_len
            "max-num-seqs": 4.0,                  # glmops_max_batch_size
            "max-num-batched-tokens": 512.0,      # glmops_max_num_tokens
            # glmops_engine_args: reasoning markers that are real tiny-llama tokens
            "reasoning": {"start_thinking_token_id": 442.0, "end_thinking_token_id": 471.0, "thinking_ratio": 0.5},
            "request-plane": "tcp", "event-plane": "zmq", "discovery-backend": "file",
        }
        # gated on Dynamo's own worker status server; the frontend does the one-token request
        assert svc.health_url == f"http://{ADDR[svc.host]}:9090/health" and svc.ready_url == ""
        assert svc.ports == {"system": [9090]} and svc.gpus == []
        env = svc.env
        assert env["DYN_SYSTEM_PORT"] == "9090" and env["DYN_HEALTH_CHECK_ENABLED"] == "true"
        assert env["DYN_FILE_KV"] == STORE
        for var in ("DYN_TCP_RPC_HOST", "DYN_EVENT_PLANE_HOST", "DYN_TCP_RESPONSE_STREAM_HOST",
                    "DYN_HTTP_RPC_HOST", "DYN_SYSTEM_HOST"):
            assert env[var] == ADDR[svc.host], var
        assert env["HF_HUB_OFFLINE"] == "1" and "CUDA_VISIBLE_DEVICES" not in env


def test_frontend_golden(plan):
    front = next(s for s in plan.services if s.role == "frontend")
    assert flags(front.argv, 3) == {
        "_pos": [PY, "-m", "dynamo.frontend"],
        "http-host": "10.77.0.13", "http-port": 8000.0,
        "router-mode": "kv",                      # policy kv_aware
        "kv-cache-block-size": 64.0,              # the mockers' --block-size
        "request-plane": "tcp", "event-plane": "zmq", "discovery-backend": "file",
    }
    assert front.env["DYN_FILE_KV"] == STORE and front.env["DYN_TCP_RPC_HOST"] == "10.77.0.13"
    assert front.health_url == "http://10.77.0.13:8000/health"
    assert front.ready_url == "http://10.77.0.13:8000/v1/completions"
    assert sorted(front.depends_on) == ["glm-lab-dynamo-agg-0", "glm-lab-dynamo-agg-1"]
    if FRONTEND_OPTIONS.is_file():  # the reference dump of the real frontend parser
        known = set(re.findall(r"'--([a-z0-9-]+)'", FRONTEND_OPTIONS.read_text()))
        assert set(_flag_names(front.argv)) <= known


def test_limits_and_kv_dtype_become_mocker_flags(tmp_path):
    gv = lab_vars()
    gv.update(glmops_kv_cache_dtype="fp8", glmops_max_seq_len=1024)
    gv["glmops_engine_args"] = {"block-size": 32, "speedup-ratio": 0}
    gv["glmops_topologies"]["agg"]["pools"]["agg"]["engine_args"] = {"speedup-ratio": 2}
    plan, problems = validate(tmp_path, gv)
    assert problems == []
    worker = next(s for s in plan.services if s.role == "agg")
    front = next(s for s in plan.services if s.role == "frontend")
    got = flags(worker.argv, 3)
    assert (got["kv-cache-dtype"], got["max-model-len"], got["block-size"]) == ("fp8", 1024.0, 32.0)
    assert got["speedup-ratio"] == 2.0          # pool engine_args win over glmops_engine_args
    assert "reasoning" not in got                # replaced glmops_engine_args
    assert flags(front.argv, 3)["kv-cache-block-size"] == 32.0  # the router hashes the same block


def test_without_a_shared_store_multi_host_dynamo_uses_etcd(tmp_path):
    gv = lab_vars()
    del gv["glmops_env"]
    plan, problems = validate(tmp_path, gv)
    assert problems == []
    dynamo = [s for s in plan.services if s.engine == "dynamo"]
    assert len(dynamo) == 3
    for svc in dynamo:
        assert flags(svc.argv, 3)["discovery-backend"] == "etcd"
        assert svc.env["ETCD_ENDPOINTS"] == "http://10.77.0.13:2379" and "DYN_FILE_KV" not in svc.env
    # the store the endpoints name is in the Plan: one etcd member on the front door's host (lab-3)
    (store,) = [s for s in plan.services if s.role == "store"]
    assert (store.host, store.engine, store.port) == ("lab-3", "etcd", 2379)
    assert any(n.startswith("dynamo discovery: etcd (1 member(s): lab-3:2379)") for n in plan.notes), plan.notes


def test_mocker_is_refused_on_gpu_hardware(tmp_path):
    gv = lab_vars()
    gv["glmops_hardware"] = "b200"
    gv["glmops_variant"] = "fp8"
    gv["glmops_topologies"]["agg"]["pools"]["agg"]["tp"] = 4
    _plan, problems = validate(tmp_path, gv)
    hw = [p for p in problems if p.code == "ENGINE_HARDWARE"]
    assert len(hw) == 1, problems
    assert hw[0].path.endswith("glmops_dynamo_backend")
    assert "'mocker'" in hw[0].message and "b200" in hw[0].message and "accepted hardware: cpu" in hw[0].message
    # the same deployment with a real backend passes that rule
    gv["glmops_dynamo_backend"] = "vllm"
    _plan, problems = validate(tmp_path / "vllm", gv)
    assert "ENGINE_HARDWARE" not in [p.code for p in problems]


def test_mocker_is_a_backend_not_an_engine(tmp_path):
    gv = lab_vars()
    gv["glmops_engine"] = "mocker"
    _plan, problems = validate(tmp_path, gv)
    bad = [p for p in problems if p.code == "CATALOG_KEY"]
    assert bad and "glmops_engine 'mocker' is not an engine but the catalog's backend" in bad[0].message
    assert "dynamo" in bad[0].message and "mocker" not in bad[0].message.split("accepted:")[1]
    gv = copy.deepcopy(lab_vars())
    gv["glmops_dynamo_backend"] = "echo"
    _plan, problems = validate(tmp_path / "echo", gv)
    choice = [p for p in problems if p.code == "CHOICE"]
    assert choice and choice[0].message.endswith("accepted: vllm, sglang, mocker")
