"""One MLflow run per rtjob run, fed from the run side (the companion's stages): the run's rows as metrics
(feeds.py reads them, trackers/rows.py names them): the step rows (RTJOB_RUN_DIR/metrics.jsonl, as the live rows
write them) under the names the rows use, with their step and time, the system rows (system.jsonl) as MLflow's
system metrics, the epoch history (metrics.json) by epoch; the job's args as params (less the secret ones:
jobspec/tracking.py); rtjob's tags and MLflow's standard ones (the git commit); the end as MLflow's status. A retry finds the same MLflow run by its ``rtjob.run_id`` tag and continues it (RUNNING again,
``rtjob.attempt`` updated; rows MLflow already has are sent again and kept once, MLflow keys a metric by its key,
step, time and value).

Never in the run's way: each call waits at most a few seconds, a tick sends for at most TICK_S (the companion's
loop goes on; the rest at the next tick), and after a failed call nothing is sent for RETRY_S (the rows wait in
memory, read from the file as it grows); the end's flush is bounded (``finish``: no metrics batch starts past its
deadline; the calls that open a run MLflow never saw, and the end's status, are a few more, each of at most the
REST client's 3 s), and what is left is said in the record with the command that sends it later (``rtjob track
resend RUN``)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import rtjob_contract as contract

from ...core.clock import now_iso
from ...trackers.mlflow_rest import (
    BATCH_METRICS,
    BATCH_PARAMS,
    STATUS_OF,
    MlflowError,
    MlflowRest,
    auth_headers,
)
from ...trackers.rows import step_metrics
from .feeds import EpochFeed, LiveFile, SystemFeed

if TYPE_CHECKING:
    from ...storage.objects import Objects

RETRY_S = 10.0  # after a failed call, the next try
TICK_S = 1.0  # a tick's sending, at most (a slow MLflow never holds up the companion's log and heartbeat)
FINISH_S = 5.0  # the end's flush, at most
Note = Callable[[dict[str, Any]], None]  # the record's `tracking` (the companion writes it)


def mlflow_mirror(config: dict[str, Any], run_id: str, rows_folder: str, say: Callable[[str], None], note: Note,
                  tags: dict[str, str], objects: Objects | None, env: Mapping[str, str]) -> MlflowMirror:
    """The run's MLflow mirror from RTJOB_TRACKING's ``config`` (a KeyError or a ValueError: not rtjob's); its
    token, if any, from the job's ``env`` (MLflow's own names, given through ``secrets:``)."""
    mlflow = config["mlflow"]
    mirror = MlflowMirror(MlflowRest(str(mlflow["tracking_uri"]), headers=auth_headers(env)), str(mlflow.get("experiment") or "rtjob"), run_id,
                          rows_folder, say, note, params=dict(config.get("params", {})), tags=tags)
    mirror.epochs = EpochFeed(objects, say) if objects is not None else None
    return mirror


class MlflowMirror:
    def __init__(self, rest: MlflowRest, experiment: str, run_id: str, folder: str, say: Callable[[str], None],
                 note: Note, params: dict[str, str], tags: dict[str, str]) -> None:
        self.rest, self.experiment, self.run_id, self.folder = rest, experiment, run_id, folder
        self.say, self.note, self.params, self.tags = say, note, params, tags
        self.experiment_id: str | None = None
        self.mlflow_run_id: str | None = None
        self.pending: list[dict[str, Any]] = []  # metrics read, not sent yet
        self.sent = 0
        self.steps = LiveFile(os.path.join(folder, contract.STEP_METRICS_FILE))
        self.system = SystemFeed(folder)
        self.epochs: EpochFeed | None = None
        self.next_try = 0.0
        self.fault: str | None = None

    def tick(self, final: bool = False, until: float | None = None) -> None:
        """New rows read (always: the node folder may go at the end), and sent unless a failure is recent, no
        batch started past ``until`` (monotonic; default: TICK_S from now)."""
        until = time.monotonic() + TICK_S if until is None else until
        for row in self.steps.rows():
            self.pending.extend(step_metrics(row))
        self.pending.extend(self.system.metrics())
        if time.monotonic() < self.next_try:
            return
        try:
            self._open()
            if self.epochs is not None:
                rest, run = self.rest, self.mlflow_run_id or ""
                self.pending.extend(self.epochs.metrics(final, lambda key: {s for s, _ in rest.history(run, key)}))
            self._send(until)
        except MlflowError as exc:
            self.next_try = time.monotonic() + RETRY_S
            if self.fault != str(exc):
                self.say(f"the MLflow mirror: {exc}; {len(self.pending)} metric(s) wait, tried again")
            self.fault = str(exc)
        else:
            if self.fault is not None:
                self.say(f"the MLflow mirror reached MLflow again: {self.sent} metric(s) sent")
            self.fault = None

    def finish(self, status: str, within_s: float = FINISH_S) -> None:
        """The end: what is left sent (for at most ``within_s``), MLflow's status, and the record's note."""
        deadline = time.monotonic() + within_s
        self.next_try = 0.0
        while True:
            self.tick(final=True, until=deadline)
            if (self.fault is None and not self.pending) or time.monotonic() >= deadline:
                break
            time.sleep(min(0.5, max(0.0, deadline - time.monotonic())))
            self.next_try = 0.0
        if self.mlflow_run_id is not None and self.fault is None:
            try:
                self.rest.set_status(self.mlflow_run_id, STATUS_OF.get(status, "FAILED"))
            except MlflowError as exc:
                self.fault = str(exc)
        self.note(self.summary(ended=True))

    def summary(self, ended: bool = False) -> dict[str, Any]:
        out: dict[str, Any] = {"tracking_uri": self.rest.uri, "experiment": self.experiment,
                               "run_id": self.mlflow_run_id, "sent": self.sent}
        if self.experiment_id and self.mlflow_run_id:
            out["url"] = self.rest.run_url(self.experiment_id, self.mlflow_run_id)
        if ended and (self.pending or self.fault or self.mlflow_run_id is None):
            out["unsent"] = len(self.pending)
            out["fault"] = self.fault
            out["resend"] = f"rtjob track resend {self.run_id}"
        return {"mlflow": out, "at": now_iso()}  # the newest note wins when two writers' records meet

    def _open(self) -> None:
        if self.mlflow_run_id is not None:
            return
        rest = self.rest
        self.experiment_id = experiment_id = rest.experiment_id(self.experiment)
        found = rest.find_run(experiment_id, self.run_id)
        if found is None:
            found = rest.create_run(experiment_id, self.run_id, self.tags)
            items = list(self.params.items())
            for at in range(0, len(items), BATCH_PARAMS):
                rest.log_batch(found, params=dict(items[at:at + BATCH_PARAMS]))
        else:  # a retry: the same MLflow run goes on (its epochs asked before any is sent again)
            if self.epochs is not None:
                self.epochs.known = None
            rest.set_status(found, "RUNNING")
            rest.log_batch(found, tags={contract.META_ATTEMPT: self.tags[contract.META_ATTEMPT]})
        self.mlflow_run_id = found
        self.say(f"mirrored to MLflow: {rest.run_url(experiment_id, found)}")
        self.note(self.summary())

    def _send(self, until: float) -> None:
        assert self.mlflow_run_id is not None
        while self.pending and time.monotonic() < until:
            batch = self.pending[:BATCH_METRICS]
            self.rest.log_batch(self.mlflow_run_id, metrics=batch)
            del self.pending[:len(batch)]
            self.sent += len(batch)
