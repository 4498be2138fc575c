"""A run's memory beyond its cluster: the record made at submit, kept in the local ledger and in the run's
storage (``<run dir>/rtjob-run.json``), completed and its driver logs archived when rtjob sees the run end.

Nothing here decides a run's outcome: a record that cannot be written is a warning, never a failed run.
Where records live: the ledger (``ledger/``) on this machine; the run's folder in storage (``storage/records.py``),
which a teammate with only the bucket can list. A run without storage archives its logs under
``$RTJOB_HOME/runs/<id>/`` instead.
"""

from __future__ import annotations

import datetime as dt
import functools
import getpass
import socket
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import rtjob_contract as contract

from ..core.errors import BadInput, RtjobError, Unreachable
from ..core.model import RunInfo, RunStatus
from ..core.record import RunRecord, spec_hash
from ..core.redact import mask_url, redact, redact_data

if TYPE_CHECKING:
    from ..backends.base import Backend
    from ..core.model import Attempts
    from ..jobspec.project import Settings
    from ..ledger import Ledger
    from .listing import RunFilter
    from .runner import Plan

Say = Callable[[str], None]
# Backend.attempts, or a command's memo of it: a command that also prints the attempts asks the backend once.
AttemptsOf = Callable[[str], "Attempts | None"]


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


_LEDGERS: dict[str, Ledger] = {}


def ledger() -> Ledger:
    """This process's handle on the run ledger of the current $RTJOB_HOME (opened on first use)."""
    from ..ledger import Ledger, ledger_path

    path = str(ledger_path())
    if path not in _LEDGERS:
        _LEDGERS[path] = Ledger(ledger_path())
    return _LEDGERS[path]


def git_state(folder: Path) -> dict[str, Any] | None:
    """The commit checked out in ``folder``, whether the tree has changes, and the branch; None: not git."""
    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", "-C", str(folder), *args], capture_output=True, text=True, timeout=10,
                                  check=False)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    if not commit:
        return None
    changes = git("status", "--porcelain", "--untracked-files=normal")
    branch = git("rev-parse", "--abbrev-ref", "HEAD")
    return {"commit": commit, "dirty": bool(changes) if changes is not None else None,
            "branch": branch if branch and branch != "HEAD" else None}


# -- where a run's record and logs go ------------------------------------------------------------------


def _storage_here(backend_name: str, uri: str | None) -> bool:
    """Can this machine write the run's folder? s3:// from anywhere; a plain path only when the run ran on this
    machine (the embedded cluster): on another cluster it is that cluster's disk."""
    if not uri:
        return False
    if uri.startswith("s3://"):
        return True
    if "://" in uri:
        return False
    from .places import on_this_machine

    return on_this_machine(backend_name)


def local_run_dir(run_id: str) -> str:
    """Where a run without storage this machine can write keeps its archived logs."""
    from ..jobspec.project import rtjob_home

    return str(rtjob_home() / "runs" / run_id)


def log_home(record: RunRecord) -> tuple[str, str | None]:
    """(folder, endpoint) that holds the run's ``logs/``: its storage folder, else $RTJOB_HOME/runs/<id>."""
    if _storage_here(record.backend, record.storage_uri):
        assert record.storage_uri is not None
        return record.storage_uri, record.storage_endpoint
    return local_run_dir(record.id), None


def _write_to_storage(record: RunRecord, say: Say | None) -> None:
    """Only a record that carries its spec (made by the submit, or read back from storage) goes to the run's
    folder: a run this client only saw is another's, whose record there must never be replaced by less."""
    if record.spec is None or not _storage_here(record.backend, record.storage_uri):
        return
    from ..storage.records import write_record

    assert record.storage_uri is not None
    try:
        write_record(record.storage_uri, record, record.storage_endpoint)
    except RtjobError as exc:
        if say is not None:
            say(f"warning: run record not written to {record.storage_uri}: {exc.message} (the local ledger has it)")


def save(record: RunRecord, say: Say | None, to_storage: bool = True) -> None:
    """A record made outside a submit (a pipeline run's own): into the ledger and its storage."""
    _save(record, say, to_storage)


def _save(record: RunRecord, say: Say | None, to_storage: bool = True) -> None:
    """The record into the ledger (and the run's storage). A broken ledger is a warning: the run goes on."""
    record.updated_at = _now()
    try:
        ledger().save(record)
    except RtjobError as exc:
        if say is not None:
            say(f"warning: run ledger not updated: {exc.message}")
    if to_storage:
        _write_to_storage(record, say)


# -- at submit ---------------------------------------------------------------------------------------------


def new_record(planned: Plan, info: RunInfo) -> RunRecord:
    """The record of a run this process just submitted: everything already masked."""
    from ..jobspec.pricing import job_cost
    from .recorded_spec import record_spec

    job, backend = planned.job, planned.backend
    settings = planned.settings
    values = {k: settings.get(k) for k in ("address", "cloud", "project")} if settings else {}
    from ..jobspec.resolve import Overrides

    spec = record_spec(job, planned.overrides or Overrides(), values)
    cost = job_cost(job)
    record = RunRecord(
        id=info.id, job=job.spec.name, backend=backend.name,
        storage_uri=job.storage_uri, storage_endpoint=job.storage_endpoint,
        job_file=job.job_file, project_root=str(settings.root) if settings else None,
        working_dir=str(job.working_dir), spec_hash=spec_hash(spec), spec=spec,
        request=redact_data(backend.render(planned.request), []),
        shape={"nodes": job.nodes if job.shape_declared else None,
               "workers": job.num_workers if job.shape_declared else None,
               "resources_per_worker": job.worker_resources() if job.shape_declared else None,
               "compute_config": job.compute_config_name},
        rate=cost.to_json() if cost else None,
        git=git_state(job.working_dir),
        pipeline=planned.pipeline, **new_record_identity(),
    )
    record.observe(info)
    record.address = mask_url(backend.address)
    return record


def new_record_identity() -> dict[str, Any]:
    """Who submitted a run, from where, and when: the fields every new record starts with."""
    return {"user": _user(), "host": socket.gethostname(), "submitted_at": _now()}


def _user() -> str | None:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return None


def remember_submitted(planned: Plan, info: RunInfo, say: Say) -> None:
    """After a submit (or an attach to a run this ledger may not know): record it here and in its storage."""
    book = ledger()
    try:
        known = book.get(info.id)
    except RtjobError as exc:
        say(f"warning: run ledger not read: {exc.message}")
        known = None
    if known is not None and known.spec is not None:
        observe(planned.backend, info, say)
        return
    _save(new_record(planned, info), say)


# -- while and after it runs ----------------------------------------------------------------------------------


def observe(backend: Backend, info: RunInfo, say: Say | None, run_id: str | None = None,
            attempts_of: AttemptsOf | None = None) -> RunRecord | None:
    """What a command just learned about a run (status, wait, follow, list): into the ledger; a run seen
    ended for the first time is archived (its final record and logs). ``run_id``: the run's first id when
    ``info`` is a retry's."""
    key = run_id or info.id
    try:
        book = ledger()
        record = book.get(key)
        if record is None:  # submitted elsewhere: its own record in storage, else what the backend says
            record = _stored(info) or RunRecord.from_run_info(info)
            record.id = key
        elif record.archived:
            return record
    except RtjobError as exc:
        if say is not None:
            say(f"warning: run ledger not updated: {exc.message}")
        return None
    if info.status.terminal:
        return archive(backend, record, info, say, attempts_of=attempts_of)  # which records ``info`` first
    changed = record.observe(info) if info.id == key else _observe_retry(record, info)
    if changed or record.updated_at is None:
        _save(record, say, to_storage=False)
    return record


def _stored(info: RunInfo) -> RunRecord | None:
    """The record a run's submitter wrote to its storage, if this machine can read it."""
    if not _storage_here(info.backend, info.storage_uri):
        return None
    from ..storage.records import read_record

    try:
        return read_record(info.storage_uri or "", info.storage_endpoint)
    except RtjobError:
        return None


def _observe_retry(record: RunRecord, info: RunInfo) -> bool:
    """A retry's status is the run's status; its id stays the first attempt's."""
    retry_id = info.id
    info.id = record.id
    try:
        return record.observe(info)
    finally:
        info.id = retry_id


def archive(backend: Backend, record: RunRecord, info: RunInfo, say: Say | None,
            final: RunStatus | None = None, message: str | None = None,
            attempts_of: AttemptsOf | None = None) -> RunRecord:
    """The run has ended (or its cluster is about to stop: ``final``): save each attempt's driver log beside
    the record, the attempts, cost and metrics summary, and mark it archived. Each part that cannot be read is
    left out with a warning; the record is saved in any case."""
    from ..storage.records import metrics_summary
    from .cost import finished_run_cost

    if info.id == record.id:
        record.observe(info)
    else:
        _observe_retry(record, info)
    if final is not None:
        record.status, record.message = final.value, message
        record.end_time = record.end_time or _now()
    warn = say or (lambda _text: None)
    attempts = _quiet(lambda: (attempts_of or backend.attempts)(record.id), warn, "attempts")
    ids = [record.id]
    if attempts is not None:
        record.attempts = redact_data([a.to_json() for a in attempts.chain], info.secrets)
        ids = [a.id for a in attempts.chain] or ids
    texts: dict[str, str] = {}
    for i, attempt_id in enumerate(ids):
        text = _quiet(functools.partial(backend.logs, attempt_id), warn, f"the log of {attempt_id}")
        if text is None:
            continue
        text = redact(text, info.secrets)
        if len(ids) > 1:
            texts[contract.attempt_log_name(attempt_id)] = text
        if i == len(ids) - 1:
            texts[contract.DRIVER_LOG_FILE] = text
    if texts:
        record.log_home, record.logs = _write_logs(record, texts, warn)
    ended = record.to_run_info()
    cost = _quiet(lambda: finished_run_cost(backend, ended), warn, "cost")
    record.cost = cost
    if record.storage_uri and _readable_here(record):
        record.metrics = _quiet(lambda: metrics_summary(record.storage_uri or "", record.storage_endpoint), None,
                                "metrics")
    record.archived = True
    _save(record, say)
    return record


def _write_logs(record: RunRecord, texts: dict[str, str], warn: Callable[[str], None]) -> tuple[str, list[str]]:
    """The logs into the run's storage; if that cannot be written (no credentials, a flaky network), into
    $RTJOB_HOME/runs/<id> on this machine: a log is never lost because the bucket was out of reach."""
    from ..storage.records import write_log

    home, endpoint = log_home(record) if record.spec is not None else (local_run_dir(record.id), None)
    homes = [(home, endpoint)] + ([(local_run_dir(record.id), None)] if home != local_run_dir(record.id) else [])
    for where, where_endpoint in homes:
        try:
            return where, [write_log(where, name, text, where_endpoint) for name, text in texts.items()]
        except RtjobError as exc:
            warn(f"warning: logs not archived in {where}: {exc.message}")
    return home, []


def _readable_here(record: RunRecord) -> bool:
    return _storage_here(record.backend, record.storage_uri)


def _quiet(call: Callable[[], Any], warn: Callable[[str], None] | None, what: str) -> Any:
    """One part of an archive: its value, or None and one warning line (the rest is archived anyway)."""
    try:
        return call()
    except RtjobError as exc:
        if warn is not None:
            warn(f"warning: {what} not archived: {exc.message}")
        return None


def archive_ended(backend: Backend, runs: list[RunInfo], say: Say | None) -> None:
    """Runs a listing showed ended that the ledger has not archived yet (after `submit --no-wait`)."""
    try:
        pending = {r.id for r in ledger().unarchived(backend.name)}
    except RtjobError:
        return
    for info in runs:
        if info.id in pending and info.status.terminal:
            observe(backend, info, say)


def before_cluster_stops(backend: Backend, say: Say) -> int:
    """`rtjob local down`: archive every run of the embedded cluster the ledger has not archived, with its log so
    far; one still running is recorded STOPPED (the cluster takes it down). Returns how many were archived."""
    try:
        pending = ledger().unarchived(backend.name)
    except RtjobError as exc:
        say(f"warning: run ledger not read: {exc.message}")
        return 0
    done = 0
    for record in pending:
        try:
            info = backend.status(record.id)
        except RtjobError:
            continue  # not on this cluster (an older one's): nothing left to save
        if info.status.terminal:
            archive(backend, record, info, say)
        else:
            archive(backend, record, info, say, final=RunStatus.STOPPED,
                    message="stopped with the embedded cluster (rtjob local down)")
        done += 1
    return done


# -- when the cluster no longer knows the run -------------------------------------------------------------


def find(run_id: str, storage_root: str | None = None, endpoint: str | None = None) -> RunRecord | None:
    """The run's record: the ledger's, else one in ``storage_root`` (a team's bucket: the configured storage)."""
    record = ledger().get(run_id)
    if record is not None or not storage_root:
        return record
    if "://" not in storage_root and not Path(storage_root).is_dir():
        return None
    from ..storage.records import find_record

    found = find_record(storage_root, run_id, endpoint)
    if found is None:
        return None
    record = found[1]
    _save(record, None, to_storage=False)  # remembered here from now on
    return record


def lookup(backend: Backend, run_id: str, storage_root: str | None, say: Say | None,
           attempts_of: AttemptsOf | None = None) -> tuple[RunInfo, RunRecord | None]:
    """The run as its backend reports it (recorded in the ledger), else as its record remembers it: the backend
    does not know it (its cluster stopped, restarted or is another), or cannot be reached and the record says
    the run ended. The record is returned when the answer came from it."""
    try:
        info = backend.status(run_id)
    except (BadInput, Unreachable) as exc:
        try:
            record = find(run_id, storage_root)
        except RtjobError:
            record = None
        if record is None or (isinstance(exc, Unreachable) and not record.run_status.terminal):
            raise exc from None
        return remembered_info(record), record
    observe(backend, info, say, attempts_of=attempts_of)
    return info, None


def remembered_info(record: RunRecord) -> RunInfo:
    """What a record says of a run its cluster no longer knows: an end never seen is UNKNOWN, not RUNNING."""
    info = record.to_run_info()
    if not record.run_status.terminal:
        info.status = RunStatus.UNKNOWN
        info.message = (f"its cluster no longer knows this run; last seen {record.status} at "
                        f"{record.updated_at or record.submitted_at or '?'}, its end was never recorded")
    return info


def archived_log(record: RunRecord) -> str:
    """The run's archived driver log; BadInput if rtjob never saw the run end (nothing was archived)."""
    from ..storage.records import read_log

    home, endpoint = log_home(record)
    if record.log_home and record.log_home != home:  # archived on this machine: the bucket was out of reach
        home, endpoint = record.log_home, None
    text = read_log(home, contract.DRIVER_LOG_FILE, endpoint)
    if text is None:
        raise BadInput(f"run {record.id}: its cluster no longer knows it and its log was not archived (rtjob "
                       f"archives a log when it sees the run end; this one's cluster stopped before that)")
    return text



def refresh(backend: Backend, records: list[RunRecord], say: Say | None) -> None:
    """`rtjob runs`: ask the current backend about the listed runs it ran whose end rtjob has not seen yet (each
    ended one is archived). A backend that cannot be reached is asked no more: the ledger's state is shown."""
    for record in records:
        if record.archived or record.backend != backend.name:
            continue
        try:
            info = backend.status(record.id)
        except Unreachable:
            return
        except RtjobError:
            continue  # not on this cluster: `rtjob status` says what the record knows
        observe(backend, info, say)


# -- `rtjob runs` and `rtjob show` ----------------------------------------------------------------------------


def _listing(wanted: RunFilter, backend_name: str | None, settings: Settings, say: Say) -> tuple[Ledger, dict[str, Any]]:
    """The ledger and `rtjob runs`' filters, once the current backend's runs whose end rtjob has not seen yet
    (after `submit --no-wait`) were asked about, so an ended run shows ended and archived."""
    from ..backends import get_backend

    book = ledger()
    backend = get_backend(settings)
    if backend_name in (None, backend.name):
        pending = book.unarchived(backend.name)
        if pending:
            refresh(backend, pending, say)
    return book, {"job": wanted.job, "status": wanted.status.value if wanted.status else None,
                  "backend": backend_name, "since": wanted.since, "limit": wanted.limit}


def _warnings(book: Ledger, say: Say) -> None:
    for line in book.warnings:
        say(f"warning: {line}")
    book.warnings.clear()


def recorded_runs(wanted: RunFilter, backend_name: str | None, settings: Settings, say: Say) -> list[RunRecord]:
    """The ledger's runs, newest first (`rtjob runs`)."""
    book, filters = _listing(wanted, backend_name, settings, say)
    found = book.query(**filters)
    _warnings(book, say)
    return found


def recorded_summaries(wanted: RunFilter, backend_name: str | None, settings: Settings,
                       say: Say) -> list[dict[str, Any]]:
    """The same runs' short form (`rtjob runs -o json`), read without the whole records."""
    book, filters = _listing(wanted, backend_name, settings, say)
    found = book.summaries(**filters)
    _warnings(book, say)
    return found


def from_storage(root: str, endpoint: str | None, job: str | None) -> tuple[list[RunRecord], list[str]]:
    """A team's runs, by the records in their storage (no ledger needed); each is remembered in this ledger, so
    `status`, `logs`, `show`, `results`, `pull` and `rerun` find it from now on."""
    from ..storage.records import list_records

    listed = list_records(root, endpoint, job=job)
    try:
        book = ledger()
        for record in listed.records:
            if book.get(record.id) is None:
                book.save(record)
    except RtjobError as exc:
        listed.problems.append(f"run ledger not updated: {exc.message}")
    return listed.records, listed.problems


def prune(older_than_s: float) -> int:
    cutoff = dt.datetime.now(dt.timezone.utc) - dt.timedelta(seconds=older_than_s)
    return ledger().prune(older_than=cutoff)


def refreshed(settings: Settings, record: RunRecord, say: Say) -> RunRecord:
    """`rtjob show`: a run whose end rtjob has not seen, as its backend reports it now (if it can be asked)."""
    if record.archived:
        return record
    from ..backends import get_backend

    try:
        backend = get_backend(settings)
        if backend.name != record.backend:
            return record
        return observe(backend, backend.status(record.id), say) or record
    except RtjobError:
        return record


def checkpoints_of(record: RunRecord, say: Say) -> list[dict[str, Any]] | None:
    """The checkpoints in the run's storage (None: its storage cannot be read from here)."""
    if not record.storage_uri or not _readable_here(record):
        return None
    from ..storage.records import checkpoints

    try:
        return checkpoints(record.storage_uri, record.storage_endpoint)
    except RtjobError as exc:
        say(f"warning: checkpoints not listed: {exc.message}")
        return None
