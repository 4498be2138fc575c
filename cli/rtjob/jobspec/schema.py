"""The job and compute-config schema (pydantic), and turning validation errors into one line.

A job's fields are a superset of Anyscale's JobConfig; rtjob adds ``args``, ``nodes``, ``worker_group``,
``resources_per_worker``, ``storage``, ``max_failures`` and the ``local`` profile.
"""

from __future__ import annotations

import difflib
import re
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from ..core import secret_refs
from ..core.errors import BadInput
from . import queues
from .tracking import Tracking
from .yamlsrc import Located

Scalar = str | int | float | bool | None
ArgValue = Scalar | list[str | int | float]
NAME_RE = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$"
EnvValue = Annotated[str, Field(coerce_numbers_to_str=True)]  # a YAML number (`OMP_NUM_THREADS: 4`) as its text
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _reference(value: str) -> str:
    secret_refs.parse(value)  # ValueError: the entry's file:line and what the grammar takes
    return value.strip()


# A `secrets:` entry's value: a reference (core/secret_refs.py), never the secret itself.
SecretReference = Annotated[str, AfterValidator(_reference)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)


class Resources(_Strict):
    """Resources of one training worker. Unset values come from the compute config's worker group."""

    cpus: Annotated[float, Field(gt=0)] | None = None
    gpus: Annotated[float, Field(ge=0)] | None = None
    memory_gb: Annotated[float, Field(gt=0)] | None = None


class LocalProfile(_Strict):
    """Overrides applied only on the embedded local cluster (no GPU, maybe no internet)."""

    args: dict[str, ArgValue] = Field(default_factory=dict)
    env_vars: dict[str, EnvValue] = Field(default_factory=dict)
    cpus_per_node: Annotated[int, Field(ge=1, le=64)] = 1


class EnvRef(_Strict):
    """A secret by reference: the name of an environment variable of the client that holds it."""

    env: Annotated[str, Field(pattern=ENV_NAME_RE.pattern)]


class NotifyTarget(_Strict):
    """Where a notification goes: a JSON webhook, a Slack incoming webhook, any apprise URL (the `notify` extra),
    or a GitHub repository_dispatch (`github`: the repository and a token, e.g. to start the check job of the
    workflow `schedule render --github` writes). The URL carries the secret (Slack and Discord keep it in the
    path), as the token does: only references are accepted."""

    type: Literal["webhook", "slack", "apprise", "github"]
    url: EnvRef | None = None
    repo: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9-]*/[A-Za-z0-9._-]+$")] | None = None
    token: EnvRef | None = None
    api_url: Annotated[str, Field(pattern=r"^https?://[^\s]+$")] | None = None  # GitHub Enterprise's API

    @field_validator("url", "token", mode="before")
    @classmethod
    def _reference_only(cls, value: Any, info: ValidationInfo) -> Any:
        if isinstance(value, str):  # never echoed: the URL (the token) is the secret
            what = "URL" if info.field_name == "url" else "token"
            raise ValueError(f"a literal {what} is refused (it holds the secret); reference an environment variable: "
                             f"{info.field_name}: {{env: VAR}} in YAML, {info.field_name} = {{env = \"VAR\"}} in TOML")
        return value

    @model_validator(mode="after")
    def _fields_of_its_type(self) -> NotifyTarget:
        if self.type == "github":
            if self.repo is None or self.token is None or self.url is not None:
                raise ValueError("a github target takes repo: OWNER/NAME and token: {env: VAR} (a token that may "
                                 "create repository_dispatch events), and no url")
        elif self.url is None or self.repo is not None or self.token is not None or self.api_url is not None:
            raise ValueError(f"a {self.type} target takes url: {{env: VAR}} only")
        return self

    @property
    def secret(self) -> EnvRef:
        """The reference that holds the target's secret: its URL, or a github target's token."""
        found = self.token if self.type == "github" else self.url
        assert found is not None  # _fields_of_its_type
        return found


class Notify(_Strict):
    """`notify:` of a job, the project config or a context (the most specific wins whole)."""

    on: Annotated[list[Literal["succeeded", "failed", "stopped", "retrying"]], Field(min_length=1)]
    targets: Annotated[list[NotifyTarget], Field(min_length=1)]
    steps: bool = False  # a pipeline's steps notify too (pipelines: a later issue)


class JobSpec(_Strict):
    name: Annotated[str, Field(pattern=NAME_RE)]
    entrypoint: Annotated[str, Field(min_length=1)]
    description: str = ""
    strategy: Literal["single", "torchrun", "ray-ddp", "ray-data", "fsdp2", "deepspeed", "tune", "custom"] = "custom"
    # Rendered after the entrypoint as `--key value` (True → `--key`, False/None → omitted).
    args: dict[str, ArgValue] = Field(default_factory=dict)
    nodes: Annotated[int, Field(ge=1, le=1000)] = 1
    worker_group: str | None = None
    resources_per_worker: Resources = Field(default_factory=Resources)
    compute_config: str | None = None
    storage: str | None = None
    # An S3-compatible endpoint for `storage: s3://...` (MinIO ...); default: the client's AWS_ENDPOINT_URL[_S3].
    storage_endpoint: Annotated[str, Field(pattern=r"^https?://[^\s/]+")] | None = None
    max_failures: Annotated[int, Field(ge=-1)] = 0
    local: LocalProfile = Field(default_factory=LocalProfile)
    # Anyscale JobConfig fields.
    image_uri: str | None = None
    working_dir: str | None = Field(
        default=None,
        description="The folder uploaded as the job's working dir. Unset: the job's project root (the nearest "
        "folder up from the job file with rtjob.toml, [tool.rtjob] in pyproject.toml or .git, or the folder "
        "holding jobs/). A relative path is relative to the job file's own folder (jobs/x.yaml: `..` is the "
        "project root). Never the home folder or /.",
    )
    excludes: list[str] = Field(default_factory=list)
    # What the entrypoint needs beyond the cluster's image: pip lines, or a requirements file (relative to the
    # job file). `requirements: []` says "nothing"; `rtjob validate` warns when neither this nor image_uri is set.
    requirements: list[str] | str | None = None
    env_vars: dict[str, EnvValue] = Field(default_factory=dict)
    max_retries: Annotated[int, Field(ge=0, le=100)] = 0
    timeout_s: Annotated[int, Field(gt=0)] | None = None
    # The run-side companion (rtjob.runside) runs the entrypoint and writes the run's files, log and outcome to
    # its storage from the cluster; false runs the entrypoint bare (so does RTJOB_COMPANION=0 where rtjob runs).
    companion: bool = True
    tags: dict[str, EnvValue] = Field(default_factory=dict)
    cloud: str | None = None
    project: str | None = None
    notify: Notify | None = None
    tracking: Tracking | None = None  # the run mirrored to MLflow (jobspec/tracking.py)
    queue: Annotated[str, AfterValidator(queues.queue_name)] | None = None  # a team's queue (jobspec/queues.py)
    priority: Annotated[int, Field(strict=True), AfterValidator(queues.check_priority)] | None = None  # higher first
    # NAME: REFERENCE (aws-sm://, ssm://, file://, env:): resolved where the run runs, never in Ray's job info.
    secrets: dict[str, SecretReference] = Field(
        default_factory=dict,
        description="Environment variables whose values are secrets, by reference: aws-sm://NAME[#KEY] (AWS "
        "Secrets Manager), ssm://PATH (SSM Parameter Store), file:///PATH (a file on the driver's node), env:VAR "
        "(this client's environment). The run's companion resolves them on the driver's node and gives them to "
        "the entrypoint and every Ray worker of the run; no value travels in Ray's job info (docs/guide/secrets.md).",
    )

    @field_validator("secrets")
    @classmethod
    def _secrets_resolvable(cls, value: dict[str, str], info: ValidationInfo) -> dict[str, str]:
        # A field validator (companion and env_vars come first, so info.data holds them): the error points at the
        # `secrets:` line, not at the top of the file.
        for key in value:
            secret_refs.check_name(key)
        if value and info.data.get("companion") is False:
            raise ValueError("secrets: needs the companion (companion: false leaves nothing to resolve them)")
        both = sorted(set(value) & set(info.data.get("env_vars") or {}))
        if both:
            raise ValueError(f"secrets: {both[0]} is also in env_vars; keep it in one of them")
        return value

    @field_validator("env_vars")
    @classmethod
    def _env_names(cls, value: dict[str, str]) -> dict[str, str]:
        for key in value:
            if not ENV_NAME_RE.match(key):
                raise ValueError(f"{key!r} is not a valid environment variable name (letters, digits, _)")
        return value

    @field_validator("requirements")
    @classmethod
    def _requirements_file(cls, value: list[str] | str | None) -> list[str] | str | None:
        # A string is a file; a pip line or URL given as one is a likely slip (and may carry a token: not echoed).
        if isinstance(value, str) and (not value or "://" in value or any(c in value for c in "=<>~!;[ \t")):
            raise ValueError("a string is a requirements file (relative to the job file); give pip lines as a "
                             "list, e.g. [torch==2.14.1]")
        return value

    @field_validator("args")
    @classmethod
    def _arg_names(cls, value: dict[str, ArgValue]) -> dict[str, ArgValue]:
        for key in value:
            if not re.match(r"^[A-Za-z][A-Za-z0-9_-]*$", key):
                raise ValueError(f"{key!r} is not a valid flag name (letters, digits, - and _)")
        return value


class HeadNode(_Strict):
    instance_type: str
    resources: dict[str, float] | None = None


class WorkerGroup(_Strict):
    name: str | None = None
    instance_type: str
    min_nodes: Annotated[int, Field(ge=0)] = 0
    max_nodes: Annotated[int, Field(ge=0)] = 10
    market_type: Literal["ON_DEMAND", "SPOT", "PREFER_SPOT"] = "ON_DEMAND"
    resources: dict[str, float] | None = None

    @property
    def label(self) -> str:
        return self.name or self.instance_type


class ComputeConfig(_Strict):
    """Anyscale's compute-config schema (the fields rtjob uses; Anyscale accepts all of them)."""

    cloud: str | None = None
    head_node: HeadNode | None = None
    worker_nodes: list[WorkerGroup] = Field(default_factory=list)
    min_resources: dict[str, float] | None = None
    max_resources: dict[str, float] | None = None
    flags: dict[str, Any] = Field(default_factory=dict)
    auto_select_worker_config: bool = False
    zones: list[str] | None = None
    enable_cross_zone_scaling: bool = False


def _model_fields(model: type[BaseModel], loc: tuple[str | int, ...]) -> list[str]:
    """The valid keys at ``loc`` inside ``model`` (for did-you-mean suggestions)."""
    current: Any = model
    for part in loc:
        if isinstance(part, int):
            continue
        field = current.model_fields.get(part) if hasattr(current, "model_fields") else None
        if field is None:
            return []
        annotation = field.annotation
        inner = [a for a in getattr(annotation, "__args__", (annotation,)) if isinstance(a, type)]
        nested = [a for a in inner if issubclass(a, BaseModel)]
        if not nested:
            return []
        current = nested[0]
    return list(current.model_fields) if hasattr(current, "model_fields") else []


def _loc_text(loc: tuple[str | int, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def describe_validation_error(
    exc: ValidationError, model: type[BaseModel], where: Any, what: str = ""
) -> str:
    """One line: where (file:line), which key, what is wrong, what would be valid.

    ``where`` is a Located (for YAML) or a callable(loc) -> str (for flags).
    """
    errors = exc.errors(include_url=False)
    # An unknown key first: a typo ('entrypont') also makes the real key look missing.
    err = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
    loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p.startswith(("function-", "constrained-"))))
    # Union members show up as extra loc parts (e.g. 'str', 'list[str]'); drop type names.
    loc = tuple(p for p in loc if not (isinstance(p, str) and ("[" in p or p in {"str", "int", "float", "bool"})))
    place = where.where(loc) if isinstance(where, Located) else where(loc)
    key = _loc_text(loc) or "(top level)"
    etype = err["type"]
    if etype == "extra_forbidden":
        valid = _model_fields(model, loc[:-1])
        close = difflib.get_close_matches(str(loc[-1]), valid, n=1, cutoff=0.6)
        hint = f"; did you mean {close[0]!r}?" if close else (f"; valid keys: {', '.join(valid)}" if valid else "")
        msg = f"unknown key {key!r}{hint}"
    elif etype == "missing":
        msg = f"missing required key {key!r}"
    elif etype == "literal_error":
        expected = err.get("ctx", {}).get("expected", "")
        msg = f"{key}: not a valid value; expected one of {expected}"
    elif etype == "model_type" or etype == "dict_type":
        msg = f"{key}: expected a mapping, got {type(err['input']).__name__}"
    else:
        # Never the value itself: it may be a secret (a token in a requirement URL, a password).
        got = err.get("input")
        shown = f" (got {type(got).__name__})" if got is not None and etype.endswith("_type") else ""
        msg = f"{key}: {err['msg'][0].lower() + err['msg'][1:]}{shown}"
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    prefix = f"{what}: " if what else ""
    return f"{place}: {prefix}{msg}{more}"


def is_pipeline(data: Any) -> bool:
    """A YAML document is a pipeline (jobspec/pipeline.py) when it has ``steps:``."""
    return isinstance(data, dict) and "steps" in data


def validate_job(located: Located) -> JobSpec:
    if is_pipeline(located.data):
        raise BadInput(f"{located.path} is a pipeline (steps:): rtjob submit, render and validate run it step by "
                       "step; this command takes one job (a step runs as <pipeline>-<step>)")
    return _validated(JobSpec, located, "a job must be a YAML mapping with at least 'name' and 'entrypoint'")


def validate_compute_config(located: Located) -> ComputeConfig:
    return _validated(ComputeConfig, located, "a compute config must be a YAML mapping")


M = TypeVar("M", bound=BaseModel)


def _validated(model: type[M], located: Located, not_a_mapping: str) -> M:
    """The document as ``model``, or one BadInput line with file:line (never the value)."""
    if not isinstance(located.data, dict):
        raise BadInput(f"{located.where(())}: {not_a_mapping}")
    try:
        return model.model_validate(located.data)
    except ValidationError as exc:
        raise BadInput(describe_validation_error(exc, model, located)) from None


def job_json_schema() -> dict[str, Any]:
    schema = JobSpec.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "rtjob job"
    return schema


def compute_config_json_schema() -> dict[str, Any]:
    schema = ComputeConfig.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "rtjob compute config"
    return schema
