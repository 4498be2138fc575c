"""The storage check before a run is sent: the run's record written to its storage first (the kernel's
``submitted``, PENDING under its planned id), so the conditional write itself checks the bucket, the credentials,
the endpoint or a local folder's writability before the embedded cluster starts or a backend is reached. It fails
with one line (exit 3) and nothing submitted, nothing written (the ledger's row is written after the submit, as
ever); a submit that fails before the backend accepted the run withdraws the record it wrote. Skipped by the ``storage_check`` setting
(``--no-storage-check``) for a cluster that writes with a role of its own where this client cannot: the record is
then written after the submit, its failure a warning (memory.write)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ...core import lifecycle
from ...core.errors import RtjobError, StorageError
from ..places import writable_here

if TYPE_CHECKING:
    from ...core.record import RunRecord
    from ...jobspec.settings import Settings
    from ..events import RunEvents

SKIP_HINT = ("--no-storage-check or the setting storage_check = false skips this check, for a cluster that writes "
             "with a role of its own")


def wanted(settings: Settings | None) -> bool:
    """Whether these settings check the run's storage before it is sent (on unless ``storage_check`` is false)."""
    return settings is None or settings.get("storage_check") is not False


@dataclass
class Checked:
    """Where the check wrote, and the record it created there (None: the record was there already and was
    written back as it was: an attach, a pipeline run gone on with)."""

    uri: str
    endpoint: str | None
    created: RunRecord | None

    def withdraw(self, events: RunEvents) -> None:
        """The run was not sent after all: the record the check created is removed, unless another writer has
        changed it since (storage/records.withdraw_record), so storage claims no run that never went."""
        if self.created is None:
            return
        from ...storage.records import withdraw_record

        try:
            withdraw_record(self.uri, self.endpoint, self.created)
        except RtjobError as exc:
            events.warning(f"the storage check's record at {self.uri} was not removed ({exc.message}); the run "
                           "was never submitted")


def check(record: RunRecord, events: RunEvents) -> Checked | None:
    """``record`` (a run's or a pipeline's, made by this client before anything starts) written to its storage,
    or the record stored there written back as it is: the write is the check. Faults that may pass are waited out
    for a reader's patience (storage/retrying.patiently); a failure is one StorageError line (exit 3) naming the
    storage and what failed. None: no storage this machine writes (a path on a remote cluster's disk, no storage)."""
    if not writable_here(record.backend, record.storage_uri):
        return None
    from ...storage.retrying import patiently
    from ...storage.run_ports import RecordFile

    assert record.storage_uri is not None
    uri, endpoint = record.storage_uri, record.storage_endpoint
    ports = lifecycle.RunPorts(RecordFile(uri, endpoint))
    made: list[RunRecord] = []

    def write() -> RunRecord | None:
        made.clear()
        try:
            written = lifecycle.write(ports, lifecycle.Submitted(staged=False), new=record, only_if_missing=True,
                                      indexed=False)
        except lifecycle.IllegalTransition:  # an ended run's record, as this client knows it (a pipeline's)
            written = lifecycle.write(ports, [], new=record, only_if_missing=True, indexed=False)
        made.extend([written] if written is not None else [])
        return written

    try:
        patiently(write, on_fault=lambda exc: events.note(f"storage check: {exc.message}; trying again"))
    except StorageError as exc:
        raise StorageError(f"storage check failed, nothing submitted: {exc.message} (the run's record could not "
                           f"be written to {uri}; {SKIP_HINT})", transient=exc.transient) from None
    return Checked(uri, endpoint, made[0] if made else None)
