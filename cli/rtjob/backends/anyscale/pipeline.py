"""A pipeline on Anyscale: one Anyscale job (``<pipeline id>-supervisor``) whose driver is the pipeline's supervisor.

Its entrypoint is the supervisor every Ray cluster runs (``python -m rtjob.runside.supervisor ID ray`` with
RTJOB_PIPELINE_STEPS): an Anyscale job's cluster is a Ray cluster, so the supervisor submits each step as a Ray job
through that cluster's own Jobs API, carries the steps' retries by the Ray rule, and writes the pipeline's record and
its one notification to storage. The steps run the supervisor's own code: the job's working dir (Anyscale ships it
with the job) and rtjob's modules (``py_modules``), which the supervisor uploads to its cluster itself
(STEP_CODE_OF_SUPERVISOR); so a pipeline's steps share one working dir, and, being on one cluster, one compute config,
image, cloud and project (``check_steps`` refuses others in one line). Anyscale's ``max_retries`` restarts the job
(a lost head node, a cluster that died): the new supervisor skips the steps whose records say SUCCEEDED, and one that
finds the pipeline's end recorded exits as it ended.

The values only the client holds (`env:` secrets, forwarded credentials, notify URLs) travel in the job's sealed
package (backends/sealed_package.py): the supervisor's own, and each step's in its steps file, which the supervisor
seals again for that step alone when it submits it (a package of its own on the cluster, never the step's env).

Steps are not Anyscale jobs: their status and logs come from their records and logs in storage (the companion of
each step writes them), the supervisor's job from the SDK.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from typing import Any

import rtjob_contract as contract

from ...core.errors import BadInput
from ...jobspec.pricing import compute_config_cost
from ..packaging import companion_modules
from ..request import STEP_ONLY_ENV
from .request import AnyscaleJobRequest, build_checked

# What all steps of one pipeline share on Anyscale (one job, one cluster), with how a person names it.
SHARED = (("compute_config", "compute config"), ("image_uri", "image"), ("cloud", "cloud"), ("project", "project"),
          ("working_dir", "working dir"))


def _step_name(config: dict[str, Any]) -> str:
    return str((config.get("env_vars") or {}).get(contract.ENV_STEP_NAME) or config.get("name"))


def _sized(compute: Any, sizes: list[tuple[int, int]] | None = None) -> Any:
    """An inline compute config with its worker groups' node counts taken out (``sizes``: put back as given)."""
    if not isinstance(compute, dict):
        return compute
    out = copy.deepcopy(compute)
    for i, group in enumerate(out.get("worker_nodes") or []):
        group.pop("min_nodes", None)
        group.pop("max_nodes", None)
        if sizes is not None:
            group["min_nodes"], group["max_nodes"] = sizes[i]
    return out


def check_steps(requests: list[AnyscaleJobRequest], where: str) -> None:
    """BadInput (one line) unless every step can run on one Anyscale job's cluster: steps may differ in their node
    counts (the cluster autoscales between them), not in anything else of it."""
    if not requests:
        return
    first = requests[0].config
    for request in requests[1:]:
        for key, what in SHARED:
            mine, theirs = request.config.get(key), first.get(key)
            if key == "compute_config":
                mine, theirs = _sized(mine), _sized(theirs)
            if mine != theirs:
                raise BadInput(
                    f"{where}: on Anyscale a pipeline runs as one job on one cluster, so its steps need one {what}; "
                    f"step {_step_name(request.config)} differs from step {_step_name(first)} (give every step the "
                    f"same {what}, or run the pipeline on a Ray cluster: --backend ray)")


def shared_compute_config(requests: list[AnyscaleJobRequest]) -> Any:
    """The steps' compute config, each worker group from the fewest nodes a step asks for to the most: Anyscale's
    autoscaler adds nodes for the step that needs them and removes them after it."""
    first = requests[0].config.get("compute_config")
    if not isinstance(first, dict) or not first.get("worker_nodes"):
        return first
    configs: list[dict[str, Any]] = [r.config["compute_config"] for r in requests]  # check_steps: all dicts alike
    sizes = []
    for i in range(len(first["worker_nodes"])):
        counts = [(int(c["worker_nodes"][i].get("min_nodes") or 0), int(c["worker_nodes"][i].get("max_nodes") or 0))
                  for c in configs]
        sizes.append((min(low for low, _ in counts), max(high for _, high in counts)))
    return _sized(first, sizes)


def step_body(request: AnyscaleJobRequest, index: int) -> dict[str, Any]:
    """A step as the Jobs API of the pipeline's cluster takes it (what the supervisor POSTs): the step's JobConfig
    as a Ray job, its code the supervisor's own (uploaded on the cluster), its limits and retries as rtjob's Ray
    metadata (the companion enforces timeout_s; the Ray rule retries a lost driver up to max_retries). Its
    client-held secrets are entry ``index`` of the pipeline job's sealed package (STEP_SEALED), never its env."""
    config = request.config
    tags = config.get("tags") or {}
    env = {k: str(v) for k, v in (config.get("env_vars") or {}).items()}
    env[contract.ENV_BACKEND] = "anyscale"  # its record says where it ran, though it runs as a Ray job there
    runtime_env: dict[str, Any] = {"env_vars": env, "excludes": list(config.get("excludes") or [])}
    if config.get("requirements"):
        runtime_env["pip"] = list(config["requirements"])
    metadata = {contract.META_JOB: str(tags.get(contract.TAG_JOB) or ""), contract.META_JOB_FILE: request.job_file}
    if tags.get(contract.TAG_STORAGE):
        metadata[contract.META_STORAGE] = str(tags[contract.TAG_STORAGE])
    if config.get("timeout_s"):
        metadata[contract.META_TIME_LIMIT] = str(config["timeout_s"])
        env[contract.ENV_TIME_LIMIT_S] = str(config["timeout_s"])
    if config.get("max_retries"):
        metadata[contract.META_MAX_RETRIES] = str(config["max_retries"])
    body = {"entrypoint": config["entrypoint"], "submission_id": request.run_id, "runtime_env": runtime_env,
            "metadata": metadata, "entrypoint_num_cpus": 0, "job_file": request.job_file,
            "code": contract.STEP_CODE_OF_SUPERVISOR}
    if request.sealed or request.sealed_env:
        body[contract.STEP_SEALED] = index
    return body


def supervisor_name(pipeline_id: str) -> str:
    return f"{pipeline_id}{contract.SUPERVISOR_SUFFIX}"


def pipeline_request(pipeline_id: str, storage_uri: str | None, job: str, requests: list[AnyscaleJobRequest],
                     backend: str) -> AnyscaleJobRequest:
    """The Anyscale job that runs pipeline ``pipeline_id``: its steps' shared cluster, its driver the supervisor
    (``backend``'s loop)."""
    check_steps(requests, requests[0].job_file if requests else job)
    first = requests[0].config
    env = {k: str(v) for k, v in (first.get("env_vars") or {}).items() if k not in STEP_ONLY_ENV}
    env[contract.ENV_JOB_NAME] = job
    env[contract.ENV_PIPELINE_ID] = pipeline_id
    if storage_uri:
        env[contract.ENV_RUN_URI] = storage_uri
    env[contract.ENV_PIPELINE_STEPS] = json.dumps([step_body(r, i) for i, r in enumerate(requests)],
                                                  separators=(",", ":"))
    env[contract.ENV_SUPERVISOR_EXIT] = "outcome"  # the job's status is the pipeline's
    env[contract.ENV_BACKEND] = "anyscale"
    limits = [r.config.get("timeout_s") for r in requests]
    tags = {contract.TAG_ROLE: contract.ROLE_SUPERVISOR, contract.TAG_SUPERVISES: pipeline_id,
            contract.TAG_JOB: job, contract.TAG_RUN_ID: pipeline_id}
    if storage_uri:
        tags[contract.TAG_STORAGE] = storage_uri
    compute = shared_compute_config(requests)
    rate = compute_config_cost(compute)
    if rate is not None:  # the shape's range, so the ended pipeline is priced without its file
        tags[contract.TAG_RATE] = f"{rate.low:.4f}" if rate.fixed else f"{rate.low:.4f}-{rate.high:.4f}"
    config: dict[str, Any] = {
        "name": supervisor_name(pipeline_id),
        # its driver: the supervisor running ``backend``'s loop (the job's cluster is a Ray cluster)
        "entrypoint": contract.supervisor_command(pipeline_id, backend),
        "image_uri": first.get("image_uri"),
        "compute_config": compute,
        "working_dir": first.get("working_dir"),
        "excludes": list(first.get("excludes") or []),
        "requirements": [],  # the supervisor needs none; each step's requirements are its own runtime_env's pip
        "py_modules": companion_modules(),
        "env_vars": env,
        # Anyscale restarts the job (a lost head node) as often as the steps allow their own lost drivers.
        "max_retries": max(int(r.config.get("max_retries") or 0) for r in requests),
        # The steps' limits are theirs (their companions enforce them); the job's is their sum when all have one.
        "timeout_s": sum(int(t) for t in limits if t) if all(limits) else None,
        "tags": tags,
    }
    for key in ("cloud", "project"):
        if first.get(key):
            config[key] = first[key]
    shown = requests[0].job_file.rsplit(" step ", 1)[0]  # the pipeline's file (a step's is "<file> step <name>")
    # The client-held secrets travel in the job's sealed package (request.sent_config): the supervisor's own
    # (forwarded credentials, notify URLs: the first step's, as on Ray) and each step's, which it seals for that step.
    return dataclasses.replace(build_checked(supervisor_name(pipeline_id), shown, config),
                               sealed_env=dict(requests[0].sealed_env),
                               sealed_steps=[{"values": dict(r.sealed), "env": dict(r.sealed_env)} for r in requests])
