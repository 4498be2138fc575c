"""A GitHub Actions workflow (cron + manual trigger) that runs a job with rtjob and fails unless it succeeds:
scheduled runs for Ray-cluster users, and a CI alternative to Anyscale schedules. Unattended by default (the
cluster carries the run; a later short job checks it), or following the run to its end (``follow``)."""

from __future__ import annotations

import math
import re
import shlex
from pathlib import Path

import rtjob_contract as contract

from ..core.errors import BadInput

# The pieces of a workflow. <<NAME>> is filled in by github_workflow; each piece ends with a newline.
_HEADER = """\
# Scheduled training from GitHub Actions: rtjob job `<<JOB>>` on the <<BACKEND>> backend.
# Rendered by: <<COMMAND>>
#
# Needs (repository Settings -> Secrets and variables -> Actions):
<<NEEDS>>
#   variable RTJOB_STORAGE        where runs write their results, e.g. s3://my-bucket/rtjob
#   secrets AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY   read access to that bucket, for `rtjob pull`
#                                 (rtjob's storage feature) to fetch the run's results
#
"""

_FOLLOW_ABOUT = """\
# Each run installs only rtjob's client extra (no torch), submits and follows the job (exit 0 succeeded,
# 1 failed or stopped, 2 bad input, 3 unreachable or auth, 4 --timeout reached: the job keeps running),
# pulls its results and uploads them with run.json as an artifact, and fails unless the job succeeded.
# Re-running a workflow run attaches to the job it submitted (the run id is fixed per workflow run).
"""

_UNATTENDED_ABOUT = """\
# No runner is held while the job trains. The `submit` job installs only rtjob's client extra (no torch) and
# submits with --no-wait under a run id fixed per workflow run (a re-run attaches): the run's companion and
# supervisor carry it on the cluster (retries, a pipeline's steps, its record and log in RTJOB_STORAGE).
# The `check` job reads how the run ended (`rtjob wait ID --timeout 1m`: exit 0 succeeded, 1 failed or stopped,
# 4 still running), pulls its results, uploads them with run.json and fails unless the run succeeded. It runs
#   - when the run's notification arrives: a `github` notify target in the job, e.g.
#       notify: {on: [succeeded, failed, stopped],
#                targets: [{type: github, repo: OWNER/REPO, token: {env: GITHUB_DISPATCH_TOKEN}}]}
#     sends a repository_dispatch `<<EVENT>>` with the run's id (the token: contents write on this repository);
#   - or by hand: Actions -> this workflow -> Run workflow with `check_run_id` set.<<CHECK_CRON_ABOUT>>
"""

_ON = """\
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
<<MORE_ON>>
permissions:
  contents: read

concurrency:
  group: rtjob-<<SLUG>>-<<BACKEND>><<GROUP>>
  cancel-in-progress: false

jobs:
"""

_FOLLOW_ON = """\
      timeout:
        description: "How long to follow the job (90s, 15m, 2h); past it the workflow fails, the job keeps running"
        type: string
        default: "<<TIMEOUT>>"
"""

_UNATTENDED_ON = """\
      check_run_id:
        description: "Instead of submitting: check how this run ended (its id), pull its results"
        type: string
        default: ""
  repository_dispatch:
    types: [<<EVENT>>]
"""

_INSTALL = """\
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
"""

_RESULTS = """\
      - name: Pull the results from storage
        if: always() && contains(fromJSON('["0", "1", "4"]'), steps.<<STEP>>.outputs.rc)
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
          SUBMIT_RC: ${{ steps.<<STEP>>.outputs.rc }}
        run: |
          if [ "$SUBMIT_RC" != "0" ]; then
            echo "::error::rtjob <<VERB>> exited ${SUBMIT_RC:-nothing}: 1 failed or stopped, 2 bad input, 3 unreachable or auth, 4 <<FOUR>>"
            exit 1
          fi
"""

_JOB_ENV = """\
    env:
      RTJOB_BACKEND: <<BACKEND>>
<<BACKEND_ENV>>
      RTJOB_STORAGE: ${{ vars.RTJOB_STORAGE }}
"""

_FOLLOW_JOBS = """\
  train:
    runs-on: ubuntu-latest
    timeout-minutes: <<MINUTES>>
""" + _JOB_ENV + """\
      NODES: ${{ inputs.nodes || '<<NODES>>' }}
      TIMEOUT: ${{ inputs.timeout || '<<TIMEOUT>>' }}
      RUN_ID: rtjob-<<SLUG>>-gh${{ github.run_id }}
""" + _INSTALL + """\
      - name: Submit and follow the job
        id: submit
        run: |
          set +e
          rtjob submit <<JOBREF>> --nodes "$NODES" --submission-id "$RUN_ID" --timeout "$TIMEOUT" --output json > run.json
          echo "rc=$?" >> "$GITHUB_OUTPUT"
          cat run.json
""" + _RESULTS.replace("<<STEP>>", "submit").replace("<<VERB>>", "submit").replace(
    "<<FOUR>>", "timed out (job left running)")

_UNATTENDED_JOBS = """\
  submit:
    if: <<SUBMIT_ON>> || (github.event_name == 'workflow_dispatch' && inputs.check_run_id == '')
    runs-on: ubuntu-latest
    timeout-minutes: 30
""" + _JOB_ENV + """\
      NODES: ${{ inputs.nodes || '<<NODES>>' }}
      RUN_ID: rtjob-<<SLUG>>-gh${{ github.run_id }}
""" + _INSTALL + """\
      - name: Submit the job; the cluster carries it
        run: |
          rtjob submit <<JOBREF>> --nodes "$NODES" --submission-id "$RUN_ID" --no-wait --output json > run.json
          cat run.json
      - name: Upload run.json
        uses: actions/upload-artifact@v4
        with:
          name: <<SLUG>>-submitted-${{ github.run_id }}-${{ github.run_attempt }}
          path: run.json
  check:
    if: (github.event_name == 'repository_dispatch' && startsWith(github.event.client_payload.run_id, 'rtjob-<<SLUG>>-gh')) || (github.event_name == 'workflow_dispatch' && inputs.check_run_id != '')<<CHECK_IF>>
    runs-on: ubuntu-latest
    timeout-minutes: 30
""" + _JOB_ENV + """\
      RUN_ID: ${{ github.event.client_payload.run_id || inputs.check_run_id }}
""" + _INSTALL + """\
<<FIND_RUN>>      - name: How the run ended
        id: check
        run: |
          set +e
          rtjob wait "$RUN_ID" --timeout 1m --output json > run.json
          echo "rc=$?" >> "$GITHUB_OUTPUT"
          cat run.json
""" + _RESULTS.replace("<<STEP>>", "check").replace("<<VERB>>", "wait").replace(
    "<<FOUR>>", "still running after 1m (check it again later)")

# With --check-cron: the check job also starts on a cron of its own, for the run this workflow submitted last (its
# id: rtjob-<slug>-gh<workflow run id>, the newest in the bucket's run index; a pipeline's steps' ids are longer).
_FIND_RUN = """\
      - name: The run this workflow submitted last
        if: env.RUN_ID == ''
        env:
          AWS_ACCESS_KEY_ID: ${{ secrets.AWS_ACCESS_KEY_ID }}
          AWS_SECRET_ACCESS_KEY: ${{ secrets.AWS_SECRET_ACCESS_KEY }}
        run: |
          rtjob runs --storage "$RTJOB_STORAGE" --since 30d --limit 500 --output json > runs.json
          RUN_ID=$(python3 -c 'import json, re, sys; print(next((r["id"] for r in json.load(open("runs.json")) if re.fullmatch(sys.argv[1], r["id"])), ""))' 'rtjob-<<SLUG>>-gh[0-9]+')
          if [ -z "$RUN_ID" ]; then
            echo "::error::no run of this workflow in the last 30 days in $RTJOB_STORAGE"
            exit 1
          fi
          echo "RUN_ID=$RUN_ID" >> "$GITHUB_ENV"
"""

_CHECK_CRON_ABOUT = """
#   - on its own cron (<<CHECK_CRON>>): it checks the run this workflow submitted last, found in
#     RTJOB_STORAGE's run index (no notify token on the cluster needed)."""


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
                    timezone: str = "UTC", root: Path | None = None, follow: bool = False,
                    check_cron: str | None = None) -> str:
    """A GitHub Actions workflow (cron + manual trigger) that runs ``job_ref`` with rtjob and fails unless
    it succeeds. ``cron`` runs in ``timezone`` (an IANA name; GitHub's default is UTC); ``root`` is the project
    the workflow lives in (which client it installs). ``follow``: one job submits and follows the run for at most
    ``timeout`` (rtjob's --timeout), holding its runner; else (unattended) a short `submit` job sends it with
    --no-wait and a `check` job, started by the run's `github` notification or by hand, reads how it ended.
    Cron that GitHub does not run and bad names are BadInput: nothing is rendered."""
    from ..backends import backend_class, workflow_backends
    from ..jobspec.cron import validate_github_cron, validate_iana_timezone
    from ..jobspec.overrides import parse_duration

    cron = validate_github_cron(cron)
    timezone = validate_iana_timezone(timezone)
    if check_cron is not None:
        check_cron = validate_github_cron(check_cron)
        if check_cron == cron:
            raise BadInput(f"--check-cron {check_cron!r} is --cron: the check runs after the submit, on a cron of its "
                           "own (e.g. 6 hours later)")

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
               f"--backend {backend} --nodes {nodes}" + (f" --follow --timeout {timeout}" if follow else ""))
    if timezone != "UTC":
        command += f" --timezone {timezone}"
    if check_cron is not None:
        command += f" --check-cron {shlex.quote(check_cron)}"
    # With a check cron, a job tells the two schedules apart by github.event.schedule (the cron as written).
    on_cron = ("github.event_name == 'schedule'" if check_cron is None
               else f"(github.event_name == 'schedule' && github.event.schedule == '{cron}')")
    values = {
        "JOB": slug,
        "JOBREF": shlex.quote(job_ref),
        "BACKEND": backend,
        "COMMAND": command,
        "NEEDS": "\n".join(f"#   secret {name:<21} {what}" for name, what in cls.ci_secrets),
        "BACKEND_ENV": "\n".join(f"      {name}: ${{{{ secrets.{name} }}}}" for name, _ in cls.ci_secrets),
        "INSTALL": client_install(root or Path.cwd(), cls.ci_extra),
        "SCHEDULE": _schedule_entry(cron, timezone) + (
            "" if check_cron is None else "\n" + _schedule_entry(check_cron, timezone).replace(
                "  # GitHub", "  # the check job's; GitHub")),
        "SUBMIT_ON": on_cron,
        "CHECK_IF": "" if check_cron is None else (
            f" || (github.event_name == 'schedule' && github.event.schedule == '{check_cron}')"),
        "FIND_RUN": "" if check_cron is None else _FIND_RUN.replace("<<SLUG>>", slug),
        "CHECK_CRON_ABOUT": "" if check_cron is None else _CHECK_CRON_ABOUT.replace("<<CHECK_CRON>>", check_cron),
        "NODES": str(nodes),
        "TIMEOUT": timeout,
        "SLUG": slug,
        # Following the job, plus installing and pulling the results.
        "MINUTES": str(math.ceil(seconds / 60) + 30),
        "EVENT": contract.GITHUB_DISPATCH_EVENT,
        # An unattended workflow's submit and check of one run never cancel each other (another group).
        "GROUP": "" if follow else ("-${{ github.event_name == 'repository_dispatch' && 'check' || 'submit' }}"
                                    if check_cron is None else
                                    f"-${{{{ (github.event_name == 'repository_dispatch' || github.event.schedule == "
                                    f"'{check_cron}') && 'check' || 'submit' }}}}"),
    }
    if follow:
        text = _HEADER + _FOLLOW_ABOUT + _ON.replace("<<MORE_ON>>", _FOLLOW_ON) + _FOLLOW_JOBS
    else:
        text = _HEADER + _UNATTENDED_ABOUT + _ON.replace("<<MORE_ON>>", _UNATTENDED_ON) + _UNATTENDED_JOBS
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
