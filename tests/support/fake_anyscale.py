"""The anyscale SDK's own offline fake, for rtjob's Anyscale tests.

`ApiLikeFake` is the SDK's shipped `FakeAnyscaleClient` with its known faults fixed the way the real API
behaves; each override below names the fault and does nothing else. rtjob's adapter and the SDK between
it and this client run as shipped. `Timeline` plays the Anyscale control plane: it moves a submitted job
through states (and adds its job runs and their logs) one step per status read, as a server would over
time; the fake itself never moves a job.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from anyscale._private.anyscale_client import FakeAnyscaleClient
    from anyscale._private.anyscale_client.common import APIJobRun
    from anyscale.client.openapi_client.models import ProductionJobStateTransition

# Importing the anyscale SDK costs a process about a second (it imports ray): this module imports it only when
# `ApiLikeFake` is first read (the module's __getattr__ below) or a Timeline moves a job, so a pytest-xdist worker
# that collects the Anyscale tests but runs none of them never pays for it. Test modules import ApiLikeFake in
# their fixtures (annotations under TYPE_CHECKING); Step, Timeline, CLOUD and T0 are free to import anywhere.

CLOUD = "anyscale-cloud"  # the cloud compute_configs/*.yaml name
T0 = dt.datetime(2026, 11, 2, 3, 0, tzinfo=dt.timezone.utc)


def _runtime_env_as_returned(config: Any, fake: FakeAnyscaleClient) -> None:
    """The SDK sends runtime_env as a dict; the real API stores it and returns a RayRuntimeEnvConfig
    (unknown keys dropped), which is what the SDK's status/list read (`runtime_env.pip`, ...)."""
    from anyscale.client.openapi_client.models import RayRuntimeEnvConfig

    runtime_env = getattr(config, "runtime_env", None)
    if isinstance(runtime_env, dict):
        known = {k: v for k, v in runtime_env.items() if k in RayRuntimeEnvConfig.attribute_map}
        config.runtime_env = RayRuntimeEnvConfig(**known, local_vars_configuration=fake.OPENAPI_NO_VALIDATION)


def _define_api_like_fake() -> type:
    from anyscale._private.anyscale_client import FakeAnyscaleClient
    from anyscale.client.openapi_client.models import Cloud, DecoratedProductionJob, HaJobStates

    class ApiLikeFake(FakeAnyscaleClient):
        def __init__(self) -> None:
            super().__init__()
            # Seeding, not a fix: the cloud that compute_configs/*.yaml name exists in this fake org.
            self.add_cloud(Cloud(id="cld_rtjob", name=CLOUD, local_vars_configuration=self.OPENAPI_NO_VALIDATION))
            self.on_get_job: list[Any] = []  # hooks the Timeline uses to play the control plane
            self.terminated: list[str] = []

        # Fault 1 (FIELD-NOTES: "status() after a submit with working_dir raises 'dict' object has no attribute
        # 'pip'"): the fake stores the SDK's runtime_env dict as is. Any runtime_env triggers it (rtjob always
        # sends env_vars), and schedules too.
        def submit_job(self, model: Any) -> Any:
            _runtime_env_as_returned(model.config, self)
            job = super().submit_job(model)
            job.created_at = T0  # the real API stamps jobs; the fake leaves None
            job.status_updated_at = T0
            return job

        def apply_schedule(self, model: Any) -> Any:
            _runtime_env_as_returned(model.config, self)
            # Fault 2: the real API's apply creates *or updates* the schedule of that name in its project; the
            # fake always creates a new one (a new id each time).
            existing = next((s for s in self._schedules.values()
                             if s.name == model.name and s.project_id == model.project_id), None)
            schedule = super().apply_schedule(model)
            if existing is not None:
                del self._schedules[schedule.id]
                schedule.id = existing.id
                schedule.next_trigger_at = existing.next_trigger_at
                self.update_schedule(schedule)
            return schedule

        # Fault 3 (FIELD-NOTES: "one wait path raises 'str' object has no attribute 'current_state'"): the fake's
        # terminate sets `job.state` to the bare string TERMINATED; the API keeps a state-transition object.
        def terminate_job(self, job_id: str) -> None:
            self.terminated.append(job_id)
            job = self._jobs[job_id]
            job.state = _state(self, HaJobStates.TERMINATED)
            job.status_updated_at = (job.status_updated_at or T0) + dt.timedelta(seconds=5)

        # Fault 4: list_jobs returns the stored InternalProductionJob objects, where the API returns
        # DecoratedProductionJob (the SDK's list reads its `project` and `connections`: AttributeError).
        def list_jobs(self, **kwargs: Any) -> Any:
            page = super().list_jobs(**kwargs)
            page.results = [
                DecoratedProductionJob(
                    **{k: getattr(job, k) for k in job.attribute_map if k in DecoratedProductionJob.attribute_map},
                    project=None, connections=None, local_vars_configuration=self.OPENAPI_NO_VALIDATION,
                )
                for job in page.results
            ]
            return page

        # Fault 5: the fake's upload keeps only the folder's path, where the real one zips its bytes into the
        # cloud's storage at that moment. rtjob's sealed package is a folder that lives only while the submit
        # uploads it: its bytes are kept here (a copy of the same name, removed at exit), as the cloud would.
        def upload_local_dir_to_cloud_storage(self, local_dir: str, **kwargs: Any) -> str:
            import atexit
            import shutil
            import tempfile
            from pathlib import Path

            from rtjob.core.secret_refs import SEALED_PACKAGE

            if Path(local_dir).name == SEALED_PACKAGE:
                kept = tempfile.mkdtemp(prefix="rtjob-fake-cloud-")
                atexit.register(shutil.rmtree, kept, True)
                local_dir = shutil.copytree(local_dir, Path(kept) / SEALED_PACKAGE)
            return str(super().upload_local_dir_to_cloud_storage(str(local_dir), **kwargs))

        # Not a fix: lets a Timeline move the job the SDK is about to read.
        def get_job(self, **kwargs: Any) -> Any:
            for hook in self.on_get_job:
                hook(kwargs)
            return super().get_job(**kwargs)

    ApiLikeFake.__qualname__ = "ApiLikeFake"  # named as if defined at the module's top
    return ApiLikeFake


def __getattr__(name: str) -> Any:
    """``ApiLikeFake``, its class made (and the SDK imported) at the first read."""
    if name == "ApiLikeFake":
        globals()[name] = _define_api_like_fake()
        return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _state(fake: FakeAnyscaleClient, state: str) -> ProductionJobStateTransition:
    from anyscale.client.openapi_client.models import HaJobGoalStates, ProductionJobStateTransition

    return ProductionJobStateTransition(current_state=state, goal_state=HaJobGoalStates.SUCCESS,
                                        local_vars_configuration=fake.OPENAPI_NO_VALIDATION)


@dataclass
class Step:
    state: str  # HaJobStates: PENDING, RUNNING, SUCCESS, OUT_OF_RETRIES, TERMINATED, ...
    run_status: str | None = None  # the current job run's BackendJobStatus (RUNNING, SUCCEEDED, FAILED)
    log: str = ""  # log lines that appeared by this step
    new_run: bool = False  # a new attempt (job run) starts at this step
    minutes: float = 1.0  # control-plane time since the previous step


@dataclass
class Timeline:
    """Plays the Anyscale control plane for the one job rtjob submits: each read of that job by id moves
    it one step on (the last step holds)."""

    fake: ApiLikeFake  # noqa: F821 - the class the module's __getattr__ makes
    steps: list[Step]
    reads: int = 0
    runs: list[APIJobRun] = field(default_factory=list)
    log: str = ""

    def __post_init__(self) -> None:
        self.fake.on_get_job.append(self._on_get_job)

    def _on_get_job(self, kwargs: dict[str, Any]) -> None:
        job_id = kwargs.get("job_id")
        if job_id is None or job_id not in self.fake._jobs:
            return
        if self.reads < len(self.steps):
            self._apply(job_id, self.steps[self.reads])
        self.reads += 1

    def _apply(self, job_id: str, step: Step) -> None:
        job = self.fake._jobs[job_id]
        now = (job.status_updated_at or T0) + dt.timedelta(minutes=step.minutes)
        job.state = _state(self.fake, step.state)
        job.status_updated_at = now
        if step.new_run:
            from anyscale._private.anyscale_client.common import APIJobRun

            run = APIJobRun(id=f"run-{len(self.runs) + 1}", name=f"raysubmit_{len(self.runs) + 1}",
                            status=step.run_status, created_at=now, ha_job_id=job_id,
                            local_vars_configuration=self.fake.OPENAPI_NO_VALIDATION)
            self.runs.append(run)
            self.fake.update_job_run(job_id, run)
            job.last_job_run_id = run.id
            self.log = ""
        elif self.runs and step.run_status:
            self.runs[-1].status = step.run_status
        if step.log and self.runs:
            self.log += step.log
            self.fake.add_job_run_logs(self.runs[-1].id, self.log)
        self.fake.update_job(job)


def use_fake(monkeypatch: Any) -> Any:
    """A fresh fake Anyscale org as the client rtjob's Anyscale backend builds (with the SDK's FakeTimer), and the
    backend reading it without its 5 s pacing (speed only); the ApiLikeFake returned."""
    from anyscale._private.sdk.timer import FakeTimer
    from rtjob.backends.anyscale import client as anyscale_client
    from rtjob.backends.anyscale.backend import AnyscaleBackend
    from rtjob.runs.pipelines import steps

    fake = __getattr__("ApiLikeFake")()
    monkeypatch.setattr(anyscale_client, "default_client", lambda: fake)
    monkeypatch.setattr(anyscale_client, "default_timer", FakeTimer)
    monkeypatch.setattr(AnyscaleBackend, "status_poll_s", 0.0)
    monkeypatch.setattr(steps, "INSIDE_POLL_S", 0.0)
    return fake
