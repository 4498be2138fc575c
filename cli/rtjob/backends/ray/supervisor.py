"""A run's supervisor on a Ray cluster: a Ray job of its own (id ``<run id>-supervisor``, 0 CPUs, on the head node)
that carries the run's job-level retries while no rtjob client follows it.

Two halves, one module (imports at module level: the stdlib, rtjob_contract and requests, so the cluster can run it):

* the client's: ``supervisor_request`` builds the supervisor's request from the run as the Jobs API returns it
  after its submit: the run's runtime_env with its uploaded packages' ``gcs://`` URIs (working_dir and py_modules,
  so Ray keeps them while the supervisor lives and a retry finds its code; rtjob itself is among the py_modules,
  so ``python -m rtjob.runside.supervisor`` runs from them), the run's env (its storage and its credentials), the
  dashboard's address; no pip (the supervisor needs none);
* the cluster's: ``Supervisor`` polls the run's current attempt through the cluster's own Jobs API and applies the
  follower's rule (``RayRetries``): a retriable end with retries left submits ``<root>-retry<N>`` exactly once (the
  ids are deterministic and Ray refuses a second job with one: a client follower and the supervisor both trying
  end with one submission and one attach). The stop marker is read before and after each submit (what was just
  submitted is stopped if it appeared). It ends when the run's last attempt ends.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import rtjob_contract as contract

from ...core.errors import RtjobError
from ...core.model import RunInfo, RunStatus, SubmitResult
from ...core.retry_rule import retries_left
from ..base import CarryHooks
from .client import RayJobsAPI, discover_token
from .request import RayJobRequest
from .retries import RayRetries, attempt_of, max_retries_of, retry_reason, root_id

MODULE = contract.SUPERVISOR_MODULE
CARRIED_BY = contract.CARRIER_BACKEND  # the registered backend whose `carry` runs on the cluster (the embedded cluster's too)
TERMINAL = {"SUCCEEDED", "FAILED", "STOPPED"}
POLL_S = 1.0
STOP_POLL_S = 5.0
HEARTBEAT_S = float(os.environ.get(contract.ENV_COMPANION_HEARTBEAT_S) or 30)
# How long the Jobs API may fail to answer (a dashboard restarting) before the supervisor gives up on the run.
PATIENCE_S = 300.0


# A supervisor that died (its node lost, a kill) is replaced by the next client that carries the run: the
# replacements' ids are deterministic too (<run id>-supervisor-2, -3, ...), so two clients start one. After
# MAX_REPLACEMENTS replacements died too, one more is started only to give the run up (FAILED, one line why):
# something kills supervisors on this cluster, and another would die the same way.
MAX_REPLACEMENTS = 3
GIVING_UP = MAX_REPLACEMENTS + 2  # the number of the supervisor that gives the run up
MAX_SUPERVISORS = 20  # how far ids are probed (runs of an older rtjob were replaced up to 20 times)
STOP_WAIT_S = 60.0  # how long the giving-up supervisor waits for the attempt it stopped to end


def supervisor_id(run_id: str, n: int = 1) -> str:
    return f"{run_id}{contract.SUPERVISOR_SUFFIX}" + (f"-{n}" if n > 1 else "")


def latest_supervisor(api: RayJobsAPI, run_id: str) -> tuple[int, dict[str, Any] | None]:
    """The run's latest supervisor (its number and the Jobs API's dict); (0, None) when it has none."""
    found: tuple[int, dict[str, Any] | None] = (0, None)
    for n in range(1, MAX_SUPERVISORS + 1):
        data = api.job(supervisor_id(run_id, n))
        if data is None or not is_supervisor(data) or (data.get("metadata") or {}).get(contract.META_SUPERVISES) != run_id:
            break
        found = (n, data)
    return found


def needs_new_supervisor(api: RayJobsAPI, run_id: str, latest: dict[str, Any] | None) -> bool:
    """Whether the run (root id ``run_id``) has something left to carry and no live supervisor carries it: its
    latest attempt runs, or ended in a way the rule retries with retries left (the supervisor died before it
    submitted the retry)."""
    if latest is not None and latest.get("status") not in TERMINAL:
        return False
    if latest is not None and supervisor_number(latest) >= GIVING_UP:  # it gave the run up: nothing to carry
        return False
    chain = RayRetries(api, no_submit).chain_of(run_id)
    if not chain:
        return False
    last = api.job(chain[-1].id) or {}
    if last.get("status") not in TERMINAL:
        return True
    return retry_reason(last) is not None and retries_left(attempt_of(last), max_retries_of(last))


def supervisor_number(data: dict[str, Any]) -> int:
    """A supervisor's number from its id (``<run id>-supervisor``: 1, ``-supervisor-N``: N)."""
    tail = str(data.get("submission_id") or "").rsplit(contract.SUPERVISOR_SUFFIX, 1)[-1]
    return int(tail[1:]) if tail.startswith("-") and tail[1:].isdigit() else 1


def no_submit(request: RayJobRequest) -> SubmitResult:
    raise AssertionError(f"reading a run's attempts never submits ({request.run_id})")


def missing_packages(api: RayJobsAPI, runtime_env: dict[str, Any]) -> list[str]:
    """The uploaded packages (gcs:// URIs) of ``runtime_env`` the cluster no longer has."""
    uris = [runtime_env.get("working_dir"), *(runtime_env.get("py_modules") or [])]
    return [uri for uri in uris if isinstance(uri, str) and uri.startswith("gcs://")
            and api.request("GET", f"/api/packages/gcs/{uri[len('gcs://'):]}").status_code != 200]


def is_supervisor(data: dict[str, Any]) -> bool:
    """Whether this Jobs API entry is a run's supervisor (hidden from `list` and `runs`)."""
    return ((data.get("metadata") or {}).get(contract.META_ROLE)) == contract.ROLE_SUPERVISOR


def wants_supervisor(data: dict[str, Any]) -> bool:
    """Whether the run (the Jobs API's dict) has something for a supervisor of its own to carry: retries (a
    pipeline's step has its pipeline's supervisor)."""
    step = ((data.get("runtime_env") or {}).get("env_vars") or {}).get(contract.ENV_PIPELINE_ID)
    return max_retries_of(data) > 0 and not is_supervisor(data) and not step


def supervisor_request(data: dict[str, Any], dashboard: str, n: int = 1) -> RayJobRequest:
    """The ``n``th supervisor's request for the run ``data`` (as the Jobs API returns it after its submit),
    reaching the Jobs API at ``dashboard`` from inside the cluster."""
    import shlex

    run_id = str(data.get("submission_id"))
    sent = dict(data.get("runtime_env") or {})
    runtime_env: dict[str, Any] = {}
    # The same package URIs as the run: Ray keeps a package while a job references it, so a retry (which reuses
    # the failed attempt's runtime_env) finds its code for as long as the supervisor runs.
    for key in ("working_dir", "py_modules"):
        if sent.get(key):
            runtime_env[key] = sent[key]
    env = {k: str(v) for k, v in (sent.get("env_vars") or {}).items()}
    env[contract.ENV_DASHBOARD_ADDRESS] = dashboard
    env.pop(contract.ENV_COMPANION, None)
    runtime_env["env_vars"] = env
    meta = data.get("metadata") or {}
    metadata = {contract.META_ROLE: contract.ROLE_SUPERVISOR, contract.META_SUPERVISES: run_id}
    for key in (contract.META_JOB, contract.META_STORAGE, contract.META_STORAGE_ENDPOINT):
        if meta.get(key):
            metadata[key] = str(meta[key])
    return RayJobRequest(run_id=supervisor_id(run_id, n), job_file=str(meta.get(contract.META_JOB_FILE, "")), notes=[],
                         entrypoint=f"python -m {MODULE} {shlex.quote(run_id)} {CARRIED_BY}", runtime_env=runtime_env,
                         metadata=metadata, entrypoint_num_cpus=0)


def in_cluster_api(env: dict[str, str] | None = None) -> RayJobsAPI:
    """The Jobs API as a driver on the cluster reaches it: the dashboard's address the client gave
    (RTJOB_DASHBOARD_ADDRESS), with the cluster's token as its processes carry it (RAY_AUTH_TOKEN,
    RAY_AUTH_TOKEN_PATH, ~/.ray/auth_token)."""
    env = dict(os.environ if env is None else env)
    address = env.get(contract.ENV_DASHBOARD_ADDRESS) or _dashboard_from_gcs(env) or "http://127.0.0.1:8265"
    token = discover_token()
    return RayJobsAPI(address, {"Authorization": f"Bearer {token}"} if token else {})


def _dashboard_from_gcs(env: dict[str, str]) -> str | None:
    """The dashboard's address as the cluster itself publishes it (Ray's own lookup from the driver's RAY_ADDRESS,
    the one `JobSubmissionClient()` makes inside a cluster): a job hosting a pipeline on Anyscale, whose client
    never saw the dashboard."""
    if not env.get("RAY_ADDRESS"):
        return None
    try:
        from ray.dashboard.utils import get_address_for_submission_client

        return str(get_address_for_submission_client(None))
    except Exception:  # noqa: BLE001 - not inside a Ray cluster: the default address
        return None


def submit_over_rest(api: RayJobsAPI, request: RayJobRequest) -> SubmitResult:
    """POST /api/jobs/ (the request's packages are URIs already: nothing to upload); an id that exists (another
    submitter was first) is attached to."""
    body = {"entrypoint": request.entrypoint, "submission_id": request.submission_id,
            "runtime_env": request.runtime_env, "metadata": request.metadata,
            "entrypoint_num_cpus": request.entrypoint_num_cpus}
    resp = api.request("POST", "/api/jobs/", json=body)
    created = resp.status_code < 400
    if not created and "already exists" not in resp.text:
        raise RtjobError(f"{api.address} refused {request.submission_id}: HTTP {resp.status_code} "
                         f"{resp.text.strip().splitlines()[-1][:300] if resp.text.strip() else ''}")
    data = api.job(request.submission_id) or {"submission_id": request.submission_id, "status": "PENDING"}
    return SubmitResult(_info(data, api.address), created=created)


def _info(data: dict[str, Any], address: str) -> RunInfo:
    try:
        status = RunStatus(data.get("status", "UNKNOWN"))
    except ValueError:
        status = RunStatus.UNKNOWN
    meta = data.get("metadata") or {}
    return RunInfo(id=str(data.get("submission_id")), job=meta.get(contract.META_JOB), backend="ray", status=status,
                   message=data.get("message"), storage_uri=meta.get(contract.META_STORAGE), address=address,
                   exit_code=data.get("driver_exit_code"))


class Supervisor:
    def __init__(self, api: RayJobsAPI, run_id: str, hooks: CarryHooks,
                 submit: Callable[[RayJobRequest], SubmitResult] | None = None) -> None:
        self.api = api
        self.run_id = run_id
        self.hooks = hooks
        self.retries = RayRetries(api, submit or (lambda request: submit_over_rest(api, request)))
        self.submitted: list[str] = []  # retries this supervisor created (not attached to)
        self._beaten = 0.0
        self._stop_read = time.monotonic()  # when the stop marker was last read while an attempt ran
        self._stopping: str | None = None  # the attempt it stopped on the marker

    def _job(self, run_id: str) -> dict[str, Any] | None:
        """The attempt as the Jobs API has it; faults that may pass are waited out for PATIENCE_S."""
        deadline = time.monotonic() + PATIENCE_S
        while True:
            try:
                return self.api.job(run_id)
            except RtjobError as exc:
                if time.monotonic() > deadline:
                    raise
                self.hooks.say(f"the Jobs API did not answer ({exc}); trying again")
                time.sleep(min(5.0, POLL_S * 5))

    def _beat(self, current: str | None, force: bool = False) -> None:
        if force or time.monotonic() - self._beaten >= HEARTBEAT_S:
            self._beaten = time.monotonic()
            try:
                self.hooks.beat(current)
            except Exception as exc:  # noqa: BLE001 - a record out of reach does not stop the run's retries
                self.hooks.say(f"heartbeat not recorded: {getattr(exc, 'message', None) or type(exc).__name__}")

    def _stop_if_requested(self, current: str) -> None:
        """The run's stop marker, read every STOP_POLL_S while an attempt runs: a stop that reached only storage
        (a client that cannot reach this cluster's Jobs API: a pipeline hosted as one Anyscale job) stops it."""
        if time.monotonic() - self._stop_read < STOP_POLL_S or self._stopping == current:
            return
        self._stop_read = time.monotonic()
        if self.hooks.stop_requested():
            self._stopping = current
            self.hooks.say(f"the run's stop was requested: stopping {current}")
            try:
                self.api.stop(current)
            except RtjobError as exc:
                self.hooks.say(f"could not stop {current}: {exc}")

    def current_attempt(self) -> str:
        """The run's latest attempt (a client follower, or an earlier supervisor, may have retried it already)."""
        chain = self.retries.chain_of(self.run_id)
        return chain[-1].id if chain else self.run_id

    def run(self) -> int:
        first = self._job(self.run_id)
        if first is None:
            self.hooks.say(f"no run {self.run_id} on this cluster: nothing to carry")
            return 2
        self.run_id = root_id(self.run_id, first)
        current = self.current_attempt()
        n, _latest = latest_supervisor(self.api, self.run_id)
        if n >= GIVING_UP:
            return self._give_up(current, n)
        self.hooks.say(f"carrying {self.run_id} (attempt {current})")
        self._beat(current, force=True)
        while True:
            data = self._job(current)
            if data is None:
                self.hooks.say(f"attempt {current} is gone from the cluster: nothing more to carry")
                self._beat(None, force=True)
                return 1
            status = str(data.get("status"))
            if status not in TERMINAL:
                self._beat(current)
                self._stop_if_requested(current)
                time.sleep(POLL_S)
                continue
            after = self._next(current, data)
            if after is None:
                self.hooks.say(f"{current} ended {status}: the run has ended")
                self._beat(None, force=True)
                return 0
            current = after
            self._beat(current, force=True)

    def _give_up(self, current: str, n: int) -> int:
        """The supervisor replaced MAX_REPLACEMENTS times died again: the run's attempt stopped (when it runs) and
        the run ended FAILED with why (lifecycle.gave_up through the run side), told once."""
        line = (f"its supervisor died {n - 1} times ({supervisor_id(self.run_id, n - 1)} was the last): rtjob gave "
                f"the run up after {MAX_REPLACEMENTS} replacements")
        data = self._job(current) or {}
        if str(data.get("status")) not in TERMINAL:
            self.hooks.say(f"{line}; stopping {current}")
            try:
                self.api.stop(current)
            except RtjobError as exc:
                self.hooks.say(f"could not stop {current}: {exc}")
            deadline = time.monotonic() + STOP_WAIT_S  # its companion writes the attempt's end first
            while str((self._job(current) or {}).get("status")) not in TERMINAL and time.monotonic() < deadline:
                time.sleep(POLL_S)
        if str((self._job(current) or {}).get("status")) in ("SUCCEEDED", "STOPPED"):
            self.hooks.say(f"{current} ended {(self._job(current) or {}).get('status')}: the run has ended")
            return 0
        self.hooks.say(line)
        self.hooks.gave_up(line)
        self._beat(None, force=True)
        return 1

    def _next(self, current: str, data: dict[str, Any]) -> str | None:
        """The attempt after ``current``, which ended as ``data`` says: submitted (or attached to) when the rule
        retries it; None when the run has ended."""
        reason = retry_reason(data)
        allowed = max_retries_of(data)
        attempt = attempt_of(data)
        if reason is None or not retries_left(attempt, allowed):
            if reason is not None:
                self.hooks.say(f"{current} FAILED: {reason}; no retries left (max_retries {allowed})")
            return None
        if self.hooks.stop_requested():
            self.hooks.say(f"{current} FAILED: {reason}; not retried: the run's stop was requested")
            return None
        missing = missing_packages(self.api, dict(data.get("runtime_env") or {}))
        if missing:
            line = f"cannot retry {current}: the cluster no longer has the run's code ({', '.join(missing)})"
            self.hooks.say(line)
            self.hooks.gave_up(line)
            return None
        run, created = self.retries.resubmit(data, attempt + 1)
        if created:  # whoever submits a retry tells it (`notify: on: [retrying]`, once per retry)
            self.submitted.append(run.id)
            self.hooks.retried(current, reason, attempt, run.id)
        self.hooks.say(f"{current} FAILED: {reason}; retry {attempt}/{allowed}: "
                       f"{'submitted' if created else 'attached to'} {run.id}")
        if self.hooks.stop_requested():  # the stop came while we submitted: what we started stops too
            self.hooks.say(f"the run's stop was requested: stopping {run.id}")
            try:
                self.api.stop(run.id)
            except RtjobError as exc:
                self.hooks.say(f"could not stop {run.id}: {exc}")
        return run.id
