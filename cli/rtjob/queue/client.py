"""What a client does to a queue: write an intent (enqueue, cancel, priority, hold, release), each an object of its
own written if absent, and read the queue (the keeper's state plus intents it has not folded yet). Reads never
write. ``ensure_keeper`` is the call a carrying command (submit, wait; a queued pipeline's supervisor) makes: a
queue whose keeper's lease has expired gets a new keeper on the cluster (its Ray job id is deterministic, so two
clients start one).

Commands call these with a ``QueueRef`` (``QueueRef.of(settings, default_storage)``: the queue's name and the
storage its objects live in)."""

from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.errors import BadInput
from ..storage.objects import Objects, PreconditionFailed
from ..storage.opening import objects_for
from . import lease as leases
from .admission import Limits, fits, nodes_line
from .format import (
    ADMITTED,
    CODE,
    INTENTS_FOLDER,
    LIMIT,
    QUEUED,
    STATE,
    Shape,
    State,
    dumps,
    intent_name,
    loads,
    now,
    queue_folder,
)
from .lease import Lease


class AlreadyQueued(BadInput):
    """The run has an enqueue intent in this queue already (a second enqueue is refused, never doubled)."""


@dataclass(frozen=True)
class QueueRef:
    name: str
    storage: str  # the storage root; the queue's objects are below queues/<name>/
    endpoint: str | None = None  # an S3-compatible server's URL

    @property
    def folder(self) -> str:
        return queue_folder(self.storage, self.name)

    @classmethod
    def of(cls, settings: Any, default_storage: str | None, endpoint: str | None = None) -> QueueRef:
        """From a queue's settings (``name``, ``storage``: None for the project's), as jobspec/queues.py reads them."""
        storage = getattr(settings, "storage", None) or default_storage
        if not storage:
            raise BadInput(f"queue {settings.name!r}: no storage for its state (set storage in [queues.{settings.name}] "
                           "or the project's storage)")
        return cls(str(settings.name), str(storage), endpoint)

    def objects(self) -> Objects:
        return objects_for(self.folder, self.endpoint)


def _write(ref: QueueRef, name: str, body: dict[str, Any]) -> str:
    with ref.objects() as objects:
        objects.put(name, dumps(body), if_absent=True)
    return name


def enqueue(ref: QueueRef, run_id: str, request: dict[str, Any], shape: Shape, *, user: str, job: str,
            priority: int = 0, enqueued_at: float | None = None, pipeline_id: str | None = None) -> str:
    """Queue run ``run_id``: ``request`` is its exact planned Jobs API body (what the keeper POSTs at admission,
    with ``submission_id`` = ``run_id``), ``shape`` what it declares it takes. ``enqueued_at``: the first enqueue
    time (a pipeline's next step passes its pipeline's). Returns the intent's name; AlreadyQueued when the run was
    enqueued before."""
    at = now()
    body = {"kind": "enqueue", "run_id": run_id, "at": at, "user": user, "job": job, "priority": int(priority),
            "enqueued_at": at if enqueued_at is None else float(enqueued_at), "pipeline_id": pipeline_id,
            "shape": shape.to_json(), "request": request}
    try:
        return _write(ref, intent_name("enqueue", run_id), body)
    except PreconditionFailed:
        raise AlreadyQueued(f"{run_id} is already in queue {ref.name}") from None


def enqueue_planned(backend: Any, ref: QueueRef, request: Any, shape: Shape, *, user: str, job: str,
                    priority: int = 0, enqueued_at: float | None = None, pipeline_id: str | None = None) -> str:
    """Queue a planned request (``backend.plan(job).request``) of a Ray backend: its body (``queued_request``),
    then ``enqueue``."""
    return enqueue(ref, str(request.run_id), queued_request(backend, ref, request), shape, user=user, job=job,
                   priority=priority, enqueued_at=enqueued_at, pipeline_id=pipeline_id)


def queued_request(backend: Any, ref: QueueRef, request: Any) -> dict[str, Any]:
    """The Jobs API body of a planned request, its packages uploaded to the cluster now and their zips kept in the
    queue's storage (``code/``), so the keeper can put them back at admission however long the run waits."""
    from ..backends.keepers import queued_body

    with ref.objects() as objects:
        def kept(package: str) -> bool:  # named by its content's hash (Ray's): one copy for every run that uses it
            return objects.head(f"{CODE}{package}") is not None

        def keep(package: str, path: Path) -> None:
            with contextlib.suppress(PreconditionFailed):
                objects.put_file(f"{CODE}{package}", str(path), if_absent=True)

        return queued_body(backend, request, keep, kept)


def shape_of(job: Any, entrypoint_cpus: float = 0.0, data_cpus: float = 0.0) -> Shape:
    """A resolved job's declared shape (jobspec/resolve.ResolvedJob: num_workers × cpus/gpus/memory per worker;
    a job that declares no worker shape counts its driver only)."""
    per: dict[str, float] = {"CPU": float(job.cpus_per_worker)}
    if job.gpus_per_worker:
        per["GPU"] = float(job.gpus_per_worker)
    if job.memory_gb_per_worker:
        per["memory"] = float(job.memory_gb_per_worker) * 2**30
    workers = int(job.num_workers) if getattr(job, "shape_declared", True) else 0
    return Shape(workers=workers, per_worker=per if workers else {},
                 entrypoint={"CPU": float(entrypoint_cpus)} if entrypoint_cpus else {}, data_cpus=float(data_cpus))


def never_fits(ref: QueueRef, shape: Shape) -> tuple[str | None, Lease | None]:
    """Why ``shape`` can never fit the queue's cluster, as its live keeper last read the cluster at its largest
    (an autoscaling config's node types at their max_workers); None: it fits, or no live keeper knows (a state
    left by a keeper that is gone may describe a cluster since replaced). With the lease read for it, which
    ``ensure_keeper`` takes instead of reading it again."""
    with ref.objects() as objects:
        state, _ = read_state(objects, ref.name)
        lease = leases.read(objects)
    if state.largest is None or lease is None or not lease.alive() or fits(shape, state.largest):
        return None, lease
    return (f"{shape.describe()} can never fit queue {ref.name}'s cluster, even grown to its largest "
            f"({nodes_line(state.largest)}: its autoscaling config {state.largest_from})"), lease


def cancel(ref: QueueRef, run_id: str, by: str) -> str:
    """Cancel a queued run (before its admission it never reaches Ray; the keeper stops an admitted one)."""
    return _write(ref, intent_name("cancel", run_id), {"kind": "cancel", "run_id": run_id, "at": now(), "by": by})


def set_priority(ref: QueueRef, run_id: str, priority: int, by: str) -> str:
    return _write(ref, intent_name("priority", run_id), {"kind": "priority", "run_id": run_id, "at": now(),
                                                         "priority": int(priority), "by": by})


def hold(ref: QueueRef, by: str) -> str:
    """Pause admission (queued runs stay; admitted ones go on)."""
    return _write(ref, intent_name("hold"), {"kind": "hold", "at": now(), "by": by})


def release(ref: QueueRef, by: str) -> str:
    return _write(ref, intent_name("release"), {"kind": "release", "at": now(), "by": by})


@dataclass(frozen=True)
class QueueEntry:
    id: str
    status: str  # "queued" or "admitted"
    position: int | None  # 1 = the next to be admitted; None: admitted, or not folded yet
    priority: int
    user: str
    job: str
    enqueued_at: float  # waiting since
    reason: str

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class QueueView:
    name: str
    held: bool
    keeper: str  # the lease's holder ('' none)
    keeper_alive: bool
    entries: list[QueueEntry]
    free: str  # the cluster's free resources as the keeper last saw them
    largest: str = ""  # a growing cluster's nodes at their largest, as the keeper last read them ('' unknown)


def read_state(objects: Objects, name: str) -> tuple[State, str | None]:
    """The keeper's state and its version (a fresh State and None when the queue has none yet)."""
    found = objects.get(STATE, LIMIT)
    return (State(name), None) if found is None else (State.from_bytes(found.data, name), found.etag)


def read(ref: QueueRef) -> QueueView:
    """The queue now: admitted runs first (oldest admission first), then queued ones in order, then enqueues the
    keeper has not folded yet (position None), cancelled ones left out."""
    with ref.objects() as objects:
        state, _ = read_state(objects, ref.name)
        lease = leases.read(objects)
        folded = set(state.folded)
        pending = [x.rel for x in objects.list(INTENTS_FOLDER) if x.rel not in folded]
        unfolded = [loads(o.data, rel) for rel in pending if (o := objects.get(rel, LIMIT)) is not None]
    cancelled = {i["run_id"] for i in unfolded if i.get("kind") == "cancel"}
    known = {e.run_id for e in state.entries}
    out = [QueueEntry(e.run_id, ADMITTED, None, e.priority, e.user, e.job, e.enqueued_at,
                      e.reason or "admitted") for e in state.admitted()]
    queued = [e for e in state.queued() if e.run_id not in cancelled]  # a cancel not folded yet wins already
    for i, e in enumerate(queued, start=1):
        out.append(QueueEntry(e.run_id, QUEUED, i, e.priority, e.user, e.job, e.enqueued_at, e.reason or ""))
    for intent in unfolded:
        run = str(intent.get("run_id") or "")
        if intent.get("kind") == "enqueue" and run not in known and run not in cancelled:
            out.append(QueueEntry(run, QUEUED, None, int(intent.get("priority") or 0), str(intent.get("user") or ""),
                                  str(intent.get("job") or ""), float(intent.get("enqueued_at") or 0.0),
                                  f"in {ref.name}, not yet ordered by its keeper"))
    alive = lease is not None and lease.alive()
    return QueueView(ref.name, state.held, lease.holder if lease else "", alive, out, state.free,
                     nodes_line(state.largest) if state.largest else "")


def keeper_alive(ref: QueueRef) -> bool:
    with ref.objects() as objects:
        lease = leases.read(objects)
    return lease is not None and lease.alive()


def ensure_keeper(backend: Any, ref: QueueRef, settings: Any = None, env: dict[str, str] | None = None,
                  seen: Lease | None = None) -> str:
    """The id of the queue's live keeper, starting one on ``backend``'s cluster when none holds the lease, with
    ``settings``' policy and caps (jobspec/queues.QueueSettings; None: the defaults); ``env``: what the keeper
    needs to reach the queue's storage, e.g. its credentials (None: the client's AWS variables). ``seen``: the
    lease as this command read it moments ago (never_fits): still alive now, it is not read again (one storage
    round trip less); else it is."""
    lease = seen
    if lease is None or not lease.alive():
        with ref.objects() as objects:
            lease = leases.read(objects)
    if lease is not None and lease.alive():
        return lease.holder
    from ..backends.keepers import start_keeper

    limits = Limits.of(settings) if settings is not None else Limits()
    return start_keeper(backend, ref.name, ref.folder, ref.endpoint, _after(lease.holder if lease else ""), env,
                        dataclasses.asdict(limits))


def _after(holder: str) -> int:
    """The next keeper's number: one past the last lease holder's (rtjob-keeper-<name>-<n>)."""
    tail = holder.rsplit("-", 1)[-1]
    return int(tail) + 1 if tail.isdigit() else 1
