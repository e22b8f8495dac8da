"""A real HTTP receiver on 127.0.0.1 for webhooks: a threading http.server that keeps what it received."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Received:
    path: str
    headers: dict
    body: bytes

    def json(self):
        return json.loads(self.body)


@dataclass
class Receiver:
    """Answers each POST with the next status of `statuses` (then 200), and keeps what it received."""

    url: str
    statuses: list[int] = field(default_factory=list)
    received: list[Received] = field(default_factory=list)


@contextmanager
def http_receiver() -> Iterator[Receiver]:
    state = Receiver(url="")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 - the name http.server calls
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            state.received.append(Received(self.path, dict(self.headers), body))
            status = state.statuses.pop(0) if state.statuses else 200
            self.send_response(status)
            self.send_header("Content-Type", "text/plain")
            self.end_headers()
            self.wfile.write(b"ok" if status < 400 else b"receiver broke")

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}/hook"
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
