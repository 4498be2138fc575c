"""`rtjob local down`'s part in its runs' lifecycle: before the embedded cluster stops, each run it holds is archived
(one still running recorded STOPPED; one whose companion still stores its outputs waited for, never recorded
STOPPED); after, a run whose node folder is kept gets its companion's end and "outputs not stored"; the node folders
the cluster's runs may have left on this machine are listed for removal (a kept one is never removed)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...core.errors import RtjobError
from ...core.lifecycle import ended_by_run_side
from ...core.model import RunInfo, RunStatus
from ..memory import ledger, write
from ..places import writable_here
from .archive import archive, quiet

if TYPE_CHECKING:
    from ...backends.base import Backend
    from ..events import RunEvents


def before_cluster_stops(backend: Backend, events: RunEvents) -> int:
    """`rtjob local down`: archive every run of the embedded cluster the ledger has not archived, with its log so
    far; one still running is recorded STOPPED (the cluster takes it down). Returns how many were archived."""
    try:
        pending = ledger().unarchived(backend.name)
    except RtjobError as exc:
        events.warning(f"run ledger not read: {exc.message}")
        return 0
    done = 0
    for record in pending:
        try:
            info = backend.status(record.id)
        except RtjobError:
            continue  # not on this cluster (an older one's): nothing left to save
        if not info.status.terminal and storing_here(record.id):
            info = _wait_for_storing(backend, record.id, info, events)
            if not info.status.terminal:
                continue  # its companion keeps the outputs when the cluster stops: never recorded STOPPED
        if info.status.terminal:
            archive(backend, record, info, events)
        else:
            if writable_here(record.backend, record.storage_uri):  # its companion records a stop, not a kill
                from .stopping import mark_stop

                mark_stop(record.storage_uri, record.storage_endpoint)
            archive(backend, record, info, events, final=RunStatus.STOPPED,
                    message="stopped with the embedded cluster (rtjob local down)")
        done += 1
    return done


STORING_WAIT_S = 30.0  # how long `local down` waits for a companion still storing its run's outputs


def storing_here(run_id: str) -> bool:
    """Whether a companion on this machine is still storing the run's outputs (its kept marker says so)."""
    from ...storage.node_dirs import kept_folders

    return any(marker.get("storing") for _folder, marker in kept_folders(run_id))


def _wait_for_storing(backend: Backend, run_id: str, info: RunInfo, events: RunEvents) -> RunInfo:
    """`local down`: a run whose companion still stores its outputs is given STORING_WAIT_S to finish."""
    import time

    events.note(f"{run_id}: its companion is still storing the run's outputs; waiting up to {STORING_WAIT_S:g}s")
    deadline = time.monotonic() + STORING_WAIT_S
    while not info.status.terminal and time.monotonic() < deadline:
        time.sleep(1.0)
        try:
            info = backend.status(run_id)
        except RtjobError:
            break
    if not info.status.terminal:
        events.warning(f"{run_id}: storage still refuses its outputs; its node folder is kept (`rtjob sync "
                       f"{run_id}` stores it once storage is back)")
    return info


def kept_after_cluster(events: RunEvents) -> list[str]:
    """After `local down`: each run whose node folder is kept gets its companion's end and "outputs not stored" in
    its record (the ledger's, and its storage's when that takes writes). Returns those runs' ids."""
    from ...storage.kept import kept_end
    from ...storage.node_dirs import kept_folders

    kept: dict[str, dict[str, Any]] = {}
    for _folder, marker in kept_folders():
        if isinstance(marker.get("run_id"), str):
            kept.setdefault(marker["run_id"], marker)
    for run_id, marker in kept.items():
        try:
            record = ledger().get(run_id)
        except RtjobError:
            record = None
        if record is None or ended_by_run_side(record):
            continue
        write(record, kept_end(marker), events)
    return sorted(kept)


def node_folders_of(backend: Backend, events: RunEvents) -> list[str]:
    """The run ids whose node folders (storage/node_dirs.py) the embedded cluster's runs may have left on this
    machine: every run it holds (a retry shares its first attempt's folder, which is listed too)."""
    listed = quiet(backend.list, events, "the cluster's runs (their node folders)")
    return [info.id for info in listed or []]
