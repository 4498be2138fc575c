"""A notification's markers in the run's folder (``objects``: storage.objects.Objects): who sends each outcome's
message (the claim marker, created if absent), what became of it (notified or undelivered, after the tries), read
back for `rtjob status`, `show` and `rtjob notify`.

Stdlib and ``rtjob_contract`` at module level: the run side claims and settles (tests/unit/test_cluster_side_imports.py)."""

from __future__ import annotations

import contextlib
import json
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import rtjob_contract as contract

from ..core import clock
from .message import Message

RESEND_STALE_S = 600.0  # a resend's hold older than this is a resender that died (its tries take 20 s a target)


def claim_in(objects: Any, outcome: str, stamp: str) -> bool:
    """Claim ``outcome``'s notification in a run's folder (``objects``: storage.objects.Objects): True for the one
    process that creates its claim marker first."""
    from ..storage.objects import PreconditionFailed  # the run side's storage: importable on the cluster

    try:
        objects.put(contract.notify_claim_marker(outcome), stamp.encode(), if_absent=True)
        return True
    except PreconditionFailed:
        return False


def settle_in(objects: Any, message: Message, sent: list[str], failed: list[dict[str, str]], stamp: str) -> None:
    """What became of ``message``, in the run's folder: ``notified_marker`` once every target got it (an earlier
    ``undelivered_marker`` removed), else ``undelivered_marker`` with each target's error (and the message, which
    `rtjob notify` resends)."""
    data = {"at": stamp, "message": message.to_json(), "delivered": sent, "undelivered": failed}
    body = json.dumps(data, indent=2).encode()
    if failed:
        objects.put(contract.undelivered_marker(message.outcome), body)
        return
    objects.put(contract.notified_marker(message.outcome), body)
    if objects.head(contract.undelivered_marker(message.outcome)) is not None:
        objects.delete(contract.undelivered_marker(message.outcome))


def notice_in(objects: Any, outcome: str) -> dict[str, Any] | None:
    """``outcome``'s notification as its markers say: {"delivered": bool | None (None: claimed, no answer recorded
    yet), "at", "message", "delivered_to", "undelivered"}; None when nobody claimed it."""
    if objects.head(contract.notify_claim_marker(outcome)) is None:
        return None
    entry: dict[str, Any] = {"delivered": None}
    for marker, state in ((contract.notified_marker(outcome), True), (contract.undelivered_marker(outcome), False)):
        got = objects.get(marker, 1 << 20)
        if got is None:
            continue
        try:
            data = json.loads(got.data)
        except ValueError:
            data = {}
        entry.update({"delivered": state, "at": data.get("at"), "message": data.get("message"),
                      "delivered_to": data.get("delivered") or [], "undelivered": data.get("undelivered") or []})
        break  # delivered (by a resend) stands over an earlier failure
    return entry


def notices_in(objects: Any) -> dict[str, dict[str, Any]]:
    """Each claimed outcome of a run (``notice_in``), by outcome. Read by name (an end's outcomes, then retrying-2,
    -3, ... while claimed): a run's folder may hold many files, never listed for this."""
    out: dict[str, dict[str, Any]] = {}

    def read(outcome: str) -> bool:
        found = notice_in(objects, outcome)
        if found is not None:
            out[outcome] = found
        return found is not None

    for outcome in contract.NOTIFY_OUTCOMES:
        if outcome != "retrying":
            read(outcome)
    attempt = 2
    while attempt <= 101 and read(f"retrying-{attempt}"):
        attempt += 1
    return out


@contextmanager
def held_for_resend(objects: Any, outcome: str) -> Iterator[bool]:
    """Hold ``outcome``'s claim marker while `rtjob notify` resends its message: the marker is replaced only in
    the version read (a conditional write, as the first claim was a conditional create), so of two resends at
    once, on any machines, one holds it. Yields False when another resend holds it (for less than
    RESEND_STALE_S: one that died is taken over) or nobody claimed the outcome. The holder reads the message's
    state after taking the hold: what a resend before it delivered is not sent again."""
    from ..storage.objects import PreconditionFailed

    rel = contract.notify_claim_marker(outcome)
    got = objects.get(rel, 1 << 16)
    if got is None:
        yield False
        return
    body = _claim_body(got.data)
    since = body.get("resending_since")
    if isinstance(since, str) and _age_s(since) < RESEND_STALE_S:
        yield False
        return
    body.update(resending_since=clock.now_iso(), by=f"{socket.gethostname()} pid {os.getpid()}")
    try:
        etag = objects.put(rel, json.dumps(body).encode(), if_match=got.etag)
    except PreconditionFailed:  # another resend took it between the read and the write
        yield False
        return
    try:
        yield True
    finally:
        body.pop("by")
        body["resent_at"] = body.pop("resending_since")
        with contextlib.suppress(PreconditionFailed):  # taken over (this one outlived RESEND_STALE_S): theirs now
            objects.put(rel, json.dumps(body).encode(), if_match=etag)


def _claim_body(data: bytes) -> dict[str, Any]:
    """The claim marker's content: the run side writes the claim's time alone, a resend a JSON object."""
    text = data.decode(errors="replace").strip()
    try:
        found = json.loads(text)
    except ValueError:
        found = None
    return found if isinstance(found, dict) else {"claimed_at": text}


def _age_s(when: str) -> float:
    try:
        return (clock.now() - clock.parse(when)).total_seconds()
    except ValueError:
        return RESEND_STALE_S  # unreadable: as if stale
