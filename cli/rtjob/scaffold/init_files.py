"""`rtjob init`: the files a project needs to use rtjob, written only where they are missing.

Every step reports what it did to one file (created, kept, appended): a user's file is never overwritten.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.errors import BadInput
from ..jobspec.project import PROJECT_FILE, PULLED_RUNS_DIR
from ..jobspec.settings import tomllib  # the one TOML reader (tomli before 3.11)

SCHEMA_DIR = "schemas"  # JSON schemas for editors, referenced by the job files' yaml-language-server line
STARTER_COMPUTE_CONFIG = "g5-4xlarge"  # the built-in copied into compute_configs/ as an example to edit
# What a project keeps out of git and, as Ray and Anyscale honour .gitignore, out of the uploaded working dir:
# secrets, rtjob's own state, and the runs `rtjob pull RUN_ID` writes (./rtjob-runs/RUN_ID).
GITIGNORE_LINES = (".env*", ".rtjob/", f"{PULLED_RUNS_DIR}/")

_SETTINGS = """\
# rtjob's project settings: flags > --context > environment > these > the current context (rtjob context use).
# Uncomment what you need; `rtjob render JOB --explain` shows where each value came from.
# Keys: backend, address, storage, compute_config, headers, verify_tls, cloud, project, storage_check.
# backend = "ray"                          # ray | local (embedded cluster) | anyscale
# address = "http://head-node:8265"        # a Ray cluster's dashboard
# storage = "s3://my-bucket/rtjob"         # where runs write checkpoints and metrics
# storage_check = false                    # the cluster writes storage with a role this machine lacks
# cloud = "my-anyscale-cloud"              # Anyscale: else the organization's default cloud
# project = "my-anyscale-project"          # Anyscale: else the cloud's default project
"""

_JOB = """\
# yaml-language-server: $schema=../{schema_dir}/job.schema.json
# A job for your own script: `rtjob submit {name}` runs it on the embedded local Ray cluster, `--backend ray
# --address URL` on a Ray cluster, `--backend anyscale` on Anyscale. `rtjob render {name}` shows the request.
name: {name}
description: {description}
entrypoint: {entrypoint}
# Where your script writes: RTJOB_RUN_DIR, a local folder on the driver's node that rtjob syncs to this run's
# folder in its storage (RTJOB_RUN_URI: the embedded cluster's by default, `storage` in rtjob.toml; with a local
# folder as storage it is that folder). `entrypoint: python train.py --output-dir "$RTJOB_RUN_DIR"` lets
# `rtjob pull RUN_ID` and `rtjob results RUN_ID` find what it wrote (results reads metrics.json there).
# Flags appended to the entrypoint (`--epochs 2`); --set args.epochs=5 overrides one per run.
args: {{}}
# What the entrypoint needs beyond the cluster's image: pip lines, or a file relative to this one (a requirements
# file, or a pyproject.toml for its [project].dependencies); on the embedded cluster what this environment
# already has is not installed again. Or set image_uri.
requirements: {requirements}
# Uncomment for a GPU cluster shape (`rtjob compute-config list`; built-ins ship with rtjob):
# compute_config: {compute_config}
# nodes: 1
"""


@dataclass(frozen=True)
class Step:
    path: str  # relative to the project folder
    action: str  # created | kept | appended


def _slug(text: str) -> str:
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-._").lower()
    return slug[:100] or "train"


def _default_name(words: list[str]) -> str:
    """The job's name from its command: the script's (train.py → train) or the module's last part."""
    for index, word in enumerate(words):
        if word.endswith(".py"):
            return _slug(Path(word).stem)
        if word == "-m" and index + 1 < len(words):
            return _slug(words[index + 1].rsplit(".", 1)[-1])
    return "train"


def _write_new(folder: Path, rel: str, text: str) -> Step:
    path = folder / rel
    if path.exists():
        return Step(rel, "kept")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return Step(rel, "created")


def _pyproject_data(pyproject: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(pyproject.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise BadInput(f"{pyproject}: not valid TOML ({exc}); fix it, or add [tool.rtjob] yourself") from None


def _project_config(folder: Path) -> Step:
    """rtjob.toml, or [tool.rtjob] appended to an existing pyproject.toml that has none."""
    if (folder / PROJECT_FILE).exists():
        return Step(PROJECT_FILE, "kept")
    pyproject = folder / "pyproject.toml"
    if not pyproject.is_file():
        return _write_new(folder, PROJECT_FILE, _SETTINGS)
    text = pyproject.read_text(encoding="utf-8")
    if "rtjob" in _pyproject_data(pyproject).get("tool", {}):
        return Step("pyproject.toml [tool.rtjob]", "kept")
    separator = "" if text.endswith("\n") or not text else "\n"
    with pyproject.open("a", encoding="utf-8") as out:
        out.write(f"{separator}\n[tool.rtjob]\n{_SETTINGS}")
    return Step("pyproject.toml [tool.rtjob]", "appended")


def _gitignore(folder: Path) -> Step:
    path = folder / ".gitignore"
    text = path.read_text(encoding="utf-8") if path.is_file() else ""
    present = {line.strip() for line in text.splitlines()}
    missing = [line for line in GITIGNORE_LINES if line not in present]
    if not missing:
        return Step(".gitignore", "kept")
    separator = "" if text.endswith("\n") or not text else "\n"
    with path.open("a", encoding="utf-8") as out:
        out.write(f"{separator}# rtjob: secrets, its own state, pulled runs (also kept out of the uploaded working dir)\n")
        out.write("".join(f"{line}\n" for line in missing))
    return Step(".gitignore", "appended" if text else "created")


def _project_requirements(folder: Path) -> str:
    """What the job's `requirements:` says, relative to jobs/: the project's requirements.txt, else its
    pyproject.toml when that lists [project].dependencies, else none."""
    if (folder / "requirements.txt").is_file():
        return "../requirements.txt"
    pyproject = folder / "pyproject.toml"
    if pyproject.is_file() and _pyproject_data(pyproject).get("project", {}).get("dependencies"):
        return "../pyproject.toml"
    return "[]"


def _yaml_scalar(text: str) -> str:
    return json.dumps(text)  # a JSON string is a YAML 1.2 string: no surprise from quotes or colons


def init_project(folder: Path, *, entrypoint: str, name: str | None = None, github: bool = False,
                 cron: str = "0 3 * * *") -> list[Step]:
    """Scaffold ``folder`` as an rtjob project; returns what happened to each file."""
    from ..jobspec.project import BUILTIN_COMPUTE_CONFIGS
    from ..jobspec.schema import NAME_RE, compute_config_json_schema, job_json_schema

    if folder.exists() and not folder.is_dir():
        raise BadInput(f"{folder}: exists and is not a folder")
    if not entrypoint.strip():
        raise BadInput("--entrypoint: empty; give the command that runs your script, e.g. 'python train.py'")
    try:
        words = shlex.split(entrypoint)
    except ValueError as exc:
        raise BadInput(f"--entrypoint {entrypoint!r}: {exc}") from None
    job_name = name or _default_name(words)
    if not re.match(NAME_RE, job_name):
        raise BadInput(f"--name {job_name!r}: letters, digits, '.', '_' and '-', starting with a letter or digit")
    # Everything that can refuse is checked before the first file is written: nothing half-scaffolded.
    workflow = None
    if github:
        from ..backends import WITH_ADDRESS
        from .workflow import github_workflow

        workflow = github_workflow(f"jobs/{job_name}.yaml", cron, backend=WITH_ADDRESS, nodes=1, timeout="2h",
                                   root=folder)
    if (folder / "pyproject.toml").is_file():
        _pyproject_data(folder / "pyproject.toml")
    folder.mkdir(parents=True, exist_ok=True)
    steps = [
        _write_new(folder, f"{SCHEMA_DIR}/job.schema.json", json.dumps(job_json_schema(), indent=2) + "\n"),
        _write_new(folder, f"{SCHEMA_DIR}/compute-config.schema.json",
                   json.dumps(compute_config_json_schema(), indent=2) + "\n"),
        _write_new(folder, f"jobs/{job_name}.yaml", _JOB.format(
            schema_dir=SCHEMA_DIR, name=job_name, entrypoint=_yaml_scalar(entrypoint),
            description=_yaml_scalar(f"{entrypoint} (scaffolded by rtjob init)"),
            compute_config=STARTER_COMPUTE_CONFIG, requirements=_project_requirements(folder))),
    ]
    builtin = (BUILTIN_COMPUTE_CONFIGS / f"{STARTER_COMPUTE_CONFIG}.yaml").read_text(encoding="utf-8")
    steps.append(_write_new(folder, f"compute_configs/{STARTER_COMPUTE_CONFIG}.yaml",
                            f"# yaml-language-server: $schema=../{SCHEMA_DIR}/compute-config.schema.json\n"
                            f"# Copied from rtjob's built-in {STARTER_COMPUTE_CONFIG} by rtjob init: edit it freely, "
                            "it overrides the built-in.\n" + builtin))
    steps.append(_project_config(folder))
    steps.append(_gitignore(folder))
    if workflow is not None:
        steps.append(_write_new(folder, f".github/workflows/rtjob-{job_name}.yml", workflow))
    return steps
