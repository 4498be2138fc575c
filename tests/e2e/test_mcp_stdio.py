"""`rtjob mcp --allow-submit` as an agent starts it: a subprocess spoken to over stdio, newline-delimited JSON-RPC,
against the session's embedded cluster. A named job of a throw-away project is submitted (answered at once with its
id), waited for (bounded), its log read and its status asked; every line the server wrote on stdout is JSON-RPC
(rtjob's own lines, Ray's and warnings went to stderr), and closing stdin ends the server within 2 s; so does a
client that goes away while a tool's command still runs (no cluster: the command is a stand-in that sleeps)."""

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


SLOW_SERVER = '''
import time
from rtjob.commands import mcp
from rtjob.mcp.server import Answer

def slow(root, argv):  # a wait that runs its whole 30 s
    with mcp._ONE_AT_A_TIME:
        time.sleep(30)
    return Answer(0, "{}")

mcp.run_command = slow
mcp.mcp.main(args=[], standalone_mode=False)
'''


def test_stdin_closed_during_a_call_ends_the_server_within_2_s(tmp_path: Path) -> None:
    """A client that goes away while a tool's command runs (a bounded wait: up to 30 s) does not keep the server:
    it ends within 2 s of its stdin closing, and wrote nothing but JSON-RPC on stdout."""
    import subprocess
    import sys
    import time

    proc = subprocess.Popen([sys.executable, "-c", SLOW_SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    try:
        assert proc.stdin is not None and proc.stdout is not None
        for message in ({"id": 1, "method": "initialize", "params": {
                            "protocolVersion": "2025-06-18", "capabilities": {},
                            "clientInfo": {"name": "t", "version": "1"}}},
                        {"method": "notifications/initialized"},
                        {"id": 2, "method": "tools/call", "params": {"name": "wait", "arguments": {"run_id": "r-1"}}}):
            proc.stdin.write(json.dumps({"jsonrpc": "2.0", **message}) + "\n")
            proc.stdin.flush()
            if message.get("id") == 1:
                assert json.loads(proc.stdout.readline())["id"] == 1
        time.sleep(0.3)  # the call is under way
        proc.stdin.close()
        closed = time.monotonic()
        proc.wait(timeout=10)
        took = time.monotonic() - closed
        assert took <= 2.0, f"the server outlived its stdin by {took:.2f} s"
        rest = proc.stdout.read()
        record(rest)
        assert all(json.loads(line)["jsonrpc"] == "2.0" for line in rest.splitlines())
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
