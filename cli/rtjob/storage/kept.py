"""What a node kept when storage failed at a run's end, stored once storage is back (`rtjob sync RUN_ID`).

A kept node folder (storage/node_dirs.py: its marker names the run, the attempt, the run's storage and how the
script ended) holds the script's ``run/`` files the storage lacks and ``log/<attempt id>.log``, the attempt's whole
masked log. ``store_kept`` uploads the files by the run's rule (storage/dir_sync.py: an object is replaced only if an
attempt of the run wrote it; one holding the same bytes is taken as stored), the log as the attempt's whole log,
then writes the record's end if the companion could not (its verdict, from the marker) and ``outputs: complete``
through the lifecycle kernel, and only then removes the folder. A fault leaves the folder and its marker as they
were: run it again. Importable on the cluster (a remote cluster's repair runs there, beside the kept folder,
through runside/kept_sync.py): the stdlib, rtjob_contract and rtjob's storage and core modules at module level.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import rtjob_contract as contract

from ..core import lifecycle
from ..core.errors import BadInput, StorageError
from ..core.lifecycle import Writer
from ..core.record import RunRecord
from ..core.retry_rule import AttemptEnd
from . import node_dirs
from .retrying import patiently


@dataclass
class Stored:
    folder: str
    files: int  # the run's files uploaded now
    log: bool  # the attempt's whole log uploaded
    record: RunRecord | None  # the record as written


def store_kept(folder: str, marker: dict[str, Any], say: Callable[[str], None],
               patience_s: float | None = None, last: bool = True) -> Stored:
    """Store one kept folder (see the module's text); StorageError when storage still refuses (nothing removed).
    ``last``: no other kept folder of the run is left, so its outputs are complete once this one is stored."""
    from .dir_sync import DirSync
    from .opening import objects_for
    from .run_ports import run_ports

    run_uri, run_id, attempt = marker.get("run_uri"), marker.get("run_id"), marker.get("attempt")
    if not (isinstance(run_uri, str) and run_uri and isinstance(run_id, str) and run_id):
        raise BadInput(f"{folder}/{contract.KEPT_MARKER_FILE}: names no run or storage (a damaged marker): the "
                       "folder is left as it is")
    attempt = attempt if isinstance(attempt, str) and attempt else run_id
    endpoint = marker.get("endpoint") if isinstance(marker.get("endpoint"), str) else None
    objects = objects_for(run_uri, endpoint)
    run_dir = os.path.join(folder, node_dirs.RUN_SUBDIR)
    uploaded = 0
    if os.path.isdir(run_dir):
        sync = DirSync(run_dir, objects, say=say, attempt_id=attempt, settle_s=0.0, max_wait_s=0.0)
        patiently(sync.adopt_stored, patience_s)

        def scan() -> int:
            done = sync.scan(final=True)
            if not sync.complete:
                raise sync.fault if isinstance(sync.fault, StorageError) else StorageError(
                    f"{run_uri}: {len(sync.not_stored())} file(s) still not stored", transient=True)
            return done

        uploaded = patiently(scan, patience_s)
    log = os.path.join(folder, node_dirs.LOG_SUBDIR, contract.attempt_log_name(attempt))
    logs: list[str] = []
    if os.path.isfile(log):
        for name in (contract.attempt_log_name(attempt), contract.DRIVER_LOG_FILE):
            rel = f"{contract.RUN_LOGS_DIR}/{name}"
            patiently(lambda rel=rel: objects.put_file(rel, log), patience_s)  # type: ignore[misc]
            logs.append(rel)
    metrics = _metrics(run_uri, endpoint)
    steps = [kept_end(marker, complete=last), lifecycle.Saved(Writer.COMPANION, tuple(logs), run_uri, metrics)]
    record = patiently(lambda: lifecycle.write(run_ports(run_uri, endpoint), steps, new=kept_record(marker)),
                       patience_s)
    node_dirs.release_kept(folder)
    return Stored(folder, uploaded, bool(logs), record)


def kept_record(marker: dict[str, Any]) -> RunRecord:
    """The record made where the run's folder has none (the kernel's blank, named as the marker names the run)."""
    return lifecycle.blank(str(marker["run_id"]), marker.get("run_uri"), job=marker.get("job"),
                           backend=marker.get("backend"))


def kept_end(marker: dict[str, Any], complete: bool = False) -> lifecycle.KeptEnd:
    """The companion's end as its kept marker says it (the kernel's KeptEnd: written where the record lacks it),
    and its outputs: ``complete`` once the kept files are stored, else not stored (what the node keeps)."""
    run_id = str(marker["run_id"])
    attempt = str(marker.get("attempt") or run_id)
    end = marker.get("end") if isinstance(marker.get("end"), dict) else None
    verdict = None if end is None else AttemptEnd(str(end["status"]), end.get("exit_code"),
                                                   timed_out=bool(end.get("timed_out")),
                                                   stop_requested=bool(end.get("stop_requested")))
    return lifecycle.KeptEnd(attempt, int((end or {}).get("number") or 1), verdict, (end or {}).get("message"),
                             (end or {}).get("at"), int(marker.get("not_stored") or 0), marker.get("kept_at"),
                             complete=complete)


def _metrics(run_uri: str, endpoint: str | None) -> dict[str, Any] | None:
    from .records import metrics_summary

    try:
        return metrics_summary(run_uri, endpoint)
    except Exception:  # noqa: BLE001 - no summary is not a failed repair
        return None

