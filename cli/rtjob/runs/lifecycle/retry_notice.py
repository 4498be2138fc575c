"""`notify: on: [retrying]`: whoever submits a retry tells it, once per retry (its ``rtjob-notifying-retrying-N``
marker in the run's folder). The targets' variables are read from this process's environment, the run's notify
config (without URLs) from its recorded request, where the submitting client put it (RTJOB_NOTIFY)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import rtjob_contract as contract

from ...core.errors import RtjobError

if TYPE_CHECKING:
    from ...backends.base import Retry
    from ..events import RunEvents


def recorded_env_value(data: Any, name: str) -> str | None:
    """``name``'s value anywhere in a recorded request (every backend's env mapping holds it by that key)."""
    if isinstance(data, dict):
        if isinstance(data.get(name), str):
            return str(data[name])
        for value in data.values():
            found = recorded_env_value(value, name)
            if found is not None:
                return found
    elif isinstance(data, list):
        for value in data:
            found = recorded_env_value(value, name)
            if found is not None:
                return found
    return None


def notify_retrying(run_id: str, decision: Retry, events: RunEvents) -> None:
    """Tell the run's notify targets that ``decision`` submitted a retry (a no-op without `retrying` in `on`)."""
    from ..memory import find
    from ..notify import Message, config_from_env, send
    from ..places import writable_here

    try:
        record = find(run_id)
    except RtjobError:
        return
    if record is None or decision.next_run is None or not writable_here(record.backend, record.storage_uri):
        return
    notify = recorded_env_value(record.request, contract.ENV_NOTIFY)
    if notify is None:
        return
    try:
        config = config_from_env({**os.environ, contract.ENV_NOTIFY: notify})
    except ValueError:
        return
    if config is None:
        return
    from ...storage.opening import objects_for
    from ..notify import claim_in, settle_in
    from ..records import now

    def claim(outcome: str) -> bool:
        with objects_for(record.storage_uri or "", record.storage_endpoint) as objects:
            return claim_in(objects, outcome, now())

    def settle(told: Message, sent: list[str], failed: list[dict[str, str]]) -> None:
        with objects_for(record.storage_uri or "", record.storage_endpoint) as objects:
            settle_in(objects, told, sent, failed, now())

    attempt = decision.attempt + 1
    message = Message(job=record.job, run_id=run_id, outcome=f"retrying-{attempt}", duration_s=None, cost_usd=None,
                      error=f"attempt {decision.attempt} {decision.reason}; attempt {attempt} is "
                            f"{decision.next_run.id}")
    send(config, message, claim, say=events.warning, settle=settle)
