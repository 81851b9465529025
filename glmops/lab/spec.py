"""Names, paths and addresses of a lab: the conventions other parts rely on.

A lab called ``NAME`` (default ``glmops``) keeps everything it made under
``/var/lib/glmops-lab/NAME/``; its hosts ``lab-1..lab-N`` sit on the bridge
``glmlab-NAME`` (``glmlab-<hash>`` when longer than the kernel's 15 characters) with
addresses ``.10+i`` of the lab's /24 (default ``10.77.0.0/24``, gateway ``.1``).
These are documented in docs/DEVELOPING.md ("Lab") and must not drift.
"""
from __future__ import annotations

import hashlib
import ipaddress
import json
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

DEFAULT_NAME = "glmops"
DEFAULT_SUBNET = "10.77.0.0/24"
# the pool `--subnet auto` picks from: 10.77.1.0/24, ... 10.77.255.0/24 (DEFAULT_SUBNET, the README lab's, is skipped)
AUTO_SUBNET_POOL = "10.77.0.0/16"
STATE_ROOT = Path(os.environ.get("GLMOPS_LAB_ROOT", "/var/lib/glmops-lab"))
CGROUP_ROOT = Path("/sys/fs/cgroup")
# the two hierarchies systemd inside a container needs its own directory in (hybrid cgroups);
# on a pure cgroup2 machine only "" (the root) exists, see cgroup_hierarchies()
CGROUP_HIERARCHIES = ("systemd", "unified")
HOST_OFFSET = 10          # lab-i gets address .(10+i)
MAX_HOSTS = 200
NAME_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,30}\Z")
PROFILES = ("cpu", "b200-sim", "h200-sim")


def cache_dir() -> Path:
    """The user cache, ``~/.cache/glmops`` (``GLMOPS_CACHE_DIR`` overrides)."""
    return Path(os.environ.get("GLMOPS_CACHE_DIR", Path.home() / ".cache" / "glmops"))


def default_binds() -> list["Bind"]:
    """Read-only binds every host gets when the source exists on this machine.

    ``~/.cache/glmops/wheelhouse`` -> ``/opt/glmops/wheelhouse`` (install source without an
    index) and ``~/.cache/glmops/models`` -> ``/opt/glmops/lab-models``. Other parts add their
    own with ``lab up --bind SRC:DST[:rw]`` or ``Bind`` objects passed to ``core.up``.
    """
    c = cache_dir()
    wanted = [Bind(str(c / "wheelhouse"), "/opt/glmops/wheelhouse"),
              Bind(str(c / "models"), "/opt/glmops/lab-models")]
    return [b for b in wanted if Path(b.source).is_dir()]


@dataclass(frozen=True)
class Bind:
    """A directory of this machine made visible inside every host (nspawn ``--bind[-ro]``)."""

    source: str
    target: str
    read_only: bool = True

    @classmethod
    def parse(cls, text: str) -> "Bind":
        """``SRC:DST`` (read-only) or ``SRC:DST:rw``. Raises ValueError naming the text."""
        parts = text.split(":")
        if len(parts) not in (2, 3) or not parts[0] or not parts[1] or (
                len(parts) == 3 and parts[2] not in ("ro", "rw")):
            raise ValueError(f"--bind {text!r}: expected SRC:DST or SRC:DST:ro|rw")
        if not parts[0].startswith("/") or not parts[1].startswith("/"):
            raise ValueError(f"--bind {text!r}: SRC and DST must be absolute paths")
        return cls(parts[0], parts[1], read_only=(len(parts) == 2 or parts[2] == "ro"))

    def nspawn_arg(self) -> str:
        return f"--bind{'-ro' if self.read_only else ''}={self.source}:{self.target}"


def bridge_name(lab: str) -> str:
    """``glmlab-<lab>`` when that fits the kernel's 15-character limit, else ``glmlab-<8 hex>``
    (sha1 of the name), so two long names with the same prefix never share a bridge."""
    name = f"glmlab-{lab}"
    if len(name) <= 15:
        return name
    return "glmlab-" + hashlib.sha1(lab.encode()).hexdigest()[:8]


def nft_table(lab: str) -> str:
    """Name of the lab's own ``ip`` nft table (NAT + forward accept)."""
    return f"glmops_lab_{lab.replace('-', '_')}"


def host_name(i: int) -> str:
    """Host ``i`` (1-based) is ``lab-i``."""
    return f"lab-{i}"


def check_name(name: str) -> list[str]:
    """Problems with a lab name (empty list when fine)."""
    if not NAME_RE.match(name):
        return [f"--name {name!r}: use 1-31 characters a-z, 0-9 and '-', starting with a letter or digit"]
    return []


@dataclass
class HostState:
    """One host of a lab as recorded in ``lab.json``."""

    name: str            # lab-1
    index: int           # 1
    address: str         # 10.77.0.11
    machine: str         # nspawn machine name, unique across labs: <lab>-lab-1
    dir: str             # /var/lib/glmops-lab/<lab>/hosts/lab-1 (upper/, work/, root/)


@dataclass
class LabState:
    """What ``lab up`` made, written to ``/var/lib/glmops-lab/<name>/lab.json``; ``down`` reads it."""

    name: str
    profile: str
    subnet: str
    gateway: str
    bridge: str
    nft_table: str
    image: str                      # path of the image tarball the base was unpacked from
    hosts: list[HostState]
    binds: list[Bind] = field(default_factory=list)
    created: float = 0.0
    supervisor_pid: int = 0

    @property
    def dir(self) -> Path:
        return state_dir(self.name)

    def save(self) -> None:
        path = self.dir / "lab.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=1) + "\n")
        tmp.replace(path)

    @classmethod
    def load(cls, name: str) -> "LabState":
        """Raises FileNotFoundError when the lab has no ``lab.json``."""
        data = json.loads((state_dir(name) / "lab.json").read_text())
        data["hosts"] = [HostState(**h) for h in data["hosts"]]
        data["binds"] = [Bind(**b) for b in data.get("binds", [])]
        return cls(**data)


def shared_dir(name: str) -> Path:
    """A directory all hosts of lab ``name`` share read-write (the cpu profile's KV dir);
    beside the state dir, removed by ``lab down``."""
    return STATE_ROOT / f"{name}-shared"


def state_dir(name: str) -> Path:
    return STATE_ROOT / name


def host_addresses(subnet: str, count: int) -> tuple[str, list[str]]:
    """(gateway, [address of lab-1, ...]) for ``count`` hosts in ``subnet``.

    Raises ValueError when the subnet is not an IPv4 network or too small.
    """
    net = ipaddress.IPv4Network(subnet, strict=True)
    if net.num_addresses < HOST_OFFSET + count + 2:
        raise ValueError(f"--subnet {subnet}: too small for {count} hosts at .{HOST_OFFSET + 1}..")
    gateway = str(net.network_address + 1)
    return gateway, [str(net.network_address + HOST_OFFSET + i) for i in range(1, count + 1)]
