"""Run records planted in storage as one of a run's writers would have left them: a test's starting state (a
retried run, a run kept after an outage, a teammate's run). Written whole and merged with what is stored, as the
kernel merges (core/lifecycle.merge), not through a transition: rtjob itself writes records only through its
kernel, so this lives with the tests."""

from __future__ import annotations

from rtjob.core.lifecycle import merge
from rtjob.core.record import RunRecord
from rtjob.storage.records import update_record


def plant_record(run_uri: str, record: RunRecord, endpoint: str | None = None) -> RunRecord:
    """``<run_uri>/rtjob-run.json`` holding ``record`` merged with the stored one; returns what was written."""
    written = update_record(run_uri, endpoint, lambda stored: merge(record, stored))
    assert written is not None
    return written
