"""The MCP server: the tools of the tiers started, their argument schemas and annotations, each answer the JSON
document of the command it runs. The command itself runs through ``Call`` (commands/mcp.py runs rtjob's own
command line in this process and returns its exit code, what it printed on stdout and its one-line error), so this
module knows no use case and no wire format: it chooses the command's flags and reads its answer."""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated, Any

import anyio.to_thread
from mcp.server.mcpserver import MCPServer
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import Field

from ..core.redact import REDACTOR

TAIL_DEFAULT, TAIL_MAX = 200, 2000  # log lines
MAX_BYTES_DEFAULT, MAX_BYTES_MAX = 64 * 1024, 1024 * 1024
WAIT_MAX_S = 30
EXIT_FAILED, EXIT_TIMEOUT = 1, 4  # a wait's outcome, not an error: its document is the answer
# `--set` keys an agent may not touch on submit: the job's command and environment stay the project's own
SUBMIT_REFUSED = ("entrypoint", "runtime_env", "env", "working_dir", "py_modules", "excludes", "image", "setup",
                  "requirements", "pip", "storage")


@dataclass(frozen=True)
class Answer:
    """A command's run: its exit code, its stdout (the -o json document) and, when it failed, its one line."""

    code: int
    out: str
    error: str | None = None


Call = Callable[[list[str]], Answer]


class ToolError(Exception):
    """A tool's refusal or its command's error: answered as an MCP tool error whose text is this one line."""

    def __init__(self, line: str) -> None:
        super().__init__(line)
        self.line = line

READ = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=True)
SUBMIT = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=True)
STOP = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=True)

RunId = Annotated[str, Field(description="The run's id (rtjob runs lists them).", min_length=1)]
JobName = Annotated[str, Field(description="A job of this project by name (the jobs tool lists them).", min_length=1)]
Nodes = Annotated[int | None, Field(description="Nodes of the job's worker group.", ge=1, le=1000)]
Sets = Annotated[list[str] | None, Field(description="Job field overrides, each KEY.PATH=VALUE (e.g. args.epochs=5).")]


def _line(text: str) -> str:
    return REDACTOR.text(" ".join(text.split()))


def _document(answer: Answer, normal: tuple[int, ...] = (0,)) -> str:
    """The command's JSON document, or its one line as the tool's error."""
    if answer.code not in normal or not answer.out.strip():
        raise ToolError(_line(answer.error or f"the command ended with exit code {answer.code}"))
    return answer.out.rstrip("\n")


def _json(data: Any) -> str:
    return json.dumps(REDACTOR.data(data), indent=2)


def _job_flags(nodes: int | None, sets: list[str] | None) -> list[str]:
    flags = ["--nodes", str(nodes)] if nodes is not None else []
    for one in sets or []:
        if "=" not in one:
            raise ToolError(f"set: {one!r} is not KEY.PATH=VALUE")
        flags += ["--set", one]
    return flags


def _answers(fn: Callable[..., str]) -> Callable[..., Awaitable[CallToolResult]]:
    """The tool's answer as one text content; a ToolError as an error result holding its line alone (the SDK
    would prefix a raised error with "Error executing tool NAME"). The command runs in a worker thread that the
    session abandons when it ends (stdin closed), so the server never waits out a wait to exit."""
    @functools.wraps(fn)
    async def tool(*args: Any, **kwargs: Any) -> CallToolResult:
        try:
            text = await anyio.to_thread.run_sync(functools.partial(fn, *args, **kwargs), abandon_on_cancel=True)
        except ToolError as exc:
            return CallToolResult(content=[TextContent(type="text", text=_line(exc.line))], is_error=True)
        return CallToolResult(content=[TextContent(type="text", text=text)])
    return tool


def confirmation(status: dict[str, Any]) -> str:
    """The token a stop is confirmed with: a hash of the run's id, its attempt and its status as now read, so a token
    read before the run changed (retried, ended) no longer stops it."""
    attempts = status.get("attempts")
    attempt = len(attempts) if isinstance(attempts, list) and attempts else 1
    text = f"{status.get('id')}\n{attempt}\n{status.get('status')}"
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def build(call: Call, *, allow_submit: bool = False, allow_stop: bool = False) -> MCPServer:
    """The server with the read tools, plus `submit` and `stop` when their tiers are allowed."""
    from .. import __version__

    tiers = "read" + (", submit" if allow_submit else "") + (", stop" if allow_stop else "")
    server = MCPServer("rtjob", version=__version__, log_level="WARNING", instructions=(
        f"rtjob: Ray / Anyscale training jobs of this project (tools: {tiers}). Each answer is the JSON document "
        "`rtjob <command> -o json` prints; an error is rtjob's one line."))

    def run(argv: list[str], normal: tuple[int, ...] = (0,)) -> str:
        return _document(call(argv), normal)

    @server.tool(annotations=READ, structured_output=False)
    @_answers
    def jobs() -> str:
        """The project's named jobs (jobs/*.yaml): name, description, strategy, nodes, compute config (rtjob jobs)."""
        return run(["jobs", "-o", "json"])

    @server.tool(annotations=READ, structured_output=False)
    @_answers
    def render(job: JobName, nodes: Nodes = None, set: Sets = None) -> str:  # noqa: A002 - the flag's name
        """The exact request a submit of JOB would send, its upload and cost; sends nothing (rtjob render)."""
        return run(["render", job, *_job_flags(nodes, set), "-o", "json"])

    @server.tool(annotations=READ, structured_output=False)
    @_answers
    def runs(storage: Annotated[str | None, Field(description="A team's storage (s3://bucket/prefix or a folder) "
                                                              "instead of this machine's ledger.")] = None,
             job: Annotated[str | None, Field(description="Only runs of this job.")] = None,
             status: Annotated[str | None, Field(description="Only runs in this state (pending, running, "
                                                             "succeeded, failed, stopped, unknown).")] = None,
             user: Annotated[str | None, Field(description="With storage: only runs this user submitted.")] = None,
             since: Annotated[str | None, Field(description="Only runs started within this long (90s, 15m, 2h, "
                                                            "7d).")] = None,
             limit: Annotated[int | None, Field(description="At most this many runs (default 50).", ge=1,
                                                le=1000)] = None) -> str:
        """Runs rtjob remembers, newest first (rtjob runs)."""
        argv = ["runs", "-o", "json"]
        for flag, value in (("--storage", storage), ("--job", job), ("--status", status and status.lower()),
                            ("--user", user), ("--since", since), ("--limit", limit)):
            if value is not None:
                argv += [flag, str(value)]
        return run(argv)

    @server.tool(annotations=READ, structured_output=False)
    @_answers
    def status(run_id: RunId) -> str:
        """One run's status, cost, attempts and who carries it (rtjob status)."""
        return run(["status", run_id, "-o", "json"])

    @server.tool(annotations=READ, structured_output=False)
    @_answers
    def logs(run_id: RunId,
             tail: Annotated[int, Field(description=f"The last N lines (at most {TAIL_MAX}).", ge=1,
                                        le=TAIL_MAX)] = TAIL_DEFAULT,
             max_bytes: Annotated[int, Field(description="At most this many bytes of log, its end.", ge=1,
                                             le=MAX_BYTES_MAX)] = MAX_BYTES_DEFAULT,
             search: Annotated[str | None, Field(description="Only lines holding this text (any case); the "
                                                             "last `tail` of them.")] = None,
             attempt: Annotated[int | None, Field(description="Attempt N of a retried run (1: the first).",
                                                  ge=1)] = None) -> str:
        """What the run's script printed, its end (rtjob logs --tail): {id, attempt, lines, truncated, log}."""
        argv = ["logs", run_id] + ([] if search else ["--tail", str(tail + 1)])  # one more: was it cut?
        argv += ["--attempt", str(attempt)] if attempt is not None else []
        answer = call(argv)
        if answer.code != 0:
            _document(answer)
        lines = answer.out.splitlines(keepends=True)
        if search:
            lines = [line for line in lines if search.lower() in line.lower()]
        truncated = len(lines) > tail
        lines = lines[-tail:]
        while lines and len("".join(lines).encode()) > max_bytes:
            lines.pop(0)
            truncated = True
        return _json({"id": run_id, "attempt": attempt, "lines": len(lines), "truncated": truncated,
                      "log": "".join(lines)})

    @server.tool(annotations=READ, structured_output=False)
    @_answers
    def results(run_id: RunId) -> str:
        """A run's metrics history and checkpoints from its storage; samples are not pulled (rtjob results
        --samples none)."""
        return run(["results", run_id, "--samples", "none", "-o", "json"])

    @server.tool(annotations=READ, structured_output=False)
    @_answers
    def wait(run_id: RunId,
             timeout_s: Annotated[int, Field(description=f"Wait at most this long (at most {WAIT_MAX_S} s); a wait "
                                                         "that times out answers the run as it is now.", ge=1,
                                             le=WAIT_MAX_S)] = WAIT_MAX_S) -> str:
        """Wait for a run to end, for at most timeout_s: the run's document (rtjob wait); one that did not end yet
        carries its current status and an error saying the wait timed out."""
        return run(["wait", run_id, "--timeout", f"{timeout_s}s", "-o", "json"], (0, EXIT_FAILED, EXIT_TIMEOUT))

    if allow_submit:
        @server.tool(annotations=SUBMIT, structured_output=False)
        @_answers
        def submit(job: JobName, nodes: Nodes = None, set: Sets = None) -> str:  # noqa: A002 - the flag's name
            """Submit a named job of this project and return at once: the run's document, with its id (rtjob submit
            --no-wait). Never a path, a raw runtime_env or an entrypoint."""
            names = [one.get("name") for one in json.loads(run(["jobs", "-o", "json"]))]
            if job not in names:
                raise ToolError(f"no job {job!r} in this project (jobs: {', '.join(str(n) for n in names)})")
            for one in set or []:
                if one.split("=", 1)[0].split(".", 1)[0].strip() in SUBMIT_REFUSED:
                    raise ToolError(f"set: {one.split('=', 1)[0]} is the project's to choose, not an agent's")
            return run(["submit", job, *_job_flags(nodes, set), "--no-wait", "-o", "json"])

    if allow_stop:
        @server.tool(annotations=STOP, structured_output=False)
        @_answers
        def stop(run_id: RunId,
                 confirm: Annotated[str | None, Field(description="The token a call without it answered: stops "
                                                                  "the run.")] = None) -> str:
            """Stop a run in two calls: without confirm it stops nothing and answers the run's status with a
            confirmation token; with that token (while the run is in the same attempt and status) it stops the
            run and answers its document (rtjob stop)."""
            now = json.loads(run(["status", run_id, "-o", "json"]))
            token = confirmation(now)
            if confirm is None:
                return _json({"id": now.get("id"), "status": now.get("status"), "stopped": False, "confirm": token,
                              "message": "call stop again with this confirm token to stop the run"})
            if confirm != token:
                raise ToolError(f"stop {run_id}: the confirm token does not match the run as it is now "
                                f"({now.get('status')}); call stop without confirm for a new one")
            return run(["stop", run_id, "-o", "json"])

    return server
