"""Fixtures for the doubles' own tests: start double processes on loopback ephemeral ports."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from engine_http_double import free_port  # noqa: E402


def http(method: str, url: str, body=None, timeout: float = 15, headers=None):
    """(status, parsed JSON or text); raises OSError on connection errors."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            raw, status = r.read(), r.status
    except urllib.error.HTTPError as exc:
        raw, status = exc.read(), exc.code
    try:
        return status, json.loads(raw) if raw else raw
    except ValueError:
        return status, raw.decode()


def sse(url: str, body: dict, timeout: float = 15) -> list:
    """POST a streaming request; return the decoded ``data:`` payloads ("[DONE]" kept)."""
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    out = []
    with urllib.request.urlopen(req, timeout=timeout) as r:
        assert r.headers["Content-Type"].startswith("text/event-stream")
        for line in r:
            line = line.decode().strip()
            if line.startswith("data: "):
                payload = line[6:]
                out.append(payload if payload == "[DONE]" else json.loads(payload))
    return out


def wait_status(url: str, want: int = 200, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = http("GET", url, timeout=2)[0]
            if last == want:
                return
        except OSError as exc:
            last = exc
        time.sleep(0.1)
    raise AssertionError(f"{url} did not answer {want} within {timeout} s (last: {last})")


class Procs:
    """Start doubles as programs; everything started is terminated at teardown."""

    def __init__(self, tmp_path: Path):
        self.tmp = tmp_path
        self.procs: list[subprocess.Popen] = []
        self.bindir = tmp_path / "bin"
        self.bindir.mkdir(exist_ok=True)

    def link(self, name: str, target: str) -> Path:
        link = self.bindir / name
        if not link.exists():
            link.symlink_to(HERE / target)
        return link

    def run(self, argv, env=None, timeout=30) -> subprocess.CompletedProcess:
        return subprocess.run([str(a) for a in argv], capture_output=True, text=True,
                              env={**os.environ, **(env or {})}, timeout=timeout)

    def start(self, argv, env=None, name="proc") -> subprocess.Popen:
        log = open(self.tmp / f"{name}-{len(self.procs)}.stderr", "w")
        p = subprocess.Popen([str(a) for a in argv], stdout=log, stderr=subprocess.STDOUT,
                             env={**os.environ, **(env or {})})
        p.logfile = log.name
        self.procs.append(p)
        return p

    def stop(self):
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()


@pytest.fixture
def procs(tmp_path):
    ps = Procs(tmp_path)
    yield ps
    ps.stop()


@pytest.fixture
def port():
    return free_port
