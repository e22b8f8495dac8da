"""A real HTTP receiver on 127.0.0.1 for the webhooks, and a small organisation whose jobs fail."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from notifications.models import Channel, Subscription
from notifications.services import SubscriptionInput, subscription_create
from tests.pages.conftest import build_world


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


@pytest.fixture
def receiver():
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
    yield state
    server.shutdown()
    server.server_close()
    thread.join(timeout=5)


@pytest.fixture
def world(db, settings):
    settings.NOTIFY_ALLOW_PRIVATE_WEBHOOKS = True
    settings.PORTAL_URL = "https://portal.example.org"
    return build_world()


@pytest.fixture
def subscribe():
    def make(owner, *, triggers, channel=Channel.WEBHOOK, target="", **fields) -> Subscription:
        return subscription_create(
            owner=owner,
            data=SubscriptionInput(
                name=fields.pop("name", "on-call"),
                channel=channel,
                target=target,
                triggers=triggers,
                **fields,
            ),
        )

    return make
