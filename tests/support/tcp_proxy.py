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
        self._conns: list[socket.socket] = []
        self._lock = threading.Lock()
        self._closed = False
        self.drops = 0
        self.rate: float | None = None  # bytes per second from the server to its clients; None: full speed
        self.port = 0
        self._listen()

    def _listen(self) -> None:
        """Listen on ``self.port`` (0 at first: a free one, kept from then on) and accept in a thread."""
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self.listener = listener
        self.port = listener.getsockname()[1]
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def _stop_listening(self) -> None:
        """Close the listener: new connections are refused (shutdown first wakes the thread blocked in accept, which
        would otherwise keep the socket listening)."""
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)
        self.listener.close()

    def _accept(self, listener: socket.socket) -> None:
        while not self._closed:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            self._serve(client)

    def _serve(self, client: socket.socket) -> None:
        """One accepted connection: piped to the target both ways."""
        try:
            upstream = socket.create_connection(self.target, timeout=10)
        except OSError:
            client.close()
            return
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
        self._stop_listening()
        self.drop_all()
