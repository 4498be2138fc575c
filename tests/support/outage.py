"""A real storage outage on loopback: a TCP forwarder in front of a server (the moto S3 server) that can be taken
down and brought back on the same port, or made to fail for a while.

``Forwarder(target_host, target_port)`` listens on ``.port`` (``.url``: http://127.0.0.1:PORT) and pipes every
connection to the target (support.tcp_proxy.DroppingProxy does the piping):

- ``down()``: the listener closed and every open connection cut: a client gets connection refused;
- ``up()``: listening again on the same port, forwarding as before;
- ``faults(seconds)``: from now, for that long, the connections cut, then each new one in turn answered
  ``502 Bad Gateway`` (HTTP/1.1, ``Connection: close``, after reading the request), cut with a reset after reading
  the request, or *lost*: the request forwarded to the server, which acts on it, and its answer replaced by a reset
  (a write that happened, whose client never heard so); after the window it forwards normally again;
- ``close()``, or leave the ``with`` block: stopped for good.

It runs in threads of the test process; every test that makes one closes it.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from typing import Any
from urllib.parse import urlsplit

from .tcp_proxy import DroppingProxy

BAD_GATEWAY = (b"HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/plain\r\nContent-Length: 11\r\n"
               b"Connection: close\r\n\r\nBad Gateway")


class Forwarder(DroppingProxy):
    def __init__(self, target_host: str, target_port: int) -> None:
        self._faults_until = 0.0
        self._fault_count = 0
        self.injected: dict[str, int] = {"502": 0, "cut": 0, "lost": 0}
        self.is_down = False
        super().__init__(target_host, target_port)
        self.url = f"http://127.0.0.1:{self.port}"

    def down(self) -> None:
        """Storage gone: new connections refused, open ones cut."""
        with self._lock:
            if self.is_down:
                return
            self.is_down = True
        self._stop_listening()
        self.drop_all()

    def up(self) -> None:
        """Storage back, on the same port."""
        with self._lock:
            if not self.is_down or self._closed:
                return
            self.is_down = False
        self._listen()

    def faults(self, seconds: float) -> None:
        """For ``seconds`` from now, every request answered 502 or its connection cut, alternately."""
        with self._lock:
            self._faults_until = time.monotonic() + seconds
        self.drop_all()  # a kept-alive connection would carry on past the fault window's start

    def faulting(self) -> bool:
        return time.monotonic() < self._faults_until

    def _serve(self, client: socket.socket) -> None:
        with self._lock:
            fault = None
            if time.monotonic() < self._faults_until:
                fault = ("502", "cut", "lost")[self._fault_count % 3]
                self._fault_count += 1
                self.injected[fault] += 1
        if fault is None:
            super()._serve(client)
        else:
            threading.Thread(target=self._fail, args=(client, fault), daemon=True).start()

    def _fail(self, client: socket.socket, fault: str) -> None:
        try:
            client.settimeout(10)
            request = _read_request(client)
            if fault == "lost" and request:
                with socket.create_connection(self.target, timeout=10) as upstream:
                    upstream.sendall(request)
                    _read_answer(upstream)
            if fault == "502":
                client.sendall(BAD_GATEWAY)
                client.shutdown(socket.SHUT_RDWR)
            else:  # a reset: SO_LINGER 0 makes close send RST
                client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                client.close()

    def close(self) -> None:
        with self._lock:
            was_down, self._closed = self.is_down, True
        if not was_down:
            self._stop_listening()
        self.drop_all()

    def __enter__(self) -> Forwarder:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _read_request(sock: socket.socket) -> bytes:
    """Read one HTTP request (its headers and the body its Content-Length announces) so that the answer is not
    turned into a reset by unread bytes; returns it whole (b"": the client hung up first)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            return b""
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            with contextlib.suppress(ValueError):
                length = int(value.strip())
    left = length - len(body)
    while left > 0:
        chunk = sock.recv(min(left, 65536))
        if not chunk:
            return b""
        data += chunk
        left -= len(chunk)
    return data


def _read_answer(sock: socket.socket) -> None:
    """Read the server's answer to a request (its headers and the body it announces), to be thrown away."""
    sock.settimeout(30)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            return
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next((int(value.strip()) for name, _, value in (line.partition(b":") for line in head.split(b"\r\n")[1:])
                   if name.strip().lower() == b"content-length" and value.strip().isdigit()), 0)
    left = length - len(body)
    while left > 0:
        chunk = sock.recv(min(left, 65536))
        if not chunk:
            return
        left -= len(chunk)


def forwarding_to(endpoint: str) -> Forwarder:
    """A Forwarder in front of the server at ``endpoint`` (a context manager; its port taken down and brought back)."""
    target = urlsplit(endpoint)
    return Forwarder(target.hostname or "127.0.0.1", target.port or 80)
