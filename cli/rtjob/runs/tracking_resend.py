"""`rtjob track resend RUN_ID`: the run's rows in its storage (metrics.jsonl's steps, system.jsonl's system rows, the
epoch history) sent to the MLflow run its record names, each value MLflow lacks once (what it has, by step and time,
is left as it is; an epoch it has at all, by step). For a run whose mirror could not send everything before the run
ended (the record's ``tracking`` says so). The rows become metrics by trackers/rows.py's one rule."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import rtjob_contract as contract

from ..core.errors import BadInput, RtjobError
from ..core.record import RunRecord
from ..trackers.mlflow_rest import BATCH_METRICS, MlflowError, MlflowRest
from ..trackers.rows import SystemSteps, epoch_history, epoch_metrics, epoch_step, step_metrics


@dataclass(frozen=True)
class Resent:
    url: str
    sent: int
    had: int  # values MLflow already had


def resend(record: RunRecord) -> Resent:
    mlflow = (record.tracking or {}).get("mlflow")
    if not isinstance(mlflow, dict) or not mlflow.get("tracking_uri"):
        raise BadInput(f"run {record.id} is not mirrored to MLflow (its job has no tracking:)")
    if not record.storage_uri:
        raise BadInput(f"run {record.id} has no storage: its step rows are not kept")
    rest = MlflowRest(str(mlflow["tracking_uri"]), timeout_s=30)
    try:
        experiment_id = rest.experiment_id(str(mlflow.get("experiment") or "rtjob"))
        run_id = rest.find_run(experiment_id, record.id) or rest.create_run(
            experiment_id, record.id, {"rtjob.run_id": record.id, contract.META_JOB: record.job or ""})
        metrics, epochs = _rows(record)
        have = {key: rest.history(run_id, key) for key in {m["key"] for m in metrics + epochs}}
        missing = [m for m in metrics if (m["step"], m["timestamp"]) not in have[m["key"]]]
        missing += [m for m in epochs if m["step"] not in {step for step, _ in have[m["key"]]}]
        metrics += epochs
        for at in range(0, len(missing), BATCH_METRICS):
            rest.log_batch(run_id, metrics=missing[at:at + BATCH_METRICS])
    except MlflowError as exc:
        raise RtjobError(f"{exc}: nothing more sent") from None
    return Resent(rest.run_url(experiment_id, run_id), len(missing), len(metrics) - len(missing))


def _rows(record: RunRecord) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(the step and system rows' metrics, the epochs' stamped now: the history holds no time)."""
    import time

    from ..storage.opening import objects_for

    system = SystemSteps()
    metrics: list[dict[str, Any]] = []
    with objects_for(record.storage_uri or "", record.storage_endpoint) as objects:
        for name, convert in ((contract.STEP_METRICS_FILE, step_metrics), (contract.SYSTEM_METRICS_FILE, system.metrics)):
            if objects.head(name) is None:
                continue
            for line in b"".join(objects.stream(name)).splitlines():
                try:
                    row = json.loads(line)
                except ValueError:
                    continue
                if isinstance(row, dict):
                    metrics.extend(convert(row))
        history, now = epoch_history(objects), time.time()
    epochs = [m for at, row in enumerate(history, start=1) for m in epoch_metrics(row, epoch_step(row, at), now)]
    return metrics, epochs
