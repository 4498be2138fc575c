"""MLflow's tracking REST API as a few fixed answers on loopback, for unit tests of rtjob's own REST client (the
run side's mirror, `rtjob track resend`): a real HTTP server in a thread that records each call (path, headers,
body). ``metrics_s``: each batch of metrics takes that long to answer (a slow MLflow); ``existing``: the id of an
MLflow run its search finds (an earlier attempt's). The real MLflow server runs in the e2e tier
(support/mlflow_server.py)."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Call = tuple[str, dict[str, str], bytes]  # path, headers, body


class _Answers(BaseHTTPRequestHandler):
    got: list[Call] = []
    metrics_s = 0.0
    existing: str | None = None

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self._answer()

    def do_POST(self) -> None:  # noqa: N802
        self._answer()

    def _answer(self) -> None:
        body = self.rfile.read(int(self.headers.get("content-length") or 0))
        self.got.append((self.path, dict(self.headers), body))
        answer: dict[str, Any] = {}
        if "get-by-name" in self.path:
            answer = {"experiment": {"experiment_id": "7"}}
        elif self.path.endswith("runs/search"):
            answer = {"runs": [{"info": {"run_id": self.existing}}] if self.existing else []}
        elif self.path.endswith("runs/create"):
            answer = {"run": {"info": {"run_id": "m-1"}}}
        elif self.path.endswith("log-batch") and self.metrics_s and json.loads(body or b"{}").get("metrics"):
            time.sleep(self.metrics_s)
        data = json.dumps(answer).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


@contextlib.contextmanager
def mlflow_stub(metrics_s: float = 0.0, existing: str | None = None) -> Iterator[tuple[str, list[Call]]]:
    """The stand-in's base URL and the calls it got, while the block runs (stopped after)."""
    got: list[Call] = []
    answers = type("Answers", (_Answers,), {"got": got, "metrics_s": metrics_s, "existing": existing})
    server = ThreadingHTTPServer(("127.0.0.1", 0), answers)
    # poll_interval: serve_forever checks for shutdown this often (0.5 s by default: each test's stop would wait it)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", got
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def bodies(got: list[Call]) -> list[tuple[str, dict[str, Any]]]:
    """Each call's path and JSON body."""
    return [(path, json.loads(body or b"{}")) for path, _headers, body in got]
