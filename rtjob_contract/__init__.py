"""The contract between rtjob (the client) and the code it runs (the cluster): one home, no dependencies.

Both sides import this module: ``cli/rtjob`` (installed with the rtjob wheel) and ``training/`` (which runs
from the uploaded working dir, where this package sits beside it). It holds only names and layouts:

* the ``RTJOB_*`` environment a job receives (what the client decided: shape, run name, storage);
* the checkpoint layout a run writes to its storage, which ``rtjob pull`` / ``rtjob results`` read;
* the keys of a metrics-history row;
* the metadata (Ray) and tag (Anyscale) keys rtjob records with a run, so a run is understood later
  without the job file that made it.

Standard library only, and nothing that imports rtjob or training: ``tests/unit/test_contract.py`` fails if
either side spells one of these values itself, or if this module grows a dependency.
"""

from __future__ import annotations

import datetime
import shlex

# ---------------------------------------------------------------------------------------------
# The job's environment: set by rtjob at submit, read by the entrypoints (flags' defaults).

ENV_JOB_NAME = "RTJOB_JOB_NAME"  # the job's name (jobs/NAME.yaml's `name:`)
ENV_RUN_NAME = "RTJOB_RUN_NAME"  # the run id; also the run's folder under the storage path (resume = same name)
ENV_NODES = "RTJOB_NODES"  # nodes of the job's worker group
ENV_NUM_WORKERS = "RTJOB_NUM_WORKERS"  # training workers in all (nodes × workers per node)
ENV_CPUS_PER_WORKER = "RTJOB_CPUS_PER_WORKER"
ENV_GPUS_PER_WORKER = "RTJOB_GPUS_PER_WORKER"
ENV_USE_GPU = "RTJOB_USE_GPU"  # "1" or "0"
ENV_MAX_FAILURES = "RTJOB_MAX_FAILURES"  # worker-group restarts from the latest checkpoint (-1: unlimited)
ENV_STORAGE_PATH = "RTJOB_STORAGE_PATH"  # <storage root>/<job name>; the run writes <this>/<run name>/
# The run's own folder (<storage path>/<run name>, a path or URI), set when the run has storage: a script that
# knows nothing else of rtjob writes there (`python train.py --output-dir "$RTJOB_RUN_DIR"`), and `rtjob pull ID` /
# `rtjob results ID` read it back.
ENV_RUN_DIR = "RTJOB_RUN_DIR"
ENV_DATA_DIR = "RTJOB_DATA_DIR"  # where entrypoints cache datasets (optional)
ENV_SCHEDULE = "RTJOB_SCHEDULE"  # set on runs an Anyscale schedule starts: the schedule's name
# A pipeline's steps (jobs/NAME.yaml with `steps:`): each step is a run; what the steps before it wrote is
# passed down by folder, so a step reads its inputs without knowing the run ids.
ENV_PIPELINE_ID = "RTJOB_PIPELINE_ID"  # the pipeline run's id (its steps' run ids are <id>-<step>)
ENV_STEP_NAME = "RTJOB_STEP_NAME"  # this step's name in the pipeline file
ENV_INPUT_URI = "RTJOB_INPUT_URI"  # the previous step's run folder (unset for the first step)
# ... and as a local folder on the driver's node (the folder itself with local storage; with remote storage a copy
# the companion syncs down before the step starts: read-only by intent, never uploaded back, removed at the end).
ENV_INPUT_DIR = "RTJOB_INPUT_DIR"
ENV_STEP_URIS = "RTJOB_STEP_URIS"  # JSON {step name: run folder} of every earlier step

# The run side: a small rtjob process (the companion, rtjob.runside) runs every run's entrypoint and writes the
# run's story to its storage from where the run is: the script's files, the log as it grows, the outcome.

# Always the run's storage folder (a path or URI, = <storage path>/<run name>): code on any node writes there
# (Ray workers on other nodes too). RTJOB_RUN_DIR is then a local folder on the driver's node that the companion
# syncs to it (with local storage both are the same folder).
ENV_RUN_URI = "RTJOB_RUN_URI"
ENV_COMPANION = "RTJOB_COMPANION"  # "0": run the entrypoint bare (no companion)
# How often the companion uploads a log part and syncs the run's folder, and refreshes the record's last_seen
# (seconds; defaults 5 and 30).
ENV_COMPANION_INTERVAL_S = "RTJOB_COMPANION_INTERVAL_S"
ENV_COMPANION_HEARTBEAT_S = "RTJOB_COMPANION_HEARTBEAT_S"
# The job's time limit (timeout_s, seconds) as the companion enforces it, and as a fact of the request.
ENV_TIME_LIMIT_S = "RTJOB_TIME_LIMIT_S"
# The supervisor's way to the cluster's Jobs API from inside (a driver's RAY_ADDRESS is the GCS, not the dashboard)
ENV_DASHBOARD_ADDRESS = "RTJOB_DASHBOARD_ADDRESS"
ENV_QUEUE = "RTJOB_QUEUE"  # a queue's keeper (rtjob.queue.keeper): its queue's uri, name, endpoint, limits as JSON
ENV_TEAM_QUEUE = "RTJOB_TEAM_QUEUE"  # an Anyscale run's queue, {name, priority} (its SDK lists env, not tags)
# A pipeline's supervisor: JSON [{the step's Jobs API request body}, ...] of the steps it runs, in order, their
# packages already uploaded (gcs:// URIs), so it needs nothing from the client's checkout.
ENV_PIPELINE_STEPS = "RTJOB_PIPELINE_STEPS"
# A pipeline hosted as one Anyscale job (whose packages Anyscale ships with the job, not as gcs:// URIs): a step body
# whose "code" is STEP_CODE_OF_SUPERVISOR runs the supervisor's code (its cwd and rtjob's modules, which it uploads
# itself); one with STEP_SEALED: N has its secrets in entry N of the supervisor's sealed steps file, sealed again.
STEP_CODE_OF_SUPERVISOR, STEP_SEALED = "rtjob-supervisor-code", "sealed_step"
# "outcome": the pipeline's supervisor exits 0 only when the pipeline SUCCEEDED (the job that hosts it shows the
# pipeline's outcome, and a restart of it by the platform finds the end recorded and exits the same way).
ENV_SUPERVISOR_EXIT = "RTJOB_SUPERVISOR_EXIT"
# The backend a run was sent through, for the record its run side begins when no client wrote one first (a step a
# pipeline hosted on Anyscale runs as a Ray job: its record still says anyscale).
ENV_BACKEND = "RTJOB_RUN_BACKEND"
# A scheduled pipeline is planned under this id; each run the schedule starts takes an id of its own (the platform's
# job id), which its supervisor puts in its place everywhere (RTJOB_PLANNED_ID says which id was planned).
ENV_PLANNED_ID = "RTJOB_PLANNED_ID"
# Storage faults: how long the companion waits at a run's end for its files and end to be stored before it keeps
# the node's copy and says "outputs not stored" (seconds, default 600), and how long a reader waits out faults
# that may pass before it gives up with exit 3 (seconds, default 30).
ENV_STORAGE_GRACE_S = "RTJOB_STORAGE_GRACE_S"
ENV_STORAGE_PATIENCE_S = "RTJOB_STORAGE_PATIENCE_S"
STORAGE_GRACE_S = 600.0
META_TIME_LIMIT = "rtjob.timeout_s"  # the time limit as a fact of the request (Ray metadata)
# Notifications (the job's, project's or context's `notify:`), as JSON without any URL:
# {"on": ["failed", ...], "targets": [{"type": "slack", "env": "SLACK_URL"}], "steps": false}. Each target's URL
# is a secret the client forwards in the job's env under the variable the target names ("env"); whoever sees an
# outcome reads both from its own environment (rtjob.notify.config_from_env). A `github` target's "env" holds
# its token instead, and the target names its repository ("repo") and GitHub's API ("api_url").
ENV_NOTIFY = "RTJOB_NOTIFY"
# Experiment tracking (the job's `tracking:`), as JSON: {"mlflow": {"tracking_uri", "experiment"}, "params": {...},
# "tags": {...}}. The params are the job's args as rendered, less any secret one (never a secret value here).
ENV_TRACKING = "RTJOB_TRACKING"
ENV_SECRET_REFS = "RTJOB_SECRET_REFS"  # a job's `secrets:` as {NAME: REFERENCE} JSON: references, never values
NOTIFY_OUTCOMES = ("succeeded", "failed", "stopped", "retrying")  # what `notify: on:` may name
NOTIFY_TARGET_TYPES = ("webhook", "slack", "apprise", "github")
# What a `github` target sends: a repository_dispatch of this event type, the message's fields as its
# client_payload; the workflow `schedule render --github` writes checks the run when it arrives.
GITHUB_DISPATCH_EVENT = "rtjob-run-ended"
GITHUB_API_URL = "https://api.github.com"

ENV_NAMES = frozenset({
    ENV_SECRET_REFS,
    ENV_JOB_NAME, ENV_RUN_NAME, ENV_NODES, ENV_NUM_WORKERS, ENV_CPUS_PER_WORKER, ENV_GPUS_PER_WORKER,
    ENV_USE_GPU, ENV_MAX_FAILURES, ENV_STORAGE_PATH, ENV_RUN_DIR, ENV_DATA_DIR, ENV_SCHEDULE,
    ENV_PIPELINE_ID, ENV_STEP_NAME, ENV_INPUT_URI, ENV_INPUT_DIR, ENV_STEP_URIS, ENV_RUN_URI, ENV_COMPANION, ENV_TIME_LIMIT_S,
    ENV_NOTIFY, ENV_COMPANION_INTERVAL_S, ENV_COMPANION_HEARTBEAT_S, ENV_DASHBOARD_ADDRESS, ENV_PIPELINE_STEPS,
    ENV_SUPERVISOR_EXIT, ENV_BACKEND, ENV_PLANNED_ID, ENV_STORAGE_GRACE_S, ENV_STORAGE_PATIENCE_S,
    ENV_TRACKING, ENV_QUEUE, ENV_TEAM_QUEUE})

# ---------------------------------------------------------------------------------------------
# Checkpoint layout: <storage path>/<run name>/checkpoint_epoch_NNNN/{model.pt, optimizer.pt, state.json,
# metrics.json} (+ grad_scaler.pt with fp16). Any checkpoint_* folder counts as a checkpoint (Ray's own
# checkpoint_<timestamp> too).

CHECKPOINT_PREFIX = "checkpoint_"
EPOCH_CHECKPOINT_PREFIX = "checkpoint_epoch_"
MODEL_FILE = "model.pt"
OPTIMIZER_FILE = "optimizer.pt"
SCALER_FILE = "grad_scaler.pt"  # fp16 runs only: the GradScaler's loss scale and growth tracker
STATE_FILE = "state.json"  # written last: a folder without it is an interrupted write
METRICS_FILE = "metrics.json"  # the whole metrics history so far: a list of rows, one per finished epoch


def checkpoint_dir_name(epoch: int) -> str:
    """The folder of epoch ``epoch``'s checkpoint (by epoch, not Ray's timestamp: one folder per epoch)."""
    return f"{EPOCH_CHECKPOINT_PREFIX}{epoch:04d}"


# What a run generates to look at or listen to (sample image grids, decoded audio): <run dir>/samples/. A file
# made at an epoch is named by it (samples/epoch_NNNN.png), so `rtjob results` can show the latest or every epoch.
SAMPLES_DIR = "samples"


def sample_file_name(epoch: int, suffix: str = ".png") -> str:
    """The sample file of epoch ``epoch`` inside SAMPLES_DIR."""
    return f"epoch_{epoch:04d}{suffix}"


# Keys of one metrics-history row (what the entrypoints write, what `rtjob results` shows).
METRIC_EPOCH = "epoch"
METRIC_TRAIN_LOSS = "train_loss"
METRIC_VAL_LOSS = "val_loss"
METRIC_VAL_ACCURACY = "val_accuracy"
METRIC_SAMPLES_PER_S = "train_samples_per_s"
METRIC_EPOCH_TIME = "epoch_time_s"
# An evaluation's rows (one per model compared, not per epoch): which model or baseline the row measures.
METRIC_MODEL = "model"

# Live rows, appended while the run trains (JSON Lines in the run's folder, one object a line; any script may write
# them to $RTJOB_RUN_DIR and the companion's periodic sync uploads what is there, also while the file grows).
# Step rows: {"step": int, "time": unix seconds, "epoch": int (optional), and any numeric series: "loss", "lr",
# "samples_per_s", "gpu_mem_mb", ...}. rtjob's entrypoints write one every few steps beside their epoch rows.
STEP_METRICS_FILE = "metrics.jsonl"
STEP_KEY = "step"
STEP_TIME = "time"
# System rows, about every 10 s per node of the run: {"time": unix seconds, "node": name or IP, "cpu_percent",
# "mem_used_mb", "mem_total_mb", "gpus": [{"index", "util_percent", "mem_used_mb", "mem_total_mb"}] (empty: no GPU)}.
SYSTEM_METRICS_FILE = "system.jsonl"
# How rows reach those files from any node: a process prints one event line per row,
# "rtjob-event: step_row {...}" (rank 0 of rtjob's entrypoints, every --log-every-steps optimizer steps) or
# "rtjob-event: system_row {...}" (a sampler in the training worker of local rank 0 on each node, every
# SYSTEM_SAMPLE_S), the row as one JSON object after the kind. Ray forwards every worker's stdout to the driver's
# log, where the companion reads it: it appends each row to the file in RTJOB_RUN_DIR (the driver's node), and
# samples its own node itself (so a plain script gets system rows too). Rows of a node are about SYSTEM_SAMPLE_S apart.
# A step row of a sweep's trial also names it (a string): each trial counts its own steps, one series per trial.
STEP_TRIAL = "trial"
EVENT_STEP_ROW = "step_row"
EVENT_SYSTEM_ROW = "system_row"
SYSTEM_SAMPLE_S = 10.0

# ---------------------------------------------------------------------------------------------
# What rtjob records with a run on Ray (job metadata: string values).

META_JOB, META_JOB_FILE = "rtjob.job", "rtjob.job_file"
META_QUEUE, META_PRIORITY = "rtjob.queue", "rtjob.priority"  # the team's queue the run waited in, its priority there
META_NODES = "rtjob.nodes"
META_WORKERS = "rtjob.workers"
META_STORAGE = "rtjob.storage_uri"
META_STORAGE_ENDPOINT = "rtjob.storage_endpoint"
META_MAX_RETRIES = "rtjob.max_retries"
META_ATTEMPT = "rtjob.attempt"  # 2, 3, ... on a retry (rtjob's job-level retries on Ray)
META_PARENT = "rtjob.parent"  # the first attempt's id, on a retry
META_RATE = "rtjob.rate"  # the priced shape at submit (JSON): prices a finished run without its job file
META_TAG_PREFIX = "tag."  # the job's own `tags:`
# A run's supervisor (rtjob.runside.supervisor) is a Ray job of its own, id <run id>-supervisor, that carries the
# run's retries with no client alive: its metadata says its role and the run it carries; `list` and `runs` hide it.
META_ROLE = "rtjob.role"
META_SUPERVISES = "rtjob.supervises"
ROLE_SUPERVISOR = "supervisor"
SUPERVISOR_SUFFIX = "-supervisor"
# A supervisor runs `python -m SUPERVISOR_MODULE RUN_ID BACKEND`: BACKEND is the registered backend whose loop runs on
# the cluster (a backend declares it: Backend.supervisor_backend).
SUPERVISOR_MODULE = "rtjob.runside.supervisor"


def supervisor_command(run_id: str, backend: str) -> str:
    """The supervisor's entrypoint for the run (or pipeline) ``run_id``, running ``backend``'s loop."""
    return f"python -m {SUPERVISOR_MODULE} {shlex.quote(run_id)} {backend}"


# `rtjob sync RUN_ID` on a cluster whose nodes are not this machine: a small Ray job of its own (id
# <run id>-sync-<n>, role "sync", hidden from `list` and `runs`) pinned to the node that keeps the run's outputs runs
# `python -m SYNC_MODULE RUN_ID` there (it stores the node's kept folders of the run: rtjob.storage.kept).
ROLE_SYNC = "sync"
SYNC_SUFFIX = "-sync-"
SYNC_MODULE = "rtjob.runside.kept_sync"


def sync_command(run_id: str) -> str:
    """The entrypoint that stores, on its node, what that node kept of run ``run_id``."""
    return f"python -m {SYNC_MODULE} {shlex.quote(run_id)}"


# ... and on Anyscale (job tags).
TAG_RUN_ID, TAG_JOB = "rtjob-run-id", "rtjob-job"
TAG_QUEUE = "rtjob-queue"  # the team's queue it waits in (Anyscale's job queue: backends/anyscale/queue.py)
TAG_STORAGE = "rtjob-storage"
TAG_SCHEDULE = "rtjob-schedule"
TAG_RATE = "rtjob-usd-per-hour"  # "LOW" or "LOW-HIGH": the priced shape at submit
TAG_ROLE = "rtjob-role"  # "supervisor": the Anyscale job that hosts a pipeline's supervisor (hidden from `list`)
TAG_SUPERVISES = "rtjob-supervises"  # the pipeline run it carries

# ---------------------------------------------------------------------------------------------
# What rtjob itself keeps in a run's folder (<storage path>/<run name>/), beside the checkpoints: the run record
# (what ran, from which commit, how it ended) and the driver log of each attempt, archived when the run ends, so a
# run outlives its cluster. Training never writes these names.

RUN_RECORD_FILE = "rtjob-run.json"
RUN_LOGS_DIR = "logs"
DRIVER_LOG_FILE = "driver.log"  # the run's (last attempt's) driver log: logs/driver.log


def attempt_log_name(run_id: str) -> str:
    """The archived driver log of one attempt (logs/<attempt id>.log)."""
    return f"{run_id}.log"


# What the attempts of a run synced from RTJOB_RUN_DIR to its storage: one manifest per attempt
# (rtjob-sync/<attempt id>.json: {"written": {relative name: the version (ETag) that attempt's sync left}}). A later
# attempt (a retry, on this node or a new cluster) replaces an object only while it is a version some attempt of the
# run wrote; an object no attempt wrote is never overwritten.
RUN_SYNC_DIR = "rtjob-sync"


def sync_manifest_name(attempt_id: str) -> str:
    """The key of one attempt's sync manifest, relative to the run's folder."""
    return f"{RUN_SYNC_DIR}/{attempt_id}.json"

# ---------------------------------------------------------------------------------------------
# The run side's files in a run's folder (written by the companion, read by every client).

# A run's log as it is written: immutable parts cut at line ends, a few seconds apart and at exit
# (logs/<attempt id>/part-000000, part-000001, ...), joined in order by every reader; logs/driver.log (the whole
# log, the last attempt's) is written at a clean end.
LOG_PART_PREFIX = "part-"


def log_part_name(attempt_id: str, index: int) -> str:
    """The key of one log part, relative to the run's folder."""
    return f"{RUN_LOGS_DIR}/{attempt_id}/{LOG_PART_PREFIX}{index:06d}"


# Markers in the run's folder: `rtjob stop` writes the first before it stops the run (the companion then records
# STOPPED, not a kill); a notification for an outcome is sent only by whoever creates its marker first.
STOP_MARKER_FILE = "rtjob-stop-requested"


def notify_claim_marker(outcome: str) -> str:
    """The marker created (if absent) before a notification for ``outcome`` is sent: exactly one sender per
    outcome."""
    return f"rtjob-notifying-{outcome}"


def notified_marker(outcome: str) -> str:
    """Written once every target got the notification for ``outcome`` (JSON: when, the message, the targets)."""
    return f"rtjob-notified-{outcome}"


def undelivered_marker(outcome: str) -> str:
    """Written when a target did not get the notification for ``outcome`` after its tries (JSON: when, the
    message, each target's error): `rtjob notify RUN_ID` resends it."""
    return f"rtjob-undelivered-{outcome}"


NOTIFY_MARKERS = ("rtjob-notifying-", "rtjob-notified-", "rtjob-undelivered-")  # their common starts

# A node folder whose files did not all reach the run's storage holds this marker (JSON: the run id, the attempt,
# how the script ended, what is not stored, when): the only copy of those files, which no remover deletes (the
# companion, a retry's fresh folder, `rtjob local down`); `rtjob sync RUN_ID` stores it and then removes it.
# While the companion still tries to store it, the marker says "storing": true and the companion's pid.
KEPT_MARKER_FILE = "rtjob-kept.json"
# The driver log's last line when the outputs were not stored (read through the cluster by a client while the record
# cannot be written): "rtjob-event: outputs_not_stored {json of the kept marker}".
EVENT_OUTPUTS_NOT_STORED = "outputs_not_stored"

# A line rtjob's entrypoints print (rank 0) when a stage of the start-up timeline is reached, which the companion
# notes: "rtjob-event: first_step". A line may carry the moment it was printed, which the companion then records
# instead of the moment it read the line: "rtjob-event: first_step {"at": "2026-12-02T08:00:01.234+00:00"}".
EVENT_LINE_PREFIX = "rtjob-event:"
EVENT_AT_KEY = "at"
EVENT_FIRST_STEP = "first_step"  # rtjob's entrypoints: the first optimizer step is done (rank 0)
EVENT_WORKERS_STARTED = "workers_started"  # rtjob's Ray Train entrypoints: rank 0's loop began (after set-up)
# Ray Train's own phases, stamped by rtjob's Train callback (RAY_TRAIN_CALLBACKS, set by the companion where the
# job's Ray has the interface) in an unchanged Ray Train script; each named by the hook that stamps it.
EVENT_TRAIN_CONTROLLER_STARTED = "train_controller_started"  # the controller's after_controller_start
EVENT_WORKER_GROUP_STARTED = "worker_group_started"  # the worker actors are up: before_init_train_context
EVENT_PROCESS_GROUP_READY = "process_group_ready"  # rank 0's torch process group is initialised (seen within 20 ms)
EVENT_TRAIN_FN_STARTED = "train_fn_started"  # the training function launched on every worker
EVENT_FIRST_REPORT = "first_report"  # the first ray.train.report of every worker: the controller's after_report
TRAIN_PHASES = (EVENT_TRAIN_CONTROLLER_STARTED, EVENT_WORKER_GROUP_STARTED, EVENT_PROCESS_GROUP_READY,
                EVENT_TRAIN_FN_STARTED)
# The events the companion notes, in the order they come.
TIMELINE_EVENTS = (*TRAIN_PHASES, EVENT_WORKERS_STARTED, EVENT_FIRST_STEP, EVENT_FIRST_REPORT)
# The start-up timeline's stages, in order (a run record's "timeline": stage -> ISO time).
TIMELINE_STAGES = ("submitted", "accepted", "driver_started", "first_log_line", *TIMELINE_EVENTS, "ended")
# rtjob's Ray Train callback, as RAY_TRAIN_CALLBACKS names it (module.Class).
TRAIN_CALLBACK = "rtjob.runside.train_callback.TrainPhases"
ENV_TRAIN_CALLBACKS = "RAY_TRAIN_CALLBACKS"
# One field of every metrics row of rtjob's entrypoints: the precision the epoch trained in (bf16, fp16, fp32).
METRIC_PRECISION = "precision"

# ---------------------------------------------------------------------------------------------
# A team's runs indexed beside their records (<storage root>/rtjob-index/), so a bucket of 100,000 runs lists in a
# few requests. Any client, the run-side companion and a supervisor write entries; any client compacts them.
#   rtjob-index/entries/<stamp>-<run id>-<nonce>.json   one per record write (submit, end): the run's listed fields;
#                                                       immutable, created if absent; <stamp> is the writer's UTC time
#                                                       (index_stamp), so entry names sort by time and, for
#                                                       one run, the greatest name is its latest state
#   rtjob-index/index/<seq>-<writer>.jsonl              a compaction: a header line, then one line per run (its latest
#                                                       entry's fields and name), newest first; immutable
# A reader folds the newest index object, every index object it does not name as folded, and every entry still
# present: per run id, the row with the greatest entry name wins. "rtjob-index" is not a job's folder name.
INDEX_DIR = "rtjob-index"
INDEX_ENTRIES_DIR = "rtjob-index/entries"
INDEX_OBJECTS_DIR = "rtjob-index/index"
INDEX_SCHEMA = 1  # an index object or entry of a newer schema is refused (upgrade rtjob), never rewritten


def index_entry_name(stamp: str, run_id: str, nonce: str) -> str:
    """An entry's key relative to the storage root (``stamp``: index_stamp(); ``nonce``: 12 hex digits)."""
    return f"{INDEX_ENTRIES_DIR}/{stamp}-{run_id}-{nonce}.json"


def index_object_name(seq: int, writer: str) -> str:
    """A compacted index object's key relative to the storage root (``writer``: 12 hex digits, new per write)."""
    return f"{INDEX_OBJECTS_DIR}/{seq:012d}-{writer}.jsonl"


def index_stamp(when: datetime.datetime) -> str:
    """An entry's time as its name starts: UTC, fixed width (YYYYmmddTHHMMSSffffffZ), so names sort by time."""
    return when.astimezone(datetime.timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
