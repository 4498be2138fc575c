"""An end's one line in rtjob's words (core/end_words.end_line), over the messages Ray's job manager writes
(ray/dashboard/modules/job: job_supervisor.py, job_manager.py, common.py) and the companion's own."""

from __future__ import annotations

import pytest
from rtjob.core.end_words import end_line

# A failed run's message as Ray's job supervisor writes it: its sentence, then the driver log's tail, which starts
# with the job manager's INFO line and the wrapper's command line.
FAILED_WITH_TAIL = (
    "Job entrypoint command failed with exit code 3, last available logs (truncated to 20,000 chars):\n"
    "2026-12-02 13:04:05,123\tINFO job_manager.py:568 -- Runtime env is setting up.\n"
    "Running entrypoint for job rtjob-fail-20261202-130405-ab12: python -m rtjob.runside.companion --run-uri "
    "/tmp/s/fail/rtjob-fail -- python fail.py\n"
    "failing on purpose with exit code 3\n"
)
TRACEBACK = (
    "Traceback (most recent call last):\n"
    '  File "/ray/dashboard/modules/job/job_supervisor.py", line 300, in run\n'
    "    await self._start()\n"
    "FileNotFoundError: [Errno 2] No such file or directory: 'pyhton'\n"
)


@pytest.mark.parametrize(("message", "line"), [
    (FAILED_WITH_TAIL, "the entrypoint exited with code 3"),
    ("Job entrypoint command failed with exit code 3. No logs available.", "the entrypoint exited with code 3"),
    ("Job supervisor actor failed to start within 900.0 seconds. This timeout can be configured by setting the "
     "environment variable RAY_JOB_START_TIMEOUT_SECONDS.",
     "its driver did not start within 900.0 s (RAY_JOB_START_TIMEOUT_SECONDS)"),
    ("Job supervisor actor died: The actor died because its node has died. Node Id: 8a3f\n\tthe actor's node was "
     "terminated expectedly", "its driver was lost: The actor died because its node has died. Node Id: 8a3f"),
    ("Job supervisor actor could not be scheduled: The actor is not schedulable: {CPU: 64}",
     "its driver could not be scheduled: The actor is not schedulable: {CPU: 64}"),
    ("runtime_env setup failed: Failed to set up runtime environment.\nCould not find a version that satisfies "
     "the requirement torchh", "its runtime environment failed to set up: Failed to set up runtime environment."),
    ("Unexpected error occurred: failed to get job supervisor.", "its driver did not start"),
    (TRACEBACK, "FileNotFoundError: [Errno 2] No such file or directory: 'pyhton'"),
    ("the entrypoint exited with code 1", "the entrypoint exited with code 1"),
    ("Job entrypoint command failed with exit code 1, last available logs (truncated to 20,000 chars):\nRunning "
     "entrypoint for job r: python -m rtjob.runside.companion 'python t.py'\nrtjob companion: secrets.T: "
     "file:///x could not be resolved: not found on the driver's node; the script was not started\n",
     "the entrypoint exited with code 1: secrets.T: file:///x could not be resolved: not found on the driver's "
     "node; the script was not started"),  # a run with no storage: only Ray's message says why
    ("stopped by its time limit timeout_s=5 (exit code -15)", "stopped by its time limit timeout_s=5 (exit code -15)"),
    ("2026-12-02 13:04:05,123\tINFO job_manager.py:568 -- Runtime env is setting up.\nits own words", "its own words"),
])
def test_a_failed_runs_line_is_the_cause_in_rtjobs_words(message: str, line: str) -> None:
    assert end_line(message, "FAILED") == line


@pytest.mark.parametrize("message", [
    "Job has not started yet.",
    "Job has not started yet. It may be waiting for resources (CPUs, GPUs, memory, custom resources) to become "
    "available. It may be waiting for the runtime environment to be set up.",
    "Job is currently running.", "Job finished successfully.", "Job was intentionally stopped.", "Job failed.",
    "", None, "   \n",
    "2026-12-02 13:04:05,123\tINFO job_manager.py:568 -- Runtime env is setting up.",
])
def test_rays_plain_state_texts_and_machinery_say_nothing(message: str | None) -> None:
    assert end_line(message, "FAILED") is None


def test_a_succeeded_run_keeps_no_failure_of_rays_only_rtjobs_own_line() -> None:
    assert end_line("Job entrypoint command failed with exit code 3", "SUCCEEDED") is None
    assert end_line("attempt 2 (r1-retry1) ended SUCCEEDED", "SUCCEEDED") == "attempt 2 (r1-retry1) ended SUCCEEDED"
    assert end_line("stopped (rtjob stop)", "STOPPED") == "stopped (rtjob stop)"


def test_a_long_end_line_is_cut_alike_in_every_view() -> None:
    """The verdict's JSON line, `status` text and the UI card all call end_line: one cut, at LINE_MAX."""
    from rtjob.core.end_words import LINE_MAX
    from rtjob.core.model import RunInfo, RunStatus
    from rtjob.core.verdict import said

    long = "ValueError: " + "x" * 400
    cut = end_line(long, "FAILED")
    assert cut is not None and len(cut) == LINE_MAX and cut.endswith("…")
    info = RunInfo(id="r", job="j", backend="local", status=RunStatus.FAILED, message=long)
    assert said(info)["line"] == cut
