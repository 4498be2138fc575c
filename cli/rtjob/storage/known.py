"""What rtjob reads in a run's folder: checkpoint_* folders, a metrics history (metrics.json, a checkpoint's
metrics.json) or Ray Train's own snapshot. A folder with none of these, and no run record of rtjob's either, holds
nothing rtjob knows: `results` and `pull` of it both say so (exit 2). A run's folder (its record is there) with
files but no checkpoint is pulled whole ("no checkpoint"). A run id whose own storage holds no results is read
from the Ray Train folders its script chose (runs/history/sources.py)."""

from __future__ import annotations

from collections.abc import Iterable

from rtjob_contract import METRICS_FILE, RUN_RECORD_FILE

from ..core.errors import BadInput
from .layout import checkpoint_of
from .raytrain import SNAPSHOT_FILE

NO_HISTORY = f"no metrics history ({METRICS_FILE}, checkpoint_*/{METRICS_FILE} or Ray Train's {SNAPSHOT_FILE})"


def holds_results(rels: Iterable[str]) -> bool:
    """Whether a run folder's files (relative names) hold anything rtjob reads."""
    return any(checkpoint_of(rel) or rel in (METRICS_FILE, SNAPSHOT_FILE) for rel in rels)


def is_run_folder(rels: Iterable[str]) -> bool:
    """Whether a folder is a run's: it holds results rtjob reads, or rtjob's record of the run (a step or a script
    that stores files of its own: pull copies them)."""
    names = list(rels)
    return RUN_RECORD_FILE in names or holds_results(names)


class NothingKnown(BadInput):
    """A run folder with files, none of them one rtjob reads (exit 2, like `results` of it)."""
