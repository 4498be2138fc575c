"""The Ray Jobs request: exactly the arguments of ``JobSubmissionClient.submit_job``, as plain data."""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import rtjob_contract as contract

from ...core import secret_refs
from ...core.errors import BadInput
from ...core.redact import MASK, mask_command, mask_mapping, secret_arg_values, secret_values
from ..packaging import STOP_WAIT_ENV, STOP_WAIT_S, companion_entrypoint, companion_modules, sent_excludes
from ..request import SealingRequest

if TYPE_CHECKING:
    from ...jobspec.pricing import HourlyCost
    from ...jobspec.resolve import ResolvedJob


@dataclass
class RayJobRequest(SealingRequest):
    entrypoint: str = ""
    runtime_env: dict[str, Any] = field(default_factory=dict)
    metadata: dict[str, str] = field(default_factory=dict)
    entrypoint_num_cpus: float = 0
    entrypoint_resources: dict[str, float] = field(default_factory=dict)  # e.g. {"node:10.0.0.5": 0.001}: pinned
    # The embedded cluster's GCS address goes into env_vars as RAY_ADDRESS (unless the job sets its own): Ray gives
    # RAY_ADDRESS to the driver only, and an actor started without it (Ray Train's clean-up actor) fails with
    # "Found multiple active Ray instances" when another Ray runs on the machine. True: rtjob sets it, from the
    # cluster that runs when the request is sent.
    cluster_ray_address: bool = False
    # Its client-held secrets (SealingRequest's sealed, sealed_env) go in the sealed package (sealed.py), never in
    # runtime_env.

    @property
    def submission_id(self) -> str:
        return self.run_id

    def secrets(self) -> list[str]:
        """Secret values inside the request: secret env values, and secret args inside the entrypoint."""
        return (secret_values(self.runtime_env.get("env_vars") or {}) + secret_arg_values(self.entrypoint)
                + self.sealed_values())

    def masked_runtime_env(self) -> dict[str, Any]:
        env = dict(self.runtime_env)
        env["env_vars"] = mask_mapping(env.get("env_vars") or {})
        sealed = self.sealed_names()
        if sealed:  # what Ray is sent: the sealed package, its variables named, never their values
            env["py_modules"] = [*(env.get("py_modules") or []),
                                 f"{secret_refs.SEALED_PACKAGE}/ (sealed: {', '.join(sealed)})"]
        return env

    def masked_entrypoint(self) -> str:
        return mask_command(self.entrypoint)


# Ray Jobs has no run limit of its own: coreutils' timeout enforces the spec's timeout_s (TERM, KILL 30 s later).
TIME_LIMIT_PREFIX = "timeout -k 30 "


def time_limit_of(data: dict[str, Any]) -> str | None:
    """The run's time limit in seconds (text): the request's fact (metadata), else a `timeout -k` prefix of its
    entrypoint (a run without the companion, or submitted by an older rtjob)."""
    limit = ((data.get("metadata") or {}).get(contract.META_TIME_LIMIT))
    if isinstance(limit, str) and limit.isdigit():
        return limit
    entrypoint = data.get("entrypoint")
    if isinstance(entrypoint, str) and entrypoint.startswith(TIME_LIMIT_PREFIX):
        return entrypoint[len(TIME_LIMIT_PREFIX):].split(" ", 1)[0]
    return None


def time_limit_message(data: dict[str, Any]) -> str | None:
    """'stopped by its time limit timeout_s=N' when the Ray job (the Jobs API's dict) ended because its time
    limit fired: the companion (as `timeout` did) exits 124 after TERM, 137 (128+KILL) when it had to kill; 137
    counts only when the run lasted its limit (an out-of-memory kill is not a time limit)."""
    code = data.get("driver_exit_code")
    limit = time_limit_of(data)
    if limit is None or code not in (124, 137):
        return None
    if code == 137:
        start, end = data.get("start_time"), data.get("end_time")
        if not (limit.isdigit() and start and end and (end - start) / 1000 >= int(limit)):
            return None
    return f"stopped by its time limit timeout_s={limit} (exit code {code})"


def build(job: ResolvedJob, rate: HourlyCost | None) -> RayJobRequest:
    """The request for one resolved job (pure); ``rate``: its estimated cost, recorded in the metadata."""
    entrypoint = job.entrypoint
    runtime_env: dict[str, Any] = {
        "working_dir": str(job.working_dir),
        "env_vars": dict(job.env_vars),
    }
    sealed: dict[str, str] = {}
    if job.companion:  # the companion runs it and enforces the time limit (a fact of the request, below)
        entrypoint = companion_entrypoint(entrypoint)
        runtime_env["py_modules"] = companion_modules()
        runtime_env["env_vars"].setdefault(STOP_WAIT_ENV, STOP_WAIT_S)
        if job.spec.timeout_s:
            runtime_env["env_vars"][contract.ENV_TIME_LIMIT_S] = str(job.spec.timeout_s)
        sealed = _secrets(job, runtime_env)
        if job.sealed_env:  # the workers get them from the sealed package (runside/secret_env.setup)
            runtime_env["worker_process_setup_hook"] = secret_refs.SETUP_HOOK
    elif job.spec.secrets:
        raise BadInput(f"{job.job_file}: secrets: needs the companion ({contract.ENV_COMPANION}=0 turns it off, "
                       "leaving nothing to resolve them)")
    elif job.spec.timeout_s:
        entrypoint = f"{TIME_LIMIT_PREFIX}{job.spec.timeout_s} bash -c {shlex.quote(entrypoint)}"
    runtime_env["excludes"] = sent_excludes(job.spec.excludes)  # secrets, rtjob's state and pulled runs stay here
    if job.requirements:
        runtime_env["pip"] = list(job.requirements)
    notes = []
    if job.spec.image_uri:
        notes.append(f"image_uri {job.spec.image_uri} is for Anyscale: a Ray cluster runs the job in its own image "
                     "(requirements are installed into it)")
    metadata = {
        contract.META_JOB: job.spec.name,
        contract.META_JOB_FILE: job.job_file,
    }
    if job.shape_declared:  # a job without a shape leaves it to its entrypoint: nothing invented is recorded
        metadata[contract.META_NODES] = str(job.nodes)
        metadata[contract.META_WORKERS] = str(job.num_workers)
    if job.storage_uri:
        metadata[contract.META_STORAGE] = job.storage_uri
        if job.storage_endpoint:  # so `rtjob pull ID` finds an S3-compatible server by itself
            metadata[contract.META_STORAGE_ENDPOINT] = job.storage_endpoint
    if job.spec.timeout_s:  # the time limit as a fact: the retry rule reads it here, not from the entrypoint
        metadata[contract.META_TIME_LIMIT] = str(job.spec.timeout_s)
    if job.spec.max_retries:  # rtjob resubmits a run whose driver was lost (backends/ray/retries.py)
        metadata[contract.META_MAX_RETRIES] = str(job.spec.max_retries)
    if rate is not None:  # the priced shape, so the finished run is priced without its job file
        rate = dataclasses.replace(rate, source=f"shape of {job.compute_config_name} at submit, {job.nodes} node(s)")
        metadata[contract.META_RATE] = json.dumps(rate.to_json(), separators=(",", ":"))
    if job.queue is not None:  # the request the queue's keeper submits once the run is admitted says where it waited
        metadata.update({contract.META_QUEUE: job.queue.name, contract.META_PRIORITY: str(job.queue.priority)})
    for key, value in job.spec.tags.items():
        metadata[f"{contract.META_TAG_PREFIX}{key}"] = value
    request = RayJobRequest(job.run_id, job.job_file, notes, entrypoint, runtime_env, metadata, 0)
    request.sealed = sealed
    request.sealed_env = dict(job.sealed_env)  # none without the companion (jobspec/secret_settings.companion_of)
    return request


def _secrets(job: ResolvedJob, runtime_env: dict[str, Any]) -> dict[str, str]:
    """The job's `secrets:` in the request: the references in RTJOB_SECRET_REFS and Ray's worker_process_setup_hook
    (a module path), both the same for every run of the job; returns the values this client holds (sealed)."""
    if not job.spec.secrets:
        return {}
    runtime_env["env_vars"][secret_refs.ENV_SECRETS] = json.dumps(job.spec.secrets, sort_keys=True,
                                                                  separators=(",", ":"))
    runtime_env["worker_process_setup_hook"] = secret_refs.SETUP_HOOK
    return secret_refs.client_values(job.spec.secrets, os.environ, job.job_file)


__all__ = ["MASK", "RayJobRequest", "build"]
