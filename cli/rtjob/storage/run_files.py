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
            or rel == contract.STOP_MARKER_FILE or rel.startswith(contract.NOTIFY_MARKERS))


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
    """A node folder seeded from the run's storage: the run's own files, with their local state and version (a
    later change replaces them); the other objects of the folder are not copied (a script reads what it did not
    write through RTJOB_RUN_URI, as it wrote it) and never overwritten."""

    ours: dict[str, tuple[State, str]] = field(default_factory=dict)
    others: int = 0


def download(objects: Objects, rels: list[str], local_dir: str) -> dict[str, State]:
    """The objects ``rels`` into ``local_dir`` (each through a temporary name): rel → its local state. Names
    that cannot become a local path are left out (keys.unsafe_reason)."""
    got: dict[str, State] = {}
    base = os.path.abspath(local_dir)
    for rel in rels:
        if unsafe_reason(rel) is not None:
            continue
        path = os.path.join(base, *rel.split("/"))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{os.urandom(4).hex()}{PARTIAL_SUFFIX}"
        try:
            with open(tmp, "xb") as out:
                for block in objects.stream(rel):
                    out.write(block)
            os.replace(tmp, path)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
        st = os.stat(path, follow_symlinks=False)
        got[rel] = (st.st_size, st.st_mtime_ns)
    return got


def download_folder(objects: Objects, local_dir: str) -> dict[str, State]:
    """Every object of a run's folder but rtjob's own (a pipeline step's input) into ``local_dir``."""
    return download(objects, [item.rel for item in objects.list("") if not rtjob_side(item.rel)], local_dir)


def seed(objects: Objects, local_dir: str) -> Seeded:
    """A new attempt's node folder: the files earlier attempts of the run synced, as the run's storage has them."""
    written = written_by_run(objects)
    seeded = Seeded()
    versions: dict[str, str] = {}
    for item in objects.list(""):
        if rtjob_side(item.rel):
            continue
        etag = item.etag if item.etag is not None or item.rel not in written else objects.head(item.rel)
        if etag is not None and bare(etag) in written.get(item.rel, ()):
            versions[item.rel] = etag
        else:
            seeded.others += 1
    for rel, state in download(objects, sorted(versions), local_dir).items():
        seeded.ours[rel] = (state, versions[rel])
    return seeded
