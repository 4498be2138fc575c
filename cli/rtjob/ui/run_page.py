"""One run's page as plain data: the run as `rtjob status` tells it (runs/view.recorded: look's read-only variant),
its steps, checkpoints, metrics, samples and live rows, each card saying in one line why it could not be read.
Reads only: nothing here asks a cluster or writes a run's storage. Unredacted: the routes pass it through the
redaction boundary (safety.py)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ..core.errors import BadInput, RtjobError, StorageError, one_line
from ..core.record import RunRecord
from ..runs.view import RunView


@dataclass
class Card:
    """One part of a run's page: its data, or the one line that says why it could not be read."""

    data: Any = None
    error: str | None = None


def card_of(call: Any) -> Card:
    """``call()``'s data, or the one line that says why it could not be read; a storage fault is raised (the page
    answers 503 while the storage cannot be read: site.failed)."""
    try:
        return Card(call())
    except StorageError:
        raise
    except RtjobError as exc:
        return Card(error=one_line(exc))
    except (OSError, ValueError) as exc:
        return Card(error=f"could not be read: {one_line(exc)}")


def find_run(run_id: str, storage: str | None, endpoint: str | None) -> RunView | None:
    """The run as `rtjob status` and `rtjob show` tell it, from its records (runs/view.recorded: look's read-only
    variant: a retried run one story, a pipeline from its record; nothing asked of a cluster, nothing written)."""
    from ..runs.view import recorded

    if not run_id or run_id in (".", "..") or any(c in run_id for c in "/\\\x00") or len(run_id) > 256:
        return None  # a run id is one path segment: none leads out of the storage's run folders
    return recorded(run_id, storage, endpoint)


@dataclass
class RunCards:
    """What the run page shows beside its status: its steps (a pipeline's, each as its own run's story) and the
    cards read from its storage."""

    steps: list[dict[str, Any]]
    checkpoints: Card
    metrics: Card
    samples: Card


def run_cards(record: RunRecord, storage: str | None, endpoint: str | None) -> RunCards:
    steps = []
    for step in record.steps:
        status = "PENDING"
        run_id = step.get("run_id")
        if run_id:
            try:
                found = find_run(str(run_id), storage, endpoint)
                status = found.info.status.value if found is not None else "PENDING"
            except StorageError:
                raise  # never UNKNOWN for a step whose storage is down: the page says so (503)
            except RtjobError:
                status = "UNKNOWN"
        steps.append({**step, "status": "REUSED" if step.get("reused_from") else status})
    return RunCards(steps, card_of(lambda: _checkpoints(record)), card_of(lambda: metrics_of(record)),
                    card_of(lambda: samples_of(record)))


def _readable(record: RunRecord) -> bool:
    from ..runs.places import writable_here

    return bool(record.storage_uri) and writable_here(record.backend, record.storage_uri)


def _checkpoints(record: RunRecord) -> list[dict[str, Any]]:
    from ..storage.records import checkpoints

    if not _readable(record):
        return []
    assert record.storage_uri is not None
    return checkpoints(record.storage_uri, record.storage_endpoint)


def metrics_of(record: RunRecord) -> list[dict[str, Any]]:
    """The run's metrics history (one row per epoch); [] when its storage holds none or cannot be read here."""
    from ..storage.layout import NothingStored
    from ..storage.location import parse_location
    from ..storage.results import NoHistory, history_from_location

    if not _readable(record):
        return []
    assert record.storage_uri is not None
    try:
        rows, _where = history_from_location(parse_location(record.storage_uri), record.storage_endpoint)
    except (NoHistory, NothingStored):
        return []
    except BadInput as exc:
        if "no such folder" in exc.message:
            return []
        raise
    return rows


def series(rows: list[dict[str, Any]]) -> dict[str, list[float | None]]:
    """The charted metrics: epoch plus every key holding a number in some row (train/val loss, accuracy, samples/s)."""
    from ..storage.results import number

    keys: list[str] = []
    for row in rows:
        for key, value in row.items():
            if key not in keys and number(value) is not None:
                keys.append(key)
    out: dict[str, list[float | None]] = {}
    epochs = [number(row.get("epoch")) for row in rows]
    out["epoch"] = [e if e is not None else float(i + 1) for i, e in enumerate(epochs)]
    for key in keys:
        if key != "epoch":
            out[key] = [number(row.get(key)) for row in rows]
    return out


SAMPLES = "samples"
AUDIO_SUFFIXES = (".wav", ".mp3", ".ogg", ".flac")
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".gif", ".webp")
MEDIA_TYPES = {".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".gif": "image/gif",
               ".webp": "image/webp", ".wav": "audio/wav", ".mp3": "audio/mpeg", ".ogg": "audio/ogg",
               ".flac": "audio/flac"}


MAX_SAMPLES = 200


def samples_of(record: RunRecord) -> list[dict[str, Any]]:
    """The run's samples (``samples/`` in its folder): name, kind (image, audio, other) and size."""
    from ..storage.opening import objects_for
    from ..storage.stores import is_bookkeeping

    if not _readable(record):
        return []
    assert record.storage_uri is not None
    with objects_for(record.storage_uri, record.storage_endpoint) as objects:
        listed = objects.list(SAMPLES)
    out = []
    for item in listed[:MAX_SAMPLES]:
        name = item.rel[len(SAMPLES) + 1:]
        if is_bookkeeping(name.rsplit("/", 1)[-1]):
            continue
        suffix = "." + name.rsplit(".", 1)[-1].lower() if "." in name else ""
        kind = "image" if suffix in IMAGE_SUFFIXES else "audio" if suffix in AUDIO_SUFFIXES else "other"
        out.append({"name": name, "kind": kind, "size": item.size})
    return out


def sample_stream(record: RunRecord, name: str) -> tuple[str, Iterator[bytes]]:
    """A sample's media type and bytes, streamed. ``name`` is checked never to leave the run's samples folder."""
    from ..storage.objects import check_key
    from ..storage.opening import objects_for

    if not _readable(record):
        raise BadInput(f"run {record.id}: its storage cannot be read from here")
    rel = check_key(f"{SAMPLES}/{name}")
    suffix = "." + name.rsplit(".", 1)[-1].lower() if "." in name else ""
    assert record.storage_uri is not None
    objects = objects_for(record.storage_uri, record.storage_endpoint)
    if objects.head(rel) is None:
        objects.close()
        raise BadInput(f"run {record.id}: no sample {name!r}")

    def chunks() -> Iterator[bytes]:
        try:
            yield from objects.stream(rel)
        finally:
            objects.close()

    return MEDIA_TYPES.get(suffix, "application/octet-stream"), chunks()


MAX_LIVE_BYTES = 64 * 1024 * 1024


def live_rows(record: RunRecord, name: str, skip: int = 0) -> tuple[list[dict[str, Any]], int]:
    """The run's JSON-lines rows ``name`` (STEP_METRICS_FILE or SYSTEM_METRICS_FILE) after the first ``skip``
    complete lines, and the count of complete lines now. A line still being written (no newline yet) and a line
    that is not a JSON object are left out; absent or unreadable here: ([], 0)."""
    from ..storage.opening import objects_for

    if not _readable(record):
        return [], 0
    assert record.storage_uri is not None
    with objects_for(record.storage_uri, record.storage_endpoint) as objects:
        got = objects.get(name, MAX_LIVE_BYTES)
    if got is None:
        return [], 0
    lines = got.data.split(b"\n")[:-1]  # the last piece has no newline yet: a row still being appended
    rows = []
    for line in lines[skip:]:
        try:
            row = json.loads(line)
        except (ValueError, UnicodeDecodeError):
            continue
        if isinstance(row, dict):
            rows.append(row)
    return rows, len(lines)


def live_summary(view: RunView, steps: list[dict[str, Any]], epochs: list[dict[str, Any]]) -> dict[str, Any]:
    """What the run page's live header shows: the run's story (status, message, exit code, times: as `rtjob status`
    tells them), the attempt, the last step or epoch and its time."""
    info, record = view.info, view.record
    assert record is not None
    last_step = steps[-1] if steps else None
    last_epoch = epochs[-1] if epochs else None
    attempt = record.attempts[-1] if record.attempts else None
    return {
        "id": record.id, "status": info.status.value, "ended": info.status.terminal, "message": info.message,
        "exit_code": info.exit_code, "start_time": info.start_time, "end_time": info.end_time,
        "last_seen": record.last_seen, "outputs": record.outputs,
        "attempt": (attempt.get("attempt") or len(record.attempts)) if attempt else None,
        "attempts": len(record.attempts),
        "step": last_step.get("step") if last_step else None,
        "step_time": last_step.get("time") if last_step else None,
        "epoch": (last_step or {}).get("epoch", last_epoch.get("epoch") if last_epoch else None),
    }
