"""A loopback webhook receiver (a pytest fixture): what notifications arrive, as a target sees them."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest


@dataclass
class Receiver:
    """A loopback HTTP server: answers POSTs to a path with the statuses scripted for it (then 200)."""

    server: ThreadingHTTPServer
    got: list[tuple[str, dict[str, str], bytes]] = field(default_factory=list)
    script: dict[str, list[int]] = field(default_factory=dict)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}{path}"

    def bodies(self, path: str) -> list[object]:
        return [json.loads(body) for p, _, body in self.got if p == path]


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    state: dict[str, Receiver] = {}

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            rec = state["r"]
            rec.got.append((self.path, dict(self.headers), body))
            queued = rec.script.get(self.path) or []
            code = queued.pop(0) if queued else 200
            self.send_response(code)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state["r"] = rec = Receiver(server)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield rec
    finally:
        server.shutdown()
        server.server_close()
