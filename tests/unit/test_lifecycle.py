"""A run's lifecycle use cases without Click (runs/lifecycle/submission.py, runs/history/sources.py): what they do and what they tell
through RunEvents, against a scripted backend and a ledger in a temporary $RTJOB_HOME."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from rtjob.backends.base import Retry
from rtjob.core.model import Attempt, Attempts, RunInfo, RunStatus
from rtjob.core.record import RunRecord
from rtjob.runs.lifecycle import follow, logtail
from rtjob.runs.lifecycle.follow import Detached, EndSeen, follow_to_end
from support.project import scrub


class Heard:
    """RunEvents, kept as (kind, what) in order."""

    def __init__(self) -> None:
        self.events: list[tuple[str, Any]] = []

    def note(self, text: str) -> None:
        self.events.append(("note", text))

    def warning(self, text: str) -> None:
        self.events.append(("warning", text))

    def submitted(self, planned: Any, done: Any) -> None:
        self.events.append(("submitted", done.run.id))

    def status(self, info: RunInfo) -> None:
        self.events.append(("status", (info.id, info.status.value)))

    def retrying(self, failed: str, decision: Retry) -> None:
        self.events.append(("retrying", (failed, decision.next_run.id if decision.next_run else None)))

    def ended(self, info: RunInfo) -> None:
        self.events.append(("ended", (info.id, info.status.value)))

    def detached(self, run_id: str) -> None:
        self.events.append(("detached", run_id))


class Scripted:
    """A backend whose runs go through the statuses scripted for them, one per status read; r1 fails once and
    is retried as r1-2. ``interrupt_at``: the status read that raises KeyboardInterrupt (Ctrl-C)."""

    name = "scripted"
    address = "http://scripted"

    def __init__(self, interrupt_at: int | None = None) -> None:
        self.script = {"r1": ["RUNNING", "FAILED"], "r1-2": ["RUNNING", "SUCCEEDED"]}
        self.reads = 0
        self.interrupt_at = interrupt_at
        self.stopped: list[str] = []

    def status(self, run_id: str) -> RunInfo:
        self.reads += 1
        if self.reads == self.interrupt_at:
            raise KeyboardInterrupt
        states = self.script[run_id]
        state = states.pop(0) if len(states) > 1 else states[0]
        return RunInfo(id=run_id, job="count", backend=self.name, status=RunStatus(state),
                       start_time="2026-11-25T10:00:00+00:00",
                       end_time="2026-11-25T10:01:00+00:00" if RunStatus(state).terminal else None)

    async def tail(self, run_id: str) -> AsyncIterator[str]:
        yield f"log of {run_id}\n"

    def logs(self, run_id: str) -> str:
        return f"log of {run_id}\n"

    def attempts(self, run_id: str) -> Attempts | None:
        done = [Attempt("r1", 1, "FAILED", 1, "node lost")]
        if self.reads > 2:
            done.append(Attempt("r1-2", 2, self.script["r1-2"][0], None, None))
        return Attempts(done, 1, 1, None)

    def retry(self, run_id: str, request: Any) -> Retry | None:
        if run_id != "r1":
            return Retry(run_id, None, 2, 1)
        next_run = RunInfo(id="r1-2", job="count", backend=self.name, status=RunStatus.PENDING)
        return Retry("r1", "node lost", 1, 1, next_run, created=True)

    def stop(self, run_id: str) -> RunInfo:
        self.stopped.append(run_id)
        return RunInfo(id=run_id, job="count", backend=self.name, status=RunStatus.STOPPED)

    def hourly_cost(self, info: RunInfo) -> None:
        return None

    def stuck(self, run_id: str) -> None:
        return None

    def train_storage(self, run_id: str, log_text: str | None = None) -> list[str]:
        return [f"/storage/{run_id}-own", "/storage/other"]


@pytest.fixture(autouse=True)
def _home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    scrub(monkeypatch)
    monkeypatch.setenv("RTJOB_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(follow, "POLL_S", 0.0)
    monkeypatch.setattr(logtail, "RECONNECT_S", 0.0)


def _ledger_record(run_id: str) -> RunRecord | None:
    from rtjob.runs.memory import ledger

    return ledger().get(run_id)


def test_follow_to_end_follows_a_retry_and_archives_the_end() -> None:
    heard, backend = Heard(), Scripted()
    followed = follow_to_end(backend, "r1", out=None, timeout_s=None, stop_on_interrupt=False,  # type: ignore[arg-type]
                             events=heard)
    assert isinstance(followed, EndSeen) and not followed.stopped and followed.run.id == "r1-2"
    assert [e for e in heard.events if e[0] != "note"] == [
        ("status", ("r1", "RUNNING")), ("retrying", ("r1", "r1-2")), ("status", ("r1-2", "RUNNING")),
        ("ended", ("r1-2", "SUCCEEDED"))]
    record = _ledger_record("r1")  # the run's record keeps its first id; each attempt's log archived
    assert record is not None and record.archived and record.status == "SUCCEEDED"
    assert [a["id"] for a in record.attempts] == ["r1", "r1-2"] and "driver.log" in record.logs[-1]
    # Where the last attempt's script stored its own Ray Train runs, asked while the cluster knows the run.
    assert record.train_storage == ["/storage/r1-2-own", "/storage/other"]


class LaterRetry(Scripted):
    """r1's retry r1-2 starts 30 s after r1 did, as Ray reports a retried run's latest attempt."""

    def status(self, run_id: str) -> RunInfo:
        info = super().status(run_id)
        info.start_time = "2026-11-25T10:00:30+00:00" if run_id == "r1-2" else info.start_time
        info.message = "Job finished successfully." if info.status.terminal else None
        return info


def test_the_end_a_follow_prints_is_the_verdicts_the_whole_runs_not_the_backends_last_answer() -> None:
    """`wait` and `submit`: the end they print and return is core/verdict's of the archived record (the run's start
    its first attempt's, so the duration is the whole run's), as `status` says it, not Ray's answer for the retry."""
    from rtjob.core.verdict import said, verdict
    from rtjob.runs.memory import keep

    # The run as its first attempt's start left it (the run side's Started; here in this machine's ledger).
    keep(RunRecord(id="r1", job="count", backend="scripted", status="RUNNING", start_time="2026-11-25T10:00:00+00:00"),
         Heard())  # type: ignore[arg-type]
    heard, backend = Heard(), LaterRetry()
    followed = follow_to_end(backend, "r1", out=None, timeout_s=None, stop_on_interrupt=False,  # type: ignore[arg-type]
                             events=heard)
    assert isinstance(followed, EndSeen) and followed.run.status == RunStatus.SUCCEEDED
    assert followed.run.start_time == "2026-11-25T10:00:00+00:00", followed.run  # not the retry's 10:00:30
    assert followed.run.attempts == 2 and followed.run.reason == "completed"
    record = _ledger_record("r1")
    assert record is not None and record.start_time == "2026-11-25T10:00:00+00:00"
    assert said(followed.run)["duration_s"] == verdict(record).duration_s == 60.0


@pytest.mark.parametrize("stop_on_interrupt", [True, False])
def test_ctrl_c_stops_the_run_or_leaves_it_running(stop_on_interrupt: bool) -> None:
    heard, backend = Heard(), Scripted(interrupt_at=2)
    followed = follow_to_end(backend, "r1", out=None, timeout_s=None,  # type: ignore[arg-type]
                             stop_on_interrupt=stop_on_interrupt, events=heard)
    if stop_on_interrupt:
        assert isinstance(followed, EndSeen) and followed.stopped and backend.stopped == ["r1"]
        assert ("note", "r1: STOPPED") in heard.events
        stopping = next(what for kind, what in heard.events if kind == "note" and "stopping" in what)
        assert stopping.startswith("interrupted: stopping r1 ...") and "SIGTERM received" in stopping
        record = _ledger_record("r1")
        assert record is not None and record.status == "STOPPED" and record.archived
    else:
        assert followed == Detached("r1") and backend.stopped == [] and heard.events[-1] == ("detached", "r1")
        assert _ledger_record("r1") is None  # nothing learned after the first status: nothing recorded


def test_the_sources_of_a_pipeline_run_are_its_steps_in_order(tmp_path: Path) -> None:
    """A pipeline run's id gives each step's source, or why a step has none, as plain values (no exception leaves
    sources_for for a step); the settings are built once."""
    from rtjob.backends import configured
    from rtjob.runs.history.sources import Source, sources_for
    from rtjob.runs.memory import ledger

    folder = tmp_path / "runs" / "p" / "p-train"
    folder.mkdir(parents=True)
    book = ledger()
    book.save(RunRecord(id="p", job="p", backend="local", status="FAILED", archived=True,
                        steps=[{"name": "train", "run_id": "p-train"}, {"name": "eval", "run_id": "p-eval"}]))
    book.save(RunRecord(id="p-train", job="train", backend="local", status="SUCCEEDED", archived=True,
                        storage_uri=str(folder)))
    built: list[int] = []

    def settings() -> Any:
        built.append(1)
        return configured({})

    found = sources_for("p", None, settings, Heard())
    assert [step for step, _ in found] == ["train", "eval"]
    train, evaluate = found[0].source, found[1].source
    assert isinstance(train, Source) and train.location.path == str(folder) and train.run_id == "p-train"
    assert not isinstance(evaluate, Source) and "no run 'p-eval'" in evaluate.message  # the cluster is down
    assert "rtjob runs lists the runs rtjob knows" in evaluate.message
    assert built == [1]
    given = sources_for(str(folder), None, settings, Heard())  # a folder as given: no settings needed
    assert [(step, src.location.path) for step, src in given if isinstance(src, Source)] == [(None, str(folder))]
    assert built == [1]


class LosesContact(Scripted):
    """Answers once (RUNNING), then cannot be reached any more."""

    def status(self, run_id: str) -> RunInfo:
        from rtjob.core.errors import Unreachable

        if self.reads:
            raise Unreachable("cannot talk to http://scripted")
        return super().status(run_id)


def test_an_error_that_ends_the_follow_is_returned_with_the_run_as_last_seen(monkeypatch: pytest.MonkeyPatch) -> None:
    """Whoever prints the outcome still has the run (its status as last known) when rtjob stops following early."""
    from rtjob.core.errors import Unreachable
    from rtjob.runs.lifecycle.follow import Abandoned

    monkeypatch.setenv("RTJOB_FOLLOW_GRACE_S", "0")
    followed = follow_to_end(LosesContact(), "r1", out=None, timeout_s=None,  # type: ignore[arg-type]
                             stop_on_interrupt=False, events=Heard())
    assert isinstance(followed, Abandoned) and isinstance(followed.error, Unreachable)
    assert followed.run is not None and (followed.run.id, followed.run.status) == ("r1", RunStatus.RUNNING)


def test_ctrl_c_that_detaches_keeps_the_run_as_last_seen() -> None:
    followed = follow_to_end(Scripted(interrupt_at=2), "r1", out=None, timeout_s=None,  # type: ignore[arg-type]
                             stop_on_interrupt=False, events=Heard())
    assert isinstance(followed, Detached) and followed.run is not None and followed.run.status == RunStatus.RUNNING


class MissingModule(Scripted):
    """Its runs fail on a module their cluster lacks."""

    def __init__(self) -> None:
        super().__init__()
        self.script = {"m1": ["RUNNING", "FAILED"], "p-train": ["RUNNING", "FAILED"]}

    def last_lines(self, run_id: str, lines: int) -> str:
        return "Traceback (most recent call last):\nModuleNotFoundError: No module named 'nosuchmod.sub'\n"


@pytest.mark.parametrize(("run_id", "where"), [("m1", "jobs/count.yaml"), ("p-train", "jobs/train.yaml (step train)")])
def test_a_run_that_failed_on_a_missing_module_ends_with_where_to_declare_it(run_id: str, where: str) -> None:
    from rtjob.runs.memory import ledger

    book = ledger()
    book.save(RunRecord(id="p", job="flow", backend="scripted", steps=[{"name": "train", "run_id": "p-train"}]))
    book.save(RunRecord(id="m1", job="count", backend="scripted", job_file="jobs/count.yaml"))
    book.save(RunRecord(id="p-train", job="train", backend="scripted", job_file="jobs/train.yaml", pipeline="p"))
    heard = Heard()
    followed = follow_to_end(MissingModule(), run_id, out=None, timeout_s=None,  # type: ignore[arg-type]
                             stop_on_interrupt=False, events=heard)
    assert isinstance(followed, EndSeen) and followed.run.status == RunStatus.FAILED
    kind, hint = heard.events[-1]
    assert heard.events[-2] == ("ended", (run_id, "FAILED")) and kind == "note"
    assert "module 'nosuchmod'" in hint and f"add it to the `requirements:` of {where}" in hint


def test_a_run_whose_own_storage_holds_nothing_rtjob_knows_is_read_from_its_ray_train_folders(tmp_path: Path) -> None:
    """An unchanged Ray Train script stores its run where it likes: `results ID`/`pull ID` read the folder(s) its
    archive recorded when the run's own storage holds nothing rtjob knows (only rtjob's record and logs); a run
    whose own storage holds results keeps it."""
    from rtjob.backends import configured
    from rtjob.runs.history.sources import Source, sources_for
    from rtjob.runs.memory import ledger

    own = tmp_path / "runs" / "plain" / "r-plain"
    (own / "logs").mkdir(parents=True)
    (own / "rtjob-run.json").write_text("{}")
    (own / "logs" / "driver.log").write_text("log")
    first, second = tmp_path / "mine" / "exp1", tmp_path / "mine" / "exp2"
    for folder in (first, second):
        folder.mkdir(parents=True)
        (folder / "checkpoint_manager_snapshot.json").write_text("{}")
    book = ledger()

    def record(run_id: str, storage: Path, train_storage: list[str]) -> None:
        book.save(RunRecord(id=run_id, job="plain", backend="local", status="SUCCEEDED", archived=True,
                            storage_uri=str(storage), train_storage=train_storage))

    def sources(run_id: str) -> list[tuple[str | None, str]]:
        found = sources_for(run_id, None, lambda: configured({}), Heard())
        return [(step, src.location.path if isinstance(src, Source) else src.message) for step, src in found]

    record("r-plain", own, [str(first)])
    assert sources("r-plain") == [(None, str(first))]
    record("r-two", own, [str(first), str(second)])
    assert sources("r-two") == [("exp1", str(first)), ("exp2", str(second))]
    record("r-gone", tmp_path / "never-written", [str(first)])  # its own folder was never made
    assert sources("r-gone") == [(None, str(first))]
    (own / "metrics.json").write_text("[]")  # the run wrote rtjob's history after all: its own storage
    assert sources("r-plain") == [(None, str(own))]


def test_the_clients_writes_are_the_kernels_transitions_and_the_run_sides_end_stands(tmp_path: Path) -> None:
    """runs/memory.write: the submitter's ``submitted`` and the archive's ``archived`` go to the run's record and
    its index entry (lifecycle.write), then the ledger; an end the companion wrote stands over the client's, with
    its message and log; a transition the kernel refuses leaves the stored record as it is; a run this client only
    saw (no spec) is written to the ledger only."""
    import json

    from rtjob.core import lifecycle
    from rtjob.core.lifecycle import Writer
    from rtjob.core.retry_rule import AttemptEnd
    from rtjob.runs.memory import write
    from rtjob.storage.records import read_record
    from rtjob.storage.run_ports import run_ports

    folder = tmp_path / "root" / "job" / "r1"
    folder.mkdir(parents=True)
    entries = tmp_path / "root" / "rtjob-index" / "entries"
    heard = Heard()
    mine = RunRecord(id="r1", job="job", backend="local", storage_uri=str(folder), spec={"job": "job"})
    write(mine, lifecycle.Submitted(), heard)
    stored = read_record(str(folder), None)
    assert stored is not None and stored.status == "PENDING" and stored.spec == {"job": "job"}
    def newest_entry() -> str:  # the index is append-only: the newest entry of a run stands
        return str(json.loads(sorted(entries.glob("*.json"))[-1].read_text())["status"])

    assert newest_entry() == "PENDING"
    assert _ledger_record("r1") is not None and _ledger_record("r1").status == "PENDING"  # type: ignore[union-attr]

    companion_end = [lifecycle.Started("r1", 1),  # the run side, through the same writer call
                     lifecycle.AttemptEnded("r1", 1, AttemptEnd("FAILED", 3), "exit code 3"),
                     lifecycle.Saved(Writer.COMPANION, ("logs/driver.log",), str(folder))]
    lifecycle.write(run_ports(str(folder)), companion_end)
    seen = lifecycle.Archived(RunStatus.STOPPED, lifecycle.Archive(logs=["logs/other.log"], cost={"usd": 0.5}),
                              "seen stopped", by=Writer.ARCHIVE)
    written = write(mine, seen, heard)
    assert (written.status, written.message, written.completed_by, written.logs) == \
        ("FAILED", "exit code 3", "companion", ["logs/driver.log"])
    assert written.archived and written.cost == {"usd": 0.5} and mine.status == "FAILED"  # mine is the written one
    assert newest_entry() == "FAILED"
    reopen = lifecycle.Progressed(RunStatus.RUNNING)  # refused: the end stands
    assert write(mine, reopen, heard).status == "FAILED" and read_record(str(folder), None).status == "FAILED"  # type: ignore[union-attr]
    assert not [e for e in heard.events if e[0] == "warning"]

    other = tmp_path / "root" / "job" / "seen"
    other.mkdir()
    only_seen = RunRecord(id="seen", job="job", backend="local", storage_uri=str(other), status="RUNNING")
    write(only_seen, lifecycle.Archived(RunStatus.SUCCEEDED), heard)
    assert read_record(str(other), None) is None  # another's folder is never written by a client that only saw it
    assert _ledger_record("seen") is not None and _ledger_record("seen").status == "SUCCEEDED"  # type: ignore[union-attr]
