"""The Anyscale request: a JobConfig as plain data, checked with Anyscale's own model when the SDK is here."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import rtjob_contract as contract

from ...core import secret_refs
from ...core.errors import BadInput
from ...core.redact import MASK, is_secret, mask_command, mask_mapping, secret_values
from ...core.yamlout import dump_yaml
from ...jobspec.pricing import pinned_compute_config

# Anyscale packages a working dir as Ray does; the companion travels as it does on Ray.
from ..packaging import DEFAULT_EXCLUDES, STOP_WAIT_ENV, STOP_WAIT_S, companion_entrypoint, companion_modules
from ..request import SealingRequest
from ..sealed_package import sealed_folder
from .client import ANYSCALE_VERSION, anyscale_errors
from .queue import job_queue_config

if TYPE_CHECKING:
    from ...jobspec.pricing import HourlyCost
    from ...jobspec.resolve import ResolvedJob

# `compute_config: anyscale:NAME[:VERSION]` names a compute config registered on Anyscale, not a file (the
# backend's Placement declares it).
REGISTERED_PREFIX = "anyscale:"


def job_config(job: ResolvedJob, rate: HourlyCost | None, cloud: str | None = None,
               project: str | None = None) -> dict[str, Any]:
    """Exactly the JobConfig rtjob sends for a resolved job (secrets in the clear: render masks them).
    ``rate``: its estimated cost (recorded in its tags); ``cloud``/``project``: the settings' (a context,
    [tool.rtjob], env), used when the job names none."""
    compute: dict[str, Any] | str | None = None
    if job.compute_config is not None:
        compute = pinned_compute_config(job.compute_config, job.worker_group, job.nodes)
    elif job.compute_config_name and job.compute_config_name.startswith(REGISTERED_PREFIX):
        compute = job.compute_config_name[len(REGISTERED_PREFIX):]
    tags = {**job.spec.tags, contract.TAG_JOB: job.spec.name, contract.TAG_RUN_ID: job.run_id}
    if job.storage_uri:
        tags[contract.TAG_STORAGE] = job.storage_uri
    if rate is not None:  # the priced shape, so the finished run is priced without its job file
        tags[contract.TAG_RATE] = f"{rate.low:.4f}" if rate.fixed else f"{rate.low:.4f}-{rate.high:.4f}"
    config: dict[str, Any] = {
        "name": job.run_id,
        "entrypoint": job.entrypoint,  # Anyscale enforces timeout_s itself: no `timeout` wrapper as on Ray
        "image_uri": job.spec.image_uri,  # None: the cloud's default image
        "compute_config": compute,  # None: the cloud's default compute config
        "working_dir": str(job.working_dir),
        "excludes": [*DEFAULT_EXCLUDES, *(e for e in job.spec.excludes if e not in DEFAULT_EXCLUDES)],
        "requirements": list(job.requirements or []),
        "env_vars": dict(job.env_vars),  # forwarded credentials and notify URLs: sealed (sent_config), never here
        "max_retries": job.spec.max_retries,  # explicit: unset, the SDK defaults to 1 (and warns)
        "timeout_s": job.spec.timeout_s,
        "tags": tags,
    }
    # The job's own cloud; else a registered compute config's or an inline one's that names one; else the
    # settings' (built-in compute configs name none); else Anyscale's default.
    if job.spec.cloud:
        config["cloud"] = job.spec.cloud
    elif cloud and not isinstance(compute, str) and not (compute or {}).get("cloud"):
        config["cloud"] = cloud
    if job.spec.project or project:
        config["project"] = job.spec.project or project
    if job.queue is not None:  # Anyscale's own job queue orders it (backends/anyscale/queue.py: the priority's rule)
        config["job_queue_config"] = job_queue_config(job.queue)
        tags[contract.TAG_QUEUE] = job.queue.name
        config["env_vars"][contract.ENV_TEAM_QUEUE] = json.dumps({"name": job.queue.name, "priority": job.queue.priority})
    if job.companion:  # the run-side companion, as on Ray: JobConfig's py_modules, the entrypoint under it
        config["entrypoint"] = companion_entrypoint(job.entrypoint)
        config["py_modules"] = companion_modules()
        config["env_vars"].setdefault(STOP_WAIT_ENV, STOP_WAIT_S)
        if job.spec.secrets:  # references only: the companion resolves them on the driver's node (env: ones sealed)
            config["env_vars"][secret_refs.ENV_SECRETS] = json.dumps(job.spec.secrets, sort_keys=True,
                                                                     separators=(",", ":"))
    return config


def _client_held(job: ResolvedJob) -> dict[str, str]:
    """The values this client holds for the job's `secrets:` (env: references), sealed at submit; with the companion
    off nothing on the cluster would resolve or unseal them: refused."""
    if not job.spec.secrets:
        return {}
    if not job.companion:
        raise BadInput(f"{job.job_file}: secrets: needs the companion ({contract.ENV_COMPANION}=0 turns it off, "
                       "leaving nothing to resolve them)")
    return secret_refs.client_values(job.spec.secrets, os.environ, job.job_file)


@contextlib.contextmanager
def sent_config(request: AnyscaleJobRequest) -> Iterator[dict[str, Any]]:
    """The JobConfig as submitted: the request's with the sealed package (backends/sealed_package.py) among its
    py_modules while the block runs, which the SDK uploads to the cloud's storage (the JobConfig keeps its URI,
    never the values); unchanged when nothing is sealed."""
    with sealed_folder(request.sealed, request.sealed_env, request.sealed_steps) as folder:
        yield request.config if folder is None else \
            {**request.config, "py_modules": [*(request.config.get("py_modules") or []), folder]}


def masked_config(config: dict[str, Any], sealed: list[str] | None = None) -> dict[str, Any]:
    """The JobConfig as printed: secret env values, tags and args masked whole (as the Ray render does); ``sealed``
    the names the sealed package carries (shown among the py_modules, never their values)."""
    out = dict(config)
    if sealed:
        out["py_modules"] = [*(config.get("py_modules") or []),
                             f"{secret_refs.SEALED_PACKAGE}/ (sealed: {', '.join(sorted(sealed))})"]
    out["env_vars"] = mask_mapping(config.get("env_vars") or {})
    steps = (config.get("env_vars") or {}).get(contract.ENV_PIPELINE_STEPS)
    if steps:  # a pipeline's job: each step inside it masked as a step's own request is
        bodies = [{**body, "entrypoint": mask_command(str(body.get("entrypoint") or "")),
                   "runtime_env": {**(body.get("runtime_env") or {}),
                                   "env_vars": mask_mapping((body.get("runtime_env") or {}).get("env_vars") or {})}}
                  for body in json.loads(steps)]
        out["env_vars"][contract.ENV_PIPELINE_STEPS] = json.dumps(bodies, separators=(",", ":"))
    out["tags"] = mask_mapping(config.get("tags") or {})
    if isinstance(config.get("entrypoint"), str):
        out["entrypoint"] = mask_command(config["entrypoint"])
    return out


def masked_names(config: dict[str, Any]) -> list[str]:
    env = config.get("env_vars") or {}
    return [k for k, v in env.items() if v and is_secret(k, str(v))]


def check_with_anyscale(kind: str, data: dict[str, Any], where: str) -> str | None:
    """Validate ``data`` with Anyscale's own model (JobConfig, ScheduleConfig or ComputeConfig).

    Returns what checked it, or None when the SDK is not installed; raises BadInput if the model
    rejects the data.
    """
    try:
        if kind == "JobConfig":
            from anyscale.job.models import JobConfig as model
        elif kind == "ScheduleConfig":
            from anyscale.schedule.models import ScheduleConfig as model
        else:
            from anyscale.compute_config.models import compute_config_type_from_dict

            with anyscale_errors(f"{where}: Anyscale's ComputeConfig rejects it"):
                compute_config_type_from_dict(data)
            return f"anyscale {ANYSCALE_VERSION} ComputeConfig"
    except ImportError:
        return None
    with anyscale_errors(f"{where}: Anyscale's {kind} rejects it"):
        model.from_dict(data)
    return f"anyscale {ANYSCALE_VERSION} {kind}"


@dataclass
class AnyscaleJobRequest(SealingRequest):
    """What submit sends: the JobConfig fields (as plain data) for one run."""

    config: dict[str, Any]
    checked_with: str | None = None  # "anyscale 0.26.112 JobConfig" once its model accepted the config
    # Its client-held secrets (SealingRequest's sealed, sealed_env) go in the sealed package (sent_config), never
    # in the config.

    def secrets(self) -> list[str]:
        """Secret values inside the request: secret env values and the sealed ones (an SDK error is redacted)."""
        return secret_values(self.config.get("env_vars") or {}) + self.sealed_values()


def build(job: ResolvedJob, config: dict[str, Any]) -> AnyscaleJobRequest:
    """The request for one resolved job and its JobConfig (``job_config``), checked with Anyscale's JobConfig
    model when the SDK is installed, with what the user should know about it as notes (pure: the job is not
    changed)."""
    sealed = _client_held(job)
    checked = check_with_anyscale("JobConfig", config, job.job_file)
    notes = []
    if not checked:
        notes.append("anyscale is not installed: the JobConfig was not checked with its model "
                     "(pip install 'rtjob[anyscale]')")
    group = job.worker_group
    if group is not None and job.nodes > group.max_nodes:
        notes.append(f"--nodes {job.nodes} raises {group.label}'s max_nodes from {group.max_nodes} to {job.nodes}")
    compute = config["compute_config"]
    if compute is None:
        notes.append("no compute config: Anyscale uses the cloud's default one (its cost is not estimated)")
    elif isinstance(compute, str):
        notes.append(f"compute config {compute!r} is used as registered on Anyscale: its own "
                     "node counts apply (rtjob compute-config show shows it)")
    # A registered compute config carries its cloud; an inline one (or none) takes the job's, else the default.
    if not config.get("cloud") and not isinstance(compute, str) and not (compute or {}).get("cloud"):
        notes.append("no cloud named: Anyscale uses the organization's default cloud (set `cloud` in the project config, "
                     "RTJOB_ANYSCALE_CLOUD or the job's cloud:)")
    if not job.storage_uri:
        notes.append("no storage set: checkpoints stay on the cluster and end with it; set storage: "
                     "s3://bucket/prefix (or RTJOB_STORAGE, --storage)")
    if job.spec.timeout_s is None:
        notes.append("no timeout_s: the run has no time limit on Anyscale (set timeout_s in the job)")
    return AnyscaleJobRequest(job.run_id, job.job_file, notes, config, checked, sealed=sealed,
                              sealed_env=dict(job.sealed_env))


def build_checked(run_id: str, job_file: str, config: dict[str, Any]) -> AnyscaleJobRequest:
    """A request rtjob composes itself (a pipeline's job), checked with Anyscale's JobConfig model when installed."""
    return AnyscaleJobRequest(run_id, job_file, [], config, check_with_anyscale("JobConfig", config, job_file))


def render_yaml(request: AnyscaleJobRequest, equivalent: str) -> str:
    """The request as a file `anyscale job submit -f FILE` accepts (secret values masked)."""
    where = f" ({request.job_file})" if request.job_file else ""
    lines = [
        f"# Anyscale job config for rtjob run {request.run_id}{where}, rendered by rtjob.",
        f"# Submit it with: {equivalent}",
    ]
    if masked_names(request.config):
        lines.append(f"# Masked values ({MASK}): pass them at submit time with --env NAME=value, as above.")
    if request.checked_with:
        lines.append(f"# Checked with {request.checked_with}.")
    if request.sealed_names():  # not in the file: rtjob's submit adds them as its sealed package
        lines.append(f"# Sealed by rtjob's submit, not in this file: {', '.join(request.sealed_names())}.")
    return "\n".join(lines) + "\n" + dump_yaml(masked_config(request.config))
