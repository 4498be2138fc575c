"""A run record: what rtjob remembers of one run after its cluster is gone (the ledger's rows and
``<storage>/<job>/<run id>/rtjob-run.json`` hold the same JSON).

Everything in it is already masked when it is made (runs/records.py): a record is written to a bucket a team
shares, so it never holds a secret, only the names of the secrets a rerun must find again.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from . import clock
from .errors import BadInput
from .model import RunInfo, RunStatus, stamp

# Bump when a field changes meaning; readers refuse a record from a newer rtjob. A new field with a default is
# additive, not a bump: an older rtjob drops it when it reads the record (from_json), a newer one fills the default.
RECORD_SCHEMA = 1
# A run-side carrier refreshes last_seen every 30 s: three missed beats and the run's state is not known.
STALE_S = 90


@dataclass
class RunRecord:
    """One run: its identity, where it ran, what was sent, how it ended. Plain data, JSON both ways."""

    id: str
    job: str | None
    backend: str
    status: str = RunStatus.UNKNOWN.value
    address: str | None = None  # masked (no userinfo password)
    message: str | None = None  # redacted
    exit_code: int | None = None
    submitted_at: str | None = None  # ISO 8601 UTC, when this client submitted it (None: seen, not submitted)
    start_time: str | None = None
    end_time: str | None = None
    storage_uri: str | None = None
    storage_endpoint: str | None = None
    job_file: str | None = None  # as shown at submit (relative to the project)
    project_root: str | None = None  # absolute, on the machine that submitted
    working_dir: str | None = None
    spec_hash: str | None = None  # sha256 of the resolved spec as recorded (secrets masked)
    spec: dict[str, Any] | None = None  # what rerun replays: the job document and its overrides (secrets masked)
    request: dict[str, Any] | None = None  # the exact request as rendered (masked): `render -o json`'s "request"
    shape: dict[str, Any] | None = None  # nodes, workers, resources per worker, compute config
    rate: dict[str, Any] | None = None  # the priced shape (HourlyCost.to_json()), None: free or unknown
    cost: dict[str, Any] | None = None  # the finished run's cost (jobspec/pricing.run_cost)
    git: dict[str, Any] | None = None  # {"commit", "dirty", "branch"}, None: not a git checkout
    user: str | None = None
    host: str | None = None
    attempts: list[dict[str, Any]] = field(default_factory=list)  # Attempt.to_json() of each attempt
    metrics: dict[str, Any] | None = None  # summary of the final metrics history (last row, best val_loss)
    logs: list[str] = field(default_factory=list)  # archived logs, relative to log_home
    log_home: str | None = None  # the folder that holds them: the run's storage, else $RTJOB_HOME/runs/<id>
    archived: bool = False  # the run ended and its logs and final state were saved
    # Where the run's script stored its own Ray Train runs (storage_path/name URIs; an unchanged script picks
    # them itself), as the backend reported them when the run was archived: `results`/`pull` ID read them when
    # the run's own storage holds nothing rtjob knows.
    train_storage: list[str] = field(default_factory=list)
    # Pipelines (runs/pipelines/pipeline.py): a step's run names its pipeline run; a pipeline run's own record lists its
    # steps ({"name", "run_id", "storage_uri", "reused_from"}) in order, and has no request of its own.
    pipeline: str | None = None
    steps: list[dict[str, Any]] = field(default_factory=list)
    # The run side (rtjob.runside): who carries the run where it runs ("companion", or "supervisor" across a run's
    # attempts: the companion keeps that), who wrote its end (a run-side writer, or "client": a client that saw
    # the backend's verdict), when the run side last said it was alive,
    # and the start-up timeline (stage -> ISO time: submitted, accepted, driver_started, first_log_line,
    # first_step, ended). The record has several writers: each goes through core/lifecycle/ and writes with If-Match.
    carried_by: str | None = None
    completed_by: str | None = None
    last_seen: str | None = None
    timeline: dict[str, str] = field(default_factory=dict)  # the last attempt's (core/lifecycle/timelines.py)
    timelines: dict[str, dict[str, str]] = field(default_factory=dict)  # each attempt's own, by attempt id
    companion_cpu_s: float | None = None  # the CPU time the run's companion used (what carrying the run cost)
    # What the last attempt's sync of RTJOB_RUN_DIR said (one line each): an object no attempt of the run wrote,
    # left as it is (never overwritten), and a node folder kept because something did not reach the storage.
    sync_notes: list[str] = field(default_factory=list)
    # Whether the run's files and end reached its storage (core/lifecycle.outputs): {"complete": true} once stored;
    # {"complete": false, "not_stored": N, "kept_at": "NODE:FOLDER"} when the storage grace ran out and the node
    # keeps the only copy (`rtjob sync ID` stores it); None: not said (an older record, or a run without a node copy).
    outputs: dict[str, Any] | None = None
    tracking: dict[str, Any] | None = None  # the MLflow run that mirrors it: {"mlflow": {run_id, url, unsent}}
    # The team's queue it waited in (core/queueing.py): {"name", "priority", "storage"}; None: sent at once.
    queue: dict[str, Any] | None = None
    updated_at: str | None = None
    schema: int = RECORD_SCHEMA

    @property
    def run_status(self) -> RunStatus:
        try:
            return RunStatus(self.status)
        except ValueError:
            return RunStatus.UNKNOWN

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def dumps(self) -> str:
        # A shallow dict: json.dumps copies nothing, and asdict's deep copy was most of a ledger save's time.
        shallow = {f.name: self.__dict__[f.name] for f in dataclasses.fields(self)}
        return json.dumps(shallow, separators=(",", ":"))  # key order kept: a job's args are flags in order

    @classmethod
    def from_json(cls, data: Any, where: str) -> RunRecord:
        """A record read back; BadInput (one line, naming ``where``) if it is not one or is from a newer rtjob."""
        if not isinstance(data, dict) or not isinstance(data.get("id"), str) or not isinstance(data.get("backend"), str):
            raise BadInput(f"{where}: not an rtjob run record (no id/backend)")
        schema = data.get("schema", RECORD_SCHEMA)
        if not isinstance(schema, int) or schema > RECORD_SCHEMA:
            raise BadInput(f"{where}: a run record of schema {schema}, newer than this rtjob reads "
                           f"({RECORD_SCHEMA}); upgrade rtjob")
        names = {f.name for f in dataclasses.fields(cls)}
        try:
            return cls(**{k: v for k, v in data.items() if k in names})
        except TypeError as exc:
            raise BadInput(f"{where}: not an rtjob run record ({exc})") from None

    @classmethod
    def loads(cls, text: str | bytes, where: str) -> RunRecord:
        try:
            data = json.loads(text)
        except (ValueError, UnicodeDecodeError) as exc:
            raise BadInput(f"{where}: not valid JSON ({exc})") from None
        return cls.from_json(data, where)

    def summary(self) -> dict[str, Any]:
        """The short form `rtjob runs -o json` prints (the ledger stores it beside the record): RunInfo's JSON
        keys (id, job, backend, status, message, start_time, end_time, storage_uri, exit_code, address), then
        submitted_at, updated_at, archived, git_commit, git_dirty (None: not a git checkout) and cost_usd (the
        finished run's estimated cost when its rate is fixed, else None; ``cost`` in the full record)."""
        git, cost = self.git or {}, self.cost or {}
        return {
            "id": self.id, "job": self.job, "backend": self.backend, "status": self.status, "message": self.message,
            "start_time": self.start_time, "end_time": self.end_time, "storage_uri": self.storage_uri,
            "exit_code": self.exit_code, "address": self.address, "submitted_at": self.submitted_at,
            "updated_at": self.updated_at, "archived": self.archived, "git_commit": git.get("commit"),
            "git_dirty": git.get("dirty"), "cost_usd": cost.get("estimated_usd"),
        }

    def stale_why(self, seconds: float = STALE_S, now: dt.datetime | None = None) -> str | None:
        """The reader's verdict on a run not ended whose run side was not seen for ``seconds`` (before ``now``): why
        it is UNKNOWN (one line), or None. Never written: the run may still be alive."""
        if self.run_status.terminal or not self.carried_by or not self.last_seen:
            return None
        if not _older_than(self.last_seen, seconds, now):
            return None
        return f"its {self.carried_by} was last seen {stamp(self.last_seen)}"

    def to_run_info(self) -> RunInfo:
        """The record as the RunInfo every command prints (status, list, wait). A run its companion carried that has
        not ended and was not seen for STALE_S is UNKNOWN (its driver's node may be gone), saying when it was seen."""
        status, message = self.run_status, self.message
        why = self.stale_why()
        if why is not None:
            status, message = RunStatus.UNKNOWN, why
        return RunInfo(
            id=self.id, job=self.job, backend=self.backend, status=status, message=message,
            start_time=self.start_time or self.submitted_at, end_time=self.end_time, storage_uri=self.storage_uri,
            exit_code=self.exit_code, address=self.address, storage_endpoint=self.storage_endpoint, rate=self.rate,
            outputs=self.outputs,
        )

    def observe(self, info: RunInfo) -> bool:
        """Take what a backend reports now (status, times, exit code, message); True if anything changed."""
        from .redact import mask_url, redact

        before = self.dumps()
        self.status = info.status.value
        self.message = redact(info.message, info.secrets) if info.message is not None else self.message
        self.address = mask_url(info.address) if info.address else self.address
        self.exit_code = info.exit_code if info.exit_code is not None else self.exit_code
        self.start_time = clock.earliest(self.start_time, info.start_time)  # a retry's never moves it
        self.end_time = info.end_time or self.end_time
        self.storage_uri = self.storage_uri or info.storage_uri
        self.storage_endpoint = self.storage_endpoint or info.storage_endpoint
        self.rate = self.rate or info.rate
        return self.dumps() != before

    @classmethod
    def from_run_info(cls, info: RunInfo) -> RunRecord:
        """A run this client did not submit, as a backend reports it (status, wait, list of another's run)."""
        record = cls(id=info.id, job=info.job, backend=info.backend)
        record.observe(info)
        return record


def _older_than(when: str, seconds: float, now: dt.datetime | None = None) -> bool:
    try:
        stamp = clock.parse(when)
    except ValueError:
        return False
    return ((now or clock.now()) - stamp).total_seconds() > seconds


def spec_hash(spec: dict[str, Any]) -> str:
    """A stable hash of a recorded spec (canonical JSON): equal specs, equal hashes, on any machine."""
    return hashlib.sha256(json.dumps(spec, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
