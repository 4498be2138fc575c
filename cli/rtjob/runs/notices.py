"""A run's notifications as its folder records them (runs/notify.py's markers), for `rtjob status`, `rtjob show`
and `rtjob notify RUN_ID`, which resends from this machine the messages a target did not get (the run's notify
config from its recorded request, each target's URL from the variable it names in this environment)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import rtjob_contract as contract

from ..core.errors import BadInput, RtjobError
from .places import writable_here

if TYPE_CHECKING:
    from ..core.record import RunRecord
    from .events import RunEvents


def notices(record: RunRecord) -> dict[str, dict[str, Any]] | None:
    """Each claimed outcome's state (notify.notices_in); None: the run's folder cannot be read from here."""
    if not record.storage_uri or not writable_here(record.backend, record.storage_uri):
        return None
    from ..storage.opening import objects_for
    from .notify import notices_in

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

    def to_json(self) -> dict[str, Any]:
        return {"outcome": self.outcome, "delivered": self.sent, "undelivered": self.failed}


def resend(record: RunRecord, force: bool, events: RunEvents) -> list[Resent]:
    """Each message of the run a target did not get, sent again from this machine to those targets, once (its
    marker then says delivered); ``force``: a delivered one too, to every target."""
    from ..storage.opening import objects_for
    from .lifecycle.retry_notice import recorded_env_value
    from .notify import config_from_env, deliver, message_from, notices_in, settle_in
    from .records import now

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
    with objects_for(record.storage_uri, record.storage_endpoint) as objects:
        for outcome, state in sorted(notices_in(objects).items()):
            if state.get("message") is None or (state.get("delivered") is not False and not force):
                if state.get("delivered") is None:
                    events.warning(f"{outcome}: claimed, but no answer of its targets is recorded yet (its sender "
                                   "may still be trying)")
                continue
            message = message_from(state["message"])
            wanted = {u.get("target") for u in state.get("undelivered") or []}
            targets = tuple(t for t in config.targets if force or t.label in wanted)
            sent, failed = deliver(targets, message, say=events.warning)
            earlier = [label for label in state.get("delivered_to") or [] if label not in sent]
            settle_in(objects, message, earlier + sent, failed, now())
            done.append(Resent(outcome, sent, failed))
    return done
