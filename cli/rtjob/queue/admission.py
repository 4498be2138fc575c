"""The admission rule, a pure function: which queued run (at most one) the keeper admits now, which it skipped,
and why each one waits, in one line.

Order: higher priority first, then first enqueued (format.order_key). A run is admitted when its whole declared
shape fits the free resources per node (its driver's bundle on one node, each worker's bundle on some node, and
its Ray Data CPU allowance left anywhere). Policies, as Kueue names them:
- ``best-effort`` (BestEffortFIFO): a later run that fits may start while an earlier one waits; each waiting run
  it passes is skipped once, and a run skipped ``max_skips`` times blocks skip-ahead until it is admitted (so a
  big gang does not starve behind small ones);
- ``strict`` (StrictFIFO): the first run in order that does not fit blocks the ones behind it.
A run whose user holds ``max_running_per_user`` admitted runs waits without blocking others (fair share); with
``max_running`` admitted runs, none is admitted. A run that can never fit the cluster's whole shape (``total``: its
nodes, or a growing cluster's nodes at their largest where its autoscaling config tells them) waits without
blocking, and nothing is asked of an autoscaler for it. The keeper admits one run at a time: while the last admitted
one is not placed (``waiting_for``), nothing is admitted, so two half-placed gangs never deadlock (Kueue's
blockAdmission).

Importable on the cluster: the stdlib only."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from .format import Entry, Shape

Node = dict[str, float]
EPS = 1e-9


@dataclass(frozen=True)
class Limits:
    policy: str = "best-effort"  # or "strict"
    max_skips: int = 3
    max_running: int | None = None
    max_running_per_user: int | None = None

    @classmethod
    def of(cls, settings: object) -> Limits:
        """From a queue's settings (jobspec/queues.QueueSettings or anything with its attribute names)."""
        skips = getattr(settings, "max_skips", None)
        return cls(policy=str(getattr(settings, "policy", None) or "best-effort"),
                   max_skips=3 if skips is None else int(skips),
                   max_running=getattr(settings, "max_running", None),
                   max_running_per_user=getattr(settings, "max_running_per_user", None))


@dataclass
class Decision:
    admit: str | None = None
    skipped: list[str] = field(default_factory=list)  # passed over by the admitted run: their skips count up
    reasons: dict[str, str] = field(default_factory=dict)  # run id -> why it waits (without its position)
    judged: bool = False  # False: nothing was weighed (held, waiting for a placement, max_running)
    short: str | None = None  # the first run in order that waits for resources alone (an autoscaler may add them)


def place(shape: Shape, free: Sequence[Node]) -> list[Node] | None:
    """The nodes' free resources after placing ``shape`` first-fit (None: it does not fit)."""
    nodes = [dict(n) for n in free]

    def take(bundle: Node) -> bool:
        for node in nodes:
            if all(node.get(k, 0.0) + EPS >= v for k, v in bundle.items() if v):
                for k, v in bundle.items():
                    node[k] = node.get(k, 0.0) - v
                return True
        return False

    if shape.entrypoint and not take(shape.entrypoint):
        return None
    for _ in range(shape.workers):
        if not take(shape.per_worker):
            return None
    if sum(n.get("CPU", 0.0) for n in nodes) + EPS < shape.data_cpus:
        return None
    return nodes


def fits(shape: Shape, free: Sequence[Node]) -> bool:
    return place(shape, free) is not None


def free_line(shape: Shape, free: Sequence[Node]) -> str:
    """The free amounts of what ``shape`` asks for, summed over the nodes: '1 GPU, 6 CPU'."""
    keys = sorted({*shape.per_worker, *shape.entrypoint} - {"memory"}) or ["CPU"]
    return ", ".join(f"{sum(n.get(k, 0.0) for n in free):g} {k}" for k in keys)


def nodes_line(nodes: Sequence[Node]) -> str:
    """'1 node of 1 CPU, 2 nodes of 2 CPU + 1 GPU': the nodes' CPUs and GPUs, alike ones counted together."""
    kinds: dict[str, int] = {}
    for node in nodes:
        what = " + ".join(f"{node[k]:g} {k}" for k in ("CPU", "GPU") if node.get(k)) or "no CPU"
        kinds[what] = kinds.get(what, 0) + 1
    return ", ".join(f"{n} node{'s' if n > 1 else ''} of {what}" for what, n in kinds.items())


def decide(queued: Sequence[Entry], admitted: Sequence[Entry], free: Sequence[Node], limits: Limits,
           total: Sequence[Node] | None = None, held: bool = False, waiting_for: str | None = None) -> Decision:
    """Whom to admit now from ``queued`` (in the queue's order), with ``admitted`` counting against the caps and
    ``free`` the nodes' free resources (admitted but unplaced runs' declared shapes already taken out)."""
    out = Decision()
    if held or waiting_for or (limits.max_running is not None and len(admitted) >= limits.max_running):
        why = ("the queue is held" if held else f"waiting for {waiting_for} to be placed" if waiting_for
               else f"{len(admitted)} running (max_running {limits.max_running})")
        out.reasons = {e.run_id: why for e in queued}
        return out
    out.judged = True
    per_user: dict[str, int] = {}
    for e in admitted:
        per_user[e.user] = per_user.get(e.user, 0) + 1
    passed: list[Entry] = []  # waiting runs an admission here would skip
    blocker: Entry | None = None
    for entry in queued:
        if blocker is not None:
            out.reasons[entry.run_id] = _behind(blocker, limits)
            continue
        cap = limits.max_running_per_user
        if cap is not None and per_user.get(entry.user, 0) >= cap:
            out.reasons[entry.run_id] = f"{entry.user} has {per_user[entry.user]} running (max_running_per_user {cap})"
            continue
        if total is not None and not fits(entry.shape, total):
            out.reasons[entry.run_id] = f"can never fit this cluster: needs {entry.shape.describe()}"
            continue
        if fits(entry.shape, free):
            out.admit = entry.run_id
            out.skipped = [e.run_id for e in passed]
            for e in queued:
                if e.run_id not in out.reasons and e.run_id != entry.run_id:
                    out.reasons[e.run_id] = f"behind {entry.run_id}, admitted"
            return out
        out.reasons[entry.run_id] = f"needs {entry.shape.describe()}; {free_line(entry.shape, free)} free"
        out.short = out.short or entry.run_id
        if limits.policy == "strict" or entry.skips >= limits.max_skips:
            blocker = entry
        else:
            passed.append(entry)
    return out


def _behind(blocker: Entry, limits: Limits) -> str:
    if limits.policy == "strict":
        return f"behind {blocker.run_id} (strict order), priority {blocker.priority}"
    return f"behind {blocker.run_id}, skipped {blocker.skips} times (max_skips {limits.max_skips}), priority {blocker.priority}"


def positioned(queue: str, queued: Sequence[Entry], reasons: dict[str, str]) -> dict[str, str]:
    """Each queued run's one line: 'position 2 of 5 in team: needs 2 × 1 GPU; 1 GPU free; behind priority 10'."""
    out: dict[str, str] = {}
    n = len(queued)
    for i, entry in enumerate(queued, start=1):
        why = reasons.get(entry.run_id) or "next"
        ahead = max((e.priority for e in queued[: i - 1]), default=None)
        tail = f"; behind priority {ahead}" if ahead is not None and ahead > entry.priority else ""
        out[entry.run_id] = f"position {i} of {n} in {queue}: {why}{tail}"
    return out
