"""MLflow's tracking REST API (``/api/2.0/mlflow/...``) with urllib: the few calls the run side's mirror
(runside/tracking/) and `rtjob track resend` need (the rows as metrics: rows.py). No `mlflow` import: the client
and the run side stay light."""

from __future__ import annotations

import base64
import json
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from typing import Any

import rtjob_contract as contract

BATCH_METRICS = 1000  # runs/log-batch takes at most 1000 metrics, 100 params and 100 tags a call
BATCH_PARAMS = 100
STATUS_OF = {"SUCCEEDED": "FINISHED", "FAILED": "FAILED", "STOPPED": "KILLED"}  # rtjob's end → MLflow's


def run_tags(config: Mapping[str, Any], run_id: str, attempt: int | str) -> dict[str, str]:
    """The tracker run's tags: RTJOB_TRACKING's (rtjob's, MLflow's standard ones, the git commit) with the run's
    id, attempt and the command that shows it (the mirror opens the run with them; `track resend` creates it so)."""
    return {**{str(k): str(v) for k, v in (config.get("tags") or {}).items()}, "rtjob.run_id": run_id,
            contract.META_ATTEMPT: str(attempt), "rtjob.status_command": f"rtjob status {run_id}"}


class MlflowError(Exception):
    """A call MLflow refused or did not answer (``transient``: worth trying again later)."""

    def __init__(self, message: str, transient: bool = True) -> None:
        super().__init__(message)
        self.transient = transient


def auth_headers(env: Mapping[str, str]) -> dict[str, str]:
    """MLflow's own credentials, as its client reads them: MLFLOW_TRACKING_TOKEN (a bearer token), else
    MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD (basic auth). On the run side they come from the job's
    `secrets:` (docs/guide/secrets.md), resolved by the companion; never from RTJOB_TRACKING."""
    token = (env.get("MLFLOW_TRACKING_TOKEN") or "").strip()
    if token:
        return {"Authorization": f"Bearer {token}"}
    user, password = env.get("MLFLOW_TRACKING_USERNAME") or "", env.get("MLFLOW_TRACKING_PASSWORD") or ""
    if user and password:
        return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}
    return {}


class MlflowRest:
    def __init__(self, uri: str, timeout_s: float = 3.0, headers: Mapping[str, str] | None = None) -> None:
        self.uri = uri.rstrip("/")
        self.timeout_s = timeout_s
        self.headers = dict(headers or {})  # auth_headers: secrets, never printed (repr-free; not in errors)

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        url = f"{self.uri}/api/2.0/mlflow/{path}"
        data = None
        if method == "GET" and body:
            url += "?" + urllib.parse.urlencode(body)
        elif body is not None:
            data = json.dumps(body).encode()
        request = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json", **self.headers})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:  # noqa: S310 - http(s) only
                return dict(json.loads(response.read() or b"{}"))
        except urllib.error.HTTPError as exc:
            detail = _error_code(exc)
            raise MlflowError(f"MLflow {path}: HTTP {exc.code} {detail}".strip(), transient=exc.code >= 500) from None
        except (OSError, ValueError) as exc:
            raise MlflowError(f"MLflow at {self.uri} not reached ({type(exc).__name__})") from None

    def experiment_id(self, name: str) -> str:
        try:
            return str(self.call("GET", "experiments/get-by-name", {"experiment_name": name})["experiment"]
                       ["experiment_id"])
        except MlflowError as exc:
            if exc.transient:
                raise
        return str(self.call("POST", "experiments/create", {"name": name})["experiment_id"])

    def find_run(self, experiment_id: str, rtjob_run_id: str) -> str | None:
        """The MLflow run tagged with this rtjob run's id (an earlier attempt's), None when there is none."""
        found = self.call("POST", "runs/search", {"experiment_ids": [experiment_id], "max_results": 1,
                                                   "filter": f"tags.`rtjob.run_id` = '{rtjob_run_id}'"})
        runs = found.get("runs") or []
        return str(runs[0]["info"]["run_id"]) if runs else None

    def create_run(self, experiment_id: str, name: str, tags: dict[str, str]) -> str:
        body = {"experiment_id": experiment_id, "run_name": name, "start_time": now_ms(),
                "tags": [{"key": k, "value": v} for k, v in tags.items()]}
        return str(self.call("POST", "runs/create", body)["run"]["info"]["run_id"])

    def log_batch(self, run_id: str, metrics: list[dict[str, Any]] | None = None,
                  params: dict[str, str] | None = None, tags: dict[str, str] | None = None) -> None:
        self.call("POST", "runs/log-batch", {
            "run_id": run_id, "metrics": metrics or [],
            "params": [{"key": k, "value": v} for k, v in (params or {}).items()],
            "tags": [{"key": k, "value": v} for k, v in (tags or {}).items()]})

    def set_status(self, run_id: str, status: str) -> None:
        body: dict[str, Any] = {"run_id": run_id, "status": status}
        if status != "RUNNING":
            body["end_time"] = now_ms()
        self.call("POST", "runs/update", body)

    def history(self, run_id: str, key: str) -> set[tuple[int, int]]:
        """(step, timestamp) of the metric's values MLflow has."""
        got = self.call("GET", "metrics/get-history", {"run_id": run_id, "metric_key": key, "max_results": 100000})
        return {(int(m.get("step") or 0), int(m["timestamp"])) for m in got.get("metrics") or []}

    def run_url(self, experiment_id: str, run_id: str) -> str:
        return f"{self.uri}/#/experiments/{experiment_id}/runs/{run_id}"


def now_ms() -> int:
    return int(time.time() * 1000)


def _error_code(exc: urllib.error.HTTPError) -> str:
    try:
        return str(json.loads(exc.read() or b"{}").get("error_code") or "")
    except (OSError, ValueError):
        return ""
