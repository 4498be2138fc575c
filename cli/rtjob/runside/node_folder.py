"""The run's folders on the driver's node (remote storage only: storage/node_dirs.py) as the companion uses them:
made afresh for the attempt (a kept one of an earlier attempt moved aside, never emptied), marked kept whenever
they hold what the run's storage lacks, and removed only once everything in them is stored."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from typing import Any

import rtjob_contract as contract

from ..core.clock import now_iso
from ..storage import node_dirs


class NodeFolder:
    """``path``: the run's node folder, with ``run_dir`` (RTJOB_RUN_DIR) and a step's ``input_dir``."""

    def __init__(self, path: str, run_dir: str, input_dir: str | None) -> None:
        self.path, self.run_dir, self.input_dir = path, run_dir, input_dir
        self.marked = False  # the kept marker is there (this companion wrote it)

    @classmethod
    def make(cls, run_id: str, remote_input: bool, say: Callable[[str], None]) -> NodeFolder:
        try:
            path = node_dirs.fresh_run_folder(run_id)
        except (OSError, ValueError) as exc:  # a root that is not this user's: a private folder of its own
            path = tempfile.mkdtemp(prefix=f"rtjob-run-{os.getuid()}-")
            say(f"node folder in {path} ({exc})")
        for kept, marker in node_dirs.kept_folders(run_id):
            if kept != path:
                say(f"an earlier attempt's node folder {kept} is kept ({marker.get('not_stored', '?')} file(s) not "
                    f"stored): `rtjob sync {run_id}` stores it")
        run_dir = os.path.join(path, node_dirs.RUN_SUBDIR)
        os.mkdir(run_dir, 0o700)
        input_dir = None
        if remote_input:
            input_dir = os.path.join(path, node_dirs.INPUT_SUBDIR)
            os.mkdir(input_dir, 0o700)
        return cls(path, run_dir, input_dir)

    @property
    def kept_at(self) -> str:
        return node_dirs.kept_at(self.path)

    @property
    def log_dir(self) -> str:
        return os.path.join(self.path, node_dirs.LOG_SUBDIR)

    def mark(self, marker: dict[str, Any]) -> None:
        """The kept marker: this folder holds what the run's storage lacks (no remover deletes it now)."""
        node_dirs.write_kept(self.path, {**marker, "kept_at": self.kept_at, "at": now_iso(), "pid": os.getpid()})
        self.marked = True

    def unmark(self) -> None:
        """Storage caught up while the run goes: the folder is an ordinary node folder again."""
        if self.marked:
            with_marker = os.path.join(self.path, contract.KEPT_MARKER_FILE)
            if os.path.lexists(with_marker):
                os.unlink(with_marker)
            self.marked = False

    def release(self) -> None:
        """Everything in it is stored: the folder goes."""
        node_dirs.release_kept(self.path)
