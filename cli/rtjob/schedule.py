"""Scheduled runs: cron checks, Anyscale ScheduleConfig data, and GitHub Actions workflows.

Cron expressions are checked here (croniter) before anything is sent: five fields, `minute hour
day-of-month month day-of-week`, the form Anyscale schedules and GitHub Actions both take.
"""

from __future__ import annotations

import copy
import datetime as dt
import math
import re
import shlex
from typing import TYPE_CHECKING, Any

from .errors import BadInput

if TYPE_CHECKING:
    from .backends.anyscale_jobs import AnyscaleJobRequest

CRON_FORM = "5 fields: minute hour day-of-month month day-of-week, e.g. '0 3 * * 1'"
_FIELD = re.compile(r"^[0-9A-Za-z*,/\-]+$")


def validate_cron(expr: str, flag: str = "--cron") -> str:
    """The expression, whitespace-normalised; BadInput (exit 2) unless it is a valid 5-field cron."""
    text = " ".join((expr or "").split())
    fields = text.split(" ") if text else []
    if len(fields) != 5 or not all(_FIELD.match(f) for f in fields):
        raise BadInput(f"{flag} {expr!r}: not a cron expression ({CRON_FORM})")
    from croniter import croniter

    if not croniter.is_valid(text):
        raise BadInput(f"{flag} {expr!r}: not a valid cron expression ({CRON_FORM})")
    return text


def validate_timezone(name: str, flag: str = "--timezone") -> str:
    """'UTC', 'local' or an IANA name such as 'Europe/Berlin'."""
    if name in ("UTC", "local"):
        return name
    import zoneinfo

    try:
        zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise BadInput(f"{flag} {name!r}: not a time zone; use UTC, local or an IANA name like Europe/Berlin") from None
    return name


def next_runs(cron: str, timezone: str = "UTC", count: int = 3, now: dt.datetime | None = None) -> list[str]:
    """The next ``count`` trigger times of ``cron`` in ``timezone``, as ISO 8601 with offsets."""
    import zoneinfo

    from croniter import croniter

    if timezone == "local":
        start = (now or dt.datetime.now(dt.timezone.utc)).astimezone()
    else:
        start = (now or dt.datetime.now(dt.timezone.utc)).astimezone(zoneinfo.ZoneInfo(timezone))
    it = croniter(cron, start)
    return [it.get_next(dt.datetime).isoformat(timespec="minutes") for _ in range(count)]


def schedule_config(request: AnyscaleJobRequest, name: str, cron: str, timezone: str) -> dict[str, Any]:
    """An Anyscale ScheduleConfig (plain data) that runs ``request``'s job on ``cron``.

    Every triggered run is its own Anyscale job with the same config, so the run folder cannot be fixed
    at apply time: the entrypoint names it after the Anyscale job id that Anyscale sets in every job
    (ANYSCALE_HA_JOB_ID; a retry of that job resumes from it), with a UTC timestamp as fallback.
    """
    job = copy.deepcopy(request.config)
    job["name"] = name
    env = job["env_vars"]
    env.pop("RTJOB_RUN_NAME", None)
    env["RTJOB_SCHEDULE"] = name
    run_name = f'"${{ANYSCALE_HA_JOB_ID:-{name}-$(date -u +%Y%m%d-%H%M%S)}}"'
    job["entrypoint"] = f"export RTJOB_RUN_NAME={run_name}; {job['entrypoint']}"
    tags = dict(job.get("tags") or {})
    tags.pop("rtjob-run-id", None)
    tags["rtjob-schedule"] = name
    if env.get("RTJOB_STORAGE_PATH"):
        tags["rtjob-storage"] = env["RTJOB_STORAGE_PATH"]
    else:
        tags.pop("rtjob-storage", None)
    job["tags"] = tags
    return {"job_config": job, "cron_expression": cron, "timezone": timezone}


def masked_schedule(schedule: dict[str, Any]) -> dict[str, Any]:
    from .backends.anyscale_jobs import masked_config

    return {**schedule, "job_config": masked_config(schedule["job_config"])}


# ---------------------------------------------------------------------------------------------
# GitHub Actions

_NEEDS = {
    "anyscale": [
        "#   secret ANYSCALE_CLI_TOKEN    an Anyscale API key (the SDK reads it; never printed)",
    ],
    "ray": [
        "#   secret RAY_ADDRESS           the cluster's dashboard / Jobs API, e.g. https://ray-head.example.com:8265",
        "#   secret RAY_AUTH_TOKEN        the cluster's token, if it uses token authentication",
    ],
}
_BACKEND_ENV = {
    "anyscale": ["      ANYSCALE_CLI_TOKEN: ${{ secrets.ANYSCALE_CLI_TOKEN }}"],
    "ray": ["      RAY_ADDRESS: ${{ secrets.RAY_ADDRESS }}", "      RAY_AUTH_TOKEN: ${{ secrets.RAY_AUTH_TOKEN }}"],
}
# Only client extras (s3: `rtjob pull`; the ray extra includes it): none pulls torch (the workflow checks).
_INSTALL = {"anyscale": '".[anyscale,s3]"', "ray": '".[ray]"'}

_WORKFLOW = """\
# Scheduled training from GitHub Actions: rtjob job `<<JOB>>` on the <<BACKEND>> backend.
# Rendered by: <<COMMAND>>
#
# Needs (repository Settings -> Secrets and variables -> Actions):
<<NEEDS>>
#   variable RTJOB_STORAGE        where runs write their results, e.g. s3://my-bucket/rtjob
#   secrets AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY   read access to that bucket, for `rtjob pull`
#                                 (rtjob's storage feature) to fetch the run's results
#
# Each run installs only rtjob's client extra (no torch), submits and follows the job (exit 0 succeeded,
# 1 failed or stopped, 2 bad input, 3 unreachable or auth, 4 --timeout reached: the job keeps running),
# pulls its results and uploads them with run.json as an artifact, and fails unless the job succeeded.
# Re-running a workflow run attaches to the job it submitted (the run id is fixed per workflow run).
name: "train <<JOB>> (<<BACKEND>>)"

on:
  schedule:
    - cron: "<<CRON>>"  # GitHub Actions schedules are in UTC
  workflow_dispatch:
    inputs:
      nodes:
        description: "Nodes of the job's worker group"
        type: string
        default: "<<NODES>>"
      timeout:
        description: "How long to follow the job (90s, 15m, 2h); past it the workflow fails, the job keeps running"
        type: string
        default: "<<TIMEOUT>>"

permissions:
  contents: read

concurrency:
  group: rtjob-<<SLUG>>-<<BACKEND>>
  cancel-in-progress: false

jobs:
  train:
    runs-on: ubuntu-latest
    timeout-minutes: <<MINUTES>>
    env:
      RTJOB_BACKEND: <<BACKEND>>
<<BACKEND_ENV>>
      RTJOB_STORAGE: ${{ vars.RTJOB_STORAGE }}
      NODES: ${{ inputs.nodes || '<<NODES>>' }}
      TIMEOUT: ${{ inputs.timeout || '<<TIMEOUT>>' }}
      RUN_ID: rtjob-<<SLUG>>-gh${{ github.run_id }}
    steps:
      - uses: actions/checkout@v4
      - uses: actions/setup-python@v5
        with:
          python-version: "3.11"
      - name: Install the rtjob client (no torch)
        run: |
          python -m pip install --upgrade pip
          python -m pip install <<INSTALL>>
          if python -m pip show torch >/dev/null 2>&1; then
            echo "::error::torch was installed: the client extra must not pull it"
            exit 1
          fi
      - name: Submit and follow the job
        id: submit
        run: |
          set +e
          rtjob submit <<JOBREF>> --nodes "$NODES" --submission-id "$RUN_ID" --timeout "$TIMEOUT" --output json > run.json
          echo "rc=$?" >> "$GITHUB_OUTPUT"
          cat run.json
      - name: Pull the results from storage
        if: always() && contains(fromJSON('["0", "1", "4"]'), steps.submit.outputs.rc)
        env:
          AWS_ACCESS_KEY_ID: ${{ secrets.AWS_ACCESS_KEY_ID }}
          AWS_SECRET_ACCESS_KEY: ${{ secrets.AWS_SECRET_ACCESS_KEY }}
        run: rtjob pull "$RUN_ID" --to results/
      - name: Upload run.json and results/
        if: always()
        uses: actions/upload-artifact@v4
        with:
          name: <<SLUG>>-${{ github.run_id }}-${{ github.run_attempt }}
          path: |
            run.json
            results/
          if-no-files-found: warn
      - name: Fail unless the job succeeded
        if: always()
        env:
          SUBMIT_RC: ${{ steps.submit.outputs.rc }}
        run: |
          if [ "$SUBMIT_RC" != "0" ]; then
            echo "::error::rtjob submit exited ${SUBMIT_RC:-nothing}: 1 failed or stopped, 2 bad input, 3 unreachable or auth, 4 timed out (job left running)"
            exit 1
          fi
"""


def github_workflow(job_ref: str, cron: str, *, backend: str, nodes: int, timeout: str) -> str:
    """A GitHub Actions workflow (cron + manual trigger) that runs ``job_ref`` with rtjob and fails unless
    it succeeds. ``cron`` is UTC (GitHub's schedules are); ``timeout`` is rtjob's --timeout."""
    from .overrides import parse_duration

    if backend not in _INSTALL:
        raise BadInput(f"--backend {backend!r}: a workflow submits to a cluster: use ray or anyscale")
    seconds = parse_duration(timeout)
    slug = re.sub(r"[^A-Za-z0-9-]+", "-", job_ref.rsplit("/", 1)[-1].removesuffix(".yaml").removesuffix(".yml"))
    slug = slug.strip("-").lower() or "job"
    command = (f"rtjob schedule render {shlex.quote(job_ref)} --cron {shlex.quote(cron)} --github "
               f"--backend {backend} --nodes {nodes} --timeout {timeout}")
    values = {
        "JOB": slug,
        "JOBREF": shlex.quote(job_ref),
        "BACKEND": backend,
        "COMMAND": command,
        "NEEDS": "\n".join(_NEEDS[backend]),
        "BACKEND_ENV": "\n".join(_BACKEND_ENV[backend]),
        "INSTALL": _INSTALL[backend],
        "CRON": cron,
        "NODES": str(nodes),
        "TIMEOUT": timeout,
        "SLUG": slug,
        # Following the job, plus installing and pulling the results.
        "MINUTES": str(math.ceil(seconds / 60) + 30),
    }
    text = _WORKFLOW
    for key, value in values.items():
        text = text.replace(f"<<{key}>>", value)
    return text
