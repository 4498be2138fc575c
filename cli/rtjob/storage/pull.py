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
  characters, invisible/bidi formatting characters) or on a reserved name, and keys that differ only in case
  (they would overwrite each other on macOS or Windows), are refused and reported; zero-byte folder markers are
  skipped, and so are FIFOs, sockets and devices in local storage (listed, never opened). rtjob's own files in
  DIR are never written through a symbolic link, and one pull at a time writes into DIR (``.rtjob-pull.lock``).
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
import unicodedata
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Protocol

from rtjob_contract import METRICS_FILE

from ..core.errors import BadInput, RtjobError, Unreachable
from ..jobspec.project import PULLED_RUNS_DIR
from .layout import (
    CheckpointChoice,
    NothingStored,
    checkpoint_of,
    find_history,
    load_history,
    natural_key,
    nothing_but_rtjobs_own,
    read_histories,
)
from .location import Location
from .raytrain import CHECKPOINT_KEY, SNAPSHOT_FILE, parse_snapshot_rows
from .stores import (
    LOCK,
    MANIFEST,
    PARTIAL_SUFFIX,
    RemoteFile,
    S3Store,
    Store,
    create_file,
    describe_error,
    is_bookkeeping,
    is_denial,
    open_store,
)


def default_destination(name: str) -> Path:
    """Where a pull lands without --to: ./rtjob-runs/NAME, a folder no working dir upload includes
    (spec.project.PULLED_RUNS_DIR), so pulled checkpoints never ride along with the next submit."""
    return Path.cwd() / PULLED_RUNS_DIR / name


def unsafe_reason(rel: str) -> str | None:
    """Why a stored name must not become a local path (None: it is safe under the destination)."""
    if rel == "":
        return "empty name"
    if rel.startswith("/"):
        return "absolute path"
    if "\\" in rel:
        return "backslash in the name"
    if not (rel.isascii() and rel.isprintable()):  # printable ASCII has neither (a per-character look-up cost
        # a 2,000-file pull ~0.1 s of CPU)
        if any(unicodedata.category(ch) == "Cc" for ch in rel):  # C0, DEL and C1
            return "control character in the name"
        hidden = next((ch for ch in rel if unicodedata.category(ch) in _HIDDEN), None)
        if hidden is not None:  # a name that reads differently from what is written (U+202E flips the text)
            return f"invisible or bidirectional formatting character (U+{ord(hidden):04X}) in the name"
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
    if any(is_bookkeeping(part) for part in parts):
        return "reserved name (rtjob's own bookkeeping)"
    return None


# Format characters (bidi overrides and isolates, LRM/RLM, zero-width ones) and line/paragraph separators.
_HIDDEN = ("Cf", "Zl", "Zp")


def fold(rel: str) -> str:
    """A name as a case-insensitive, normalising filesystem (macOS, Windows) compares it."""
    return unicodedata.normalize("NFC", rel).casefold()


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
    special: list[tuple[str, str]] = field(default_factory=list)


def plan_pull(store: Store, choice: CheckpointChoice) -> PullPlan:
    """List the location and decide what to pull (pure but for the listing and, for best, metrics reads)."""
    files = store.list_files()
    refused: list[tuple[str, str]] = list(store.refused)
    if nothing_but_rtjobs_own(f.rel for f in files) and not refused and not store.special:
        raise NothingStored(store.describe())
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
    # A name that is both a file and a folder ("a" and "a/b", or "A/b" on macOS) cannot be written as both.
    folders = {fold(item.rel.rsplit("/", i)[0]) for item in good for i in range(1, item.rel.count("/") + 1)}
    conflicts = {item.rel for item in good if fold(item.rel) in folders}
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
    snapshot = next((item for item in run_files if item.rel == SNAPSHOT_FILE), None)
    best: dict[str, Any] | None = None
    if choice.kind == "all":
        chosen = names
    elif choice.kind == "latest":
        chosen = names[-1:]
    else:
        if not names:
            raise BadInput(f"--checkpoint {choice.text()}: no checkpoint_* folders at {store.describe()}")
        chosen, best = _best(store, by_ckpt, names, choice, snapshot)
    items = [PullItem(item, item.rel) for item in run_files]
    for name in chosen:
        items += [PullItem(item, item.rel) for item in by_ckpt[name]]
    history = find_history(good)
    history_rel: str | None = None
    if history is not None:
        history_rel = METRICS_FILE
        if history.rel != METRICS_FILE:  # the newest checkpoint's history, also as DIR/metrics.json
            items.append(PullItem(history, METRICS_FILE))
    elif snapshot is not None:  # a plain Ray Train run: its own record is the history (pulled as a run file)
        history_rel = SNAPSHOT_FILE
    collisions = case_collisions([item.rel for item in items])
    refused += [(item.file.key, f"same name as {printable(collisions[item.rel])!r} on a case-insensitive "
                                "filesystem (one would overwrite the other)")
                for item in items if item.rel in collisions]
    items = [item for item in items if item.rel not in collisions]
    return PullPlan(store, items, chosen, names, history_rel, refused, markers, choice, best, list(store.special))


def case_collisions(rels: list[str]) -> dict[str, str]:
    """Landing paths that differ only in case or Unicode normalisation ("A/x" and "a/x"): on macOS or Windows
    one would silently overwrite the other, so all of them are refused. rel → another one it collides with."""
    groups: dict[str, list[str]] = {}
    for rel in dict.fromkeys(rels):
        groups.setdefault(fold(rel), []).append(rel)
    return {rel: next(other for other in group if other != rel)
            for group in groups.values() if len(group) > 1 for rel in group}


def _best(store: Store, by_ckpt: dict[str, list[RemoteFile]], names: list[str], choice: CheckpointChoice,
          snapshot: RemoteFile | None) -> tuple[list[str], dict[str, Any]]:
    """The checkpoint with the best value of the metric: from each checkpoint's own metrics.json (rtjob's
    layout), else from Ray Train's snapshot (a plain Ray Train script). Ties go to the later checkpoint."""
    wanted = {f"{name}/{METRICS_FILE}": name for name in names}
    metric_files = [item for name in names for item in by_ckpt[name] if item.rel in wanted]
    reported: list[tuple[str, dict[str, Any]]]  # (checkpoint, its metrics), oldest first
    if metric_files or snapshot is None:
        values = read_histories(store, metric_files, numeric=[choice.metric])
        if not values:
            raise BadInput(f"--checkpoint {choice.text()}: no checkpoint has a {METRICS_FILE} to choose by")
        # The checkpoint's own epoch: the last row of its history.
        reported = sorted(((wanted[rel], rows[-1] if rows else {}) for rel, rows in values.items()),
                          key=lambda pair: names.index(pair[0]))
    else:
        where = f"{store.location.uri}/{snapshot.rel}"
        rows = load_history(partial(store.read, snapshot), where, [choice.metric], parse=parse_snapshot_rows)
        reported = [(row[CHECKPOINT_KEY], row) for row in rows if row[CHECKPOINT_KEY] in by_ckpt]
        if not reported:
            raise BadInput(f"--checkpoint {choice.text()}: none of the checkpoints in {where} is stored at "
                           f"{store.describe()}")
    scores: list[tuple[float, int, str]] = []
    seen: set[str] = set()
    for order, (name, metrics) in enumerate(reported):
        seen.update(metrics)
        value = metrics.get(choice.metric)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            scores.append((float(value), order, name))
    if not scores:
        known = ", ".join(sorted(k for k in seen if k not in ("epoch", CHECKPOINT_KEY))) or "none"
        raise BadInput(f"--checkpoint {choice.text()}: no checkpoint reports {choice.metric!r} (metrics: {known})")
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
                self._fh = create_file(self.path, append=True)
            self._fh.write((json.dumps(entry) + "\n").encode())
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
            with create_file(tmp) as f:
                f.writelines((json.dumps(entry) + "\n").encode() for entry in keep)
            os.replace(tmp, self.path)


def remove_partials(dest: Path) -> int:
    """Delete leftovers of an interrupted pull (ours: NAME.rtjob-partial, s3transfer's: NAME.rtjob-partial.XXXX);
    a link under such a name is refused (see refuse_link). Call it holding the destination's lock: another
    pull's partial files are not leftovers."""
    removed = 0
    for dirpath, dirnames, filenames in os.walk(dest):
        for name in filenames + dirnames:  # a link to a folder is listed among the folders
            if PARTIAL_SUFFIX not in name:
                continue
            path = Path(dirpath, name)
            refuse_link(path)
            if name in filenames:  # a real folder of that name is not a leftover of ours
                with contextlib.suppress(OSError):
                    path.unlink()
                    removed += 1
    return removed


def refuse_link(path: Path) -> None:
    """rtjob writes its own names in DIR (manifest, lock, partial files): a symbolic link planted under one is
    refused with one clear line (the writes themselves use O_NOFOLLOW, so a link planted later fails them)."""
    if path.is_symlink():
        raise BadInput(f"{path} is a symbolic link where rtjob keeps its own file; remove it and pull again "
                       "(rtjob never writes through a link)")


@contextlib.contextmanager
def destination_lock(dest: Path) -> Iterator[None]:
    """One pull at a time per destination: a second one fails at once (and leaves the first one's partial
    files alone) instead of waiting behind it or racing it for the same files."""
    import filelock

    path = dest / LOCK
    refuse_link(path)  # filelock before 3.13 follows a link (and truncates what it points to)
    lock = filelock.FileLock(str(path), timeout=0)
    try:
        lock.acquire()
    except filelock.Timeout:
        raise BadInput(f"{dest}: another rtjob pull is writing into this folder; wait for it to finish "
                       "or pull somewhere else") from None
    except OSError as exc:
        raise BadInput(f"{dest}: cannot lock the folder for the pull: {exc.strerror or exc}") from None
    try:
        yield
    finally:
        lock.release()


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
) -> PullReport:
    """Pull ``location`` into ``dest``; errors reaching storage raise (exit 3), per-file problems are reported."""
    start = time.monotonic()
    store = open_store(location, endpoint, concurrency)
    try:
        plan = plan_pull(store, choice)
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
        source=store.location.uri, endpoint=getattr(store, "endpoint", None), destination=str(dest),
        checkpoint=plan.choice.text(), checkpoints=plan.checkpoints, available_checkpoints=plan.all_checkpoints, best=plan.best,
        markers_skipped=plan.markers,
    )
    report.refused = [{"key": printable(key), "reason": reason} for key, reason in plan.refused]
    report.special_skipped = [{"key": printable(key), "kind": kind} for key, kind in plan.special]
    if dest.exists() and not dest.is_dir():
        raise BadInput(f"--to {dest}: exists and is not a folder")
    dest.mkdir(parents=True, exist_ok=True)
    refuse_link(dest / MANIFEST)
    with destination_lock(dest):
        _fill(plan, dest, progress, report)
    return report


def _fill(plan: PullPlan, dest: Path, progress: Progress | None, report: PullReport) -> None:
    """The pull into DIR, holding its lock: what is there already, then what is missing or changed."""
    store = plan.store
    root = os.path.realpath(dest)
    report.partials_removed = remove_partials(dest)
    manifest = Manifest(dest)

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
        if _unchanged(item, target, manifest, store):
            report.skipped += 1
        else:
            todo.append((item, target))
    if report.history is None and plan.history_rel:
        report.history = str(dest / plan.history_rel)

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
