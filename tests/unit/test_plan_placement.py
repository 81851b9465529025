"""Placement, ports and multi-node launch settings of glmops.plan.build."""
from __future__ import annotations

import pytest
from plan_helpers import dep, flags

from glmops import plan, rules
from glmops.model import HostSpec, PoolSpec, RouterSpec, ValidationError


def test_replicas_fill_hosts_in_order_and_are_deterministic():
    d = dep(engine="vllm", hardware="b200", n_hosts=2, pools=[PoolSpec(role="agg", tp=4, replicas=4)])
    p1, p2 = plan.build(d), plan.build(d)
    assert p1.to_dict() == p2.to_dict()
    placed = [(s.host, s.gpus, s.port) for s in p1.services if s.role == "agg"]
    assert placed == [("gpu-1", [0, 1, 2, 3], 8001), ("gpu-1", [4, 5, 6, 7], 8002),
                      ("gpu-2", [0, 1, 2, 3], 8001), ("gpu-2", [4, 5, 6, 7], 8002)]
    router = next(s for s in p1.services if s.role == "router")
    assert flags(router.argv, 1)["worker-urls"] == [
        "http://10.0.0.11:8001", "http://10.0.0.11:8002", "http://10.0.0.12:8001", "http://10.0.0.12:8002"]
    assert router.host == "gpu-1" and router.port == 8000


def test_router_host_and_port_from_the_inventory():
    d = dep(engine="vllm", hardware="b200", n_hosts=2, pools=[PoolSpec(role="agg", tp=8, replicas=1, hosts=["gpu-1"])],
            router=RouterSpec(kind="vllm-router", host="gpu-2", port=9000))
    p = plan.build(d)
    router = next(s for s in p.services if s.role == "router")
    assert (router.host, router.port, p.endpoint_url) == ("gpu-2", 9000, "http://10.0.0.12:9000")


def test_every_pool_that_does_not_fit_is_reported_at_once():
    d = dep(engine="vllm", hardware="b200", topology="disagg", n_hosts=1, pools=[
        PoolSpec(role="prefill", tp=8, replicas=2), PoolSpec(role="decode", tp=8)])
    with pytest.raises(ValidationError) as exc:
        plan.build(d)
    msgs = [p for p in exc.value.problems if p.code == "PLACEMENT"]
    assert len(msgs) == 2
    assert "prefill replica 1 needs 8 GPU(s)" in msgs[0].message and "decode replica 0" in msgs[1].message


def test_gpu_pinning_is_honoured():
    d = dep(engine="vllm", hardware="b200", topology="disagg", pools=[
        PoolSpec(role="prefill", tp=2, gpus=[6, 7]), PoolSpec(role="decode", tp=2, gpus=[0, 1])])
    p = plan.build(d)
    by = {s.role: s for s in p.services}
    assert by["prefill"].gpus == [6, 7] and by["prefill"].env["CUDA_VISIBLE_DEVICES"] == "6,7"
    assert by["decode"].gpus == [0, 1]


def test_trtllm_multi_node_uses_mpirun_from_the_head():
    # reference/trtllm-serve.md §5: `... trtllm-llmapi-launch trtllm-serve MODEL --tp_size 16`, mpirun works
    d = dep(engine="trtllm", hardware="b200", n_hosts=2, pools=[PoolSpec(role="agg", tp=16, ep=16)])
    p = plan.build(d)
    [svc] = p.services
    assert svc.host == "gpu-1" and svc.nnodes == 2
    assert svc.argv[:7] == ["/usr/bin/mpirun", "-np", "16", "-H", "10.0.0.11:8,10.0.0.12:8", "--bind-to", "none"]
    i = svc.argv.index("/opt/glmops/venvs/trtllm-1.3.0rc29/bin/trtllm-llmapi-launch")
    assert svc.argv[i + 1].endswith("/trtllm-serve")
    got = flags(svc.argv[i + 1:], 2)
    assert got["tp_size"] == 16.0 and got["ep_size"] == 16.0
    assert any("mpirun" in n and "gpu-2" in n for n in p.notes)


def test_sglang_multi_node_flags():
    # reference/serving-clis.md §3: same command on each node with --nnodes N --node-rank k --dist-init-addr NODE0:PORT
    d = dep(engine="sglang", hardware="b200", n_hosts=2, variant="nvfp4", repo="RadixArk/GLM-5.3-Flash-NVFP4",
            size_gib=168, pools=[PoolSpec(role="agg", tp=16)])
    p = plan.build(d)
    head, follower = sorted((s for s in p.services if s.role == "agg"), key=lambda s: s.node_rank)
    for svc, rank in ((head, 0.0), (follower, 1.0)):
        got = flags(svc.argv, 3)
        assert (got["nnodes"], got["node-rank"], got["dist-init-addr"]) == (2.0, rank, "10.0.0.11:29501")
        assert got["tp-size"] == 16.0
        # ranks >= 1 answer /health on their own --host:--port
        assert svc.health_url == f"http://{svc.address}:{svc.port}/health"
    assert follower.start_order == 5 and head.depends_on == [follower.name]


def test_dynamo_vllm_multi_node_headless_follower():
    d = dep(engine="dynamo", hardware="h200", n_hosts=2, pools=[PoolSpec(role="agg", tp=16)],
            extra={"dynamo_backend": "vllm"})
    p = plan.build(d)
    head, follower = sorted((s for s in p.services if s.role == "agg"), key=lambda s: s.node_rank)
    h, f = flags(head.argv, 3), flags(follower.argv, 3)
    assert f["headless"] is True and "headless" not in h
    assert h["master-addr"] == f["master-addr"] == "10.0.0.11" and f["node-rank"] == 1.0
    assert "discovery-backend" in h and "discovery-backend" not in f


def test_side_channel_ports_one_per_dp_rank_and_collisions_reach_the_rules():
    # vLLM >= 0.29: VLLM_NIXL_SIDE_CHANNEL_PORT + DP index (reference/serving-clis.md)
    d = dep(engine="vllm", hardware="b200", topology="disagg", pools=[
        PoolSpec(role="prefill", tp=1, dp=4, ep=4, gpus=[0, 1, 2, 3], env={"VLLM_NIXL_SIDE_CHANNEL_PORT": "5600"}),
        PoolSpec(role="decode", tp=1, dp=4, ep=4, gpus=[4, 5, 6, 7], env={"VLLM_NIXL_SIDE_CHANNEL_PORT": "5602"})])
    p = plan.build(d)
    by = {s.role: s for s in p.services}
    assert by["prefill"].ports["nixl_side_channel"] == [5600, 5601, 5602, 5603]
    assert by["decode"].ports["nixl_side_channel"] == [5602, 5603, 5604, 5605]
    codes = [q.code for q in rules.check_plan(p, d)]
    assert any("PORT" in c or "F05" in c for c in codes), codes
    # decode on another host: no collision, each advertises its own address
    d2 = dep(engine="vllm", hardware="b200", topology="disagg", n_hosts=2, pools=[
        PoolSpec(role="prefill", tp=1, dp=4, ep=4, hosts=["gpu-1"], env={"VLLM_NIXL_SIDE_CHANNEL_PORT": "5600"}),
        PoolSpec(role="decode", tp=1, dp=4, ep=4, hosts=["gpu-2"], env={"VLLM_NIXL_SIDE_CHANNEL_PORT": "5602"})])
    p2 = plan.build(d2)
    assert not [q for q in rules.check_plan(p2, d2) if "PORT" in q.code or "F05" in q.code]
    assert next(s for s in p2.services if s.role == "decode").env["VLLM_NIXL_SIDE_CHANNEL_HOST"] == "10.0.0.12"


def test_allocated_ports_never_collide_on_a_host():
    d = dep(engine="dynamo", hardware="b200", topology="disagg", pools=[
        PoolSpec(role="prefill", tp=2, replicas=2), PoolSpec(role="decode", tp=4)],
        variant="nvfp4", repo="RadixArk/GLM-5.3-Flash-NVFP4", size_gib=168,
        extra={"dynamo_backend": "sglang"}, router=RouterSpec(policy="kv_aware"))
    p = plan.build(d)
    used = [port for s in p.services for ports in s.ports.values() for port in ports]
    assert len(used) == len(set(used)), sorted(used)
    assert sorted(s.ports["kv_events"][0] for s in p.services if "kv_events" in s.ports) == [5557, 5558, 5559]


def test_cpu_lab_disagg_renders_vllm_cpu_with_example_connector():
    lab = {f"lab-{i}": HostSpec(name=f"lab-{i}", address=f"10.77.0.{10 + i}", groups=["glmops_workers"]) for i in (1, 2)}
    d = dep(engine="vllm", hardware="cpu", topology="disagg", hosts=lab, repo="glmops-lab/tiny", served="tiny",
            size_gib=0.001, pools=[PoolSpec(role="prefill"), PoolSpec(role="decode")])
    p = plan.build(d)
    pre = next(s for s in p.services if s.role == "prefill")
    dec = next(s for s in p.services if s.role == "decode")
    assert (pre.host, dec.host) == ("lab-1", "lab-2") and pre.gpus == [] == dec.gpus
    assert pre.argv[:3] == ["/opt/glmops/venvs/vllm-0.29.0/bin/python", "-m", "vllm.entrypoints.openai.api_server"]
    got = flags(pre.argv, 3)
    assert got["model"].startswith("/models/glmops-lab/tiny/")
    assert got["kv-transfer-config"] == {"kv_connector": "ExampleConnector", "kv_role": "kv_both",
                                         "kv_connector_extra_config": {"shared_storage_path": "/var/lib/glmops/t/kv-shared"}}
    assert "tool-call-parser" not in got and "compilation-config" not in got and "speculative-config" not in got
    assert pre.env == {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind", "OMP_NUM_THREADS": "1",
                       "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    router = next(s for s in p.services if s.role == "router")
    assert flags(router.argv, 1)["prefill"] == "http://10.77.0.11:8001"


def test_unknown_engine_and_wrong_pools():
    with pytest.raises(ValidationError, match="engine 'tgi' unknown"):
        plan.build(dep(engine="tgi", hardware="b200", pools=[PoolSpec(role="agg")], engine_version="1"))
    with pytest.raises(ValidationError, match="needs pools"):
        plan.build(dep(engine="vllm", hardware="b200", topology="disagg", pools=[PoolSpec(role="agg")]))


def test_f06_sglang_nixl_across_hosts_pins_the_nic_on_both_pools():
    # F06: engine sglang, disagg across two hosts, transfer backend nixl, rdma_devices [mlx5_0, mlx5_1]
    d = dep(engine="sglang", hardware="b200", topology="disagg", n_hosts=2, rdma=["mlx5_0", "mlx5_1"],
            variant="nvfp4", repo="RadixArk/GLM-5.3-Flash-NVFP4", size_gib=168,
            engine_args={"disaggregation-transfer-backend": "nixl"},
            pools=[PoolSpec(role="prefill", tp=8, hosts=["gpu-1"]), PoolSpec(role="decode", tp=8, hosts=["gpu-2"])])
    p = plan.build(d)
    workers = [s for s in p.services if s.role in ("prefill", "decode")]
    assert {s.host for s in workers} == {"gpu-1", "gpu-2"}
    for svc in workers:
        assert svc.env["UCX_NET_DEVICES"] == "mlx5_0:1,mlx5_1:1"
        assert flags(svc.argv, 3)["disaggregation-transfer-backend"] == "nixl"


def test_pool_port_equal_to_the_router_port_on_its_host_moves_with_a_note():
    """A one-replica layout grown to several: the router keeps the shared port on its host, the
    replicas listen after it, and the Plan says so (no silent move)."""
    d = dep(engine="vllm", hardware="b200", n_hosts=2, pools=[PoolSpec(role="agg", tp=4, replicas=2, port=9000,
                                                                        hosts=["gpu-1"])],
            router=RouterSpec(kind="vllm-router", host="gpu-1", port=9000))
    p = plan.build(d)
    assert [s.port for s in p.services if s.role == "agg"] == [9001, 9002]
    assert any("pool agg port 9000 is the router's port on gpu-1" in n and "from 9001" in n for n in p.notes), p.notes
    assert rules.check_plan(p, d) == []


def test_pool_port_equal_to_the_router_port_on_another_host_is_kept():
    d = dep(engine="vllm", hardware="b200", n_hosts=2, pools=[PoolSpec(role="agg", tp=4, replicas=2, port=9000,
                                                                        hosts=["gpu-1"])],
            router=RouterSpec(kind="vllm-router", host="gpu-2", port=9000))
    p = plan.build(d)
    assert [s.port for s in p.services if s.role == "agg"] == [9000, 9001]
    assert not any("router's port" in n for n in p.notes)


def test_without_a_front_door_the_one_worker_is_the_endpoint_on_the_router_port():
    """router kind none: the worker is the endpoint, on the endpoint's port (router port, as
    with a front door); a pool port set beside it is not used, and the Plan says so."""
    d = dep(engine="vllm", hardware="b200", pools=[PoolSpec(role="agg", tp=8, port=9100)],
            router=RouterSpec(kind="none", port=8800))
    p = plan.build(d)
    (worker,) = [s for s in p.services if s.role == "agg"]
    assert worker.port == 8800 and p.endpoint_url.endswith(":8800")
    assert any("the one agg worker is the endpoint on the router port 8800; pool agg port 9100 is not used" in n
               for n in p.notes), p.notes
    assert rules.check_plan(p, d) == []
    plain = plan.build(dep(engine="vllm", hardware="b200", pools=[PoolSpec(role="agg", tp=8)],
                           router=RouterSpec(kind="none")))
    assert [s.port for s in plain.services] == [8000] and not any("no front door" in n for n in plain.notes)
