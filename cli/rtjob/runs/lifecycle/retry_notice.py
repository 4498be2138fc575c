"""`notify: on: [retrying]`: whoever submits a retry tells it (after its ``retrying`` record write), once per retry (its ``rtjob-notifying-retrying-N``
marker in the run's folder). The targets' variables are read from this process's environment, the run's notify
config (without URLs) from its recorded request, where the submitting client put it (RTJOB_NOTIFY)."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import rtjob_contract as contract

from ...core.clock import now_iso

if TYPE_CHECKING:
    from ...backends.base import Retry
    from ...core.record import RunRecord
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


def retry_teller(run_id: str, decision: Retry, events: RunEvents) -> Callable[[RunRecord], None]:
    """The kernel writer call's ``tell`` for a retry this client submitted (``decision``): the run's notify targets
    told, from the record as written (a no-op without `retrying` in `on`)."""

    def tell(record: RunRecord) -> None:
        if decision.next_run is not None and record.storage_uri:
            _tell_retrying(record, run_id, decision, events)

    return tell


def _tell_retrying(record: RunRecord, run_id: str, decision: Retry, events: RunEvents) -> None:
    from ...notify import Message, claim_in, config_from_env, send, settle_in

    assert decision.next_run is not None
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

    def claim(outcome: str) -> bool:
        with objects_for(record.storage_uri or "", record.storage_endpoint) as objects:
            return claim_in(objects, outcome, now_iso("seconds"))

    def settle(told: Message, sent: list[str], failed: list[dict[str, str]]) -> None:
        with objects_for(record.storage_uri or "", record.storage_endpoint) as objects:
            settle_in(objects, told, sent, failed, now_iso("seconds"))

    attempt = decision.attempt + 1
    message = Message(job=record.job, run_id=run_id, outcome=f"retrying-{attempt}", duration_s=None, cost_usd=None,
                      error=f"attempt {decision.attempt} {decision.reason}; attempt {attempt} is "
                            f"{decision.next_run.id}")
    send(config, message, claim, say=events.warning, settle=settle)
