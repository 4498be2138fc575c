"""The queue's storage format: where each object lives below the queue's folder and what its JSON holds.

Below ``<storage>/queues/<NAME>/``: ``intents/`` (one object per client intent, written if absent), ``queue-state.json``
(the keeper's folded queue, written if it matches), ``lease.json`` (the keeper's heartbeat), ``code/`` (queued
runs' packages). Every object is a small JSON document with ``"v": 1``; readers ignore keys they do not know.

Importable on the cluster: the stdlib only."""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import asdict, dataclass, field
from typing import Any

VERSION = 1
INTENTS_FOLDER = "intents"
INTENTS = "intents/"  # the intents' names start so; list them with objects.list(INTENTS_FOLDER)
STATE = "queue-state.json"
LEASE = "lease.json"
CODE = "code/"
LIMIT = 64 << 20  # a state of many thousand entries; an enqueue intent carries one request

KINDS = ("enqueue", "cancel", "priority", "hold", "release")
QUEUED = "queued"
ADMITTED = "admitted"
STATE_LIMIT = LIMIT


def queue_folder(storage: str, name: str) -> str:
    """The queue's folder inside its storage (a local path, file:// or s3:// URI)."""
    return f"{storage.rstrip('/')}/queues/{name}"


@dataclass(frozen=True)
class Shape:
    """What a run declares it takes: ``workers`` bundles of ``per_worker`` (Ray resource names: CPU, GPU,
    memory in bytes, custom ones) on the cluster's nodes, its driver's ``entrypoint`` resources on one node, and
    ``data_cpus`` CPUs left free for Ray Data anywhere (Ray Train withholds its workers' CPUs from it)."""

    workers: int = 0
    per_worker: dict[str, float] = field(default_factory=dict)
    entrypoint: dict[str, float] = field(default_factory=dict)
    data_cpus: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> Shape:
        data = data or {}
        return cls(workers=int(data.get("workers") or 0),
                   per_worker={k: float(v) for k, v in (data.get("per_worker") or {}).items()},
                   entrypoint={k: float(v) for k, v in (data.get("entrypoint") or {}).items()},
                   data_cpus=float(data.get("data_cpus") or 0.0))

    def bundles(self) -> list[dict[str, float]]:
        """Its resources as Ray's bundles (what the keeper asks an autoscaler for): the driver's, each worker's,
        the Ray Data allowance's."""
        parts = [self.entrypoint, *([self.per_worker] * self.workers), {"CPU": self.data_cpus}]
        return [{k: v for k, v in b.items() if v} for b in parts if any(b.values())]

    def describe(self) -> str:
        """'2 × 1 CPU + 1 GPU': the workers' bundles (or the driver's alone)."""
        bundle = self.per_worker if self.workers else self.entrypoint
        what = " + ".join(_amount(k, v) for k, v in sorted(bundle.items()) if v) or "nothing"
        return f"{self.workers} × {what}" if self.workers else f"driver with {what}"


def _amount(key: str, value: float) -> str:
    if key == "memory":
        return f"{value / 2**30:g} GiB"
    return f"{value:g} {key}"


def now() -> float:
    return time.time()


def intent_name(kind: str, run_id: str | None = None, at: float | None = None) -> str:
    """An intent's object name: its kind, the writer's clock in ns (so a listing is in about the order they were
    written) and, for an enqueue, the run id (one enqueue per run: a second is refused, never doubled)."""
    if kind not in KINDS:
        raise ValueError(f"unknown intent kind {kind!r}")
    ns = int((now() if at is None else at) * 1e9)
    if kind == "enqueue":
        return f"{INTENTS}enqueue-{run_id}.json"
    tail = f"{run_id}-" if run_id else ""
    return f"{INTENTS}{kind}-{ns:020d}-{tail}{uuid.uuid4().hex[:12]}.json"


def intent_run(rel: str) -> str | None:
    """The run an intent's object name is about (None: a hold or release)."""
    base = rel[len(INTENTS):] if rel.startswith(INTENTS) else rel
    base = base.removesuffix(".json")
    if base.startswith("enqueue-"):
        return base[len("enqueue-"):]
    parts = base.split("-", 2)  # kind, ns, "<run id>-<random>" or "<random>"
    return parts[2].rsplit("-", 1)[0] if len(parts) == 3 and "-" in parts[2] else None


def dumps(data: dict[str, Any]) -> bytes:
    return json.dumps({"v": VERSION, **data}, separators=(",", ":"), sort_keys=True).encode()


def loads(raw: bytes, what: str) -> dict[str, Any]:
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise ValueError(f"{what}: not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{what}: not a JSON object")
    return data


@dataclass
class Entry:
    """One run in the queue's state, queued or admitted."""

    run_id: str
    priority: int
    user: str
    job: str
    enqueued_at: float  # the first enqueue time (a pipeline's next step keeps its pipeline's)
    arrival: int  # the keeper's fold order: ties of enqueued_at
    shape: Shape
    intent: str  # the enqueue intent's name (its request)
    status: str = QUEUED
    skips: int = 0
    admitted_at: float | None = None
    submitted: bool = False  # the keeper saw Ray take (or already have) the submission
    placed_at: float | None = None
    placed_by: str | None = None  # "pg": its placement group holds its resources in Ray; "driver"; "timeout"
    pipeline_id: str | None = None
    reason: str = ""

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["shape"] = self.shape.to_json()
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Entry:
        known = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        known["shape"] = Shape.from_json(data.get("shape"))
        return cls(**known)


@dataclass
class State:
    """The queue as its keeper folded it: ``entries`` in no particular order (``ordered`` gives the queue's),
    ``folded`` the intents already applied, ``held`` whether admission is paused."""

    name: str
    entries: list[Entry] = field(default_factory=list)
    folded: list[str] = field(default_factory=list)
    held: bool = False
    next_arrival: int = 0
    keeper: str = ""
    updated_at: float = 0.0
    free: str = ""  # the cluster's free resources as the keeper last saw them, one line
    ended: list[str] = field(default_factory=list)  # runs that left the queue whose intents are not deleted yet
    largest: list[dict[str, float]] | None = None  # a growing cluster's nodes at its largest (None: not known)
    largest_from: str = ""  # where the keeper read it (the autoscaling config's path)

    def to_bytes(self) -> bytes:
        return dumps({"name": self.name, "entries": [e.to_json() for e in self.entries], "folded": self.folded,
                      "held": self.held, "next_arrival": self.next_arrival, "keeper": self.keeper,
                      "updated_at": self.updated_at, "free": self.free, "ended": self.ended,
                      "largest": self.largest, "largest_from": self.largest_from})

    @classmethod
    def from_bytes(cls, raw: bytes, name: str) -> State:
        data = loads(raw, f"queue {name}'s {STATE}")
        return cls(name=str(data.get("name") or name), entries=[Entry.from_json(e) for e in data.get("entries") or []],
                   folded=[str(x) for x in data.get("folded") or []], held=bool(data.get("held")),
                   next_arrival=int(data.get("next_arrival") or 0), keeper=str(data.get("keeper") or ""),
                   updated_at=float(data.get("updated_at") or 0.0), free=str(data.get("free") or ""),
                   ended=[str(x) for x in data.get("ended") or []],
                   largest=[{str(k): float(v) for k, v in n.items()} for n in data["largest"]]
                   if isinstance(data.get("largest"), list) else None, largest_from=str(data.get("largest_from") or ""))

    def find(self, run_id: str) -> Entry | None:
        return next((e for e in self.entries if e.run_id == run_id), None)

    def queued(self) -> list[Entry]:
        """The queued entries in the queue's order: higher priority first, then first enqueued, then folded."""
        return sorted((e for e in self.entries if e.status == QUEUED), key=order_key)

    def admitted(self) -> list[Entry]:
        return sorted((e for e in self.entries if e.status == ADMITTED), key=lambda e: e.admitted_at or 0.0)


def order_key(entry: Entry) -> tuple[int, float, int]:
    return (-entry.priority, entry.enqueued_at, entry.arrival)

