"""A run that waits in a team's queue, as a client sees it (issue 44): the planned run enqueued (its exact request,
its declared shape) and the queue's keeper made sure of; its place for the verdict; a cancel; the queue listed, a
run's priority changed, the queue held or released. Through the queue's client (rtjob/queue/client.py: intents, the
keeper's state and lease), which alone knows the queue's storage format. Reads never write. No Click."""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from ..core import clock
from ..core.errors import BadInput, RtjobError
from ..core.model import RunInfo, RunStatus
from ..core.queueing import Place

if TYPE_CHECKING:
    from ..backends.base import Backend
    from ..core.record import RunRecord
    from ..jobspec.queues import QueuePlan, QueueSettings
    from ..jobspec.settings import Settings
    from ..queue.client import QueueRef, QueueView
    from .events import RunEvents
    from .runner import Plan, Submitted


def user() -> str:
    from .records import _user

    return _user() or "?"


def ref_of(settings: QueueSettings, storage: str | None, endpoint: str | None = None) -> QueueRef:
    from ..queue.client import QueueRef

    return QueueRef.of(settings, storage, endpoint)


def record_queue(plan: QueuePlan) -> dict[str, Any]:
    """What the run's record keeps of its queue (core/record.py's ``queue``): its settings too, so a command that
    starts a dead keeper for it (`wait`) starts it with the queue's policy and caps."""
    return {"name": plan.name, "priority": plan.priority, "storage": plan.storage, "settings": plan.settings.to_json()}


def enqueue(planned: Plan, events: RunEvents, lease: Any = None) -> Submitted:
    """The planned run into its queue (after the never-fits check: submission.py, ``lease`` the queue's lease as
    that check read it): its request as the keeper will send it (its packages uploaded now), one enqueue intent,
    then a live keeper. The run is QUEUED; a second submit of the same id is an attach."""
    from ..queue import client
    from .runner import Submitted

    job, backend = planned.job, planned.backend
    assert job.queue is not None
    ref = ref_of(job.queue.settings, job.queue.storage, job.storage_endpoint)
    info = RunInfo(job.run_id, job.spec.name, backend.name, RunStatus.QUEUED, storage_uri=job.storage_uri,
                   storage_endpoint=job.storage_endpoint, message=f"queued in {job.queue.name}")
    created = True
    try:  # its packages uploaded now and kept in the queue's storage (Ray collects an unreferenced one)
        client.enqueue_planned(backend, ref, planned.request, _shape(planned), user=user(), job=job.spec.name,
                               priority=job.queue.priority)
    except client.AlreadyQueued:
        created = False
    keeper = client.ensure_keeper(backend, ref, job.queue.settings, seen=lease)
    events.note(f"queued in {job.queue.name} (priority {job.queue.priority}); its keeper {keeper} admits it when "
                "the cluster can take the whole run")
    return Submitted(info, created)  # the timeline's "queued": the kernel's Queued stamps it


def keeper_sends(planned: Plan) -> bool:
    """Whether the planned run goes through its queue's keeper (a queue named, on a backend that does not queue
    runs itself)."""
    return planned.job.queue is not None and not planned.backend.queues_itself


def refuse_if_never_fits(planned: Plan) -> Any:
    """BadInput (exit 2, nothing enqueued) when the planned run can never fit its queue's cluster grown to its
    largest, as the queue's live keeper read it on the cluster (queue/client.never_fits); else the queue's lease
    as read for it (``enqueue`` takes it)."""
    from ..queue import client

    job = planned.job
    assert job.queue is not None
    why, lease = client.never_fits(ref_of(job.queue.settings, job.queue.storage, job.storage_endpoint),
                                   _shape(planned))
    if why is not None:
        raise BadInput(f"{job.job_file}: {why}")
    return lease


def _shape(planned: Plan) -> Any:
    """What the planned run declares it takes (the keeper admits by it): a CPU left to Ray Data where it uses it."""
    from ..queue.client import shape_of

    job = planned.job
    return shape_of(job, float(getattr(planned.request, "entrypoint_num_cpus", 0) or 0),
                    1.0 if job.spec.strategy == "ray-data" else 0.0)


def queued_steps(plans: list[Plan], pipeline_id: str, events: RunEvents) -> dict[str, dict[str, Any]]:
    """A queued pipeline's steps as its supervisor will enqueue them, each when the one before it ended: {run id:
    its body} (packages uploaded now and kept in the queue's storage), with the pipeline's priority and this
    moment as every step's first enqueue time; the queue's keeper made sure of now. Empty: the steps are not
    queued (no queue, or the backend queues them itself)."""
    queued = [p for p in plans if keeper_sends(p)]
    if not queued:
        return {}
    from ..queue import client, steps
    from ..queue.admission import Limits

    at, bodies = time.time(), {}
    for planned in queued:
        job = planned.job
        assert job.queue is not None
        ref = ref_of(job.queue.settings, job.queue.storage, job.storage_endpoint)
        bodies[job.run_id] = steps.prepared(
            planned.backend, ref, planned.request, _shape(planned), limits=Limits.of(job.queue.settings),
            record=record_queue(job.queue), user=user(), job=job.spec.name, priority=job.queue.priority,
            enqueued_at=at, pipeline_id=pipeline_id)
    first = queued[0].job.queue
    assert first is not None
    keeper = client.ensure_keeper(queued[0].backend, ref_of(first.settings, first.storage,
                                                            queued[0].job.storage_endpoint), first.settings)
    events.note(f"its steps queue in {first.name} (priority {first.priority}), each when the one before it ends; "
                f"its keeper {keeper} admits them")
    return bodies


def _ref_of_record(record: RunRecord) -> QueueRef | None:
    from ..jobspec.queues import QueueSettings

    queue = record.queue or {}
    if not queue.get("name") or not queue.get("storage"):
        return None
    return ref_of(QueueSettings(name=str(queue["name"])), str(queue["storage"]), record.storage_endpoint)


def ensure_keeper_of(backend: Backend, record: RunRecord) -> str:
    """A queued run's keeper started where its lease lapsed (what a carrying command does): its id."""
    from ..jobspec.queues import QueueSettings
    from ..queue import client

    ref = _ref_of_record(record)
    if ref is None:
        raise BadInput(f"{record.id}: its record names no queue storage")
    known = (record.queue or {}).get("settings")
    settings = QueueSettings(**known) if isinstance(known, dict) else None
    return client.ensure_keeper(backend, ref, settings)


def place(record: RunRecord) -> Place | None:
    """A queued run's place as its queue's state tells it (None: the record is not QUEUED). A queue that cannot be
    read leaves the record's own word (its queue's name): a read never fails a view."""
    return places([record]).get(record.id)


def places(records: list[RunRecord]) -> dict[str, Place]:
    """The queued records' places (`list`, `runs`: each queue read once): a run just queued whose keeper holds no
    lease yet reads as its keeper starting (its Ray job takes seconds), not as lost."""
    waiting = [r for r in records if r.run_status == RunStatus.QUEUED]
    read = _read_places([(r.id, r.queue or {}, r.storage_endpoint) for r in waiting])
    out: dict[str, Place] = {}
    for record in waiting:
        found = read.get(record.id) or Place(str((record.queue or {}).get("name") or "?"))
        if found.keeper_alive is False and _within(record.timeline.get("queued"), KEEPER_START_S):
            found = replace(found, keeper_alive=None,
                            reason="; ".join(filter(None, ["its keeper is starting", found.reason])))
        out[record.id] = found
    return out


KEEPER_START_S = 120.0  # how long after its enqueue a run's lapsed lease reads as a keeper starting, not a lost one


def _within(when: str | None, seconds: float) -> bool:
    try:
        return when is not None and (clock.now() - clock.parse(when)).total_seconds() < seconds
    except ValueError:
        return False


def places_of(rows: list[dict[str, Any]]) -> dict[str, Place]:
    """The queued runs' places among listed rows (index entries), each queue read once; a queue that cannot be read
    is left out (its runs show their queue's name alone)."""
    return _read_places([(str(row.get("id")), row.get("queue"), None) for row in rows
                         if row.get("status") == RunStatus.QUEUED.value])


def _read_places(runs: list[tuple[str, Any, str | None]]) -> dict[str, Place]:
    """(run id, its record's ``queue``, its storage's endpoint) -> its place, each queue's state read once; a queue
    that names no storage or cannot be read is left out."""
    from ..jobspec.queues import QueueSettings
    from ..queue import client

    groups: dict[tuple[str, str, str | None], list[str]] = {}
    for run_id, queue, endpoint in runs:
        if isinstance(queue, dict) and queue.get("name") and queue.get("storage"):
            groups.setdefault((str(queue["name"]), str(queue["storage"]), endpoint), []).append(run_id)
    out: dict[str, Place] = {}
    for (name, storage, endpoint), ids in groups.items():
        try:
            view = client.read(ref_of(QueueSettings(name=name), storage, endpoint))
        except (RtjobError, OSError, ValueError):
            continue
        out.update({run_id: place_in(view, run_id) for run_id in ids})
    return out


def place_in(view: QueueView, run_id: str) -> Place:
    queued = [e for e in view.entries if e.status == "queued"]
    entry = next((e for e in view.entries if e.id == run_id), None)
    why = (entry.reason or None) if entry else "not in the queue's state yet"
    if why and why.startswith(f"in {view.name}, "):  # an enqueue its keeper has not folded: "in NAME, not yet ..."
        why = why[len(f"in {view.name}, "):]
    if not view.keeper:  # no keeper ever held the lease: the first one is starting (its Ray job takes seconds)
        why = "; ".join(filter(None, ["its keeper is starting", why]))
    return Place(view.name, entry.position if entry else None, len(queued) or None, why,
                 keeper_alive=view.keeper_alive if view.keeper else None, held=view.held)


def cancel_intent(record: RunRecord) -> None:
    """A cancel intent for a queued run: its keeper never admits it after (and stops one it admitted first)."""
    from ..queue import client

    ref = _ref_of_record(record)
    if ref is None:
        raise BadInput(f"{record.id}: its record names no queue storage; it cannot be cancelled from here")
    client.cancel(ref, record.id, by=user())


@dataclass(frozen=True)
class Listed:
    """`rtjob queue NAME`: the queue as its state tells it."""

    view: QueueView

    def rows(self) -> list[dict[str, Any]]:
        return [{"id": e.id, "status": "QUEUED" if e.status == "queued" else "ADMITTED", "position": e.position,
                 "priority": e.priority, "user": e.user, "job": e.job,
                 "waiting_since": _iso(e.enqueued_at), "reason": e.reason}
                for e in self.view.entries]


def _iso(seconds: float | None) -> str | None:
    import datetime as dt

    return dt.datetime.fromtimestamp(seconds, dt.timezone.utc).isoformat(timespec="seconds") if seconds else None


def queue_settings(settings: Settings, name: str | None) -> QueueSettings:
    """The queue ``name`` of the settings (None: the settings' `queue`), or one line naming what is defined."""
    from ..jobspec.queues import QueueSettings, defined, queue_name

    tables = defined(settings.get("queues"))
    name = name or settings.get("queue")
    if not name:
        raise BadInput(f"which queue? name one (queues defined: {', '.join(sorted(tables)) or 'none'})")
    try:
        queue_name(name)
    except ValueError as exc:
        raise BadInput(f"queue: {exc}") from None
    if name not in tables:
        raise BadInput(f"no queue {name!r} (queues defined: {', '.join(sorted(tables)) or 'none'}; [queues.{name}] "
                       "in the project config or a context defines it)")
    return QueueSettings(name=name, **tables[name])


def queue_at(name: str, storage: str, endpoint: str | None = None) -> Listed:
    """Queue ``name`` whose state lives in ``storage`` (the UI's queue page), as `rtjob queue NAME` lists it."""
    from ..jobspec.queues import QueueSettings, queue_name

    try:
        queue_name(name)
    except ValueError as exc:
        raise BadInput(f"queue: {exc}") from None
    from ..queue import client

    return Listed(client.read(ref_of(QueueSettings(name=name), storage, endpoint)))


def listed(settings: Settings, name: str | None, storage: str | None) -> Listed:
    queue = queue_settings(settings, name)
    from ..queue import client

    return Listed(client.read(ref_of(queue, storage)))


def change(settings: Settings, storage: str | None, what: str, name: str | None = None, run_id: str | None = None,
           priority: int | None = None) -> str:
    """A priority, hold or release intent, written (the keeper folds it); returns the queue's name."""
    from ..queue import client

    if what == "priority":  # ``name``: the run's queue as its record says
        queue = queue_settings(settings, name)
        client.set_priority(ref_of(queue, storage), str(run_id), int(priority or 0), by=user())
        return queue.name
    queue = queue_settings(settings, name)
    (client.hold if what == "hold" else client.release)(ref_of(queue, storage), by=user())
    return queue.name
