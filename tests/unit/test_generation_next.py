"""The deployment's next generation number (roles/generation `next`, run once on the controller
by plays/record.yml): the current one when every host runs this Plan as the same current
generation, else the highest number on any host + 1."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "roles" / "generation" / "files" / "glmops_generation.py"


def _next(lists: dict, plan_hash: str) -> dict:
    proc = subprocess.run([sys.executable, str(SCRIPT), "next"], input=json.dumps({"lists": lists, "plan_hash": plan_hash}),
                          capture_output=True, text=True, check=True)
    return json.loads(proc.stdout)


def _got(current, *numbers_hashes):
    return {"current": current, "generations": [{"number": n, "plan_hash": h} for n, h in numbers_hashes]}


def test_same_plan_everywhere_keeps_the_current_number():
    assert _next({"a": _got(2, (1, "x"), (2, "h")), "b": _got(2, (2, "h"))}, "h") == {"number": 2, "same": True}


def test_a_new_plan_a_missing_or_a_different_current_takes_the_highest_plus_one():
    assert _next({"a": _got(2, (1, "x"), (2, "h")), "b": _got(2, (2, "h"))}, "new") == {"number": 3, "same": False}
    assert _next({"a": _got(2, (2, "h")), "b": _got(None)}, "h") == {"number": 3, "same": False}
    assert _next({"a": _got(2, (2, "h")), "b": _got(4, (4, "h"))}, "h") == {"number": 5, "same": False}
    assert _next({"a": _got(None), "b": _got(None)}, "h") == {"number": 1, "same": False}
    assert _next({}, "h") == {"number": 1, "same": False}
