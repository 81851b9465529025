"""Every Molecule scenario under molecule/ (one per role; `provision` covers nvidia_driver,
container_toolkit and prechecks) with its full sequence (destroy, syntax, create, prepare,
converge, idempotence, verify, destroy) on ONE lab booted once for all of them.

One ``glmops lab up --profile b200-sim`` boots a host per platform of every scenario (the hosts
boot in parallel); each scenario then runs as ``molecule test -s S`` with ``GLMOPS_MOL_LAB`` set,
so its create/destroy attach to and detach from its own hosts of that lab
(molecule/shared/create.yml), a few scenarios at a time. Molecule's own shared state
(``shared_state`` + a ``default`` scenario) would run them one after the other, and its
parallel ``--workers`` needs a collection (galaxy.yml). Asserted per scenario: Molecule's
success line (8 actions, 8 successful), the idempotence run's recap with ``changed=0`` on every
host, and the verify run executed successfully with its assertions reached.

Needs root and systemd-nspawn (marked ``lab``). Lab ``mol-roles`` on a free 10.77.X.0/24.
"""
from __future__ import annotations

import concurrent.futures
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import yaml

import deploylab as D

pytestmark = D.LAB_MARKS

REPO = Path(__file__).resolve().parents[2]
LAB = "mol-roles"
# scenarios at a time: on 2 cores most of a scenario's time is apt, pip and HTTP waits on the hosts
WORKERS = 3
# longest first (measured alone on a quiet 2-core machine), so the last one to start is short
ORDER = ("checkpoint", "provision", "engine_service", "discovery_store", "monitoring", "engine_runtime", "generation")
ANSI = re.compile(r"\x1b\[[0-9;]*m")
# assertions each verify.yml reaches only after its checks passed (one per scenario)
VERIFY_TASKS = {
    "checkpoint": "The missing shard alone came back, byte for byte; the unchanged run fetched nothing",
    "discovery_store": "Restarted once, on the new state dir",
    "engine_runtime": "The changed input replaced the venv (marker rewritten, hf-xet gone)",
    "engine_service": "The change restarted it once, with the new env, and it runs",
    "generation": "Generation 1 is back byte for byte and current",
    "monitoring": "The change reloaded Prometheus (same process) with the new SLO rule",
    "provision": "The node's report is ok",
}


def scenarios() -> dict[str, list[dict]]:
    """Scenario name -> its platforms (the base config's one when it lists none)."""
    out = {}
    for f in sorted((REPO / "molecule").glob("*/molecule.yml")):
        out[f.parent.name] = (yaml.safe_load(f.read_text()) or {}).get("platforms") or [{"name": "lab-1"}]
    return out


def glmops(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([str(REPO / ".venv/bin/glmops"), *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout)


def run_scenario(name: str, logs: Path) -> tuple[str, int, str, float]:
    env = {**os.environ, "PATH": f"{REPO / '.venv/bin'}:{os.environ['PATH']}", "ANSIBLE_FORCE_COLOR": "0",
           "NO_COLOR": "1", "COLUMNS": "400", "PYTHONUNBUFFERED": "1", "GLMOPS_MOL_LAB": LAB}
    t0 = time.monotonic()
    # one unbuffered stream: Molecule's step lines (stderr) stay between the playbook output they frame
    r = subprocess.run([str(REPO / ".venv/bin/molecule"), "test", "-s", name], cwd=REPO, env=env,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=1500)
    out = ANSI.sub("", r.stdout)
    (logs / f"{name}.log").write_text(out)
    return name, r.returncode, out, time.monotonic() - t0


def step(out: str, name: str, action: str) -> str:
    """The output of one action of scenario ``name`` (between its Executing and Executed lines)."""
    # Molecule writes "[S > action] Executing" without a terminal, "S ➜ action: Executing" with one
    tag = rf"(?:\[{name} > {action}\] |{name} ➜ {action}: )"
    m = re.search(rf"{tag}Executing\n(.*?)\n\S+\s+{tag}Executed: (\w+)", out, re.S)
    assert m, f"{name}: no {action} step in the output:\n{out[-3000:]}"
    assert m.group(2) == "Successful", f"{name}: {action} {m.group(2)}:\n{m.group(1)[-3000:]}"
    return m.group(1)


def test_every_scenario_on_one_lab(tmp_path):
    found = scenarios()
    assert set(found) == set(ORDER), f"scenarios {sorted(found)}: add a new one to ORDER and VERIFY_TASKS"
    profiles = {p.get("profile", "cpu") for ps in found.values() for p in ps[:1]}
    assert profiles <= {"cpu", "b200-sim"}, profiles  # one lab, one profile: b200-sim serves both
    sets = sorted({s for ps in found.values() for p in ps for s in p.get("wheel_sets", [])})
    if sets:  # before the boot: the wheelhouse is bound into the hosts when it exists
        subprocess.run([sys.executable, "-m", "glmops.lab.wheelhouse", "build", "--set", ",".join(sets)],
                       check=True, cwd=REPO, timeout=900)
    glmops("lab", "down", "--name", LAB)
    hosts = sum(len(ps) for ps in found.values())
    t0 = time.monotonic()
    up = glmops("lab", "up", "--name", LAB, "--hosts", str(hosts), "--profile", "b200-sim", "--subnet", "auto")
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        booted = time.monotonic() - t0
        with concurrent.futures.ThreadPoolExecutor(max_workers=WORKERS) as pool:
            results = list(pool.map(lambda n: run_scenario(n, tmp_path), ORDER))
    finally:
        down = glmops("lab", "down", "--name", LAB)
    print(f"\nmolecule on one lab: {hosts} hosts booted in {booted:.0f} s; all in {time.monotonic() - t0:.0f} s; "
          + ", ".join(f"{n} {s:.0f} s" for n, _, _, s in results))
    assert down.returncode == 0, down.stdout + down.stderr
    for name, rc, out, _ in results:
        assert rc == 0, f"{name} (log {tmp_path / (name + '.log')}):\n{out[-4000:]}"
        assert re.search(rf"{name}\s+: actions=8\s+successful=8\s+disabled=0\s+skipped=0\s+missing=0\s+failed=0", out), \
            out[-2000:]
        recaps = re.findall(r"^\s*│?\s*(\S+)\s+: ok=(\d+)\s+changed=(\d+)\s+unreachable=0\s+failed=0",
                            step(out, name, "idempotence"), re.M)
        assert recaps and all(c == "0" for _, _, c in recaps), f"{name}: idempotence recap {recaps}"
        verify = re.sub(r"\n\s*│\s*", " ", step(out, name, "verify"))  # Molecule wraps long lines
        assert f"TASK [{VERIFY_TASKS[name]}]" in verify, f"{name}: verify did not reach its last check:\n{verify[-3000:]}"
        assert re.search(r"lab-1\s+: ok=\d+\s+changed=\d+\s+unreachable=0\s+failed=0", verify), verify[-2000:]
