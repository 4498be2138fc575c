"""`rtjob track resend RUN_ID`: the run's step rows (metrics.jsonl in its storage) sent to the MLflow run its record
names, each value MLflow lacks once (what it has, by step and time, is left as it is). For a run whose mirror could
not send everything before the run ended (the record's ``tracking`` says so)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

import rtjob_contract as contract

from ..core.errors import BadInput, RtjobError
from ..core.record import RunRecord
from ..trackers.mlflow_rest import BATCH_METRICS, MlflowError, MlflowRest, auth_headers, metrics_of


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
    rest = MlflowRest(str(mlflow["tracking_uri"]), timeout_s=30, headers=auth_headers(os.environ))  # this client's
    try:
        experiment_id = rest.experiment_id(str(mlflow.get("experiment") or "rtjob"))
        run_id = rest.find_run(experiment_id, record.id) or rest.create_run(
            experiment_id, record.id, {"rtjob.run_id": record.id, contract.META_JOB: record.job or ""})
        metrics = _rows(record)
        have = {key: rest.history(run_id, key) for key in {m["key"] for m in metrics}}
        missing = [m for m in metrics if (m["step"], m["timestamp"]) not in have[m["key"]]]
        for at in range(0, len(missing), BATCH_METRICS):
            rest.log_batch(run_id, metrics=missing[at:at + BATCH_METRICS])
    except MlflowError as exc:
        raise RtjobError(f"{exc}: nothing more sent") from None
    return Resent(rest.run_url(experiment_id, run_id), len(missing), len(metrics) - len(missing))


def _rows(record: RunRecord) -> list[dict[str, Any]]:
    from ..storage.opening import objects_for

    with objects_for(record.storage_uri or "", record.storage_endpoint) as objects:
        data = b"".join(objects.stream(contract.STEP_METRICS_FILE))
    metrics: list[dict[str, Any]] = []
    for line in data.splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict):
            metrics.extend(metrics_of(row))
    return metrics
