"""A seeded fuzz of the shipped inventories (issue 20): a few hundred mutants of inventories/*
(hostile values in group_vars, hostile keys, host names and addresses, YAML that is broken or
an alias bomb), each run through ``glmops plan --format json --out DIR`` in-process.

For every mutant: exit 0 or 2 only, no traceback, under 5 s; no file written outside DIR (and
none outside ``DIR/<host>``); no secret canary in the output; every env file 0600; and every
rendered unit keeps its meaning: only the directives the shipped inventories' units have,
``User=``/``Group=`` a user name, ``ExecStart=``'s first word an absolute path without a systemd
prefix (``+!@:-``), one ``Environment=HOME=<path>`` assignment, unit-safe ``EnvironmentFile=`` /
``StateDirectory=``, a container's image an OCI reference. A sample of the rendered units also
goes through ``systemd-analyze verify`` (missing engine binaries aside).

Seed and count are fixed (SEED, MUTANTS): a failure names the mutant, so it reproduces.
"""
from __future__ import annotations

import copy
import os
import random
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from glmops.cli import main
from glmops.variables import USER_NAME, _OCI_IMAGE, _UNIT_PATH

REPO = Path(__file__).resolve().parents[2]
SEED = 20
MUTANTS = 200
BASES = sorted(p.name for p in (REPO / "inventories").iterdir() if (p / "group_vars" / "all.yml").is_file())
ANALYZE = shutil.which("systemd-analyze")

TOKEN_CANARY = "hf_FuzzCanaryAbCdEfGhIjKlMnOpQrStUvWx12"
URL_CANARY = "s3cretFuzzCanary"
PLAIN_CANARY = "plainFuzzCanary0042"  # only ever under a secret name (API_KEY, ...)
CANARIES = (TOKEN_CANARY, URL_CANARY, PLAIN_CANARY)

HOSTILE = [
    "+/opt/glmops/venvs", "!/x", "!!/x", "@/x", ":/x", "-/x", "", " ", "%n", "%%h", "$HOME", "${X}", "a b", "a;b",
    "--privileged", "-oProxyCommand=id", "../..", "/", "/x/../..", "/var/lib/glmops/../..", "x\ny", "\t",
    "LD_PRELOAD=/tmp/x.so", "ExecStartPre=+/bin/sh", "'", '"', "\\", "*", "n[0:99999999]", "--trust-remote-code",
    0, -1, 1, 10 ** 30, 1e300, float("inf"), float("nan"), True, None, [], {}, ["--x"], {"a": {"b": 1}},
    TOKEN_CANARY, f"https://user:{URL_CANARY}@10.0.0.9/x", "Root", "nobody", "mlx5_0", "10.0.0.11", "::1",
]
HOSTILE_KEYS = ["LD_PRELOAD", "CUDA_VISIBLE_DEVICES", "--x", "glmosp_multimodal", "GLMOPS_MODEL", "glmops-checkpoint",
                "HF_TOKEN", "API_KEY", "x y", "", "a.b", "control-plane-api-keys", "allow-credentials"]
HOST_NAMES = ["/x/y", "../..", "/", "..", "-oProxyCommand=id", "a b", "h%n", "ok-host", "[::1]", "n[0:99999999]"]
RAW = [
    "glmops_max_seq_len: .inf\n", "glmops_readiness_timeout_s: -.inf\n", "glmops_env: [unclosed\n",
    "a: &a [x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a]\nc: &c [*b, *b, *b, *b, *b, *b, *b, *b]\n"
    "d: &d [*c, *c, *c, *c, *c, *c, *c, *c]\ne: &e [*d, *d, *d, *d, *d, *d, *d, *d]\n"
    "glmops_env: &f [*e, *e, *e, *e, *e, *e, *e, *e]\n",
    "glmops_env: {API_KEY: " + PLAIN_CANARY + "}\n", "\t: bad\n", "glmops_env: !vault |\n  nonsense\n",
]


def _leaves(data, path=()):
    """(path, value) of every dict value and list item under ``data``."""
    out = []
    if isinstance(data, dict):
        for k, v in data.items():
            out.append((path + (k,), v))
            out += _leaves(v, path + (k,))
    elif isinstance(data, list):
        for i, v in enumerate(data):
            out.append((path + (i,), v))
            out += _leaves(v, path + (i,))
    return out


def _set(data, path, value):
    for p in path[:-1]:
        data = data[p]
    data[path[-1]] = value


def _rename(data, path, new):
    for p in path[:-1]:
        data = data[p]
    if isinstance(data, dict) and path[-1] in data:
        data[new] = data.pop(path[-1])


def _mutate(rng: random.Random, base: Path, dest: Path) -> str:
    """Copy ``base`` to ``dest`` and apply 1-3 mutations; return what was done."""
    shutil.copytree(base, dest)
    gv_file = dest / "group_vars" / "all.yml"
    gv = yaml.safe_load(gv_file.read_text()) or {}
    hosts_file = next(p for p in (dest / "hosts.yml", dest / "hosts.yaml") if p.exists())
    hosts = yaml.safe_load(hosts_file.read_text())
    done, raw = [], ""
    for _ in range(rng.randint(1, 3)):
        kind = rng.choice(["value", "value", "value", "key", "env", "host", "address", "raw"])
        leaves = _leaves(gv)
        if kind == "value" and leaves:
            path, _old = rng.choice(leaves)
            new = copy.deepcopy(rng.choice(HOSTILE))
            _set(gv, path, new)
            done.append(f"value {'.'.join(map(str, path))}={new!r}")
        elif kind == "key":
            dict_paths = [p for p, _ in leaves if not isinstance(p[-1], int)]
            if dict_paths:
                path = rng.choice(dict_paths)
                new = rng.choice(HOSTILE_KEYS)
                _rename(gv, path, new)
                done.append(f"key {'.'.join(map(str, path))}->{new!r}")
        elif kind == "env":
            key, value = rng.choice([("API_KEY", PLAIN_CANARY), ("CACHE_URL", f"redis://u:{URL_CANARY}@h/0"),
                                     ("MY_TOKEN_VALUE", TOKEN_CANARY), ("LD_PRELOAD", "/tmp/x.so"),
                                     ("HF_HUB_OFFLINE", "0"), ("FOO", "a b $X %n")])
            gv.setdefault("glmops_env", {})
            if isinstance(gv["glmops_env"], dict):
                gv["glmops_env"][key] = value
                done.append(f"env {key}")
        elif kind in ("host", "address"):
            groups = [g for _, g in _leaves(hosts) if isinstance(g, dict) and isinstance(g.get("hosts"), dict) and g["hosts"]]
            if groups:
                group = rng.choice(groups)
                name = rng.choice(list(group["hosts"]))
                if kind == "host":
                    new = rng.choice(HOST_NAMES)
                    group["hosts"][new] = group["hosts"].pop(name)
                    done.append(f"host {name}->{new!r}")
                else:
                    new = rng.choice(HOSTILE)
                    group["hosts"][name] = {**(group["hosts"][name] or {}), "ansible_host": new}
                    done.append(f"ansible_host {name}={new!r}")
        else:
            raw = rng.choice(RAW)
            done.append(f"raw {raw[:30]!r}")
    gv_file.write_text(yaml.safe_dump(gv, sort_keys=False, allow_unicode=True) + raw)
    hosts_file.write_text(yaml.safe_dump(hosts, sort_keys=False, allow_unicode=True))
    return "; ".join(done)


def _directives(text: str) -> list[tuple[str, str, str]]:
    """(section, key, value) of a unit file; a line that is neither fails the test."""
    out, section = [], ""
    for line in text.splitlines():
        if not line.strip() or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
            continue
        key, sep, value = line.partition("=")
        assert sep and re.match(r"^[A-Za-z]+\Z", key), f"not a directive: {line!r}"
        out.append((section, key, value))
    return out


def _exec_words(value: str) -> list[str]:
    import shlex

    return shlex.split(value.replace("%%", "%").replace("$$", "$"))


def _check_unit(path: Path, allowed: set[str]) -> None:
    d = _directives(path.read_text())
    keys = {k for _s, k, _v in d}
    assert keys <= allowed, f"{path}: new directives {keys - allowed}"
    one = {k: v for _s, k, v in d}
    if path.suffix != ".service":
        return
    assert USER_NAME.match(one["User"]) and one["Group"] == one["User"], (path, one["User"])
    first = one["ExecStart"].split()[0]
    assert first[0] == "/" and _UNIT_PATH.match(first), f"{path}: ExecStart= starts {first!r}"
    envs = [v for _s, k, v in d if k == "Environment"]
    assert len(envs) == 1 and envs[0].startswith("HOME=") and _UNIT_PATH.match(envs[0][5:]), envs
    for key in ("EnvironmentFile", "StateDirectory"):
        value = one[key]
        assert " " not in value and "%" not in value and ".." not in value.split("/"), (key, value)
    assert _UNIT_PATH.match(one["EnvironmentFile"]), one["EnvironmentFile"]
    words = _exec_words(one["ExecStart"])
    if "--entrypoint" in words:  # container: the word after the entrypoint is the image
        image = words[words.index("--entrypoint") + 2]
        assert _OCI_IMAGE.match(image), (path, image)


def _files(root: Path) -> set[str]:
    return {str(p) for p in root.rglob("*")} if root.exists() else set()


@pytest.fixture(scope="module")
def allowed_directives(tmp_path_factory) -> set[str]:
    """The directive names of every unit the shipped inventories render (the reference)."""
    out = tmp_path_factory.mktemp("ref")
    keys: set[str] = set()
    for name in BASES:
        r = CliRunner().invoke(main, ["plan", "-i", str(REPO / "inventories" / name), "--format", "json",
                                      "--out", str(out / name)])
        assert r.exit_code == 0, (name, r.output)
        for unit in list((out / name).rglob("*.service")) + list((out / name).rglob("*.target")):
            keys |= {k for _s, k, _v in _directives(unit.read_text())}
    assert {"User", "ExecStart", "Environment", "EnvironmentFile"} <= keys
    return keys


def test_seeded_mutants_of_the_shipped_inventories(tmp_path, allowed_directives, monkeypatch):
    rng = random.Random(SEED)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)  # a stray relative write would land here
    files_before, units_before = _files(tmp_path), set(os.listdir("/etc/systemd/system"))
    verified, codes, slowest = 0, {0: 0, 2: 0}, 0.0
    total_start = time.monotonic()
    for i in range(MUTANTS):
        base = REPO / "inventories" / BASES[i % len(BASES)]
        inv = tmp_path / "m" / f"{i:03d}-{base.name}"
        what = _mutate(rng, base, inv)
        out = tmp_path / "out" / f"{i:03d}"
        start = time.monotonic()
        r = CliRunner().invoke(main, ["plan", "-i", str(inv), "--format", "json", "--out", str(out)])
        took = time.monotonic() - start
        slowest = max(slowest, took)
        label = f"mutant {i} ({base.name}: {what})"
        assert r.exit_code in (0, 2), f"{label}: exit {r.exit_code}\n{r.output[-2000:]}"
        assert r.exception is None or isinstance(r.exception, SystemExit), f"{label}: {r.exception!r}"
        assert "Traceback" not in r.output, f"{label}\n{r.output[-2000:]}"
        assert took < 5, f"{label}: {took:.1f} s"
        for canary in CANARIES:
            assert canary not in r.output, f"{label}: secret {canary} printed\n{r.output[-1500:]}"
        codes[r.exit_code] += 1
        written = [Path(p) for p in _files(out) if Path(p).is_file()]
        for f in written:
            real = Path(os.path.realpath(f))
            host_dir = real.relative_to(os.path.realpath(out)).parts[0]
            assert real.is_relative_to(Path(os.path.realpath(out)) / host_dir), (label, f)
            if f.suffix == ".env":
                assert f.stat().st_mode & 0o077 == 0, (label, f, oct(f.stat().st_mode))
            if f.suffix in (".service", ".target"):
                _check_unit(f, allowed_directives)
        if r.exit_code == 0 and ANALYZE and verified < 12 and written:
            verified += 1
            units = [str(f) for f in written if f.suffix in (".service", ".target")]
            v = subprocess.run([ANALYZE, "verify", "--man=no", *units], capture_output=True, text=True, timeout=120)
            bad = [line for line in v.stderr.splitlines()
                   if line.strip() and not re.search(r"is not executable|No such file or directory|Unit .* not found"
                                                     r"|docker\.service", line)]
            assert not bad, f"{label}: systemd-analyze verify:\n" + "\n".join(bad)
    ours = (str(tmp_path / "out"), str(tmp_path / "m"))
    stray = {p for p in _files(tmp_path) if not p.startswith(ours)} - files_before - {str(work)}
    assert not stray, f"files written outside the output directories: {sorted(stray)[:10]}"
    assert set(os.listdir("/etc/systemd/system")) <= units_before
    assert codes[0] >= 10 and codes[2] >= MUTANTS // 3, codes  # both outcomes were exercised
    assert time.monotonic() - total_start < 120, f"fuzz took {time.monotonic() - total_start:.0f} s (slowest {slowest:.1f})"
