"""tests/support/outage.py's Forwarder, on its own: it forwards, goes down (connection refused) and comes back on
the same port, and fails for a window (502s and cut connections, alternately), then forwards again. The target is
a real HTTP server on loopback (support.http_faults.StandIn)."""

from __future__ import annotations

import http.client
import time
from collections.abc import Iterator

import pytest
from support.http_faults import StandIn
from support.outage import Forwarder


@pytest.fixture
def forwarder() -> Iterator[Forwarder]:
    with StandIn(lambda method, path: (200, "text/plain", b"ok " + path.encode())) as target, \
            Forwarder("127.0.0.1", target.port) as fwd:
        yield fwd


def get(port: int, path: str = "/x") -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def until(check: object, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, "the condition never held"
        time.sleep(0.05)


def test_forwards_goes_down_and_comes_back_on_the_same_port(forwarder: Forwarder) -> None:
    assert forwarder.url == f"http://127.0.0.1:{forwarder.port}"
    assert get(forwarder.port) == (200, b"ok /x")
    port = forwarder.port
    forwarder.down()
    with pytest.raises(ConnectionRefusedError):
        get(port)
    forwarder.up()
    assert forwarder.port == port
    assert get(port, "/back") == (200, b"ok /back")


def test_down_cuts_an_open_connection(forwarder: Forwarder) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", forwarder.port, timeout=10)
    try:
        conn.request("GET", "/a")
        assert conn.getresponse().read() == b"ok /a"
        forwarder.down()
        with pytest.raises((OSError, http.client.HTTPException)):
            conn.request("GET", "/b")
            conn.getresponse().read()
    finally:
        conn.close()


def test_faults_answer_502_or_cut_alternately_then_forward_again(forwarder: Forwarder) -> None:
    forwarder.faults(600)
    seen = []
    for _ in range(4):
        try:
            seen.append(get(forwarder.port)[0])
        except (OSError, http.client.HTTPException):
            seen.append("cut")
    assert seen == [502, "cut", 502, "cut"]
    assert forwarder.injected == {"502": 2, "cut": 2}
    forwarder.faults(0.2)  # a new window from now, ending soon: then forwarding as before

    def ok() -> bool:
        try:
            return get(forwarder.port) == (200, b"ok /x")
        except (OSError, http.client.HTTPException):
            return False

    until(ok)
    assert not forwarder.faulting()
