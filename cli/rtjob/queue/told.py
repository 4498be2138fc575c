"""What a queue's keeper tells: its log line (Ray's log of the keeper's job) and a run's record at its admission or
cancel (the kernel's transitions, written where the run's storage is)."""

from __future__ import annotations

from typing import Any


def say(line: str) -> None:
    print(f"[rtjob keeper] {line}", flush=True)


def record_in_run(run_id: str, what: str, body: dict[str, Any]) -> None:
    """The run's record transition (the kernel's ``Admitted`` / ``Cancelled``, core/lifecycle/queued.py), where its
    storage is known; a cancel's ``body["why"]`` joins its line."""
    import rtjob_contract as contract

    env = (body.get("runtime_env") or {}).get("env_vars") or {}
    run_uri = env.get(contract.ENV_RUN_URI)
    if not run_uri:
        return
    from ..core.lifecycle import Admitted, Cancelled, write
    from ..storage.run_ports import run_ports

    queue = ((body.get("metadata") or {}).get(contract.META_QUEUE)) or "its queue"
    why = f"cancelled while queued in {queue}: it never reached the cluster"
    if body.get("why"):
        why += f" ({body['why']})"
    try:  # the kernel's transitions; an illegal one (ended while queued) is said, not written; no record: none
        write(run_ports(run_uri), Admitted() if what == "admitted" else Cancelled(why))
    except Exception as exc:  # noqa: BLE001 - the queue goes on; the run's record is its own
        say(f"{run_id}: could not record {what}: {exc}")
