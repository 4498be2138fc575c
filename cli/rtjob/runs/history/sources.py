"""Where a run's results are: a run id (through its backend's status), a storage URI, or a folder."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from ...core.errors import BadInput, RtjobError
from ...core.model import RunInfo, RunStatus
from ...storage.layout import NothingStored
from ...storage.location import Location, parse_location
from ..places import on_this_machine

if TYPE_CHECKING:
    from ...core.record import RunRecord
    from ...jobspec.project import Settings
    from ..events import RunEvents


@dataclass
class Source:
    """Where one run's results are: a storage location (+ endpoint) and how to call the run."""

    location: Location
    endpoint: str | None
    label: str
    run_id: str | None = None
    secrets: list[str] = field(default_factory=list)
    status: RunStatus | None = None  # the run's status when it was looked up (a run id only)


def _looks_like_path(arg: str) -> bool:
    return "/" in arg or os.sep in arg or arg.startswith("~") or arg in (".", "..")


def resolve_source(arg: str, endpoint: str | None, lookup: Callable[[str], RunInfo],
                   default_storage: Callable[[], str | None]) -> Source:
    """ID → the run's recorded storage (through the backend's status); a URI or a path as given.

    A bare name is a run id first; if no backend knows it, an existing folder of that name, then a run folder
    in the embedded cluster's local storage (the embedded cluster forgets its runs when it stops).
    """
    given = _given(arg, endpoint)
    if given is not None:
        return given
    try:
        info = lookup(arg)
    except RtjobError as exc:
        return _unknown_run(arg, endpoint, default_storage, exc)
    return _run_source(arg, info, endpoint)


class StepSource(NamedTuple):
    """One source of a run id: ``step`` names a pipeline run's step (None: the run, URI or folder itself);
    ``source`` is where it is, or why that step has nothing to read (never submitted, no storage)."""

    step: str | None
    source: Source | RtjobError


def sources_for(arg: str, endpoint: str | None, settings_of: Callable[[], Settings],
                events: RunEvents) -> list[StepSource]:
    """`pull`/`results` of ARG: one source for a run, URI or folder; a pipeline run's id has each step's, in order.
    The settings are built once, and only when ARG is a run id (a URI needs none)."""
    from ...backends import get_backend
    from ..places import default_storage, storage_root
    from ..view import look

    settings = functools.cache(settings_of)

    def lookup(run_id: str) -> tuple[RunInfo, RunRecord | None]:  # the view of the run (view.py): one story
        seen = look(get_backend(settings()), run_id, storage_root(settings()), events)
        return seen.info, seen.record

    def default() -> str | None:
        return default_storage(settings())

    given = _given(arg, endpoint)
    if given is not None:
        return [StepSource(None, given)]
    try:
        info, record = lookup(arg)
    except RtjobError as exc:
        return [StepSource(None, _unknown_run(arg, endpoint, default, exc))]
    if record is None or not record.steps:
        known = record or _remembered(arg)
        return _run_sources(arg, info, endpoint, known.train_storage if known is not None else [])
    out: list[StepSource] = []
    for step in record.steps:
        try:
            found: Source | RtjobError = resolve_source(str(step.get("run_id")), endpoint,
                                                        lambda run_id: lookup(run_id)[0], default)
        except RtjobError as exc:
            found = exc
        out.append(StepSource(str(step.get("name")), found))
    return out


def _given(arg: str, endpoint: str | None) -> Source | None:
    """A URI or a path, as given (None: a run id)."""
    if "://" in arg or _looks_like_path(arg):
        location = parse_location(arg)
        return Source(location, endpoint, location.name)
    return None


def _unknown_run(arg: str, endpoint: str | None, default_storage: Callable[[], str | None],
                 exc: RtjobError) -> Source:
    """No backend and no record knows ``arg``: an existing folder of that name, else the run's folder in the
    backend's default local storage; else the lookup's error is raised."""
    if os.path.isdir(arg):
        location = parse_location(arg)
        return Source(location, endpoint, location.name)
    found = _run_dir_in(default_storage(), arg)
    if found is None:
        raise exc
    return Source(parse_location(str(found)), endpoint, arg, arg)


def _remembered(run_id: str) -> RunRecord | None:
    """The ledger's record of a run its backend still knows (what its archive learned), None if none."""
    from ..memory import ledger

    try:
        return ledger().get(run_id)
    except RtjobError:
        return None


def _run_sources(arg: str, info: RunInfo, endpoint: str | None, train_storage: list[str]) -> list[StepSource]:
    """The run's own storage; where that holds nothing rtjob knows, the Ray Train run folders its script chose
    itself (recorded when the run ended): one source, or one per folder, named by the folder."""
    if not train_storage or _holds_results(info, endpoint):
        return [StepSource(None, _run_source(arg, info, endpoint))]
    if len(train_storage) == 1:
        return [StepSource(None, _run_source(arg, info, endpoint, train_storage[0]))]
    return [StepSource(parse_location(uri).name, _run_source(arg, info, endpoint, uri)) for uri in train_storage]


def _holds_results(info: RunInfo, endpoint: str | None) -> bool:
    """Whether the run's own storage holds anything rtjob reads; one it cannot read counts as holding (the pull
    or results of it then says why)."""
    from ...storage.results import location_holds_results

    if not info.storage_uri:
        return False
    try:
        return location_holds_results(parse_location(info.storage_uri),
                                      endpoint or _env_endpoint() or info.storage_endpoint)
    except RtjobError:
        return True


def _run_source(arg: str, info: RunInfo, endpoint: str | None, uri: str | None = None) -> Source:
    """The storage a known run recorded (``uri``: a Ray Train run folder its script chose instead)."""
    uri = uri or info.storage_uri
    if not uri:
        raise BadInput(f"run {arg} recorded no storage (the job writes where its script says; "
                       f"{PASS_THE_FOLDER})")
    location = parse_location(uri)
    if location.scheme == "file" and not os.path.isdir(location.path):
        if not on_this_machine(info.backend):
            raise BadInput(f"run {arg} wrote to {location.path} on the cluster's own disk, which this machine "
                           "cannot read; use s3:// storage to pull it")
        raise BadInput(nothing_written(arg, info.status, location.path))
    recorded = info.storage_endpoint
    return Source(location, endpoint or _env_endpoint() or recorded, arg, arg, list(info.secrets), info.status)


PASS_THE_FOLDER = "pass the folder or s3:// URI it writes to instead of the run id, e.g. rtjob results PATH"


def nothing_written(run_id: str, status: RunStatus | None, uri: str) -> str:
    """What it means that a run's recorded storage holds nothing: it has not written yet (still running), or it
    ended without writing there (failed early, or its script chose its own storage_path and run name)."""
    if status is not None and status.terminal:
        return (f"the run {run_id} ended ({status.value}) without writing results to {uri} (a script that sets "
                f"its own RunConfig(storage_path=..., name=...) writes there instead: {PASS_THE_FOLDER})")
    if status in (RunStatus.PENDING, RunStatus.RUNNING):
        return f"run {run_id} is {status.value} and has written nothing to {uri} yet"
    return f"nothing stored at {uri} for run {run_id} (its status: {status.value if status else 'unknown'})"


def explained(exc: RtjobError, src: Source | None) -> RtjobError:
    """Storage's "nothing stored" about a run's own recorded storage, said in terms of the run."""
    if isinstance(exc, NothingStored) and src is not None and src.run_id and src.status is not None:
        exc.message = nothing_written(src.run_id, src.status, exc.uri)
    return exc


def _env_endpoint() -> str | None:
    from ...jobspec.run_env import endpoint_from_env

    return endpoint_from_env()


def _run_dir_in(storage_root: str | None, run_id: str) -> Path | None:
    """The run's folder in a backend's default local storage (``<root>/<job>/<run id>``), if it has one:
    the embedded cluster forgets its runs when it stops, its storage does not."""
    if not storage_root or "://" in storage_root or "/" in run_id or run_id in (".", ".."):
        return None
    matches = [p for p in Path(storage_root).glob(f"*/{run_id}") if p.is_dir()]
    return matches[0] if len(matches) == 1 else None


def redacted(exc: RtjobError, secrets: list[str]) -> RtjobError:
    from ...core.redact import redact

    exc.message = redact(exc.message, secrets)
    return exc
