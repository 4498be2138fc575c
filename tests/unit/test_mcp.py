"""`rtjob mcp`'s tools through the SDK's in-process client (no subprocess, no cluster): the tools of each tier, their
schemas and annotations, each answer the very document `rtjob COMMAND -o json` prints (runs written with rtjob's own
writers into a storage folder and this test's ledger), the stop confirmation, error texts as rtjob's one line, log
bounds, and the command without the SDK. The server as a subprocess whose client goes away mid-call:
tests/e2e/test_mcp_stdio.py."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from rtjob.commands import cli
from rtjob.commands.mcp import run_command
from rtjob.core.redact import REDACTOR
from rtjob.ledger import Ledger
from rtjob.mcp.server import build, confirmation
from support.cli import in_process, plant, record
from support.ui_runs import write_run

SECRET = plant("planted-unit-mcp-secret-71c2e")
READ_TOOLS = ["jobs", "render", "runs", "status", "logs", "results", "wait"]


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two ended runs and one that runs, in a storage folder and remembered in the ledger, as a submit leaves them."""
    root = tmp_path_factory.mktemp("mcp-storage")
    with Ledger.default() as ledger:
        ledger.save(write_run(root, "m-good", "train", log_lines=[f"line {n}" for n in range(1, 3001)] + [
            f"token {SECRET}", "needle in the log", "done"]))
        ledger.save(write_run(root, "m-bad", "train", status="FAILED", epochs=2))
        ledger.save(write_run(root, "m-live", "train", status="RUNNING", epochs=1))
    return root


@pytest.fixture(autouse=True)
def server_knows_the_secret() -> None:
    REDACTOR.add([SECRET])  # as `rtjob mcp` learns it from its environment at start


def session(*calls: tuple[str, dict[str, Any]], submit: bool = False, stop: bool = False,
            ran: list[list[str]] | None = None) -> dict[str, Any]:
    """One in-process MCP session: the tools listed, then each call's result (is_error, its one text); ``ran``
    collects the command lines the tools ran."""
    def call(argv: list[str]) -> Any:
        (ran if ran is not None else []).append(argv)
        return run_command(cli, argv)

    from mcp import (
        Client,  # the SDK (about 0.5 s to import) where a session runs, not in every collecting worker
    )

    server = build(call, allow_submit=submit, allow_stop=stop)

    async def go() -> dict[str, Any]:
        async with Client(server) as client:
            tools = {tool.name: tool for tool in (await client.list_tools()).tools}
            answers = []
            for name, arguments in calls:
                got = await client.call_tool(name, arguments)
                assert len(got.content) == 1 and got.content[0].type == "text", got
                text = got.content[0].text  # type: ignore[union-attr]
                record(text)
                answers.append((got.is_error, text))
            return {"tools": tools, "answers": answers}

    return asyncio.run(asyncio.wait_for(go(), 60))


def test_tools_per_tier_schemas_and_annotations(root: Path) -> None:
    read = session()["tools"]
    assert list(read) == READ_TOOLS  # submit and stop are not even listed
    assert list(session(submit=True)["tools"]) == [*READ_TOOLS, "submit"]
    every = session(submit=True, stop=True)["tools"]
    assert list(every) == [*READ_TOOLS, "submit", "stop"]
    required = {name: tool.input_schema.get("required", []) for name, tool in every.items()}
    assert required == {"jobs": [], "render": ["job"], "runs": [], "status": ["run_id"], "logs": ["run_id"],
                        "results": ["run_id"], "wait": ["run_id"], "submit": ["job"], "stop": ["run_id"]}
    logs = every["logs"].input_schema["properties"]
    assert logs["tail"]["default"] == 200 and logs["tail"]["maximum"] == 2000
    assert logs["max_bytes"]["default"] == 65536
    assert every["wait"].input_schema["properties"]["timeout_s"]["maximum"] == 30
    assert set(every["submit"].input_schema["properties"]) == {"job", "nodes", "set"}  # no entrypoint, no env
    for name, tool in every.items():
        hints = tool.annotations
        assert hints is not None, name
        assert (hints.read_only_hint, hints.destructive_hint) == (
            (False, True) if name == "stop" else (False, False) if name == "submit" else (True, False)), name
        assert hints.idempotent_hint is (name != "submit"), name


def _still(text: str) -> str:
    rows = json.loads(text)
    for row in rows:
        row.get("verdict", {}).pop("duration_s", None)
    return json.dumps(rows, indent=2)


def test_answers_are_the_commands_json_documents(root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    calls = [("jobs", {}), ("status", {"run_id": "m-good"}), ("runs", {"job": "train"}),
             ("runs", {"storage": str(root), "status": "failed"}), ("results", {"run_id": "m-good"}),
             ("wait", {"run_id": "m-bad"}), ("render", {"job": "ddp-resnet", "nodes": 1})]
    answers = session(*calls)["answers"]
    argvs = [["jobs"], ["status", "m-good"], ["runs", "--job", "train"], ["runs", "--storage", str(root), "--status",
             "failed"], ["results", "m-good", "--samples", "none"], ["wait", "m-bad", "--timeout", "30s"],
             ["render", "ddp-resnet", "--nodes", "1"]]
    for (name, _), (failed, text), argv in zip(calls, answers, argvs, strict=True):
        assert not failed, (name, text)
        printed = in_process(capsys, *argv, "-o", "json").stdout
        if name == "render":  # a new run id each time it is planned: the same document but for it
            assert text.replace(json.loads(text)["submit_job"]["submission_id"], "ID") == printed.rstrip("\n").replace(
                json.loads(printed)["submit_job"]["submission_id"], "ID")
            continue
        if name == "runs":  # a run not ended: its verdict's duration runs on between the two reads
            text, printed = _still(text), _still(printed)
        assert text == printed.rstrip("\n"), name  # the very document the command prints
        assert SECRET not in text
    assert json.loads(answers[1][1])["id"] == "m-good"
    assert [r["id"] for r in json.loads(answers[3][1])] == ["m-bad"]
    assert json.loads(answers[5][1])["status"] == "FAILED"  # a run's failure is its wait's answer, not an error


def test_logs_are_bounded_and_masked(root: Path) -> None:
    answers = session(("logs", {"run_id": "m-good"}), ("logs", {"run_id": "m-good", "tail": 2000}),
                      ("logs", {"run_id": "m-good", "tail": 2001}), ("logs", {"run_id": "m-good", "max_bytes": 100}),
                      ("logs", {"run_id": "m-good", "search": "NEEDLE"}))["answers"]
    default, most, over, small, found = answers
    doc = json.loads(default[1])
    assert not default[0] and doc["lines"] == 200 and doc["truncated"] and doc["log"].endswith("done\n")
    assert SECRET not in doc["log"] and "token" in doc["log"]  # through the one redactor
    assert json.loads(most[1])["lines"] == 2000
    assert over[0] and "2000" in over[1]  # refused by the schema, nothing read
    small_doc = json.loads(small[1])
    assert len(small_doc["log"].encode()) <= 100 and small_doc["truncated"] and small_doc["log"].endswith("done\n")
    assert json.loads(found[1])["log"] == "needle in the log\n"


def test_errors_are_rtjobs_one_line(root: Path) -> None:
    answers = session(("status", {"run_id": "m-nowhere"}), ("logs", {"run_id": "m-nowhere"}),
                      ("submit", {"job": "no-such-job"}), ("submit", {"job": "ddp-resnet", "set": ["entrypoint=sh"]}),
                      ("render", {"job": "ddp-resnet", "set": ["args"]}), submit=True)["answers"]
    for failed, text in answers:
        assert failed and "\n" not in text and not text.startswith("Error executing"), text
    assert answers[0][1].startswith("no run 'm-nowhere'")
    assert answers[1][1] == answers[0][1]
    assert "no job 'no-such-job'" in answers[2][1]
    assert "entrypoint" in answers[3][1]


def test_stop_asks_for_a_token_and_refuses_a_wrong_one(root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A run whose status can be read without its cluster (an ended one, from its record): the first call answers a
    token and runs no stop; a token that does not match is refused; neither ran `rtjob stop`."""
    status = json.loads(in_process(capsys, "status", "m-bad", "-o", "json").stdout)
    ran: list[list[str]] = []
    answers = session(("stop", {"run_id": "m-bad"}), ("stop", {"run_id": "m-bad", "confirm": "0123456789abcdef"}),
                      ("stop", {"run_id": "m-nowhere"}), stop=True, ran=ran)["answers"]
    (asked_failed, asked), (wrong_failed, wrong), (unknown_failed, unknown) = answers
    token = json.loads(asked)
    assert not asked_failed and token["stopped"] is False and token["confirm"] == confirmation(status)
    assert token["status"] == status["status"]
    assert wrong_failed and "does not match" in wrong
    assert unknown_failed and unknown.startswith("no run 'm-nowhere'")
    assert ran and all(argv[0] == "status" for argv in ran), ran  # nothing was stopped
    after = json.loads(in_process(capsys, "status", "m-bad", "-o", "json").stdout)
    assert after["status"] == status["status"]
    assert confirmation({**status, "status": "STOPPED"}) != token["confirm"]  # a token of another state
    confirmed: list[list[str]] = []
    (failed, text), = session(("stop", {"run_id": "m-bad", "confirm": token["confirm"]}), stop=True,
                              ran=confirmed)["answers"]
    assert confirmed[-1] == ["stop", "m-bad", "-o", "json"]  # the token stops: rtjob stop runs (no cluster here)
    assert not failed or "\n" not in text, text


def test_without_the_sdk_mcp_says_how_to_add_it(monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    import sys

    for name in [m for m in sys.modules if m == "mcp" or m.startswith(("mcp.", "rtjob.mcp"))]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "mcp", None)  # import mcp raises ImportError
    proc = in_process(capsys, "mcp")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and not proc.stdout, proc
    assert "pip install 'rtjob[mcp]'" in proc.stderr


def test_rtjob_help_imports_no_mcp_sdk() -> None:
    import subprocess
    import sys

    code = ("import sys; from rtjob.commands import cli; "
            "assert not {'mcp', 'rtjob.mcp'} & set(sys.modules), sorted(sys.modules)")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
