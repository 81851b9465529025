"""What glmops renders for the shipped TensorRT-LLM inventory is accepted by the strict
trtllm-serve double (flags, --config YAML, disagg_config.yaml), so a deploy on b200-sim lab
hosts would not die at argument parsing."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import HERE

REPO = HERE.parents[1]
GLMOPS = Path(sys.executable).with_name("glmops")


@pytest.mark.parametrize("topology", ["agg", "disagg"])
def test_rendered_trtllm_services_pass_the_double(tmp_path, topology):
    inv = REPO / "inventories" / "b200"
    if not inv.is_dir() or not GLMOPS.exists():
        pytest.skip("b200 inventory or glmops CLI not available")
    out = tmp_path / "out"
    r = subprocess.run([GLMOPS, "plan", "-i", inv, "--topology", topology, "--format", "json",
                        "--out", out], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    plan = json.loads(r.stdout)
    checked = 0
    for svc in plan["services"]:
        argv = svc["argv"]
        if not argv[0].endswith("trtllm-serve"):
            continue
        args = [str(out / svc["host"]) + a if a.startswith("/etc/glmops/") else a for a in argv[1:]]
        res = subprocess.run([sys.executable, HERE / "trtllm_serve_double.py", *args],
                             capture_output=True, text=True, timeout=60,
                             env={**os.environ, "DOUBLE_DRY_RUN": "1",
                                  "DOUBLE_SKIP_MODEL_CHECK": "1"})
        assert res.returncode == 0, f"{svc['name']}: {' '.join(argv)}\n{res.stderr}"
        checked += 1
    assert checked >= (3 if topology == "disagg" else 1)
