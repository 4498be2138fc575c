"""Ray's retry rule as an object of its own: built from the Jobs API client (an address and a token) and a
submit callable, with no Settings and no backend, as a process on the cluster would build it."""

from __future__ import annotations

from typing import Any

from rtjob.backends.ray.request import RayJobRequest
from rtjob.backends.ray.retries import RayRetries
from rtjob.core.model import RunInfo, RunStatus, SubmitResult

import rtjob_contract as contract

LOST = {"submission_id": "r1", "status": "FAILED", "driver_exit_code": 137, "entrypoint": "python train.py",
        "metadata": {contract.META_MAX_RETRIES: "2"}, "runtime_env": {"working_dir": "/here"}}


class Jobs:
    """The Jobs API as the rule reads it: one dict per submission id."""

    def __init__(self, **jobs: dict[str, Any]) -> None:
        self.jobs = jobs

    def job(self, run_id: str) -> dict[str, Any] | None:
        return self.jobs.get(run_id)


def test_the_rule_is_built_from_an_address_and_a_token() -> None:
    rule = RayRetries.at("http://127.0.0.1:9", "tok-123", lambda request: SubmitResult(None, False))  # type: ignore[arg-type]
    assert rule.api.address == "http://127.0.0.1:9" and rule.api.headers == {"Authorization": "Bearer tok-123"}
    assert RayRetries.at("http://127.0.0.1:9", None, print).api.headers == {}  # type: ignore[arg-type]


def test_a_lost_driver_is_resubmitted_through_the_callable_it_was_given() -> None:
    sent: list[RayJobRequest] = []

    def submit(request: RayJobRequest) -> SubmitResult:
        sent.append(request)
        return SubmitResult(RunInfo(request.run_id, None, "ray", RunStatus.PENDING), created=True)

    decision = RayRetries(Jobs(r1=LOST), submit).decide_and_resubmit("r1", None)  # type: ignore[arg-type]
    assert decision.reason and decision.created and decision.next_run and decision.next_run.id == "r1-retry1"
    assert [r.run_id for r in sent] == ["r1-retry1"]
    assert sent[0].metadata[contract.META_ATTEMPT] == "2" and sent[0].metadata[contract.META_PARENT] == "r1"
