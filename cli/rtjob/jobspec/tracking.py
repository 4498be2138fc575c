"""`tracking:` of a job: the run mirrored to an experiment tracker (runside/tracking/), and what the run side gets
of it (RTJOB_TRACKING: the tracker's address, the params and tags; never a secret).

MLflow (`mlflow: {tracking_uri, experiment}`, through its REST API) and W&B (`wandb: {project, entity}`, with the
job's environment's own `wandb` package: its token is W&B's WANDB_API_KEY, given as a secret), either or both."""

from __future__ import annotations

import getpass
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, field_validator, model_validator

import rtjob_contract as contract

from ..core.errors import BadInput
from ..core.gitinfo import git_state
from ..core.redact import is_secret, url_password

PARAM_VALUE_MAX = 6000  # MLflow's limit on a param's value
# Each tracker's credentials, as its own client reads them: a `secrets:` entry's to carry, never env_vars'.
TOKENS = {"mlflow": ("MLFLOW_TRACKING_TOKEN", "MLFLOW_TRACKING_PASSWORD"), "wandb": ("WANDB_API_KEY",)}


class MlflowTracking(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)

    # `uri` too: MLflow's own name is the tracking URI, and people write it either way
    tracking_uri: Annotated[str, Field(pattern=r"^https?://[^\s/]+",
                                       validation_alias=AliasChoices("tracking_uri", "uri"))]
    experiment: Annotated[str, Field(min_length=1)] = "rtjob"

    @field_validator("tracking_uri")
    @classmethod
    def _no_password(cls, value: str) -> str:
        if url_password(value) is not None:  # the value itself is never echoed
            raise ValueError("the tracking_uri carries a password: give the tracker's token as a secret, "
                             "not in the address")
        return value.rstrip("/")


class WandbTracking(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)

    project: Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[^/\\#?%:]+$")]
    entity: Annotated[str, Field(min_length=1, pattern=r"^[^/\\#?%:]+$")] | None = None  # default: the key's


class Tracking(BaseModel):
    """`tracking:` of a job."""

    model_config = ConfigDict(extra="forbid")

    mlflow: MlflowTracking | None = None
    wandb: WandbTracking | None = None

    @model_validator(mode="after")
    def _one_at_least(self) -> Tracking:
        if self.mlflow is None and self.wandb is None:
            raise ValueError("tracking: names no tracker (mlflow: {tracking_uri, experiment}, wandb: {project})")
        return self


def tracking_of_env(env: Mapping[str, str]) -> Tracking | None:
    """MLflow's own MLFLOW_TRACKING_URI (an http(s) server) and MLFLOW_EXPERIMENT_NAME in this client's
    environment, as MLflow users expect; a job's `tracking:` wins. Another kind of URI (a folder, databricks) is
    not a server rtjob can talk to: then none."""
    uri = (env.get("MLFLOW_TRACKING_URI") or "").strip()
    if not uri.startswith(("http://", "https://")) or url_password(uri) is not None:
        return None
    try:
        return Tracking(mlflow=MlflowTracking(tracking_uri=uri,
                                              experiment=env.get("MLFLOW_EXPERIMENT_NAME") or "rtjob"))
    except ValueError:
        return None


def tracking_env(tracking: Tracking | None, args: dict[str, Any], job: str, backend: str, shown: str,
                 working_dir: Path, client_env: Mapping[str, str], settings: Any = None,
                 job_env: Mapping[str, str] | None = None) -> dict[str, str]:
    """RTJOB_TRACKING for the job's env ({} when nothing asks for it): the job's `tracking:` (``shown``: its file),
    else the `tracking` setting of ``settings`` (the project config or a context: checked when it was read), else
    MLflow's own variables in ``client_env``; the tracker's address, the params (the job's args less every secret
    one: by name, by shape, a URL with a password), the tags (rtjob's, MLflow's standard ones, the git checkout of
    ``working_dir``) and where the setting came from (``render --explain``). A tracker's token in ``job_env`` (the
    job's env_vars, `--env` included) is refused in one line: it is a `secrets:` entry's to carry, as env_vars
    travel in Ray's job info."""
    source = shown
    if tracking is None and settings is not None and settings.get("tracking") is not None:
        tracking, source = Tracking.model_validate(settings.get("tracking")), settings.source("tracking")
    if tracking is None:
        tracking, source = tracking_of_env(client_env), "MLFLOW_TRACKING_URI in this environment"
    if tracking is None:
        return {}
    for tracker in ("mlflow", "wandb"):
        for name in TOKENS[tracker] if getattr(tracking, tracker) is not None else ():
            if name in (job_env or {}):
                raise BadInput(f"{shown}: env_vars sets {name}, the {tracker} tracking's token: give it as a secrets: "
                               f"entry ({name}: env:{name}, or aws-sm://, ssm://, file://), as env_vars travel in "
                               "Ray's job info")
    params = {name: _text(value) for name, value in args.items() if not is_secret(name, _text(value))}
    user = _user()
    tags = {contract.META_JOB: job, "rtjob.backend": backend, "rtjob.user": user, "mlflow.user": user,
            "mlflow.source.type": "JOB", "mlflow.source.name": shown}
    git = git_state(working_dir)
    if git is not None:  # as MLflow's own client tags a run started from a checkout
        tags["mlflow.source.git.commit"] = git["commit"]
        tags.update({"mlflow.source.git.branch": git["branch"]} if git.get("branch") else {})
        tags.update({"rtjob.git_dirty": str(git["dirty"]).lower()} if git.get("dirty") is not None else {})
    config = {**tracking.model_dump(exclude_none=True), "params": params, "tags": tags, "source": source}
    return {contract.ENV_TRACKING: json.dumps(config, separators=(",", ":"))}


def tracking_shown(env: Mapping[str, str]) -> dict[str, Any] | None:
    """``render --explain``'s `tracking`: the tracker and where its setting came from (RTJOB_TRACKING as the job's
    env holds it: never a secret), None when the run is not mirrored."""
    try:
        config = json.loads(env.get(contract.ENV_TRACKING) or "null")
    except ValueError:
        return None
    if not isinstance(config, dict):
        return None
    trackers = {name: config[name] for name in ("mlflow", "wandb") if isinstance(config.get(name), dict)}
    return {"value": {**trackers, "params": sorted(config.get("params") or {})},
            "source": str(config.get("source") or "-")} if trackers else None


def _text(value: Any) -> str:
    text = json.dumps(value) if isinstance(value, (list, bool)) or value is None else str(value)
    return text[:PARAM_VALUE_MAX]


def _user() -> str:
    try:
        return getpass.getuser()
    except Exception:  # noqa: BLE001 - no user name: an empty tag
        return ""
