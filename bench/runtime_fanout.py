#!/usr/bin/env python3
"""Engine runtime distribution benchmark (issue 19): package-index bytes and wall time of a
venv runtime installed on N = 1, 2, 4, 8 lab hosts, with the runtime archive (one host runs
pip against the index, packs the venv and the others unpack it: roles/engine_runtime) and
without it (every host runs pip against the index).

What runs: ``ansible-playbook`` with ``roles/engine_runtime`` in index mode
(``engine_runtime_index_url``) on lab hosts ``lab-1`` .. ``lab-N``, against a PEP 503 simple
index on the lab's bridge gateway that serves one lab wheel set (``--set``, default
``router``: vllm-router and its 28 dependencies, 30 MiB) and counts the bytes it sends. Each
point starts from hosts without the venv and an empty archive directory, so the archive
point includes the builder's pip run, the pack, the hand-over to the controller and the
copies.

Targets: index bytes of the archive mode = 1.0x one host's for every N; wall time at N <=
1.3x one host's. On this machine every lab host shares the same 2 CPU cores, so the copies
and unpacks of N hosts compete for CPU that separate machines would not share: read the
times as an upper bound. Needs root + systemd-nspawn. Usage::

    python bench/runtime_fanout.py [--hosts 1,2,4,8] [--set router] [--keep-lab]

Prints one row per (N, mode) and the two ratios.
"""
from __future__ import annotations

import argparse
import html
import http.server
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from glmops.lab import core, spec, wheelhouse  # noqa: E402

NAME = "bench-rt"
PLAY = """\
- name: The engine runtime
  hosts: "{{ bench_hosts }}"
  gather_facts: false
  roles:
    - role: engine_runtime
"""


class Index(http.server.ThreadingHTTPServer):
    """A PEP 503 simple index over one wheelhouse directory; ``sent`` counts wheel bytes."""

    def __init__(self, host: str, wheels: Path):
        self.wheels = {p.name: p for p in wheels.glob("*.whl")}
        self.sent = 0
        self.lock = threading.Lock()
        super().__init__((host, 0), _Handler)


class _Handler(http.server.BaseHTTPRequestHandler):
    server: Index

    def do_GET(self):  # noqa: N802 - http.server's name
        path = self.path.split("?", 1)[0]
        if path.startswith("/simple/"):
            project = path[len("/simple/"):].strip("/")
            links = [f'<a href="/files/{html.escape(n)}">{html.escape(n)}</a><br>'
                     for n in sorted(self.server.wheels)
                     if re.sub(r"[-_.]+", "-", wheelhouse.parse_wheel_name(n)[0]).lower() == project]
            body = ("<html><body>" + "".join(links) + "</body></html>").encode()
            return self._send(200 if links else 404, body, "text/html")
        if path.startswith("/files/") and path[len("/files/"):] in self.server.wheels:
            data = self.server.wheels[path[len("/files/"):]].read_bytes()
            with self.server.lock:
                self.server.sent += len(data)
            return self._send(200, data, "application/octet-stream")
        return self._send(404, b"", "text/plain")

    def _send(self, status: int, body: bytes, ctype: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def ssh(lab: spec.LabState, host: str, cmd: str) -> None:
    subprocess.run(["ssh", "-F", str(spec.state_dir(lab.name) / "ssh_config"), host, cmd],
                   capture_output=True, timeout=300, check=False)


def run_point(lab: spec.LabState, index: Index, n: int, archive: bool, set_name: str, lock: list[str],
              tmp: Path) -> dict:
    hosts = [f"lab-{i}" for i in range(1, n + 1)]
    venv = f"/opt/glmops/venvs/bench-{set_name}-1"
    for h in hosts:
        ssh(lab, h, f"rm -rf {venv} /root/.cache/pip")
    archives = Path(tempfile.mkdtemp(dir=tmp))
    extra = {"bench_hosts": ",".join(hosts), "engine_runtime_engine": f"bench-{set_name}",
             "engine_runtime_version": "1", "engine_runtime_venv": venv,
             "engine_runtime_index_url": f"http://{index.server_address[0]}:{index.server_address[1]}/simple",
             "engine_runtime_requirements": lock,
             # plain http on the lab bridge: pip refuses such an index unless the host is trusted
             "engine_runtime_pip_args": ["--trusted-host", index.server_address[0]], "engine_runtime_uninstall": [], "engine_runtime_system_packages": [],
             "engine_runtime_archive_dir": str(archives) if archive else ""}
    (tmp / "vars.json").write_text(json.dumps(extra))
    play = tmp / "play.yml"
    play.write_text(PLAY)
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_ROLES_PATH": str(REPO / "roles"),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    before = index.sent
    start = time.monotonic()
    proc = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i",
                           str(spec.state_dir(lab.name) / "inventory.yml"), str(play), "-e", f"@{tmp / 'vars.json'}"],
                          capture_output=True, text=True, env=env, cwd=tmp, timeout=3600)
    took = time.monotonic() - start
    if proc.returncode != 0:
        sys.exit(f"N={n} archive={archive}: ansible-playbook exit {proc.returncode}\n{proc.stdout[-4000:]}")
    return {"n": n, "mode": "archive" if archive else "pip on every host", "seconds": took,
            "index_bytes": index.sent - before}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hosts", default="1,2,4,8")
    ap.add_argument("--set", dest="set_name", default="router")
    ap.add_argument("--keep-lab", action="store_true")
    args = ap.parse_args()
    sizes = [int(x) for x in args.hosts.split(",")]
    built = wheelhouse.build(args.set_name)
    lock = wheelhouse.lock_lines(built.path)
    core.down(NAME, log=lambda *_: None)
    lab = core.up(name=NAME, hosts=max(sizes), subnet="auto", binds=spec.default_binds(), profile="b200-sim",
                  log=lambda *_: None)
    index = Index(lab.gateway, built.path)
    threading.Thread(target=index.serve_forever, daemon=True).start()
    rows = []
    try:
        with tempfile.TemporaryDirectory() as td:
            for n in sizes:
                for archive in (True, False):
                    rows.append(run_point(lab, index, n, archive, args.set_name, lock, Path(td)))
                    r = rows[-1]
                    print(f"N={r['n']:<2} {r['mode']:<18} {r['seconds']:7.1f} s  index {r['index_bytes'] / 2**20:8.1f} MiB",
                          flush=True)
    finally:
        index.shutdown()
        if not args.keep_lab:
            core.down(NAME, log=lambda *_: None)
    one = {r["mode"]: r for r in rows if r["n"] == sizes[0]}
    print(f"\nset {args.set_name}: {len(lock)} wheels; ratios against N={sizes[0]} of the same mode")
    print(f"{'N':>3} {'mode':<18} {'seconds':>8} {'x time':>7} {'index MiB':>10} {'x bytes':>8}")
    for r in rows:
        base = one[r["mode"]]
        print(f"{r['n']:>3} {r['mode']:<18} {r['seconds']:8.1f} {r['seconds'] / base['seconds']:7.2f} "
              f"{r['index_bytes'] / 2**20:10.1f} {r['index_bytes'] / max(base['index_bytes'], 1):8.2f}")
    print("targets (archive): index bytes 1.0x, time <= 1.3x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
