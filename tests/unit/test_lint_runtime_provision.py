"""ansible-lint (production profile) and yamllint (strict) pass on the engine runtime and
precheck roles and the provision/check playbooks deploy imports."""
from __future__ import annotations

import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PATHS = ["roles/engine_runtime", "roles/prechecks", "playbooks/provision.yml", "playbooks/check.yml"]


def test_yamllint_strict_clean():
    r = subprocess.run([str(REPO / ".venv/bin/yamllint"), "-s", *PATHS], cwd=REPO, capture_output=True, text=True,
                       check=False)
    assert r.returncode == 0, r.stdout + r.stderr


def test_ansible_lint_production_profile_clean():
    r = subprocess.run([str(REPO / ".venv/bin/ansible-lint"), "--profile", "production", "--nocolor", *PATHS],
                       cwd=REPO, capture_output=True, text=True, timeout=600, check=False)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
