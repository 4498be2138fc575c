"""A loopback webhook receiver (a pytest fixture, or `receiving()` for a module's own scope): what notifications
arrive, as a target sees them."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest


@dataclass
class Receiver:
    """A loopback HTTP server: answers POSTs to a path with the statuses scripted for it (then 200)."""

    server: ThreadingHTTPServer
    got: list[tuple[str, dict[str, str], bytes]] = field(default_factory=list)
    script: dict[str, list[int]] = field(default_factory=dict)
    # A path whose requests are held (recorded in ``got`` at once, answered once the event is set): a sender caught
    # in the middle of its delivery.
    held: dict[str, threading.Event] = field(default_factory=dict)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}{path}"

    def bodies(self, path: str) -> list[object]:
        return [json.loads(body) for p, _, body in self.got if p == path]

    def for_run(self, run_id: str) -> list[dict[str, Any]]:
        """The JSON messages (to any path) about run ``run_id``."""
        messages = []
        for _, _, body in self.got:
            try:
                message = json.loads(body or b"{}")
            except ValueError:
                continue
            if isinstance(message, dict) and message.get("run_id") == run_id:
                messages.append(message)
        return messages


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    """A receiver for one test."""
    with receiving() as rec:
        yield rec


@contextmanager
def receiving() -> Iterator[Receiver]:
    """A receiver serving until the block ends."""
    state: dict[str, Receiver] = {}

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            rec = state["r"]
            rec.got.append((self.path, dict(self.headers), body))
            if self.path in rec.held:
                rec.held[self.path].wait(timeout=120)
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
