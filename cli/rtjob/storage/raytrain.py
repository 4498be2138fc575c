"""Ray Train's own record of a run: the one place that knows its format.

A Ray Train (V2) run keeps ``checkpoint_manager_snapshot.json`` in its folder (``<storage_path>/<name>/``),
rewritten after every reported checkpoint: each retained checkpoint's folder name and the metrics reported
with it (``ray.train.report(metrics, checkpoint=...)``), and the order they were reported in
(``checkpoint_report_indices``; ``checkpoint_results`` is sorted by score when the script's CheckpointConfig
names one). Written by ``ray/train/v2/_internal/execution/checkpoint/checkpoint_manager.py`` (``_CheckpointManagerState``)
in Ray 2.60. rtjob reads it when a run has no rtjob ``metrics.json`` (a script that knows nothing of rtjob):
``rtjob results`` shows one row per checkpoint and ``pull --checkpoint best:METRIC`` chooses by it.
tests/support/raytrain_checkpoint_manager_snapshot.json is a real one.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from .layout import check_rows, parse_json, unreadable

SNAPSHOT_FILE = "checkpoint_manager_snapshot.json"
# The key that names each row's checkpoint folder in the rows rtjob builds from a snapshot.
CHECKPOINT_KEY = "checkpoint"


@dataclass(frozen=True)
class ReportedCheckpoint:
    name: str  # the checkpoint's folder in the run's folder
    metrics: dict[str, Any]  # as reported with it


def parse_snapshot(raw: bytes, where: str, numeric: Iterable[str] = ()) -> list[ReportedCheckpoint]:
    """Every retained checkpoint with its metrics, in the order they were reported; anything malformed is one
    line of bad input."""
    data = parse_json(raw, where)
    results = data.get("checkpoint_results") if isinstance(data, dict) else None
    if not isinstance(results, list):
        raise unreadable(where, "not a Ray Train checkpoint manager snapshot (no checkpoint_results list)")
    order = data.get("checkpoint_report_indices")
    if not (isinstance(order, list) and len(order) == len(results)
            and all(isinstance(i, int) and not isinstance(i, bool) for i in order)):
        order = list(range(len(results)))  # older or hand-made snapshots: as listed
    out: list[tuple[int, ReportedCheckpoint]] = []
    for number, (index, entry) in enumerate(zip(order, results, strict=True), start=1):
        name = entry.get("checkpoint_dir_name") if isinstance(entry, dict) else None
        metrics = entry.get("metrics") if isinstance(entry, dict) else None
        if not isinstance(name, str) or not name or "/" in name or name in (".", ".."):
            raise unreadable(where, f"checkpoint {number} has no plain checkpoint_dir_name")
        if not isinstance(metrics, dict):
            raise unreadable(where, f"checkpoint {number} ({name}) has no metrics object")
        out.append((index, ReportedCheckpoint(name, metrics)))
    out.sort(key=lambda pair: pair[0])
    checked = [checkpoint for _, checkpoint in out]
    check_rows([c.metrics for c in checked], where, numeric)
    return checked


def parse_snapshot_rows(raw: bytes, where: str, numeric: Iterable[str] = ()) -> list[dict[str, Any]]:
    """The snapshot as a metrics history: one row per checkpoint, its folder under ``checkpoint``."""
    return [{CHECKPOINT_KEY: c.name, **c.metrics} for c in parse_snapshot(raw, where, numeric)]
