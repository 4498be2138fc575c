"""Where a project's runs write: one rule, used when a job is resolved (resolve.py, with the job's `storage:`) and
when a run's record is looked for in the project's storage (runs/places.storage_root, without a job)."""

from __future__ import annotations

from pathlib import Path

from ..core.errors import BadInput


def storage_root(*, flag: str | None, setting: str | None, default: str | None, embedded: bool,
                 job: str | None = None) -> str | None:
    """The --storage ``flag``, else the storage ``setting``, else the ``job``'s `storage:`, else the backend's
    ``default`` (None: the runs write nowhere). ``file://`` is stripped (Ray Train takes a plain absolute path); a
    relative path is made absolute from the current folder on the embedded cluster (``embedded``) and refused
    elsewhere (the job runs in a temporary copy of its working dir: the path would land there); a trailing "/"
    is dropped."""
    root = flag or setting or job
    if root and root.startswith("file://"):
        root = root[len("file://"):]
    root = root or default
    if root and "://" not in root and not Path(root).is_absolute():
        if not embedded:
            raise BadInput(f"storage {root!r}: use a URI (s3://bucket/prefix) or an absolute path on the cluster")
        root = str(Path(root).resolve())
    return (root or "").rstrip("/") or None
