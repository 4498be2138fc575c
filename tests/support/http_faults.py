"""Real HTTP on loopback that misbehaves on purpose: a fault-injecting reverse proxy in front of a real Ray
dashboard, and a stand-in server for what sits at a wrong address (an auth proxy's sign-in page, a server that
answers every id). Both run in threads of the test process and are stopped by the test."""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

HTML = b"<!doctype html><html><body><h1>Sign in</h1><form action=/login></form></body></html>"
_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "proxy-connection", "te", "upgrade"}


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # an injected reset or a client that hung up: expected here, not worth a traceback


class _Running:
    """Start/stop plumbing shared by the servers below (a context manager; stop joins its thread)."""

    server: _Server

    def _start(self, handler: type[BaseHTTPRequestHandler]) -> None:
        self.server = _Server(("127.0.0.1", 0), handler)
        self.port = self.server.server_address[1]
        self.address = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(timeout=10)

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class StandIn(_Running):
    """Answers every request with ``respond(method, path) -> (status, content type, body)``; counts requests."""

    def __init__(self, respond: Callable[[str, str], tuple[int, str, bytes]]) -> None:
        self.requests: list[str] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _answer(self) -> None:
                outer.requests.append(f"{self.command} {self.path}")
                length = int(self.headers.get("content-length") or 0)
                if length:
                    self.rfile.read(length)
                status, kind, body = respond(self.command, self.path)
                self.send_response(status)
                self.send_header("content-type", kind)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_PUT = do_DELETE = _answer  # noqa: N815

        self._start(Handler)


def json_body(data: Any) -> bytes:
    return json.dumps(data).encode()


class FaultProxy(_Running):
    """A reverse proxy to ``target`` (host, port) that injects faults into the requests ``hit(path, user agent)``
    selects,
    one per request in the order of ``plan`` ("ok", "502", "503", "504", "html", "reset", "stall", "cut": the
    real answer with its Content-Length, cut off half-way through its body), cycling; and
    can be "down" for a while (every connection reset, every path). Streams (the log tail) pass through."""

    def __init__(self, target: tuple[str, int], plan: list[str], hit: Callable[[str, str], bool],
                 stall_s: float = 2.0) -> None:
        self.target = target
        self.plan = plan
        self.hit = hit
        self.stall_s = stall_s
        self.injected: dict[str, int] = {}
        self.seen: list[str] = []  # "METHOD path -> what happened", for failure messages
        self._count = 0
        self._down_until = 0.0
        self._lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"  # one request per connection: a fault never poisons the next one

            def log_message(self, *args: Any) -> None:
                pass

            def _handle(self) -> None:
                fault = outer._fault_for(self.path, self.headers.get("user-agent") or "")
                outer.seen.append(f"{self.command} {self.path.split('?')[0]} -> {fault}")
                if fault == "reset":
                    with contextlib.suppress(OSError):
                        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
                        self.connection.close()
                    return
                if fault in ("502", "503", "504", "html"):
                    status, kind, body = ((200, "text/html", HTML) if fault == "html"
                                          else (int(fault), "text/plain", f"upstream error {fault}".encode()))
                    self.send_response(status)
                    self.send_header("content-type", kind)
                    self.send_header("content-length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                    return
                if fault == "stall":
                    time.sleep(outer.stall_s)
                outer._forward(self, cut=fault == "cut")

            do_GET = do_POST = do_PUT = do_DELETE = _handle  # noqa: N815

        self._start(Handler)

    def down_for(self, seconds: float) -> None:
        """Every request resets for ``seconds``: the dashboard is gone for a while, then back."""
        with self._lock:
            self._down_until = time.monotonic() + seconds

    def _fault_for(self, path: str, agent: str) -> str:
        with self._lock:
            if time.monotonic() < self._down_until:
                fault = "reset"
            elif not self.hit(path, agent):
                return "ok"
            else:
                fault = self.plan[self._count % len(self.plan)]
                self._count += 1
            if fault != "ok":
                self.injected[fault] = self.injected.get(fault, 0) + 1
            return fault

    def _forward(self, handler: BaseHTTPRequestHandler, cut: bool = False) -> None:
        length = int(handler.headers.get("content-length") or 0)
        body = handler.rfile.read(length) if length else None
        headers = {k: v for k, v in handler.headers.items() if k.lower() not in _HOP and k.lower() != "host"}
        upstream = http.client.HTTPConnection(*self.target, timeout=600)
        try:
            upstream.request(handler.command, handler.path, body=body, headers=headers)
            resp = upstream.getresponse()
            self.seen.append(f"  {handler.path.split('?')[0]} upstream {resp.status}")
            handler.send_response(resp.status)
            for key, value in resp.getheaders():
                if key.lower() not in _HOP:
                    handler.send_header(key, value)
            if cut:  # the whole answer announced, half of it sent, the connection closed
                body = resp.read()
                handler.send_header("content-length", str(len(body)))
                handler.end_headers()
                handler.wfile.write(body[:len(body) // 2])
                handler.wfile.flush()
                handler.close_connection = True
                return
            handler.end_headers()
            while chunk := resp.read1(65536):  # streams (the log tail) arrive as they are written
                handler.wfile.write(chunk)
                handler.wfile.flush()
        except OSError:
            pass
        finally:
            upstream.close()
