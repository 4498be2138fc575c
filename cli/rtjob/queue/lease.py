"""The keeper's lease (``lease.json``): who keeps the queue and its heartbeat. Taken if absent (``If-None-Match``)
or expired (``If-Match`` on the expired version), renewed with ``If-Match`` on its own last version; a keeper whose
renewal loses has been replaced and stops. Clients read it to tell whether a keeper is alive (``alive``).

Importable on the cluster: the stdlib and rtjob's storage objects."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

from ..storage.objects import Objects, PreconditionFailed
from .format import LEASE, dumps, loads, now

TTL_S = 30.0  # a keeper not heard of for this long is dead: the next keeper takes over
BEAT_S = 5.0  # how often a keeper renews


@dataclass(frozen=True)
class Lease:
    holder: str
    beat: float
    ttl: float
    etag: str = ""

    def alive(self, at: float | None = None) -> bool:
        return (now() if at is None else at) < self.beat + self.ttl


def read(objects: Objects) -> Lease | None:
    found = objects.get(LEASE, 1 << 16)
    if found is None:
        return None
    data = loads(found.data, LEASE)
    return Lease(str(data.get("holder") or ""), float(data.get("beat") or 0.0), float(data.get("ttl") or TTL_S),
                 found.etag)


def take(objects: Objects, holder: str, ttl: float = TTL_S) -> Lease | None:
    """The lease for ``holder`` when it is free, expired or already its own; None while another holds it."""
    current = read(objects)
    if current is not None and current.alive() and current.holder != holder:
        return None
    body = dumps({"holder": holder, "beat": now(), "ttl": ttl})
    try:
        if current is None:
            etag = objects.put(LEASE, body, if_absent=True)
        else:
            etag = objects.put(LEASE, body, if_match=current.etag)
    except PreconditionFailed:
        return None  # another keeper took it first
    return Lease(holder, now(), ttl, etag)


def renew(objects: Objects, lease: Lease) -> Lease | None:
    """The renewed lease; None: another keeper replaced this one (stop keeping)."""
    body = dumps({"holder": lease.holder, "beat": now(), "ttl": lease.ttl})
    try:
        etag = objects.put(LEASE, body, if_match=lease.etag)
    except PreconditionFailed:
        return None
    return Lease(lease.holder, now(), lease.ttl, etag)


def give_up(objects: Objects, lease: Lease) -> None:
    """End the lease early (a keeper that stops on purpose): the next one need not wait out the TTL."""
    with contextlib.suppress(PreconditionFailed):
        objects.put(LEASE, dumps({"holder": lease.holder, "beat": 0.0, "ttl": 0.0}), if_match=lease.etag)
