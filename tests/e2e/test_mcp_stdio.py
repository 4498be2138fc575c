"""`rtjob mcp --allow-submit` as an agent starts it: a subprocess spoken to over stdio, newline-delimited JSON-RPC,
against the session's embedded cluster. A named job of a throw-away project is submitted (answered at once with its
id), waited for (bounded), its log read and its status asked; every line the server wrote on stdout is JSON-RPC
(rtjob's own lines, Ray's and warnings went to stderr), and closing stdin ends the server within 2 s."""

from __future__ import annotations

import json
import queue
import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from support.cli import REPO, RTJOB, record

pytestmark = pytest.mark.cluster

JOBS = REPO / "tests" / "support" / "jobs"


class Session:
    """The server's stdin and a reader of its stdout lines (each kept, to be checked as JSON-RPC)."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc, self.lines, self.next_id = proc, [], 0
        self.replies: queue.Queue[dict[str, Any]] = queue.Queue()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)
            try:
                message = json.loads(line)
            except ValueError:
                continue  # kept in self.lines: the test fails on it
            if "id" in message:
                self.replies.put(message)

    def send(self, method: str, params: dict[str, Any] | None = None, *, notify: bool = False) -> None:
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method, **({"params": params} if params else {})}
        if not notify:
            self.next_id += 1
            message["id"] = self.next_id
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(message) + "\n")
        self.proc.stdin.flush()

    def ask(self, method: str, params: dict[str, Any] | None = None, timeout: float = 60) -> dict[str, Any]:
        self.send(method, params)
        reply = self.replies.get(timeout=timeout)
        assert reply.get("id") == self.next_id and "error" not in reply, reply
        result: dict[str, Any] = reply["result"]
        return result

    def tool(self, name: str, arguments: dict[str, Any]) -> Any:
        result = self.ask("tools/call", {"name": name, "arguments": arguments})
        text = result["content"][0]["text"]
        record(text)
        assert not result.get("isError"), text
        return json.loads(text)


def test_submit_wait_logs_status_over_stdio(cluster_env: dict[str, str], tmp_path: Path) -> None:
    project = tmp_path / "project"
    (project / "jobs").mkdir(parents=True)
    shutil.copy(JOBS / "count.yaml", project / "jobs" / "count.yaml")
    shutil.copytree(JOBS / "wd", project / "jobs" / "wd")
    err = (tmp_path / "stderr.txt").open("w")
    proc = subprocess.Popen([*RTJOB, "mcp", "--allow-submit"], cwd=project, env=cluster_env, text=True, bufsize=1,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err)
    try:
        session = Session(proc)
        hello = session.ask("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                           "clientInfo": {"name": "rtjob-e2e", "version": "1"}})
        assert hello["serverInfo"]["name"] == "rtjob"
        session.send("notifications/initialized", notify=True)
        tools = [tool["name"] for tool in session.ask("tools/list")["tools"]]
        assert "submit" in tools and "stop" not in tools

        submitted = session.tool("submit", {"job": "count", "set": ["args.lines=4", "args.interval=0.05"]})
        run_id = submitted["id"]
        assert submitted["status"] in ("PENDING", "RUNNING", "SUCCEEDED"), submitted  # answered at once
        deadline = time.monotonic() + 90
        while True:  # each wait is bounded (30 s at most): a timed-out one answers the run as it is now
            waited = session.tool("wait", {"run_id": run_id, "timeout_s": 30})
            if waited["status"] not in ("PENDING", "RUNNING") or time.monotonic() > deadline:
                break
        assert waited["status"] == "SUCCEEDED", waited
        log = session.tool("logs", {"run_id": run_id, "tail": 10})
        assert log["id"] == run_id and "line 4 of 4" in log["log"], log
        status = session.tool("status", {"run_id": run_id})
        assert status["id"] == run_id and status["status"] == "SUCCEEDED"

        assert proc.stdin is not None
        proc.stdin.close()
        closed = time.monotonic()
        proc.wait(timeout=10)
        assert time.monotonic() - closed <= 2.0, "the server outlived its stdin by more than 2 s"
        session.reader.join(timeout=5)
        for line in session.lines:  # nothing but JSON-RPC on stdout
            message = json.loads(line)
            assert message.get("jsonrpc") == "2.0", line
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        err.close()
        record((tmp_path / "stderr.txt").read_text(errors="replace"), *getattr(locals().get("session"), "lines", []))
