"""The run's environment for its storage: which S3 endpoint the job uses, and (only when asked) this
client's AWS credentials. Pure: reads this process's environment and AWS config, contacts nothing."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from ..core.errors import BadInput

# Ray settings every job gets (its own env_vars / --env win). Ray Train V2 moves each worker into a folder of
# its own under the Ray session dir (WorkingDirectorySetupCallback, unless RAY_CHDIR_TO_TRIAL_DIR=0), so a
# script's relative paths (the common ./data) would not find the job's working dir. Train's state tracking
# (off by default; a 0-CPU actor on the head node) lets rtjob ask Ray where an unchanged Ray Train script
# stored its run (backends/ray/train_runs.py).
RAY_DEFAULT_ENV = {"RAY_CHDIR_TO_TRIAL_DIR": "0", "RAY_TRAIN_ENABLE_STATE_TRACKING": "1"}

# The variables an AWS SDK reads for a custom S3 endpoint, most specific first (boto3, pyarrow/AWS C++).
ENDPOINT_VARS = ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")
CREDENTIAL_VARS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")


def endpoint_from_env(env: Mapping[str, str] | None = None) -> str | None:
    env = os.environ if env is None else env
    for var in ENDPOINT_VARS:
        if env.get(var):
            return env[var]
    return None


@dataclass
class JobStorageEnv:
    env: dict[str, str] = field(default_factory=dict)  # variables to add to the job's environment
    # The forwarded credentials: client-held secrets, sealed (backends/ray/sealed.py), never the job's env_vars
    sealed: dict[str, str] = field(default_factory=dict, repr=False)
    endpoint: str | None = None  # the S3 endpoint the job will use (recorded with the run)
    notes: list[str] = field(default_factory=list)


def job_storage_env(
    storage_root: str | None,
    spec_endpoint: str | None,
    job_env: Mapping[str, str],
    forward_credentials: bool = False,
    client_env: Mapping[str, str] | None = None,
) -> JobStorageEnv:
    """The S3 endpoint (and, only when asked, the client's AWS credentials) for the job's environment.

    Precedence for the endpoint: the job's own ``AWS_ENDPOINT_URL[_S3]`` (``env_vars`` / ``--env``), then the
    spec's ``storage_endpoint``, then this client's ``AWS_ENDPOINT_URL_S3`` / ``AWS_ENDPOINT_URL``. Credentials
    are never copied unless ``forward_credentials``; variables the job sets itself always win.
    """
    client_env = os.environ if client_env is None else client_env
    out = JobStorageEnv()
    if storage_root and storage_root.startswith("s3://"):
        own = endpoint_from_env(job_env)
        if own:
            out.endpoint = own
        elif spec_endpoint:
            out.env["AWS_ENDPOINT_URL_S3"] = out.endpoint = spec_endpoint
        else:
            for var in ENDPOINT_VARS:
                if client_env.get(var):
                    out.env[var] = out.endpoint = client_env[var]
                    break
    if forward_credentials:
        creds, region = client_aws_credentials()
        for var, value in creds.items():
            if var in job_env:
                out.notes.append(f"--forward-aws-credentials: the job sets {var} itself; that value is kept")
            else:
                out.sealed[var] = value
        if region and not (job_env.get("AWS_REGION") or job_env.get("AWS_DEFAULT_REGION")):
            out.env["AWS_DEFAULT_REGION"] = region
        if "AWS_SESSION_TOKEN" in creds:
            out.notes.append("forwarded AWS credentials are temporary (session token): a run that outlives "
                             "them cannot write its checkpoints; a cluster role is better for long runs")
    return out


def client_aws_credentials() -> tuple[dict[str, str], str | None]:
    """This client's credentials from the standard AWS chain, as environment variables (and its region)."""
    try:
        import botocore.session
    except ImportError:
        raise BadInput("--forward-aws-credentials needs boto3: pip install 'rtjob[s3]'") from None
    session = botocore.session.get_session()
    try:
        credentials = session.get_credentials()
    except Exception as exc:  # a broken profile, an SSO session that expired ...
        raise BadInput(f"--forward-aws-credentials: cannot read AWS credentials: {type(exc).__name__}") from None
    if credentials is None:
        raise BadInput("--forward-aws-credentials: no AWS credentials found (environment, ~/.aws, SSO or "
                       "instance role)")
    frozen = credentials.get_frozen_credentials()
    env = {"AWS_ACCESS_KEY_ID": frozen.access_key, "AWS_SECRET_ACCESS_KEY": frozen.secret_key}
    if frozen.token:
        env["AWS_SESSION_TOKEN"] = frozen.token
    region = session.get_config_variable("region")
    return env, region


def credential_values(env: Mapping[str, str] | None = None) -> list[str]:
    """Secrets to redact from anything printed: this process's AWS keys (and botocore's, if loaded)."""
    env = os.environ if env is None else env
    values = [env[v] for v in CREDENTIAL_VARS if env.get(v)]
    return [v for v in values if len(v) >= 4]
