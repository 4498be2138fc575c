"""The lifecycle kernel (core/lifecycle/) and the one retry rule (core/retry_rule.py): every legal transition,
illegal ones refused, whose end stands (the precedence table), under hypothesis; and the one writer call
interrupted between its steps and called again, over a real run folder on the local filesystem."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rtjob.core import lifecycle
from rtjob.core.index_entry import entry_of
from rtjob.core.lifecycle import (
    Archived,
    AttemptEnded,
    Beat,
    Ended,
    GaveUp,
    IllegalTransition,
    Progressed,
    Retrying,
    Started,
    Submitted,
    Writer,
    apply,
)
from rtjob.core.model import RunStatus
from rtjob.core.record import RunRecord
from rtjob.core.retry_rule import AttemptEnd, retries_left, retry_reason
from rtjob.storage.run_ports import RecordFile, run_ports

ENDS = [s for s in RunStatus if s.terminal]
ALL = list(RunStatus)
WRITERS = list(Writer)
RUN_SIDE = [Writer.COMPANION, Writer.SUPERVISOR, Writer.PIPELINE_SUPERVISOR]
CLIENTS = [Writer.SUBMITTER, Writer.FOLLOWER, Writer.ARCHIVE]
ENDERS = [Writer.FOLLOWER, Writer.ARCHIVE, Writer.PIPELINE_SUPERVISOR]  # the writers of Ended


def record(status: RunStatus = RunStatus.PENDING, completed_by: str | None = None) -> RunRecord:
    return RunRecord(id="r1", job="job", backend="ray", status=status.value, completed_by=completed_by)


def started(n: int = 1) -> RunRecord:
    return apply(record(), Started(attempt(n), n, "2026-11-27T10:00:00+00:00"))


def attempt(n: int) -> str:
    return "r1" if n == 1 else f"r1-retry{n - 1}"


# -- the retry rule ---------------------------------------------------------------------------------------------

@given(code=st.one_of(st.none(), st.integers(-20, 300)), timed_out=st.booleans(), stop=st.booleans(),
       status=st.sampled_from([s.value for s in ALL]))
def test_the_retry_rule_retries_only_a_lost_driver(code: int | None, timed_out: bool, stop: bool, status: str) -> None:
    reason = retry_reason(AttemptEnd(status, code, timed_out=timed_out, stop_requested=stop))
    killed = code in (-9, 137, -15, 143)
    assert (reason is not None) == (status == "FAILED" and killed and not timed_out and not stop)
    if reason is not None:
        assert f"(exit code {code})" in reason and ("SIGKILL" in reason or "SIGTERM" in reason)


def test_a_lost_supervisor_is_a_lost_driver_unless_stopped_or_timed_out() -> None:
    assert retry_reason(AttemptEnd("FAILED", None, lost_driver="Job supervisor actor died")) == \
        "its driver was lost (Job supervisor actor died)"
    assert retry_reason(AttemptEnd("FAILED", None, stop_requested=True, lost_driver="x")) is None
    assert retry_reason(AttemptEnd("STOPPED", None, lost_driver="x")) is None


@given(attempt_n=st.integers(1, 105), max_retries=st.integers(0, 100))
def test_retries_left_allow_max_retries_after_the_first(attempt_n: int, max_retries: int) -> None:
    allowed = [n for n in range(1, 106) if retries_left(n, max_retries)]
    assert allowed == list(range(1, max_retries + 1))
    assert retries_left(attempt_n, max_retries) == (attempt_n <= max_retries)


# -- legal transitions ------------------------------------------------------------------------------------------

def test_submitted_is_pending_with_its_time() -> None:
    r = apply(record(RunStatus.UNKNOWN), Submitted("2026-11-27T10:00:00+00:00"))
    assert (r.status, r.submitted_at, r.timeline["submitted"]) == ("PENDING", "2026-11-27T10:00:00+00:00",
                                                                    "2026-11-27T10:00:00+00:00")


def test_submitted_before_the_run_is_sent_leaves_its_timeline_stage_to_the_submit() -> None:
    """The storage check's record (staged=False): PENDING, submitted_at, no timeline stage; the submit's own
    ``submitted`` after it stamps the stage with the moment the run was sent."""
    r = apply(record(RunStatus.UNKNOWN), Submitted("2026-11-27T10:00:00+00:00", staged=False))
    assert (r.status, r.submitted_at, r.timeline) == ("PENDING", "2026-11-27T10:00:00+00:00", {})
    apply(r, Submitted("2026-11-27T10:00:40+00:00"))
    assert (r.submitted_at, r.timeline) == ("2026-11-27T10:00:00+00:00", {"submitted": "2026-11-27T10:00:40+00:00"})


@given(status=st.sampled_from(ENDS))
def test_submitted_refuses_an_ended_run_never_submitted(status: RunStatus) -> None:
    with pytest.raises(IllegalTransition, match="submitted refused"):
        apply(record(status), Submitted())


def test_started_runs_the_attempt_and_the_companion_carries_it() -> None:
    r = started()
    assert (r.status, r.carried_by, r.start_time) == ("RUNNING", "companion", "2026-11-27T10:00:00+00:00")
    assert r.attempts == [{"id": "r1", "attempt": 1, "status": "RUNNING", "exit_code": None, "retry_reason": None}]


@given(by=st.sampled_from(RUN_SIDE), ended=st.sampled_from(ENDS))
def test_a_retry_starting_clears_the_earlier_attempts_end(by: Writer, ended: RunStatus) -> None:
    r = started()
    end = AttemptEnded("r1", 1, AttemptEnd(ended.value, 137), "killed") if by == Writer.COMPANION else GaveUp(
        "killed", by=by)
    apply(r, end)
    r.logs = ["logs/driver.log", "logs/r1.log"]
    apply(r, Started("r1-retry1", 2))
    assert (r.status, r.completed_by, r.end_time, r.message, r.exit_code) == ("RUNNING", None, None, None, None)
    assert r.logs == ["logs/r1.log"]  # each attempt's own log stays listed
    assert [a["id"] for a in r.attempts] == ["r1", "r1-retry1"]


def test_an_ended_attempt_or_an_older_one_never_starts_again() -> None:
    r = started(2)
    with pytest.raises(IllegalTransition, match="a later attempt"):
        apply(r, Started("r1", 1))
    apply(r, AttemptEnded("r1-retry1", 2, AttemptEnd("SUCCEEDED", 0)))
    with pytest.raises(IllegalTransition, match="this attempt ended SUCCEEDED"):
        apply(r, Started("r1-retry1", 2))


@given(status=st.sampled_from(ALL), by=st.sampled_from(RUN_SIDE), carried=st.sampled_from([None, "companion",
                                                                                           "supervisor"]))
def test_beat_never_changes_the_status_and_a_companion_never_takes_a_supervisors_run(
        status: RunStatus, by: Writer, carried: str | None) -> None:
    r = record(status)
    r.carried_by = carried
    apply(r, Beat(by, "2026-11-27T10:00:05+00:00"))
    assert r.status == status.value and r.last_seen == "2026-11-27T10:00:05+00:00"
    assert r.carried_by == ("supervisor" if by == Writer.COMPANION and carried == "supervisor" else by.recorded_as)


@given(by=st.sampled_from(CLIENTS))
def test_only_the_run_side_beats(by: Writer) -> None:
    with pytest.raises(IllegalTransition, match=f"the {by.value} does not write it"):
        apply(record(), Beat(by))


@given(code=st.integers(-20, 200), timed_out=st.booleans())
def test_attempt_ended_records_the_end_and_the_one_rules_reason(code: int, timed_out: bool) -> None:
    status = "SUCCEEDED" if code == 0 else "FAILED"
    end = AttemptEnd(status, code, timed_out=timed_out)
    r = apply(started(), AttemptEnded("r1", 1, end, "why", "2026-11-27T10:01:00+00:00"))
    assert (r.status, r.exit_code, r.completed_by, r.end_time) == (status, code, "companion",
                                                                   "2026-11-27T10:01:00+00:00")
    assert r.attempts[-1]["retry_reason"] == retry_reason(end)
    assert apply(r, AttemptEnded("r1", 1, end, "why", "2026-11-27T10:01:00+00:00")).to_json() == r.to_json()


def test_attempt_ended_refuses_a_non_end_and_an_older_attempts_end() -> None:
    with pytest.raises(IllegalTransition, match="not an end"):
        apply(started(), AttemptEnded("r1", 1, AttemptEnd("RUNNING")))
    with pytest.raises(IllegalTransition, match="a later attempt"):
        apply(started(2), AttemptEnded("r1", 1, AttemptEnd("FAILED", 137)))


def test_retrying_is_pending_again_with_the_failed_attempt_kept() -> None:
    r = apply(started(), AttemptEnded("r1", 1, AttemptEnd("FAILED", 137), "killed"))
    reason = r.attempts[0]["retry_reason"]
    apply(r, Retrying(1, reason, "r1", "r1-retry1"))
    assert (r.status, r.completed_by, r.end_time) == ("PENDING", None, None)
    assert [(a["id"], a["status"]) for a in r.attempts] == [("r1", "FAILED"), ("r1-retry1", "PENDING")]
    assert r.message == f"attempt 1 {reason}; attempt 2 is r1-retry1"
    again = apply(r, Retrying(1, reason, "r1", "r1-retry1"))  # idempotent: a writer repeating itself
    assert again.attempts == r.attempts and again.status == "PENDING"


def test_retrying_after_the_retry_started_leaves_it_running() -> None:
    r = started(2)
    apply(r, Retrying(1, "its driver was lost (x)", "r1", "r1-retry1"))
    assert r.status == "RUNNING" and r.attempts[0]["retry_reason"] == "its driver was lost (x)"


@given(status=st.sampled_from([RunStatus.SUCCEEDED, RunStatus.STOPPED]))
def test_a_run_that_succeeded_or_stopped_is_never_retried_nor_given_up(status: RunStatus) -> None:
    with pytest.raises(IllegalTransition, match=f"the run ended {status.value}"):
        apply(record(status), Retrying(1, "x", "r1", "r1-retry1"))
    with pytest.raises(IllegalTransition, match=f"the run ended {status.value}"):
        apply(record(status), GaveUp("why"))


@given(status=st.sampled_from([RunStatus.PENDING, RunStatus.RUNNING, RunStatus.FAILED, RunStatus.UNKNOWN]))
def test_gave_up_is_failed_with_why(status: RunStatus) -> None:
    r = apply(record(status), GaveUp("its supervisor died 3 times"))
    assert (r.status, r.message, r.completed_by) == ("FAILED", "its supervisor died 3 times", "supervisor")
    assert r.end_time is not None


# -- the client's own transitions: a pipeline's progress, the archive of an end it saw -----------------------------

@given(status=st.sampled_from([RunStatus.PENDING, RunStatus.RUNNING]), end=st.sampled_from(ENDS),
       by=st.sampled_from(ENDERS), reopen=st.booleans())
def test_progressed_never_ends_nor_reopens_an_end_unless_a_submit_of_its_rank_does(
        status: RunStatus, end: RunStatus, by: Writer, reopen: bool) -> None:
    assert apply(record(), Progressed(status)).status == status.value
    with pytest.raises(IllegalTransition, match="an end is written by Ended"):
        apply(record(), Progressed(end))
    r = apply(record(RunStatus.RUNNING), Ended(end, by))
    if reopen and lifecycle.rank(by.recorded_as) <= lifecycle.rank(Writer.FOLLOWER.recorded_as):
        reopened = apply(r, Progressed(status, reopen=True))
        assert (reopened.status, reopened.completed_by, reopened.end_time, reopened.archived) == \
            (status.value, None, None, False) and "ended" not in reopened.timeline
    else:
        with pytest.raises(IllegalTransition, match="stands"):
            apply(r, Progressed(status, reopen=reopen))
        assert r.status == end.value


SAVED = lifecycle.Archive(logs=["logs/driver.log"], log_home="s3://b/j/r1", cost={"usd": 1.0},
                          metrics={"loss": 0.1}, train_storage=["s3://b/train"],
                          attempts=[{"id": "r1", "attempt": 1, "status": "FAILED"}])


@given(end=st.sampled_from(ENDS), seen=st.sampled_from(ENDS), by=st.sampled_from(RUN_SIDE))
def test_archived_keeps_the_run_sides_end_and_log_and_fills_the_rest(end: RunStatus, seen: RunStatus,
                                                                     by: Writer) -> None:
    r = record(RunStatus.RUNNING)
    r.status, r.end_time, r.completed_by = end.value, "2026-11-27T10:00:00+00:00", by.recorded_as  # its end
    r.message, r.logs, r.log_home = "run side", ["logs/part-0"], "s3://b/j/r1"
    once = apply(r, Archived(seen, SAVED, "client saw", by=Writer.ARCHIVE))
    assert (once.status, once.message, once.completed_by, once.logs) == \
        (end.value, "run side", by.recorded_as, ["logs/part-0"])
    assert once.archived and once.cost == {"usd": 1.0} and once.metrics == {"loss": 0.1}
    assert once.attempts == SAVED.attempts and once.train_storage == ["s3://b/train"]
    again = apply(once, Archived(seen, SAVED, "client saw", by=Writer.ARCHIVE))  # idempotent: a repair
    assert again.to_json() == once.to_json()


@given(seen=st.sampled_from(ENDS), before=st.sampled_from([None, *ENDS]))
def test_archived_writes_the_clients_end_where_no_run_side_wrote_one(seen: RunStatus,
                                                                     before: RunStatus | None) -> None:
    r = started()
    if before is not None:  # an end another client saw first: the later one stands (equal rank)
        apply(r, Ended(before, Writer.FOLLOWER))
    done = apply(r, Archived(seen, SAVED, "seen ended", at="2026-11-27T11:00:00+00:00"))
    assert (done.status, done.message, done.completed_by, done.logs, done.log_home) == \
        (seen.value, "seen ended", "client", ["logs/driver.log"], "s3://b/j/r1")
    assert done.archived and done.timeline["ended"] == done.end_time
    with pytest.raises(IllegalTransition, match="not an end"):
        apply(record(), Archived(RunStatus.RUNNING, SAVED))


# -- whose end stands ---------------------------------------------------------------------------------------------

@given(first=st.sampled_from(ENDERS), second=st.sampled_from(ENDERS), s1=st.sampled_from(ENDS),
       s2=st.sampled_from(ENDS))
def test_ended_follows_the_precedence_table(first: Writer, second: Writer, s1: RunStatus, s2: RunStatus) -> None:
    r = apply(record(RunStatus.RUNNING), Ended(s1, first))
    if lifecycle.rank(first.recorded_as) > lifecycle.rank(second.recorded_as):
        with pytest.raises(IllegalTransition, match="stands"):
            apply(r, Ended(s2, second))
        assert r.status == s1.value
    else:
        assert apply(r, Ended(s2, second)).status == s2.value
        assert r.completed_by == second.recorded_as


@given(status=st.sampled_from([RunStatus.PENDING, RunStatus.RUNNING, RunStatus.UNKNOWN]), by=st.sampled_from(ENDERS))
def test_ended_refuses_a_status_that_is_not_an_end(status: RunStatus, by: Writer) -> None:
    with pytest.raises(IllegalTransition, match="not an end"):
        apply(record(), Ended(status, by))


def test_the_table_ranks_the_run_side_over_clients_over_nobody() -> None:
    assert {w.recorded_as for w in CLIENTS} == {"client"} and {w.recorded_as for w in RUN_SIDE} == {
        "companion", "supervisor"}
    assert lifecycle.rank(None) < lifecycle.rank("client") < lifecycle.rank("companion") == lifecycle.rank(
        "supervisor")
    assert lifecycle.ended_by_run_side(record(RunStatus.FAILED, "companion"))
    assert not lifecycle.ended_by_run_side(record(RunStatus.FAILED, "client")) and not lifecycle.ended_by_run_side(None)


@given(mine_by=st.sampled_from([None, "client", "companion", "supervisor"]),
       stored_by=st.sampled_from([None, "client", "companion", "supervisor"]),
       mine=st.sampled_from(ALL), theirs=st.sampled_from(ALL))
def test_merge_keeps_the_higher_ranked_end(mine_by: str | None, stored_by: str | None, mine: RunStatus,
                                           theirs: RunStatus) -> None:
    a, b = record(mine, mine_by), record(theirs, stored_by)
    a.message, b.message = "mine", "theirs"
    merged = lifecycle.merge(a, b)
    if lifecycle.rank(stored_by) > lifecycle.rank(mine_by):
        assert (merged.status, merged.message, merged.completed_by) == (theirs.value, "theirs", stored_by)
    elif mine_by is None and stored_by:  # an end already written stays written (its empty fields filled)
        assert merged.completed_by == stored_by and merged.message == "mine"
    elif theirs == RunStatus.RUNNING and mine in (RunStatus.QUEUED, RunStatus.PENDING, RunStatus.UNKNOWN):
        assert merged.status == "RUNNING"  # the companion saw it start: a client's PENDING (QUEUED) is older news
    else:
        assert (merged.status, merged.message) == (mine.value, "mine")


STARTS = [None, "2026-12-07T10:00:01.500+00:00", "2026-12-07T10:00:03Z", "2026-12-07T10:00:02.250+00:00", "junk"]


@given(mine_start=st.sampled_from(STARTS), stored_start=st.sampled_from(STARTS),
       mine_by=st.sampled_from([None, "client", "companion"]), stored_by=st.sampled_from([None, "client", "companion"]))
def test_the_runs_start_is_the_earliest_known_whichever_writer_came_last(
        mine_start: str | None, stored_start: str | None, mine_by: str | None, stored_by: str | None) -> None:
    """A client's archive (Ray's start of the attempt it saw) never moves the start the run side wrote, nor the
    reverse: both orders of one merge give one start, the earliest readable one."""
    a, b = record(RunStatus.SUCCEEDED, mine_by), record(RunStatus.SUCCEEDED, stored_by)
    a.start_time, b.start_time = mine_start, stored_start
    readable = sorted({t for t in (mine_start, stored_start) if t and t != "junk"},
                      key=lambda t: t.replace("Z", "+00:00"))
    assert lifecycle.merge(a, b).start_time == lifecycle.merge(b, a).start_time == (readable[0] if readable else None)


def test_a_retrys_later_start_seen_by_a_client_never_moves_the_runs_start() -> None:
    from rtjob.core.model import RunInfo

    r = record(RunStatus.RUNNING)
    r.start_time = "2026-12-07T10:00:01.500+00:00"  # its first attempt's, as the run side wrote it
    r.observe(RunInfo("r1", "job", "ray", RunStatus.SUCCEEDED, start_time="2026-12-07T10:00:40Z"))
    assert r.start_time == "2026-12-07T10:00:01.500+00:00" and r.status == "SUCCEEDED"
    fresh = record(RunStatus.PENDING)
    fresh.observe(RunInfo("r1", "job", "ray", RunStatus.RUNNING, start_time="2026-12-07T10:00:40Z"))
    assert fresh.start_time == "2026-12-07T10:00:40Z"  # none known before: the backend's


def test_stale_and_forgotten_are_the_readers_verdicts() -> None:
    r = record(RunStatus.RUNNING)
    r.carried_by, r.last_seen = "companion", "2020-01-01T00:00:00+00:00"
    assert r.stale_why() == "its companion was last seen 2020-01-01T00:00:00Z"
    assert r.to_run_info().status == RunStatus.UNKNOWN and r.status == "RUNNING"  # never written
    assert "its end was never recorded" in (lifecycle.forgotten(r) or "")
    assert record(RunStatus.FAILED).stale_why() is None and lifecycle.forgotten(record(RunStatus.FAILED)) is None


# -- the one writer call ------------------------------------------------------------------------------------------

class Crash(Exception):
    pass


class CrashingIndex:
    """The index port, failing on its first ``fail`` calls (a writer that died between its steps)."""

    def __init__(self, inner: object, fail: int) -> None:
        self.inner, self.fail, self.entries = inner, fail, 0

    def entry(self, rec: RunRecord) -> None:
        if self.fail:
            self.fail -= 1
            raise Crash("the writer died after the record")
        self.inner.entry(rec)  # type: ignore[attr-defined]
        self.entries += 1


def _entries(root: Path) -> list[dict[str, object]]:
    return [json.loads(p.read_text()) for p in sorted((root / "rtjob-index" / "entries").glob("*.json"))]


@settings(max_examples=10, deadline=None)
@given(crash_at=st.sampled_from(["index", "tell", None]))
def test_the_writer_call_interrupted_between_its_steps_is_repaired_by_calling_it_again(
        tmp_path_factory: pytest.TempPathFactory, crash_at: str | None) -> None:
    root = tmp_path_factory.mktemp("root")
    folder = root / "job" / "r1"
    folder.mkdir(parents=True)
    uri = f"file://{folder}"
    ports = run_ports(uri)
    index = CrashingIndex(ports.index, 1 if crash_at == "index" else 0)
    ports.index = index  # type: ignore[assignment]
    told: list[str] = []
    fail_tell = [crash_at == "tell"]

    def tell(rec: RunRecord) -> None:
        if fail_tell[0]:
            fail_tell[0] = False
            raise Crash("the writer died after the index entry")
        told.append(rec.status)

    new = apply(lifecycle.blank("r1", uri, job="job", backend="ray"), Started("r1", 1, "2026-11-27T10:00:00+00:00"))
    transition = AttemptEnded("r1", 1, AttemptEnd("SUCCEEDED", 0), None, "2026-11-27T10:01:00+00:00")

    if crash_at is not None:
        with pytest.raises(Crash):
            lifecycle.write(ports, transition, new=new, tell=tell)
        written = RecordFile(uri, None).update(lambda stored: None)
        assert written is not None and written.status == "SUCCEEDED"  # the record is ahead, never behind
        assert told == []
    again = lifecycle.write(ports, transition, new=new, tell=tell)  # the same call again repairs
    assert again is not None and again.status == "SUCCEEDED" and told == ["SUCCEEDED"]
    entries = _entries(root)
    assert entries and entries[-1]["status"] == "SUCCEEDED" and entries[-1]["attempts"] == 1
    assert entries[-1]["duration_s"] == 60.0
    assert json.loads((folder / "rtjob-run.json").read_text())["attempts"] == again.attempts


def test_a_heartbeat_writes_no_index_entry(tmp_path: Path) -> None:
    folder = tmp_path / "job" / "r1"
    folder.mkdir(parents=True)
    ports = run_ports(f"file://{folder}")
    lifecycle.write(ports, Beat(Writer.COMPANION), new=record(), indexed=False)
    assert not (tmp_path / "rtjob-index").exists()
    lifecycle.write(ports, Started("r1", 1), new=record())
    assert [e["status"] for e in _entries(tmp_path)] == ["RUNNING"]


def test_an_index_entry_holds_the_shared_schema() -> None:
    r = apply(started(), AttemptEnded("r1", 1, AttemptEnd("SUCCEEDED", 0), None, "2026-11-27T10:00:30+00:00"))
    r.spec = {"document": {"tags": {"team": "nlp", "n": 3}, "args": {"epochs": 2, "lr": 0.1}},
              "overrides": {"sets": ["args.lr=0.2", "tags.team=cv", "max_retries=1"]}}  # what the run ran with
    r.metrics = {"last": {"epoch": 2, "val_loss": 0.5, "note": "x", "ok": True, "nan": float("nan")}}
    entry = entry_of(r)
    assert (entry["attempts"], entry["duration_s"], entry["tags"], entry["args"], entry["final_metrics"]) == (
        1, 30.0, {"team": "cv", "n": "3"}, {"epochs": 2, "lr": "0.2"}, {"val_loss": 0.5})
