"""ansible-lint (production profile) and yamllint (strict) pass on every role, every playbook
(every playbooks/**/*.yml), every Molecule scenario and the shared Molecule
config, the monitoring rules and the lab inventories: found by globbing, so a new role or
playbook is linted without being listed here."""
from __future__ import annotations

import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PATHS = sorted(
    str(p.relative_to(REPO)) for p in [
        *(d for d in (REPO / "roles").iterdir() if d.is_dir()),
        *(REPO / "playbooks").rglob("*.yml"),
        *(d for d in (REPO / "molecule").iterdir() if d.is_dir()), REPO / ".config" / "molecule",
        REPO / "glmops" / "monitoring" / "rules",
        *(d for d in (REPO / "inventories").glob("lab*") if d.is_dir()),
    ])


def test_yamllint_strict_clean():
    r = subprocess.run([str(REPO / ".venv/bin/yamllint"), "-s", *PATHS], cwd=REPO, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_ansible_lint_production_profile_clean():
    r = subprocess.run([str(REPO / ".venv/bin/ansible-lint"), "--profile", "production", "--nocolor", *PATHS],
                       cwd=REPO, capture_output=True, text=True, timeout=1800)  # ~105 s alone, 600+ s seen under load
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
