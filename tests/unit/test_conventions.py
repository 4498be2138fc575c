"""CLI conventions (issue 11, point 8): examples in every help, shell completion, json/yaml output of the same
data, list filters, logs --tail, delete, the upload notice, plain tables without a terminal, NO_COLOR.

Commands run in this process through the console script's own entry point (rtjob.commands.main) against this
repository's project; run control talks to a stand-in Ray Jobs API on loopback (real HTTP, canned answers)."""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import click
import pytest
import yaml
from click.shell_completion import ShellComplete
from rtjob.commands import cli as root_cli
from support.cli import REPO, in_process
from support.http_faults import StandIn, json_body
from support.scrub import scrub

import rtjob_contract as contract

NOW_MS = int(time.time() * 1000)
DAY_MS = 86_400_000


def _job(run_id: str, job: str, status: str, started_ms: int) -> dict[str, Any]:
    ended = status in ("SUCCEEDED", "FAILED", "STOPPED")
    return {"submission_id": run_id, "type": "SUBMISSION", "status": status, "message": f"{run_id} is {status}",
            "start_time": started_ms, "end_time": started_ms + 60_000 if ended else None,
            "driver_exit_code": 0 if ended else None, "entrypoint": "python hello.py",
            "metadata": {contract.META_JOB: job}, "runtime_env": {}}


class Dashboard:
    """A stand-in Ray dashboard: two runs (run-a ended an hour ago, run-b running for three days)."""

    def __init__(self) -> None:
        self.jobs = {"run-a": _job("run-a", "hello", "SUCCEEDED", NOW_MS - 3_600_000),
                     "run-b": _job("run-b", "other", "RUNNING", NOW_MS - 3 * DAY_MS)}
        self.server = StandIn(self.respond)

    def respond(self, method: str, path: str) -> tuple[int, str, bytes]:
        parts = path.split("?")[0].strip("/").split("/")  # api, jobs[, id[, logs]]
        if parts[:2] != ["api", "jobs"]:
            return 404, "text/plain", b"not found"
        if len(parts) == 2:
            return 200, "application/json", json_body(list(self.jobs.values()))
        job = self.jobs.get(parts[2])
        if job is None:
            return 404, "text/plain", b"Job does not exist"
        if len(parts) == 4 and parts[3] == "logs":
            return 200, "application/json", json_body({"logs": "line 1\nline 2\nline 3\n"})
        if method == "DELETE":
            if job["status"] == "RUNNING":  # what Ray's job agent refuses, passed on by the dashboard as a 500
                return 500, "text/plain", b"RuntimeError: Attempted to delete job, but it is in a non-terminal state"
            del self.jobs[parts[2]]
            return 200, "application/json", json_body({"deleted": True})
        return 200, "application/json", json_body(job)


@pytest.fixture
def dashboard() -> Iterator[Dashboard]:
    fake = Dashboard()
    with fake.server:
        yield fake


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This repository's project, with no setting from the environment that points elsewhere."""
    scrub(monkeypatch)
    monkeypatch.setenv("RTJOB_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    monkeypatch.chdir(REPO)
    return REPO


@pytest.fixture
def rtjob(project: Path, capsys: pytest.CaptureFixture[str]) -> Callable[..., tuple[int, str, str]]:
    """rtjob ARGS in this process over this repository's project: (exit code, stdout, stderr)."""

    def run(*args: str) -> tuple[int, str, str]:
        proc = in_process(capsys, *args)
        return proc.returncode, proc.stdout, proc.stderr

    return run


def _ray(dashboard: Dashboard) -> list[str]:
    return ["--backend", "ray", "--address", dashboard.server.address]


def _commands(group: click.Group, path: str = "rtjob") -> Iterator[tuple[str, click.Command]]:
    yield path, group
    for name, command in group.commands.items():
        if isinstance(command, click.Group):
            yield from _commands(command, f"{path} {name}")
        else:
            yield f"{path} {name}", command


# -- help ------------------------------------------------------------------------------------------------


def test_every_command_and_group_shows_examples_in_its_help() -> None:
    missing, seen = [], 0
    for path, command in _commands(root_cli):
        seen += 1
        with click.Context(command, info_name=path) as ctx:
            text = command.get_help(ctx)
        examples = text.split("Examples:", 1)[1].split("\n\n", 1)[0] if "Examples:" in text else ""
        shown = [line for line in examples.splitlines() if line.strip().startswith(("rtjob ", "eval "))]
        if not 1 <= len(shown) <= 3:
            missing.append(f"{path}: {len(shown)} example(s)")
    assert seen > 20 and not missing, missing


# -- completion ------------------------------------------------------------------------------------------


def _complete(args: list[str], incomplete: str) -> list[str]:
    return [item.value for item in ShellComplete(root_cli, {}, "rtjob", "_RTJOB_COMPLETE").get_completions(
        args, incomplete)]


def test_completion_scripts_and_the_words_they_complete(rtjob: Callable[..., tuple[int, str, str]],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    for shell in ("bash", "zsh", "fish"):
        code, out, err = rtjob("completion", shell)
        assert code == 0 and "_RTJOB_COMPLETE" in out and not err, (shell, err)
    assert rtjob("completion", "tcsh")[0] == 2

    assert "ddp-resnet" in _complete(["submit"], "dd") and "ddp-resnet" in _complete(["render"], "")
    assert _complete(["validate"], "ddp-r") == ["ddp-resnet"]
    assert "g5-4xlarge" in _complete(["submit", "ddp-resnet", "--compute-config"], "g5")
    assert "g5-4xlarge" in _complete(["compute-config", "show"], "")
    assert _complete(["submit"], "jobs/d") == ["jobs/d"]  # a path: the shell completes files

    # Click's environment protocol, through the console script's entry point, as a shell calls it.
    monkeypatch.setenv("_RTJOB_COMPLETE", "bash_complete")
    monkeypatch.setenv("COMP_WORDS", "rtjob render ddp-r")
    monkeypatch.setenv("COMP_CWORD", "2")
    code, out, err = rtjob()
    assert code == 0 and "plain,ddp-resnet" in out.splitlines() and not err


def test_run_ids_complete_from_the_backend_and_never_print_or_hang(
        dashboard: Dashboard, project: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str],
        tmp_path: Path) -> None:
    from rtjob.commands import completion
    from rtjob.core.record import RunRecord
    from rtjob.ledger import Ledger

    monkeypatch.setenv("RTJOB_HOME", str(tmp_path / "home"))  # an empty run ledger
    assert sorted(_complete(["status", *_ray(dashboard)], "run-")) == ["run-a", "run-b"]
    assert _complete(["logs", *_ray(dashboard)], "run-a") == ["run-a"]
    capfd.readouterr()
    assert _complete(["status", "--backend", "ray", "--address", "http://127.0.0.1:9"], "") == []  # refused
    assert _complete(["status", "--backend", "ray", "--address", "not a url"], "") == []  # bad input
    assert capfd.readouterr() == ("", "")
    # Runs the ledger remembers complete too, their cluster gone or not.
    with Ledger.default() as book:
        book.save(RunRecord(id="gone-1", job="a", backend="ray", status="SUCCEEDED"))
    assert _complete(["status", "--backend", "ray", "--address", "http://127.0.0.1:9"], "") == ["gone-1"]
    assert sorted(_complete(["logs", *_ray(dashboard)], "")) == ["gone-1", "run-a", "run-b"]
    monkeypatch.setenv("RTJOB_HOME", str(tmp_path / "home2"))  # an empty ledger again

    # --context on the line: the run ids come from that context's cluster (read in the completion's thread too).
    config_home = tmp_path / "xdg"
    (config_home / "rtjob").mkdir(parents=True)
    (config_home / "rtjob" / "config.toml").write_text(
        f'[contexts.prod]\nbackend = "ray"\naddress = "{dashboard.server.address}"\n')
    monkeypatch.setenv("XDG_CONFIG_HOME", str(config_home))
    assert sorted(_complete(["status", "--context", "prod"], "run-")) == ["run-a", "run-b"]

    release = threading.Event()
    with StandIn(lambda method, path: (release.wait(30), (200, "application/json", b"[]"))[1]) as stalled:
        monkeypatch.setattr(completion, "RUN_ID_TIMEOUT_S", 0.5)
        start = time.monotonic()
        assert _complete(["status", "--backend", "ray", "--address", stalled.address], "") == []
        assert time.monotonic() - start < 5
        release.set()


# -- output formats --------------------------------------------------------------------------------------


def test_data_commands_print_the_same_data_as_json_and_yaml(
        dashboard: Dashboard, rtjob: Callable[..., tuple[int, str, str]]) -> None:
    ray = _ray(dashboard)
    calls = [["jobs"], ["validate"], ["status", "run-a", *ray], ["list", *ray], ["wait", "run-a", *ray],
             ["stop", "run-a", *ray],
             ["render", "ddp-resnet", "--submission-id", "fixed-id", *ray],
             ["submit", "ddp-resnet", "--submission-id", "fixed-id", "--dry-run", *ray]]
    for args in calls:
        code, as_json, err = rtjob(*args, "-o", "json")
        assert code == 0, (args, err)
        code, as_yaml, err = rtjob(*args, "-o", "yaml")
        assert code == 0, (args, err)
        data = json.loads(as_json)
        assert data and yaml.safe_load(as_yaml) == data, args
    # Anyscale's render stays the file `anyscale job submit -f` takes: the job config, not rtjob's data.
    code, out, err = rtjob("render", "ddp-resnet", "--backend", "anyscale", "-o", "yaml")
    assert code == 0 and out.startswith("# Anyscale job config") and "entrypoint" in yaml.safe_load(out), err


def test_tables_without_a_terminal_are_plain_rows_and_no_color_drops_every_escape(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from rich.table import Table
    from rtjob.commands.printing import print_rich

    def table() -> Table:
        shown = Table(title="runs", box=None, header_style="bold")
        shown.add_column("ID")
        shown.add_column("STATUS")
        shown.add_row("run-a", "SUCCEEDED")
        shown.add_row("a-much-longer-run-id", "RUNNING")
        return shown

    for name in ("NO_COLOR", "FORCE_COLOR"):
        monkeypatch.delenv(name, raising=False)
    capsys.readouterr()
    print_rich("a line", table())
    assert capsys.readouterr().out == "a line\nruns\nID\tSTATUS\nrun-a\tSUCCEEDED\na-much-longer-run-id\tRUNNING\n"

    monkeypatch.setenv("FORCE_COLOR", "1")  # a terminal, as far as rich can tell
    monkeypatch.setenv("TERM", "xterm-256color")
    print_rich(table())
    assert "\x1b[" in capsys.readouterr().out
    monkeypatch.setenv("NO_COLOR", "1")
    print_rich(table())
    styled = capsys.readouterr().out
    assert "\x1b" not in styled and "a-much-longer-run-id  RUNNING" in styled


# -- run control -----------------------------------------------------------------------------------------


def test_list_filters_and_bad_values(dashboard: Dashboard, rtjob: Callable[..., tuple[int, str, str]]) -> None:
    ray = _ray(dashboard)

    def ids(*flags: str) -> list[str]:
        code, out, err = rtjob("list", *ray, "-o", "json", *flags)
        assert code == 0, err
        return [run["id"] for run in json.loads(out)]

    assert ids() == ["run-a", "run-b"]  # newest first
    assert ids("--status", "running") == ["run-b"]
    assert ids("--job", "hello") == ["run-a"]
    assert ids("--since", "1d") == ["run-a"]
    assert ids("--limit", "1") == ["run-a"]
    assert ids("--status", "FAILED") == []
    code, out, err = rtjob("list", *ray, "--since", "soon")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "--since 'soon'" in err
    code, out, err = rtjob("list", *ray, "--status", "DONE")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "--status" in err
    code, out, err = rtjob("list", *ray)  # piped: tab-separated, the header first
    assert code == 0 and out.splitlines()[0].split("\t")[:3] == ["ID", "JOB", "STATUS"]


def test_logs_tail_prints_the_last_lines(dashboard: Dashboard, rtjob: Callable[..., tuple[int, str, str]]) -> None:
    code, out, err = rtjob("logs", "run-a", *_ray(dashboard), "--tail", "2")
    assert code == 0 and out == "line 2\nline 3\n", err
    code, out, err = rtjob("logs", "run-a", *_ray(dashboard), "--tail", "0")
    assert code == 2 and "--tail" in err


def test_delete_an_ended_run_and_refuse_a_running_one(
        dashboard: Dashboard, rtjob: Callable[..., tuple[int, str, str]]) -> None:
    ray = _ray(dashboard)
    code, out, err = rtjob("delete", "run-b", *ray)
    assert code == 2 and "stop it first: rtjob stop run-b" in err and len(err.strip().splitlines()) == 1
    assert "run-b" in dashboard.jobs and not any(r.startswith("DELETE") for r in dashboard.server.requests)
    code, out, err = rtjob("delete", "run-a", *ray)
    assert code == 0 and "run-a: deleted" in err and "DELETE /api/jobs/run-a" in dashboard.server.requests
    code, out, err = rtjob("status", "run-a", *ray)
    assert code == 2 and "no run 'run-a'" in err
    # Ray's own refusal (a run that restarted between rtjob's check and the DELETE) is the same one line.
    from rtjob.backends.ray.client import RayJobsAPI
    from rtjob.core.errors import BadInput

    with pytest.raises(BadInput, match="stop it first"):
        RayJobsAPI(dashboard.server.address, {}).delete("run-b")


def test_submit_says_what_it_uploads(project: Path) -> None:
    from rtjob.backends import configured
    from rtjob.jobspec.resolve import Overrides
    from rtjob.runs.runner import plan

    planned = plan("ddp-resnet", configured({"backend": "ray", "address": "http://127.0.0.1:9"}, REPO), Overrides())
    line = planned.upload.describe() if planned.upload else ""
    match = re.fullmatch(r"(\S+) \((\d+) files, [\d.]+ (KiB|MiB)\)", line)
    assert match and Path(match[1]) == REPO and int(match[2]) > 10, line
