"""How ``rtjob pull`` reads on a terminal: its progress bar (rich, on stderr), the summary of what it pulled and
one line per file it skipped, refused or could not pull. storage/pull.py reports the facts; this words them."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from ..core.redact import redact
from .describe import size
from .printing import progress_console, say

if TYPE_CHECKING:
    from ..storage.pull import PullReport


class RichProgress:
    """A progress bar on stderr (only when stderr is a terminal)."""

    def __init__(self, label: str) -> None:
        self.label = label
        self._progress: Any = None
        self._task: Any = None

    def start(self, total_bytes: int, files: int) -> None:
        from rich.progress import (
            BarColumn,
            DownloadColumn,
            Progress,
            TextColumn,
            TimeRemainingColumn,
            TransferSpeedColumn,
        )

        self._progress = Progress(
            TextColumn("[bold]{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
            TimeRemainingColumn(), console=progress_console(), transient=True,
        )
        self._progress.start()
        self._task = self._progress.add_task(f"{self.label} ({files} files)", total=total_bytes)

    def advance(self, nbytes: int) -> None:
        if self._progress is not None:
            self._progress.advance(self._task, nbytes)

    def stop(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None


def default_progress(label: str) -> RichProgress | None:
    return RichProgress(label) if sys.stderr.isatty() else None


def summary_lines(report: PullReport) -> list[str]:
    """What a pull did, in four lines."""
    # A rate over a few kilobytes measures start-up, not transfer: shown from a megabyte on.
    fast = report.seconds > 0 and report.bytes_downloaded >= 1e6
    rate = f", {size(report.bytes_downloaded / report.seconds)}/s" if fast else ""
    if report.best:
        best = report.best
        chosen = f"{best['checkpoint']} ({best['metric']}={best['value']:.6g}, {best['mode']})"
    else:
        chosen = ", ".join(report.checkpoints) or "none"
    if not report.available_checkpoints:  # a run that stored files but no checkpoint: those files were pulled
        checkpoint = "checkpoint: no checkpoint (the run stored no checkpoint_* folder)"
    else:
        checkpoint = f"checkpoint: {report.checkpoint} → {chosen} (of {len(report.available_checkpoints)} stored)"
    lines = [
        f"pulled {report.source} → {report.destination}",
        checkpoint,
        f"files: {report.files} ({report.downloaded} downloaded, {report.skipped} unchanged), "
        f"{size(report.bytes_downloaded)} of {size(report.bytes_total)} in {report.seconds:.1f}s{rate}",
    ]
    if report.history:
        lines.append(f"history: {report.history} (rtjob results {report.destination})")
    else:
        lines.append("history: none (the run stored no metrics.json)")
    return lines


def say_problems(report: PullReport, secrets: list[str]) -> None:
    """Each file skipped, refused or failed, one line each on stderr, and what the user may do about them."""
    for item in report.special_skipped:
        say(redact(f"skipped {item['key']}: a {item['kind']}, not a file (never opened)", secrets))
    for item in report.refused:
        say(redact(f"refused {item['key']}: {item['reason']}", secrets))
    for item in report.failed:
        say(redact(f"failed {item['key']}: {item['error']}", secrets))
    if report.refused:
        say(f"{len(report.refused)} key(s) refused: nothing was written outside {report.destination}")
    if report.failed:
        say(f"{len(report.failed)} file(s) failed; run the same pull again to retry them")
