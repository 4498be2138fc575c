"""The run's live rows, collected by the companion into RTJOB_RUN_DIR (rtjob_contract.STEP_METRICS_FILE and
SYSTEM_METRICS_FILE), from where the folder's sync uploads them while they grow.

Transport: rows are event lines in the driver log (``rtjob-event: step_row {...}`` / ``rtjob-event: system_row
{...}``, contract.EVENT_STEP_ROW / EVENT_SYSTEM_ROW): rank 0 of rtjob's entrypoints prints step rows and a sampler in
each node's first training worker prints system rows (training/step_rows.py, training/system_rows.py); Ray forwards
every worker's stdout to the driver's log, which the companion reads as it uploads the log's parts (``feed``). Lines
arrive with Ray's prefix (``(RayTrainWorker pid=…)``, colours) and, on some clusters, twice: a row is kept once.

The companion samples its own node itself (``tick``, every contract.SYSTEM_SAMPLE_S): a plain script's run gets
system rows too, and a worker's rows about the driver's node are dropped (that node is already sampled).
"""

from __future__ import annotations

import collections
import json
import math
import os
import time
from collections.abc import Callable
from typing import Any

import rtjob_contract as contract

_MARK = contract.EVENT_LINE_PREFIX.encode()
_KINDS = {contract.EVENT_STEP_ROW: contract.STEP_METRICS_FILE, contract.EVENT_SYSTEM_ROW: contract.SYSTEM_METRICS_FILE}
_DECODER = json.JSONDecoder()
Sampler = Callable[[], dict[str, Any]]


def own_sampler() -> tuple[Sampler, str] | None:
    """This node's system-row sampler and node name (training/system_rows.py, shipped with rtjob as
    ``rtjob_training``); None where it cannot be imported (then workers' rows about this node are kept)."""
    try:
        from rtjob_training import system_rows  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        return None
    return system_rows.sample, system_rows.node_name()


class LiveRows:
    """Appends the rows found in the driver log to ``folder``'s files, and this node's system row every ``every_s``."""

    def __init__(self, folder: str, say: Callable[[str], None], sampler: tuple[Sampler, str] | None = None,
                 every_s: float = contract.SYSTEM_SAMPLE_S) -> None:
        self.folder = folder
        self.say = say
        self.sampler = sampler
        self.every_s = every_s
        self.rows_written = 0
        self._recent: collections.deque[str] = collections.deque(maxlen=512)  # rows already written (duplicates)
        self._carry = b""  # a line not ended yet
        self._next_sample = time.monotonic() + every_s
        self._sampled = False
        self._failed = False
        if sampler is not None:
            self._guard(sampler[0])  # starts psutil's CPU clock: the first row's figure covers its interval

    def feed(self, chunk: bytes) -> None:
        """A new stretch of the driver log: its row lines appended to their files."""
        text = self._carry + chunk
        cut = text.rfind(b"\n") + 1
        self._carry = text[cut:][-65536:]
        if _MARK not in text[:cut]:
            return
        found: dict[str, list[str]] = {}
        for line in text[:cut].split(b"\n"):
            parsed = self.parse(line)
            if parsed is not None:
                found.setdefault(parsed[0], []).append(parsed[1])
        for name, rows in found.items():
            self._append(name, rows)

    def parse(self, line: bytes) -> tuple[str, str] | None:
        """(file name, the row's JSON) of an event line carrying a row, once; None for any other line."""
        at = line.find(_MARK)
        if at < 0:
            return None
        head, _, rest = line[at + len(_MARK):].decode("utf-8", "replace").strip().partition(" ")
        name = _KINDS.get(head)
        if name is None:
            return None
        try:
            row, _end = _DECODER.raw_decode(rest.strip())  # Ray may add text after it ("[repeated 2x ...]")
        except ValueError:
            return None
        if not valid(head, row) or (head == contract.EVENT_SYSTEM_ROW and self.sampler is not None
                                    and row.get("node") == self.sampler[1]):
            return None
        encoded = json.dumps(row, separators=(",", ":"))
        if encoded in self._recent:
            return None
        self._recent.append(encoded)
        return name, encoded

    def tick(self, final: bool = False) -> None:
        """This node's system row when one is due (and at the end, when the run wrote none yet)."""
        if self.sampler is None:
            return
        now = time.monotonic()
        if now < self._next_sample and not (final and not self._sampled):
            return
        self._next_sample = now + self.every_s
        self._sampled = True
        row = self._guard(self.sampler[0])
        if row is not None:
            self._append(contract.SYSTEM_METRICS_FILE, [json.dumps(row, separators=(",", ":"))])

    def _append(self, name: str, rows: list[str]) -> None:
        try:
            with open(os.path.join(self.folder, name), "a", encoding="utf-8") as f:
                f.write("".join(row + "\n" for row in rows))
        except OSError as exc:
            self._fail(f"{name}: rows not written ({exc.strerror or exc})")
            return
        self.rows_written += len(rows)

    def _guard(self, sample: Sampler) -> dict[str, Any] | None:
        try:
            return sample()
        except Exception as exc:  # noqa: BLE001 - no system row this time; the run goes on
            self._fail(f"{contract.SYSTEM_METRICS_FILE}: this node not sampled ({type(exc).__name__}: {exc})")
            return None

    def _fail(self, text: str) -> None:
        if not self._failed:  # once: a full disk would say it every tick
            self.say(text)
        self._failed = True


def valid(kind: str, row: Any) -> bool:
    """A row of ``kind`` as the contract has it: step rows an int step, a time, numbers besides (and a sweep's
    trial, a string); system rows a time and a node."""
    if not isinstance(row, dict) or not _finite(row.get(contract.STEP_TIME)):
        return False
    if kind == contract.EVENT_SYSTEM_ROW:
        return isinstance(row.get("node"), str) and isinstance(row.get("gpus", []), list)
    step = row.get(contract.STEP_KEY)
    return isinstance(step, int) and not isinstance(step, bool) and isinstance(row.get(contract.STEP_TRIAL, ""), str) \
        and all(_finite(value) for key, value in row.items()
                if key not in (contract.STEP_KEY, contract.STEP_TIME, contract.STEP_TRIAL))


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def both(*calls: Callable[[bytes], None]) -> Callable[[bytes], None]:
    """One ``on_text`` for LogParts that hands each stretch of the log to every call, in order."""
    def call(chunk: bytes) -> None:
        for one in calls:
            one(chunk)

    return call
