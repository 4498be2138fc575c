"""The detached shape of `schedule render --github --detached`: no runner is held while the job runs. The cron (or a
manual run) submits with --no-wait under a fixed id and ends; the run's own notification (a `github-dispatch`
target in the job's `notify:`) starts the `check` job through `repository_dispatch`, which waits a minute at most
for the outcome (`rtjob wait ID --timeout 1m -o json`), pulls the results and fails unless the run succeeded.
On a Ray cluster a pipeline's steps run on with no client (its supervisor), so a pipeline works the same way."""

from __future__ import annotations

DETACHED = """\
# Scheduled training from GitHub Actions with no runner held: rtjob job `<<JOB>>` on the <<BACKEND>> backend.
# Rendered by: <<COMMAND>>
#
# Needs (repository Settings -> Secrets and variables -> Actions):
<<NEEDS>>
#   variable RTJOB_STORAGE        where runs write their results, e.g. s3://my-bucket/rtjob
#   secrets AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY   read access to that bucket, for `rtjob pull`
# and, in the job's notify: (targets), a github-dispatch target whose URL variable holds
#   https://TOKEN@api.github.com/repos/OWNER/REPO/dispatches   (TOKEN: a fine-grained token, Contents: write)
# with on: [succeeded, failed, stopped]: the run's end sends event `<<EVENT>>`, which starts the check job.
#
# `submit` submits with --no-wait under a fixed id and ends (exit 0 submitted, 2 bad input, 3 unreachable or auth);
# `check` waits at most a minute for the run's outcome, pulls its results, uploads them with run.json as an
# artifact, and fails unless the run succeeded. Re-running a workflow run attaches to the run it submitted.
name: "train <<JOB>> (<<BACKEND>>, detached)"

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
        description: "How long the check waits for the outcome once told (90s, 15m)"
        type: string
        default: "1m"
  repository_dispatch:
    types: [<<EVENT>>]

permissions:
  contents: read

jobs:
  submit:
    if: github.event_name != 'repository_dispatch'
    runs-on: ubuntu-latest
    timeout-minutes: 30
    env:
      RTJOB_BACKEND: <<BACKEND>>
<<BACKEND_ENV>>
      RTJOB_STORAGE: ${{ vars.RTJOB_STORAGE }}
      NODES: ${{ inputs.nodes || '<<NODES>>' }}
      RUN_ID: rtjob-<<SLUG>>-gh${{ github.run_id }}
    steps:
<<INSTALL_STEPS>>
      - name: Submit the job (it runs on the cluster; its notification starts the check)
        id: submit
        run: |
          set +e
          rtjob submit <<JOBREF>> --nodes "$NODES" --submission-id "$RUN_ID" --no-wait --output json > run.json
          echo "rc=$?" >> "$GITHUB_OUTPUT"
          cat run.json
      - name: Fail unless the job was submitted
        if: always()
        env:
          SUBMIT_RC: ${{ steps.submit.outputs.rc }}
        run: |
          if [ "$SUBMIT_RC" != "0" ]; then
            echo "::error::rtjob submit exited ${SUBMIT_RC:-nothing}: 2 bad input, 3 unreachable or auth"
            exit 1
          fi

  check:
    if: github.event_name == 'repository_dispatch' && startsWith(github.event.client_payload.run_id, 'rtjob-<<SLUG>>-gh')
    runs-on: ubuntu-latest
    timeout-minutes: 30
    env:
      RTJOB_BACKEND: <<BACKEND>>
<<BACKEND_ENV>>
      RTJOB_STORAGE: ${{ vars.RTJOB_STORAGE }}
      TIMEOUT: ${{ inputs.timeout || '1m' }}
      RUN_ID: ${{ github.event.client_payload.run_id }}
    steps:
<<INSTALL_STEPS>>
      - name: Wait for the outcome
        id: wait
        run: |
          set +e
          rtjob wait "$RUN_ID" --timeout "$TIMEOUT" --output json > run.json
          echo "rc=$?" >> "$GITHUB_OUTPUT"
          cat run.json
      - name: Pull the results from storage
        if: always() && contains(fromJSON('["0", "1", "4"]'), steps.wait.outputs.rc)
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
          WAIT_RC: ${{ steps.wait.outputs.rc }}
        run: |
          if [ "$WAIT_RC" != "0" ]; then
            echo "::error::rtjob wait exited ${WAIT_RC:-nothing}: 1 failed or stopped, 2 bad input, 3 unreachable or auth, 4 timed out"
            exit 1
          fi
"""

INSTALL_STEPS = """\
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
          fi"""
