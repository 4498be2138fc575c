"""Node folders: where a run with remote storage has its local folders on the driver's node.

``<tmp>/rtjob-run-dirs-<uid>/`` (mode 0700: one per user, never shared) holds one folder per run,
``<run id>/``, with ``run/`` (the script's ``RTJOB_RUN_DIR``, synced to the run's storage) and, for a pipeline
step, ``input/`` (``RTJOB_INPUT_DIR``: the step before's output, synced down, never uploaded). The companion
makes a run's folder afresh when an attempt starts (what an earlier attempt left on the node is not used: the run's
storage is), removes it once the run's end is synced, and keeps it when a sync failed; ``rtjob local down``
removes the embedded cluster's. Importable on the cluster: the stdlib only."""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import tempfile

ROOT_PREFIX = "rtjob-run-dirs-"
RUN_SUBDIR = "run"
INPUT_SUBDIR = "input"


def node_root(tmp: str | None = None) -> str:
    """This user's folder of node folders on this machine."""
    return os.path.join(tmp or tempfile.gettempdir(), f"{ROOT_PREFIX}{os.getuid()}")


def _private_root(tmp: str | None = None) -> str:
    """The root, made 0700 if absent; an existing one must be a folder (not a link) this user owns: else OSError."""
    root = node_root(tmp)
    with contextlib.suppress(FileExistsError):
        os.mkdir(root, 0o700)
    st = os.lstat(root)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
        raise PermissionError(f"{root} is not a folder of this user's (a link, or another user's)")
    if stat.S_IMODE(st.st_mode) != 0o700:
        os.chmod(root, 0o700)
    return root


def run_folder(run_id: str, tmp: str | None = None) -> str:
    """The node folder of run ``run_id`` (not made)."""
    if not run_id or "/" in run_id or run_id in (".", ".."):
        raise ValueError(f"{run_id!r}: not a run id")
    return os.path.join(node_root(tmp), run_id)


def fresh_run_folder(run_id: str, tmp: str | None = None) -> str:
    """The run's node folder, empty and private (0700): what an earlier attempt left on this node is removed."""
    _private_root(tmp)
    folder = run_folder(run_id, tmp)
    remove_run_folder(run_id, tmp)
    os.mkdir(folder, 0o700)
    return folder


def remove_run_folder(run_id: str, tmp: str | None = None) -> bool:
    """Remove the run's node folder (True: there was one). A link under its name is unlinked, never followed."""
    folder = run_folder(run_id, tmp)
    try:
        st = os.lstat(folder)
    except FileNotFoundError:
        return False
    if stat.S_ISDIR(st.st_mode):
        shutil.rmtree(folder, ignore_errors=True)
    else:
        with contextlib.suppress(OSError):
            os.unlink(folder)
    return True
