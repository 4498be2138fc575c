"""What the mirror sends, read on the run side as the run writes it (trackers/rows.py turns each row into metrics):

- ``LiveFile``: a JSON Lines file of RTJOB_RUN_DIR as it grows (metrics.jsonl's step rows, system.jsonl's system
  rows), whole lines only, each once (a retry's folder is seeded with the earlier attempts' rows: read again, they
  are the same metrics, which MLflow keeps once);
- ``EpochFeed``: the run's epoch history (metrics.json: the run folder's own, else the newest checkpoint's, as
  `rtjob results` reads it), looked at every EPOCH_EVERY_S and at the end through the run's storage, each epoch's
  numbers sent once: the history holds no time, so a retry asks the tracker which epochs it has
  (``known = None``) rather than sending them again with a new one."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import rtjob_contract as contract

from ...trackers.rows import Metric, SystemSteps, epoch_history, epoch_metrics, epoch_step

if TYPE_CHECKING:
    from ...storage.objects import Objects

EPOCH_EVERY_S = 15.0


class LiveFile:
    def __init__(self, path: str) -> None:
        self.path = path
        self.offset = 0  # bytes read

    def rows(self) -> list[dict[str, Any]]:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except OSError:
            return []
        cut = data.rfind(b"\n") + 1  # whole lines only: the rest is read with the next
        self.offset += cut
        out = []
        for line in data[:cut].splitlines():
            try:
                row = json.loads(line)
            except ValueError:
                continue
            if isinstance(row, dict):
                out.append(row)
        return out


class SystemFeed:
    """system.jsonl's rows as MLflow's system metrics (trackers/rows.py: each node's rows its steps)."""

    def __init__(self, folder: str) -> None:
        self.file = LiveFile(os.path.join(folder, contract.SYSTEM_METRICS_FILE))
        self.steps = SystemSteps()

    def metrics(self) -> list[Metric]:
        return [metric for row in self.file.rows() for metric in self.steps.metrics(row)]


class EpochFeed:
    def __init__(self, objects: Objects, say: Callable[[str], None], every_s: float = EPOCH_EVERY_S) -> None:
        self.objects, self.say, self.every_s = objects, say, every_s
        self.next_look = 0.0
        self.known: dict[str, set[int]] | None = {}  # steps the tracker has, by key (None: ask it first)
        self.seen: dict[int, float] = {}  # each epoch's time: when it was first seen
        self.fault: str | None = None

    def metrics(self, final: bool, history_of: Callable[[str], set[int]]) -> list[Metric]:
        """The epochs' numbers the tracker lacks, when a look is due (always at the end). ``history_of(key)``: the
        steps the tracker has of a metric (asked once per key, after a retry)."""
        now = time.monotonic()
        if now < self.next_look and not final:
            return []
        self.next_look = now + self.every_s
        rows = self._history()
        out: list[Metric] = []
        for position, row in enumerate(rows, start=1):
            step = epoch_step(row, position)
            at = self.seen.setdefault(step, time.time())
            out.extend(epoch_metrics(row, step, at))
        if self.known is None:
            self.known = {key: history_of(key) for key in {m["key"] for m in out}}
        known = self.known
        fresh = [m for m in out if m["step"] not in known.setdefault(m["key"], set())]
        for metric in fresh:
            known[metric["key"]].add(metric["step"])
        return fresh

    def _history(self) -> list[dict[str, Any]]:
        """The run's newest epoch history ([] while there is none, or while storage fails: looked at again)."""
        try:
            rows = epoch_history(self.objects)
        except Exception as exc:  # noqa: BLE001 - storage down or a bad file: looked at again next time
            if self.fault != str(exc):
                self.say(f"the MLflow mirror: the epoch history not read ({type(exc).__name__}: {exc})")
            self.fault = str(exc)
            return []
        self.fault = None
        return rows
