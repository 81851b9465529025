"""D3: F06's RDMA rule on the GB200 vLLM TCP path. Seed 001 (GB200 disaggregated, Dynamo + vLLM):
"excludes cuda_ipc from UCX and transfers KV data over cuda_copy and TCP" (UCX_TLS=cuda_copy,tcp).
A UCX_TLS without an RDMA transport needs no glmops_rdma_devices and gets no UCX_NET_DEVICES (RDMA
ports, or vLLM's `all` pin) beside it; cross-host NIXL over RDMA still needs the NICs (F06)."""
from __future__ import annotations

import pytest
from inventory_factory import REV, without_venv_advice, write_inventory

from glmops import rules
from glmops.inventory import load_deployment

TRAYS = {"tray-a": {"ansible_host": "192.0.2.41"}, "tray-b": {"ansible_host": "192.0.2.42"}}


def gb200_vllm_disagg(engine: str = "dynamo", **over) -> dict:
    """The minimal GB200 vLLM disaggregated inventory: TP4 prefill on one tray, TP4 decode on the other."""
    gv = {"glmops_model": "glm-5.3-flash", "glmops_engine": engine, "glmops_hardware": "gb200",
          "glmops_topology": "disagg", "glmops_runtime": "venv", "glmops_checkpoint": {"revision": REV},
          "glmops_topologies": {"disagg": {"pools": {"prefill": {"tp": 4, "hosts": ["tray-a"]},
                                                     "decode": {"tp": 4, "hosts": ["tray-b"]}}}}}
    if engine == "dynamo":
        gv["glmops_dynamo_backend"] = "vllm"
    gv.update(over)
    return gv


def validate(tmp_path, gv, hosts=TRAYS):
    """(plan, problems) without the ComputeDomain/MNNVL RECIPE_NOT_RENDERED warning every Dynamo
    GB200 plan carries and the seed 002 venv advice (tests/unit/test_compat_paths.py checks both):
    these tests are about the KV transport."""
    dep = load_deployment(write_inventory(tmp_path / "inv", gv, hosts=hosts))
    plan, problems = rules.validate(dep)
    return plan, [p for p in without_venv_advice(problems)
                  if not (p.code == "RECIPE_NOT_RENDERED" and "ComputeDomain" in p.message)]


def workers(plan):
    return [s for s in plan.services if s.role in ("prefill", "decode")]


@pytest.mark.parametrize("rdma", [None, ["mlx5_0", "mlx5_1"]])
def test_the_seed_001_gb200_tcp_path_needs_no_rdma_devices_and_renders_none(tmp_path, rdma):
    hosts = {h: {**v, **({"glmops_rdma_devices": rdma} if rdma else {})} for h, v in TRAYS.items()}
    plan, problems = validate(tmp_path, gb200_vllm_disagg(), hosts)
    assert problems == []
    assert len(workers(plan)) == 2
    for svc in workers(plan):
        assert svc.env["UCX_TLS"] == "cuda_copy,tcp"        # seed 001 (recipe dynamo-vllm-flash-gb200-disagg)
        assert "UCX_NET_DEVICES" not in svc.env, svc.env


def test_plain_vllm_with_a_tcp_ucx_tls_passes_and_without_it_f06_still_holds(tmp_path):
    plan, problems = validate(tmp_path / "tcp", gb200_vllm_disagg("vllm", glmops_env={"UCX_TLS": "cuda_copy,tcp"}))
    assert problems == []
    assert all("UCX_NET_DEVICES" not in s.env for s in workers(plan))
    _plan, problems = validate(tmp_path / "rdma", gb200_vllm_disagg("vllm"))
    assert [p.code for p in problems] == ["F06_RDMA_DEVICES"]
    _plan, problems = validate(tmp_path / "rc", gb200_vllm_disagg(glmops_env={"UCX_TLS": "rc,cuda_copy"}))
    assert [p.code for p in problems] == ["F06_RDMA_DEVICES"]


def test_a_ucx_net_devices_the_inventory_sets_is_kept_on_the_tcp_path(tmp_path):
    plan, problems = validate(tmp_path, gb200_vllm_disagg(glmops_env={"UCX_NET_DEVICES": "enP5p9s0"}))
    assert problems == []
    assert all(s.env["UCX_NET_DEVICES"] == "enP5p9s0" for s in workers(plan))


@pytest.mark.parametrize("tls,rdma", [(None, True), ("", True), ("^cuda_ipc", True), ("rc,cuda_copy", True),
                                      ("ib", True), ("all", True), ("cuda_copy,tcp", False), ("tcp", False),
                                      ("sm,cuda_copy,cuda_ipc,tcp", False)])
def test_ucx_uses_rdma(tls, rdma):
    from glmops.engines.base import ucx_uses_rdma

    assert ucx_uses_rdma(tls) is rdma
