"""Reading the checkpoint layout a run writes (defined in ``rtjob_contract``): which files belong to which
checkpoint, which is the newest or the best, and where the metrics history is."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import rtjob_contract as contract
from rtjob_contract import CHECKPOINT_PREFIX, METRICS_FILE

from ..core.errors import BadInput
from .stores import RemoteFile, Store, TooLarge

DEFAULT_METRIC = contract.METRIC_VAL_LOSS
# Metrics that are better when larger, for `best:METRIC` without an explicit min|max.
_MAX_WORDS = ("acc", "accuracy", "f1", "precision", "recall", "auc", "samples_per_s", "throughput", "score")


def natural_key(name: str) -> list[Any]:
    """checkpoint_epoch_0009 < checkpoint_epoch_0010; timestamps sort as text."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def checkpoint_of(rel: str) -> str | None:
    """The checkpoint folder a file belongs to (its first segment, if that is ``checkpoint_*``)."""
    head, sep, _ = rel.partition("/")
    return head if sep and head.startswith(CHECKPOINT_PREFIX) else None


def default_mode(metric: str) -> str:
    return "max" if any(word in metric.lower() for word in _MAX_WORDS) else "min"


@dataclass(frozen=True)
class CheckpointChoice:
    kind: str  # latest | best | all | name (one checkpoint by its folder's name)
    metric: str = DEFAULT_METRIC
    mode: str = "min"
    name: str = ""

    def text(self) -> str:
        if self.kind == "name":
            return self.name
        return f"best:{self.metric}:{self.mode}" if self.kind == "best" else self.kind


def parse_checkpoint_choice(text: str) -> CheckpointChoice:
    if text.strip().startswith(CHECKPOINT_PREFIX):  # one checkpoint by name: checkpoint_epoch_0003
        name = text.strip()
        if "/" in name or "\\" in name or any(ord(c) < 32 for c in name):
            raise BadInput(f"--checkpoint {name!r}: a checkpoint's folder name, e.g. checkpoint_epoch_0003")
        return CheckpointChoice("name", name=name)
    parts = text.strip().split(":")
    kind = parts[0].lower()
    if kind in ("latest", "all") and len(parts) == 1:
        return CheckpointChoice(kind)
    if kind == "best" and len(parts) <= 3:
        metric = parts[1] if len(parts) > 1 and parts[1] else DEFAULT_METRIC
        mode = parts[2].lower() if len(parts) > 2 else default_mode(metric)
        if mode not in ("min", "max"):
            raise BadInput(f"--checkpoint {text}: the mode must be min or max, not {mode!r}")
        return CheckpointChoice("best", metric, mode)
    raise BadInput(f"--checkpoint {text!r}: expected latest, all or best[:METRIC[:min|max]] (e.g. best:val_loss:min), "
                   "or a checkpoint's name (e.g. checkpoint_epoch_0003)")


# A metrics history is a few KB (one small object per epoch): these bound what a hostile file can cost.
MAX_HISTORY_BYTES = 16 * 1024 * 1024
MAX_HISTORY_DEPTH = 16
# Row keys that must be numbers where present (null, NaN and infinities read as "no value", as always).
NUMERIC_METRICS = (contract.METRIC_EPOCH, contract.METRIC_TRAIN_LOSS, contract.METRIC_VAL_LOSS,
                   contract.METRIC_VAL_ACCURACY, contract.METRIC_SAMPLES_PER_S, contract.METRIC_EPOCH_TIME,
                   "train_accuracy")
_JSON_TYPES = {str: "a string", bool: "a boolean", list: "a list", dict: "an object"}


def parse_history(raw: bytes, where: str, numeric: Iterable[str] = ()) -> list[dict[str, Any]]:
    """The one validator of a metrics.json (``rtjob results`` and ``pull --checkpoint best``): a list of per-epoch
    objects (one object reads as a one-row history) whose metrics are numbers. Anything else is one line of bad
    input, never a traceback; rows are returned as stored."""
    def bad(problem: str) -> BadInput:
        return unreadable(where, problem)

    data = parse_json(raw, where)
    rows = [data] if isinstance(data, dict) else data
    if not isinstance(rows, list):
        raise bad(f"expected a list of per-epoch objects, not {_kind(data)}")
    return check_rows(rows, where, numeric)


def parse_json(raw: bytes, where: str) -> Any:
    """A small JSON file read back from storage, bounded in size and depth (one line of bad input otherwise)."""
    import json

    def bad(problem: str) -> BadInput:
        return unreadable(where, problem)

    if len(raw) > MAX_HISTORY_BYTES:
        raise bad(f"larger than {MAX_HISTORY_BYTES // (1024 * 1024)} MiB")
    try:
        data = json.loads(raw)
    except RecursionError:  # the parser's own recursion limit (~1000 levels)
        raise bad(f"nested deeper than {MAX_HISTORY_DEPTH} levels") from None
    except ValueError as exc:
        raise bad(f"not valid JSON ({str(exc).splitlines()[0][:200]})") from None
    if _too_deep(data, MAX_HISTORY_DEPTH):
        raise bad(f"nested deeper than {MAX_HISTORY_DEPTH} levels")
    return data


def check_rows(rows: list[Any], where: str, numeric: Iterable[str] = ()) -> list[dict[str, Any]]:
    """Per-epoch (or per-checkpoint) metric objects whose known metrics are numbers, as given."""
    keys = (*NUMERIC_METRICS, *numeric)
    for number, row in enumerate(rows, start=1):
        if not isinstance(row, dict):
            raise unreadable(where, f"entry {number} is {_kind(row)}, not an object")
        for key in keys:
            problem = _metric_problem(key, row.get(key))
            if problem:
                raise unreadable(where, f"entry {number}: {key!r} is {problem}")
    return rows


def load_history(read: Callable[[int], bytes], where: str, numeric: Iterable[str] = (),
                 parse: Callable[[bytes, str, Iterable[str]], list[dict[str, Any]]] = parse_history,
                 ) -> list[dict[str, Any]]:
    """Read a history file with ``read(limit)`` (a store's or a file's) and validate it with ``parse``
    (a metrics.json by default; ``raytrain.parse_snapshot_rows`` for Ray Train's own snapshot)."""
    try:
        raw = read(MAX_HISTORY_BYTES)
    except TooLarge:
        raise unreadable(where, f"larger than {MAX_HISTORY_BYTES // (1024 * 1024)} MiB") from None
    return parse(raw, where, numeric)


def rtjob_own(rel: str) -> bool:
    """One of rtjob's own files in a run's folder (its record, its archived logs), not something the run wrote:
    a folder holding only these has nothing stored by the run."""
    return rel == contract.RUN_RECORD_FILE or rel.startswith(f"{contract.RUN_LOGS_DIR}/") or rel == contract.RUN_LOGS_DIR


def nothing_but_rtjobs_own(rels: Iterable[str]) -> bool:
    return all(rtjob_own(rel) for rel in rels)


class NothingStored(BadInput):
    """A location with no files at all (a run that has not written yet, or wrote somewhere else)."""

    def __init__(self, uri: str, message: str | None = None) -> None:
        super().__init__(message or f"nothing stored at {uri}")
        self.uri = uri


def unreadable(where: str, problem: str) -> BadInput:
    return BadInput(f"{where}: cannot read the metrics history: {problem}")


def _too_deep(value: Any, limit: int) -> bool:
    """Whether containers nest more than ``limit`` levels (level by level: no recursion of our own)."""
    level = [value]
    for _ in range(limit):
        level = [child for item in level
                 for child in (item.values() if isinstance(item, dict) else item if isinstance(item, list) else ())]
        if not level:
            return False
    return True


def _metric_problem(key: str, value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"{_kind(value)}, not a number"
    if isinstance(value, int) and abs(value) >= 2**1023:
        return "a number too large to compare"  # float(value) would overflow
    if key == contract.METRIC_EPOCH and not (isinstance(value, int) or value.is_integer()):
        return f"{value}, not a whole number"
    return None


def _kind(value: Any) -> str:
    return _JSON_TYPES.get(type(value), "a number" if isinstance(value, (int, float)) else "null")


def read_histories(store: Store, items: Iterable[RemoteFile], numeric: Iterable[str] = ()
                   ) -> dict[str, list[dict[str, Any]]]:
    """metrics.json files read concurrently and validated: rel → rows. A file that fails is bad input."""
    from concurrent.futures import ThreadPoolExecutor

    items, numeric = list(items), tuple(numeric)
    out: dict[str, list[dict[str, Any]]] = {}
    lock = threading.Lock()

    def one(item: RemoteFile) -> None:
        rows = load_history(lambda limit: store.read(item, limit), f"{store.location.uri}/{item.rel}", numeric)
        with lock:
            out[item.rel] = rows

    if items:
        with ThreadPoolExecutor(min(8, len(items)), thread_name_prefix="rtjob-read") as pool:
            for future in [pool.submit(one, item) for item in items]:
                future.result()
    return out


def find_history(files: Iterable[RemoteFile]) -> RemoteFile | None:
    """The file holding a run's whole metrics history: a run-level metrics.json, else the newest checkpoint's."""
    by_ckpt: dict[str, RemoteFile] = {}
    for item in files:
        if item.rel == METRICS_FILE:
            return item
        ckpt = checkpoint_of(item.rel)
        if ckpt and item.rel == f"{ckpt}/{METRICS_FILE}":
            by_ckpt[ckpt] = item
    if not by_ckpt:
        return None
    return by_ckpt[max(by_ckpt, key=natural_key)]
