"""What `rtjob list` shows of a backend's listing: each retried run as one row (``fold_retries``) and the runs this
machine queued that no cluster holds yet (``with_queued``), each as the one verdict says it (``with_recorded_times``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..core.errors import RtjobError
from ..core.model import RunInfo, RunStatus
from .view import one_story

if TYPE_CHECKING:
    from ..backends.base import Backend


def fold_retries(listed: list[RunInfo]) -> list[RunInfo]:
    """A backend's listing with each retried run as one row (`rtjob list`): a retry whose first attempt is listed
    joins its row (the latest attempt's status); one whose first attempt is gone stays a row of its own."""
    by_id = {info.id: info for info in listed}
    retries: dict[str, list[RunInfo]] = {}
    for info in listed:
        if info.parent and info.parent in by_id:
            retries.setdefault(info.parent, []).append(info)
    out = []
    for info in listed:
        if info.parent and info.parent in by_id:
            continue
        later = retries.get(info.id)
        if later:
            latest = max(later, key=lambda one: (one.start_time or "", one.id))
            info = one_story(info, latest, 1 + len(later))
        out.append(info)
    return out


def with_queued(backend: Backend, listed: list[RunInfo]) -> list[RunInfo]:
    """`rtjob list`: the cluster's runs, and first the runs this machine queued for it that no cluster holds yet
    (QUEUED, each at its place in its queue), newest first."""
    from .memory import ledger, remembered_info, with_run_side
    from .queued import places

    known = {info.id for info in listed}
    try:  # each with what its keeper wrote since (its admission, its cancel)
        waiting = [with_run_side(r) for r in ledger().unarchived(backend.name)
                   if r.run_status == RunStatus.QUEUED and r.id not in known]
    except RtjobError:
        return listed
    waiting = [r for r in waiting if r.run_status == RunStatus.QUEUED]
    where = places(waiting)  # each queue read once
    queued = [remembered_info(r, cluster_forgot=False, where=where.get(r.id)) for r in waiting]
    return sorted(queued, key=lambda i: i.start_time or "", reverse=True) + listed


RECORDS_AT_MOST = 100  # unarchived runs whose records one `list` reads


def with_recorded_times(listed: list[RunInfo]) -> list[RunInfo]:
    """`rtjob list`: each run as its verdict says it (a backend's row, this ledger's record of it: one source of
    times, so `list` shows the duration `status` shows)."""
    from ..core.verdict import verdict
    from .memory import ledger, with_run_side

    try:
        book = ledger()
        rows = {info.id: book.get(info.id) for info in listed}
    except RtjobError:
        return listed
    # A run whose end rtjob has not archived: its record as its run side left it (its end, to the millisecond),
    # as `status` reads it, so both say the same end. Reads only; the ledger is not written here.
    unarchived = [row for row in rows.values() if row is not None and not row.archived and not row.steps]
    for row in unarchived[:RECORDS_AT_MOST]:
        rows[row.id] = with_run_side(row)
    return [verdict(None, rows[info.id], info).onto(info) for info in listed]
