"""Where an unchanged Ray Train script stored its run: the script picks its own `RunConfig(storage_path, name)`,
so rtjob asks Ray (the Train state API: each Train run's job and run_config) and, where Ray keeps no Train
state, reads the driver log's `Checkpoint(filesystem=..., path=...)` lines. Each answer is a run folder URI:
what `rtjob results` and `rtjob pull` read (checkpoint_* folders, checkpoint_manager_snapshot.json)."""

from __future__ import annotations

import re
from typing import Any

# Ray's repr of a checkpoint: Checkpoint(filesystem=local, path=/abs/run/checkpoint_...); on S3 the path has
# no scheme (filesystem=s3, path=bucket/prefix/run/checkpoint_...).
_CHECKPOINT = re.compile(r"Checkpoint\(filesystem=([\w:+-]+), path=([^)\s]+)\)")
_SCHEMES = {"local": "", "s3": "s3://"}


def folders_from_state(runs: list[dict[str, Any]], submission_id: str) -> list[str]:
    """The storage folder (storage_path/name) of each Train run the job ``submission_id`` started, in order."""
    found: list[str] = []
    for run in runs:
        job = run.get("job_details") or {}
        settings = (run.get("run_settings") or {}).get("run_config") or {}
        storage, name = settings.get("storage_path"), settings.get("name") or run.get("name")
        # A custom storage_filesystem has no URI rtjob could read back: leave it to the log's lines.
        if job.get("submission_id") != submission_id or not storage or not name or settings.get("storage_filesystem"):
            continue
        folder = f"{str(storage).rstrip('/')}/{name}"
        if folder not in found:
            found.append(folder)
    return found


def folders_from_log(log_text: str) -> list[str]:
    """The run folders of the checkpoints the driver log names (the checkpoint's parent), in order."""
    found: list[str] = []
    for filesystem, path in _CHECKPOINT.findall(log_text):
        scheme = _SCHEMES.get(filesystem)
        if scheme is None or "/" not in path.strip("/"):
            continue
        folder = scheme + path.rstrip("/").rsplit("/", 1)[0]
        if folder not in found:
            found.append(folder)
    return found
