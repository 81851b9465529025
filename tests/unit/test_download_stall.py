"""F31: `glmops download` names a stalled file as soon as the role's progress poll carries it."""
from __future__ import annotations

import io

from rich.console import Console

from glmops.commands.download import PROGRESS_TASK, ProgressPrinter


def _poll(host: str, stalls: list[dict], plain_http: bool = False) -> dict:
    return {"event": "runner_retry", "event_data": {"task": PROGRESS_TASK, "host": host, "res": {"glmops_event": PROGRESS_TASK,
        "state": "running", "bytes_done": 10, "bytes_total": 100, "percent": 10.0, "rate_bps": 0,
        "stalls": stalls, "plain_http": plain_http}}}


def test_each_stall_is_printed_once_naming_the_file():
    """F31 ("the download names the stalled file, retries it, and falls back to plain HTTP")."""
    out = io.StringIO()
    printer = ProgressPrinter(Console(file=out, width=300), every_s=3600)
    first = {"path": "model-00003.safetensors", "bytes": 10485760, "size": 24960000, "percent": 42.0,
             "seconds": 600.0, "attempt": 1, "transfer": "default"}
    printer(_poll("gpu-a", [first]))
    printer(_poll("gpu-a", [first]))  # the same stall on the next poll: not again
    second = dict(first, attempt=2)
    printer(_poll("gpu-a", [first, second], plain_http=True))
    lines = [line for line in out.getvalue().splitlines() if "stalled:" in line]
    assert len(lines) == 2
    assert "gpu-a" in lines[0] and "model-00003.safetensors stalled at 42.0 % (no bytes for 600 s), attempt 1" \
        in lines[0] and "plain HTTP" not in lines[0]
    assert "attempt 2; fetching it again over plain HTTP" in lines[1]
