"""The user-facing inventory variables, in one place.

Each variable is a :class:`Var` in the shape of an Ansible ``meta/argument_specs.yml`` option
(``type``, ``default``, ``elements``, ``choices``, ``description``). ``glmops.inventory`` reads
and type-checks with these; :func:`argument_spec` returns them as an argument_specs entry
point; :func:`markdown` renders docs/variables.md (``python -m glmops.variables >
docs/variables.md``; a unit test keeps the file equal to the output).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable


@dataclass(frozen=True)
class Var:
    """One variable or dict key. ``type``: str | int | bool | dict | list (``elements`` for
    lists). ``default`` None = unset; ``shown_default`` is what the docs print when the
    default is computed (e.g. from the catalog). ``shape`` names a :data:`SHAPES` entry the
    value (each element of a list) must have; ``bounds`` is the inclusive ``(low, high)``
    range of an int (of each int element), reported with ``code`` by the loader, or by
    ``glmops.rules`` (with more context, e.g. the model's limit) when ``in_rules``."""

    type: str
    description: str
    default: Any = None
    elements: str | None = None
    choices: tuple[str, ...] | None = None
    shown_default: str | None = None
    required: bool = False
    shape: str | None = None
    bounds: tuple[int, int] | None = None
    code: str = "RANGE"
    in_rules: bool = False


# --- shapes: one per kind of value, checked where values enter (glmops.inventory) -------------

#: one path segment of a unit-safe path: no whitespace, quotes, ``%`` (systemd specifiers),
#: ``$``, ``:`` / ``,`` (docker ``-v`` separators), ``\``, ``;``
_SEGMENT = r"[A-Za-z0-9_.+@=-]+"
_UNIT_PATH = re.compile(rf"^/(?:{_SEGMENT}/?)*\Z")
# OCI image reference (github.com/distribution/reference, reference.go grammar): a lower-case
# path after an optional domain[:port], an optional tag and an optional digest; never an option
_OCI_DOMAIN = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])(?:\.(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9]))*(?::[0-9]+)?"
_OCI_COMPONENT = r"[a-z0-9]+(?:(?:[_.]|__|-+)[a-z0-9]+)*"
_OCI_IMAGE = re.compile(
    rf"^(?:{_OCI_DOMAIN}/)?{_OCI_COMPONENT}(?:/{_OCI_COMPONENT})*"
    r"(?::[\w][\w.-]{0,127})?(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?\Z")
#: an inventory host name or address: a host name, IPv4 or IPv6 literal (never an option such as
#: ``-oProxyCommand=``, never a path such as ``/`` or ``../..``)
ADDRESS = re.compile(r"^[A-Za-z0-9\[][A-Za-z0-9.:_\-\]%]*\Z")
#: a POSIX-portable user or group name as useradd(8) accepts it by default (NAME_REGEX)
USER_NAME = re.compile(r"^[a-z_][a-z0-9_-]{0,31}\Z")


def _path_problem(value: str) -> str | None:
    if not _UNIT_PATH.match(value):
        return "an absolute path of letters, digits and . _ + @ = - (no whitespace, %, $, :, quotes)"
    if any(seg in (".", "..") for seg in value.split("/")):
        return "an absolute path without '.' or '..' segments"
    if len(value) > 1024:
        return "an absolute path of at most 1024 characters"
    return None


def _repo_problem(value: str) -> str | None:
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(value)
    except HFValidationError:
        return "a Hugging Face repo id (owner/name: letters, digits, - _ . ; no '..' or '--')"
    return None


def _revision_problem(value: str) -> str | None:
    if not re.match(r"^[A-Za-z0-9_][A-Za-z0-9_.+/-]{0,254}\Z", value) or \
            any(seg in ("", ".", "..") for seg in value.split("/")):
        return "a commit sha, branch or tag (letters, digits, . _ + - /; no '..' segment, not an option)"
    return None


def _requirement_problem(value: str) -> str | None:
    from packaging.requirements import InvalidRequirement, Requirement

    try:
        Requirement(value)
    except InvalidRequirement:
        return "a PEP 508 requirement (name[extras] specifier), never a pip option"
    return None


def _regex(pattern: str, accepted: str) -> Callable[[str], str | None]:
    rx = re.compile(pattern)
    return lambda value: None if rx.match(value) else accepted


#: shape name -> (problem code, check returning None or what is accepted)
SHAPES: dict[str, tuple[str, Callable[[str], str | None]]] = {
    "path": ("PATH", _path_problem),
    "user": ("USER", lambda v: None if USER_NAME.match(v) else
             "a user/group name matching [a-z_][a-z0-9_-]* (at most 32 characters)"),
    "image": ("IMAGE", lambda v: None if _OCI_IMAGE.match(v) else
              "an OCI image reference ([registry[:port]/]name[:tag][@digest], lower-case name)"),
    "address": ("ADDRESS", lambda v: None if ADDRESS.match(v) else "a host name, an IPv4 or an IPv6 address"),
    "name": ("SHAPE", _regex(r"^[A-Za-z0-9_][A-Za-z0-9_.:/@+=-]{0,255}\Z",
                             "a name of letters, digits and . _ : / @ + = - not starting with '-' (never a flag)")),
    "nic": ("SHAPE", _regex(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}\Z",
                            "a device name of letters, digits and . _ - (at most 64 characters)")),
    "version": ("SHAPE", _regex(r"^[A-Za-z0-9][A-Za-z0-9.+_-]{0,63}\Z",
                                "a version of letters, digits and . + _ - (e.g. 0.11.2)")),
    "repo": ("SHAPE", _repo_problem),
    "revision": ("SHAPE", _revision_problem),
    "requirement": ("SHAPE", _requirement_problem),
    # Prometheus' duration (prometheus/common model.ParseDuration: units y w d h m s ms, largest first)
    "duration": ("SHAPE", _regex(r"^(?=\d)(\d+y)?(\d+w)?(\d+d)?(\d+h)?(\d+m)?(\d+s)?(\d+ms)?\Z",
                                 "a Prometheus duration such as 15s, 1m or 1m30s (units y w d h m s ms)")),
}

#: environment names glmops_env and a pool's env may not set: glmops sets them itself (device
#: visibility from the placement, HF_HUB_OFFLINE from glmops_checkpoint.offline) or they change
#: which code runs (the dynamic loader's LD_*, the interpreter's PYTHON* paths, PATH, HOME ...)
RESERVED_ENV = re.compile(
    r"^(CUDA_VISIBLE_DEVICES|HIP_VISIBLE_DEVICES|ROCR_VISIBLE_DEVICES|NVIDIA_VISIBLE_DEVICES|HF_HUB_OFFLINE"
    r"|TRANSFORMERS_OFFLINE|HOME|PATH|USER|LOGNAME|SHELL|PYTHONPATH|PYTHONHOME|PYTHONSTARTUP|PYTHONUSERBASE"
    r"|VIRTUAL_ENV|BASH_ENV|ENV|NOTIFY_SOCKET|LISTEN_FDS|LISTEN_PID|LD_[A-Z0-9_]*)\Z", re.IGNORECASE)

#: what each shape accepts, for the docs
SHAPE_DOCS = {
    "path": "unit-safe absolute path (letters, digits, `. _ + @ = -`; no whitespace, `%`, `$`, `:`, `..`)",
    "user": "user name `[a-z_][a-z0-9_-]*`, at most 32 characters",
    "image": "OCI image reference",
    "address": "host name, IPv4 or IPv6 address (never an option)",
    "name": "a name, never a flag (`[A-Za-z0-9_][A-Za-z0-9_.:/@+=-]*`)",
    "nic": "device name `[A-Za-z0-9_][A-Za-z0-9_.-]*`",
    "version": "version `[A-Za-z0-9][A-Za-z0-9.+_-]*`",
    "repo": "Hugging Face repo id (huggingface_hub `validate_repo_id`)",
    "revision": "commit, branch or tag (no `..`)",
    "requirement": "PEP 508 requirement (never a pip option)",
    "duration": "Prometheus duration (`15s`, `1m30s`; units y w d h m s ms)",
}


def value_problem(var: Var, value: Any) -> tuple[str, str] | None:
    """``(code, accepted)`` when the typed ``value`` does not have ``var``'s shape or bounds
    (each element of a list), else None."""
    items = value if isinstance(value, list) else [value]
    for item in items:
        if var.shape and isinstance(item, str):
            code, check = SHAPES[var.shape]
            accepted = check(item)
            if accepted:
                return code, accepted
        if var.bounds and not var.in_rules and isinstance(item, int) and not isinstance(item, bool):
            low, high = var.bounds
            if not low <= item <= high:
                return var.code, f"an integer {low}..{high}"
    return None


#: upper bound of tp/pp/ep/dp/replicas: far above any cluster, low enough that planning stays instant
MAX_PARALLEL = 65536

VARIABLES: dict[str, Var] = {
    "glmops_deployment": Var("str", "Deployment name, used in unit names (`glm-<name>-prefill-0.service`).",
                             shown_default="inventory directory name"),
    "glmops_model": Var("str", "Catalog model key.", required=True),
    "glmops_variant": Var("str", "Checkpoint variant (`w4a8`: GLM-5.3 only).",
                          shown_default="the model's `default_variant` (`fp8`)"),
    "glmops_engine": Var("str", "Serving engine.", required=True),
    "glmops_dynamo_backend": Var("str", "Workers behind the Dynamo frontend (`Deployment.dynamo_backend`; "
                                 "`mocker`: Dynamo's simulated worker, `cpu` hardware only).",
                                 default="vllm", choices=("vllm", "sglang", "mocker")),
    "glmops_dynamo_etcd_hosts": Var("list", "Hosts (or groups) that run Dynamo's discovery store, etcd from Debian's "
                                    "`etcd-server`, when the services span hosts: 1 member, or 3 or 5 so the store "
                                    "survives a failed host. Every `ETCD_ENDPOINTS` names them all "
                                    "(`Deployment.dynamo_etcd_hosts`).", elements="str",
                                    shown_default="the front door's host"),
    "glmops_dynamo_request_plane": Var("str", "Dynamo request plane, set once for the frontend and every worker "
                                       "(`--request-plane`; `nats` deploys Debian's `nats-server` on the front door's host).",
                                       default="tcp", choices=("tcp", "nats")),
    "glmops_dynamo_event_plane": Var("str", "Dynamo KV event plane, set once for the frontend and every worker "
                                     "(`--event-plane`; `nats` deploys Debian's `nats-server` on the front door's host).",
                                     default="zmq", choices=("zmq", "nats")),
    "glmops_engine_version": Var("str", "Engine version; must be >= the catalog `min_version` (and `min_version_by_model`).",
                                 shown_default="catalog `engines.<engine>.version`", shape="version"),
    "glmops_image": Var("str", "Container image override (`Deployment.image`).",
                        shown_default="catalog image for engine x model x vendor", shape="image"),
    "glmops_hardware": Var("str", "Catalog hardware key (`cpu` = the lab, no GPU).", required=True),
    "glmops_runtime": Var("str", "How engines run on a host.", default="container", choices=("container", "venv")),
    "glmops_topology": Var("str", "Topology to deploy; `--topology` overrides.", default="agg", choices=("agg", "disagg")),
    "glmops_strategy": Var("str", "Seed 004's parallelism strategy: glmops lays out the pools (aggregated replicas or "
                           "prefill/decode, TP/PP/EP/DP per strategy, catalog `recipes.yaml:strategies`) on the "
                           "workers itself. Pools set in `glmops_topologies.<topology>.pools` win. Sets the topology "
                           "(`pd_cluster`: disagg, the others agg) unless `glmops_topology`/`--topology` says it.",
                           shown_default="unset (catalog layout or `glmops_topologies`)"),
    "glmops_nodes": Var("int", "Nodes a `glmops_strategy` spans (seed 004: \"multi-node strategies also need nodes=<n>\"); "
                        "1 for a single-node strategy.", shown_default="multi-node strategies: the hosts in `glmops_workers`; else 1",
                        bounds=(1, 65536)),
    "glmops_topologies": Var("dict", "Per topology: `{pools: {ROLE: POOL}, router: ROUTER}` (see Pools and Router). "
                             "When the selected topology (or its `pools`) is absent, the first matching catalog layout "
                             "(`recipes.yaml:layouts`) is used; `Deployment.layout` names it.",
                             shown_default="catalog layout for engine x hardware x topology"),
    "glmops_served_model_name": Var("str", "The `model` name clients send.",
                                    shown_default="the variant's `served_model_name`, else the repo id", shape="name"),
    "glmops_kv_cache_dtype": Var("str", "KV cache dtype: engine-neutral `auto` `bf16` `fp8` `nvfp4`, or the engine's own "
                                 "spelling (catalog `engines.<e>.kv_cache_dtype.accepted`, e.g. `fp8_e4m3`).", default="auto"),
    "glmops_max_seq_len": Var("int", "Maximum sequence length (input + output), <= the model's 1,048,576.",
                              shown_default="recipe/engine default", bounds=(1, 1048576), code="MAX_SEQ_LEN", in_rules=True),
    "glmops_max_batch_size": Var("int", "TRT-LLM `--max_batch_size`, vLLM `--max-num-seqs`, SGLang `--max-running-requests`.",
                                 shown_default="recipe/engine default", bounds=(1, 65536), code="LIMIT", in_rules=True),
    "glmops_max_num_tokens": Var("int", "TRT-LLM `--max_num_tokens`, vLLM `--max-num-batched-tokens`.",
                                 shown_default="recipe/engine default", bounds=(1, 16777216), code="LIMIT", in_rules=True),
    "glmops_speculative": Var("dict", "Engine-neutral speculative decoding, e.g. `{method: mtp, num_speculative_tokens: 3}` "
                              "(TRT-LLM renders `speculative_config: {decoding_type: MTP, max_draft_len: 3}`, 1..5). "
                              "A pool's `speculative` overrides it; TRT-LLM and vLLM need equal settings on both "
                              "disagg pools (F16). A drafter with a checkpoint of its own (vLLM `dspark`, seed 004: "
                              "`{method: dspark, revision: <commit>}`; `model` defaults to the catalog's "
                              "`RedHatAI/GLM-5.3-speculator.dspark`, `num_speculative_tokens` to 8) is downloaded by "
                              "`glmops download` at `revision` (a 40-hex commit while serving offline, F12_REVISION) "
                              "and served from its local snapshot.", shown_default="off (recipe default)"),
    "glmops_multimodal": Var("bool", "Image/video input; needs `transformers==5.17.0` (seed 000).", default=False),
    "glmops_video": Var("bool", "Clients send video as well as images (needs `glmops_multimodal`). Refused on a "
                        "serving path without video input (ENGINE_COMBINATION, catalog `engines.<e>.compat` `disagg_inputs`: "
                        "seed 001, SGLang disaggregated takes text and images only).", default=False),
    "glmops_pip_extra": Var("list", "Extra requirement specifiers for the engine environment "
                            "(`Deployment.pip_extra`); a `transformers` pin other than `==5.17.0` is refused "
                            "when multimodal is on.", elements="str", shown_default="`[]`", shape="requirement"),
    "glmops_engine_args": Var("dict", "Engine CLI flag overrides for every pool: flag name without leading dashes as the "
                              "engine spells it (`block-size`, `max_batch_size`); `true` = bare flag, `null` removes a "
                              "recipe flag. Names must be ones the engine's parser accepts (`glmops/catalog/flags/`, "
                              "ENGINE_FLAG); flags glmops sets itself (model, host, port, tp/pp/dp/ep, ...) are refused "
                              "(ENGINE_FLAG_OWNED).", shown_default="`{}`"),
    "glmops_engine_config": Var("dict", "Engine config-file key overrides for every pool (TRT-LLM `--config` YAML keys; "
                                "nested dicts merge; top-level keys checked like engine_args). Only TensorRT-LLM "
                                "reads it (ENGINE_CONFIG).", shown_default="`{}`"),
    "glmops_api_key": Var("str", "API key the deployment's endpoint and workers require (`Authorization: Bearer`), "
                          "normally from Ansible Vault. Each component gets it its own way, only in its 0600 env file "
                          "(vLLM `VLLM_API_KEY`, vllm-router `OPENAI_API_KEY`: catalog `engines.<engine>.api_key`); "
                          "engines with no key mechanism outside argv are refused (API_KEY_UNSUPPORTED). The gate, "
                          "the endpoint check, `glmops smoke`, `bench` and `status` send it.", shown_default="unset (no key)"),
    "glmops_env": Var("dict", "Extra environment for every pool's services (values become strings). Names glmops sets or "
                      "that change which code runs are refused (ENV_RESERVED): `CUDA_VISIBLE_DEVICES`, "
                      "`HIP_VISIBLE_DEVICES`, `HF_HUB_OFFLINE`, `TRANSFORMERS_OFFLINE`, `HOME`, `PATH`, `PYTHONPATH`, "
                      "`LD_*`, ... (`glmops.variables.RESERVED_ENV`).", shown_default="`{}`"),
    "glmops_checkpoint": Var("dict", "Where the weights come from and live (see Checkpoint).",
                             shown_default="from the catalog variant"),
    "glmops_service_user": Var("str", "User the services run as.", default="glmops", shape="user"),
    "glmops_state_dir": Var("str", "State (generations, download markers).", default="/var/lib/glmops", shape="path"),
    "glmops_config_dir": Var("str", "Engine configs and env files (`<dir>/<deployment>/`).", default="/etc/glmops", shape="path"),
    "glmops_venv_root": Var("str", "Engine virtualenvs (`<root>/<engine>-<version>`).", default="/opt/glmops/venvs", shape="path"),
    "glmops_readiness_timeout_s": Var("int", "Seconds each worker may take to become ready.", default=1800, bounds=(1, 86400)),
    "glmops_monitoring": Var("dict", "Prometheus for the deployment (see Monitoring): scrape targets are always "
                             "rendered (`glmops targets`); `enabled: true` installs Debian's `prometheus` on one host "
                             "with them, the shipped alert rules and optional exporters.", shown_default="`{}` (off)"),
}

HOST_VARIABLES: dict[str, Var] = {
    "glmops_address": Var("str", "Address services bind to and advertise (e.g. `VLLM_NIXL_SIDE_CHANNEL_HOST`).",
                          shown_default="`ansible_host`, else the inventory name", shape="address"),
    "glmops_gpus": Var("list", "GPU indices glmops may use on this host.", elements="int",
                       shown_default="all of the hardware's (`range(gpus_per_node)`)", bounds=(0, 1023), code="GPU_INDEX"),
    "glmops_rdma_devices": Var("list", "RDMA NICs for NIXL/UCX (`[mlx5_0, mlx5_1]` -> `UCX_NET_DEVICES=mlx5_0:1,mlx5_1:1`); "
                               "required on every host of a cross-host NIXL disagg (F06).", elements="str",
                               shown_default="`[]`", shape="nic"),
    "glmops_socket_ifname": Var("str", "Interface NCCL and Gloo use between hosts (`NCCL_SOCKET_IFNAME`, "
                                "`GLOO_SOCKET_IFNAME` in the workers' env files when the Plan spans hosts; "
                                "`lo` and `docker*` refused, F17). A pool's or `glmops_env`'s own value wins.",
                                shown_default="the interface that holds the host's address (read by the deploy)",
                                shape="nic"),
}

#: Lab metadata: the group vars ``glmops lab up`` writes into its inventory (glmops/lab/core.py
#: ``write_inventory``) to name the lab. Accepted in any inventory so the lab's inventory goes to every
#: verb as written; nothing plans with them (glmops.inventory skips them like the run variables).
LAB_VARIABLES: dict[str, Var] = {
    "glmops_lab_name": Var("str", "Name of the lab that wrote the inventory (`glmops lab up --name`). Lab metadata: "
                           "not used by planning.", shown_default="unset"),
    "glmops_lab_profile": Var("str", "That lab's profile (`glmops lab up --profile`). Lab metadata: not used by "
                              "planning.", shown_default="unset"),
}

POOL_KEYS: dict[str, Var] = {
    "tp": Var("int", "Tensor parallelism per replica.", default=1, bounds=(1, MAX_PARALLEL), code="PARALLELISM"),
    "pp": Var("int", "Pipeline parallelism per replica.", default=1, bounds=(1, MAX_PARALLEL), code="PARALLELISM"),
    "ep": Var("int", "Expert parallelism; reuses the replica's GPUs, must divide tp x pp x dp.", default=1, bounds=(1, MAX_PARALLEL), code="PARALLELISM"),
    "dp": Var("int", "Data parallelism per replica; GPUs per replica = tp x pp x dp.", default=1, bounds=(1, MAX_PARALLEL), code="PARALLELISM"),
    "attention_dp": Var("bool", "Attention data parallelism (TRT-LLM `enable_attention_dp`).", default=False),
    "replicas": Var("int", "Identical replicas of this pool.", default=1, bounds=(1, MAX_PARALLEL), code="PARALLELISM"),
    "hosts": Var("list", "Host or group names the pool may use (groups are expanded).", elements="str",
                 shown_default="group `glmops_workers`, else all hosts", shape="address"),
    "gpus": Var("list", "GPU indices the pool uses on each of its hosts (seed 000: context `[0,1,2,3]`, generation "
                "`[4,5,6,7]`).", elements="int", shown_default="any free GPUs", bounds=(0, 1023), code="GPU_INDEX"),
    "port": Var("int", "HTTP port of the pool's first replica on a host (more replicas on that host count up).",
                shown_default="engine/recipe default", bounds=(1, 65535), code="PORT", in_rules=True),
    "engine_args": Var("dict", "Per-pool engine flag overrides (win over `glmops_engine_args`). Layout-affecting flags "
                       "must end equal on prefill and decode (F01).", shown_default="`{}`"),
    "engine_config": Var("dict", "Per-pool engine config keys (win over `glmops_engine_config`).", shown_default="`{}`"),
    "env": Var("dict", "Per-pool environment. Layout env (`VLLM_KV_CACHE_LAYOUT`, `VLLM_SSM_CONV_STATE_LAYOUT`, F01) and "
               "transport env (`NIXL_*`, `UCX_*`, F04) must end equal on both pools.", shown_default="`{}`"),
    "speculative": Var("dict", "Per-pool speculative settings (`PoolSpec.speculative` holds the effective value).",
                       shown_default="`glmops_speculative`"),
}

ROUTER_KEYS: dict[str, Var] = {
    "kind": Var("str", "Front door: `none`, `vllm-router`, `trtllm-disaggregated`, `sglang-router`, `dynamo`.",
                default="", shown_default="the engine's own (none for one aggregated replica)"),
    "host": Var("str", "Host that runs it.", default="", shown_default="first host of group `glmops_routers`, else the first worker",
                shape="address"),
    "port": Var("int", "Endpoint port.", default=8000, bounds=(1, 65535), code="PORT", in_rules=True),
    "policy": Var("str", "Engine-neutral routing policy (`round_robin`, `kv_aware`, `cache_aware`, ...).", default="round_robin"),
    "args": Var("dict", "Extra router flags (TensorRT-LLM disagg: disagg_config.yaml keys), checked against the "
                "front door's parser like engine_args.", shown_default="`{}`"),
}

CHECKPOINT_KEYS: dict[str, Var] = {
    "repo": Var("str", "Hugging Face repo id.", shown_default="the catalog variant's repo", shape="repo"),
    "revision": Var("str", "40-hex commit. Unset: the variant's pinned revision, else the download pins the commit it "
                    "fetched. With `offline: true` a branch or tag such as `main` is refused (F12).",
                    shown_default="catalog variant revision", shape="revision"),
    "model_dir": Var("str", "Directory holding checkpoints on each node.", default="/models", shape="path"),
    "mode": Var("str", "How nodes get the weights.", default="fanout", choices=("per_node", "fanout", "shared")),
    "offline": Var("bool", "Serve with `HF_HUB_OFFLINE=1` from the local snapshot.", default=True),
    "allow_patterns": Var("list", "Only download files matching these patterns.", elements="str", shown_default="all files"),
    "size_gib": Var("int", "Size of the checkpoint in GiB: the engines' start timeout (600 s + 10 s/GiB) and the "
                    "prechecks' disk need. Set it for a checkpoint the catalog does not list.", bounds=(1, 1048576),
                    shown_default="the catalog's `weight_gib` of the variant whose repo it is, else of `glmops_variant`"),
}

MONITORING_KEYS: dict[str, Var] = {
    "enabled": Var("bool", "Install Debian's `prometheus` on `host`, scraping the deployment (roles/monitoring).",
                   default=False),
    "host": Var("str", "Host that runs Prometheus.", default="", shown_default="the router/frontend host"),
    "port": Var("int", "Prometheus' listen port (on the host's address only).", default=None,
                shown_default="catalog `monitoring.prometheus.port` (9090)"),
    "scrape_interval": Var("str", "Prometheus scrape and rule evaluation interval.", default="15s", shape="duration"),
    "node_exporter": Var("bool", "Debian's `prometheus-node-exporter` on every host of the deployment, a scrape target "
                         "(role `exporter`).", default=False),
    "dcgm_exporter": Var("bool", "NVIDIA's DCGM exporter (catalog `monitoring.dcgm_exporter`) on every NVIDIA GPU host "
                         "of the Plan, as a hardened unit on the host's address, a scrape target (role `dcgm`); "
                         "needs DCGM's host engine (`nvidia-dcgm.service`) on the host and `dcgm_exporter_archive`.",
                         default=False),
    "dcgm_exporter_archive": Var("str", "Path on the controller to NVIDIA's bare-metal DCGM-Exporter archive "
                                 "`dcgm_exporter-linux-<x86-64|sbsa>-<version>.tar.gz` at the catalog's version "
                                 "(`monitoring.dcgm_exporter.version`); unpacked under `/opt/glmops/dcgm-exporter/`.",
                                 default="", shape="path"),
    "ttft_p99_slo_ms": Var("int", "Alert GlmopsTTFTp99AboveSLO fires when TTFT p99 stays above this.", default=2000,
                           bounds=(1, 3_600_000)),
}

GROUPS = {
    "glmops_workers": "Engine hosts (default: every host).",
    "glmops_routers": "Host for the router/frontend (default: the first worker).",
}


def catalog_choices() -> dict[str, tuple[str, ...]]:
    """Choices that are catalog keys (the catalog is their one source)."""
    from glmops import catalog

    cat = catalog.load()
    variants: list[str] = []
    for model in cat.models.values():
        variants += [v for v in model["variants"] if v not in variants]
    return {
        "glmops_model": tuple(cat.models),
        "glmops_variant": tuple(variants),
        "glmops_engine": tuple(k for k, e in cat.engines.items() if e.get("kind") not in ("router", "backend")),
        "glmops_hardware": tuple(cat.hardware),
        "glmops_strategy": tuple(cat.strategies),
    }


def choices(name: str) -> tuple[str, ...]:
    """Accepted values of variable ``name`` (catalog keys or the Var's own choices; () = free)."""
    cat = catalog_choices()
    if name in cat:
        return cat[name]
    var = VARIABLES.get(name) or HOST_VARIABLES.get(name)
    return tuple(var.choices or ()) if var else ()


def _with_choices(name: str, var: Var) -> Var:
    from dataclasses import replace

    found = choices(name)
    return replace(var, choices=found) if found and not var.choices else var


def _option(var: Var, suboptions: dict[str, Var] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"type": var.type, "description": [var.description]}
    if var.required:
        out["required"] = True
    if var.default is not None:
        out["default"] = var.default
    if var.elements:
        out["elements"] = var.elements
    if var.choices:
        out["choices"] = list(var.choices)
    if suboptions:
        out["options"] = {k: _option(v) for k, v in suboptions.items()}
    return out


def argument_spec() -> dict[str, Any]:
    """The variables as one ``meta/argument_specs.yml`` entry point (``{"short_description",
    "options"}``), for roles that validate glmops variables with ``ansible.builtin.validate_argument_spec``."""
    options = {}
    for name, var in {**VARIABLES, **HOST_VARIABLES}.items():
        sub = CHECKPOINT_KEYS if name == "glmops_checkpoint" else None
        options[name] = _option(_with_choices(name, var), sub)
    return {"short_description": "glmops deployment variables", "options": options}


def _default(var: Var) -> str:
    if var.shown_default is not None:
        return var.shown_default
    if var.required:
        return "(required)"
    if var.default is None:
        return "unset"
    if isinstance(var.default, bool):
        return f"`{str(var.default).lower()}`"
    return f"`{var.default}`"


def _type(var: Var) -> str:
    return f"list of {var.elements}" if var.type == "list" and var.elements else var.type


def _table(rows: dict[str, Var], key_title: str) -> list[str]:
    lines = [f"| {key_title} | type | default | meaning |", "|---|---|---|---|"]
    for name, var in rows.items():
        meaning = var.description
        if var.choices:
            meaning += " Accepted: " + ", ".join(f"`{c}`" for c in var.choices) + "."
        if var.shape:
            meaning += f" Shape: {SHAPE_DOCS[var.shape]}."
        if var.bounds:
            meaning += f" Range: {var.bounds[0]:,}..{var.bounds[1]:,}."
        lines.append(f"| `{name}` | {_type(var)} | {_default(var)} | {meaning.replace('|', chr(92) + '|')} |")
    return lines


def markdown() -> str:
    """docs/variables.md, generated from the tables above."""
    out = [
        "# Inventory variables",
        "",
        "<!-- generated by `python -m glmops.variables > docs/variables.md`; edit glmops/variables.py -->",
        "",
        "glmops reads a normal Ansible inventory (`hosts.yml` + `group_vars/` + `host_vars/`) through Ansible's",
        "own inventory API, with Ansible's precedence. Types are those of `meta/argument_specs.yml` and are",
        "converted the way Ansible converts them (`\"8\"` -> 8, `yes` -> true). A wrong type, an unknown",
        "`glmops_*` variable or an unknown key inside one of the dicts below is reported by `glmops validate`",
        "(codes `TYPE`, `UNKNOWN_KEY`) together with every other problem; nothing is contacted.",
        "A role's own input set in the inventory (`checkpoint_relay_fanout`, `engine_runtime_image_fanout`, ...)",
        "is checked the same way against that role's `meta/argument_specs.yml` with Ansible's",
        "`ArgumentSpecValidator` (code `ROLE_VAR`); a value with Jinja is left to the play.",
        "",
        "## Deployment-wide variables",
        "",
        "Usually in `group_vars/all.yml`. They must resolve to the same value on every worker host",
        "(`HOST_VAR_CONFLICT`).",
        "",
        *_table({k: _with_choices(k, v) for k, v in VARIABLES.items()}, "variable"),
        "",
        "## Pools: `glmops_topologies.<topology>.pools.<role>`",
        "",
        "Roles: `agg`, or `prefill` + `decode` (TensorRT-LLM's `context` / `generation` are accepted and mapped).",
        "",
        *_table(POOL_KEYS, "key"),
        "",
        "## Router: `glmops_topologies.<topology>.router`",
        "",
        *_table(ROUTER_KEYS, "key"),
        "",
        "## Checkpoint: `glmops_checkpoint`",
        "",
        *_table(CHECKPOINT_KEYS, "key"),
        "",
        "## Monitoring: `glmops_monitoring`",
        "",
        "Every deployment has Prometheus scrape targets (`glmops targets`, `plan --out` ->",
        "`_monitoring/file_sd/`, each deploy's run dir -> `file_sd/`): every worker, the router/frontend, the",
        "enabled exporters, labelled `deployment host role pool engine replica service`. Alert rules and",
        "Grafana dashboards ship in `glmops/monitoring/`.",
        "",
        *_table(MONITORING_KEYS, "key"),
        "",
        "## Host variables",
        "",
        "In `host_vars/<host>.yml`, on the host in `hosts.yml`, or on a group whose hosts share them.",
        "`ansible_host` is the SSH address (default: the inventory name).",
        "",
        *_table(HOST_VARIABLES, "variable"),
        "",
        "## Lab metadata",
        "",
        "`glmops lab up` writes these into its inventory (`/var/lib/glmops-lab/<name>/inventory.yml`, group `lab`)",
        "to name the lab; every verb accepts them and nothing plans with them.",
        "",
        *_table(LAB_VARIABLES, "variable"),
        "",
        "## Groups",
        "",
        *[f"- `{name}`: {text}" for name, text in GROUPS.items()],
        "",
        "## Example",
        "",
        "See `inventories/b200/group_vars/all.yml` (TensorRT-LLM, seed 000) and the other inventories.",
        "",
    ]
    return "\n".join(out)


if __name__ == "__main__":  # pragma: no cover
    print(markdown(), end="")
