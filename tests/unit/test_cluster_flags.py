"""Issue 14 item 4 / field case F18: multi-node launch stays glmops's own. An engine flag that hands
the launch to a cluster glmops does not set up is refused naming the flag (rule CLUSTER_LAUNCHER,
catalog ``engines.<engine>.cluster_flags``); without it the multi-node flags are rendered as before.

Sources: /work/shared/cases/field-cases.md F18 ("vllm, `agg: {tp: 8, dp: 2, ep: 16}` over two hosts,
plus engine_args `distributed-executor-backend: ray` ... validate fails naming the flag ... without it
the head address, start rank and `--headless` are rendered as today"); reference/serving-clis.md
(vLLM 0.33.0 `--distributed-executor-backend mp, ray, uni, external_launcher`, `--data-parallel-backend
mp | ray`); reference/option-lists/sglang-0.5.23-serve.txt (`--use-ray`).
"""
from __future__ import annotations

import pytest
from click.testing import CliRunner
from inventory_factory import REV, write_inventory

from glmops import plan, rules
from glmops.cli import main
from glmops.inventory import load_deployment

HOSTS = {"gpu-a": {"ansible_host": "10.0.0.11"}, "gpu-b": {"ansible_host": "10.0.0.12"}}


def f18(engine: str = "vllm", args: dict | None = None, **over) -> dict:
    gv = {"glmops_model": "glm-5.3-flash", "glmops_variant": "fp8", "glmops_engine": engine,
          "glmops_hardware": "b200", "glmops_topology": "agg", "glmops_runtime": "venv",
          "glmops_checkpoint": {"revision": REV},
          "glmops_topologies": {"agg": {"pools": {"agg": {"tp": 8, "dp": 2, "ep": 16}}}}}
    if args:
        gv["glmops_engine_args"] = args
    gv.update(over)
    return gv


@pytest.mark.parametrize("engine,extra,key,value", [
    ("vllm", {}, "distributed-executor-backend", "ray"),
    ("vllm", {}, "distributed_executor_backend", "external_launcher"),
    ("vllm", {}, "data-parallel-backend", "ray"),
    ("dynamo", {"glmops_dynamo_backend": "vllm"}, "distributed-executor-backend", "ray"),
    ("sglang", {}, "use-ray", True),
])
def test_f18_cluster_executor_is_refused_naming_the_flag(tmp_path, engine, extra, key, value):
    inv = write_inventory(tmp_path / "inv", f18(engine, {key: value}, **extra), hosts=HOSTS)
    res = CliRunner().invoke(main, ["validate", "-i", str(inv)])
    assert res.exit_code == 2, res.output
    (line,) = [ln for ln in res.output.splitlines() if "[CLUSTER_LAUNCHER]" in ln]
    assert f"glmops_engine_args.{key}:" in line and f"{key!r} = {value!r}" in line
    assert "accepted:" in line


def test_f18_pool_level_flag_is_refused_too(tmp_path):
    gv = f18()
    gv["glmops_topologies"]["agg"]["pools"]["agg"]["engine_args"] = {"distributed-executor-backend": "ray"}
    (p,) = [p for p in rules.check(load_deployment(write_inventory(tmp_path / "inv", gv, hosts=HOSTS)))
            if p.code == "CLUSTER_LAUNCHER"]
    assert p.path.endswith("pools.agg.engine_args.distributed-executor-backend")
    assert "'mp'" not in p.message and "mp, uni" in p.message   # what vLLM's own launch takes


def test_f18_without_the_flag_multi_node_is_rendered_as_today(tmp_path):
    dep = load_deployment(write_inventory(tmp_path / "inv", f18(), hosts=HOSTS))
    assert not [p for p in rules.check(dep) if p.code == "CLUSTER_LAUNCHER"]
    p = plan.build(dep)
    head, follower = sorted((s for s in p.services if s.role == "agg"), key=lambda s: s.node_rank)
    # serving-clis.md DP/wide-EP: "head -dp N -dpl n -dpa HEAD -dpp PORT; others same + -dpr k --headless"
    f = follower.argv
    assert f[f.index("--data-parallel-address") + 1] == "10.0.0.11"     # the head's address
    assert f[f.index("--data-parallel-start-rank") + 1] == "1" and f[-1] == "--headless"
    assert "--headless" not in head.argv and "--data-parallel-start-rank" not in head.argv


def test_mp_is_accepted(tmp_path):
    dep = load_deployment(write_inventory(tmp_path / "inv", f18(args={"distributed-executor-backend": "mp"}),
                                          hosts=HOSTS))
    assert not [p for p in rules.check(dep) if p.code == "CLUSTER_LAUNCHER"]
