"""The files of a run across its attempts: what each attempt's sync wrote (its manifest in the run's folder,
rtjob_contract.sync_manifest_name), and a new attempt's node folder seeded from the run's storage.

The rule lives in the run's storage, not on a node, so a retry on the same node, another node or a new cluster (an
Anyscale platform retry) follows it alike: an object of the run's folder is *the run's* when its current version
(ETag) is one an attempt of this run wrote (any attempt's manifest names it); a later attempt replaces the run's
objects and never one that no attempt wrote (someone else's, or a file already there before the run).

A manifest is written after a sync pass that uploaded something: a driver's node lost between an upload and the
manifest's write leaves that pass's objects unnamed, and the next attempt leaves them as they are (one line each).
Importable on the cluster: the stdlib and rtjob_contract at module level."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field

import rtjob_contract as contract

from .keys import unsafe_reason
from .objects import PARTIAL_SUFFIX, Objects

MAX_MANIFEST_BYTES = 64 * 1024 * 1024
State = tuple[int, int]  # (size, mtime_ns) of a local file


def bare(etag: str | None) -> str:
    """An ETag as compared: S3 quotes it in some answers and not in others."""
    return (etag or "").strip().strip('"')


def rtjob_side(rel: str) -> bool:
    """rtjob's own objects in a run's folder (its record, logs, sync manifests, markers): never synced either way."""
    head = rel.split("/", 1)[0]
    return (rel == contract.RUN_RECORD_FILE or head in (contract.RUN_LOGS_DIR, contract.RUN_SYNC_DIR)
            or rel == contract.STOP_MARKER_FILE or rel.startswith(contract.notified_marker("")))


def written_by_run(objects: Objects) -> dict[str, set[str]]:
    """Every version each attempt's sync wrote, by relative name (the union of the run's manifests). A manifest
    that cannot be read names nothing (its objects are then left as they are, never overwritten)."""
    out: dict[str, set[str]] = {}
    for item in objects.list(contract.RUN_SYNC_DIR):
        if not item.rel.endswith(".json"):
            continue
        with contextlib.suppress(Exception):
            got = objects.get(item.rel, MAX_MANIFEST_BYTES)
            written = json.loads(got.data).get("written") if got is not None else None
            for rel, etag in (written or {}).items():
                if isinstance(rel, str) and isinstance(etag, str):
                    out.setdefault(rel, set()).add(bare(etag))
    return out


def write_manifest(objects: Objects, attempt_id: str, written: dict[str, str]) -> None:
    """This attempt's manifest: every object of the run's folder it holds as the run's, at the version it knows."""
    body = {"attempt": attempt_id, "written": dict(sorted(written.items()))}
    objects.put(contract.sync_manifest_name(attempt_id), json.dumps(body, separators=(",", ":")).encode())


@dataclass
class Seeded:
    """A node folder seeded from the run's storage: the run's own files (state and version: a later change
    replaces them) and the others (never uploaded)."""

    ours: dict[str, tuple[State, str]] = field(default_factory=dict)
    others: dict[str, State] = field(default_factory=dict)


def download_folder(objects: Objects, local_dir: str, keep: Callable[[str], bool] = lambda rel: True,
                    ) -> dict[str, tuple[State, str | None]]:
    """Every object below ``objects`` (but rtjob's own) into ``local_dir``: rel → (local state, version listed).
    Names that cannot become a local path are left out (see keys.unsafe_reason)."""
    got: dict[str, tuple[State, str | None]] = {}
    base = os.path.abspath(local_dir)
    for item in objects.list(""):
        if rtjob_side(item.rel) or not keep(item.rel) or unsafe_reason(item.rel) is not None:
            continue
        path = os.path.join(base, *item.rel.split("/"))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{os.urandom(4).hex()}{PARTIAL_SUFFIX}"
        try:
            with open(tmp, "xb") as out:
                for block in objects.stream(item.rel):
                    out.write(block)
            os.replace(tmp, path)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
        st = os.stat(path, follow_symlinks=False)
        got[item.rel] = ((st.st_size, st.st_mtime_ns), item.etag)
    return got


def seed(objects: Objects, local_dir: str) -> Seeded:
    """A new attempt's node folder: what the run has in storage, each file marked the run's or not."""
    written = written_by_run(objects)
    seeded = Seeded()
    for rel, (state, etag) in download_folder(objects, local_dir).items():
        etag = etag if etag is not None else objects.head(rel)
        if etag is not None and bare(etag) in written.get(rel, ()):
            seeded.ours[rel] = (state, etag)
        else:
            seeded.others[rel] = state
    return seeded
