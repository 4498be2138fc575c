"""What rtjob reads in a run's folder: checkpoint_* folders, a metrics history (metrics.json, a checkpoint's
metrics.json) or Ray Train's own snapshot. A folder with none of these holds nothing rtjob knows: `results` and
`pull` of it both say so (exit 2), and a run id whose own storage is such a folder is read from the Ray Train
folders its script chose (runs/sources.py)."""

from __future__ import annotations

from collections.abc import Iterable

from rtjob_contract import METRICS_FILE

from ..core.errors import BadInput
from .layout import checkpoint_of
from .raytrain import SNAPSHOT_FILE

NO_HISTORY = f"no metrics history ({METRICS_FILE}, checkpoint_*/{METRICS_FILE} or Ray Train's {SNAPSHOT_FILE})"


def holds_results(rels: Iterable[str]) -> bool:
    """Whether a run folder's files (relative names) hold anything rtjob reads."""
    return any(checkpoint_of(rel) or rel in (METRICS_FILE, SNAPSHOT_FILE) for rel in rels)


class NothingKnown(BadInput):
    """A run folder with files, none of them one rtjob reads (exit 2, like `results` of it)."""
