"""ansible-lint (production profile, repo .ansible-lint) and yamllint (repo .yamllint) pass on the
systemd_unit role, its Molecule scenario and the shared Molecule playbooks/base config."""
from __future__ import annotations

import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PATHS = ["roles/systemd_unit", "molecule/systemd_unit", "molecule/shared", ".config/molecule"]


def test_yamllint_clean():
    r = subprocess.run([str(REPO / ".venv/bin/yamllint"), "-s", *PATHS], cwd=REPO, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_ansible_lint_production_profile_clean():
    r = subprocess.run([str(REPO / ".venv/bin/ansible-lint"), "--profile", "production", "--nocolor", *PATHS],
                       cwd=REPO, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "Profile 'production' was required, and it passed" in r.stdout + r.stderr
