#!/usr/bin/env python3
"""Strict ``trtllm-serve`` double (TensorRT-LLM 1.3.0rc29 as seed 000 runs it).

Sources: /work/shared/reference/trtllm-serve.md (Click options of the S4 ``serve.py`` era,
``disaggregated`` options, the disagg YAML keys of ``disagg_utils.extract_disagg_cfg``, the
LLM-API (``TorchLlmArgs``) YAML keys and nested configs, health and routes) and
/work/shared/seeds/000_02b3db4c668ba297.txt (the aggregated command, the disagg config, the
``--config`` YAML keys it documents). Nothing here is copied from TensorRT-LLM.

Install: needs ``engine_http_double.py`` next to it (see that file's ``install``), then
``ln -s /opt/glmops-doubles/trtllm_serve_double.py /usr/local/bin/trtllm-serve``.

Accepted command lines (everything else: Click's ``Error: No such option: ...`` exit 2)
------------------------------------------------------------------------------------
* ``trtllm-serve [serve] MODEL [OPTIONS]``: options in :data:`SERVE_OPTIONS`. Snake-case as
  declared; dashed spellings are rejected (``--tp-size`` -> ``No such option``).
* ``trtllm-serve disaggregated -c disagg_config.yaml [OPTIONS]``: :data:`DISAGG_OPTIONS`.
* Other real subcommands (``disaggregated_mpi_worker``, ``mm_embedding_serve``,
  ``embeddings``, ``rerank``) exit 2 naming themselves as not implemented by the double.

``--config`` YAML: only the keys of :data:`LLM_ARGS` / :data:`NESTED` (reference §3 + seed
000); an unknown key ends the process with pydantic's error (traceback, exit 1)::

    pydantic_core._pydantic_core.ValidationError: 1 validation error for TorchLlmArgs
    kv_cache_dtype
      Extra inputs are not permitted [type=extra_forbidden, input_value='fp8', input_type=str]

Nested configs are validated first and named by their own class (``KvCacheConfig`` ...).

Runtime behaviour
-----------------
* Loading: ``DOUBLE_LOADING_REFUSE_S`` (connection refused, the real S4 behaviour), then
  ``DOUBLE_LOADING_503_S`` (503 with ``X-TRTLLM-Server-State: starting``), then ``/health``
  200 with an empty body.
* Routes: GET ``/health``, ``/health_generate``, ``/version``, ``/v1/models``, ``/metrics``
  (JSON list of iteration stats; filled only with ``enable_iter_perf_stats: true``; with a
  ``speculative_config`` each entry has ``specDecodingStats`` incl. ``acceptanceLength``),
  ``/prometheus/metrics`` (Prometheus text, only with ``return_perf_metrics: true``),
  ``/perf_metrics`` (with ``return_perf_metrics: true``: one entry per request since the last
  read, handed out once, ``{request_id, ctx_request_id, perf_metrics: {timing_metrics}}``; a
  generation_only request's timing has ``kv_cache_transfer_start``/``_end`` and
  ``kv_cache_size`` > 0, the shape of TensorRT-LLM's RequestPerfMetrics.TimingMetrics and
  openai_server.py get_perf_metrics; no KV-transfer counter in Prometheus, as upstream),
  ``/server_info``; POST ``/v1/completions``, ``/v1/chat/completions`` (``stream`` = SSE).
* Chat: ``--reasoning_parser`` -> ``reasoning_content``; ``--tool_parser`` + tools with
  ``tool_choice: auto`` -> ``tool_calls`` / finish ``tool_calls``; ``tool_choice``
  ``required`` or a named function -> 400 (seed 000: not supported); ``response_format``
  json_schema -> JSON content matching the schema.
* Disaggregated worker: a request with ``disaggregated_params.request_type:
  context_only`` needs ``cache_transceiver_config`` in the worker YAML; it returns the first
  token and ``disaggregated_params`` (``ctx_request_id``, ``encoded_opaque_state``). A
  ``generation_only`` request pulls that KV from the context worker (HTTP to its
  ``/_double/kv/<id>``) and fails if it is absent or the transceiver backend / runtime /
  KV dtype / tokens_per_block differ between the two workers.
* Orchestrator: polls the workers' ``/health`` for up to ``-t`` seconds (its own ``/health``
  is 500 and requests get 400 ``Cluster is not ready`` meanwhile; exit 1 on timeout), then
  sends each request to a context server first and to a generation server with the
  context's ``disaggregated_params``, returning the generation answer. Each routing decision
  is logged (``DOUBLE_REQUEST_LOG`` and ``GET /_double/state``).
* ``DOUBLE_FAULT`` (see engine_http_double.FAULTS), e.g. ``no_tool_calls``.
* ``DOUBLE_DRY_RUN=1``: validate, print the parsed options/config as JSON, exit 0 (tests
  use it to check seed commands verbatim). ``DOUBLE_SKIP_MODEL_CHECK=1``: do not require a
  local MODEL path to exist.
* GPUs: when an ``nvidia-smi`` is on PATH (the lab's nvidia-smi double), the GPUs it lists
  (filtered by ``CUDA_VISIBLE_DEVICES``) must cover tp x pp x cp, else exit 1
  (``No GPU devices found on the node`` with none).
"""
from __future__ import annotations

import base64
import difflib
import itertools
import json
import os
import shutil
import subprocess
import sys
import threading
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.realpath(__file__)))
from engine_http_double import (EngineServer, OpenAIBehaviour, http_json, http_stream,  # noqa: E402
                                load_yaml, prometheus_text, wait_healthy)

PROG = "trtllm-serve"
VERSION = "1.3.0rc29"

LOG_LEVELS = ["internal_error", "error", "warning", "info", "verbose", "debug", "trace"]
REASONING_PARSERS = ["auto", "deepseek-r1", "deepseek_v4", "gemma4", "kimi_k2", "kimi_k25", "laguna",
                     "minimax_m2", "minimax_m2_append_think", "minimax_m3", "nano-v3",
                     "nemotron-v3", "qwen3", "qwen3_5"]
TOOL_PARSERS = ["auto", "deepseek_v3", "deepseek_v31", "deepseek_v32", "deepseek_v4", "gemma4",
                "glm4", "glm47", "kimi_k2", "minimax_m2", "minimax_m3", "poolside_v1", "qwen3",
                "qwen3_coder"]


def _opt(names, kind="str", default=None, choices=None, multiple=False, dest=None):
    return {"names": names, "kind": kind, "default": default, "choices": choices,
            "multiple": multiple,
            "dest": dest or next(n for n in names if n.startswith("--")).lstrip("-")
            .split("/")[0].replace("-", "_")}


#: ``trtllm-serve serve`` options (reference §1, S4 column). kind: str|int|float|flag|bool.
SERVE_OPTIONS = [
    _opt(["--tokenizer"]), _opt(["--custom_tokenizer"]),
    _opt(["--host"], default="localhost"), _opt(["--port"], "int", 8000),
    _opt(["--backend"], choices=["pytorch", "_autodeploy"], default="pytorch"),
    _opt(["--log_level"], choices=LOG_LEVELS, default="info"),
    _opt(["--max_beam_width"], "int", 1), _opt(["--max_batch_size"], "int", 2048),
    _opt(["--max_num_tokens"], "int", 8192), _opt(["--max_seq_len"], "int"),
    _opt(["--tensor_parallel_size", "--tp_size"], "int", 1, dest="tp_size"),
    _opt(["--pipeline_parallel_size", "--pp_size"], "int", 1, dest="pp_size"),
    _opt(["--context_parallel_size", "--cp_size"], "int", 1, dest="cp_size"),
    _opt(["--moe_expert_parallel_size", "--ep_size"], "int", dest="ep_size"),
    _opt(["--moe_cluster_parallel_size", "--cluster_size"], "int", dest="cluster_size"),
    _opt(["--gpus_per_node"], "int"),
    _opt(["--free_gpu_memory_fraction", "--kv_cache_free_gpu_memory_fraction"], "float", 0.9,
         dest="free_gpu_memory_fraction"),
    _opt(["--kv_cache_dtype"], choices=["auto", "fp8", "nvfp4"], default="auto"),
    _opt(["--num_postprocess_workers"], "int", 0),
    _opt(["--trust_remote_code"], "flag"), _opt(["--enable_chunked_prefill"], "flag"),
    _opt(["--enable_attention_dp"], "flag"),
    _opt(["--hf_revision", "--revision"], dest="revision"),
    _opt(["--config", "--extra_llm_api_options"], dest="config"),
    _opt(["--reasoning_parser"], choices=REASONING_PARSERS),
    _opt(["--tool_parser"], choices=TOOL_PARSERS),
    _opt(["--server_role"], choices=["CONTEXT", "GENERATION", "MM_ENCODER", "VISUAL_GEN",
                                     "EMBEDDING"]),
    _opt(["--metadata_server_config_file"]), _opt(["--disagg_cluster_uri"]),
    _opt(["--served_model_name"]), _opt(["--chat_template"]),
    _opt(["--allow_request_chat_template"], "flag"), _opt(["--media_io_kwargs"]),
    _opt(["--middleware"], multiple=True), _opt(["--custom_module_dirs"], multiple=True),
    _opt(["--otlp_traces_endpoint"]), _opt(["--grpc"], "flag"),
    _opt(["--telemetry/--no-telemetry"], "bool", True, dest="telemetry"),
    _opt(["--visual_gen_args"]), _opt(["--enable_visual_gen"], "flag"),
    _opt(["--generation-config"], choices=["auto", "trtllm"]),
    _opt(["--grpc-protocol"], choices=["smg", "openengine"]),
    _opt(["--num_serve_frontends"], "int"), _opt(["--report_addr"]),
    _opt(["--num_input_processor_workers"], "int"), _opt(["--num_media_load_workers"], "int"),
]

#: ``trtllm-serve disaggregated`` options (reference §2, S3+S4).
DISAGG_OPTIONS = [
    _opt(["-c", "--config_file", "--config"], dest="config_file"),
    _opt(["-m", "--metadata_server_config_file"]),
    _opt(["-t", "--server_start_timeout"], "int", 180),
    _opt(["-r", "--request_timeout"], "int", 180),
    _opt(["-l", "--log_level"], choices=LOG_LEVELS, default="info"),
    _opt(["--metrics-log-interval"], "int", 0),
    _opt(["-s", "--schedule_style"], choices=["context_first", "generation_first"],
         default="context_first"),
    _opt(["--telemetry/--no-telemetry"], "bool", True, dest="telemetry"),
    _opt(["--report_addr"]),
]
SUBCOMMANDS = ["serve", "disaggregated", "disaggregated_mpi_worker", "mm_embedding_serve",
               "embeddings", "rerank"]


class ClickError(Exception):
    """A Click usage error: printed with the usage header, exit 2."""

    def __init__(self, usage: str, message: str):
        super().__init__(message)
        self.usage = usage


def parse_click(argv: list[str], options: list[dict], usage: str, positional: list[str]) -> dict:
    """Parse like a Click command: long ``--opt value`` / ``--opt=value``, short ``-c value`` /
    ``-cvalue``; no prefix matching. Returns dest -> value plus positionals."""
    table: dict[str, tuple[dict, object]] = {}
    for o in options:
        for n in o["names"]:
            if "/" in n:
                on, off = n.split("/")
                table[on], table[off] = (o, True), (o, False)
            else:
                table[n] = (o, None)
    values = {o["dest"]: ([] if o["multiple"] else o["default"]) for o in options}
    pos: list[str] = []
    args = list(argv)
    while args:
        a = args.pop(0)
        if a == "--":
            pos += args
            break
        if a.startswith("-") and a != "-":
            name, eq, val = a.partition("=") if a.startswith("--") else (a, "", "")
            if not a.startswith("--") and len(a) > 2:
                name, val, eq = a[:2], a[2:], "="
            if name not in table:
                close = difflib.get_close_matches(name, list(table))
                msg = f"No such option: {name}"
                if len(close) == 1:
                    msg += f" Did you mean {close[0]}?"
                elif close:
                    msg += f" (Possible options: {', '.join(sorted(close))})"
                raise ClickError(usage, msg)
            o, const = table[name]
            if o["kind"] in ("flag", "bool"):
                if eq:
                    raise ClickError(usage, f"Option '{name}' does not take a value.")
                values[o["dest"]] = True if o["kind"] == "flag" else const
                continue
            if not eq:
                if not args:
                    raise ClickError(usage, f"Option '{name}' requires an argument.")
                val = args.pop(0)
            label = "' / '".join(o["names"])
            if o["kind"] == "int":
                try:
                    val = int(val)
                except ValueError:
                    raise ClickError(usage, f"Invalid value for '{label}': '{val}' is not a valid integer.")
            elif o["kind"] == "float":
                try:
                    val = float(val)
                except ValueError:
                    raise ClickError(usage, f"Invalid value for '{label}': '{val}' is not a valid float.")
            if o["choices"] and val not in o["choices"]:
                opts = ", ".join(f"'{c}'" for c in o["choices"])
                raise ClickError(usage, f"Invalid value for '{label}': '{val}' is not one of {opts}.")
            if o["multiple"]:
                values[o["dest"]].append(val)
            else:
                values[o["dest"]] = val
        else:
            pos.append(a)
    if len(pos) < len(positional):
        raise ClickError(usage, f"Missing argument '{positional[len(pos)]}'.")
    if len(pos) > len(positional):
        extra = pos[len(positional):]
        word = "argument" if len(extra) == 1 else "arguments"
        raise ClickError(usage, f"Got unexpected extra {word} ({' '.join(extra)})")
    for name, v in zip(positional, pos):
        values[name.lower()] = v
    return values


# ============================================================================ LLM-API YAML
ENUM = "enum"

#: Nested config classes: key -> (class name, {field: type}); types: int, float, bool, str,
#: dict (unchecked), ("enum", [...]), or another nested key.
NESTED = {
    "kv_cache_config": ("KvCacheConfig", {
        "enable_block_reuse": bool, "free_gpu_memory_fraction": float, "dtype": str,
        "tokens_per_block": int, "max_tokens": int, "host_cache_size": int,
        "enable_partial_reuse": bool, "event_buffer_max_size": int,
        "mamba_ssm_cache_dtype": (ENUM, ["auto", "float16", "bfloat16", "float32"]),
        "mamba_ssm_stochastic_rounding": bool, "mamba_ssm_philox_rounds": int,
        "mamba_state_cache_interval": int, "mamba_state_config": "mamba_state_config"}),
    "mamba_state_config": ("MambaStateConfig", {"periodic_snapshot_interval": int}),
    "cuda_graph_config": ("CudaGraphConfig", {
        "batch_sizes": list, "max_batch_size": int, "enable_padding": bool}),
    "moe_config": ("MoeConfig", {"backend": (ENUM, [
        "AUTO", "CUTLASS", "CUTEDSL", "WIDEEP", "TRTLLM", "DEEPGEMM", "VANILLA", "TRITON",
        "DENSEGEMM", "MARLIN", "MEGAMOE_DEEPGEMM"])}),
    "speculative_config": ("DecodingConfig", {
        "decoding_type": str, "max_draft_len": int, "speculative_model": str,
        "num_nextn_predict_layers": int}),
    "cache_transceiver_config": ("CacheTransceiverConfig", {
        "backend": (ENUM, ["DEFAULT", "UCX", "NIXL", "MOONCAKE", "MPI", None]),
        "transceiver_runtime": (ENUM, ["CPP", "PYTHON", None]),
        "max_tokens_in_buffer": int, "kv_transfer_timeout_ms": int}),
}
DECODING_TYPES = {"MTP": "MTPDecodingConfig", "Eagle3": "Eagle3DecodingConfig",
                  "Eagle": "Eagle3DecodingConfig", "NGram": "NGramDecodingConfig",
                  "Draft_Target": "DraftTargetDecodingConfig", "PARD": "PARDDecodingConfig",
                  "AUTO": "AutoDecodingConfig", "SaveState": "SaveHiddenStatesDecodingConfig",
                  "User_Provided": "UserProvidedDecodingConfig"}

#: Top-level TorchLlmArgs keys (reference §3 table; ``backend`` from §2).
LLM_ARGS = {
    "tokenizer": str, "custom_tokenizer": str, "trust_remote_code": bool, "dtype": str,
    "revision": str, "model_kwargs": dict, "load_format": str, "backend": str,
    "tensor_parallel_size": int, "pipeline_parallel_size": int, "context_parallel_size": int,
    "moe_expert_parallel_size": int, "gpus_per_node": int, "enable_attention_dp": bool,
    "attention_dp_config": dict, "cp_config": dict,
    "max_batch_size": int, "max_num_tokens": int, "max_seq_len": int, "max_input_len": int,
    "max_beam_width": int,
    "kv_cache_config": "kv_cache_config", "enable_chunked_prefill": bool,
    "cuda_graph_config": "cuda_graph_config", "disable_overlap_scheduler": bool,
    "moe_config": "moe_config", "speculative_config": "speculative_config",
    "cache_transceiver_config": "cache_transceiver_config", "scheduler_config": dict,
    "print_iter_log": bool, "enable_iter_perf_stats": bool, "return_perf_metrics": bool,
    "stream_interval": int, "sampler_type": str, "guided_decoding_backend": str,
    "reasoning_parser": str, "lora_config": dict,
}


class PydanticError(Exception):
    """Rendered like pydantic_core's ValidationError."""

    def __init__(self, cls: str, errors: list[tuple[str, str, str, object]]):
        self.cls, self.errors = cls, errors
        n = len(errors)
        lines = [f"{n} validation error{'s' if n != 1 else ''} for {cls}"]
        for loc, msg, typ, value in errors:
            lines.append(loc)
            lines.append(f"  {msg} [type={typ}, input_value={value!r}, "
                         f"input_type={type(value).__name__}]")
            lines.append(f"    For further information visit https://errors.pydantic.dev/2.11/v/{typ}")
        super().__init__("\n".join(lines))


def _check_value(loc: str, typ, value, errors: list) -> None:
    if isinstance(typ, tuple) and typ[0] == ENUM:
        if value not in typ[1]:
            opts = ", ".join(repr(c) for c in typ[1] if c is not None)
            errors.append((loc, f"Input should be {opts}", "enum", value))
    elif typ is bool:
        if not isinstance(value, bool) and value not in (0, 1, "true", "false", "True", "False"):
            errors.append((loc, "Input should be a valid boolean, unable to interpret input",
                           "bool_parsing", value))
    elif typ is int:
        ok = isinstance(value, int) and not isinstance(value, bool) or (
            isinstance(value, str) and value.strip().lstrip("-").isdigit()) or (
            isinstance(value, float) and value.is_integer())
        if value is not None and not ok:
            errors.append((loc, "Input should be a valid integer, unable to parse string as an "
                           "integer" if isinstance(value, str) else "Input should be a valid integer",
                           "int_parsing" if isinstance(value, str) else "int_type", value))
    elif typ is float:
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            try:
                float(value)
            except (TypeError, ValueError):
                errors.append((loc, "Input should be a valid number, unable to parse string as a "
                               "number", "float_parsing", value))
    elif typ is list:
        if value is not None and not isinstance(value, list):
            errors.append((loc, "Input should be a valid list", "list_type", value))
    elif typ is dict:
        if value is not None and not isinstance(value, dict):
            errors.append((loc, "Input should be a valid dictionary", "dict_type", value))
    elif typ is str:
        if value is not None and not isinstance(value, str):
            errors.append((loc, "Input should be a valid string", "string_type", value))


def _validate_nested(key: str, value, prefix: str = "") -> list:
    cls, fields = NESTED[key]
    errors: list = []
    if not isinstance(value, dict):
        errors.append((prefix.rstrip(".") or key, f"Input should be a valid dictionary or instance "
                       f"of {cls}", "model_type", value))
        return errors
    if key == "speculative_config":
        dt = value.get("decoding_type")
        if dt not in DECODING_TYPES:
            tags = ", ".join(f"'{t}'" for t in DECODING_TYPES)
            errors.append(("decoding_type" if dt is None else str(dt),
                           f"Input tag {dt!r} found using 'decoding_type' does not match any of "
                           f"the expected tags: {tags}", "union_tag_invalid", value))
            return errors
    for k, v in value.items():
        if k not in fields:
            errors.append((prefix + k, "Extra inputs are not permitted", "extra_forbidden", v))
        elif isinstance(fields[k], str):
            if v is not None:
                errors += _validate_nested(fields[k], v, prefix + k + ".")
        else:
            _check_value(prefix + k, fields[k], v, errors)
    if key == "cuda_graph_config" and not errors:
        bs, mbs = value.get("batch_sizes"), value.get("max_batch_size")
        if bs and mbs and mbs != max(bs):
            errors.append(("", f"Value error, max_batch_size ({mbs}) must equal max(batch_sizes) "
                           f"({max(bs)})", "value_error", value))
    return errors


def validate_llm_args(cfg) -> dict:
    """Validate an LLM-API YAML mapping like ``TorchLlmArgs``; raise PydanticError/ValueError."""
    if cfg is None:
        return {}
    if not isinstance(cfg, dict):
        raise ValueError(f"The LLM API options file must contain a YAML mapping, got "
                         f"{type(cfg).__name__}")
    for key, value in cfg.items():  # pre-built nested configs fail first, named by their class
        if isinstance(LLM_ARGS.get(key), str) and value is not None:
            errs = _validate_nested(key, value)
            if errs:
                cls = NESTED[key][0]
                if key == "speculative_config" and value.get("decoding_type") in DECODING_TYPES:
                    cls = DECODING_TYPES[value["decoding_type"]]
                raise PydanticError(cls, errs)
    errors: list = []
    for key, value in cfg.items():
        if key not in LLM_ARGS:
            errors.append((key, "Extra inputs are not permitted", "extra_forbidden", value))
        elif not isinstance(LLM_ARGS[key], str):
            _check_value(key, LLM_ARGS[key], value, errors)
    if errors:
        raise PydanticError("TorchLlmArgs", errors)
    return cfg


# ============================================================================ disagg YAML
DISAGG_TOP = {"hostname", "port", "max_retries", "perf_metrics_max_requests",
              "conditional_disagg_config", "otlp_config", "disagg_cluster", "node_id",
              "schedule_style", "allow_request_chat_template", "num_workers",
              "disagg_coordinator_url", "context_servers", "generation_servers"}
DISAGG_CLUSTER_KEYS = {"cluster_uri", "cluster_name", "minimal_instances", "heartbeat_interval_sec",
                       "inactive_timeout_sec"}
ROUTER_TYPES = ["round_robin", "load_balancing", "kv_cache_aware", "conversation"]


def parse_disagg_config(cfg) -> dict:
    """Check a disagg_config.yaml like ``extract_disagg_cfg``; return
    ``{"hostname", "port", "ctx": [(host, port)], "gen": [...], "router": {...}}``."""
    if not isinstance(cfg, dict):
        raise ValueError("disaggregated config must be a YAML mapping")
    if "disagg_cluster" in cfg:
        extra = set(cfg["disagg_cluster"] or {}) - DISAGG_CLUSTER_KEYS
        if extra:
            raise KeyError(sorted(extra)[0])
        raise NotImplementedError("trtllm-serve double: disagg_cluster (dynamic discovery) is "
                                  "not implemented")
    passthrough = {k: v for k, v in cfg.items() if k not in DISAGG_TOP}
    out = {"hostname": cfg.get("hostname", "localhost"), "port": int(cfg.get("port", 8000)),
           "schedule_style": cfg.get("schedule_style", "context_first")}
    for section, short in (("context_servers", "ctx"), ("generation_servers", "gen")):
        sec = cfg.get(section)
        if not sec:
            raise ValueError(f"At least one {section.replace('_servers', '')} server is required "
                             f"('{section}' is missing or empty)")
        for k, v in passthrough.items():
            if k in sec and sec[k] != v:
                raise ValueError(f"{k} is set to {v!r} at top level and to {sec[k]!r} in {section}")
        n = int(sec.get("num_instances", 1))
        urls = sec.get("urls") or []
        if len(urls) != n:
            raise ValueError(f"Number of {section} URLs ({len(urls)}) does not match "
                             f"num_instances ({n})")
        hosts = []
        for u in urls:
            host, port = str(u).split(":")  # like the real parser: a scheme breaks it
            hosts.append((host, int(port)))
        rtype = (sec.get("router") or {}).get("type", "round_robin")
        if rtype not in ROUTER_TYPES:
            raise ValueError(f"Unsupported router type: {rtype} (supported: {', '.join(ROUTER_TYPES)})")
        out[short] = hosts
    return out


# ============================================================================ GPU check
def check_gpus(world: int) -> None:
    """Fail like TRT-LLM when the node has no (or too few) GPUs; skipped without nvidia-smi."""
    smi = shutil.which("nvidia-smi")
    if smi is None or os.environ.get("OMPI_COMM_WORLD_SIZE"):
        return
    r = subprocess.run([smi, "--query-gpu=index", "--format=csv,noheader"], capture_output=True,
                       text=True, timeout=30)
    idx = [ln.strip() for ln in r.stdout.splitlines() if ln.strip()] if r.returncode == 0 else []
    vis = os.environ.get("CUDA_VISIBLE_DEVICES")
    if vis is not None:
        idx = [i for i in idx if i in {v.strip() for v in vis.split(",") if v.strip()}]
    if not idx:
        raise ValueError("No GPU devices found on the node")
    if world > len(idx):
        raise RuntimeError(f"world size {world} (tp x pp x cp) exceeds the {len(idx)} GPUs "
                           f"visible on this node (CUDA_VISIBLE_DEVICES={vis!r})")


# ============================================================================ worker
class TrtllmWorker(EngineServer):
    """``trtllm-serve MODEL``: one aggregated, context or generation worker."""

    name = "trtllm-serve"

    def __init__(self, opts: dict, llm_args: dict):
        super().__init__(opts["host"], opts["port"])
        self.opts, self.llm_args = opts, llm_args
        model = opts["model"]
        served = opts["served_model_name"] or (os.path.basename(model.rstrip("/"))
                                               if os.path.isdir(model) else model)
        reasoning = bool(opts["reasoning_parser"] or llm_args.get("reasoning_parser"))
        self.behaviour = OpenAIBehaviour(served, reasoning, bool(opts["tool_parser"]),
                                         tool_choice_modes=("auto", "none"), faults=self.faults)
        self.model_id = served
        self.ctx_ids = itertools.count(1)
        self.kv_held: dict[int, dict] = {}
        self.iter_stats: list[dict] = []
        self.perf: list[dict] = []
        self.request_ids = itertools.count(1)
        self.iteration = 0
        self.transceiver = llm_args.get("cache_transceiver_config")
        kv = llm_args.get("kv_cache_config") or {}
        self.layout = {"backend": (self.transceiver or {}).get("backend"),
                       "transceiver_runtime": (self.transceiver or {}).get("transceiver_runtime"),
                       "kv_dtype": kv.get("dtype", "auto") if opts["kv_cache_dtype"] == "auto"
                       else opts["kv_cache_dtype"],
                       "tokens_per_block": kv.get("tokens_per_block", 32)}
        self.spec = llm_args.get("speculative_config")
        self.acceptance = float(os.environ.get("DOUBLE_MTP_ACCEPTANCE", "2.5"))

    def on_faults(self, faults):
        self.behaviour.faults = set(faults)

    # ------------------------------------------------------------------ routes
    def route(self, h, method, path):
        if not self.ready.is_set():
            if path == "/health" and method == "GET":
                return h.send_bytes(503, b"", headers={"X-TRTLLM-Server-State": "starting"})
            return h.send_json(503, {"detail": "Service Unavailable"},
                               {"X-TRTLLM-Server-State": "starting"})
        if method == "GET" and path.startswith("/_double/kv/"):
            return self._kv_pull(h, path)
        if method == "GET":
            if path == "/health":
                if "health_503" in self.faults:
                    return h.send_bytes(503, b"LLM is unavailable. Please check the server logs.")
                return h.send_bytes(200, b"")
            if path == "/health_generate":
                return h.send_bytes(200, b"")
            if path == "/version":
                return h.send_json(200, {"version": VERSION})
            if path == "/v1/models":
                return h.send_json(200, {"object": "list", "data": [
                    {"id": self.model_id, "object": "model", "created": int(time.time()),
                     "owned_by": "tensorrt_llm"}]})
            if path == "/metrics":
                with self.lock:
                    stats, self.iter_stats = self.iter_stats, []
                return h.send_json(200, stats if self.llm_args.get("enable_iter_perf_stats") else [])
            if path == "/perf_metrics":
                with self.lock:
                    perf, self.perf = self.perf, []
                return h.send_json(200, perf if self.llm_args.get("return_perf_metrics") else [])
            if path == "/prometheus/metrics" and self.llm_args.get("return_perf_metrics"):
                return h.send_bytes(200, self._prometheus().encode(),
                                    "text/plain; version=0.0.4; charset=utf-8")
            if path == "/server_info":
                return h.send_json(200, {"disaggregated_params": {}, "server_role":
                                         self.opts["server_role"]})
        if method == "POST" and path in ("/v1/completions", "/v1/chat/completions"):
            return self._generate(h, path)
        return h.send_json(404, {"detail": "Not Found"})

    def _prometheus(self) -> str:
        """Names of tensorrt_llm/metrics/collector.py (MetricsCollector); the iteration gauges
        (KV cache, running/waiting) only with ``enable_iter_perf_stats: true``, the
        acceptance length only with a ``speculative_config``."""
        c, lab = self.counters, {"model_name": self.model_id}
        n = sum(c.get("finish_" + r, 0) for r in ("length", "stop", "tool_calls"))
        ttft = float(os.environ.get("DOUBLE_TTFT_MS", "0") or 0) / 1000
        itl = float(os.environ.get("DOUBLE_ITL_MS", "0") or 0) / 1000
        fams = [("trtllm_request_success_total", "counter", {**lab, "finished_reason": r}, c.get("finish_" + r, 0))
                for r in ("length", "stop", "tool_calls")]
        fams += [("trtllm_prompt_tokens_total", "counter", lab, c.get("prompt_tokens", 0)),
                 ("trtllm_generation_tokens_total", "counter", lab, c.get("completion_tokens", 0)),
                 ("trtllm_time_to_first_token_seconds", "histogram", lab, (n, n * ttft)),
                 ("trtllm_time_per_output_token_seconds", "histogram", lab, (n, n * itl)),
                 ("trtllm_e2e_request_latency_seconds", "histogram", lab, (n, n * (ttft + itl)))]
        if self.llm_args.get("enable_iter_perf_stats"):
            fams += [("trtllm_num_requests_running", "gauge", lab, 0),
                     ("trtllm_num_requests_waiting", "gauge", lab, 0),
                     ("trtllm_kv_cache_utilization", "gauge", lab, 0.0),
                     ("trtllm_kv_cache_hit_rate", "gauge", lab, 0.0)]
        if self.spec:
            fams.append(("trtllm_spec_decode_acceptance_length", "gauge", lab, self.acceptance))
        return prometheus_text(fams)

    def _error(self, h, status, message, typ="BadRequestError"):
        return h.send_json(status, {"object": "error", "message": message, "type": typ,
                                    "param": None, "code": status})

    def _kv_pull(self, h, path):
        ctx_id = int(path.rsplit("/", 1)[1])
        with self.lock:
            entry = self.kv_held.pop(ctx_id, None)
        if entry is None:
            return h.send_json(404, {"error": f"no KV blocks held for ctx_request_id {ctx_id}"})
        return h.send_json(200, dict(entry, layout=self.layout))

    def _record_iteration(self, res, t0):
        self.iteration += 1
        entry = {"iter": self.iteration, "iterLatencyMS": (time.time() - t0) * 1000,
                 "numActiveRequests": 0, "numCompletedRequests": 1, "maxNumActiveRequests":
                 self.opts["max_batch_size"], "timestamp": time.strftime("%m-%d-%Y %H:%M:%S"),
                 "kvCacheStats": {"tokensPerBlock": self.layout["tokens_per_block"]}}
        if self.spec:
            n = int(self.spec.get("max_draft_len") or 1)
            drafts = n * max(1, res.get("completion_tokens", 1))
            entry["specDecodingStats"] = {
                "numDraftTokens": drafts, "numAcceptedTokens": int(drafts * (self.acceptance - 1) / n),
                "numRequestsWithDraftTokens": 1, "acceptanceLength": self.acceptance,
                "iterLatencyMS": entry["iterLatencyMS"], "draftOverhead": 0.1}
        with self.lock:
            self.iter_stats.append(entry)

    def _record_perf(self, record, t0, kv_timing):
        now = time.time()
        entry = {"request_id": next(self.request_ids), "perf_metrics": {"timing_metrics": {
            "arrival_time": t0, "first_scheduled_time": t0, "first_token_time": now, "last_token_time": now,
            **kv_timing}}}
        if record.get("ctx_request_id") is not None:
            entry["ctx_request_id"] = record["ctx_request_id"]
        with self.lock:
            self.perf.append(entry)

    def _generate(self, h, path):
        t0 = time.time()
        body = h.body_json()
        chat = path.endswith("chat/completions")
        if "http500" in self.faults:
            return self._error(h, 500, "Internal server error (double fault http500)",
                               "InternalServerError")
        if chat:
            err = self.behaviour.check_tool_choice(body)
            if err:
                return self._error(h, 400, err)
        dp = body.get("disaggregated_params") or {}
        rtype = dp.get("request_type")
        kv_timing: dict = {}
        record = {"endpoint": path, "role": "aggregated", "stream": bool(body.get("stream"))}
        extra = None
        if rtype is not None:
            if rtype not in ("context_only", "generation_only", "context_and_generation"):
                return self._error(h, 400, f"Unknown request_type {rtype!r}")
            if rtype != "context_and_generation" and not self.transceiver:
                return self._error(h, 400, "Disaggregated request (request_type "
                                   f"{rtype}) but this worker has no cache_transceiver_config")
        if rtype == "context_only":
            if body.get("stream"):
                return self._error(h, 400, "context_only requests must not stream")
            ctx_id = next(self.ctx_ids) + self.port * 1_000_000
            res = (self.behaviour.chat_result if chat else self.behaviour.completion_result)(
                dict(body, max_tokens=1, max_completion_tokens=1))
            opaque = base64.b64encode(json.dumps({
                "ctx": f"{self.host}:{self.port}", "id": ctx_id,
                "layout": self.layout}).encode()).decode()
            with self.lock:
                self.kv_held[ctx_id] = {"ctx_request_id": ctx_id,
                                        "prompt_tokens": res["prompt_tokens"]}
            extra = {"disaggregated_params": {"request_type": "context_only",
                                              "first_gen_tokens": [1], "ctx_request_id": ctx_id,
                                              "encoded_opaque_state": opaque, "draft_tokens": None}}
            record.update(role="context", ctx_request_id=ctx_id)
        elif rtype == "generation_only":
            try:
                state = json.loads(base64.b64decode(dp.get("encoded_opaque_state") or ""))
                ctx_id = int(dp["ctx_request_id"])
            except (ValueError, KeyError, TypeError):
                return self._error(h, 400, "generation_only request without valid "
                                   "ctx_request_id / encoded_opaque_state")
            mismatch = {k: (state["layout"].get(k), self.layout.get(k)) for k in self.layout
                        if state["layout"].get(k) != self.layout.get(k)}
            if mismatch:
                return self._error(h, 500, "KV cache transfer failed: context and generation "
                                   f"layouts differ: {mismatch}", "InternalServerError")
            try:
                status, pulled = http_json("GET", f"http://{state['ctx']}/_double/kv/{ctx_id}",
                                           timeout=10)
            except OSError as exc:
                status, pulled = 599, str(exc)
            if status != 200:
                return self._error(h, 500, f"KV cache transfer from {state['ctx']} failed: "
                                   f"{pulled}", "InternalServerError")
            record.update(role="generation", ctx_request_id=ctx_id, ctx_server=state["ctx"])
            kv_timing = {"kv_cache_transfer_start": t0, "kv_cache_transfer_end": time.time(),
                         # bytes: tokens x a toy per-token size (the real figure is the layers' K/V)
                         "kv_cache_size": int(pulled.get("prompt_tokens") or 1) * 4096}
        if chat:
            res = self.behaviour.chat_result(body)
        else:
            res = self.behaviour.completion_result(body)
        if rtype == "context_only":
            res = dict(res, completion_tokens=1)
            if chat:
                res.update(content=(res["content"] or "")[:1] or None, tool_calls=None,
                           finish_reason="length", pieces=[])
            else:
                res.update(text=res["text"][:8], finish_reason="length")
        self.count("requests_" + ("chat" if chat else "completions"))
        self.count("finish_" + res["finish_reason"])
        self.count("prompt_tokens", res["prompt_tokens"])
        self.count("completion_tokens", res["completion_tokens"])
        self.log_request(record)
        self._record_iteration(res, t0)
        self._record_perf(record, t0, kv_timing)
        if body.get("stream"):
            h.start_sse()
            if self.behaviour.ttft:
                time.sleep(self.behaviour.ttft)
            gen = (self.behaviour.chat_stream if chat else self.behaviour.completion_stream)(body, res)
            for chunk in gen:
                h.sse(chunk)
                if self.behaviour.itl:
                    time.sleep(self.behaviour.itl)
            if "stream_no_done" not in self.faults:
                h.sse("[DONE]")
            return None
        resp = (self.behaviour.chat_response if chat else self.behaviour.completion_response)(
            body, res, extra)
        return h.send_json(200, resp)


# ============================================================================ orchestrator
class Orchestrator(EngineServer):
    """``trtllm-serve disaggregated -c``: context first, then generation."""

    name = "trtllm-serve-disaggregated"

    def __init__(self, cfg: dict, opts: dict):
        super().__init__(cfg["hostname"], cfg["port"], starting_s=0)
        self.cfg, self.opts = cfg, opts
        self.ctx_cycle = itertools.cycle(cfg["ctx"])
        self.gen_cycle = itertools.cycle(cfg["gen"])
        self.cycle_lock = threading.Lock()
        self.failed = threading.Event()

    def loading_done(self) -> bool:
        """Wait for every worker's /health (``-t`` seconds); on timeout stop and exit 1."""
        deadline = time.monotonic() + self.opts["server_start_timeout"]
        for host, port in self.cfg["ctx"] + self.cfg["gen"]:
            if not wait_healthy(f"http://{host}:{port}", deadline):
                sys.stderr.write(f"TimeoutError: worker {host}:{port} not healthy within "
                                 f"{self.opts['server_start_timeout']} s\n")
                self.failed.set()
                threading.Thread(target=self.shutdown, daemon=True).start()
                return False
        return True

    def route(self, h, method, path):
        if method == "GET" and path == "/health":
            return h.send_bytes(200 if self.ready.is_set() else 500, b"")
        if method == "GET" and path == "/version":
            return h.send_json(200, {"version": VERSION})
        if method == "GET" and path == "/cluster_info":
            return h.send_json(200, {"is_ready": self.ready.is_set(),
                                     "context_servers": [f"{a}:{b}" for a, b in self.cfg["ctx"]],
                                     "generation_servers": [f"{a}:{b}" for a, b in self.cfg["gen"]]})
        if method == "GET" and path == "/perf_metrics":
            return h.send_json(200, [])
        if method == "POST" and path in ("/v1/completions", "/v1/chat/completions"):
            if not self.ready.is_set():
                return h.send_json(400, {"object": "error", "message": "Cluster is not ready",
                                         "type": "BadRequestError", "param": None, "code": 400})
            return self._route_request(h, path)
        return h.send_json(404, {"detail": "Not Found"})

    def _route_request(self, h, path):
        body = h.body_json()
        with self.cycle_lock:
            ctx, gen = next(self.ctx_cycle), next(self.gen_cycle)
        ctx_url, gen_url = f"http://{ctx[0]}:{ctx[1]}", f"http://{gen[0]}:{gen[1]}"
        ctx_req = dict(body, stream=False, disaggregated_params={"request_type": "context_only"})
        ctx_req.pop("stream_options", None)
        timeout = self.opts["request_timeout"]
        try:
            status, ctx_resp = http_json("POST", ctx_url + path, ctx_req, timeout=timeout)
        except OSError as exc:
            status, ctx_resp = 502, {"message": str(exc)}
        if status != 200:
            self.log_request({"endpoint": path, "context": f"{ctx[0]}:{ctx[1]}", "ok": False,
                              "status": status})
            return h.send_json(status, ctx_resp)
        params = dict(ctx_resp["choices"][0]["disaggregated_params"],
                      request_type="generation_only")
        gen_req = dict(body, disaggregated_params=params)
        record = {"endpoint": path, "context": f"{ctx[0]}:{ctx[1]}",
                  "generation": f"{gen[0]}:{gen[1]}", "ctx_request_id": params["ctx_request_id"],
                  "stream": bool(body.get("stream"))}
        self.log_request(record)
        sys.stderr.write(f"orchestrator: context {record['context']} -> generation "
                         f"{record['generation']} (ctx_request_id {params['ctx_request_id']})\n")
        self.count("requests")
        if body.get("stream"):
            try:
                lines = http_stream(gen_url + path, gen_req, timeout=timeout)
                first = next(lines)
            except Exception as exc:  # HTTPError or connection error from the generation server
                code = getattr(exc, "code", 502)
                raw = exc.read() if hasattr(exc, "read") else str(exc).encode()
                return h.send_bytes(code, raw, "application/json")
            h.start_sse()
            h.wfile.write(first)
            for line in lines:
                h.wfile.write(line)
                h.wfile.flush()
            return None
        status, resp = http_json("POST", gen_url + path, gen_req, timeout=timeout)
        return h.send_json(status, resp)


# ============================================================================ main
def _usage(sub: str) -> str:
    pos = " MODEL" if sub == "serve" else ""
    return f"Usage: {PROG} {sub} [OPTIONS]{pos}\nTry '{PROG} {sub} --help' for help.\n"


def _help(sub: str, options: list[dict]) -> str:
    lines = [_usage(sub).splitlines()[0], "", "Options:"]
    for o in options:
        lines.append("  " + ", ".join(o["names"]))
    lines.append("  --help")
    return "\n".join(lines) + "\n"


def _crash(exc: BaseException) -> int:
    """Uncaught exception: a traceback and exit 1, as the real process dies."""
    sys.stderr.write("Traceback (most recent call last):\n")
    sys.stderr.write(f'  File "{PROG}", line 8, in <module>\n    sys.exit(main())\n')
    name = type(exc).__name__
    if isinstance(exc, PydanticError):
        name = "pydantic_core._pydantic_core.ValidationError"
    sys.stderr.write(f"{name}: {exc}\n")
    return 1


def main(argv: list[str] | None = None) -> int:
    """Entry point: route to ``serve``/``disaggregated``, parse like Click, validate, serve."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] in (["--help"], ["-h"]) or not argv:
        sys.stdout.write(f"Usage: {PROG} [OPTIONS] COMMAND [ARGS]...\n\nCommands:\n" +
                         "".join(f"  {c}\n" for c in SUBCOMMANDS))
        return 0 if argv else 2
    if argv[:1] == ["--version"]:
        print(f"{PROG}, version {VERSION}")
        return 0
    sub = argv[0] if argv[0] in SUBCOMMANDS else "serve"
    rest = argv[1:] if argv[0] in SUBCOMMANDS else argv
    if sub not in ("serve", "disaggregated"):
        sys.stderr.write(f"trtllm-serve double: subcommand '{sub}' is not implemented by the "
                         "double (real trtllm-serve has it)\n")
        return 2
    options = SERVE_OPTIONS if sub == "serve" else DISAGG_OPTIONS
    if "--help" in rest:
        sys.stdout.write(_help(sub, options))
        return 0
    try:
        opts = parse_click(rest, options, _usage(sub), ["MODEL"] if sub == "serve" else [])
    except ClickError as exc:
        sys.stderr.write(exc.usage + "\nError: " + str(exc) + "\n")
        return 2
    try:
        if sub == "disaggregated":
            if not opts["config_file"]:
                raise ValueError("disaggregated: -c/--config_file is required")
            if opts["metadata_server_config_file"]:
                raise NotImplementedError("trtllm-serve double: metadata server (etcd) mode is "
                                          "not implemented")
            with open(opts["config_file"], encoding="utf-8") as fh:
                cfg = parse_disagg_config(load_yaml(fh.read()))
            if "generation_first" in (opts["schedule_style"], cfg["schedule_style"]):
                sys.stderr.write("trtllm-serve double: schedule_style generation_first is not "
                                 "implemented by the double (only context_first)\n")
                return 2
            if os.environ.get("DOUBLE_DRY_RUN"):
                print(json.dumps({"subcommand": "disaggregated", "options": opts, "config": cfg}))
                return 0
            server: EngineServer = Orchestrator(cfg, opts)
        else:
            llm_args = {}
            if opts["config"]:
                with open(opts["config"], encoding="utf-8") as fh:
                    llm_args = validate_llm_args(load_yaml(fh.read()))
            model = opts["model"]
            if model.startswith(("/", "./", "../")) and not os.path.exists(model) \
                    and not os.environ.get("DOUBLE_SKIP_MODEL_CHECK"):
                raise ValueError(f"Repo id must be in the form 'repo_name' or "
                                 f"'namespace/repo_name': '{model}'. Use `repo_type` argument if "
                                 "needed. (model path does not exist)")
            world = opts["tp_size"] * opts["pp_size"] * opts["cp_size"]
            check_gpus(world)
            if opts["media_io_kwargs"]:
                json.loads(opts["media_io_kwargs"])
            if os.environ.get("DOUBLE_DRY_RUN"):
                print(json.dumps({"subcommand": "serve", "options": opts, "llm_args": llm_args}))
                return 0
            server = TrtllmWorker(opts, llm_args)
    except (Exception,) as exc:  # the real process dies with a traceback
        if os.environ.get("DOUBLE_DEBUG"):
            traceback.print_exc()
        return _crash(exc)
    try:
        server.serve()
    except KeyboardInterrupt:
        return 0
    except OSError as exc:
        return _crash(exc)
    if getattr(server, "failed", None) is not None and server.failed.is_set():
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
