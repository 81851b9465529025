"""A vLLM worker's flags, ports and env: what ``vllm serve`` and Dynamo's ``dynamo.vllm`` workers share.

Not an engine (no ``SPEC``): ``glmops.engines.vllm`` and ``glmops.engines.dynamo`` both build
workers from these pieces, so neither imports the other. Sources: see ``glmops.engines.vllm``.
"""
from __future__ import annotations

import json
from typing import Any

from glmops.engines import base
from glmops.engines.base import CATALOG, Ctx, Placement, Settings
from glmops.engines.problems import canon, pool_args, problem, src
from glmops.model import PoolSpec, Problem

ENGINE = "vllm"
CPU_ENTRY = "python -m vllm.entrypoints.openai.api_server"
# Dynamo's vLLM workers publish KV events for the KV router on this base (+1 per worker on a host).
KV_EVENTS_BASE = 20080
# KV roles per pool role (seed 002: NixlConnector kv_producer / kv_consumer).
KV_ROLE = {"prefill": "kv_producer", "decode": "kv_consumer", "agg": "kv_both"}

# Flags this module sets itself -> what sets them ({pool} = glmops_topologies.<topology>.pools.<role>,
# {router} = glmops_topologies.<topology>.router). glmops.rules refuses them in engine_args / router
# args (ENGINE_FLAG_OWNED): an override would break what the plan placed (GPUs, ports, ranks).
# tests/unit/test_engine_flags.py checks every flag rendered outside engine_args() is listed here.
WORKER_OWNED = {
    "model": "glmops_checkpoint (the snapshot's local directory)",
    "served-model-name": "glmops_served_model_name",
    "host": "the host's glmops_address (else ansible_host)",
    "port": "{pool}.port (the plan picks one per replica and host)",
    "tensor-parallel-size": "{pool}.tp",
    "pipeline-parallel-size": "{pool}.pp",
    "data-parallel-size": "{pool}.dp",
    "enable-expert-parallel": "{pool}.ep (> 1 turns expert parallelism on)",
    "nnodes": "the plan (nodes a replica spans: {pool}.tp x pp x dp over the hosts' GPUs)",
    "node-rank": "the plan (multi-node placement)",
    "master-addr": "the plan (the replica's head host)",
    "master-port": "the plan (dist-init port on the head host)",
    "headless": "the plan (followers of a multi-node replica)",
    "data-parallel-size-local": "the plan ({pool}.dp over the replica's nodes)",
    "data-parallel-address": "the plan (the replica's head host)",
    "data-parallel-rpc-port": "the plan (DP RPC port on the head host)",
    "data-parallel-start-rank": "the plan (multi-node placement)",
}


def is_cpu(ctx: Ctx) -> bool:
    """True for hardware without GPUs (the lab's ``cpu``): vLLM-CPU entry point, no NIXL."""
    return CATALOG.hardware(ctx.dep.hardware).get("vendor") in (None, "none")


def kv_transfer_config(ctx: Ctx, pool: PoolSpec, st: Settings, role_both: bool = False) -> dict[str, Any] | None:
    """``--kv-transfer-config`` for a disaggregated pool (None when aggregated).

    Connector from the recipe (seed 002: NixlConnector; lab: ExampleConnector with a
    ``shared_storage_path`` under the deployment's state dir). ``role_both`` gives
    ``kv_both`` on both pools (Dynamo's disagg launch example).
    """
    if ctx.dep.topology != "disagg" or pool.role == "agg":
        return None
    kt = dict(st.recipe.kv_transfer)
    cfg: dict[str, Any] = {"kv_connector": kt.pop("kv_connector", "NixlConnector")}
    cfg["kv_role"] = "kv_both" if (role_both or kt.pop("kv_role_both", False)) else KV_ROLE[pool.role]
    kt.pop("kv_role_both", None)
    extra = dict(kt.pop("kv_connector_extra_config", {}) or {})
    if cfg["kv_connector"] == "ExampleConnector" and "shared_storage_path" not in extra:
        extra["shared_storage_path"] = f"{ctx.dep.state_dir}/{ctx.dep.name}/kv-shared"
    cfg.update(kt)
    if extra:
        cfg["kv_connector_extra_config"] = extra
    return cfg


def speculative_config(st: Settings, dep: Any = None) -> dict[str, Any] | None:
    """Engine-neutral ``{method: mtp, num_speculative_tokens: N}`` -> vLLM JSON (same keys).

    A drafter with a checkpoint of its own (seed 004: ``{"method":"dspark","model":"RedHatAI/
    GLM-5.3-speculator.dspark","num_speculative_tokens":8}``): ``model`` becomes the snapshot
    directory ``glmops download`` puts it in (``Deployment.drafter``; units serve with
    HF_HUB_OFFLINE=1, F12) and ``revision`` is left out (the directory is that commit)."""
    if not st.speculative:
        return None
    spec = dict(st.speculative)
    spec["method"] = str(spec.get("method", "mtp")).lower()
    revision = spec.pop("revision", None)
    drafter = dep.drafter(spec["model"], revision) if dep is not None and isinstance(spec.get("model"), str) else None
    if drafter is not None:
        spec["model"] = drafter.local_dir
    return spec


#: flags of ``vllm serve`` that name a draft model (reference/serving-clis.md: ``--speculative-config``
#: / ``-sc`` JSON or dotted ``.model``, the shorthand ``--spec-model``)
_DRAFT_MODEL_FLAGS = ("--speculative-config", "-sc", "--speculative_config")


def draft_models(argv: list[str]) -> list[str]:
    """The draft model every speculative flag of a vLLM argv names (JSON ``model``, dotted
    ``--speculative-config.model``, ``--spec-model``), in argv order."""
    found: list[str] = []
    for i, word in enumerate(argv[:-1]):
        value = argv[i + 1]
        if word in _DRAFT_MODEL_FLAGS:
            try:
                cfg = json.loads(value)
            except ValueError:
                continue
            if isinstance(cfg, dict) and isinstance(cfg.get("model"), str):
                found.append(cfg["model"])
        elif word.replace("_", "-") in ("--speculative-config.model", "--spec-model", "-sc.model"):
            found.append(value)
    return found


def offline_draft_problems(plan: Any, dep: Any, engine: str = ENGINE) -> list[Problem]:
    """F12 for drafters (``EngineSpec.plan_rules``): a unit serving offline (HF_HUB_OFFLINE=1) whose
    argv names a draft model that is no directory (a hub id given through ``glmops_engine_args`` /
    pool ``engine_args``) would ask the hub at start: refused (code ``F12_HUB_ID``) naming the
    flag's inventory key and the variable that downloads the drafter instead."""
    out: list[Problem] = []
    if dep is None:
        return out
    for svc in plan.services:
        if svc.engine != engine or svc.env.get("HF_HUB_OFFLINE") != "1":
            continue
        pool = dep.pool(svc.role)
        if pool is None or not set(pool_args(dep, pool)) & {canon(k) for k in _ARGS_KEYS}:
            continue  # the draft model came from glmops_speculative: the speculative rules checked it
        for model in draft_models(svc.argv):
            if model.startswith("/"):
                continue
            keys = [f"{scope}engine_args.{k}" for scope in (f"pools.{svc.role}.", "") for k in _ARGS_KEYS]
            problem(out, "F12_HUB_ID", src(dep, *keys, "glmops_engine_args"),
                    f"the {svc.role} pool's draft model {model!r} is a hub id while its units serve offline "
                    "(HF_HUB_OFFLINE=1); accepted: glmops_speculative {method, model, revision} (glmops download "
                    "fetches it at that commit and the unit names its local snapshot) or a directory on the hosts",
                    "move the drafter from engine_args to glmops_speculative (seed 004 DSpark: {method: dspark, "
                    "revision: <40-hex commit>})")
    return out


#: engine_args keys that can carry a draft model (canonical and as written)
_ARGS_KEYS = ("speculative-config", "speculative_config", "speculative-config.model", "spec-model", "sc")


def engine_args(ctx: Ctx, pool: PoolSpec, pl: Placement, st: Settings, *, dynamo: bool = False) -> dict[str, Any]:
    """vLLM engine flags for one replica (no model, host, port or multi-node flags).

    Precedence (low -> high): derived from pool/settings, recipe args, ROCm args from the
    catalog, ``glmops_engine_args``, pool ``engine_args``.
    """
    dep = ctx.dep
    derived: dict[str, Any] = {"tensor-parallel-size": pool.tp}
    if pool.pp > 1:
        derived["pipeline-parallel-size"] = pool.pp
    if pool.dp > 1:
        derived["data-parallel-size"] = pool.dp
    if pool.ep > 1:
        derived["enable-expert-parallel"] = True
    kv = base.engine_kv_dtype(ENGINE, st.kv_cache_dtype)
    if kv != "auto":
        derived["kv-cache-dtype"] = kv
    derived.update(base.setting_flags(st, {"max_seq_len": "max-model-len", "max_batch_size": "max-num-seqs",
                                            "max_num_tokens": "max-num-batched-tokens"}))
    spec = speculative_config(st, dep)
    if spec:
        derived["speculative-config"] = spec
    if st.parsers:
        parsers = CATALOG.parsers(dep.model, "dynamo" if dynamo else ENGINE)
        prefix = "dyn-" if dynamo else ""
        if parsers.get("tool"):
            derived[f"{prefix}tool-call-parser"] = parsers["tool"]
            if not dynamo:
                derived["enable-auto-tool-choice"] = True
        if parsers.get("reasoning"):
            derived[f"{prefix}reasoning-parser"] = parsers["reasoning"]
    kvt = kv_transfer_config(ctx, pool, st, role_both=dynamo)
    if kvt:
        derived["kv-transfer-config"] = kvt
    rocm = {}
    if CATALOG.hardware(dep.hardware).get("vendor") == "amd":
        rocm = dict(CATALOG.engine(ENGINE).get("rocm_args") or {})
    recipe_args = dict(st.recipe.args)
    if not st.parsers:
        recipe_args.pop("enable-auto-tool-choice", None)
    if dynamo:
        # dynamo.vllm rejects vLLM's frontend flags (reference/serving-clis.md §4)
        recipe_args.pop("enable-auto-tool-choice", None)
    return base.merge_args(derived, recipe_args, rocm, dep.engine_args, pool.engine_args)


def multinode_args(ctx: Ctx, pool: PoolSpec, pl: Placement, rank: int, head_ports: dict[str, list[int]]) -> dict[str, Any]:
    """Multi-node launch flags for node ``rank`` (reference/serving-clis.md "Multi-node")."""
    if pl.nnodes == 1:
        return {}
    head = pl.head.host.address
    if pool.dp > 1:
        local = pool.dp // pl.nnodes
        args: dict[str, Any] = {
            "data-parallel-size-local": local,
            "data-parallel-address": head,
            "data-parallel-rpc-port": head_ports["dp_rpc"][0],
        }
        if rank:
            args["data-parallel-start-rank"] = rank * local
            args["headless"] = True
        return args
    args = {
        "nnodes": pl.nnodes,
        "node-rank": rank,
        "master-addr": head,
        "master-port": head_ports["dist_init"][0],
    }
    if rank:
        args["headless"] = True
    return args


def side_channel_count(pool: PoolSpec, pl: Placement) -> int:
    """NIXL side-channel ports per node: one per local DP rank (vLLM >= 0.29
    ``nixl/base_scheduler.py``: base + DP index; reference/serving-clis.md)."""
    return max(1, pool.dp // max(1, pl.nnodes))


def node_ports(ctx: Ctx, pool: PoolSpec, pl: Placement, rank: int, st: Settings, http_want: int | None,
               kv_events: bool = False, http: bool = True) -> dict[str, list[int]]:
    """Allocate this node's ports (HTTP, NIXL side channel per DP rank, dist-init on the head)."""
    host = pl.nodes[rank].host
    alloc = ctx.alloc(host.name)
    ports: dict[str, list[int]] = {}
    if http and (rank == 0):
        ports["http"] = alloc.take(base.PORT_BASES["http"], 1, want=http_want)
    if ctx.dep.topology == "disagg" and pool.role != "agg" and not is_cpu(ctx):
        env = {**ctx.dep.env, **pool.env}
        want = env.get("VLLM_NIXL_SIDE_CHANNEL_PORT")
        default = (st.recipe.settings.get("ports") or {}).get("nixl_side_channel") or \
            (CATALOG.engine(ENGINE).get("ports") or {}).get("nixl_side_channel", 5600)
        ports["nixl_side_channel"] = alloc.take(int(default), side_channel_count(pool, pl),
                                                want=int(want) if want else None)
    if kv_events:
        ports["kv_events"] = alloc.take(KV_EVENTS_BASE, side_channel_count(pool, pl))
    if pl.nnodes > 1 and rank == 0:
        if pool.dp > 1:
            ports["dp_rpc"] = alloc.take(base.PORT_BASES["dp_rpc"])
        else:
            ports["dist_init"] = alloc.take(base.PORT_BASES["dist_init"])
    return ports


def worker_env(ctx: Ctx, pool: PoolSpec, pl: Placement, rank: int, st: Settings,
               ports: dict[str, list[int]], engine_key: str = ENGINE) -> dict[str, str]:
    """Env for one vLLM node: devices, disagg layout pins (identical on both pools,
    F01/F04), NIXL side channel host/port (own address, F05), UCX NIC (F06), offline (F12)."""
    dep = ctx.dep
    node = pl.nodes[rank]
    env: dict[str, str] = {}
    env.update(base.visible_devices(dep, node.gpus))
    eng = CATALOG.engine(ENGINE)
    disagg = dep.topology == "disagg" and pool.role != "agg"
    if disagg and not is_cpu(ctx):
        env.update({k: str(v) for k, v in (eng.get("disagg_env") or {}).items()})
        env.update(base.transport_env(dep, [node.host], ("UCX_", "NIXL_")))
    if "nixl_side_channel" in ports:
        env["VLLM_NIXL_SIDE_CHANNEL_HOST"] = node.host.address
        env["VLLM_NIXL_SIDE_CHANNEL_PORT"] = str(ports["nixl_side_channel"][0])
    if pl.nnodes > 1:
        env["VLLM_HOST_IP"] = node.host.address
    env.update(base.base_env(dep, pool, st.recipe, ENGINE))
    if engine_key != ENGINE:
        env.update({k: str(v) for k, v in (CATALOG.engine(engine_key).get("env") or {}).items()})
    # the side channel must advertise this node's own address even if env overrides gave a port
    if "nixl_side_channel" in ports:
        env["VLLM_NIXL_SIDE_CHANNEL_HOST"] = node.host.address
    return base.without_rdma_devices(env, dep, pool) if disagg else env
