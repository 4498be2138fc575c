"""Ray Train's start-up phases in a run's timeline, for an unchanged Ray Train script: the companion names rtjob's
Train callback (train_callback.py) in the entrypoint's RAY_TRAIN_CALLBACKS, appended to one the user set, when
the job's Ray has the interface; the callback prints each phase as an event line carrying its own time.

The check reads Ray's files instead of importing them: importing ray.train costs the companion a second of CPU on
the driver's node before the script can start. Where the check fails nothing is set, so no phase is stamped and
nothing else changes (a Ray that could not import the callback would fail the user's training)."""

from __future__ import annotations

import importlib.util
import json
import sys
from collections.abc import Mapping
from pathlib import Path

import rtjob_contract as contract

from ..core.clock import now_iso, parse

# The files and names rtjob's callback relies on (Ray-internal, checked on 2.60).
_NEEDS = {
    "train/v2/_internal/callbacks/env_callback.py": ("RAY_TRAIN_CALLBACKS_ENV_VAR",),
    "train/v2/_internal/constants.py": (f'"{contract.ENV_TRAIN_CALLBACKS}"',),
    "train/v2/_internal/execution/callback.py": (
        "class ControllerCallback(", "def after_controller_start(", "class WorkerGroupCallback(",
        "def before_init_train_context(", "def after_worker_group_training_start(", "class ReportCallback(",
        "def after_report(", "class WorkerCallback(", "def after_init_train_context("),
}


def ray_has_the_interface(ray_dir: Path | None = None) -> bool:
    """Whether the job's Ray reads RAY_TRAIN_CALLBACKS and has every hook the callback uses."""
    if ray_dir is None:
        spec = importlib.util.find_spec("ray")  # finds, never imports, a top-level package
        if spec is None or not spec.submodule_search_locations:
            return False
        ray_dir = Path(next(iter(spec.submodule_search_locations)))
    for rel, names in _NEEDS.items():
        try:
            text = (ray_dir / rel).read_text(encoding="utf-8")
        except OSError:
            return False
        if not all(name in text for name in names):
            return False
    return True


def callbacks_env(env: Mapping[str, str], ray_dir: Path | None = None) -> dict[str, str]:
    """RAY_TRAIN_CALLBACKS for the entrypoint: the user's, with rtjob's appended; {} when Ray lacks the interface."""
    if not ray_has_the_interface(ray_dir):
        return {}
    named = [part.strip() for part in env.get(contract.ENV_TRAIN_CALLBACKS, "").split(",") if part.strip()]
    if contract.TRAIN_CALLBACK not in named:
        named.append(contract.TRAIN_CALLBACK)
    return {contract.ENV_TRAIN_CALLBACKS: ",".join(named)}


def say(event: str) -> None:
    """``rtjob-event: EVENT {"at": NOW}``, straight to stdout (a Ray Train worker's print() goes to Ray's logger);
    Ray forwards an actor's stdout to the driver's log, where the companion reads it."""
    sys.stdout.write(f"{contract.EVENT_LINE_PREFIX} {event} {json.dumps({contract.EVENT_AT_KEY: now_iso()})}\n")
    sys.stdout.flush()


def event_times(chunk: bytes) -> list[tuple[str, str | None]]:
    """Each timeline event line in ``chunk`` (contract.TIMELINE_EVENTS) in order, with the time it carries (None: it
    carries none, or one that is not a time), wherever the line starts: Ray prefixes an actor's forwarded lines."""
    found: list[tuple[str, str | None]] = []
    mark = contract.EVENT_LINE_PREFIX.encode()
    for line in chunk.splitlines():
        at = line.find(mark)
        if at < 0:
            continue
        name, _, payload = line[at + len(mark):].decode("utf-8", "replace").strip().partition(" ")
        if name in contract.TIMELINE_EVENTS:
            found.append((name, _carried_time(payload)))
    return found


def _carried_time(payload: str) -> str | None:
    try:
        when = json.loads(payload).get(contract.EVENT_AT_KEY) if payload.startswith("{") else None
        return when if isinstance(when, str) and parse(when) else None
    except (ValueError, AttributeError, TypeError):
        return None
