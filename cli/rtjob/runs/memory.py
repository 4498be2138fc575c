"""A run's memory beyond its cluster: its record in the local ledger (``ledger/``) and in the run's storage
(``<run dir>/rtjob-run.json``, which a teammate with only the bucket can list).

Nothing here decides a run's outcome: a record that cannot be written is a warning, never a failed run. The
reads (``find``, ``lookup``) never write: what a command learns is recorded by the use case that learned it
(archive.observe, remember)."""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core import lifecycle
from ..core.clock import now_iso
from ..core.errors import BadInput, RtjobError, StorageError, Unreachable
from ..core.lifecycle import IllegalTransition, merge
from ..core.model import RunInfo, RunStatus
from ..core.record import RunRecord
from .places import writable_here

if TYPE_CHECKING:
    from ..backends.base import Backend
    from ..core.lifecycle import IndexPort
    from ..core.queueing import Place
    from ..ledger import Ledger
    from .events import RunEvents

_LEDGERS: dict[str, Ledger] = {}


def ledger() -> Ledger:
    """This process's handle on the run ledger of the current $RTJOB_HOME (opened on first use)."""
    from ..ledger import Ledger, ledger_path

    path = str(ledger_path())
    if path not in _LEDGERS:
        _LEDGERS[path] = Ledger(ledger_path())
    return _LEDGERS[path]


def keep(record: RunRecord, events: RunEvents) -> None:
    """The record into this machine's ledger only (what a command learned of a run that has not ended, a record
    found in storage). A broken ledger is a warning: the run goes on."""
    record.updated_at = now_iso("seconds")
    try:
        ledger().save(record)
    except RtjobError as exc:
        events.warning(f"run ledger not updated: {exc.message}")


def write(record: RunRecord, transitions: Any, events: RunEvents, *,
          tell: Callable[[RunRecord], None] | None = None) -> RunRecord:
    """The lifecycle kernel's transitions (``transitions``: one value, or several in order, each naming this
    client as its writer) applied by this client: in the run's storage through the kernel's one writer call (the
    record, conditional on the version read, this client's ``record`` joined with it by lifecycle.merge first;
    then the index entry), then the ledger's row. A transition the kernel refuses (an end of a higher rank stands)
    leaves the stored record as it is. Where the run's storage is not this client's to write (a run it only saw,
    no storage here) or cannot be reached, the transitions are applied to the ledger's row only, with a warning
    for a write that failed. ``tell``: the notification, after the record and its index entry (its claim marker
    makes it once). Returns the record as written; ``record`` is updated to it."""
    steps = list(transitions) if isinstance(transitions, (list, tuple)) else [transitions]
    written = _write_to_storage(record, steps, events, tell)
    if written is None:
        with contextlib.suppress(IllegalTransition):  # refused: the end recorded stands
            for step in steps:
                lifecycle.apply(record, step)
    else:
        record.__dict__.update(written.__dict__)  # the caller's record is the one written (merged)
    keep(record, events)
    return record


def _write_to_storage(record: RunRecord, steps: list[Any], events: RunEvents,
                      tell: Callable[[RunRecord], None] | None) -> RunRecord | None:
    """Only a record that carries its spec (made by the submit, or read back from storage) goes to the run's
    folder: a run this client only saw is another's, whose record there must never be replaced by less."""
    if record.spec is None or not writable_here(record.backend, record.storage_uri):
        return None
    from ..storage.run_ports import run_ports

    assert record.storage_uri is not None
    ports = run_ports(record.storage_uri, record.storage_endpoint)
    if ports.index is not None:
        ports.index = _WarnedIndex(ports.index, record.storage_uri, events)
    try:
        return lifecycle.write(ports, steps, mine=copy.deepcopy(record), tell=tell)
    except IllegalTransition:
        return None  # refused: the stored record stands (a higher-ranked end was written first)
    except RtjobError as exc:
        events.warning(f"run record not written to {record.storage_uri}: {exc.message} (the local ledger has it)")
        return None


class _WarnedIndex:
    """The kernel's index port, an entry that cannot be written a warning: the record was written before it, and
    a rebuild from the records adds the run."""

    def __init__(self, index: IndexPort, where: str, events: RunEvents) -> None:
        self.index, self.where, self.events = index, where, events

    def entry(self, record: RunRecord) -> None:
        try:
            self.index.entry(record)
        except RtjobError as exc:
            self.events.warning(f"run index entry not written beside {self.where}: {exc.message} (rtjob runs "
                                "--storage ROOT --reindex adds the run from its record)")


def stored_record(record: RunRecord, *, strict: bool = False) -> RunRecord | None:
    """The run's record as its storage holds it now (None: none, or it cannot be read from here; ``strict``: a
    storage fault outlasting a reader's patience is raised, not taken for no record)."""
    return stored(record.to_run_info(), strict=strict)


def with_run_side(record: RunRecord, *, strict: bool = False) -> RunRecord:
    """The record with what the run side wrote in the run's storage since (who carries the run, when it was last
    seen, the start-up timeline, and the run's end if its companion wrote it); as it was when that cannot be read
    (``strict``: a storage fault is raised, exit 3: a reader that shows the run says so rather than show it stale)."""
    return merge(record, stored_record(record, strict=strict))


def remember(record: RunRecord) -> None:
    """A record found in a run's storage, remembered in this ledger from now on (a run it knows is left as is).
    Quietly: the command that found it answers from the record either way."""
    from .events import Quiet

    try:
        if ledger().get(record.id) is not None:
            return
    except RtjobError:
        return
    keep(record, Quiet())


def stored(info: RunInfo, *, strict: bool = False) -> RunRecord | None:
    """The record a run's submitter wrote to its storage, if this machine can read it (read_record waits out a
    storage fault that may pass for a reader's patience; ``strict``: a storage fault is then raised, else None, as
    a follow loop that asks again later wants)."""
    if not writable_here(info.backend, info.storage_uri):
        return None
    from ..storage.records import read_record

    try:
        return read_record(info.storage_uri or "", info.storage_endpoint)
    except StorageError:
        if strict:
            raise
        return None
    except RtjobError:
        return None


def find(run_id: str, storage_root: str | None = None, endpoint: str | None = None) -> RunRecord | None:
    """The run's record: the ledger's, else one in ``storage_root`` (a team's bucket: the configured storage)."""
    record = ledger().get(run_id)
    if record is not None or not storage_root:
        return record
    if "://" not in storage_root and not Path(storage_root).is_dir():
        return None
    from ..storage.records import find_record

    found = find_record(storage_root, run_id, endpoint)
    return None if found is None else found[1]


def lookup(backend: Backend, run_id: str, storage_root: str | None) -> tuple[RunInfo, RunRecord | None]:
    """The run as its backend reports it, else as its record (with what its run side wrote since: lifecycle.merge)
    remembers it, through the one verdict (core/verdict.py): the backend does not know it (its cluster stopped,
    restarted or is another: a record no run side carries is CLUSTER_GONE), or cannot be reached and the record
    answers (an end, a pipeline, a run side that beats: a teammate's run is never blamed on a cluster here). The
    record is returned when the answer came from it. A run submitted from another machine (its record's host) to
    an embedded cluster ran on that machine's: this machine's cluster, running or not, says nothing of it."""
    try:
        return backend.status(run_id), None
    except (BadInput, Unreachable) as exc:
        try:
            record = find(run_id, storage_root)
            record = None if record is None else with_run_side(record)
        except StorageError:
            raise  # the storage that may know the run cannot be read (exit 3): never "no such run"
        except RtjobError:
            record = None
        if record is None:
            _raise_unknown(backend, run_id, exc)
            raise exc from None
        carried = bool(record.run_status.terminal or record.steps or record.carried_by
                       or record.run_status == RunStatus.QUEUED)  # a queued run: its queue's keeper carries it
        if not carried and _elsewhere(backend, record):
            return remembered_info(record, cluster_forgot=False), record  # as its record says, nothing more
        if isinstance(exc, Unreachable) and not carried:
            raise exc from None  # only the cluster knows how a run nothing else carries goes on
        return remembered_info(record, cluster_forgot=not carried), record


def _elsewhere(backend: Backend, record: RunRecord) -> bool:
    """The run is not this machine's to judge by ``backend``: an embedded cluster's, submitted from another host."""
    import socket

    from .places import on_this_machine

    return bool(record.host) and record.host != socket.gethostname() and on_this_machine(backend.name)


def _raise_unknown(backend: Backend, run_id: str, exc: BadInput | Unreachable) -> None:
    """No record knows ``run_id`` and its cluster does not either (exit 2, pointing at what does know runs): it
    said so, or it is the embedded cluster and is not running (every run it held is recorded here). A remote
    cluster out of reach may hold the run: its error stands."""
    from .places import on_this_machine

    known = "rtjob runs lists the runs rtjob knows"
    if isinstance(exc, BadInput):
        raise BadInput(f"{exc.message}; nor does the run ledger or the project's storage know it ({known})") from None
    if on_this_machine(backend.name):
        raise BadInput(f"no run {run_id!r}: the run ledger and the project's storage do not know it and the embedded "
                       f"cluster is not running ({known}; rtjob list what the cluster holds while it runs)") from None


def where_it_ran(run_id: str) -> tuple[str, str | None] | None:
    """The backend (and its address) that ran ``run_id``, as this ledger remembers it; None: not remembered. The
    address is left to the settings where the recorded one cannot be used as it is: masked (it carried a password,
    which the settings hold) or the embedded cluster's (found again on this machine)."""
    from ..core.redact import MASK
    from .places import on_this_machine

    try:
        record = ledger().get(run_id)
    except RtjobError:
        return None
    if record is None or record.backend == "unknown":  # a record its run side began: the settings decide
        return None
    address = record.address
    if address and (MASK in address or on_this_machine(record.backend)):
        address = None
    return record.backend, address


def remembered_info(record: RunRecord, *, cluster_forgot: bool = True, where: Place | None = None) -> RunInfo:
    """What a record says of a run its cluster no longer knows (``cluster_forgot``: an end never seen is UNKNOWN,
    not RUNNING), as the run's verdict (core/verdict.py) says it; a queued run at its place (``where``: read
    already, else its queue is read now)."""
    from ..core.verdict import of_record
    from .queued import place

    return of_record(record, cluster_forgot=cluster_forgot, place=where or place(record)).onto(record.to_run_info())
