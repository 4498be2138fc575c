"""A loopback TCP proxy whose connections can be cut on demand (a real dropped log stream) or slowed down (a
real slow link: a transfer that is still under way when a test looks at it)."""

from __future__ import annotations

import contextlib
import socket
import threading
import time


class DroppingProxy:
    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.port = self.listener.getsockname()[1]
        self._conns: list[socket.socket] = []
        self._lock = threading.Lock()
        self._closed = False
        self.drops = 0
        self.rate: float | None = None  # bytes per second from the server to its clients; None: full speed
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=10)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self._lock:
                self._conns += [client, upstream]
            for src, dst, down in ((client, upstream, False), (upstream, client, True)):
                threading.Thread(target=self._pipe, args=(src, dst, down), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, down: bool) -> None:
        try:
            while data := src.recv(16384 if down and self.rate else 65536):
                dst.sendall(data)
                if down and self.rate:
                    time.sleep(len(data) / self.rate)  # the link's speed, changed at any time through .rate
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

    def drop_all(self) -> None:
        """Cut every open connection (new ones are still accepted: a network blip)."""
        with self._lock:
            conns, self._conns = self._conns, []
        for sock in conns:
            try:
                sock.shutdown(socket.SHUT_RDWR)
                sock.close()
            except OSError:
                pass
        self.drops += 1

    def close(self) -> None:
        self._closed = True
        self.listener.close()
        self.drop_all()
