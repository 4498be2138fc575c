"""How a run's request and files read to people: sizes, the job's own command line, where RTJOB_RUN_DIR is.
Pure formatting (printing.py prints), split from printing.py to keep each under its budget."""

from __future__ import annotations

from typing import Any


def size(nbytes: float) -> str:
    """Bytes as people read them at every scale: 0 B, 812 B, 12.4 kB, 3.1 MB, 1.25 GB (decimal units)."""
    if nbytes < 1000:
        return f"{nbytes:.0f} B"
    for unit in ("kB", "MB", "GB", "TB"):
        nbytes /= 1000
        if nbytes < 1000 or unit == "TB":
            return f"{nbytes:.3g} {unit}" if nbytes < 100 else f"{nbytes:.0f} {unit}"
    raise AssertionError("unreachable")


def command_text(request: dict[str, Any] | None) -> str | None:
    """The job's own command line in a recorded request (what the run's companion wraps), None if it has none."""
    from ..backends.packaging import script_entrypoint

    def find(value: Any) -> str | None:
        if isinstance(value, dict):
            if isinstance(value.get("entrypoint"), str):
                return str(value["entrypoint"])
            for item in value.values():
                found = find(item)
                if found:
                    return found
        return None

    entrypoint = find(request)
    return script_entrypoint(entrypoint) if entrypoint else None


def run_dir_of(storage_uri: str, run_id: str) -> str:
    """The RTJOB_RUN_DIR the run's script gets: the storage folder itself when it is a folder, else a local folder on
    the driver's node (storage/node_dirs.py) that the run's companion syncs to the storage (RTJOB_RUN_URI)."""
    from ..storage.node_dirs import ROOT_PREFIX, RUN_SUBDIR

    return storage_uri if "://" not in storage_uri else f"$TMPDIR/{ROOT_PREFIX}<uid>/{run_id}/{RUN_SUBDIR}"


def run_dir_text(storage_uri: str, run_id: str) -> str:
    """RTJOB_RUN_DIR as people read it, beside the storage it lands in (RTJOB_RUN_URI)."""
    if "://" not in storage_uri:
        return "the storage folder itself (RTJOB_RUN_DIR = RTJOB_RUN_URI)"
    return f"{run_dir_of(storage_uri, run_id)} on the driver's node (RTJOB_RUN_DIR), synced to the storage (RTJOB_RUN_URI)"
