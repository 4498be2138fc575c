"""The lifecycle kernel's transitions as values (core/lifecycle): every entry of its table applied twice gives
the same record, a writer the table does not name is refused, the generated states × writers table is current in
docs/ARCHITECTURE.md, and each attempt keeps its own timeline (a retried run's is its last attempt's)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest
from rtjob.core import lifecycle
from rtjob.core.lifecycle import TABLE, IllegalTransition, Writer, apply
from rtjob.core.model import RunStatus
from rtjob.core.record import RunRecord
from rtjob.core.retry_rule import AttemptEnd
from rtjob.storage.run_ports import run_ports

REPO = Path(__file__).resolve().parents[2]
T0, T1, T2 = "2026-11-27T10:00:00.125+00:00", "2026-11-27T10:00:30.250+00:00", "2026-11-27T10:00:48.500+00:00"
FAILED = AttemptEnd("FAILED", 137)

# One value of each transition in the table, and the record it applies to (a state it is legal in).
SAMPLES: dict[type, tuple[str, Any]] = {
    lifecycle.Submitted: ("UNKNOWN", lifecycle.Submitted(T0)),
    lifecycle.Beat: ("RUNNING", lifecycle.Beat(Writer.SUPERVISOR, T0)),
    lifecycle.Started: ("PENDING", lifecycle.Started("r1", 1, T0)),
    lifecycle.Stages: ("RUNNING", lifecycle.Stages("r1", {"first_step": T1})),
    lifecycle.AttemptEnded: ("RUNNING", lifecycle.AttemptEnded("r1", 1, FAILED, "killed", T1, cpu_s=1.5,
                                                               sync_notes=("kept x",))),
    lifecycle.Saved: ("FAILED", lifecycle.Saved(Writer.COMPANION, ("logs/r1.log",), "s3://b/r1", {"loss": 1.0})),
    lifecycle.Tracked: ("RUNNING", lifecycle.Tracked({"mlflow": {"run_id": "m1"}, "at": T0})),
    lifecycle.Outputs: ("FAILED", lifecycle.Outputs(False, 2, "node:/kept", T1)),
    lifecycle.Retrying: ("FAILED", lifecycle.Retrying(1, "its driver was lost", "r1", "r1-retry1", T1)),
    lifecycle.KeptEnd: ("RUNNING", lifecycle.KeptEnd("r1", 1, FAILED, "killed", T1, 2, "node:/kept", at=T1)),
    lifecycle.GaveUp: ("RUNNING", lifecycle.GaveUp("its supervisor died 4 times", T1)),
    lifecycle.Ended: ("RUNNING", lifecycle.Ended(RunStatus.SUCCEEDED, Writer.FOLLOWER, T1)),
    lifecycle.PipelineEnded: ("RUNNING", lifecycle.PipelineEnded({"s1": "SUCCEEDED"}, "done", T1)),
    lifecycle.Progressed: ("PENDING", lifecycle.Progressed(RunStatus.RUNNING, Writer.PIPELINE_SUPERVISOR, at=T0)),
    lifecycle.Archived: ("RUNNING", lifecycle.Archived(RunStatus.FAILED, lifecycle.Archive(logs=["logs/d.log"]),
                                                       "seen", at=T1)),
    lifecycle.Queued: ("PENDING", lifecycle.Queued({"name": "team", "priority": 1}, T0)),
    lifecycle.Admitted: ("QUEUED", lifecycle.Admitted(T1)),
    lifecycle.Cancelled: ("QUEUED", lifecycle.Cancelled("cancelled while queued in team", T1)),
}


def record(status: str) -> RunRecord:
    return RunRecord(id="r1", job="job", backend="ray", status=status, steps=[{"name": "a", "run_id": "s1"}])


def test_every_transition_in_the_table_has_a_sample() -> None:
    assert set(SAMPLES) == set(TABLE)


@pytest.mark.parametrize("kind", list(SAMPLES), ids=lambda k: k.__name__)
def test_each_transition_applied_twice_is_the_record_applied_once(kind: type) -> None:
    status, value = SAMPLES[kind]
    once = apply(record(status), value)
    assert once.to_json() == apply(apply(record(status), value), value).to_json()
    assert TABLE[kind].leads_to in ("any", "ended") or once.status in TABLE[kind].leads_to


@pytest.mark.parametrize("kind", list(SAMPLES), ids=lambda k: k.__name__)
def test_a_writer_the_table_does_not_name_is_refused(kind: type) -> None:
    status, value = SAMPLES[kind]
    for writer in set(Writer) - set(TABLE[kind].writers):
        with pytest.raises(IllegalTransition, match=f"the {writer.value} does not write it"):
            apply(record(status), type(value)(**{**value.__dict__, "by": writer}))


def test_a_value_that_is_no_transition_is_refused() -> None:
    with pytest.raises(IllegalTransition, match="is not a lifecycle transition"):
        apply(record("RUNNING"), lifecycle.Archive())


def _generator() -> Any:
    spec = importlib.util.spec_from_file_location("gen_reference", REPO / "tools" / "gen_reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_architecture_table_is_the_kernels_and_a_stale_one_is_named(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    gen = _generator()
    real = (REPO / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    assert real == gen.architecture_page(), "docs/ARCHITECTURE.md's lifecycle table is stale: run `make docs-cli`"
    from rtjob.core.lifecycle.table import ROWS, _row_of

    for entry in TABLE.values():  # each leads to a state the table has a row for
        assert _row_of(entry) <= {key for _, key in ROWS} and f"`{entry.name}`" in lifecycle.table_markdown()
    page = tmp_path / "ARCHITECTURE.md"
    page.write_text(real.replace("- `Started` (leads to", "- `Begun` (leads to"), encoding="utf-8")
    monkeypatch.setattr(gen, "REPO", tmp_path)
    monkeypatch.setattr(gen, "ARCHITECTURE_PAGE", page)
    monkeypatch.setattr(gen, "PAGES", {page: gen.architecture_page})
    assert gen.main(["--check"]) == 1
    assert "ARCHITECTURE.md is stale: run `make docs-cli`" in capsys.readouterr().err
    assert gen.main([]) == 0 and page.read_text(encoding="utf-8") == real


# -- each attempt's timeline ---------------------------------------------------------------------------------------

def retried() -> RunRecord:
    """A run whose first attempt was lost after 30 s and whose retry ran 48 s, each noted by its own writers."""
    r = apply(record("UNKNOWN"), lifecycle.Submitted(T0))
    r.steps = []
    apply(r, lifecycle.Started("r1", 1, "2026-11-27T10:00:05.000+00:00"))
    apply(r, lifecycle.Stages("r1", {"first_step": "2026-11-27T10:00:10.000+00:00"}))
    apply(r, lifecycle.AttemptEnded("r1", 1, FAILED, "killed", T1))
    apply(r, lifecycle.Retrying(1, "its driver was lost", "r1", "r1-retry1", "2026-11-27T10:00:31.000+00:00"))
    apply(r, lifecycle.Started("r1-retry1", 2, "2026-11-27T10:00:40.000+00:00"))
    apply(r, lifecycle.Stages("r1-retry1", {"first_step": "2026-11-27T10:00:44.000+00:00"}))
    apply(r, lifecycle.AttemptEnded("r1-retry1", 2, AttemptEnd("SUCCEEDED", 0), None, "2026-11-27T10:01:19.000+00:00"))
    return r


def test_a_retried_runs_timeline_is_its_last_attempts_and_the_earlier_ones_are_listed() -> None:
    r = retried()
    assert r.timeline == {"submitted": "2026-11-27T10:00:31.000+00:00", "driver_started": "2026-11-27T10:00:40.000+00:00",
                          "first_step": "2026-11-27T10:00:44.000+00:00", "ended": "2026-11-27T10:01:19.000+00:00"}
    assert r.timelines["r1"]["ended"] == T1 and r.timelines["r1"]["submitted"] == T0  # milliseconds kept
    assert [a.to_json() for a in lifecycle.earlier(r)] == [
        {"attempt": 1, "id": "r1", "status": "FAILED", "ended": T1, "duration_s": 30.125}]


def test_merge_never_mixes_attempts_and_a_client_over_a_retried_record_keeps_the_last_attempts() -> None:
    r = retried()
    client = record("PENDING")  # the submitter's copy: attempt 1's stages only
    client.steps, client.timeline = [], {"submitted": T0, "accepted": "2026-11-27T10:00:01.000+00:00"}
    merged = lifecycle.merge(client, r)
    assert merged.timeline == r.timeline  # not the earliest of each stage across attempts (ended +30.1 s)
    assert merged.timelines["r1"]["accepted"] == "2026-11-27T10:00:01.000+00:00"
    again = lifecycle.merge(merged, r)
    assert again.timelines == merged.timelines


def test_an_older_record_with_one_merged_timeline_still_reads_and_keeps_it() -> None:
    old = RunRecord.from_json({"id": "r1", "job": "job", "backend": "ray", "status": "RUNNING",
                               "timeline": {"submitted": T0, "driver_started": T1}}, "old")
    assert old.timelines == {} and old.timeline == {"submitted": T0, "driver_started": T1}
    apply(old, lifecycle.Ended(RunStatus.SUCCEEDED, Writer.FOLLOWER, T2))
    assert old.timeline == {"submitted": T0, "driver_started": T1, "ended": T2} and lifecycle.earlier(old) == []


def test_the_companions_write_keeps_its_attempts_stages_in_storage_with_milliseconds(tmp_path: Path) -> None:
    folder = tmp_path / "job" / "r1"
    folder.mkdir(parents=True)
    uri = f"file://{folder}"
    new = lifecycle.blank("r1", uri, job="job", backend="ray")
    lifecycle.write(run_ports(uri), [lifecycle.Stages("r1-retry1", {"first_step": T2}), lifecycle.Beat(Writer.COMPANION),
                                     lifecycle.Started("r1-retry1", 2, T1)], new=new)
    stored = json.loads((folder / "rtjob-run.json").read_text())
    assert stored["timelines"] == {"r1-retry1": {"first_step": T2, "driver_started": T1}}
    assert stored["timeline"] == stored["timelines"]["r1-retry1"] and stored["status"] == "RUNNING"
    assert lifecycle.write(run_ports(uri), lifecycle.Beat(Writer.COMPANION)) is not None
    assert lifecycle.write(run_ports(str(tmp_path / "none")), lifecycle.Beat(Writer.COMPANION)) is None  # no blank
