"""The run's end waits for storage: the companion does not exit before the run's files and its record's end are
stored, up to the storage grace (rtjob_contract.ENV_STORAGE_GRACE_S, 600 s by default). The order keeps the
promise that a run is never called complete before its files are stored: every stage flushed to the end, then the
end written with ``outputs: complete``, then the node folder removed.

Past the grace (or a SIGTERM while it waits: the cluster is going) the end says "outputs not stored: N files, kept at
NODE:FOLDER", carried three ways, since the record may not take it: the kept marker in the node folder (which no
remover deletes), a last ``rtjob-event: outputs_not_stored {...}`` line in the driver log (clients read it through
the cluster), and the record, owed, as soon as storage takes writes again while the companion still runs, else
by `rtjob sync ID` (storage/kept.py), which stores what was kept."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

import rtjob_contract as contract

from ..storage.retrying import Backoff

if TYPE_CHECKING:
    from .child import ChildExit
    from .node_folder import NodeFolder
    from .outcome import Outcome
    from .stages import Stages


class Companion(Protocol):
    """What the end uses of the companion (companion.py), which sequences it."""

    run_id: str
    attempt: str
    run_uri: str | None
    env: Mapping[str, str]
    secrets: list[str]
    terminated: bool
    term_while_ending: bool
    time_limit: float | None
    outcome: Outcome | None
    stages: Stages
    folder: NodeFolder | None

    def say_line(self, text: str) -> None: ...

    def guard(self, what: str, call: Callable[[], object]) -> None: ...


def grace_s(env: Mapping[str, str]) -> float:
    try:
        return max(0.0, float(env.get(contract.ENV_STORAGE_GRACE_S) or contract.STORAGE_GRACE_S))
    except ValueError:
        return contract.STORAGE_GRACE_S


def marker_of(companion: Companion, missing: list[str], storing: bool) -> dict[str, Any]:
    """The kept marker's fields (node_folder.mark adds where and when)."""
    outcome = companion.outcome
    return {"run_id": companion.run_id, "attempt": companion.attempt, "run_uri": companion.run_uri,
            "endpoint": os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL"),
            "job": companion.env.get(contract.ENV_JOB_NAME), "backend": companion.env.get(contract.ENV_BACKEND),
            "storing": storing, "not_stored": len(missing), "files": missing[:1000],
            "end": outcome.end if outcome is not None else None,
            "record_stored": outcome is not None and not outcome.owed}


def store_the_end(companion: Companion, ended: ChildExit, cpu_s: float) -> None:
    """The companion's end (see the module's text)."""
    from .stages import wait_for

    outcome, stages, folder, say = companion.outcome, companion.stages, companion.folder, companion.say_line
    assert outcome is not None
    grace = grace_s(companion.env)
    deadline = time.monotonic() + grace
    backoff = Backoff()
    said: list[bool] = []
    said_refused: list[bool] = []

    def still() -> bool:  # stop waiting: the cluster is going, or storage refuses for good
        refused = stages.refused() or (outcome.fault.message if outcome.fault is not None
                                       and not outcome.fault.transient else None)
        if refused and not said_refused:
            said_refused.append(True)
            say(f"storage refuses the run's writes ({refused}): not waiting for it")
        return companion.term_while_ending or bool(refused)

    def waiting() -> float:
        if not said:
            said.append(True)
            say(f"storage is not taking the run's files or its end: waiting up to {grace:g}s "
                f"({contract.ENV_STORAGE_GRACE_S}) for them to be stored")
            if folder is not None:
                folder.mark(marker_of(companion, stages.not_stored(), storing=True))
        return backoff.next()

    flush: Callable[[], None] = lambda: stages.flush(companion.guard, final=True)  # noqa: E731
    files_stored = wait_for(lambda: stages.stored, deadline, still, flush, waiting)
    missing = [] if files_stored else stages.not_stored()
    logs = stages.parts.whole_names() if stages.parts is not None and stages.parts.stored else []
    notes = list(stages.sync.notes) if stages.sync is not None else []
    kept_at = folder.kept_at if folder is not None else None
    outcome.ended(ended, companion.terminated, companion.time_limit, logs, companion.secrets, cpu_s, notes,
                  outputs=(files_stored, len(missing), None if files_stored else kept_at))
    if files_stored:  # the end is the last thing stored: waited for within the same grace
        wait_for(lambda: not outcome.owed, deadline, still, outcome.settle, waiting)
    else:
        outcome.settle()
    if files_stored and not outcome.owed:
        if said:
            say("the run's files and end are stored")
        if folder is not None:
            folder.release()
        stages.close()
        return
    _kept(companion, missing, kept_at)


def _kept(companion: Companion, missing: list[str], kept_at: str | None) -> None:
    """Past the grace: the node keeps the only copy, and says so where a client can read it."""
    folder, stages, say = companion.folder, companion.stages, companion.say_line
    if folder is not None and stages.parts is not None:
        companion.guard("the kept log", lambda: stages.parts.keep(folder.log_dir))  # type: ignore[union-attr]
    marker = marker_of(companion, missing, storing=False)
    if folder is not None:
        companion.guard("the kept marker", lambda: folder.mark(marker))
    stages.close()
    status = (marker.get("end") or {}).get("status") or "ENDED"
    where = f", kept at {kept_at}" if kept_at else ""
    record = "" if marker["record_stored"] or not missing else "; its record's end is not stored either"
    what = f"{len(missing)} file(s)" if missing else "its end only (every file is stored)"
    say(f"{status}, outputs not stored: {what}{where}{record} "
        f"(once storage is back: rtjob sync {companion.run_id})")
    line = {"run_id": companion.run_id, "attempt": companion.attempt, "status": status,
            "not_stored": len(missing), "kept_at": kept_at, "record_stored": marker["record_stored"]}
    try:
        sys.stdout.write(f"{contract.EVENT_LINE_PREFIX} {contract.EVENT_OUTPUTS_NOT_STORED} "
                         f"{json.dumps(line, separators=(',', ':'))}\n")
        sys.stdout.flush()
    except OSError:
        pass
