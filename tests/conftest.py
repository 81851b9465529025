"""Suite-wide hooks: the CPU the run used, and how the README's test command spreads the suite.

The README runs ``pytest -n auto`` (pytest-xdist, two workers on this machine kind's two cores):
the end-to-end tests (tests/e2e: lab hosts under systemd-nspawn, module-scoped labs) are two scopes,
the vLLM-heavy files and the rest, each run by one worker in file order and handed out first
because they are the longest; every other test file is its own scope (module-scoped fixtures built
once), taken by whichever worker is free.

One worker per core, not more: a run with three workers on two cores (2026-12-02) ran each lab
file ~1.4x slower (deploy_vllm + checkpoint_serve 1,873 s -> 2,683 s), about what a third lane
brings. The lab hosts' processes are not children of pytest, so pytest's own CPU time (~53% of two
cores) hid that the machine was already busy.

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
E2E = "tests/e2e"
#: the end-to-end files that deploy vLLM-CPU replicas and restart them (the longest: CI of session 5
#: measured day2 ~1,060 s, deploy_vllm ~800 s, checkpoint_serve ~270 s); they form one xdist scope,
#: every other e2e file the other, so two labs run at a time at most
VLLM_HEAVY = ("test_day2_lab.py", "test_deploy_vllm.py", "test_checkpoint_serve.py")


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
    """pytest-xdist's per-scope scheduler with our scopes: tests/e2e is two scopes (the vLLM-heavy
    files, the rest; each runs its labs in file order on one worker), every other file its own;
    scopes are handed out in collection order (e2e first, see below), not by size. (``--dist loadgroup`` would need item marks, which xdist
    3.8 cannot apply under pytest 9.2: it rewrites ``item._nodeid``, which 9.2 no longer reads.)"""
    from xdist.scheduler import LoadScopeScheduling

    class LabScopes(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            if not path.startswith(f"{E2E}/"):
                return path
            return "lab-vllm" if path.rsplit("/", 1)[-1] in VLLM_HEAVY else "lab"

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
