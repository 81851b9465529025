"""A loopback HTTP server for unit tests: ``with serve(Handler) as base_url: ...``."""
from __future__ import annotations

import contextlib
import http.server
import threading
from collections.abc import Iterator


@contextlib.contextmanager
def serve(handler: type[http.server.BaseHTTPRequestHandler]) -> Iterator[str]:
    """Run ``handler`` on 127.0.0.1 (an ephemeral port) in a thread; yields ``http://127.0.0.1:PORT``."""
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}"
    finally:
        srv.shutdown()
        srv.server_close()


def reply(handler: http.server.BaseHTTPRequestHandler, status: int, body: bytes) -> None:
    """Send ``status`` with ``body`` (and its Content-Length) from a handler method."""
    handler.send_response(status)
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)
