"""Where a run's things live: its record and logs (its storage folder, else ``$RTJOB_HOME/runs/<id>``) and the
storage root where a run's record is looked for when neither the cluster nor the ledger knows it. One answer,
asked by the ledger memory, the archive, `pull`/`results` and the pipeline planner alike."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..core.errors import RtjobError

if TYPE_CHECKING:
    from ..core.record import RunRecord
    from ..jobspec.project import Settings


def on_this_machine(backend: str) -> bool:
    """Does a run of ``backend`` write its local paths on this machine (the embedded cluster)? An unknown backend
    does not."""
    from ..backends import backend_class

    try:
        return backend_class(backend).placement().embedded
    except RtjobError:
        return False


def writable_here(backend_name: str, uri: str | None) -> bool:
    """Can this machine write (and read) the run's folder? s3:// from anywhere; a plain path only when the run ran
    on this machine (the embedded cluster): on another cluster it is that cluster's disk."""
    if not uri:
        return False
    if uri.startswith("s3://"):
        return True
    if "://" in uri:
        return False
    return on_this_machine(backend_name)


def local_run_dir(run_id: str) -> str:
    """Where a run without storage this machine can write keeps its archived logs."""
    from ..jobspec.project import rtjob_home

    return str(rtjob_home() / "runs" / run_id)


def log_home(record: RunRecord) -> tuple[str, str | None]:
    """(folder, endpoint) that holds the run's ``logs/``: its storage folder, else $RTJOB_HOME/runs/<id>."""
    if writable_here(record.backend, record.storage_uri):
        assert record.storage_uri is not None
        return record.storage_uri, record.storage_endpoint
    return local_run_dir(record.id), None


def default_storage(settings: Settings) -> str | None:
    """The storage a run of the settings' backend writes to when nothing sets one (the embedded cluster's folder)."""
    from ..backends import backend_class

    return backend_class(settings.get("backend")).placement().default_storage


def storage_root(settings: Settings, flag: str | None = None) -> str | None:
    """Where this project's runs write (a --storage flag, the storage setting, else the backend's default; by
    jobspec/storage_root.py's rule, as a run resolved here would): a run's record is looked for there when neither
    the cluster nor the ledger knows the run."""
    from ..backends import backend_class
    from ..jobspec.storage_root import storage_root as pick

    placement = backend_class(settings.get("backend")).placement()
    return pick(flag=flag, setting=settings.get("storage"), default=placement.default_storage,
                embedded=placement.embedded)
