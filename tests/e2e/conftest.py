"""The CPU the lab suites ran on, at the head and the tail of the run: machines of this kind
come with different CPUs, and some bugs show on some only (issue 12: vLLM-CPU's bf16 kernel and
AMX), so a CI log must say which case it covered."""
from __future__ import annotations

import re
from pathlib import Path

#: the instruction-set flags that choose CPU kernels (AMX, AVX-512 and its BF16/VNNI, AVX2)
KERNEL_FLAGS = re.compile(r"^(amx\w*|avx512\w*|avx_vnni\w*|avx2|fma|f16c)$")


def cpu_line() -> str:
    """``cpu: <model>; flags: amx_bf16 amx_int8 ... (no AMX)`` from /proc/cpuinfo."""
    try:
        text = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError as exc:
        return f"cpu: unknown ({exc})"
    model = next((ln.split(":", 1)[1].strip() for ln in text.splitlines() if ln.startswith("model name")), "?")
    flags_line = next((ln.split(":", 1)[1] for ln in text.splitlines() if ln.startswith("flags")), "")
    flags = sorted({f for f in flags_line.split() if KERNEL_FLAGS.match(f)})
    amx = "AMX" if any(f.startswith("amx") for f in flags) else "no AMX"
    return f"cpu: {model}; kernel flags: {' '.join(flags) or '-'} ({amx})"


def pytest_report_header(config):
    return cpu_line()


def pytest_terminal_summary(terminalreporter):
    terminalreporter.write_line(f"e2e ran on {cpu_line()}")
