"""`molecule test -s provision` on one b200-sim lab host: bare host -> provisioned from the
signed stand-in repos, idempotence (second converge changed=0), verify (packages, holds,
enabled services, nvidia-smi, docker runtime, CDI spec, prechecks report). Needs root and
systemd-nspawn (marked ``lab``); one lab boot (``mol-provision``)."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.lab,
    pytest.mark.skipif(os.geteuid() != 0, reason="the lab needs root"),
    pytest.mark.skipif(shutil.which("systemd-nspawn") is None, reason="systemd-nspawn missing"),
]

REPO = Path(__file__).resolve().parents[2]


def test_molecule_provision_scenario():
    env = {**os.environ, "PATH": f"{REPO / '.venv/bin'}:{os.environ['PATH']}", "ANSIBLE_FORCE_COLOR": "0",
           "NO_COLOR": "1"}
    r = subprocess.run([str(REPO / ".venv/bin/molecule"), "test", "-s", "provision"], cwd=REPO, env=env,
                       capture_output=True, text=True, timeout=1200)
    out = re.sub(r"\x1b\[[0-9;]*m", "", r.stdout + r.stderr)
    assert r.returncode == 0, out[-4000:]
    assert re.search(r"provision\s+: actions=8\s+successful=8\s+disabled=0\s+skipped=0\s+missing=0\s+failed=0", out), \
        out[-3000:]
    recaps = re.findall(r"lab-1\s+: ok=(\d+)\s+changed=(\d+)\s+unreachable=0\s+failed=0", out)
    changed = [int(c) for _, c in recaps]
    converge = next(i for i, c in enumerate(changed) if c >= 15)  # the converge installed the stack
    assert changed[converge + 1] == 0, recaps  # the idempotence run (second converge) changed nothing
    assert "TASK [The node's report is ok]" in out  # verify reached the prechecks report
