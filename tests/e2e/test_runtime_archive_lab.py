"""The runtime archive on lab hosts (roles/engine_runtime, issue 19: a runtime is built once):
three b200-sim hosts need the lab wheelhouse's ``hub`` set (huggingface-hub, 15 wheels, the
cheapest real set) as one runtime.

1. First run: only the first host (lab-1) runs pip; it packs the venv and hands it to the
   controller with its sha256; lab-2 and lab-3 unpack that. The three venvs hold the same
   packages and import huggingface-hub.
2. Same input again: changed=0 on every host.
3. A host that lost its venv takes it from the controller's archive: nobody runs pip.
4. Two runs that build the same runtime at once into one archive directory (each its own
   builder) both succeed; the archive and its record come from the same builder, and no part
   file is left.
5. The controller's archive no longer matches the sha256 the builder recorded: the host that
   needs it fails, naming itself and both digests; its venv is left as it was (it still imports)
   and its copy of the archive is gone.

Own lab ``e2erta`` (b200-sim, ``--subnet auto``), ansible-playbook with the repository's config.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import deploylab as D

pytestmark = D.LAB_MARKS

LAB = "e2erta"
VENV = "/opt/glmops/venvs/hub-2.4.0"
PLAY = """\
- name: The hub runtime
  hosts: lab
  gather_facts: false
  roles:
    - role: engine_runtime
      engine_runtime_engine: hub
      engine_runtime_version: "2.4.0"
"""


@pytest.fixture(scope="module")
def lab():
    # before the boot: the wheelhouse is bound into the hosts only when it exists
    subprocess.run([sys.executable, "-m", "glmops.lab.wheelhouse", "build", "--set", "hub"],
                   check=True, cwd=D.REPO, timeout=900)
    yield from D.lab_for_module(LAB, 3, "auto", [], profile="b200-sim")


@pytest.fixture(scope="module")
def archives(tmp_path_factory):
    return tmp_path_factory.mktemp("runtimes")


def _play(archives: Path, tmp: Path, limit: str | None = None, wait: bool = True):
    play = tmp / "hub.yml"
    play.write_text(PLAY)
    env = {**os.environ, "ANSIBLE_CONFIG": str(D.REPO / "ansible.cfg"), "ANSIBLE_ROLES_PATH": str(D.REPO / "roles"),
           "ANSIBLE_FORCE_COLOR": "0", "ANSIBLE_NOCOLOR": "1",
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    inv = D.LAB_ROOT / LAB / "inventory.yml"
    argv = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inv), str(play),
            "-e", json.dumps({"engine_runtime_archive_dir": str(archives)}), *(["--limit", limit] if limit else [])]
    if not wait:
        return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=tmp)
    return subprocess.run(argv, capture_output=True, text=True, timeout=900, env=env, cwd=tmp)


def _task_hosts(out: str, task: str, status: str) -> set[str]:
    """Hosts the default callback reports with ``status`` (ok, changed, skipping, fatal) under
    every ``TASK [engine_runtime : <task>]`` block of ``out``."""
    hosts: set[str] = set()
    for block in re.split(r"\n(?=TASK \[)", out):
        if block.startswith(f"TASK [engine_runtime : {task}]"):
            hosts |= set(re.findall(rf"^{status}: \[([\w.-]+)", block, re.M))
    return hosts


def _recap(out: str) -> dict[str, dict[str, int]]:
    recap = out.rsplit("PLAY RECAP", 1)[-1]
    return {m.group(1): {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", m.group(2))}
            for m in re.finditer(r"^([\w.-]+)\s*:\s*(.*)$", recap, re.M)}


def _freeze(lab, host: str) -> str:
    proc = D.ssh(lab, host, f"{VENV}/bin/python -m pip freeze --disable-pip-version-check && "
                            f"{VENV}/bin/python -c 'import huggingface_hub as h; print(h.__version__)'")
    assert proc.returncode == 0, f"{host}: {proc.stderr}"
    return proc.stdout


def test_one_host_builds_the_others_unpack_then_nothing_changes(lab, archives, tmp_path):
    for h in ("lab-1", "lab-2", "lab-3"):
        D.ssh(lab, h, f"rm -rf {VENV}")
    proc = _play(archives, tmp_path)
    out = proc.stdout
    assert proc.returncode == 0, out[-5000:] + proc.stderr[-2000:]
    # pip on lab-1 only (its included tasks ran there alone), the others unpacked
    assert _task_hosts(out, "Start installing the requirements", "ok") == {"lab-1"}, out[-5000:]
    assert _task_hosts(out, "Unpack the runtime archive", "changed") == {"lab-2", "lab-3"}, out[-5000:]
    record = json.loads(next(archives.glob("hub-2.4.0-*.tar.zst.json")).read_text())
    archive = next(archives.glob("hub-2.4.0-*.tar.zst"))
    assert record["builder"] == "lab-1"
    assert record["platform"].startswith("debian-12-x86_64-cpython-3.11."), record
    assert hashlib.sha256(archive.read_bytes()).hexdigest() == record["sha256"]
    assert oct(archive.stat().st_mode & 0o777) == "0o600" and oct(archives.stat().st_mode & 0o777) != "0o777"
    frozen = {h: _freeze(lab, h) for h in ("lab-1", "lab-2", "lab-3")}
    assert len(set(frozen.values())) == 1, frozen
    assert "huggingface-hub==2.4.0" in frozen["lab-1"].replace("_", "-").lower()
    for h in ("lab-2", "lab-3"):  # no copy left behind
        assert D.ssh(lab, h, "ls /var/tmp | grep -c tar.zst || true").stdout.strip() == "0"

    again = _play(archives, tmp_path)
    assert again.returncode == 0, again.stdout[-4000:]
    assert {h: r.get("changed") for h, r in _recap(again.stdout).items()} == \
        {"lab-1": 0, "lab-2": 0, "lab-3": 0}, again.stdout[-4000:]


def test_a_host_that_lost_its_venv_takes_the_archive_and_nobody_runs_pip(lab, archives, tmp_path):
    D.ssh(lab, "lab-3", f"rm -rf {VENV}")
    proc = _play(archives, tmp_path)
    assert proc.returncode == 0, proc.stdout[-5000:]
    assert _task_hosts(proc.stdout, "Start installing the requirements", "ok") == set()
    assert _task_hosts(proc.stdout, "Unpack the runtime archive", "changed") == {"lab-3"}
    assert _freeze(lab, "lab-3") == _freeze(lab, "lab-1")


def test_two_runs_building_the_same_runtime_at_once_both_succeed(lab, tmp_path):
    archives = tmp_path / "runtimes"
    for h in ("lab-1", "lab-2"):
        D.ssh(lab, h, f"rm -rf {VENV}")
    runs = {h: _play(archives, tmp_path / h, limit=h, wait=False) for h in ("lab-1", "lab-2")
            if (tmp_path / h).mkdir() is None}
    outs = {h: p.communicate(timeout=900)[0] for h, p in runs.items()}
    assert {h: p.returncode for h, p in runs.items()} == {"lab-1": 0, "lab-2": 0}, outs
    # each run built (its host ran pip), and one of them gave the archive its name
    for h, out in outs.items():
        assert _task_hosts(out, "Start installing the requirements", "ok") == {h}, out[-3000:]
    kept = {h for h, out in outs.items() if _task_hosts(out, "Keep the archive and its record under their names", "changed")}
    dropped = {h for h, out in outs.items() if _task_hosts(out, "Keep the archive and its record under their names", "ok")}
    assert len(kept) == 1 and dropped == {"lab-1", "lab-2"} - kept, outs
    record = json.loads(next(archives.glob("hub-2.4.0-*.tar.zst.json")).read_text())
    assert hashlib.sha256(next(archives.glob("hub-2.4.0-*.tar.zst")).read_bytes()).hexdigest() == record["sha256"]
    assert sorted(p.name.rsplit(".", 1)[-1] for p in archives.iterdir()) == ["json", "lock", "zst"]


def test_an_archive_that_does_not_match_its_record_is_refused_and_names_the_host(lab, archives, tmp_path):
    archive = next(archives.glob("hub-2.4.0-*.tar.zst"))
    with archive.open("ab") as fh:  # the controller's copy changed after the builder recorded it
        fh.write(b"tampered")
    # lab-2's marker no longer matches the wanted set: it needs the runtime again
    D.ssh(lab, "lab-2", f"sed -i 's/\"hash\": \"/\"hash\": \"0/' {VENV}/.glmops-runtime.json")
    before = _freeze(lab, "lab-2")
    proc = _play(archives, tmp_path)
    assert proc.returncode != 0
    out = proc.stdout
    record = json.loads(archive.with_name(archive.name + ".json").read_text())
    assert re.search(r"lab-2: refused the runtime archive \S+hub-2\.4\.0-\w+\.tar\.zst: its sha256 is \w{64}, "
                     rf"the builder lab-1 recorded {record['sha256']}", out), out[-4000:]
    assert _recap(out)["lab-2"]["failed"] == 1 and _recap(out)["lab-1"]["failed"] == 0
    assert _freeze(lab, "lab-2") == before, "the refused archive touched the venv"
    assert D.ssh(lab, "lab-2", "ls /var/tmp | grep -c tar.zst || true").stdout.strip() == "0"
    assert yaml.safe_load(D.ssh(lab, "lab-2", f"cat {VENV}/.glmops-runtime.json").stdout)["hash"].startswith("0")
