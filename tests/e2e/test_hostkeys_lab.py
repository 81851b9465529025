"""Host keys are checked on every run (issue 20): a one-host lab reached through an inventory that,
like a real cluster's, does not pin StrictHostKeyChecking itself.

* a host whose key is unknown: the verb fails UNREACHABLE before any task ran on it, naming
  ``glmops known-hosts``;
* a host whose known key changed: the same, and ``glmops known-hosts`` refuses to replace it;
* after ``glmops known-hosts`` added the real key, the same verb reaches the host.

ansible-runner alone would run ssh with ``StrictHostKeyChecking=no`` (it sets
``ANSIBLE_HOST_KEY_CHECKING=False`` when the environment lacks it), so every step but the last
passed before the fix. Needs root and systemd-nspawn (marked ``lab``).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from glmops import runner
from glmops.lab import core

pytestmark = [
    pytest.mark.lab,
    pytest.mark.skipif(os.geteuid() != 0, reason="the lab needs root"),
    pytest.mark.skipif(shutil.which("systemd-nspawn") is None, reason="systemd-nspawn missing"),
]

REPO = Path(__file__).resolve().parents[2]
NAME = "sec-hostkeys"
SUBNET = "10.77.141.0/24"
GLMOPS = [sys.executable, "-m", "glmops.cli"]


@pytest.fixture(scope="module")
def lab():
    core.down(NAME, log=lambda m: None)  # a leftover of an interrupted run
    state = core.up(name=NAME, hosts=1, profile="cpu", subnet=SUBNET, binds=[], log=lambda m: None)
    yield state
    core.down(NAME, log=lambda m: None)


def _inventory(tmp: Path, lab) -> tuple[Path, Path]:
    """A user's inventory for the lab host (the shipped lab variables, agg on one host) whose ssh
    args name a known_hosts file but leave StrictHostKeyChecking to glmops/Ansible."""
    host = lab.hosts[0]
    known = tmp / "known_hosts"
    inv = tmp / "inv"
    (inv / "group_vars").mkdir(parents=True)
    hosts = {"all": {"vars": {
        "ansible_user": "root", "ansible_python_interpreter": "/usr/bin/python3",
        "ansible_ssh_private_key_file": str(lab.dir / "id_ed25519"),
        "ansible_ssh_common_args": f"-o UserKnownHostsFile={known} -o IdentitiesOnly=yes"},
        "children": {"glmops_workers": {"hosts": {host.name: {"ansible_host": host.address}}}}}}
    (inv / "hosts.yml").write_text(yaml.safe_dump(hosts, sort_keys=False))
    gv = yaml.safe_load((REPO / "inventories" / "lab" / "group_vars" / "all.yml").read_text())
    gv.update(glmops_topology="agg", glmops_topologies={"agg": {"pools": {"agg": {"tp": 1, "port": 8001}}}})
    (inv / "group_vars" / "all.yml").write_text(yaml.safe_dump(gv, sort_keys=False))
    return inv, known


def _host_results(result: runner.RunResult, host: str) -> list[str]:
    """The result events of ``host``'s tasks, except Ansible's role argument check (it runs on
    the controller and contacts nobody)."""
    import json

    out = []
    for f in sorted((Path(result.artifacts) / "artifacts" / "run" / "job_events").glob("*.json"),
                    key=lambda p: int(p.name.split("-")[0])):
        event = json.loads(f.read_text())
        data = event.get("event_data") or {}
        if data.get("host") == host and event["event"].startswith("runner_on_") and event["event"] != "runner_on_start" \
                and not str(data.get("task", "")).startswith(runner._ARGSPEC_TASK):
            out.append(event["event"])
    return out


def _check(inv: Path, tmp: Path) -> runner.RunResult:
    os.environ["GLMOPS_RUNS_DIR"] = str(tmp / "runs")
    return runner.run("check", "check.yml", inv, {"prechecks_fail": False}, quiet=True)


def test_unknown_and_changed_host_keys_stop_the_run_before_any_task(lab, tmp_path, monkeypatch):
    monkeypatch.delenv("ANSIBLE_HOST_KEY_CHECKING", raising=False)
    inv, known = _inventory(tmp_path, lab)
    host = lab.hosts[0]

    # 1. unknown host: no key in the file
    known.write_text("")
    result = _check(inv, tmp_path)
    assert result.rc == 1 and _host_results(result, host.name) == ["runner_on_unreachable"], result.failures
    text = "\n".join(result.failures)
    assert "Host key verification failed" in text and "glmops known-hosts -i" in text, text

    # 2. changed key: the file holds another key for the address
    other = tmp_path / "other"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    known.write_text(f"{host.address} {' '.join(other.with_suffix('.pub').read_text().split()[:2])}\n")
    before = known.read_text()
    result = _check(inv, tmp_path)
    assert result.rc == 1 and _host_results(result, host.name) == ["runner_on_unreachable"], result.failures
    text = "\n".join(result.failures)
    assert "REMOTE HOST IDENTIFICATION HAS CHANGED" in text or "Host key verification failed" in text, text
    assert "glmops known-hosts" in text
    r = subprocess.run([*GLMOPS, "known-hosts", "-i", str(inv)], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert r.returncode == 1 and "changed" in r.stdout and "ssh-keygen -R" in r.stdout, r.stdout + r.stderr
    assert known.read_text() == before  # a changed key is never replaced

    # 3. accepted with the helper (after removing the stale key, as the message says)
    known.write_text("")
    r = subprocess.run([*GLMOPS, "known-hosts", "-i", str(inv)], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert r.returncode == 0 and f"{host.name}: added" in r.stdout and "ED25519" in r.stdout, r.stdout + r.stderr
    real = (lab.dir / "known_hosts").read_text().split()
    assert any(real[-1] in line for line in known.read_text().splitlines())  # the lab's own record of the key
    result = _check(inv, tmp_path)
    events = _host_results(result, host.name)
    assert events and "runner_on_unreachable" not in events, result.failures
    r = subprocess.run([*GLMOPS, "known-hosts", "-i", str(inv)], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert r.returncode == 0 and "known" in r.stdout
