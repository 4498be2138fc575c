"""The toy backend: the whole contract over a dict, the shared policy inherited from ``Backend``."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, ClassVar

from rtjob.backends.base import Backend, Planned, Request
from rtjob.core.errors import BadInput
from rtjob.core.model import RunInfo, RunStatus, SubmitResult
from rtjob.core.redact import mask_command, mask_mapping
from rtjob.jobspec.pricing import HourlyCost
from rtjob.jobspec.resolve import Placement, ResolvedJob


@dataclass
class ToyRequest(Request):
    entrypoint: str = ""
    env: dict[str, str] = field(default_factory=dict)
    rate: dict[str, Any] | None = None


class ToyBackend(Backend):
    name = "toy"
    runs: ClassVar[dict[str, RunInfo]] = {}  # the platform: every ToyBackend sees the same runs
    calls: ClassVar[list[str]] = []  # the backend-specific steps the base class called, in order
    _clock = itertools.count()

    @classmethod
    def placement(cls) -> Placement:
        return Placement(cls.name)

    @property
    def address(self) -> str:
        return "toy://this-process"

    def plan(self, job: ResolvedJob, cost: HourlyCost | None) -> Planned:
        request = ToyRequest(job.run_id, job.job_file, [], job.entrypoint, dict(job.env_vars),
                             cost.to_json() if cost else None)
        return Planned(request, None)

    def render(self, request: Request) -> dict[str, Any]:
        assert isinstance(request, ToyRequest)
        return {"backend": self.name, "entrypoint": mask_command(request.entrypoint), "env": mask_mapping(request.env)}

    def equivalent_command(self, request: Request) -> str:
        assert isinstance(request, ToyRequest)
        return f"toy run {mask_command(request.entrypoint)}"

    def precheck(self, job: ResolvedJob) -> list[str]:
        return []

    def _submit_new(self, request: Request) -> SubmitResult:
        self.calls.append(f"submit {request.run_id}")
        n = next(self._clock)
        started = f"2026-11-25T{n // 3600:02d}:{n // 60 % 60:02d}:{n % 60:02d}+00:00"  # each later than the last
        info = RunInfo(id=request.run_id, job=None, backend=self.name, status=RunStatus.PENDING,
                       start_time=started, address=self.address)
        self.runs[request.run_id] = info
        return SubmitResult(info, created=True)

    def find(self, run_id: str) -> RunInfo | None:
        return self.runs.get(run_id)

    def status(self, run_id: str) -> RunInfo:
        info = self.find(run_id)
        if info is None:
            raise BadInput(f"no run {run_id!r} on the toy backend")
        return info

    def _list(self) -> list[RunInfo]:
        return list(self.runs.values())

    def _stop_running(self, run_id: str) -> RunInfo:
        self.calls.append(f"stop {run_id}")
        self.runs[run_id].status = RunStatus.STOPPED
        return self.runs[run_id]

    def _delete_ended(self, run_id: str) -> None:
        self.calls.append(f"delete {run_id}")
        del self.runs[run_id]

    def logs(self, run_id: str) -> str:
        self.status(run_id)
        return ""

    async def tail(self, run_id: str) -> AsyncIterator[str]:
        yield self.logs(run_id)
