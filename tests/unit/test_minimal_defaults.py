"""Minimal inventories (hosts + model/engine/hardware, what a user writes first) get each seed
configuration's recipe: the layout and router chosen by engine (and Dynamo's backend) and hardware
together, the seed's image, and the seed's flags. Expectations are read from the seeds' text
(tests/unit/seed_text.py) or cite the seed line they come from."""
from __future__ import annotations

import json

import yaml
from plan_helpers import flags, seed_cmd
from seed_text import command_after, seed

from glmops import planning

OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def minimal(tmp_path, n_hosts: int = 1, name: str = "inv", host: dict | None = None, **gv):
    """An inventory as a user writes it: hosts.yml with addresses (plus ``host`` vars on each),
    group_vars/all.yml with glmops_<key>."""
    root = tmp_path / name
    (root / "group_vars").mkdir(parents=True)
    hosts = {f"gpu-{i + 1}": {"ansible_host": f"10.0.0.{11 + i}", **(host or {})} for i in range(n_hosts)}
    (root / "hosts.yml").write_text(yaml.safe_dump({"all": {"hosts": hosts}}))
    (root / "group_vars" / "all.yml").write_text(yaml.safe_dump({f"glmops_{k}": v for k, v in gv.items()}))
    return root


def by_role(plan):
    out: dict[str, list] = {}
    for svc in plan.services:
        out.setdefault(svc.role, []).append(svc)
    return out


# ------------------------------------------------------------------ D1: Dynamo + vLLM on GB200

def test_d1_dynamo_vllm_gb200_agg_takes_the_vllm_layout_and_kv_routing(tmp_path):
    # seed 001 vLLM table: "GB200 Aggregated ... Parallelism TP4 ... Routing KV-aware" (lines 174-185);
    # the SGLang GB200 layout (port 30000, round-robin) belongs to the SGLang backend only
    inv = minimal(tmp_path, model="glm-5.3-flash", engine="dynamo", dynamo_backend="vllm", hardware="gb200",
                  runtime="venv")
    planned = planning.load(str(inv))
    assert planned.deployment.layout == "vllm-gb200-agg"
    roles = by_role(planned.plan)
    [worker] = roles["agg"]
    assert worker.argv[1:3] == ["-m", "dynamo.vllm"] and flags(worker.argv, 3)["tensor-parallel-size"] == 4.0
    [front] = roles["frontend"]
    assert flags(front.argv, 3)["router-mode"] == "kv"


def test_d1_dynamo_vllm_gb200_disagg_takes_the_vllm_layout(tmp_path):
    # seed 001: "4x GB200 prefill + 4x GB200 decode ... TP4 prefill / TP4 decode ... Routing KV-aware" (line 22)
    # across two trays NIXL needs the hosts' NICs (F06)
    inv = minimal(tmp_path, n_hosts=2, host={"glmops_rdma_devices": ["mlx5_0"]}, model="glm-5.3-flash",
                  engine="dynamo", dynamo_backend="vllm", hardware="gb200", runtime="venv", topology="disagg")
    planned = planning.load(str(inv))
    assert planned.deployment.layout == "vllm-gb200-disagg"
    roles = by_role(planned.plan)
    assert [(s.host, flags(s.argv, 3)["tensor-parallel-size"]) for s in roles["prefill"] + roles["decode"]] == \
        [("gpu-1", 4.0), ("gpu-2", 4.0)]
    assert flags(roles["frontend"][0].argv, 3)["router-mode"] == "kv"


def test_dynamo_vllm_prefix_caching_only_where_seed_001_enables_it(tmp_path):
    # seed 001 line 172: "The GB200 aggregated target and both H200 targets enable prefix caching."
    # (the GB200 disaggregated target is the one left out); read from the seed, not retyped
    [sentence] = [ln for ln in seed("001").splitlines() if "enable prefix caching" in ln and "GB200" in ln]
    assert "The GB200 aggregated target and both H200 targets enable prefix caching." in sentence
    cases = {("gb200", "agg"): True, ("gb200", "disagg"): False, ("h200", "agg"): True, ("h200", "disagg"): True}
    for (hardware, topology), enabled in cases.items():
        hosts = 2 if topology == "disagg" else 1
        inv = minimal(tmp_path, n_hosts=hosts, name=f"{hardware}-{topology}", host={"glmops_rdma_devices": ["mlx5_0"]},
                      model="glm-5.3-flash", engine="dynamo", dynamo_backend="vllm", hardware=hardware,
                      runtime="venv", topology=topology)
        workers = [s for s in planning.load(str(inv)).plan.services if s.role in ("agg", "prefill", "decode")]
        assert workers
        for svc in workers:
            assert ("--enable-prefix-caching" in svc.argv) is enabled, (hardware, topology, svc.name, svc.argv)


def test_d1_dynamo_sglang_gb200_keeps_the_sglang_layout(tmp_path):
    # seed 001 SGLang table: GB200 Aggregated "Routing Round-robin" (line 202)
    inv = minimal(tmp_path, model="glm-5.3-flash", variant="nvfp4", engine="dynamo", dynamo_backend="sglang",
                  hardware="gb200", runtime="venv")
    planned = planning.load(str(inv))
    assert planned.deployment.layout == "sglang-gb200-agg"
    assert flags(by_role(planned.plan)["frontend"][0].argv, 3)["router-mode"] == "round-robin"


def test_d1_pools_pinned_to_hosts_keep_the_recipe_routing_policy(tmp_path):
    pinned = {"agg": {"pools": {"agg": {"tp": 4, "hosts": ["gpu-2"]}}}}
    inv = minimal(tmp_path, n_hosts=2, model="glm-5.3-flash", engine="dynamo", dynamo_backend="vllm",
                  hardware="gb200", runtime="venv", topologies=pinned)
    planned = planning.load(str(inv))
    roles = by_role(planned.plan)
    assert roles["agg"][0].host == "gpu-2"
    assert flags(roles["frontend"][0].argv, 3)["router-mode"] == "kv"
    # a policy the user sets wins
    pinned["agg"]["router"] = {"policy": "round_robin"}
    inv = minimal(tmp_path, n_hosts=2, name="own", model="glm-5.3-flash", engine="dynamo", dynamo_backend="vllm",
                  hardware="gb200", runtime="venv", topologies=pinned)
    assert flags(by_role(planning.load(str(inv)).plan)["frontend"][0].argv, 3)["router-mode"] == "round-robin"


# ------------------------------------------------------------------ D2: the seed's vLLM image

def test_d2_dynamo_vllm_container_defaults_to_the_seed_image(tmp_path):
    # seed 001 lines 34/38: "Access to zai-org/GLM-5.3-Flash and the vllm/vllm-openai:glm53-flash image"
    text = seed("001")
    image = "vllm/vllm-openai:glm53-flash"
    assert f"the {image} image" in text
    inv = minimal(tmp_path, model="glm-5.3-flash", engine="dynamo", dynamo_backend="vllm", hardware="h200")
    planned = planning.load(str(inv))
    [worker] = by_role(planned.plan)["agg"]
    assert worker.runtime == "container" and worker.image == image


# ------------------------------------------------------------------ D4: seed 002's GB200 tray command

def test_d4_vllm_gb200_tray_is_the_seed_command(tmp_path):
    cmd, line = command_after(seed("002"), "FP8 with TP4 and MTP on one GB200 tray")
    assert line == 21  # seeds/002_5e664c6e94ff2f6a.txt line 21
    inv = minimal(tmp_path, model="glm-5.3-flash", engine="vllm", hardware="gb200", runtime="venv")
    [svc] = planning.load(str(inv)).plan.services
    _env, words = seed_cmd(cmd)
    exp = flags(words, 3)
    got = flags(svc.argv, 3)
    # deliberate (F12, see test_golden_002_vllm): local snapshot, own address and port
    exp["_pos"] = got["_pos"]
    exp.update({"host": "10.0.0.11", "port": 8000.0})
    assert got == exp
    assert got["kv-cache-dtype"] == "fp8" and got["speculative-config"] == {"method": "mtp", "num_speculative_tokens": 5.0}
    assert svc.env == {"CUDA_VISIBLE_DEVICES": "0,1,2,3", **OFFLINE}


# ------------------------------------------------------------------ D5: PD on one 8x H200 node

def test_d5_vllm_flash_disagg_on_one_h200_node(tmp_path):
    # seed 002 "Prefill/Decode disaggregation (single node, TP4 + TP4)" (line 30): "Split one 8-GPU node into a
    # prefill pool (GPUs 0-3) and a decode pool (GPUs 4-7) ... Hopper ... must run BF16 KV"
    text = seed("002")
    inv = minimal(tmp_path, model="glm-5.3-flash", engine="vllm", hardware="h200", runtime="venv", topology="disagg")
    planned = planning.load(str(inv))
    roles = by_role(planned.plan)
    for role, marker in (("prefill", "# Prefill pool"), ("decode", "# Decode pool")):
        [svc] = roles[role]
        cmd, _line = command_after(text, marker)
        env, words = seed_cmd(cmd)
        exp, got = flags(words, 3), flags(svc.argv, 3)
        exp["_pos"] = got["_pos"]
        exp["host"] = "10.0.0.11"
        assert got == exp, role
        assert "kv-cache-dtype" not in got  # Hopper: BF16 KV (the seed's PD commands set none)
        assert svc.env == {**env, "VLLM_NIXL_SIDE_CHANNEL_HOST": "10.0.0.11", **OFFLINE}, role
        assert svc.gpus == [int(g) for g in env["CUDA_VISIBLE_DEVICES"].split(",")]
    assert roles["prefill"][0].ports["http"] != roles["decode"][0].ports["http"]
    assert json.dumps(sorted(roles["prefill"][0].gpus + roles["decode"][0].gpus)) == json.dumps(list(range(8)))
    [router] = roles["router"]
    assert flags(router.argv, 1)["prefill"] == "http://10.0.0.11:8001"
