"""What every engine module shares: the catalog view, recipe resolution, placement
shapes, port allocation and flag rendering.

Engine modules (``trtllm``, ``vllm``, ``sglang``, ``dynamo``) all expose the same two
functions, called by :func:`glmops.plan.build`:

* ``worker(ctx, pool, replica, placement) -> list[Service]``: one Service per node the
  replica spans (rank 0 first; followers get ``start_order`` 5).
* ``router(ctx, workers) -> list[Service]``: the front door (may be empty when a
  single aggregated worker serves the endpoint itself).

Nothing here does I/O except reading the packaged catalog YAML once (cached).
"""
from __future__ import annotations

import copy
import json
import shlex
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from glmops import catalog
from glmops.model import HUB_TOKEN_VARS, ConfigFile, Deployment, HostSpec, PoolSpec
from glmops.runtime import derived_image, engine_pins


# Start order (lower first), see glmops.model.Service.
ORDER_STORE = 1  # Dynamo's discovery store (etcd) and NATS: before every worker
ORDER_FOLLOWER = 5
ORDER_WORKER = 10
ORDER_FRONT = 50

# Default port bases per purpose, used only when neither the inventory nor the
# catalog gives one. Sources: seed 000/002 (8000 front door, workers from 8001),
# reference/serving-clis.md (vLLM --master-port 29501, Dynamo DYN_SYSTEM_PORT).
PORT_BASES = {
    "http": 8001,
    "dist_init": 29501,
    "dp_rpc": 29550,
    "system": 9090,
    "etcd": 2379,
}


# --------------------------------------------------------------------------- catalog


def _catalog_file(name: str) -> dict[str, Any]:
    """The parsed ``glmops/catalog/<name>.yaml``, from the one catalog loader (cached there)."""
    return catalog.load().data.get(name) or {}


class Catalog:
    """Read-only view over ``glmops/catalog/*.yaml`` (models, hardware, engines, recipes).

    Lookups return ``{}`` for unknown keys; rules (``glmops.rules``) report unknown keys
    to the user before a plan is built.
    """

    def engine(self, key: str) -> dict[str, Any]:
        return (_catalog_file("engines").get("engines") or {}).get(key) or {}

    def model(self, key: str) -> dict[str, Any]:
        return (_catalog_file("models").get("models") or {}).get(key) or {}

    def hardware(self, key: str) -> dict[str, Any]:
        return (_catalog_file("hardware").get("hardware") or {}).get(key) or {}

    def recipes(self) -> list[dict[str, Any]]:
        return list(_catalog_file("recipes").get("engine_recipes") or [])

    def transport(self, key: str) -> dict[str, Any]:
        """``engines.yaml:transports.<key>`` (engine-neutral KV transfer facts, e.g. ``ucx``)."""
        return (_catalog_file("engines").get("transports") or {}).get(key) or {}

    def parsers(self, model: str, engine: str) -> dict[str, str]:
        return dict((self.model(model).get("parsers") or {}).get(engine) or {})


CATALOG = Catalog()


# --------------------------------------------------------------------------- recipes


def backend_of(dep: Deployment) -> str:
    """The engine that runs the model: ``dep.engine``, or for Dynamo its worker
    backend (``glmops_dynamo_backend``, default vllm)."""
    if dep.engine == "dynamo":
        return str(dep.dynamo_backend or dep.router.args.get("backend") or "vllm")
    return dep.engine


def _matches(match: dict[str, Any], facts: dict[str, Any]) -> bool:
    for key, want in match.items():
        have = facts.get(key)
        if isinstance(want, list):
            if have not in want:
                return False
        elif have != want:
            return False
    return True


def deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """Return ``base`` updated by ``over``; nested dicts merge, ``None`` in ``over``
    is kept as an explicit null (TRT-LLM ``cuda_graph_config: null``)."""
    out = copy.deepcopy(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


@dataclass
class Recipe:
    """Merged recipe entries for one pool (later, more specific entries win).

    ``settings`` fill Deployment fields left unset (max_seq_len, max_batch_size,
    max_num_tokens, kv_cache_dtype, speculative, parsers); ``args`` are engine flags
    (name without dashes, as the engine spells it); ``config`` engine config keys;
    ``env`` environment; ``kv_transfer`` connector settings; ``ids`` the entries used.
    """

    settings: dict[str, Any] = field(default_factory=dict)
    args: dict[str, Any] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    kv_transfer: dict[str, Any] = field(default_factory=dict)
    ids: list[str] = field(default_factory=list)


def recipe_facts(dep: Deployment, pool: PoolSpec | None = None) -> dict[str, Any]:
    """The facts recipe ``match:`` blocks test: engine, backend, model, variant,
    hardware, vendor, topology, runtime, max_seq_len and (per pool) role, attention_dp."""
    facts: dict[str, Any] = {
        "engine": dep.engine,
        "backend": backend_of(dep),
        "model": dep.model,
        "variant": dep.variant,
        "hardware": dep.hardware,
        "vendor": CATALOG.hardware(dep.hardware).get("vendor"),
        "topology": dep.topology,
        "runtime": dep.runtime,
        "max_seq_len": dep.max_seq_len,
    }
    if pool is not None:
        facts["role"] = pool.role
        facts["attention_dp"] = bool(pool.attention_dp)
    return facts


def resolve_recipe(dep: Deployment, pool: PoolSpec | None = None) -> Recipe:
    """Merge every ``engine_recipes`` entry of ``glmops/catalog/recipes.yaml`` whose
    ``match`` holds for this deployment (and pool), in file order."""
    facts = recipe_facts(dep, pool)
    out = Recipe()
    for entry in CATALOG.recipes():
        match = dict(entry.get("match") or {})
        if pool is None and ("role" in match or "attention_dp" in match):
            continue
        if not _matches(match, facts):
            continue
        out.ids.append(str(entry.get("id", "?")))
        out.settings = deep_merge(out.settings, entry.get("settings") or {})
        out.args.update(copy.deepcopy(entry.get("args") or {}))
        out.config = deep_merge(out.config, entry.get("config") or {})
        out.env.update({k: str(v) for k, v in (entry.get("env") or {}).items()})
        out.kv_transfer = deep_merge(out.kv_transfer, entry.get("kv_transfer") or {})
    return out


# --------------------------------------------------------------------------- settings


@dataclass
class Settings:
    """Engine-neutral settings for one pool after recipe defaults: what the engine
    modules turn into flags. ``speculative`` is ``None`` when off."""

    max_seq_len: int | None
    max_batch_size: int | None
    max_num_tokens: int | None
    kv_cache_dtype: str
    speculative: dict[str, Any] | None
    parsers: bool
    recipe: Recipe


# Settings per (deployment, pool) object while one plan is built (glmops.plan.build clears it).
SETTINGS_CACHE: dict[tuple[int, int], "Settings"] = {}


def settings_for(dep: Deployment, pool: PoolSpec) -> Settings:
    """Deployment values win over recipe defaults; pool speculative wins over both.
    Returns a fresh copy (callers may change it); memoised during one plan build."""
    key = (id(dep), id(pool))
    if key not in SETTINGS_CACHE:
        SETTINGS_CACHE[key] = _settings_for(dep, pool)
    return copy.deepcopy(SETTINGS_CACHE[key])


def _settings_for(dep: Deployment, pool: PoolSpec) -> Settings:
    rec = resolve_recipe(dep, pool)
    s = rec.settings
    spec = pool.speculative if pool.speculative is not None else dep.speculative
    if spec is None:
        spec = s.get("speculative")
    if spec and str(spec.get("method", "")).lower() in ("", "none", "off"):
        spec = None
    kv = dep.kv_cache_dtype
    if kv in ("", "auto", None) and s.get("kv_cache_dtype"):
        kv = s["kv_cache_dtype"]
    return Settings(
        max_seq_len=dep.max_seq_len if dep.max_seq_len is not None else s.get("max_seq_len"),
        max_batch_size=dep.max_batch_size if dep.max_batch_size is not None else s.get("max_batch_size"),
        max_num_tokens=dep.max_num_tokens if dep.max_num_tokens is not None else s.get("max_num_tokens"),
        kv_cache_dtype=kv or "auto",
        speculative=copy.deepcopy(spec) if spec else None,
        parsers=bool(s.get("parsers", True)),
        recipe=rec,
    )


def setting_flags(st: "Settings", names: dict[str, str]) -> dict[str, Any]:
    """``{flag: value}`` for each Settings attribute named in ``names`` (attribute -> the engine's
    flag) that is set (not None), in ``names``' order: the limits every engine spells its own way
    (``max_seq_len``, ``max_batch_size``, ``max_num_tokens``)."""
    return {flag: getattr(st, attr) for attr, flag in names.items() if getattr(st, attr) is not None}


def engine_kv_dtype(engine_key: str, value: str) -> str:
    """Map a glmops KV dtype name to the engine's spelling (catalog ``kv_cache_dtype.aliases``)."""
    aliases = (CATALOG.engine(engine_key).get("kv_cache_dtype") or {}).get("aliases") or {}
    return str(aliases.get(value, value))


# --------------------------------------------------------------------------- placement


@dataclass
class NodeSlot:
    """One node of a replica: the host, the GPU indices used there, the node rank."""

    host: HostSpec
    gpus: list[int]
    rank: int = 0


@dataclass
class Placement:
    """Where one replica of a pool runs. ``nodes[0]`` is the head (node rank 0)."""

    pool: PoolSpec
    replica: int
    nodes: list[NodeSlot]
    name: str
    # HTTP port asked for: pool ``port`` (+ replicas of the pool already on that host),
    # or the front door's port when this single worker is the endpoint; None = allocate.
    http_want: int | None = None

    @property
    def head(self) -> NodeSlot:
        return self.nodes[0]

    @property
    def nnodes(self) -> int:
        return len(self.nodes)


class PortAllocator:
    """Deterministic per-host port assignment.

    ``take(purpose, base, count)`` returns ``count`` consecutive ports starting at the
    first free ``base + k``. ``want=`` forces a user-chosen start (even when it collides,
    so ``glmops.rules`` can report the collision, F05).
    """

    def __init__(self) -> None:
        self.used: set[int] = set()

    def take(self, base: int, count: int = 1, want: int | None = None) -> list[int]:
        if want is not None:
            ports = list(range(int(want), int(want) + count))
        else:
            start = int(base)
            while any(p in self.used for p in range(start, start + count)):
                start += 1
            ports = list(range(start, start + count))
        self.used.update(ports)
        return ports


@dataclass
class Ctx:
    """What engine modules get besides the pool: the deployment, port allocators per
    host, and the front door's port."""

    dep: Deployment
    ports: dict[str, PortAllocator]
    front_port: int
    front_host: str = ""
    hosts_used: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # the front door glmops.engines.registry.router_kind computed (kind, engine-neutral policy)
    # and whether workers publish KV events for it: engines read these, not glmops.plan
    front_kind: str = ""
    front_policy: str = "round_robin"
    kv_events: bool = False

    def alloc(self, host: str) -> PortAllocator:
        return self.ports.setdefault(host, PortAllocator())


# --------------------------------------------------------------------------- helpers


def engine_version(dep: Deployment, engine_key: str) -> str:
    """``glmops_engine_version`` for the deployment's own engine, else the catalog's."""
    if engine_key == dep.engine and dep.engine_version:
        return dep.engine_version
    return str(CATALOG.engine(engine_key).get("version") or "")


def venv_dir(dep: Deployment, engine_key: str) -> str:
    """``/opt/glmops/venvs/<engine>-<version>`` (engine key with ``_`` -> ``-``)."""
    return f"{dep.venv_root}/{engine_key.replace('_', '-')}-{engine_version(dep, engine_key)}"


def command(dep: Deployment, engine_key: str, binary: str | None = None, runtime: str | None = None) -> list[str]:
    """The engine's launch words (catalog ``binary``, e.g. ``python -m dynamo.frontend``).

    venv runtime: the first word is taken from the engine's venv ``bin/``; container
    runtime: left bare for the image's PATH.
    """
    words = list(_split(binary or str(CATALOG.engine(engine_key).get("binary") or engine_key)))
    if (runtime or dep.runtime) == "venv" and "/" not in words[0]:
        words[0] = f"{venv_dir(dep, engine_key)}/bin/{words[0]}"
    return words


@lru_cache(maxsize=64)
def _split(text: str) -> tuple[str, ...]:
    return tuple(shlex.split(text))


def image_for(dep: Deployment, engine_key: str) -> str:
    """The image the container runtime runs: the seed's image (:func:`seed_image`) or, when the
    engine has pins (glmops.runtime.engine_pins: seed 000's fla-core/einops, the multimodal
    transformers pin, glmops_pip_extra), the derived image roles/engine_runtime builds from it,
    tagged by content (glmops.runtime.derived_image). Empty for venv runtime."""
    image = seed_image(dep, engine_key)
    if not image:
        return ""
    try:
        return derived_image(engine_key, engine_version(dep, engine_key), image, engine_pins(dep, engine_key))["tag"]
    except ValueError:  # an unsafe pin or image: roles/engine_runtime refuses it, naming it
        return image


def image_overlay(dep: Deployment, engine_key: str) -> tuple[list[ConfigFile], dict[str, str]]:
    """Files and env a seed's image needs beside it (catalog ``engines.<engine_key>.image_overlays``:
    ``images`` the entry is for, ``file`` name, ``content``, ``env`` = the search-path variable that
    names the deployment's config dir, ``source``), for the image the container runtime runs
    (:func:`seed_image`; the derived image keeps the seed's as its base). The file lies in
    ``<config_dir>/<deployment>/``, which every container mounts read-only at the same path
    (``glmops.render.container_argv``). ``([], {})`` for venv runtime or another image.
    Seed 001 line 218: the GLM vLLM image's sitecustomize.py overlay that disables cuDNN."""
    image = seed_image(dep, engine_key)
    files: list[ConfigFile] = []
    env: dict[str, str] = {}
    if not image:
        return files, env
    directory = f"{dep.config_dir}/{dep.name}"
    for entry in CATALOG.engine(engine_key).get("image_overlays") or []:
        if image not in [str(i) for i in entry.get("images") or []]:
            continue
        files.append(ConfigFile(path=f"{directory}/{entry['file']}", content=str(entry["content"]), format="text"))
        env[str(entry["env"])] = directory
    return files, env


def seed_image(dep: Deployment, engine_key: str) -> str:
    """Container image: catalog ``image_by_model``, then ``image_by_vendor``, then
    ``default_image``; ``dep.image`` overrides. Empty for venv runtime."""
    if dep.runtime != "container":
        return ""
    if dep.image:
        return str(dep.image)
    eng = CATALOG.engine(engine_key)
    vendor = CATALOG.hardware(dep.hardware).get("vendor")
    return str(
        (eng.get("image_by_model") or {}).get(dep.model)
        or (eng.get("image_by_vendor") or {}).get(vendor)
        or eng.get("default_image")
        or ""
    )


def render_flags(args: dict[str, Any], style: str = "-") -> list[str]:
    """Turn ``{flag: value}`` into argv words.

    ``True`` -> bare ``--flag``; ``False``/``None`` -> omitted; dict/list-of-dicts ->
    compact JSON; list -> ``--flag v1 v2`` (nargs); anything else -> ``str(value)``.
    ``style`` is only used to normalise keys given with the other separator.
    """
    out: list[str] = []
    for key, value in args.items():
        if value is None or value is False:
            continue
        flag = "--" + key.lstrip("-")
        if value is True:
            out.append(flag)
        elif isinstance(value, dict):
            out += [flag, json.dumps(value, separators=(",", ":"))]
        elif isinstance(value, (list, tuple)):
            out.append(flag)
            out += [json.dumps(v, separators=(",", ":")) if isinstance(v, dict) else str(v) for v in value]
        elif isinstance(value, float):
            out += [flag, f"{value:g}" if value != int(value) else f"{value:.2f}".rstrip("0").rstrip(".")]
        else:
            out += [flag, str(value)]
    return out


def merge_args(*layers: dict[str, Any]) -> dict[str, Any]:
    """Later layers win; a key set to ``None`` in a later layer removes the flag."""
    out: dict[str, Any] = {}
    for layer in layers:
        for key, value in (layer or {}).items():
            key = key.lstrip("-")
            out.pop(key, None)
            out[key] = value
    return {k: v for k, v in out.items() if v is not None}


def offline_env(dep: Deployment) -> dict[str, str]:
    """F12: serve from the local snapshot without the hub."""
    if not dep.checkpoint.offline:
        return {}
    return {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def ucx_net_devices(hosts: list[HostSpec]) -> str | None:
    """F06: ``mlx5_0:1,mlx5_1:1`` from the host's RDMA devices (port 1 unless given)."""
    devs: list[str] = []
    for host in hosts:
        for dev in host.rdma_devices:
            name = dev if ":" in dev else f"{dev}:1"
            if name not in devs:
                devs.append(name)
    return ",".join(devs) if devs else None


def ucx_uses_rdma(tls: str | None) -> bool:
    """Whether UCX may move data over RDMA NICs with ``UCX_TLS`` = ``tls``: unset (UCX's default
    ``all``), a ``^`` exclusion list, or a list naming one of the catalog's
    ``transports.ucx.rdma_tls`` (rc, ud, dc, ib, ...). False for e.g. ``cuda_copy,tcp``."""
    if tls is None or not str(tls).strip() or str(tls).strip().startswith("^"):
        return True
    rdma = {str(t).lower() for t in CATALOG.transport("ucx").get("rdma_tls") or []}
    return any(t.strip().lower() in rdma for t in str(tls).split(","))


def pool_ucx_rdma(dep: Deployment, pool: PoolSpec) -> bool:
    """:func:`ucx_uses_rdma` of the pool's effective ``UCX_TLS`` (recipe env, then the inventory's
    deployment and pool env, as :func:`base_env` layers them)."""
    env = {**settings_for(dep, pool).recipe.env, **dep.env, **pool.env}
    return ucx_uses_rdma(env.get("UCX_TLS"))


def without_rdma_devices(env: dict[str, str], dep: Deployment, pool: PoolSpec) -> dict[str, str]:
    """``env`` without ``UCX_NET_DEVICES`` when its ``UCX_TLS`` names no RDMA transport (seed 001
    GB200: ``cuda_copy,tcp``) and the inventory does not set it itself: the RDMA ports of
    ``glmops_rdma_devices`` (or an engine's ``all`` pin) do not belong beside a TCP path (D3)."""
    if ucx_uses_rdma(env.get("UCX_TLS")) or "UCX_NET_DEVICES" in {**dep.env, **pool.env}:
        return env
    return {k: v for k, v in env.items() if k != "UCX_NET_DEVICES"}


def transport_env(dep: Deployment, hosts: list[HostSpec], prefixes: tuple[str, ...]) -> dict[str, str]:
    """The KV-transport env both disaggregated pools carry identically (F04/F06):
    ``UCX_NET_DEVICES`` from the host's RDMA devices plus every deployment-level env
    var with one of ``prefixes``."""
    env: dict[str, str] = {}
    net = ucx_net_devices(hosts)
    if net:
        env["UCX_NET_DEVICES"] = net
    for key, value in dep.env.items():
        if key.startswith(prefixes):
            env[key] = str(value)
    return env


def service_name(dep: Deployment, role: str, replica: int | None = None, node: int = 0) -> str:
    """``glm-<dep>-<role>[-<replica>][-n<node>]`` (node suffix only for followers)."""
    name = f"glm-{dep.name}-{role}"
    if replica is not None:
        name += f"-{replica}"
    if node:
        name += f"-n{node}"
    return name


def metrics_url(engine_key: str, address: str, ports: dict[str, list[int]], which: str = "port") -> str:
    """Where ``engine_key`` serves Prometheus text: catalog ``engines.<engine>.metrics`` names the
    port purpose (``which``: ``port``, or ``worker_port`` for Dynamo workers) and the path; ``""``
    when the engine has no Prometheus route or the service lacks that port."""
    spec = CATALOG.engine(engine_key).get("metrics") or {}
    purpose = spec.get(which)
    if not purpose or not ports.get(purpose):
        return ""
    return url(address, ports[purpose][0], str(spec.get("path") or "/metrics"))


def router_host(ctx: Ctx, workers: list) -> HostSpec:
    """The front door's host: RouterSpec.host, else the first worker's host, else the first host."""
    dep = ctx.dep
    name = dep.router.host or (workers[0].host if workers else next(iter(dep.hosts)))
    return dep.hosts[name]


def url(address: str, port: int, path: str = "") -> str:
    """``http://address:port/path`` (IPv6 addresses bracketed)."""
    host = f"[{address}]" if ":" in address else address
    return f"http://{host}:{port}{path}"


def base_env(dep: Deployment, pool: PoolSpec | None, rec: Recipe | None, engine_key: str) -> dict[str, str]:
    """Env every worker of ``engine_key`` gets, lowest precedence first: catalog pins,
    per-model pins, recipe env, deployment env, pool env, offline flags."""
    eng = CATALOG.engine(engine_key)
    env: dict[str, str] = {}
    env.update({k: str(v) for k, v in (eng.get("env") or {}).items()})
    env.update({k: str(v) for k, v in ((eng.get("env_by_model") or {}).get(dep.model) or {}).items()})
    if CATALOG.hardware(dep.hardware).get("vendor") == "amd":
        env.update({k: str(v) for k, v in (eng.get("rocm_env") or {}).items()})
    if rec:
        env.update(rec.env)
    env.update({k: str(v) for k, v in dep.env.items()})
    if pool:
        env.update({k: str(v) for k, v in pool.env.items()})
    env.update(offline_env(dep))
    for key in HUB_TOKEN_VARS:  # F12: serving is offline; a hub token never reaches a unit
        env.pop(key, None)
    return env


def api_key_env(engine_key: str) -> str:
    """The environment variable through which ``engine_key`` (an engine or front door) reads the
    deployment's API key (catalog ``engines.<engine>.api_key.env``); ``""`` when it has no key
    mechanism outside argv (glmops.rules: API_KEY_UNSUPPORTED)."""
    return str((CATALOG.engine(engine_key).get("api_key") or {}).get("env") or "")


def api_key_open_door(engine_key: str) -> str:
    """Why a front door that takes the key does not check it on the clients' requests itself
    (catalog ``api_key.checks_clients: false``, its ``says``); ``""`` when it checks (or is a worker)."""
    spec = CATALOG.engine(engine_key).get("api_key") or {}
    return str(spec.get("says") or "").strip() if spec.get("checks_clients") is False else ""


def api_key_engines() -> list[str]:
    """``engine (VAR)`` for every catalog engine or front door that reads the key from its environment."""
    engines = _catalog_file("engines").get("engines") or {}
    return [f"{k} ({v['api_key']['env']})" for k, v in engines.items()
            if isinstance(v, dict) and (v.get("api_key") or {}).get("env")]


def api_key_says(engine_key: str) -> str:
    """Why ``engine_key`` cannot take the key from its env file (catalog ``api_key.says``)."""
    return str((CATALOG.engine(engine_key).get("api_key") or {}).get("says") or "").strip()


def front_env(dep: Deployment) -> dict[str, str]:
    """Env of a router/orchestrator/frontend: the deployment's env without worker
    transport/device/engine settings and without hub tokens."""
    drop = ("UCX_", "NIXL_", "CUDA_", "HIP_", "VLLM_", "MC_", "TRTLLM_")
    return {k: str(v) for k, v in dep.env.items() if not k.startswith(drop) and k not in HUB_TOKEN_VARS}


def visible_devices(dep: Deployment, gpus: list[int]) -> dict[str, str]:
    """``CUDA_VISIBLE_DEVICES`` (NVIDIA) / ``HIP_VISIBLE_DEVICES`` (AMD); none on CPU."""
    vendor = CATALOG.hardware(dep.hardware).get("vendor")
    if not gpus or vendor in (None, "none"):
        return {}
    key = "HIP_VISIBLE_DEVICES" if vendor == "amd" else "CUDA_VISIBLE_DEVICES"
    return {key: ",".join(str(g) for g in gpus)}


#: a worker's start allowance: START_BASE_S plus START_S_PER_GIB per GiB of its checkpoint
START_BASE_S, START_S_PER_GIB = 600, 10


def checkpoint_timeout_s(dep: Deployment) -> int:
    """``TimeoutStartSec=`` of a worker unit (seconds): ``glmops_readiness_timeout_s``, or
    600 s + 10 s per GiB of the checkpoint the Plan loads when that is longer.

    The size is ``dep.checkpoint.size_gib`` as ``glmops.inventory`` read it:
    ``glmops_checkpoint.size_gib``, else ``weight_gib`` in ``glmops/catalog/models.yaml`` of the
    variant whose checkpoint the planned repo is (``Catalog.weight_gib``), else (a repo the catalog
    does not list) the planned variant's. See :func:`start_timeout_note` for what ``glmops plan``
    says about it."""
    return int(max(dep.readiness_timeout_s, START_BASE_S + START_S_PER_GIB * float(dep.checkpoint.size_gib or 0)))


def start_timeout_note(dep: Deployment) -> str:
    """The plan's line on :func:`checkpoint_timeout_s`: the seconds, the rule (the longer of the
    readiness timeout and 600 s + 10 s/GiB) with its inputs, the checkpoint and where its size is
    from (and, for a repo the catalog does not list, how to give the real size)."""
    ck, timeout = dep.checkpoint, checkpoint_timeout_s(dep)
    size = float(ck.size_gib or 0)
    why = {"inventory": f"checkpoint {ck.repo}, {size:g} GiB from glmops_checkpoint.size_gib",
           "catalog": f"checkpoint {ck.repo}, {size:g} GiB",
           "assumed": f"the catalog does not list checkpoint {ck.repo}: the variant's {size:g} GiB assumed; "
                      "set glmops_checkpoint.size_gib to its size"}.get(ck.size_from, f"checkpoint {ck.repo}")
    return (f"start timeout per worker: {timeout} s, the longer of glmops_readiness_timeout_s "
            f"({dep.readiness_timeout_s} s) and {START_BASE_S} s + {START_S_PER_GIB} s/GiB x {size:g} GiB ({why})")
