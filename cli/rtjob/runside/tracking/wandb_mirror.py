"""The run mirrored into a W&B run from the run side, with W&B's own SDK where the job's environment has it (the
job's `tracking: {wandb: {project}}`; W&B's own variables, WANDB_API_KEY as a secret, WANDB_MODE, WANDB_DIR, as
the job's env sets them): one W&B run per rtjob run, its id the rtjob run id's, so a retry resumes the same run
(``resume="allow"``, ``rtjob.attempt`` updated in its config). The rows as feeds.py reads them: step rows logged
at their step; epoch rows with ``epoch`` as their x-axis (``define_metric``); system rows under ``nodes/NODE/...``
(W&B samples the driver's own node as its system metrics). The job's args (less secrets) are its config, with
rtjob's tags under ``rtjob``; the git commit is W&B's own.

Never in the run's way: every W&B call runs in one thread of its own (``wandb.init`` may wait up to its
init_timeout for W&B's service, ``finish`` for its upload); the companion only hands it rows, and the run's end
waits at most FINISH_S for it. What W&B had not sent then stays in the run's W&B folder: `wandb sync DIR` sends it."""

from __future__ import annotations

import collections
import os
import queue
import re
import threading
from collections.abc import Callable, Mapping
from typing import Any

import rtjob_contract as contract

from ...core.clock import now_iso
from .feeds import EpochFeed, LiveFile, SystemFeed

FINISH_S = 10.0  # the run's end waits this long for W&B at most
Note = Callable[[dict[str, Any]], None]
_NOT_IN_AN_ID = re.compile(r"[^A-Za-z0-9_-]")


def wandb_id(run_id: str) -> str:
    """The W&B run id of an rtjob run (W&B's ids: letters, digits, - and _, at most 64)."""
    return _NOT_IN_AN_ID.sub("_", run_id)[:64]


class WandbMirror:
    def __init__(self, config: Mapping[str, Any], run_id: str, folder: str, say: Callable[[str], None],
                 note: Note, params: dict[str, str], tags: dict[str, str], epochs: EpochFeed | None,
                 api_key: str | None = None) -> None:
        self.project, self.entity = str(config["project"]), config.get("entity")
        self.api_key = api_key or None  # the job's WANDB_API_KEY (its `secrets:`), given to W&B's own Settings
        self.run_id, self.say, self.note, self.params, self.tags = run_id, say, note, params, tags
        self.steps = LiveFile(os.path.join(folder, contract.STEP_METRICS_FILE))
        self.system = SystemFeed(folder)
        self.epochs = epochs
        self.rows: queue.Queue[tuple[str, list[dict[str, Any]]] | None] = queue.Queue()
        self.sent = 0
        self.fault: str | None = None
        self.run: Any = None
        self.ended_as: str | None = None
        self.extra: collections.deque[dict[str, Any]] = collections.deque()  # epochs, system rows: the next steps'
        self.last_step: int | None = None
        self.opened, self.noted = threading.Event(), False
        self.thread = threading.Thread(target=self._work, name="rtjob-wandb-mirror", daemon=True)
        self.thread.start()

    def tick(self, final: bool = False) -> None:
        """The new rows handed to W&B's thread (never waits for W&B); the W&B run noted once it is open."""
        if self.opened.is_set() and not self.noted:
            self.noted = True
            self.note(self.summary())
        steps = [row for row in self.steps.rows() if isinstance(row.get(contract.STEP_KEY), int)]
        if steps:
            self.rows.put(("steps", steps))
        system = self.system.metrics()
        if system:
            self.rows.put(("system", system))
        if self.epochs is not None:
            epochs = self.epochs.metrics(final, lambda key: set())  # W&B's history is not asked: sent by this run
            if epochs:
                self.rows.put(("epochs", epochs))

    def finish(self, status: str, within_s: float = FINISH_S) -> None:
        """The end: the last rows, W&B's run finished (exit code 0 for SUCCEEDED), waited for at most
        ``within_s``; the record's note says what W&B had not taken."""
        self.tick(final=True)
        self.ended_as = status
        self.rows.put(None)
        self.thread.join(within_s)
        if self.thread.is_alive() and self.fault is None:
            self.fault = f"W&B did not finish within {within_s:g}s"
        self.note(self.summary(ended=True))

    def summary(self, ended: bool = False) -> dict[str, Any]:
        run = self.run
        out: dict[str, Any] = {"project": self.project, "entity": self.entity, "run_id": wandb_id(self.run_id),
                               "sent": self.sent}
        if run is not None:
            out.update(url=getattr(run, "url", None), mode=str(run.settings.mode), dir=os.path.dirname(run.dir))
        if ended and (self.fault or run is None):
            out["fault"] = self.fault or "the W&B run was never started"
            if run is not None:
                out["resend"] = f"wandb sync {out['dir']}"
        return {"wandb": out, "at": now_iso()}

    # -- W&B's thread ---------------------------------------------------------------------------------------
    def _work(self) -> None:
        try:
            self._open()
        except Exception as exc:  # noqa: BLE001 - no W&B run: the rows are dropped, the run goes on
            self.fault = f"wandb.init: {type(exc).__name__}: {exc}"
            self.say(f"the W&B mirror: {self.fault}; the run is not mirrored to W&B")
            while self.rows.get() is not None:
                continue
            return
        while (item := self.rows.get()) is not None or self.extra:
            try:
                if item is None:
                    self._flush_extra()  # the end: what waits for a step row gets steps of its own
                    break
                self._log(*item)
            except Exception as exc:  # noqa: BLE001 - these rows are lost to W&B, not the run
                if self.fault is None:
                    self.say(f"the W&B mirror: {type(exc).__name__}: {exc}")
                self.fault = f"{type(exc).__name__}: {exc}"
        try:
            self.run.finish(exit_code=0 if self.ended_as == "SUCCEEDED" else 1)
        except Exception as exc:  # noqa: BLE001 - W&B keeps what it did not send in its run folder
            self.fault = f"wandb finish: {type(exc).__name__}: {exc}"

    def _open(self) -> None:
        import wandb  # the job's environment's: rtjob never installs it

        config = {**self.params, "rtjob": self.tags}
        self.run = run = wandb.init(project=self.project, entity=self.entity, id=wandb_id(self.run_id),
                                    name=self.run_id, resume="allow", config=config, allow_val_change=True,
                                    tags=["rtjob", self.tags.get(contract.META_JOB) or "run"][:64],
                                    settings=wandb.Settings(console="off", git_commit=self.tags.get(
                                        "mlflow.source.git.commit"), init_timeout=60, api_key=self.api_key))
        run.define_metric(contract.METRIC_EPOCH)
        self.last_step = run.step - 1 if run.step else None  # a resumed run's steps go on after its last
        self.say(f"mirrored to W&B: {run.url or os.path.dirname(run.dir)}")
        self.opened.set()  # the companion's thread notes it in the record (the record's writes are its own)

    def _log(self, kind: str, rows: list[dict[str, Any]]) -> None:
        """Step rows at their steps. W&B's history has one step axis that only grows, so an epoch's numbers (with
        ``epoch``, their x-axis) and a node's system row each join the next step row logged, one per step; a run
        with no step rows logs them at steps of their own."""
        run = self.run
        if kind == "epochs":
            for epoch in sorted({m["step"] for m in rows}):
                for m in rows:
                    if m["step"] == epoch:
                        run.define_metric(m["key"], step_metric=contract.METRIC_EPOCH)
                self.extra.append({contract.METRIC_EPOCH: epoch,
                                   **{m["key"]: m["value"] for m in rows if m["step"] == epoch}})
        elif kind == "system":
            for at in sorted({m["timestamp"] for m in rows}):
                nodes: dict[str, dict[str, float]] = {}
                for m in rows:
                    if m["timestamp"] == at:
                        nodes.setdefault(m["key"].split("/")[1], {})["nodes/" + m["key"][7:]] = m["value"]
                self.extra.extend(nodes.values())
        for row in rows if kind == "steps" else []:
            trial = row.get(contract.STEP_TRIAL)
            prefix = f"{trial}/" if isinstance(trial, str) and trial else ""
            values = {prefix + k: v for k, v in row.items()
                      if _number(v) and k not in (contract.STEP_KEY, contract.STEP_TIME)}
            step = row[contract.STEP_KEY]
            if self.extra and (self.last_step is None or step > self.last_step):
                values.update(self.extra.popleft())
            self._at(step, values)
        if self.last_step is None:  # no step row yet: their own steps
            self._flush_extra()

    def _flush_extra(self) -> None:
        while self.extra:
            self._at(0 if self.last_step is None else self.last_step + 1, self.extra.popleft())

    def _at(self, step: int, values: dict[str, Any]) -> None:
        self.run.log(values, step=step)
        self.last_step = step if self.last_step is None else max(step, self.last_step)
        self.sent += len(values)


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
