"""The typed shapes that flow through glmops.

inventory (Ansible) -> :class:`Deployment` -> rules -> :class:`Plan` -> playbooks/roles -> hosts

Everything here is plain data (dataclasses), cheap to import, with no I/O.
``glmops.inventory`` builds a Deployment, ``glmops.rules`` returns
:class:`Problem` lists for it, and ``glmops.plan`` turns it into a Plan.
"""
from __future__ import annotations

import re

from dataclasses import MISSING, asdict, dataclass, field, fields
from typing import Any, Literal

Topology = Literal["agg", "disagg"]
# Pool roles use vLLM/SGLang names; TensorRT-LLM calls prefill "context" and
# decode "generation" (seed 000) and its engine module maps them.
PoolRole = Literal["agg", "prefill", "decode"]
ServiceRole = Literal["agg", "prefill", "decode", "router", "orchestrator", "frontend", "store"]
Runtime = Literal["venv", "container"]



#: a control character (newline, tab, NUL ...): never valid in a value that lands in a unit or env file
CONTROL_CHARS = re.compile(r"[\x00-\x1f\x7f]")
#: an environment variable name (letters, digits, _; not starting with a digit)
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")
#: a key or path segment that names a secret: HF_TOKEN, hf-token, api-key, control-plane-api-keys,
#: VLLM_API_KEY, OPENAI_KEY, PRIVATE_KEY, DB_PASS, password, ssl-keyfile-password, secret,
#: credentials. ``token`` and a bare ``key``/``pass`` count only as the last segment (``*-token-threshold``,
#: ``speculative-token-map``, ``max-num-batched-tokens``, ``forward-pass-metrics`` and ``disagg-config-key``
#: are counts, maps and names, not secrets), ``allow-credentials`` (CORS) is a switch. The one
#: home of the secret patterns (:func:`is_secret`, :func:`secret_paths`): glmops.inventory, glmops.rules,
#: ``plan --format`` and glmops.runner use it.
_END = r"($|[.\]\[])"
_SEP = r"($|[-_.:\]\[])"


def _secret_name(bare_key: str) -> "re.Pattern[str]":
    """:data:`SECRET_NAME` with ``bare_key`` as the alternative for a ``key``/``keys`` that no
    credential word (``api``, ``private``, ...) qualifies."""
    return re.compile(
        r"(^|[-_.:])("
        rf"(api|private|access|secret|auth|signing|encryption|master|admin)[-_]?keys?{_SEP}"
        rf"|{bare_key}"
        rf"|(?<!per[-_])(?<!first[-_])(?<!next[-_])(?<!last[-_])(?<!bos[-_])(?<!eos[-_])(?<!pad[-_])token{_END}"
        rf"|(auth|access|bearer|refresh|session)[-_]?tokens?{_SEP}"
        rf"|pass{_END}|pass(word|wd|phrase){_SEP}|secrets?{_SEP}|(?<!allow[-_])credentials?{_SEP}"
        rf"|authorization{_SEP})", re.IGNORECASE)


SECRET_NAME = _secret_name(rf"(?<!config[-_])(?<!cache[-_])(?<!sort[-_])(?<!hash[-_])keys?{_END}")
#: an engine flag or config key name that names a secret (SECRET_IN_ARGV, :func:`secret_paths`):
#: as :data:`SECRET_NAME`, but a bare ``key``/``keys`` counts only as a whole name or dotted-path
#: segment (``key``, ``auth.key``), not as the last word of a compound name: ``prefix_key``,
#: ``kv_cache_key``, ``routing-key`` name lookup keys in an engine's config, not credentials (D8).
#: Environment variable names keep :data:`SECRET_NAME` (``OPENAI_KEY`` is a credential there).
SECRET_OPTION_NAME = _secret_name(rf"(?<![^.\]\[])keys?{_END}")
#: the Hugging Face hub's credential variables: never written into a service's env (F12; serving is
#: offline, the download reads its own 0600 file)
HUB_TOKEN_VARS = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_TOKEN")
#: a value that is a secret whatever its name: a URL with a password (``scheme://user:pass@host``),
#: a Hugging Face or OpenAI-style token, a PEM private key
#: Linear time on any input (a 100,000-character value): a scheme starts only where no scheme
#: character precedes it, and every repetition is possessive (``*+``, ``++``), so no start position
#: rescans what another one already did (catastrophic backtracking, issue: adversarial probe item 3).
SECRET_VALUE = re.compile(
    r"(?<![A-Za-z0-9+.-])[A-Za-z][A-Za-z0-9+.-]*+://[^/\s:@]*+:[^/\s@]++@"
    r"|(?<![A-Za-z0-9])(?:hf_[A-Za-z0-9]{30,}+|sk-[A-Za-z0-9_-]{20,}+)"
    r"|-----BEGIN [A-Z ]*+(?<=PRIVATE KEY)-----")


_SECRET_VALUE_TOKEN = re.compile(
    r"(?<=://)[^/\s:@'\"]*+:[^/\s@'\"]++(?=@)|hf_[A-Za-z0-9]{30,}+|sk-[A-Za-z0-9_-]{20,}+"
    r"|-----BEGIN [A-Z ]*+(?<=PRIVATE KEY)-----[^'\"]*+")


#: how much of a long value a problem message shows (:func:`clip`)
CLIP_CHARS = 80
#: a quoted value in a message (a ``repr``): linear, the two alternatives never overlap
_QUOTED = re.compile(r"'(?:[^'\\]|\\.)*+'|\"(?:[^\"\\]|\\.)*+\"")


#: a quoted span of a problem's text longer than this is a value, shortened by Problem
_CLIP_QUOTED = 400


def clip(text: str, limit: int = CLIP_CHARS) -> str:
    """``text`` when at most ``limit`` characters, else its first ``limit`` characters and
    ``…(N chars)`` (a ``repr`` keeps its closing quote): a 100,000-character value is not
    repeated whole in a problem."""
    if len(text) <= limit + 16:
        return text
    quote = text[0] if len(text) > 1 and text[0] in "'\"" and text[-1] == text[0] else ""
    return f"{text[:limit]}…{quote}({len(text):,} chars)"


def _scrub(text: str) -> str:
    """``text`` with every secret-shaped part (:data:`SECRET_VALUE`) replaced by ``<redacted>``."""
    return _SECRET_VALUE_TOKEN.sub("<redacted>", text)


def is_secret(name: str, value: object = None, secret_values: "set[str] | frozenset[str]" = frozenset()) -> bool:
    """True when ``name`` (a key or dotted path) names a secret (:data:`SECRET_NAME`) or the
    string ``value`` is one (:data:`SECRET_VALUE`, or one of ``secret_values``: values read
    from Ansible Vault); a list or mapping is secret when any item (or key) is."""
    if SECRET_NAME.search(str(name)):
        return True
    if isinstance(value, dict):
        return any(is_secret(k, v, secret_values) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return any(is_secret("", v, secret_values) for v in value)
    if isinstance(value, (str, int, float)) and not isinstance(value, bool):
        text = str(value)
        return bool(SECRET_VALUE.search(text)) or text in secret_values
    return False


def _holds_secret(value: Any, secret_values: "set[str] | frozenset[str]") -> bool:
    """A value of an engine flag or config key that is or carries a secret: a nested mapping
    with a secret path (:func:`secret_paths`), a list with such an item, a secret value."""
    if isinstance(value, dict):
        return bool(secret_paths(value, "", secret_values))
    if isinstance(value, (list, tuple)):
        return any(_holds_secret(v, secret_values) for v in value)
    return is_secret("", value, secret_values)


def secret_paths(data: Any, prefix: str = "", secret_values: "set[str] | frozenset[str]" = frozenset()) -> list[str]:
    """Dotted paths of the keys under ``data`` (nested mappings: engine flags, config keys) that
    name a secret (:data:`SECRET_OPTION_NAME`) or whose value (or a list item of it) is one
    (:func:`is_secret`: a URL with a password, a token, a Vault value). ``[]`` for anything but
    a mapping."""
    found = []
    if isinstance(data, dict):
        for key, value in data.items():
            path = f"{prefix}.{key}" if prefix else str(key)
            items = value if isinstance(value, list) else [value]
            if SECRET_OPTION_NAME.search(str(key).lstrip("-")) or any(_holds_secret(v, secret_values) for v in items):
                found.append(path)
            found += secret_paths(value, path, secret_values)
    return found


def set_in(path: str) -> str:
    """Where a hint tells the user to fix the value at ``path`` (a Problem's ``path`` as
    ``glmops.inventory`` labels it), as words that follow a verb: ``given with -e`` for
    ``-e:<key>``, ``in FILE (the file given with -e @FILE)`` for ``-e @FILE:<key>``,
    ``in FILE`` for ``FILE:<key path>``, else ``in the inventory``."""
    if path.startswith("-e @"):
        file = path[len("-e @"):].rpartition(":")[0]
        return f"in {file} (the file given with -e @{file})" if file else "given with -e"
    if path == "-e" or path.startswith("-e:"):
        return "given with -e"
    file, sep, _ = path.rpartition(":")
    return f"in {file}" if sep and file and not file.startswith("host ") else "in the inventory"


@dataclass(frozen=True)
class Problem:
    """One thing wrong with the input, found before any host is touched.

    ``code`` is stable (e.g. ``GPU_COUNT``, ``F03_FP8_KV_HOPPER``); ``path`` is the
    inventory path of the offending key (e.g. ``group_vars/all.yml:glmops_pools.prefill.tp``
    or ``host gpu-a: glmops_gpus``); ``message`` names the value found and what is
    accepted; ``hint`` says how to fix it.
    """

    code: str
    path: str
    message: str
    hint: str = ""
    #: ``error`` (the input is refused) or ``warning`` (a deviation from a seed's recipe that the
    #: engine accepts: printed, exit 0; ``--strict`` makes it an error)
    severity: str = "error"

    def __post_init__(self) -> None:
        # a value that is a secret by its shape (a URL with a password, a token) is never
        # repeated in a problem, whichever rule quotes it; a huge quoted value is shortened
        for name in ("path", "message", "hint"):
            text = getattr(self, name)
            if isinstance(text, str) and SECRET_VALUE.search(text):
                text = _scrub(text)
            if isinstance(text, str) and len(text) > _CLIP_QUOTED:
                # a quoted value longer than any sentence (not an apostrophe of the prose to a quote)
                text = _QUOTED.sub(lambda m: clip(m.group(0)) if len(m.group(0)) > _CLIP_QUOTED else m.group(0), text)
            object.__setattr__(self, name, text)

    @property
    def is_warning(self) -> bool:
        return self.severity == WARNING

    def __str__(self) -> str:
        text = f"[{self.code}] {self.path}: {self.message}"
        text = f"warning {text}" if self.is_warning else text
        return f"{text} (hint: {self.hint})" if self.hint else text


#: :attr:`Problem.severity` of a warning
WARNING = "warning"


def split_problems(problems: "list[Problem]", strict: bool = False) -> "tuple[list[Problem], list[Problem]]":
    """(errors, warnings) of ``problems``; with ``strict`` every warning is an error too
    (``glmops validate --strict``), so the second list is empty."""
    if strict:
        return list(problems), []
    return [p for p in problems if not p.is_warning], [p for p in problems if p.is_warning]


class ValidationError(Exception):
    """Raised with every problem found at once; the CLI exits 2."""

    def __init__(self, problems: list[Problem]):
        self.problems = list(problems)
        super().__init__("\n".join(str(p) for p in self.problems))


@dataclass
class HostSpec:
    """One inventory host that may run services.

    ``address`` is the address services bind to and advertise (``glmops_address``,
    else ``ansible_host``, else the inventory name). ``gpus`` are the GPU indices
    glmops may use (``glmops_gpus``, default ``range(hardware.gpus_per_node)``).
    """

    name: str
    address: str
    gpus: list[int] = field(default_factory=list)
    rdma_devices: list[str] = field(default_factory=list)
    #: ``glmops_socket_ifname``: the interface NCCL/Gloo use across hosts (F17); empty = the one
    #: that holds ``address`` on the host, found by the deploy (glmops.netif)
    socket_ifname: str = ""
    hardware: str = ""
    groups: list[str] = field(default_factory=list)
    vars: dict[str, Any] = field(default_factory=dict)


@dataclass
class PoolSpec:
    """A set of identical engine replicas with one role.

    Parallelism per replica: ``tp`` x ``pp`` x ``dp`` GPUs (``ep`` and
    ``attention_dp`` re-use those GPUs). ``hosts`` restricts placement to these
    inventory hosts (default: every host in group ``glmops_workers``, or all);
    ``gpus`` pins the GPU indices per replica on a host when given (seed 000:
    context 0-3, generation 4-7). ``engine_args`` are CLI flag overrides (flag name
    without dashes, as the engine spells it), ``engine_config`` are YAML/JSON config
    key overrides (TRT-LLM ``--config`` keys), ``env`` adds environment variables.
    """

    role: PoolRole
    tp: int = 1
    pp: int = 1
    ep: int = 1
    dp: int = 1
    attention_dp: bool = False
    replicas: int = 1
    hosts: list[str] = field(default_factory=list)
    gpus: list[int] = field(default_factory=list)
    port: int | None = None
    engine_args: dict[str, Any] = field(default_factory=dict)
    engine_config: dict[str, Any] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    speculative: dict[str, Any] | None = None

    @property
    def world_size(self) -> int:
        return self.tp * self.pp * self.dp


def checkpoint_dir(model_dir: str, repo: str, revision: str | None) -> str:
    """A checkpoint's snapshot directory on the hosts: ``<model_dir>/<repo>/<revision>``
    (``<model_dir>/<repo>`` while the revision is unpinned)."""
    return f"{model_dir.rstrip('/') or ''}/{repo}" + (f"/{revision}" if revision else "")


#: a Hugging Face repo id (``owner/name``)
REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*\Z")


@dataclass
class CheckpointSpec:
    """Where the weights come from and where they live on each node.

    ``repo`` and ``revision`` (a 40-hex commit, F12) come from the catalog variant
    or the inventory override; ``local_dir`` is ``<model_dir>/<repo>/<revision>``.
    ``mode``: per_node | fanout | shared. ``kind``: ``model`` (the served weights) or
    ``drafter`` (a speculative drafter's own checkpoint, :meth:`Deployment.drafters`).
    """

    repo: str
    revision: str | None
    model_dir: str
    local_dir: str
    size_gib: float = 0.0
    #: where ``size_gib`` comes from, for the plan's note: ``inventory`` (glmops_checkpoint.size_gib),
    #: ``catalog`` (the weight_gib of the variant whose repo it is) or ``assumed`` (a repo the catalog
    #: does not list: the planned variant's weight_gib)
    size_from: str = "catalog"
    allow_patterns: list[str] = field(default_factory=list)
    mode: str = "fanout"
    offline: bool = True
    kind: str = "model"


@dataclass
class RouterSpec:
    """The front door: vllm-router, ``trtllm-serve disaggregated``, SGLang router or
    Dynamo frontend, on ``host`` (default: the first worker host) at ``port``."""

    kind: str = ""
    host: str = ""
    port: int = 8000
    policy: str = "round_robin"
    args: dict[str, Any] = field(default_factory=dict)


@dataclass
class Deployment:
    """The user's intent, read from one Ansible inventory (see ``glmops.inventory``).

    ``sources`` maps each user-facing key to where it was read from, so problems can
    name the inventory path.
    """

    name: str
    model: str
    variant: str
    engine: str
    topology: Topology
    hardware: str
    runtime: Runtime
    hosts: dict[str, HostSpec]
    pools: list[PoolSpec]
    checkpoint: CheckpointSpec
    router: RouterSpec
    served_model_name: str = ""
    engine_version: str = ""
    kv_cache_dtype: str = "auto"
    max_seq_len: int | None = None
    max_batch_size: int | None = None
    max_num_tokens: int | None = None
    multimodal: bool = False
    video: bool = False
    speculative: dict[str, Any] | None = None
    engine_args: dict[str, Any] = field(default_factory=dict)
    engine_config: dict[str, Any] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    service_user: str = "glmops"
    state_dir: str = "/var/lib/glmops"
    config_dir: str = "/etc/glmops"
    venv_root: str = "/opt/glmops/venvs"
    readiness_timeout_s: int = 1800
    sources: dict[str, str] = field(default_factory=dict)
    # what the inventory read found beside the intent (glmops.inventory fills these)
    problems: list[Problem] = field(default_factory=list)  # type/shape problems of the read, for rules.check
    inventory_path: str = "inventory"  # the inventory as given (problems of the whole Plan name it)
    inventory_dir: str = ""  # its directory, as displayed
    worker_hosts: list[str] = field(default_factory=list)  # hosts in group glmops_workers
    router_hosts: list[str] = field(default_factory=list)  # hosts in group glmops_routers
    dynamo_backend: str | None = None  # glmops_dynamo_backend: vllm | sglang | mocker
    dynamo_etcd_hosts: list[str] = field(default_factory=list)  # glmops_dynamo_etcd_hosts, expanded
    dynamo_request_plane: str | None = None  # glmops_dynamo_request_plane
    dynamo_event_plane: str | None = None  # glmops_dynamo_event_plane
    image: str | None = None  # glmops_image: container image override
    pip_extra: list[str] = field(default_factory=list)  # glmops_pip_extra: PEP 508 specs
    layout: str | None = None  # id of the catalog layout that gave the pools (recipes.yaml:layouts)
    strategy: str | None = None  # glmops_strategy: seed 004's strategy that gave the pools (recipes.yaml:strategies)
    nodes: int | None = None  # the nodes that strategy spans (glmops_nodes, else the workers / 1)
    monitoring: dict[str, Any] = field(default_factory=dict)  # glmops_monitoring settings as given
    raw_variables: list[str] = field(default_factory=list)  # every glmops_* variable the inventory set
    secret_values: frozenset[str] = field(default=frozenset(), repr=False)  # plain values read from Ansible Vault: secret by value
    # glmops_api_key: the key clients present (Authorization: Bearer); each engine/front door gets it through
    # its own environment variable (catalog engines.<engine>.api_key.env), only in 0600 env files
    api_key: str | None = field(default=None, repr=False)

    @property
    def extra(self) -> dict[str, Any]:
        """The read's findings under their old ``extra[...]`` keys (read-only copy; the typed
        fields above are the source). Assigning a dict sets the named fields and resets the rest."""
        return {key: getattr(self, name) for key, name in EXTRA_FIELDS.items()}

    @extra.setter
    def extra(self, values: dict[str, Any]) -> None:
        unknown = sorted(set(values) - set(EXTRA_FIELDS))
        if unknown:
            raise TypeError(f"unknown Deployment extra key(s): {', '.join(unknown)}")
        fresh = {f.name: (f.default_factory() if f.default_factory is not MISSING else f.default)  # type: ignore[misc]
                 for f in fields(self) if f.name in EXTRA_FIELDS.values()}
        for key, name in EXTRA_FIELDS.items():
            setattr(self, name, values[key] if key in values else fresh[name])

    def pool(self, role: str) -> PoolSpec | None:
        return next((p for p in self.pools if p.role == role), None)

    def drafters(self) -> list[CheckpointSpec]:
        """The draft checkpoints the pools' speculative settings load (``model`` a repo id, with
        its ``revision``), once each, in pool order: snapshot under the model's ``model_dir``,
        served offline like the model (F12). A ``model`` that is a directory is the user's own."""
        out: list[CheckpointSpec] = []
        ck = self.checkpoint
        for pool in self.pools:
            spec = pool.speculative if pool.speculative is not None else self.speculative
            if not isinstance(spec, dict) or str(spec.get("method", "")).lower() in ("", "none", "off"):
                continue
            repo, revision = spec.get("model"), spec.get("revision")
            if not isinstance(repo, str) or not REPO_ID.match(repo):
                continue
            revision = str(revision) if revision not in (None, "") else None
            if any(d.repo == repo and d.revision == revision for d in out):
                continue
            out.append(CheckpointSpec(repo=repo, revision=revision, model_dir=ck.model_dir,
                                      local_dir=checkpoint_dir(ck.model_dir, repo, revision),
                                      mode=ck.mode, offline=ck.offline, kind="drafter"))
        return out

    def drafter(self, repo: str, revision: Any = None) -> CheckpointSpec | None:
        """The drafter checkpoint of ``repo`` at ``revision`` (:meth:`drafters`), or None."""
        revision = str(revision) if revision not in (None, "") else None
        return next((d for d in self.drafters() if d.repo == repo and d.revision == revision), None)

    def checkpoints(self) -> list[CheckpointSpec]:
        """Every checkpoint a Plan of this deployment loads: the model's, then the drafters'."""
        return [self.checkpoint, *self.drafters()]

    def source(self, key: str) -> str:
        """Inventory path for ``key`` (e.g. ``group_vars/all.yml:glmops_kv_cache_dtype``)."""
        return self.sources.get(key, key)



#: old ``Deployment.extra`` key -> typed field
EXTRA_FIELDS = {
    "problems": "problems", "inventory": "inventory_path", "inventory_dir": "inventory_dir",
    "workers": "worker_hosts", "routers": "router_hosts", "dynamo_backend": "dynamo_backend",
    "dynamo_etcd_hosts": "dynamo_etcd_hosts", "dynamo_request_plane": "dynamo_request_plane",
    "dynamo_event_plane": "dynamo_event_plane", "image": "image", "pip_extra": "pip_extra",
    "layout": "layout", "monitoring": "monitoring", "raw_variables": "raw_variables",
    "secret_values": "secret_values",
}

@dataclass
class ConfigFile:
    """A file a service needs, as data. ``content`` is a dict for yaml/json files,
    a str for text; ``mode`` is octal text (``"0600"`` for anything holding env)."""

    path: str
    content: Any
    format: Literal["yaml", "json", "text", "env"] = "yaml"
    mode: str = "0644"


#: Service.start_order at or above this: router/orchestrator/frontend (below: stores and workers)
ROUTER_ORDER = 50


@dataclass
class Service:
    """One systemd unit on one host.

    ``argv`` is the full command (engine binary first; the runtime wrapper such as
    ``docker run`` is added at render time). ``ports`` lists every port the service
    binds, by purpose (``http``, ``nixl_side_channel``, ``kv_events``, ``metrics``,
    ...; per-rank ranges expanded), for collision checks. ``health_url`` is the
    engine's own ``/health``; readiness is that 200 and then a one-token request
    to ``ready_url`` (never ``/v1/models``, F13). ``metrics_url`` is where the service serves
    Prometheus text (empty: none; catalog ``engines.<engine>.metrics``). ``start_order``: lower starts
    first; stores 1 (Dynamo's discovery store), workers 10, followers 5,
    router/orchestrator/frontend 50. ``instances``: a front door that discovers its workers
    (Dynamo's frontend) counts as ready only when its ``/health`` lists this many worker
    instances (0: not checked).
    """

    name: str
    host: str
    role: ServiceRole
    engine: str
    address: str
    port: int
    gpus: list[int] = field(default_factory=list)
    ports: dict[str, list[int]] = field(default_factory=dict)
    argv: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    files: list[ConfigFile] = field(default_factory=list)
    health_url: str = ""
    ready_url: str = ""
    metrics_url: str = ""
    start_order: int = 10
    replica: int = 0
    node_rank: int = 0
    nnodes: int = 1
    depends_on: list[str] = field(default_factory=list)
    runtime: Runtime = "venv"
    image: str = ""
    instances: int = 0
    # the env var of this service's env file that holds the deployment's API key (glmops_api_key);
    # the readiness gate and status read it there and send it as Authorization: Bearer ("" = no key)
    auth_env: str = ""

    @property
    def unit(self) -> str:
        return f"{self.name}.service"


@dataclass
class Plan:
    """What a deploy will do: per host, the services in start order, plus the front
    door. ``smoke`` lists the URLs smoke tests hit (endpoint first)."""

    deployment: str
    model: str
    served_model_name: str
    engine: str
    topology: Topology
    endpoint_url: str
    services: list[Service] = field(default_factory=list)
    smoke: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def on_host(self, host: str) -> list[Service]:
        return sorted((s for s in self.services if s.host == host), key=lambda s: (s.start_order, s.name))

    @property
    def hosts(self) -> list[str]:
        seen: list[str] = []
        for s in self.services:
            if s.host not in seen:
                seen.append(s.host)
        return seen

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        for svc, raw in zip(self.services, data["services"]):
            raw["unit"] = svc.unit
        return data
