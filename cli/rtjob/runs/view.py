"""One view of a run: what rtjob knows of run ID, asked once for `status`, `show`, `logs`, `wait`, `stop`, `results`,
`pull` and the UI, so every command tells the same story.

The answer comes from the first source that knows the run: its backend (live), else its record (the ledger's, or
the one in the run's storage), else, for a pipeline run, its record and its steps' records. A retried run is one run
whatever the source: its first attempt's id and start, its latest attempt's status, message, exit code and end (one
duration), and its attempts, as the one verdict (core/verdict.py) says it. Looking never acts: nothing is written to
the run's storage or its index and no cluster is acted on (a dead supervisor is reported: ``dead_supervisor``);
only the commands that carry a run (`submit`, `wait`, `stop`, `status --repair`, `local down`) archive what they
saw (``look(..., carry=True)``). This machine's ledger is a cache of verdicts: a look may refresh its row."""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..core.errors import RtjobError, StorageError, Unreachable
from ..core.model import Attempts, RunInfo, RunStatus

if TYPE_CHECKING:
    from ..backends.base import Backend
    from ..core.record import RunRecord
    from ..core.verdict import Verdict
    from .events import RunEvents
    from .lifecycle.archive import AttemptsOf


@dataclass
class RunView:
    info: RunInfo  # the run as one story (its first id; its latest attempt's status, message and end)
    record: RunRecord | None  # the record that answered (the backend does not know the run now), or a pipeline's
    attempts: Attempts | None  # every attempt, where it has several (None: not known, or the platform retries)
    latest: str  # its latest attempt's id: whose log is the run's log now

    @property
    def live(self) -> bool:
        """The backend answered (the cluster knows the run)."""
        return self.record is None

    @property
    def pipeline(self) -> bool:
        return self.record is not None and bool(self.record.steps)


def one_story(first: RunInfo, latest: RunInfo, attempts: int) -> RunInfo:
    """A retried run as one run: ``first``'s id, job, storage and start; ``latest``'s status, message, exit code
    and end."""
    return dataclasses.replace(
        latest, id=first.id, job=first.job or latest.job, start_time=first.start_time or latest.start_time,
        storage_uri=first.storage_uri or latest.storage_uri, parent=None, attempts=attempts,
        secrets=[*first.secrets, *latest.secrets], rate=first.rate or latest.rate,
        storage_endpoint=first.storage_endpoint or latest.storage_endpoint)


def recorded_story(info: RunInfo, record: RunRecord) -> RunInfo:
    """What a record says of a run, as one story (the verdict's: its attempts counted, its last recorded attempt's
    end where that is newer than the record's status), over ``info``, the record's own RunInfo."""
    from ..core.verdict import of_record

    return of_record(record).onto(info)


def _latest(backend: Backend, info: RunInfo, attempts: Attempts | None) -> tuple[RunInfo, str]:
    """The run's story from its first attempt's info (``info``) and its attempts: the latest attempt's state."""
    if attempts is None or len(attempts.chain) <= 1 or attempts.parent is not None:
        return info, info.id  # one attempt, or the id asked about is one retry: that attempt as it is
    latest_id = attempts.chain[-1].id
    try:
        latest = backend.find(latest_id)
    except RtjobError:
        latest = None
    if latest is None:
        return info, info.id
    return one_story(info, latest, len(attempts.chain)), latest_id


def look(backend: Backend, run_id: str, storage_root: str | None, events: RunEvents,
         attempts_of: AttemptsOf | None = None, *, carry: bool = False) -> RunView:
    """What rtjob knows of ``run_id`` (see the module's docstring). ``carry`` (a command that carries the run):
    what it learned is archived (archive.observe: an ended run's record, logs and index entry written); else nothing
    shared is written. Either way this ledger, a cache, may be refreshed: a record found only in storage is remembered
    here (a pipeline's steps found by `status PIPE` are then found by `logs STEP`). Raises as
    memory.lookup does when nothing knows the run."""
    from .memory import lookup, remember

    asked: AttemptsOf = attempts_of or functools.cache(backend.attempts)
    info, record = lookup(backend, run_id, storage_root)
    if record is not None:
        remember(record)  # this machine's cache, never the shared storage
        if record.steps:
            return RunView(_pipeline_info(record), record, None, record.id)
        attempts = Attempts.recorded(record.attempts) if record.attempts else None
        latest = str(record.attempts[-1].get("id")) if record.attempts else record.id
        return RunView(info, record, attempts, latest)
    if backend.pipeline_steps_inside:
        pipeline = _hosted_pipeline(info)
        if pipeline is not None:
            return RunView(_pipeline_info(pipeline), pipeline, None, pipeline.id)
    try:
        attempts = asked(run_id)
    except RtjobError:
        attempts = None
    story, latest = _latest(backend, info, attempts)
    if carry:
        from ..core.verdict import verdict
        from .lifecycle.archive import observe

        carried = observe(backend, story, events, attempts_of=asked)  # its record, archived once it ended
        return RunView(verdict(carried, None, story).onto(story) if carried is not None else story, None, attempts,
                       latest)  # the verdict, as a follow's end says it
    return RunView(_seen_live(story), None, attempts, latest)


def _seen_live(story: RunInfo) -> RunInfo:
    """A run its backend answers for, as the verdict says it: the backend's state, unless the run side's end in its
    storage stands; times from the record (milliseconds kept). The ledger's row is refreshed (a cache)."""
    from ..core.verdict import verdict
    from .events import Quiet
    from .memory import keep, ledger, stored

    try:
        row = ledger().get(story.id)
    except RtjobError:
        row = None
    in_storage = stored(story) if row is None or not row.archived else None
    seen = verdict(in_storage, row, story).onto(story)
    if row is not None and not row.archived and row.observe(dataclasses.replace(seen, id=row.id)):
        keep(row, Quiet())  # the ledger caches what was seen; its archive is a carrier's
    return seen


def recorded(run_id: str, storage_root: str | None, endpoint: str | None = None) -> RunView | None:
    """``look``'s variant that asks no backend (`rtjob ui`): the run as its records tell it (the ledger's, else the
    one in ``storage_root``, with what its run side wrote since), the same verdict as ``look`` tells from a record;
    nothing started, repaired or written. None: no record of it."""
    from .memory import find, with_run_side

    record = find(run_id, storage_root, endpoint)
    if record is None:
        return None
    record = record if record.archived else with_run_side(record, strict=True)
    if record.steps:  # its steps as their records have them: the verdict `status` and `show` tell
        judged = recorded_pipeline_verdict(record, recorded_steps(record, storage_root, endpoint))
        return RunView(judged.onto(record.to_run_info()), record, None, record.id)
    attempts = Attempts.recorded(record.attempts) if record.attempts else None
    latest = str(record.attempts[-1].get("id")) if record.attempts else record.id
    return RunView(recorded_story(record.to_run_info(), record), record, attempts, latest)


def _hosted_pipeline(info: RunInfo) -> RunRecord | None:
    """A job hosting a pipeline a schedule started (Anyscale: the steps run inside one job): the pipeline's record,
    which its supervisor began."""
    import rtjob_contract as contract

    from .memory import stored

    if info.id.endswith(contract.SUPERVISOR_SUFFIX):
        return None
    found = stored(info)
    return found if found is not None and found.steps else None


def _pipeline_info(record: RunRecord, merged: bool = False) -> RunInfo:
    """A pipeline run's record as the run its supervisor (or its follower) wrote: its own end stands (``merged``:
    the run side's record is joined already)."""
    from .memory import with_run_side

    record = record if merged else with_run_side(record)
    return recorded_story(record.to_run_info(), record)


def dead_supervisor(backend: Backend, view: RunView) -> str | None:
    """One line when the run's supervisor has died while the run still had something to carry (it is not
    replaced here: looking never acts), naming the commands that replace it; None: alive, none, or nothing to
    carry."""
    if not view.live and not view.pipeline:
        return None
    status = view.info.status
    if status in (RunStatus.SUCCEEDED, RunStatus.STOPPED):
        return None
    if status == RunStatus.FAILED and not view.pipeline:
        attempts = view.attempts
        if attempts is None or attempts.max_retries is None or len(attempts.chain) > attempts.max_retries:
            return None  # no retry left: nothing to carry
    try:
        supervisor = backend.supervisor_of(view.info.id)
    except RtjobError:
        return None
    if supervisor is None or not supervisor.status.terminal:
        return None
    return (f"its supervisor {supervisor.id} is {supervisor.status.value} and nothing carries the run now: "
            f"rtjob status {view.info.id} --repair (or rtjob wait {view.info.id}) starts a new one")


def ask_backend_about(backend: Backend, records: list[RunRecord], events: RunEvents) -> None:
    """`rtjob runs`: ask the current backend about the listed runs it ran whose end rtjob has not seen yet, each as
    one story (a retried run's latest attempt). A backend that cannot be reached is asked no
    more: the ledger's state is shown. Nothing is archived: the ledger's rows are refreshed (a cache)."""
    for record in records:
        if record.archived or record.backend != backend.name:
            continue
        try:
            if backend.find(record.id) is None:
                continue  # not on this cluster: `rtjob status` says what the record knows
            look(backend, record.id, None, events)
        except Unreachable:
            return
        except RtjobError:
            continue


def recorded_pipeline_verdict(record: RunRecord, steps: list[dict[str, Any]]) -> Verdict:
    """A pipeline's verdict from its steps as ``recorded_steps`` has them (`show`, the UI: no backend asked): the
    one `status` tells (core/pipeline_verdict.pipeline_verdict)."""
    from ..core.pipeline_verdict import pipeline_verdict as judge

    def info(step: dict[str, Any]) -> RunInfo | None:
        try:
            status = RunStatus(str(step.get("status")))
        except ValueError:
            return None
        return RunInfo(id=str(step.get("run_id")), job=None, backend=record.backend, status=status,
                       message=step.get("message"), start_time=step.get("start_time"), end_time=step.get("end_time"))

    return judge(record, [(str(step.get("name")), info(step)) for step in steps])


def recorded_steps(record: RunRecord, storage_root: str | None, endpoint: str | None = None) -> list[dict[str, Any]]:
    """A pipeline run's steps as their records have them (`rtjob show`: no backend asked): each step's entry with
    its run's status, start and end (None: no record of it, e.g. never submitted)."""
    from .memory import find

    out = []
    for step in record.steps:
        folder = str(step.get("storage_uri") or "")  # <root>/<job>/<run id>: its record is found there first
        root = folder.rsplit("/", 2)[0] if folder.count("/") >= 2 else storage_root
        try:
            found = find(str(step.get("run_id")), root, endpoint)
        except StorageError:
            raise  # a step whose storage is down is not "never submitted" (exit 3)
        except RtjobError:
            found = None
        info = recorded_story(found.to_run_info(), found) if found is not None else None
        out.append({**step, "status": info.status.value if info else step.get("status"),
                    "message": info.message if info else None,
                    "start_time": info.start_time if info else None, "end_time": info.end_time if info else None,
                    "logs": list(found.logs) if found is not None else []})
    return out
