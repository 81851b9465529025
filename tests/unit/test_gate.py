"""The readiness gate fails fast and says why (issue 12): a unit that cannot become ready by
waiting fails at once with its result and the journal's first error line; while it waits, each
window of the gate reports what every unit waits for, and the progress view prints it.

Runs roles/engine_service/files/glmops_hostctl.py ``ready`` in-process with ``systemctl show``
answers shaped as systemd 252 (Debian 12) prints them: ``ExecMainCode`` is the CLD_* code of the
main process' end (1 exited, 2 killed, 3 dumped) and ``ExecMainStatus`` its status or signal
number (systemd.exec(5), "$EXIT_CODE, $EXIT_STATUS").
"""
from __future__ import annotations

import http.server
import importlib.util
import json
import time
from pathlib import Path

import pytest

from glmops import runner
from local_http import serve

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def hc(monkeypatch, tmp_path):
    path = REPO / "roles" / "engine_service" / "files" / "glmops_hostctl.py"
    spec = importlib.util.spec_from_file_location("glmops_hostctl_gate", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    monkeypatch.setattr(mod, "GATE_DIR", str(tmp_path / "gate"))
    monkeypatch.setattr(mod, "journal", lambda unit, lines=100: JOURNAL)
    return mod


JOURNAL = """2026-12-01T10:00:00+0000 lab-1 systemd[1]: Started glm-x-agg-0.service - glmops x agg.
2026-12-01T10:00:01+0000 lab-1 glm-x-agg-0[41]: INFO:     Uvicorn running on http://10.0.0.1:8001
2026-12-01T10:00:02+0000 lab-1 glm-x-agg-0[41]: ERROR 12-01 10:00:02 Worker proc VllmWorker-0 died unexpectedly
2026-12-01T10:00:02+0000 lab-1 systemd[1]: glm-x-agg-0.service: Main process exited, code=dumped, status=4/ILL
"""


class _Health(http.server.BaseHTTPRequestHandler):
    code = 503

    def do_GET(self):
        self.send_response(self.code)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *a):
        pass


@pytest.fixture
def health():
    with serve(_Health) as url:
        yield f"{url}/health"


def _ready(hc, capsys, *args) -> tuple[int, dict]:
    rc = hc.main(["ready", *args])
    return rc, json.loads(capsys.readouterr().out)


def test_a_unit_past_its_start_limit_fails_at_once_naming_signal_and_first_error(hc, monkeypatch, capsys):
    monkeypatch.setattr(hc, "unit_show", lambda units: {u: {
        "ActiveState": "failed", "SubState": "failed", "Result": "signal", "NRestarts": "3",
        "StartLimitBurst": "3", "ExecMainCode": "3", "ExecMainStatus": "4"} for u in units})
    t0 = time.monotonic()
    rc, out = _ready(hc, capsys, "--timeout", "600", "--service", "glm-x-agg-0.service|http://127.0.0.1:9/health|")
    row = out["services"][0]
    assert rc == 1 and out["done"] and not row["ready"] and time.monotonic() - t0 < 15
    # systemd 252 keeps Result=signal when it refuses the automatic restart (seen on lab hosts:
    # "Start request repeated too quickly" then "Failed with result 'signal'", with the restart counter at 3 = StartLimitBurst)
    assert row["reason"] == ("glm-x-agg-0.service is failed (result signal; start limit hit after 3 starts; "
                             "last exit: core-dump, signal ILL)")
    # the engine's own error line comes before systemd's
    assert row["first_error"].endswith("Worker proc VllmWorker-0 died unexpectedly")


# journalctl -u of a unit that an earlier deploy ran and stopped: its errors come before this run's start
EARLIER_RUN = """2026-12-01T09:00:00+0000 lab-1 systemd[1]: Started glm-x-agg-0.service - glmops x agg.
2026-12-01T09:00:05+0000 lab-1 glm-x-agg-0[7]: ERROR 12-01 09:00:05 engine core failed: an earlier run's error
2026-12-01T09:05:00+0000 lab-1 systemd[1]: glm-x-agg-0.service: Main process exited, code=killed, status=15/TERM
2026-12-01T09:05:00+0000 lab-1 systemd[1]: glm-x-agg-0.service: Failed with result 'signal'.
"""


def test_first_error_reads_only_the_last_start_of_the_unit(hc):
    """CI (session 5): the gate named an error of the unit's earlier run; only lines from the last
    "systemd[1]: Started" on count, the engine's own first, then systemd's."""
    assert hc.first_error(EARLIER_RUN + JOURNAL).endswith("Worker proc VllmWorker-0 died unexpectedly")
    double = EARLIER_RUN + (
        "2026-12-02T05:28:25+0000 lab-1 systemd[1]: Started glm-x-agg-0.service - glmops x agg.\n"
        "2026-12-02T05:28:26+0000 lab-1 glm-x-agg-0[5357]: trtllm-serve double: dying at start (ILL)\n"
        "2026-12-02T05:28:26+0000 lab-1 systemd[1]: glm-x-agg-0.service: Main process exited, code=killed, status=4/ILL\n"
        "2026-12-02T05:28:36+0000 lab-1 systemd[1]: glm-x-agg-0.service: Start request repeated too quickly.\n")
    assert hc.first_error(double).endswith("Main process exited, code=killed, status=4/ILL")
    # no Started line kept (the tail cut it off): every line counts
    assert "earlier run's error" in hc.first_error(EARLIER_RUN.split("\n", 1)[1])


def test_an_engine_that_exited_0_and_stays_down_fails_after_the_grace(hc, monkeypatch, capsys):
    """Restart=on-failure after an exit 0: inactive/dead, no restart pending (issue 12)."""
    monkeypatch.setattr(hc, "INACTIVE_GRACE_S", 0.3)
    monkeypatch.setattr(hc, "unit_show", lambda units: {u: {
        "ActiveState": "inactive", "SubState": "dead", "Result": "success", "NRestarts": "0",
        "ExecMainCode": "1", "ExecMainStatus": "0"} for u in units})
    t0 = time.monotonic()
    rc, out = _ready(hc, capsys, "--timeout", "600", "--service", "u.service|http://127.0.0.1:9/health|")
    row = out["services"][0]
    assert rc == 1 and time.monotonic() - t0 < 15
    assert row["reason"] == "u.service is inactive with no restart pending (result success; 0 restarts, " \
                            "last exit: exited, status 0)"


def test_a_restart_pending_is_waited_for_and_reported(hc, monkeypatch, capsys):
    """activating/auto-restart is no verdict: systemd brings the unit back after RestartSec."""
    monkeypatch.setattr(hc, "unit_show", lambda units: {u: {
        "ActiveState": "activating", "SubState": "auto-restart", "NRestarts": "1",
        "ExecMainCode": "1", "ExecMainStatus": "0"} for u in units})
    rc, out = _ready(hc, capsys, "--timeout", "600", "--window", "0.2", "--run", "r1",
                     "--service", "u.service|http://127.0.0.1:9/health|")
    row = out["services"][0]
    assert rc == 0 and not out["done"] and not row["decided"]
    assert row["waiting"] == "loading"
    assert row["reason"] == "unit activating/auto-restart (1 restart, last exit: exited, status 0)"


def test_windows_of_one_gate_share_its_start_and_deadline(hc, monkeypatch, capsys, health, tmp_path):
    monkeypatch.setattr(hc, "unit_show", lambda units: {u: {"ActiveState": "active", "MainPID": "7"} for u in units})
    spec = f"u.service|{health}|"
    rc, first = _ready(hc, capsys, "--timeout", "2.5", "--window", "1", "--run", "g", "--service", spec)
    assert rc == 0 and not first["done"] and first["services"][0]["waiting"] == "/health"
    assert "answered 503" in first["services"][0]["reason"]
    assert (tmp_path / "gate" / "g.json").exists()
    rc, second = _ready(hc, capsys, "--timeout", "2.5", "--window", "1", "--run", "g", "--service", spec)
    assert rc == 0 and not second["done"]
    assert second["services"][0]["seconds"] > first["services"][0]["seconds"] + 0.5  # same start
    rc, last = _ready(hc, capsys, "--timeout", "2.5", "--window", "1", "--run", "g", "--service", spec)
    row = last["services"][0]
    assert rc == 1 and last["done"] and not row["ready"] and 2.5 <= row["seconds"] < 5
    assert not (tmp_path / "gate" / "g.json").exists()  # a finished gate leaves nothing behind
    # a new run starts a new clock
    _Health.code = 200
    try:
        rc, fresh = _ready(hc, capsys, "--timeout", "2.5", "--window", "1", "--run", "g2", "--service", spec)
    finally:
        _Health.code = 503
    assert rc == 0 and fresh["done"] and fresh["services"][0]["ready"]


def test_one_failed_unit_stops_the_gate_for_all(hc, monkeypatch, capsys, health):
    states = {"bad.service": {"ActiveState": "failed", "SubState": "failed", "Result": "exit-code",
                              "NRestarts": "3", "ExecMainCode": "1", "ExecMainStatus": "1"},
              "slow.service": {"ActiveState": "active"}}
    monkeypatch.setattr(hc, "unit_show", lambda units: {u: states[u] for u in units})
    t0 = time.monotonic()
    rc, out = _ready(hc, capsys, "--timeout", "600", "--service", f"slow.service|{health}|",
                     "bad.service|http://127.0.0.1:9/health|")
    rows = {r["unit"]: r for r in out["services"]}
    assert rc == 1 and out["done"] and time.monotonic() - t0 < 15
    assert "last exit: exited, status 1" in rows["bad.service"]["reason"]
    assert rows["slow.service"]["reason"].startswith("still waiting for /health when the gate stopped")
    assert "journal" not in rows["slow.service"]


def test_progress_view_prints_each_window(capsys):
    res = {"stdout": json.dumps({"glmops_event": runner.READY, "done": False, "services": [
        {"unit": "glm-lab-prefill-0.service", "decided": False, "waiting": "the one-token request",
         "reason": "one-token request to http://10.77.0.11:8001/v1/completions answered 500", "seconds": 61.2},
        {"unit": "glm-lab-decode-0.service", "decided": True, "ready": True, "seconds": 40.0}]})}
    lines = runner.gate_waiting("lab-1", res)
    assert lines == ["lab-1            glm-lab-prefill-0.service: waiting 61 s for the one-token request "
                     "(one-token request to http://10.77.0.11:8001/v1/completions answered 500)"]
    from rich.console import Console

    console = Console(width=80, force_terminal=False)
    view = runner._Progress(console, quiet=False)
    view.event({"event": "runner_retry", "event_data": {"host": "lab-1", "task": "Wait for readiness", "res": res}},
               runner.RunResult(verb="deploy", rc=0, status="running", artifacts=Path("."), seconds=0.0))
    assert "glm-lab-prefill-0.service: waiting 61 s for the one-token request" in capsys.readouterr().out
