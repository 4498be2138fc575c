"""``rtjob pull``: a run's checkpoints and its metrics history from storage into a local folder.

- Concurrent: the store moves the bytes (local storage: a thread pool of copies; S3: the first engine of
  engines.py that can serve the endpoint: obstore, the AWS CRT, botocore + s3transfer); sizes and ETags come from
  the listing (no HEAD per file) and every GET carries the listed ETag (If-Match), so a file rewritten mid-pull
  fails instead of landing half-old.
- Resumable: every finished file is recorded in ``DIR/.rtjob/pull.jsonl`` (key, size, ETag, local mtime), so a
  re-pull skips it without reading it; a file with no record is skipped when its size and content match
  (``Store.same_content``: the S3 ETag, or a byte comparison for local storage). A download is written to
  ``NAME.rtjob-partial`` and renamed only once complete and of the listed size: a killed pull leaves no truncated
  file under a real name, and the next pull removes the leftovers (destination.py).
- Safe: a key that would land outside DIR (``..``, ``.``, absolute, empty segments, backslashes, control
  characters, invisible/bidi formatting characters) or on a reserved name, and keys that differ only in case
  (they would overwrite each other on macOS or Windows), are refused and reported (keys.py, pull_plan.py);
  zero-byte folder markers are skipped, and so are FIFOs, sockets and devices in local storage (listed, never
  opened). rtjob's own files in DIR are never written through a symbolic link, and one pull at a time writes
  into DIR (``.rtjob/pull.lock``, removed when it ends).
This module prints nothing: it reports bytes through ``Progress`` and the outcome as a ``PullReport``; the
commands word them (commands/pull_report.py).
"""

from __future__ import annotations

import contextlib
import os
import stat
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ..core.errors import BadInput, RtjobError, Unreachable
from .destination import Manifest, destination_lock, refuse_link, remove_partials
from .keys import printable
from .layout import CheckpointChoice
from .location import Location
from .opening import open_store
from .pull_plan import PullItem, PullPlan, plan_pull
from .retrying import read_patiently
from .s3errors import describe_error, is_denial
from .stores import MANIFEST, PARTIAL_SUFFIX, PULL_DIR, RemoteFile, Store


class Progress(Protocol):
    """How a pull reports the bytes it moves, as they move (the commands draw a bar: commands/pull_report.py)."""

    def start(self, total_bytes: int, files: int) -> None: ...

    def advance(self, nbytes: int) -> None: ...

    def stop(self) -> None: ...


@dataclass
class PullReport:
    source: str
    endpoint: str | None
    destination: str
    checkpoint: str
    checkpoints: list[str]
    available_checkpoints: list[str]
    best: dict[str, Any] | None = None
    files: int = 0
    downloaded: int = 0
    skipped: int = 0
    bytes_total: int = 0
    bytes_downloaded: int = 0
    seconds: float = 0.0
    history: str | None = None
    markers_skipped: int = 0
    partials_removed: int = 0
    refused: list[dict[str, str]] = field(default_factory=list)
    failed: list[dict[str, str]] = field(default_factory=list)
    special_skipped: list[dict[str, str]] = field(default_factory=list)  # not files: exit 0 all the same
    engine: str = ""  # what moved the bytes (stores.Store.engine)

    @property
    def exit_code(self) -> int:
        return 1 if self.refused or self.failed else 0

    def to_json(self) -> dict[str, Any]:
        return {
            "source": self.source, "endpoint": self.endpoint, "destination": self.destination,
            "checkpoint": self.checkpoint, "checkpoints": self.checkpoints,
            "available_checkpoints": self.available_checkpoints, "best": self.best,
            "files": self.files, "downloaded": self.downloaded, "skipped": self.skipped,
            "bytes_total": self.bytes_total, "bytes_downloaded": self.bytes_downloaded,
            "seconds": round(self.seconds, 3), "history": self.history, "markers_skipped": self.markers_skipped,
            "partials_removed": self.partials_removed, "refused": self.refused, "failed": self.failed,
            "special_skipped": self.special_skipped, "engine": self.engine,
        }


def pull(
    location: Location,
    dest: Path,
    choice: CheckpointChoice,
    *,
    endpoint: str | None = None,
    concurrency: int = 16,
    progress: Progress | None = None,
    on_plan: Callable[[PullPlan], None] | None = None,
    run_folder: bool = True,
) -> PullReport:
    """Pull ``location`` into ``dest``; errors reaching storage raise (exit 3), per-file problems are reported.
    ``run_folder``: ``location`` is a run's folder, refused when it holds nothing rtjob knows (False: any folder,
    such as a run's samples/)."""
    start = time.monotonic()
    store = open_store(location, endpoint, concurrency)
    try:
        plan = read_patiently(lambda: plan_pull(store, choice, run_folder))  # a fault that may pass: waited out
        if on_plan is not None:
            on_plan(plan)
        report = _execute(plan, dest, progress)
        report.engine = store.engine
    finally:
        store.close()
    report.seconds = time.monotonic() - start
    return report


def _execute(plan: PullPlan, dest: Path, progress: Progress | None) -> PullReport:
    store = plan.store
    report = PullReport(
        source=store.location.uri, endpoint=store.endpoint, destination=str(dest),
        checkpoint=plan.choice.text(), checkpoints=plan.checkpoints, available_checkpoints=plan.all_checkpoints, best=plan.best,
        markers_skipped=plan.markers,
    )
    report.refused = [{"key": printable(key), "reason": reason} for key, reason in plan.refused]
    report.special_skipped = [{"key": printable(key), "kind": kind} for key, kind in plan.special]
    if dest.exists() and not dest.is_dir():
        raise BadInput(f"--to {dest}: exists and is not a folder")
    dest.mkdir(parents=True, exist_ok=True)
    refuse_link(dest / PULL_DIR)
    refuse_link(dest / MANIFEST)
    with destination_lock(dest):
        _fill(plan, dest, progress, report)
    return report


def _fill(plan: PullPlan, dest: Path, progress: Progress | None, report: PullReport) -> None:
    """The pull into DIR, holding its lock: what is there already, then what is missing or changed."""
    store = plan.store
    report.partials_removed = remove_partials(dest)
    manifest = Manifest(dest)
    todo = _missing(plan, dest, manifest, report)

    lock = threading.Lock()
    by_tmp: dict[Path, tuple[PullItem, Path]] = {}
    jobs: list[tuple[RemoteFile, Path]] = []
    made: set[Path] = set()
    for item, target in sorted(todo, key=lambda t: -t[0].file.size):  # big files first: they take longest
        try:
            if target.parent not in made:
                target.parent.mkdir(parents=True, exist_ok=True)
                made.add(target.parent)
        except OSError as exc:
            report.failed.append({"key": printable(item.file.key), "error": f"cannot create its folder: {exc}"})
            continue
        tmp = target.with_name(target.name + PARTIAL_SUFFIX)
        by_tmp[tmp] = (item, target)
        jobs.append((item.file, tmp))

    def on_done(file: RemoteFile, tmp: Path, error: BaseException | None) -> None:
        item, target = by_tmp[tmp]
        code, problem = describe_error(error) if error is not None else ("", None)
        if problem is None:
            try:
                size = os.path.getsize(tmp)
                if size != file.size:
                    code, problem = "SizeMismatch", f"size mismatch: got {size} bytes, the listing says {file.size}"
                else:
                    os.replace(tmp, target)
                    manifest.record(item, os.stat(target))
            except OSError as exc:
                code, problem = type(exc).__name__, f"{type(exc).__name__}: {exc.strerror or exc}"
        if problem is not None:
            with contextlib.suppress(OSError):
                os.remove(tmp)
        with lock:
            if problem is None:
                report.downloaded += 1
                report.bytes_downloaded += file.size
            else:
                report.failed.append({"key": printable(file.key), "error": problem, "code": code})

    if jobs:
        if progress is not None:
            progress.start(sum(f.size for f, _ in jobs), len(jobs))
        try:
            store.download(jobs, progress.advance if progress is not None else None, on_done)
        except RtjobError:
            raise
        except Exception as exc:
            problem = store.translate_error(exc)
            if problem is None:
                raise
            raise problem from None
        finally:
            if progress is not None:
                progress.stop()
            manifest.close(dest)
            for tmp in by_tmp:  # nothing partial stays behind, whatever happened
                if tmp.exists():
                    tmp.unlink()
    else:
        manifest.close(dest)
    if report.failed and not report.downloaded and all(is_denial(f.get("code", "")) for f in report.failed):
        # Listing was allowed but reading is not: that is a denial, not a flaky transfer (one line, exit 3).
        first = report.failed[0]
        raise Unreachable(f"access denied reading {store.describe()} ({len(report.failed)} file(s)): "
                          f"{first['error']}")


def _missing(plan: PullPlan, dest: Path, manifest: Manifest, report: PullReport) -> list[tuple[PullItem, Path]]:
    """The plan's files that are not in DIR as the storage has them (counted in the report), with their targets."""
    root = os.path.realpath(dest)
    todo: list[tuple[PullItem, Path]] = []
    real_dirs: dict[Path, str] = {}  # a folder's real path, resolved once for all the files in it
    for item in plan.items:
        target = dest / item.rel
        real = _real_path(target, real_dirs)
        if not real.startswith(root + os.sep):  # a link already in DIR would lead out of it
            report.refused.append({"key": printable(item.file.key), "reason": "would land outside the destination"})
            continue
        report.files += 1
        report.bytes_total += item.file.size
        if _unchanged(item, target, manifest, plan.store):
            report.skipped += 1
        else:
            todo.append((item, target))
    if report.history is None and plan.history_rel:
        report.history = str(dest / plan.history_rel)
    return todo


def _real_path(target: Path, real_dirs: dict[Path, str]) -> str:
    """os.path.realpath(target), with its folder's resolved once per folder (thousands of shards share one)."""
    folder = target.parent
    real_dir = real_dirs.get(folder)
    if real_dir is None:
        real_dir = real_dirs[folder] = os.path.realpath(folder)
    if os.path.islink(target):
        return os.path.realpath(target)
    return os.path.join(real_dir, target.name)


def _unchanged(item: PullItem, target: Path, manifest: Manifest, store: Store) -> bool:
    try:
        st = os.stat(target)
    except OSError:
        return False
    if not stat.S_ISREG(st.st_mode) or st.st_size != item.file.size:
        return False
    if manifest.matches(item, st):
        return True
    # Not pulled by rtjob (or changed since): compare contents before trusting it.
    same = store.same_content(item.file, target)
    if same:
        manifest.record(item, st)
    return same
