"""ansible-lint (production profile) and yamllint (strict) pass on the deploy roles, the
deploy and day-2 playbooks and the lab inventories."""
from __future__ import annotations

import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PATHS = ["roles/engine_service", "roles/router", "playbooks/deploy.yml", "playbooks/serve.yml",
         "playbooks/status.yml", "playbooks/stop.yml", "playbooks/restart.yml", "playbooks/logs.yml",
         "playbooks/destroy.yml", "playbooks/plays/plan.yml", "playbooks/plays/services.yml",
         "playbooks/plays/departed.yml", "playbooks/plays/prune.yml", "playbooks/plays/record.yml",
         "roles/monitoring", "playbooks/plays/monitoring.yml", "glmops/monitoring/rules",
         "inventories/lab", "inventories/lab-b200sim", "inventories/lab-b200sim-sglang"]


def test_yamllint_strict_clean():
    r = subprocess.run([str(REPO / ".venv/bin/yamllint"), "-s", *PATHS], cwd=REPO, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_ansible_lint_production_profile_clean():
    r = subprocess.run([str(REPO / ".venv/bin/ansible-lint"), "--profile", "production", "--nocolor", *PATHS],
                       cwd=REPO, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
