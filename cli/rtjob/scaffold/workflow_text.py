"""The text of the GitHub Actions workflow rtjob renders (scaffold/workflow.py fills it in): its pieces, each ending
with a newline, with <<NAME>> where a value goes. Two shapes: one job that follows the run (``follow``), or an
unattended `submit` job and a `check` job."""

from __future__ import annotations

_HEADER = """\
# Scheduled training from GitHub Actions: rtjob job `<<JOB>>` on the <<BACKEND>> backend.
# Rendered by: <<COMMAND>>
#
# Needs (repository Settings -> Secrets and variables -> Actions):
<<NEEDS>>
#   variable RTJOB_STORAGE        where runs write their results, e.g. s3://my-bucket/rtjob
#   secrets AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY   access to that bucket: the submit writes the run's
#                                 record there first (its storage check: a missing bucket or bad keys exit 3
#                                 before anything runs; keys that may only read: add --no-storage-check),
#                                 `rtjob pull` (rtjob's storage feature) fetches the run's results
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
        env:
          AWS_ACCESS_KEY_ID: ${{ secrets.AWS_ACCESS_KEY_ID }}
          AWS_SECRET_ACCESS_KEY: ${{ secrets.AWS_SECRET_ACCESS_KEY }}
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
        env:
          AWS_ACCESS_KEY_ID: ${{ secrets.AWS_ACCESS_KEY_ID }}
          AWS_SECRET_ACCESS_KEY: ${{ secrets.AWS_SECRET_ACCESS_KEY }}
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
FIND_RUN = """\
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

CHECK_CRON_ABOUT = """
#   - on its own cron (<<CHECK_CRON>>): it checks the run this workflow submitted last, found in
#     RTJOB_STORAGE's run index (no notify token on the cluster needed)."""


def skeleton(follow: bool) -> str:
    """The whole workflow with its <<NAME>> places: following the run, or unattended (submit, then check)."""
    if follow:
        return _HEADER + _FOLLOW_ABOUT + _ON.replace("<<MORE_ON>>", _FOLLOW_ON) + _FOLLOW_JOBS
    return _HEADER + _UNATTENDED_ABOUT + _ON.replace("<<MORE_ON>>", _UNATTENDED_ON) + _UNATTENDED_JOBS
