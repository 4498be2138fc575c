"""``rtjob pull``: a run's checkpoints and its metrics history from storage into a local folder.

- Concurrent: large files through s3transfer (boto3's transfer manager, concurrent ranged GETs), small ones by
  one GET each on a thread pool beside it; sizes and ETags come from the listing (no HEAD per file) and every
  GET carries the listed ETag (If-Match), so a file rewritten mid-pull fails instead of landing half-old.
  Local storage is copied by a thread pool.
- Resumable: every finished file is recorded in ``DIR/.rtjob-pull.jsonl`` (key, size, ETag, local mtime), so a
  re-pull skips it without reading it; a file with no record is skipped when its size and content hash (the
  S3 ETag, or a byte comparison for local storage) match. A download is written to ``NAME.rtjob-partial`` and
  renamed only once complete and of the listed size: a killed pull leaves no truncated file under a real name,
  and the next pull removes the leftovers.
- Safe: a key that would land outside DIR (``..``, ``.``, absolute, empty segments, backslashes, control
  characters) or on a reserved name is refused and reported; zero-byte folder markers are skipped.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import stat
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from rtjob_contract import METRICS_FILE

from ..core.errors import BadInput, RtjobError, Unreachable
from .layout import CheckpointChoice, checkpoint_of, find_history, last_metrics, natural_key, read_json_files
from .location import Location
from .stores import (
    MANIFEST,
    PARTIAL_SUFFIX,
    RemoteFile,
    S3Store,
    Store,
    describe_error,
    is_denial,
    open_store,
)


def unsafe_reason(rel: str) -> str | None:
    """Why a stored name must not become a local path (None: it is safe under the destination)."""
    if rel == "":
        return "empty name"
    if rel.startswith("/"):
        return "absolute path"
    if "\\" in rel:
        return "backslash in the name"
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in rel):
        return "control character in the name"
    parts = rel.split("/")
    for part in parts:
        if part == "":
            return "empty path segment"
        if part == "..":
            return "'..' segment"
        if part == ".":
            return "'.' segment"
        if len(part.encode("utf-8", "surrogateescape")) > 255:
            return "name longer than 255 bytes"
    if rel == MANIFEST or any(PARTIAL_SUFFIX in part for part in parts):
        return "reserved name (rtjob's own bookkeeping)"
    return None


def printable(text: str) -> str:
    """A stored name as it may be printed: control characters escaped (no terminal escapes from a key)."""
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in text)


@dataclass(frozen=True)
class PullItem:
    file: RemoteFile
    rel: str  # where it lands under the destination


@dataclass
class PullPlan:
    store: Store
    items: list[PullItem]
    checkpoints: list[str]
    all_checkpoints: list[str]
    history_rel: str | None
    refused: list[tuple[str, str]]
    markers: int
    choice: CheckpointChoice
    best: dict[str, Any] | None = None


def plan_pull(store: Store, choice: CheckpointChoice) -> PullPlan:
    """List the location and decide what to pull (pure but for the listing and, for best, metrics reads)."""
    files = store.list_files()
    refused: list[tuple[str, str]] = list(store.refused)
    if not files and not refused:
        raise BadInput(f"nothing stored at {store.describe()}")
    good: list[RemoteFile] = []
    markers = 0
    for item in files:
        if item.size == 0 and (item.rel == "" or item.rel.endswith("/")):
            markers += 1  # a zero-byte "folder" key: nothing to write
            continue
        reason = unsafe_reason(item.rel)
        if reason:
            refused.append((item.key, reason))
        else:
            good.append(item)
    # A name that is both a file and a folder ("a" and "a/b") cannot be written as both.
    folders = {item.rel.rsplit("/", i)[0] for item in good for i in range(1, item.rel.count("/") + 1)}
    conflicts = {item.rel for item in good if item.rel in folders}
    for item in good:
        if item.rel in conflicts:
            refused.append((item.key, "both a file and a folder"))
    good = [item for item in good if item.rel not in conflicts]

    by_ckpt: dict[str, list[RemoteFile]] = {}
    run_files: list[RemoteFile] = []
    for item in good:
        ckpt = checkpoint_of(item.rel)
        if ckpt:
            by_ckpt.setdefault(ckpt, []).append(item)
        else:
            run_files.append(item)
    names = sorted(by_ckpt, key=natural_key)
    best: dict[str, Any] | None = None
    if choice.kind == "all":
        chosen = names
    elif choice.kind == "latest":
        chosen = names[-1:]
    else:
        if not names:
            raise BadInput(f"--checkpoint {choice.text()}: no checkpoint_* folders at {store.describe()}")
        chosen, best = _best(store, by_ckpt, names, choice)
    items = [PullItem(item, item.rel) for item in run_files]
    for name in chosen:
        items += [PullItem(item, item.rel) for item in by_ckpt[name]]
    history = find_history(good)
    history_rel: str | None = None
    if history is not None:
        history_rel = METRICS_FILE
        if history.rel != METRICS_FILE:  # the newest checkpoint's history, also as DIR/metrics.json
            items.append(PullItem(history, METRICS_FILE))
    return PullPlan(store, items, chosen, names, history_rel, refused, markers, choice, best)


def _best(store: Store, by_ckpt: dict[str, list[RemoteFile]], names: list[str],
          choice: CheckpointChoice) -> tuple[list[str], dict[str, Any]]:
    wanted = {f"{name}/{METRICS_FILE}": name for name in names}
    metric_files = [item for name in names for item in by_ckpt[name] if item.rel in wanted]
    values = read_json_files(store, metric_files)
    scores: list[tuple[float, int, str]] = []
    seen: set[str] = set()
    for rel, data in values.items():
        metrics = last_metrics(data) or {}
        seen.update(metrics)
        value = metrics.get(choice.metric)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            name = wanted[rel]
            scores.append((float(value), names.index(name), name))
    if not scores:
        if not values:
            raise BadInput(f"--checkpoint {choice.text()}: no checkpoint has a {METRICS_FILE} to choose by")
        known = ", ".join(sorted(k for k in seen if k != "epoch")) or "none"
        raise BadInput(f"--checkpoint {choice.text()}: no checkpoint reports {choice.metric!r} (metrics: {known})")
    # Ties go to the later checkpoint.
    if choice.mode == "min":
        value, _, name = min(scores, key=lambda s: (s[0], -s[1]))
    else:
        value, _, name = max(scores, key=lambda s: (s[0], s[1]))
    return [name], {"metric": choice.metric, "mode": choice.mode, "value": value, "checkpoint": name}


# ---------------------------------------------------------------------------------------------
# The local side: manifest, partial files, containment


class Manifest:
    """What earlier pulls wrote into DIR: rel → {key, size, etag, mtime_ns}. Appended as files finish."""

    def __init__(self, dest: Path) -> None:
        self.path = dest / MANIFEST
        self.entries: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()
        self._fh: Any = None
        try:
            with open(self.path, encoding="utf-8") as f:
                for line in f:
                    try:
                        entry = json.loads(line)
                    except ValueError:
                        continue  # a line cut by a killed pull
                    if isinstance(entry, dict) and isinstance(entry.get("rel"), str):
                        self.entries[entry["rel"]] = entry
        except FileNotFoundError:
            pass

    def matches(self, item: PullItem, st: os.stat_result) -> bool:
        entry = self.entries.get(item.rel)
        return bool(
            entry
            and entry.get("key") == item.file.key
            and entry.get("etag") == item.file.etag
            and entry.get("size") == item.file.size
            and entry.get("mtime_ns") == st.st_mtime_ns
        )

    def record(self, item: PullItem, st: os.stat_result) -> None:
        entry = {"rel": item.rel, "key": item.file.key, "size": item.file.size, "etag": item.file.etag,
                 "mtime_ns": st.st_mtime_ns}
        with self._lock:
            self.entries[item.rel] = entry
            if self._fh is None:
                self._fh = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 (closed in close())
            self._fh.write(json.dumps(entry) + "\n")
            self._fh.flush()

    def close(self, dest: Path) -> None:
        """Rewrite the manifest with one line per file that is still as recorded."""
        with self._lock:
            if self._fh is not None:
                self._fh.close()
                self._fh = None
            keep = []
            for rel, entry in sorted(self.entries.items()):
                try:
                    st = os.stat(dest / rel)
                except OSError:
                    continue
                if st.st_size == entry.get("size") and st.st_mtime_ns == entry.get("mtime_ns"):
                    keep.append(entry)
            if not keep and not self.path.exists():
                return
            tmp = self.path.with_name(self.path.name + PARTIAL_SUFFIX)
            with open(tmp, "w", encoding="utf-8") as f:
                f.writelines(json.dumps(entry) + "\n" for entry in keep)
            os.replace(tmp, self.path)


def remove_partials(dest: Path) -> int:
    """Delete leftovers of an interrupted pull (ours: NAME.rtjob-partial, s3transfer's: NAME.rtjob-partial.XXXX)."""
    removed = 0
    for dirpath, _dirs, filenames in os.walk(dest):
        for name in filenames:
            if PARTIAL_SUFFIX in name:
                try:
                    os.remove(os.path.join(dirpath, name))
                    removed += 1
                except OSError:
                    pass
    return removed


def etag_matches(path: Path, size: int, etag: str) -> bool:
    """Whether a local file has this S3 ETag (plain MD5, or a multipart ETag for a common part size)."""
    import hashlib

    etag = etag.strip('"').lower()
    digest, _, count = etag.partition("-")
    if len(digest) != 32:
        return False  # not an MD5-based ETag (e.g. SSE-KMS): cannot be checked locally
    if not count:
        md5 = hashlib.md5(usedforsecurity=False)
        with open(path, "rb") as f:
            while chunk := f.read(1 << 20):
                md5.update(chunk)
        return md5.hexdigest() == digest
    parts = int(count) if count.isdigit() else 0
    if parts < 1:
        return False
    mib = 1024 * 1024
    candidates = [size] if parts == 1 else []
    candidates += [n * mib for n in (5, 8, 10, 16, 32, 64, 100, 128, 256, 512)]
    candidates.append(math.ceil(size / parts / mib) * mib)
    tried = 0
    for part_size in dict.fromkeys(candidates):
        if part_size <= 0 or max(1, math.ceil(size / part_size)) != parts:
            continue
        tried += 1
        if tried > 3:
            break
        outer = hashlib.md5(usedforsecurity=False)
        with open(path, "rb") as f:
            for _ in range(parts):
                inner = hashlib.md5(usedforsecurity=False)
                left = part_size
                while left > 0 and (chunk := f.read(min(left, 1 << 20))):
                    inner.update(chunk)
                    left -= len(chunk)
                outer.update(inner.digest())
        if outer.hexdigest() == digest:
            return True
    return False


# ---------------------------------------------------------------------------------------------
# Progress


class Progress(Protocol):
    def start(self, total_bytes: int, files: int) -> None: ...

    def advance(self, nbytes: int) -> None: ...

    def stop(self) -> None: ...


class RichProgress:
    """A progress bar on stderr (only when stderr is a terminal)."""

    def __init__(self, label: str) -> None:
        self.label = label
        self._progress: Any = None
        self._task: Any = None

    def start(self, total_bytes: int, files: int) -> None:
        from rich.console import Console
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
            TimeRemainingColumn(), console=Console(stderr=True), transient=True,
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


def default_progress(label: str) -> Progress | None:
    return RichProgress(label) if sys.stderr.isatty() else None


# ---------------------------------------------------------------------------------------------
# The pull


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
) -> PullReport:
    """Pull ``location`` into ``dest``; errors reaching storage raise (exit 3), per-file problems are reported."""
    start = time.monotonic()
    store = open_store(location, endpoint, concurrency)
    try:
        plan = plan_pull(store, choice)
        if on_plan is not None:
            on_plan(plan)
        report = _execute(plan, dest, progress)
    finally:
        store.close()
    report.seconds = time.monotonic() - start
    return report


def _execute(plan: PullPlan, dest: Path, progress: Progress | None) -> PullReport:
    store = plan.store
    report = PullReport(
        source=store.location.uri, endpoint=getattr(store, "endpoint", None), destination=str(dest),
        checkpoint=plan.choice.text(), checkpoints=plan.checkpoints, available_checkpoints=plan.all_checkpoints, best=plan.best,
        markers_skipped=plan.markers,
    )
    report.refused = [{"key": printable(key), "reason": reason} for key, reason in plan.refused]
    if dest.exists() and not dest.is_dir():
        raise BadInput(f"--to {dest}: exists and is not a folder")
    dest.mkdir(parents=True, exist_ok=True)
    root = os.path.realpath(dest)
    report.partials_removed = remove_partials(dest)
    manifest = Manifest(dest)

    todo: list[tuple[PullItem, Path]] = []
    for item in plan.items:
        target = dest / item.rel
        real = os.path.realpath(target)
        if not real.startswith(root + os.sep):  # a link already in DIR would lead out of it
            report.refused.append({"key": printable(item.file.key), "reason": "would land outside the destination"})
            continue
        report.files += 1
        report.bytes_total += item.file.size
        if _unchanged(item, target, manifest, store):
            report.skipped += 1
        else:
            todo.append((item, target))
    if report.history is None and plan.history_rel:
        report.history = str(dest / plan.history_rel)

    lock = threading.Lock()
    by_tmp: dict[Path, tuple[PullItem, Path]] = {}
    jobs: list[tuple[RemoteFile, Path]] = []
    for item, target in sorted(todo, key=lambda t: -t[0].file.size):  # big files first: they take longest
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
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
            store.download(jobs, progress.advance if progress is not None else _ignore, on_done)
        except RtjobError:
            raise
        except Exception as exc:
            if isinstance(store, S3Store):
                from .stores import s3_error

                raise s3_error(exc, store) from None
            raise
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
    return report


def _ignore(_: int) -> None:
    return None


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
    if isinstance(store, S3Store):
        same = etag_matches(target, item.file.size, item.file.etag)
    else:
        import filecmp

        same = filecmp.cmp(item.file.key, target, shallow=False)
    if same:
        manifest.record(item, st)
    return same


def summary_lines(report: PullReport) -> list[str]:
    mb = report.bytes_downloaded / 1e6
    rate = f", {mb / report.seconds:.1f} MB/s" if report.seconds > 0 and report.bytes_downloaded else ""
    if report.best:
        best = report.best
        chosen = f"{best['checkpoint']} ({best['metric']}={best['value']:.6g}, {best['mode']})"
    else:
        chosen = ", ".join(report.checkpoints) or "none"
    lines = [
        f"pulled {report.source} → {report.destination}",
        f"checkpoint: {report.checkpoint} → {chosen} (of {len(report.available_checkpoints)} stored)",
        f"files: {report.files} ({report.downloaded} downloaded, {report.skipped} unchanged), "
        f"{mb:.1f} of {report.bytes_total / 1e6:.1f} MB in {report.seconds:.1f}s{rate}",
    ]
    if report.history:
        lines.append(f"history: {report.history} (rtjob results {report.destination})")
    else:
        lines.append("history: none (the run stored no metrics.json)")
    return lines
