"""Job-level retries on Ray (Ray Jobs has none: ray-project/ray #64104).

While rtjob follows a run (``submit`` without ``--no-wait``, ``wait``, ``logs --follow``) and the job's
``max_retries`` allows, a run that FAILED because its *driver* was lost is submitted again:

* retried: Ray reports that the job supervisor died (``error_type`` JOB_SUPERVISOR_ACTOR_DIED or
  JOB_SUPERVISOR_ACTOR_UNKNOWN_FAILURE: the driver's node was lost or the supervisor crashed), or the
  entrypoint was killed by SIGKILL or SIGTERM (driver exit code 137/143 through the shell, or -9/-15):
  the OOM killer, a node shutdown or preemption, someone's ``kill``;
* not retried: every other outcome: SUCCEEDED; STOPPED (``rtjob stop`` / ``ray job stop``); an ordinary
  non-zero exit of the user's code (1, 2, a Python traceback, exhausted Ray Train ``max_failures``); a
  crash by another signal (SIGSEGV, SIGABRT: a bug a retry would repeat); the job's ``timeout_s`` (exit
  124, or 137 when ``timeout`` had to send SIGKILL at the limit: not retried once the run lasted
  ``timeout_s``); runtime_env setup failures and a supervisor that could not be scheduled.

A retry is the same job again: same entrypoint, runtime_env (so ``RTJOB_RUN_NAME`` and
``RTJOB_STORAGE_PATH`` are unchanged and training resumes from its last checkpoint), metadata and
entrypoint resources; its submission id is ``<id>-retry<N>`` and its metadata adds ``rtjob.attempt``
(N + 1) and ``rtjob.parent`` (the first attempt's id). The ids are deterministic, so two rtjob processes
following one run attach to the same retry instead of submitting it twice (Ray rejects a duplicate id).

What is retried is the run's one retry rule (core/retry_rule.py); this module says how a Ray job's end reads in its
terms (``attempt_end``) and acts on it. The actor is an object (``RayRetries``) given only what it needs: the Jobs API's REST client (an address and its
Authorization header) and a submit callable that attaches to an id that exists. No Settings, no backend: a
process on the cluster can build one (this module imports only the stdlib, rtjob_contract and requests at import).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import rtjob_contract as contract

from ...core import retry_rule as rule
from ...core.errors import RunFailed
from ...core.model import Attempt, Attempts, RunInfo, SubmitResult
from ...core.retry_rule import AttemptEnd, attempt_number, max_retries
from ..base import Retry
from .client import RayJobsAPI
from .request import RayJobRequest, time_limit_of

META_ATTEMPT = contract.META_ATTEMPT
META_PARENT = contract.META_PARENT
SUFFIX = "-retry"
MAX_ATTEMPTS = 101  # the schema caps max_retries at 100
# Ray's error types that mean the driver's supervisor (and with it, possibly its node) was lost.
LOST_SUPERVISOR = {"JOB_SUPERVISOR_ACTOR_DIED", "JOB_SUPERVISOR_ACTOR_UNKNOWN_FAILURE"}


def _seconds(data: dict[str, Any]) -> float | None:
    start, end = data.get("start_time"), data.get("end_time")
    return (end - start) / 1000 if start and end else None


def attempt_end(data: dict[str, Any]) -> AttemptEnd:
    """How a Ray job (the Jobs API's dict) ended, in the one retry rule's terms (core/retry_rule.py): a lost
    supervisor is a lost driver; an error of Ray's other than the entrypoint's own is never the driver's loss."""
    status = str(data.get("status"))
    error_type = data.get("error_type") or ""
    message = (data.get("message") or "").strip()
    if error_type in LOST_SUPERVISOR or message.startswith("Job supervisor actor died"):
        return AttemptEnd(status, data.get("driver_exit_code"),
                          lost_driver=message.splitlines()[0][:160] if message else error_type)
    if error_type not in ("", "JOB_ENTRYPOINT_COMMAND_ERROR"):
        return AttemptEnd(status, None)  # runtime_env setup, an unschedulable supervisor: a retry fails again
    limit, seconds = time_limit_of(data), _seconds(data)
    # `timeout` killed it at the job's own timeout_s: a retry would time out again.
    timed_out = bool(limit) and seconds is not None and seconds >= int(limit or 0)
    return AttemptEnd(status, data.get("driver_exit_code"), timed_out=timed_out)


def retry_reason(data: dict[str, Any]) -> str | None:
    """Why this Ray job (the Jobs API's dict) should be submitted again, or None if it should not."""
    return rule.retry_reason(attempt_end(data))


def attempt_of(data: dict[str, Any] | None) -> int:
    """The attempt number of a Ray job (rtjob's metadata; 1: the first)."""
    return attempt_number((data or {}).get("metadata") or {})


def root_id(run_id: str, data: dict[str, Any] | None) -> str:
    meta = (data or {}).get("metadata") or {}
    if meta.get(META_PARENT):
        return str(meta[META_PARENT])
    return run_id


def attempt_id(root: str, attempt: int) -> str:
    return root if attempt <= 1 else f"{root}{SUFFIX}{attempt - 1}"


def max_retries_of(data: dict[str, Any] | None) -> int:
    return max_retries((data or {}).get("metadata") or {})


class RayRetries:
    """The retry rule of one Ray cluster: ``api`` reads its jobs, ``submit`` sends a request (attaching to a
    run whose id exists, as ``Backend.submit`` does)."""

    def __init__(self, api: RayJobsAPI, submit: Callable[[RayJobRequest], SubmitResult]) -> None:
        self.api = api
        self.submit = submit

    @classmethod
    def at(cls, address: str, token: str | None,
           submit: Callable[[RayJobRequest], SubmitResult]) -> RayRetries:
        """The rule for the cluster at ``address``, with its token when it uses token authentication."""
        return cls(RayJobsAPI(address, {"Authorization": f"Bearer {token}"} if token else {}), submit)

    def chain_of(self, run_id: str) -> list[Attempt]:
        """Every attempt of the run ``run_id`` belongs to, in order (probing ``<root>-retryN`` ids)."""
        first = self.api.job(run_id)
        root = root_id(run_id, first)
        root_data = first if root == run_id else self.api.job(root)
        # Bounded: a run has at most 1 + max_retries attempts (and never more than MAX_ATTEMPTS), so a server
        # that answers every id cannot make status or wait probe forever.
        limit = min(MAX_ATTEMPTS, 1 + max(max_retries_of(root_data), max_retries_of(first)))
        found: list[Attempt] = []
        for n in range(1, limit + 1):
            data = first if attempt_id(root, n) == run_id else self.api.job(attempt_id(root, n))
            if data is None:
                break
            found.append(Attempt(attempt_id(root, n), n, str(data.get("status")), data.get("driver_exit_code"),
                                 retry_reason(data)))
        return found

    def attempts(self, run_id: str) -> Attempts:
        """The run's attempts, how many retries it allows, and where ``run_id`` stands among them."""
        chain = self.chain_of(run_id)
        data = self.api.job(run_id) or {}
        meta = data.get("metadata") or {}
        return Attempts(chain, max_retries(meta), attempt_number(meta), meta.get(META_PARENT))

    def decide_and_resubmit(self, run_id: str, local: RayJobRequest | None) -> Retry:
        """After ``run_id`` FAILED: retriable? retries left? then submit (or attach to) the next attempt."""
        data = self.api.job(run_id) or {}
        reason = retry_reason(data)
        allowed = max_retries_of(data)
        attempt = attempt_of(data)
        decision = Retry(run_id, reason, attempt, allowed)
        if reason is not None and rule.retries_left(attempt, allowed):
            decision.next_run, decision.created = self.resubmit(data, attempt + 1, local)
        return decision

    def _working_dir_for_retry(self, runtime_env: dict[str, Any]) -> dict[str, Any]:
        """The retry's runtime_env: the uploaded package if the cluster still has it, else this checkout
        if it packs to exactly the same package (Ray removes a package once no job uses it)."""
        working_dir = runtime_env.get("working_dir")
        if not isinstance(working_dir, str) or not working_dir.startswith("gcs://"):
            return runtime_env
        name = working_dir[len("gcs://"):]
        if self.api.request("GET", f"/api/packages/gcs/{name}").status_code == 200:
            return runtime_env
        import os

        from ray._private.runtime_env.packaging import get_uri_for_directory

        from ...jobspec.project import find_root

        root = find_root()
        include_gitignore = os.environ.get("RAY_RUNTIME_ENV_IGNORE_GITIGNORE", "0") != "1"
        if get_uri_for_directory(str(root), include_gitignore, excludes=runtime_env.get("excludes") or []) == working_dir:
            return {**runtime_env, "working_dir": str(root)}
        raise RunFailed(
            f"cannot retry: the cluster no longer has the run's code ({working_dir}) and {root} is not the same "
            "code; submit the job again with --submission-id to resume from its checkpoint"
        )

    def resubmit(self, data: dict[str, Any], attempt: int,
                 local: RayJobRequest | None = None) -> tuple[RunInfo, bool]:
        """Submit attempt ``attempt`` (2, 3, ...) of the run whose last attempt is ``data``."""
        root = root_id(str(data.get("submission_id")), data)
        new_id = attempt_id(root, attempt)
        metadata = {k: v for k, v in (data.get("metadata") or {}).items() if k not in ("job_submission_id", "job_name")}
        metadata[META_ATTEMPT] = str(attempt)
        metadata[META_PARENT] = root
        # From this rtjob's own request the working dir is re-uploaded if needed; else reuse the job's.
        runtime_env = dict(local.runtime_env) if local is not None else self._working_dir_for_retry(
            dict(data.get("runtime_env") or {})
        )
        request = RayJobRequest(
            run_id=new_id, job_file=str(metadata.get(contract.META_JOB_FILE, "")), notes=[],
            entrypoint=str(data.get("entrypoint")), runtime_env=runtime_env, metadata=metadata,
            entrypoint_num_cpus=float(data.get("entrypoint_num_cpus") or 0),
            # the job info's runtime_env carries its package
            sealed=local.sealed if local is not None else {}, sealed_env=local.sealed_env if local is not None else {},
        )
        result = self.submit(request)  # attaches when another rtjob submitted this retry first
        return result.run, result.created
