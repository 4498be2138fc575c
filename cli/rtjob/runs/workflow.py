"""A GitHub Actions workflow (cron + manual trigger) that runs a job with rtjob and fails unless it succeeds:
scheduled runs for Ray-cluster users, and a CI alternative to Anyscale schedules."""

from __future__ import annotations

import math
import re
import shlex
from pathlib import Path

from ..core.errors import BadInput

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
<<SCHEDULE>>
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


def _schedule_entry(cron: str, timezone: str) -> str:
    """The `on.schedule` entry: UTC (GitHub's default) needs no `timezone:` key, so such files stay as before."""
    if timezone == "UTC":
        return f'    - cron: "{cron}"  # GitHub Actions schedules are in UTC'
    return (f'    - cron: "{cron}"\n'
            f'      timezone: "{timezone}"  # IANA name; GitHub runs the cron in this time zone (DST included)')


def client_install(root: Path, extra: str) -> str:
    """What the workflow pip-installs: rtjob's own checkout in rtjob's repository, else the released client
    pinned to the version that rendered the workflow (a user's project is not rtjob)."""
    from .. import __version__
    from ..jobspec.settings import tomllib

    try:
        name = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8")).get("project", {}).get("name")
    except (OSError, tomllib.TOMLDecodeError):
        name = None
    return f'".[{extra}]"' if name == "rtjob" else f'"rtjob[{extra}]=={__version__}"'


def github_workflow(job_ref: str, cron: str, *, backend: str, nodes: int, timeout: str,
                    timezone: str = "UTC", root: Path | None = None, detached: bool = False) -> str:
    """A GitHub Actions workflow (cron + manual trigger) that runs ``job_ref`` with rtjob and fails unless
    it succeeds (``detached``: submits with --no-wait, and a later job started by the run's notification checks
    the outcome: workflow_detached.py). ``cron`` runs in ``timezone`` (an IANA name; GitHub's default is UTC); ``timeout`` is
    rtjob's --timeout; ``root`` is the project the workflow lives in (which client it installs). Cron that
    GitHub does not run and bad names are BadInput: nothing is rendered."""
    from ..backends import backend_class, workflow_backends
    from ..jobspec.cron import validate_github_cron, validate_iana_timezone
    from ..jobspec.overrides import parse_duration

    cron = validate_github_cron(cron)
    timezone = validate_iana_timezone(timezone)

    if any(ord(c) < 32 or ord(c) == 127 for c in job_ref + timeout):  # pasted into YAML and shell lines
        raise BadInput("a job reference or --timeout with a control character cannot go into a workflow file")
    if backend not in workflow_backends():
        raise BadInput(f"--backend {backend!r}: a workflow submits to a cluster: use {' or '.join(workflow_backends())}")
    # The backend's own secrets and client extra come from the registry, not from this template; the extras
    # are client extras that never pull torch (the workflow checks).
    cls = backend_class(backend)
    seconds = parse_duration(timeout)
    slug = re.sub(r"[^A-Za-z0-9-]+", "-", job_ref.rsplit("/", 1)[-1].removesuffix(".yaml").removesuffix(".yml"))
    slug = slug.strip("-").lower() or "job"
    command = (f"rtjob schedule render {shlex.quote(job_ref)} --cron {shlex.quote(cron)} --github "
               f"--backend {backend} --nodes {nodes} --timeout {timeout}")
    if timezone != "UTC":
        command += f" --timezone {timezone}"
    if detached:
        command += " --detached"
    values = {
        "JOB": slug,
        "JOBREF": shlex.quote(job_ref),
        "BACKEND": backend,
        "COMMAND": command,
        "NEEDS": "\n".join(f"#   secret {name:<21} {what}" for name, what in cls.ci_secrets),
        "BACKEND_ENV": "\n".join(f"      {name}: ${{{{ secrets.{name} }}}}" for name, _ in cls.ci_secrets),
        "INSTALL": client_install(root or Path.cwd(), cls.ci_extra),
        "SCHEDULE": _schedule_entry(cron, timezone),
        "NODES": str(nodes),
        "TIMEOUT": timeout,
        "SLUG": slug,
        # Following the job, plus installing and pulling the results.
        "MINUTES": str(math.ceil(seconds / 60) + 30),
    }
    text = _WORKFLOW
    if detached:
        import rtjob_contract as contract

        from .workflow_detached import DETACHED, INSTALL_STEPS

        text = DETACHED.replace("<<INSTALL_STEPS>>", INSTALL_STEPS).replace("<<EVENT>>", contract.GITHUB_DISPATCH_EVENT)
    for key, value in values.items():
        text = text.replace(f"<<{key}>>", value)
    return text


def write_workflow(path: str, text: str) -> None:
    """Write ``text`` to ``path`` whole or not at all: a temporary file beside it, then a rename, so a
    failure leaves no half-written workflow and an existing file is replaced only by a complete one."""
    from pathlib import Path

    from ..core.files import write_atomically

    target = Path(path)
    if target.is_dir():
        raise BadInput(f"--out {path!r}: a folder; give the workflow file, e.g. .github/workflows/train.yml")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(target, text, mode=0o644)
    except OSError as exc:
        raise BadInput(f"--out {path!r}: cannot write it ({exc.strerror or exc}); give a writable file path") from None
