"""`rtjob track resend RUN_ID`: the run's rows in its storage (metrics.jsonl's steps, system.jsonl's system rows, the
epoch history) sent to the MLflow run its record names, each value MLflow lacks once (what it has, by step and time,
is left as it is; an epoch it has at all, by step). For a run whose mirror could not send everything before the run
ended (the record's ``tracking`` says so). The rows become metrics by trackers/rows.py's one rule. An MLflow run the
mirror never opened is created as the mirror would have (its tags and the job's args as params, from the request's
RTJOB_TRACKING), and an ended run's end is set as MLflow's status (a mirror that missed the end left it RUNNING)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

import rtjob_contract as contract

from ..core.errors import BadInput, RtjobError
from ..core.record import RunRecord
from ..trackers.mlflow_rest import (
    BATCH_METRICS,
    BATCH_PARAMS,
    STATUS_OF,
    MlflowError,
    MlflowRest,
    auth_headers,
    run_tags,
)
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
    rest = MlflowRest(str(mlflow["tracking_uri"]), timeout_s=30, headers=auth_headers(os.environ))  # this client's
    try:
        experiment_id = rest.experiment_id(str(mlflow.get("experiment") or "rtjob"))
        run_id = rest.find_run(experiment_id, record.id) or _create(rest, experiment_id, record)
        metrics, epochs = _rows(record)
        have = {key: rest.history(run_id, key) for key in {m["key"] for m in metrics + epochs}}
        missing = [m for m in metrics if (m["step"], m["timestamp"]) not in have[m["key"]]]
        missing += [m for m in epochs if m["step"] not in {step for step, _ in have[m["key"]]}]
        metrics += epochs
        for at in range(0, len(missing), BATCH_METRICS):
            rest.log_batch(run_id, metrics=missing[at:at + BATCH_METRICS])
        if record.run_status.terminal:
            rest.set_status(run_id, STATUS_OF.get(record.run_status.value, "FAILED"))
    except MlflowError as exc:
        raise RtjobError(f"{exc}: nothing more sent") from None
    return Resent(rest.run_url(experiment_id, run_id), len(missing), len(metrics) - len(missing))


def _create(rest: MlflowRest, experiment_id: str, record: RunRecord) -> str:
    """The MLflow run as the mirror opens it: the request's tags (rtjob's, MLflow's standard ones, the git commit)
    and the job's args as params (RTJOB_TRACKING: secrets were left out when it was written)."""
    config = _tracking_config(record)
    tags = {contract.META_JOB: record.job or "", **run_tags(config, record.id, len(record.attempts) or 1)}
    run_id = rest.create_run(experiment_id, record.id, tags)
    params = [(str(k), str(v)) for k, v in (config.get("params") or {}).items()]
    for at in range(0, len(params), BATCH_PARAMS):
        rest.log_batch(run_id, params=dict(params[at:at + BATCH_PARAMS]))
    return run_id


def _tracking_config(record: RunRecord) -> dict[str, Any]:
    """RTJOB_TRACKING as the run's request carried it (a Ray request's runtime_env, an Anyscale JobConfig's
    env_vars); {} when the record has none."""
    request = record.request or {}
    for holder in (request.get("runtime_env"), request.get("config"), request):
        raw = ((holder or {}).get("env_vars") or {}).get(contract.ENV_TRACKING) if isinstance(holder, dict) else None
        try:
            config = json.loads(raw) if isinstance(raw, str) else None
        except ValueError:
            config = None
        if isinstance(config, dict):
            return config
    return {}


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
