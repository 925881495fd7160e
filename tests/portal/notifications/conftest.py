"""A webhook receiver for the notification tests: a real HTTP server on 127.0.0.1 in a thread that
checks each delivery's HMAC signature the way the README tells receivers to, and answers with the
status codes a test queues up (then 200)."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from portal.notifications.signing import signature_valid


@dataclass
class Receiver:
    url: str
    secret: str = ""
    answers: list[int] = field(default_factory=list)
    deliveries: list[dict] = field(default_factory=list)


@pytest.fixture
def receiver(settings):
    settings.NOTIFY_WEBHOOK_ALLOW_PRIVATE = True  # the receiver is on loopback
    state = Receiver(url="")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers["Content-Length"]))
            state.deliveries.append(
                {
                    "headers": dict(self.headers),
                    "body": json.loads(body),
                    "signed": signature_valid(
                        state.secret,
                        timestamp=self.headers["X-Portal-Timestamp"],
                        body=body,
                        header=self.headers["X-Portal-Signature"],
                        now=time.time(),
                    ),
                }
            )
            status = state.answers.pop(0) if state.answers else 200
            self.send_response(status)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}/hooks/gpu"
    yield state
    server.shutdown()
    server.server_close()
