"""Reading the checkpoint layout a run writes (defined in ``rtjob_contract``): which files belong to which
checkpoint, which is the newest or the best, and where the metrics history is."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import rtjob_contract as contract
from rtjob_contract import CHECKPOINT_PREFIX, METRICS_FILE

from ..core.errors import BadInput
from .stores import RemoteFile, Store

DEFAULT_METRIC = contract.METRIC_VAL_LOSS
# Metrics that are better when larger, for `best:METRIC` without an explicit min|max.
_MAX_WORDS = ("acc", "accuracy", "f1", "precision", "recall", "auc", "samples_per_s", "throughput", "score")


def natural_key(name: str) -> list[Any]:
    """checkpoint_epoch_0009 < checkpoint_epoch_0010; timestamps sort as text."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def checkpoint_of(rel: str) -> str | None:
    """The checkpoint folder a file belongs to (its first segment, if that is ``checkpoint_*``)."""
    head, sep, _ = rel.partition("/")
    return head if sep and head.startswith(CHECKPOINT_PREFIX) else None


def default_mode(metric: str) -> str:
    return "max" if any(word in metric.lower() for word in _MAX_WORDS) else "min"


@dataclass(frozen=True)
class CheckpointChoice:
    kind: str  # latest | best | all
    metric: str = DEFAULT_METRIC
    mode: str = "min"

    def text(self) -> str:
        return f"best:{self.metric}:{self.mode}" if self.kind == "best" else self.kind


def parse_checkpoint_choice(text: str) -> CheckpointChoice:
    parts = text.strip().split(":")
    kind = parts[0].lower()
    if kind in ("latest", "all") and len(parts) == 1:
        return CheckpointChoice(kind)
    if kind == "best" and len(parts) <= 3:
        metric = parts[1] if len(parts) > 1 and parts[1] else DEFAULT_METRIC
        mode = parts[2].lower() if len(parts) > 2 else default_mode(metric)
        if mode not in ("min", "max"):
            raise BadInput(f"--checkpoint {text}: the mode must be min or max, not {mode!r}")
        return CheckpointChoice("best", metric, mode)
    raise BadInput(f"--checkpoint {text!r}: expected latest, all or best[:METRIC[:min|max]] (e.g. best:val_loss:min)")


def last_metrics(data: Any) -> dict[str, Any] | None:
    """A checkpoint's own metrics from its metrics.json: the last entry of the history (or the object)."""
    if isinstance(data, list) and data and isinstance(data[-1], dict):
        return data[-1]
    if isinstance(data, dict):
        return data
    return None


def read_json_files(store: Store, items: Iterable[RemoteFile]) -> dict[str, Any]:
    """Small JSON files read concurrently: rel → parsed value (unreadable or invalid ones are left out)."""
    import json
    from concurrent.futures import ThreadPoolExecutor

    items = list(items)
    out: dict[str, Any] = {}
    lock = threading.Lock()

    def one(item: RemoteFile) -> None:
        try:
            value = json.loads(store.read(item))
        except (ValueError, UnicodeDecodeError):
            return
        with lock:
            out[item.rel] = value

    if items:
        with ThreadPoolExecutor(min(8, len(items)), thread_name_prefix="rtjob-read") as pool:
            for future in [pool.submit(one, item) for item in items]:
                future.result()
    return out


def find_history(files: Iterable[RemoteFile]) -> RemoteFile | None:
    """The file holding a run's whole metrics history: a run-level metrics.json, else the newest checkpoint's."""
    by_ckpt: dict[str, RemoteFile] = {}
    for item in files:
        if item.rel == METRICS_FILE:
            return item
        ckpt = checkpoint_of(item.rel)
        if ckpt and item.rel == f"{ckpt}/{METRICS_FILE}":
            by_ckpt[ckpt] = item
    if not by_ckpt:
        return None
    return by_ckpt[max(by_ckpt, key=natural_key)]
