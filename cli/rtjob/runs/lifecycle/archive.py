"""A run seen ended is archived: its final record, each attempt's driver log beside it, its attempts, cost and
metrics summary. The commands that carry a run (a follow to the end: submit, wait; stop; status --repair;
`local down`) call ``observe`` here; a read (status, show, logs, list, runs, the UI) never does: it writes nothing
shared. The client that writes a run's end also compacts the team's index (``compact_index``). A run
without storage this machine can write archives its logs under ``$RTJOB_HOME/runs/<id>/``."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import rtjob_contract as contract

from ...core import lifecycle
from ...core.errors import BadInput, RtjobError, StorageError
from ...core.lifecycle import Writer, ended_by_run_side, merge
from ...core.model import RunInfo, RunStatus
from ...core.record import RunRecord
from ...core.redact import redact, redact_data
from ..memory import keep, ledger, stored, stored_record, write
from ..places import local_run_dir, log_home, writable_here

if TYPE_CHECKING:
    from ...backends.base import Backend
    from ...core.model import Attempts
    from ..events import RunEvents

# Backend.attempts, or a command's memo of it: a command that also prints the attempts asks the backend once.
AttemptsOf = Callable[[str], "Attempts | None"]


def observe(backend: Backend, info: RunInfo, events: RunEvents, run_id: str | None = None,
            attempts_of: AttemptsOf | None = None) -> RunRecord | None:
    """What a command just learned about a run (status, wait, follow, list): into the ledger; a run seen
    ended for the first time is archived (its final record and logs). ``run_id``: the run's first id when
    ``info`` is a retry's."""
    key = run_id or info.id
    try:
        record = ledger().get(key)
        if record is None:  # submitted elsewhere: its own record in storage, else what the backend says
            record = stored(info) or RunRecord.from_run_info(info)
            record.id = key
        elif record.archived:
            return record
    except RtjobError as exc:
        events.warning(f"run ledger not updated: {exc.message}")
        return None
    if info.status.terminal:
        return archive(backend, record, info, events, attempts_of=attempts_of)  # which records ``info`` first
    changed = _observed(record, info)
    if changed or record.updated_at is None:
        keep(record, events)  # not a transition: the run side writes the run's start in its storage
    return record


def _observed(record: RunRecord, info: RunInfo) -> bool:
    """``info`` into the record; a retry's status is the run's status, its id stays the first attempt's."""
    if info.id == record.id:
        return record.observe(info)
    retry_id = info.id
    info.id = record.id
    try:
        return record.observe(info)
    finally:
        info.id = retry_id


def archive(backend: Backend, record: RunRecord, info: RunInfo, events: RunEvents,
            final: RunStatus | None = None, message: str | None = None,
            attempts_of: AttemptsOf | None = None) -> RunRecord:
    """The run has ended (or its cluster is about to stop: ``final``): save each attempt's driver log beside
    the record, the attempts, cost and metrics summary, and write the kernel's ``archived`` transition (the end as
    this client saw it, unless the run side's stands). Each part that cannot be read is left out with a warning;
    the record is written in any case."""
    from ...storage.records import metrics_summary
    from ..cost import finished_run_cost

    _observed(record, info)
    status, message = (final, message) if final is not None else (record.run_status, record.message)
    run_side = _run_side_end(record)
    if run_side is not None:  # the run's companion wrote its end (and its log): that end stands
        record = merge(record, run_side)
    saved = lifecycle.Archive()
    attempts = quiet(lambda: (attempts_of or backend.attempts)(record.id), events, "attempts")
    ids = [record.id]
    if attempts is not None:
        saved.attempts = redact_data([a.to_json() for a in attempts.chain], info.secrets)
        ids = [a.id for a in attempts.chain] or ids
    texts: dict[str, str] = {}
    if run_side is not None and run_side.logs:
        ids = ids[-1:]  # read once below, for Ray Train's storage only; the stored log is the companion's
    last_log: str | None = None
    for i, attempt_id in enumerate(ids):
        text = quiet(functools.partial(backend.logs, attempt_id), events, f"the log of {attempt_id}")
        if text is None:
            continue
        text = redact(text, info.secrets)
        if len(ids) > 1:
            texts[contract.attempt_log_name(attempt_id)] = text
        if i == len(ids) - 1:
            texts[contract.DRIVER_LOG_FILE] = last_log = text
    if run_side is not None and run_side.logs:
        texts = {}
        if record.storage_uri and writable_here(record.backend, record.storage_uri) and attempts is not None:
            from ...storage.records import archive_attempt_log

            for earlier in [a.id for a in attempts.chain[:-1]]:  # a companion lost with its node left only parts
                quiet(functools.partial(archive_attempt_log, record.storage_uri, record.storage_endpoint, earlier),
                       events, f"the log of {earlier}")
    if texts:
        saved.log_home, saved.logs = _write_logs(record, texts, events)
    # Asked now, while the cluster still knows the run: an unchanged Ray Train script's own storage.
    folders = quiet(lambda: backend.train_storage(ids[-1], last_log), events, "Ray Train's storage")
    if folders:
        saved.train_storage = [redact(folder, info.secrets) for folder in folders]
    if run_side is None and record.outputs is None:  # the companion's end not stored: did it keep its outputs?
        saved.outputs = kept_outputs(record.id, last_log)
    ended = record.to_run_info()
    saved.cost = record.cost or quiet(lambda: finished_run_cost(backend, ended), events, "cost")
    # The run's own storage first; a plain Ray Train script's history is in the folder it chose.
    for uri in [record.storage_uri, *saved.train_storage, *record.train_storage] if not record.metrics else []:
        if uri and writable_here(record.backend, uri):
            saved.metrics = quiet(functools.partial(metrics_summary, uri, record.storage_endpoint), None, "metrics")
            if saved.metrics:
                break
    written = write(record, lifecycle.Archived(status, saved, message, by=Writer.ARCHIVE), events)
    compact_index(written, events)
    return written


def compact_index(record: RunRecord, events: RunEvents) -> None:
    """The team's index compacted by the client that wrote a run's end, once COMPACT_AFTER entries are left over
    (a read never compacts: `rtjob runs --storage` and the UI only list). A compaction that fails is a warning:
    the next end write, or `rtjob runs --storage ROOT --reindex`, does it."""
    if not record.storage_uri or not writable_here(record.backend, record.storage_uri):
        return
    from ...storage.index import COMPACT_AFTER, list_indexed, root_of
    from ...storage.run_filter import RunFilter

    root = root_of(record.storage_uri, record.id)
    if root is None:
        return
    try:
        listed = list_indexed(root, record.storage_endpoint, RunFilter(limit=1), compact_after=COMPACT_AFTER)
    except RtjobError as exc:
        events.warning(f"run index not compacted: {exc.message}")
        return
    for line in listed.problems if listed is not None else []:
        if line.startswith("run index not compacted"):
            events.warning(line)


def kept_outputs(run_id: str, log: str | None) -> dict[str, Any] | None:
    """The run's outputs as its companion left them when storage failed at its end: a kept folder on this machine
    (the embedded cluster's node), else the ``outputs_not_stored`` event line of its driver log (read through the
    cluster); None when neither says so."""
    import json

    from ...storage.node_dirs import kept_folders

    for _folder, marker in kept_folders(run_id):  # the run ended: a marker still "storing" lost its companion
        return {"complete": False, "not_stored": marker.get("not_stored"), "kept_at": marker.get("kept_at")}
    mark = f"{contract.EVENT_LINE_PREFIX} {contract.EVENT_OUTPUTS_NOT_STORED} "
    at = log.rfind(mark) if log else -1
    if log is None or at < 0:
        return None
    try:
        said = json.loads(log[at + len(mark):].splitlines()[0])
    except (ValueError, IndexError):
        return None
    if not isinstance(said, dict):
        return None
    return {"complete": False, "not_stored": said.get("not_stored"), "kept_at": said.get("kept_at")}


def _run_side_end(record: RunRecord) -> RunRecord | None:
    """The run's record in its storage when the run side (its companion) wrote the run's end there."""
    stored = stored_record(record)
    return stored if ended_by_run_side(stored) else None


def _write_logs(record: RunRecord, texts: dict[str, str], events: RunEvents) -> tuple[str, list[str]]:
    """The logs into the run's storage; if that cannot be written (no credentials, a flaky network), into
    $RTJOB_HOME/runs/<id> on this machine: a log is never lost because the bucket was out of reach."""
    from ...storage.records import write_log

    home, endpoint = log_home(record) if record.spec is not None else (local_run_dir(record.id), None)
    homes = [(home, endpoint)] + ([(local_run_dir(record.id), None)] if home != local_run_dir(record.id) else [])
    for where, where_endpoint in homes:
        try:
            return where, [write_log(where, name, text, where_endpoint) for name, text in texts.items()]
        except RtjobError as exc:
            events.warning(f"logs not archived in {where}: {exc.message}")
    return home, []


def quiet(call: Callable[[], Any], events: RunEvents | None, what: str) -> Any:
    """One part of an archive: its value, or None and one warning line (the rest is archived anyway)."""
    try:
        return call()
    except RtjobError as exc:
        if events is not None:
            events.warning(f"{what} not archived: {exc.message}")
        return None


def archived_log(record: RunRecord, tail_lines: int | None = None) -> Iterator[str]:
    """The run's stored driver log (its last attempt's) as text chunks, streamed from the parts its companion
    wrote or the log archived at its end; BadInput if neither is there."""
    from ...storage.records import log_chunks

    home, endpoint = log_home(record)
    if record.log_home and record.log_home != home:  # archived on this machine: the bucket was out of reach
        home, endpoint = record.log_home, None
    attempt = str(record.attempts[-1].get("id")) if record.attempts else record.id
    chunks = log_chunks(home, endpoint, attempt, tail_lines)
    if chunks is None:
        raise BadInput(f"run {record.id}: its cluster no longer knows it and its log was not archived (rtjob "
                       f"archives a log when it sees the run end; this one's cluster stopped before that)")
    return chunks


def attempt_log(backend: Backend, run_id: str, number: int, info: RunInfo, record: RunRecord | None,
                storage_root: str | None, tail_lines: int | None = None) -> Iterator[str]:
    """Attempt ``number`` (1: the first) of the run: its log as the run's storage keeps it (the attempt's archived
    ``logs/<attempt id>.log`` or its parts), else as its cluster still has it; BadInput when neither has it."""
    from ...core.model import Attempts
    from ...storage.records import log_chunks
    from ..memory import find

    known = record
    if known is None:
        try:
            known = find(run_id, storage_root)
        except StorageError:
            raise  # the run's storage cannot be read (exit 3), not "no log"
        except RtjobError:
            known = None
    recorded = known.attempts if known is not None else []
    if known is not None:  # the attempts its companions recorded in the run's storage, when they know more
        in_storage = quiet(lambda: stored_record(known), None, "the run's record")
        if in_storage is not None and len(in_storage.attempts) > len(recorded):
            recorded = in_storage.attempts
    chain = Attempts.recorded(recorded).chain
    if record is None and len(chain) < number:  # the cluster knows the run: its own list of attempts
        asked = quiet(lambda: backend.attempts(run_id), None, "attempts")
        chain = asked.chain if asked is not None and asked.chain else chain
    if not chain and number == 1:
        attempt_id = run_id
    elif number > len(chain):
        raise BadInput(f"--attempt {number}: run {run_id} has {len(chain) or 1} attempt(s)")
    else:
        attempt_id = chain[number - 1].id
    if known is not None and known.storage_uri and writable_here(known.backend, known.storage_uri):
        home, endpoint = log_home(known)
        chunks = log_chunks(home, endpoint, attempt_id, tail_lines, latest=number == len(chain) or not chain)
        if chunks is not None:
            return chunks
    if record is None:  # the cluster knows the run
        text = backend.last_lines(attempt_id, tail_lines) if tail_lines else backend.logs(attempt_id)
        return iter([redact(text, info.secrets)])
    raise BadInput(f"run {run_id}: attempt {number} ({attempt_id}) has no log in the run's storage and its cluster "
                   "no longer knows it")
