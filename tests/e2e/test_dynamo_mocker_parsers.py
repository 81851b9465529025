"""The Dynamo mocker backend against the real 1.6.1 parsers (the ``dynamo`` wheel set's venv,
cached on this machine): the catalog's ``engines.mocker.flags`` is exactly what
``python -m dynamo.mocker`` accepts, and the command lines the Plan of
``inventories/lab-dynamo`` renders parse with the real ``dynamo.mocker`` and
``dynamo.frontend`` parsers, while a flag they do not know fails them (argparse exit 2;
the frontend logs "Unknown arguments" and exits 1). Mark ``vllm`` (needs the wheel set).
"""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

pytestmark = [pytest.mark.vllm]

REPO = Path(__file__).resolve().parents[2]

# Captures the parser dynamo.mocker.args.parse_args builds, without parsing anything.
DUMP = """
import argparse, json
grabbed = {}
def grab(self, args=None, namespace=None):
    grabbed["parser"] = self
    raise SystemExit(0)
argparse.ArgumentParser.parse_args = grab
from dynamo.mocker.args import parse_args
try:
    parse_args([])
except SystemExit:
    pass
print(json.dumps(sorted(s for a in grabbed["parser"]._actions for s in a.option_strings if s.startswith("--"))))
"""
MOCKER_PARSE = """
import json, sys
from dynamo.mocker.args import parse_args
ns = parse_args(json.loads(sys.argv[1]))
print(json.dumps({"block_size": ns.block_size, "max_model_len": ns.max_model_len, "model_name": ns.model_name,
                  "discovery_backend": ns.discovery_backend, "event_plane": ns.event_plane}))
"""
FRONTEND_PARSE = """
import json, sys
argv = json.loads(sys.argv[1])
sys.argv = ["dynamo.frontend", *argv]
from dynamo.frontend.main import parse_args
cfg = parse_args()[0]
print(json.dumps({"router_mode": cfg.router_mode, "kv_cache_block_size": cfg.kv_cache_block_size}))
"""


@pytest.fixture(scope="module")
def python() -> str:
    from glmops.lab import wheelhouse

    return str(wheelhouse.ensure_local_venv("dynamo") / "bin" / "python")


@pytest.fixture(scope="module")
def plan():
    from glmops import inventory, rules

    dep = inventory.load_deployment(str(REPO / "inventories" / "lab-dynamo"))
    built, problems = rules.validate(dep)
    assert not problems, problems
    return built


def _run(python: str, code: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([python, "-c", code, *args], capture_output=True, text=True, timeout=120, check=False)


def test_catalog_flags_are_the_real_parsers(python):
    from glmops import catalog

    proc = _run(python, DUMP)
    assert proc.returncode == 0, proc.stderr[-2000:]
    real = {f[2:] for f in json.loads(proc.stdout)} - {"help", "version"}
    assert set(catalog.load().engine("mocker")["flags"]) == real


def test_planned_mocker_argv_parses(python, plan):
    workers = [s for s in plan.services if s.role == "agg"]
    assert len(workers) == 2
    for svc in workers:
        assert svc.argv[1:3] == ["-m", "dynamo.mocker"]
        proc = _run(python, MOCKER_PARSE, json.dumps(svc.argv[3:]))
        assert proc.returncode == 0, proc.stderr[-2000:]
        got = json.loads(proc.stdout)
        assert got == {"block_size": 64, "max_model_len": 512, "model_name": "tiny-llama",
                       "discovery_backend": "file", "event_plane": "zmq"}
    bad = _run(python, MOCKER_PARSE, json.dumps(workers[0].argv[3:] + ["--tensor-parallel-size", "2"]))
    assert bad.returncode == 2 and "unrecognized arguments: --tensor-parallel-size" in bad.stderr


def test_planned_frontend_argv_parses(python, plan):
    front = next(s for s in plan.services if s.role == "frontend")
    assert front.argv[1:3] == ["-m", "dynamo.frontend"]
    proc = _run(python, FRONTEND_PARSE, json.dumps(front.argv[3:]))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {"router_mode": "kv", "kv_cache_block_size": 64}
    bad = _run(python, FRONTEND_PARSE, json.dumps(front.argv[3:] + ["--router-mode-typo", "kv"]))
    assert bad.returncode == 1 and "Unknown arguments" in bad.stdout + bad.stderr
