"""`rtjob sync RUN_ID`: what a node kept when storage failed at the run's end (storage/node_dirs.py's kept folders),
stored now that storage is back (storage/kept.py), so the run reads complete in every view. On the embedded
cluster the node is this machine; a folder kept on another machine is named with the command to run there."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ...core.errors import RtjobError, Unreachable
from ..memory import find, keep

if TYPE_CHECKING:
    from ...core.record import RunRecord
    from ..events import RunEvents


@dataclass
class Synced:
    run_id: str
    folders: list[dict[str, Any]] = field(default_factory=list)  # {"folder", "files", "log"} per stored folder
    outputs: dict[str, Any] | None = None  # the record's outputs as written

    def to_json(self) -> dict[str, Any]:
        return {"id": self.run_id, "stored": self.folders, "outputs": self.outputs}


def sync_kept(run_id: str, storage_root: str | None, events: RunEvents) -> Synced:
    """Store every kept folder of run ``run_id`` on this machine, oldest first; the ledger's row then holds the
    record as written. Nothing kept here: the record says where the outputs are, if anywhere (exit 3 when they
    are on another node)."""
    from ...storage.kept import store_kept
    from ...storage.node_dirs import kept_folders

    done = Synced(run_id)
    folders = kept_folders(run_id)
    if not folders:
        record = _record(run_id, storage_root)
        outputs = record.outputs if record is not None else None
        if outputs and not outputs.get("complete") and outputs.get("kept_at"):
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


def _record(run_id: str, storage_root: str | None) -> RunRecord | None:
    try:
        return find(run_id, storage_root)
    except RtjobError:
        return None
