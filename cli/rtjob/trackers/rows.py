"""The run's rows as an experiment tracker's metrics (MLflow's shape: key, value, timestamp in ms, step), one rule
for the run side's mirror and `rtjob track resend`:

- step rows (metrics.jsonl) under the names the rows use, with their step and time (a sweep trial's as TRIAL/NAME);
- epoch rows (metrics.json, the history rtjob's entrypoints keep in each checkpoint): each number under its name,
  its step the row's epoch;
- system rows (system.jsonl, about every 10 s per node) under MLflow's own system-metric names, the node's as
  MLflow's monitor names them with MLFLOW_SYSTEM_METRICS_NODE_ID (``system/NODE/cpu_utilization_percentage``),
  megabytes as MLflow counts them (10^6 bytes), each node's rows counted as its steps."""

from __future__ import annotations

import json
import math
import re
from typing import TYPE_CHECKING, Any, TypeGuard

import rtjob_contract as contract

if TYPE_CHECKING:
    from ..storage.objects import Objects

Metric = dict[str, Any]
MIB_IN_MB = 2**20 / 1e6  # system rows count MiB; MLflow's system metrics, MB
_NOT_IN_A_KEY = re.compile(r"[^A-Za-z0-9_\-. /]")  # MLflow's metric names: these only


def step_metrics(row: dict[str, Any]) -> list[Metric]:
    """A step row's numbers (none when it is not one: no int step, no time)."""
    step, at = row.get(contract.STEP_KEY), row.get(contract.STEP_TIME)
    if not isinstance(step, int) or isinstance(step, bool) or not _number(at):
        return []
    trial = row.get(contract.STEP_TRIAL)
    prefix = f"{trial}/" if isinstance(trial, str) and trial else ""
    return [_metric(prefix + key, value, at, step) for key, value in row.items()
            if key not in (contract.STEP_KEY, contract.STEP_TIME, contract.STEP_TRIAL) and _number(value)]


def epoch_step(row: dict[str, Any], position: int) -> int:
    """An epoch row's step: its epoch, else its place in the history (1: the first)."""
    epoch = row.get(contract.METRIC_EPOCH)
    return int(epoch) if _number(epoch) and float(epoch).is_integer() else position


def epoch_metrics(row: dict[str, Any], step: int, at: float) -> list[Metric]:
    """An epoch row's numbers at ``step``, stamped ``at`` (unix seconds: the history holds no time)."""
    return [_metric(key, value, at, step) for key, value in row.items()
            if key != contract.METRIC_EPOCH and _number(value)]


def system_metrics(row: dict[str, Any], step: int) -> list[Metric]:
    """A node's system row as MLflow's system metrics (CPU, memory, each GPU's utilisation and memory)."""
    at, node = row.get(contract.STEP_TIME), row.get("node")
    if not _number(at) or not isinstance(node, str) or not node:
        return []
    prefix = f"system/{_NOT_IN_A_KEY.sub('_', node)}/"
    out: list[Metric] = []

    def add(name: str, value: Any, scale: float = 1.0) -> None:
        if _number(value):
            out.append(_metric(prefix + name, round(float(value) * scale, 1), at, step))  # as MLflow rounds

    add("cpu_utilization_percentage", row.get("cpu_percent"))
    add("system_memory_usage_megabytes", row.get("mem_used_mb"), MIB_IN_MB)
    add("system_memory_usage_percentage", _share(row.get("mem_used_mb"), row.get("mem_total_mb")))
    for gpu in row.get("gpus") or []:
        if not isinstance(gpu, dict) or not isinstance(gpu.get("index"), int):
            continue
        i = gpu["index"]
        add(f"gpu_{i}_utilization_percentage", gpu.get("util_percent"))
        add(f"gpu_{i}_memory_usage_megabytes", gpu.get("mem_used_mb"), MIB_IN_MB)
        add(f"gpu_{i}_memory_usage_percentage", _share(gpu.get("mem_used_mb"), gpu.get("mem_total_mb")))
    return out


class SystemSteps:
    """System rows as metrics, each node's rows counted as its steps (0, 1, ...), as MLflow's monitor counts its
    samples: the same file read again gives the same steps."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}

    def metrics(self, row: dict[str, Any]) -> list[Metric]:
        node = str(row.get("node"))
        got = system_metrics(row, self.counts.get(node, 0))
        if got:
            self.counts[node] = self.counts.get(node, 0) + 1
        return got


HISTORY_MAX_BYTES = 8 << 20


def epoch_history(objects: Objects) -> list[dict[str, Any]]:
    """The run's newest epoch history in its storage: its own metrics.json, else the newest checkpoint's (as `rtjob
    results` reads a run folder); [] while there is none. Storage faults and a bad file raise."""
    from ..storage.layout import natural_key

    names = [item.rel for item in objects.list("")
             if item.rel == contract.METRICS_FILE or (item.rel.startswith(contract.CHECKPOINT_PREFIX)
                                                      and item.rel.endswith("/" + contract.METRICS_FILE)
                                                      and item.rel.count("/") == 1)]
    if not names:
        return []
    got = objects.get(contract.METRICS_FILE if contract.METRICS_FILE in names else max(names, key=natural_key),
                      HISTORY_MAX_BYTES)
    data = json.loads(got.data) if got is not None else []
    rows = [data] if isinstance(data, dict) else data
    return [row for row in rows if isinstance(row, dict)] if isinstance(rows, list) else []


def _metric(key: str, value: Any, at: float, step: int) -> Metric:
    return {"key": key, "value": float(value), "timestamp": int(at * 1000), "step": step}


def _share(used: Any, total: Any) -> float | None:
    """``used`` as a percentage of ``total`` (None: either is not a number, or no total)."""
    return float(used) / float(total) * 100 if _number(used) and _number(total) and total > 0 else None


def _number(value: Any) -> TypeGuard[float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
