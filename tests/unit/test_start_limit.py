"""F32: a failure that always comes T seconds after start stops the unit after at most 4 starts,
for any T up to its ``TimeoutStartSec``, in the units glmops ships.

The units are rendered the way a user gets them (``glmops plan --out`` of the shipped
inventories: ``inventories/b200`` serves GLM-5.3-Flash FP8, the 306 GiB checkpoint;
``inventories/b300`` GLM-5.3 FP8, 692 GiB: glmops/catalog/models.yaml ``weight_gib``), their
directives are read back from the files, and systemd's start rate limit is replayed on them.

systemd's limit (src/basic/ratelimit.c ``ratelimit_below``, used by
``unit_test_start_limit`` in src/core/unit.c): a window opens at a start; while less than
``StartLimitIntervalSec`` has passed since it opened, every start counts, and a start beyond
``StartLimitBurst`` in the window is refused (``start-limit-hit``); once the interval has
passed, the next start opens a new window with a count of one. ``Restart=`` brings the unit
back ``RestartSec`` after it stopped.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MAX_STARTS = 4  # field case F32: "the unit stops after at most 4 starts"


def starts_before_refusal(interval_s: float, burst: int, restart_s: float, fail_after_s: float,
                          limit: int = 1000) -> int:
    """Starts systemd makes of a unit that always fails ``fail_after_s`` after each start and
    restarts ``restart_s`` later, before a start is refused; ``limit`` when none is refused."""
    begin, num, t = None, 0, 0.0
    for starts in range(limit):
        if begin is None or t - begin > interval_s:
            begin, num = t, 1
        else:
            num += 1
            if num > burst:
                return starts
        t += fail_after_s + restart_s
    return limit


def unit_directives(path: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in path.read_text().splitlines():
        if "=" in line and not line.startswith(("#", "[")):
            key, _, value = line.partition("=")
            out.setdefault(key, value)
    return out


@pytest.fixture(scope="module")
def shipped_units(tmp_path_factory) -> dict[str, list[Path]]:
    units: dict[str, list[Path]] = {}
    for inv in ("b200", "b300"):
        out = tmp_path_factory.mktemp(inv)
        proc = subprocess.run([sys.executable, "-m", "glmops.cli", "plan", "-i", str(REPO / "inventories" / inv),
                               "--out", str(out / "plan")], cwd=REPO, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        units[inv] = sorted((out / "plan").rglob("*.service"))
        assert units[inv], f"plan --out of inventories/{inv} wrote no unit"
    return units


@pytest.mark.parametrize("inv, gib", [("b200", 306), ("b300", 692)])
def test_slow_failures_stop_after_at_most_four_starts(shipped_units, inv, gib):
    for unit in shipped_units[inv]:
        d = unit_directives(unit)
        assert d["Restart"] == "always", unit  # an engine that exits 0 after dying is restarted too
        timeout, restart = int(d["TimeoutStartSec"]), int(d["RestartSec"])
        interval, burst = int(d["StartLimitIntervalSec"]), int(d["StartLimitBurst"])
        # the start timeout grows with the checkpoint (600 s + 10 s/GiB, glmops.engines.base)
        assert timeout >= 600 + 10 * gib, (unit, timeout)
        worst = 0
        for t in [0, 1, 30, 59, 600, 1799, 1800, 3600] + [timeout * k / 50 for k in range(51)]:
            if t > timeout:
                continue
            n = starts_before_refusal(interval, burst, restart, t)
            assert 1 <= n <= MAX_STARTS, f"{unit.name}: a failure {t:.0f} s after start makes {n} starts"
            worst = max(worst, n)
        assert worst == burst, (unit.name, worst, burst)


def test_the_replay_sees_a_window_too_short():
    # negative control: the 1800 s window shipped before F32 let a failure after a 30-minute load
    # (T = 1790 s) restart forever, which the replay must see
    assert starts_before_refusal(1800, 3, 10, 1790) == 1000
    assert starts_before_refusal(1800, 3, 10, 0) == 3  # a unit that dies at once was always stopped
