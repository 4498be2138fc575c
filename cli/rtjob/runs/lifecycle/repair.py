"""`rtjob sync RUN_ID`: what a node kept when storage failed at the run's end (storage/node_dirs.py's kept folders),
stored now that storage is back (storage/kept.py), so the run reads complete in every view. On the embedded
cluster the node is this machine; a folder kept on another machine is named with the command to run there."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ...core.errors import RtjobError, Unreachable
from ...core.model import RunStatus
from ..memory import find, keep, stored_record

if TYPE_CHECKING:
    from ...backends.base import Backend
    from ...core.record import RunRecord
    from ..events import RunEvents


@dataclass
class Synced:
    run_id: str
    folders: list[dict[str, Any]] = field(default_factory=list)  # {"folder", "files", "log"} per stored folder
    outputs: dict[str, Any] | None = None  # the record's outputs as written

    def to_json(self) -> dict[str, Any]:
        return {"id": self.run_id, "stored": self.folders, "outputs": self.outputs}


SYNC_JOB_WAIT_S = 600.0  # how long `rtjob sync` waits for its jobs on a cluster's nodes


def sync_kept(run_id: str, storage_root: str | None, events: RunEvents,
              backend: Callable[[], Backend] | None = None) -> Synced:
    """Store every kept folder of run ``run_id`` on this machine, oldest first; the ledger's row then holds the
    record as written. Nothing kept here while the record says the outputs are kept on a node: on a cluster whose
    nodes are not this machine, ``backend`` runs the sync there (Backend.store_kept: a job pinned to each node that
    drove an attempt), and this waits for it."""
    from ...storage.kept import store_kept
    from ...storage.node_dirs import kept_folders

    done = Synced(run_id)
    folders = kept_folders(run_id)
    if not folders:
        record = _record(run_id, storage_root)
        outputs = record.outputs if record is not None else None
        if backend is not None and (outputs is None or not outputs.get("complete")):
            chosen = backend()
            if chosen.local_cluster() is None:  # the embedded cluster's nodes are this machine: nothing kept
                _on_the_nodes(chosen, run_id, done, events)
                after = stored_record(record) if record is not None else None  # as the node's job wrote it
                if after is not None:
                    outputs = after.outputs
                    with contextlib.suppress(RtjobError):
                        keep(after, events)
        elif outputs and not outputs.get("complete") and outputs.get("kept_at"):
            raise Unreachable(f"run {run_id}: its outputs are kept at {outputs['kept_at']}, not on this machine: run "
                              f"`rtjob sync {run_id}` on that node")
        done.outputs = outputs
        return done
    written: RunRecord | None = None
    for n, (folder, marker) in enumerate(folders, 1):
        events.note(f"storing {folder} ({marker.get('not_stored', '?')} file(s) kept) in {marker.get('run_uri')}")
        stored = store_kept(folder, marker, events.note, last=n == len(folders))
        done.folders.append({"folder": folder, "files": stored.files, "log": stored.log})
        written = stored.record or written
    if written is not None:
        done.outputs = written.outputs
        with contextlib.suppress(RtjobError):
            keep(written, events)
    return done


def _on_the_nodes(backend: Backend, run_id: str, done: Synced, events: RunEvents) -> None:
    """The sync jobs on the run's nodes, followed to their ends; one that did not store what it found is exit 3
    with its own last line."""
    import time

    for job in backend.store_kept(run_id):
        events.note(f"{job.id}: storing what its node kept of {run_id}")
        deadline = time.monotonic() + SYNC_JOB_WAIT_S
        info = job
        while not info.status.terminal and time.monotonic() < deadline:
            time.sleep(1.0)
            info = backend.status(job.id)
        said = [line for line in backend.last_lines(job.id, 20).splitlines() if line.startswith("rtjob sync: ")]
        for line in said:
            events.note(line.removeprefix("rtjob sync: "))
        if info.status != RunStatus.SUCCEEDED:
            why = said[-1].removeprefix("rtjob sync: ") if said else f"{info.status.value}: {info.message or ''}"
            raise Unreachable(f"{job.id} on the run's node: {why}")
        done.folders.append({"folder": f"{job.id} (on the run's node)", "files": None, "log": None,
                             "said": [line.removeprefix("rtjob sync: ") for line in said]})


def _record(run_id: str, storage_root: str | None) -> RunRecord | None:
    try:
        return find(run_id, storage_root)
    except RtjobError:
        return None
