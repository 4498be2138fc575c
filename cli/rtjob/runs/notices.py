"""A run's notifications as its folder records them (notify/markers.py), for `rtjob status`, `rtjob show`
and `rtjob notify RUN_ID`, which resends from this machine the messages a target did not get (the run's notify
config from its recorded request, each target's URL from the variable it names in this environment)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import rtjob_contract as contract

from ..core import clock
from ..core.errors import BadInput, RtjobError
from .places import writable_here

if TYPE_CHECKING:
    from ..core.record import RunRecord
    from ..notify import NotifyConfig
    from .events import RunEvents

LOCK_WAIT_S = 300.0  # a resend of a few messages, each at most 20 s a target


def notices(record: RunRecord) -> dict[str, dict[str, Any]] | None:
    """Each claimed outcome's state (notify.notices_in); None: the run's folder cannot be read from here."""
    if not record.storage_uri or not writable_here(record.backend, record.storage_uri):
        return None
    from ..notify import notices_in
    from ..storage.opening import objects_for

    try:
        with objects_for(record.storage_uri, record.storage_endpoint) as objects:
            return notices_in(objects)
    except RtjobError:
        return None


def undelivered_lines(found: dict[str, dict[str, Any]] | None, run_id: str) -> list[str]:
    """One line per message a target did not get, naming the command that resends it."""
    lines = []
    for outcome, state in sorted((found or {}).items()):
        if state.get("delivered") is False:
            why = "; ".join(f"{u.get('target')}: {u.get('error')}" for u in state.get("undelivered") or [])
            lines.append(f"{outcome}: not delivered ({why}); rtjob notify {run_id} resends it")
    return lines


@dataclass
class Resent:
    outcome: str
    sent: list[str]
    failed: list[dict[str, str]]
    elsewhere: bool = False  # another `rtjob notify` holds it: it resends it, this one sent nothing

    def to_json(self) -> dict[str, Any]:
        return {"outcome": self.outcome, "delivered": self.sent, "undelivered": self.failed,
                "resent_elsewhere": self.elsewhere}


def resend(record: RunRecord, force: bool, events: RunEvents) -> list[Resent]:
    """Each message of the run a target did not get, sent again from this machine to those targets, once (its
    marker then says delivered); ``force``: a delivered one too, to every target. Two resends at once send each
    message once: on this machine the second waits for the first (a file lock), from any machine each message's
    claim marker is held while it is resent (notify.held_for_resend) and its state is read again under it."""
    from ..notify import config_from_env, notices_in
    from ..storage.opening import objects_for
    from .lifecycle.retry_notice import recorded_env_value

    if not record.storage_uri or not writable_here(record.backend, record.storage_uri):
        raise BadInput(f"run {record.id}: its notifications are recorded in its storage, which is not readable from "
                       f"here ({record.storage_uri or 'the run has none'})")
    raw = recorded_env_value(record.request, contract.ENV_NOTIFY)
    try:
        config = config_from_env({**os.environ, contract.ENV_NOTIFY: raw}) if raw else None
    except ValueError as exc:
        raise BadInput(f"run {record.id}: {exc}") from None
    if config is None:
        raise BadInput(f"run {record.id} has no notify: in its job (nothing to send)")
    done: list[Resent] = []
    with _one_resender_here(record.id, events), objects_for(record.storage_uri, record.storage_endpoint) as objects:
        for outcome in sorted(notices_in(objects)):
            one = _resend_one(objects, outcome, config, force, events)
            if one is not None:
                done.append(one)
    return done


def _resend_one(objects: Any, outcome: str, config: NotifyConfig, force: bool, events: RunEvents) -> Resent | None:
    from ..notify import deliver, held_for_resend, message_from, notice_in, settle_in

    with held_for_resend(objects, outcome) as held:
        state = notice_in(objects, outcome) if held else None  # read under the hold: not what a resend just sent
        if not held or state is None:
            return Resent(outcome, [], [], elsewhere=True)
        if state.get("message") is None or (state.get("delivered") is not False and not force):
            if state.get("delivered") is None:
                events.warning(f"{outcome}: claimed, but no answer of its targets is recorded yet (its sender may "
                               "still be trying)")
            return None
        message = message_from(state["message"])
        wanted = {u.get("target") for u in state.get("undelivered") or []}
        targets = tuple(t for t in config.targets if force or t.label in wanted)
        sent, failed = deliver(targets, message, say=events.warning)
        earlier = [label for label in state.get("delivered_to") or [] if label not in sent]
        settle_in(objects, message, earlier + sent, failed, clock.now_iso("seconds"))
        return Resent(outcome, sent, failed)


@contextmanager
def _one_resender_here(run_id: str, events: RunEvents) -> Iterator[None]:
    """One `rtjob notify` of a run at a time on this machine: a second waits for the first, then finds what it
    delivered (the claim marker's hold covers other machines; a store whose conditional writes are not atomic,
    such as moto's, only through this)."""
    from filelock import FileLock, Timeout

    from ..jobspec.project import rtjob_home

    folder = rtjob_home() / "locks"
    folder.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(folder / f"notify-{run_id}.lock"), mode=0o600)
    try:
        lock.acquire(timeout=0)
    except Timeout:
        events.warning(f"another rtjob notify {run_id} is running here; waiting for it")
        try:
            lock.acquire(timeout=LOCK_WAIT_S)
        except Timeout:
            events.warning(f"{lock.lock_file} is still held after {LOCK_WAIT_S:.0f}s; going on (the claim markers "
                           "still let one resend send each message)")
            yield
            return
    try:
        yield
    finally:
        lock.release()
