"""Node folders: where a run with remote storage has its local folders on the driver's node.

``<tmp>/rtjob-run-dirs-<uid>/`` (mode 0700: one per user, never shared) holds one folder per run,
``<run id>/``, with ``run/`` (the script's ``RTJOB_RUN_DIR``, synced to the run's storage) and, for a pipeline
step, ``input/`` (``RTJOB_INPUT_DIR``: the step before's output, synced down, never uploaded). The companion
makes a run's folder afresh when an attempt starts (what an earlier attempt left on the node is not used: the run's
storage is), removes it once the run's end is synced; ``rtjob local down`` removes the embedded cluster's.

A folder that holds what the run's storage lacks carries the kept marker (rtjob_contract.KEPT_MARKER_FILE, JSON:
the run, its attempt, its storage, how the script ended, what is not stored): it is the only copy, so no remover
deletes it (``remove_run_folder`` leaves it; a retry's ``fresh_run_folder`` moves it aside to
``<run id>.kept-<n>/``), until `rtjob sync RUN_ID` (storage/kept.py) has stored it. Importable on the cluster: the
stdlib and rtjob_contract only."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import stat
import tempfile
from typing import Any

import rtjob_contract as contract

ROOT_PREFIX = "rtjob-run-dirs-"
RUN_SUBDIR = "run"
INPUT_SUBDIR = "input"
LOG_SUBDIR = "log"  # a kept folder's copy of the attempt's masked log (what its parts could not store)
KEPT_SEP = ".kept-"


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
    """The run's node folder, empty and private (0700): what an earlier attempt left on this node is removed,
    unless it is kept (the only copy of what storage lacks): that one is moved aside, whole, to
    ``<run id>.kept-<n>``."""
    root = _private_root(tmp)
    folder = run_folder(run_id, tmp)
    if read_kept(folder) is not None:
        n = 1
        while os.path.lexists(os.path.join(root, f"{run_id}{KEPT_SEP}{n}")):
            n += 1
        aside = os.path.join(root, f"{run_id}{KEPT_SEP}{n}")
        os.rename(folder, aside)
        marker = read_kept(aside) or {}
        write_kept(aside, {**marker, "kept_at": kept_at(aside)})
    remove_run_folder(run_id, tmp)
    os.mkdir(folder, 0o700)
    return folder


def remove_run_folder(run_id: str, tmp: str | None = None) -> bool:
    """Remove the run's node folder (True: it was removed). A kept one is left (False). A link under its name is
    unlinked, never followed."""
    folder = run_folder(run_id, tmp)
    try:
        st = os.lstat(folder)
    except FileNotFoundError:
        return False
    if stat.S_ISDIR(st.st_mode):
        if read_kept(folder) is not None:
            return False
        shutil.rmtree(folder, ignore_errors=True)
    else:
        with contextlib.suppress(OSError):
            os.unlink(folder)
    return True


def kept_at(folder: str) -> str:
    """How a kept folder is named to a person: ``NODE:FOLDER``."""
    return f"{os.uname().nodename}:{folder}"


def write_kept(folder: str, marker: dict[str, Any]) -> None:
    """The kept marker, written atomically (a crash leaves the old one or the new one, never half of one)."""
    path = os.path.join(folder, contract.KEPT_MARKER_FILE)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(marker, f, indent=1, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def read_kept(folder: str) -> dict[str, Any] | None:
    """The folder's kept marker (None: not kept). A marker that cannot be read still keeps the folder."""
    path = os.path.join(folder, contract.KEPT_MARKER_FILE)
    if not os.path.lexists(path):
        return None
    try:
        with open(path, encoding="utf-8") as f:
            marker = json.load(f)
    except (OSError, ValueError):
        return {}
    return marker if isinstance(marker, dict) else {}


def release_kept(folder: str) -> None:
    """Everything the folder held is stored: the marker goes, then the folder."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(os.path.join(folder, contract.KEPT_MARKER_FILE))
    shutil.rmtree(folder, ignore_errors=True)


def kept_folders(run_id: str | None = None, tmp: str | None = None) -> list[tuple[str, dict[str, Any]]]:
    """(folder, marker) of every kept node folder on this machine (of run ``run_id`` only, when given)."""
    root = node_root(tmp)
    try:
        names = sorted(os.listdir(root))
    except OSError:
        return []
    found = []
    for name in names:
        folder = os.path.join(root, name)
        if os.path.islink(folder) or not os.path.isdir(folder):
            continue
        marker = read_kept(folder)
        if marker is None:
            continue
        owner = marker.get("run_id") or name.split(KEPT_SEP)[0]
        if run_id is None or owner == run_id:
            found.append((folder, marker))
    return found
