"""The lifecycle kernel's storage ports (core/lifecycle.RunPorts) for one run's folder: its record (a conditional
read-modify-write), and the team's index entry beside the records (the notification's markers:
notify/markers.claim_in and settle_in, over the run's objects).

Importable on the cluster: the stdlib, rtjob_contract and rtjob's storage modules at module level only.
"""

from __future__ import annotations

from collections.abc import Callable

from ..core.lifecycle import RunPorts
from ..core.record import RunRecord


class RecordFile:
    """``<run folder>/rtjob-run.json``, written with If-Match (storage/records.update_record)."""

    def __init__(self, run_uri: str, endpoint: str | None) -> None:
        self.run_uri, self.endpoint = run_uri, endpoint

    def update(self, change: Callable[[RunRecord | None], RunRecord | None]) -> RunRecord | None:
        from .records import update_record

        return update_record(self.run_uri, self.endpoint, change)


class IndexEntries:
    """The run's entries in its storage root's index (storage/index.py; none for a folder not below a root)."""

    def __init__(self, run_uri: str, endpoint: str | None) -> None:
        self.run_uri, self.endpoint = run_uri, endpoint

    def entry(self, record: RunRecord) -> None:
        from .index import write_run_entry

        write_run_entry(self.run_uri, self.endpoint, record)


def run_ports(run_uri: str, endpoint: str | None = None) -> RunPorts:
    """The run folder ``run_uri``'s record and index entries."""
    return RunPorts(RecordFile(run_uri, endpoint), IndexEntries(run_uri, endpoint))
