"""The embedded local cluster as a backend ('local'): N Ray nodes on this machine that rtjob starts on demand
(cluster.py), driven through the same Ray Jobs backend as a cluster at an address (backend.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from ...core.errors import BadInput
from ...core.model import SubmitResult
from ...core.redact import REDACTOR
from ..base import Log, Planned, Request
from .backend import RayJobsBackend
from .client import RayJobsAPI
from .request import RayJobRequest

if TYPE_CHECKING:
    from ...jobspec.pricing import HourlyCost
    from ...jobspec.resolve import Placement, ResolvedJob
    from ...jobspec.settings import Settings
    from ..capabilities import LocalCluster

RAY_ADDRESS = "RAY_ADDRESS"


class EmbeddedRayBackend(RayJobsBackend):
    """The embedded cluster: N Ray nodes on this machine that rtjob starts on demand (cluster.py). Runs use
    the job's `local:` profile, CPU only, and write to local storage unless told otherwise."""

    name = "local"
    ci_secrets: ClassVar[tuple[tuple[str, str], ...]] = ()  # a CI runner has no embedded cluster to reach
    ci_extra = ""
    _cluster: Any = None  # the running cluster (cluster.LocalCluster), once connected

    @classmethod
    def placement(cls) -> Placement:
        from ...jobspec.project import rtjob_home
        from ...jobspec.resolve import Placement

        return Placement(cls.name, embedded=True, default_storage=str(rtjob_home() / "local" / "storage"))

    def _connect_to_address(self, settings: Settings, headers: dict[str, str]) -> RayJobsAPI | None:
        return None  # the embedded cluster's address and token are known once it runs (api, prepare)

    def _connect(self, cluster: Any) -> RayJobsAPI:
        REDACTOR.add([cluster.token])
        self._cluster = cluster
        headers = {**self._user_headers, "Authorization": f"Bearer {cluster.token}"}
        self._api = RayJobsAPI(cluster.address, headers, True)
        return self._api

    @property
    def api(self) -> RayJobsAPI:
        if self._api is None:
            from . import cluster

            self._connect(cluster.require())
        assert self._api is not None
        return self._api

    def _recorded(self) -> Any:
        from . import cluster

        try:
            return cluster.load_state()
        except cluster.DamagedState:
            return None  # render and --dry-run only show an address: submit and status report the damage

    @property
    def address(self) -> str:
        if self._api is not None:
            return self._api.address
        recorded = self._recorded()  # render and --dry-run read the state file only: nothing is started
        return recorded.address if recorded is not None else "http://127.0.0.1:8265"

    @property
    def display_address(self) -> str:
        if self._api is None and self._recorded() is None:
            return "embedded cluster (not running; submit starts it)"
        return self.address

    def _auth_scheme(self) -> str | None:
        return "Bearer"  # the embedded cluster always runs with token auth

    def plan(self, job: ResolvedJob, cost: HourlyCost | None) -> Planned:
        planned = super().plan(job, cost)
        request = planned.request
        assert isinstance(request, RayJobRequest)
        if RAY_ADDRESS not in job.spec.env_vars:  # the job's own value wins
            request.cluster_ray_address = True
            recorded = self._recorded()
            if recorded is not None:  # what render shows; _submit_new sets it from the cluster that runs then
                request.runtime_env["env_vars"][RAY_ADDRESS] = recorded.gcs_address
            else:
                request.notes.append(f"{RAY_ADDRESS} is set to the embedded cluster's GCS address when submit "
                                     "starts it")
        return planned

    def prepare(self, job: ResolvedJob, log: Log) -> None:
        from . import cluster

        self._connect(cluster.up(job.nodes, job.local_cpus_per_node or 1, log=log,
                                 gpus_per_node=job.local_gpus_per_node))

    def _submit_new(self, request: Request) -> SubmitResult:
        assert isinstance(request, RayJobRequest)
        if request.cluster_ray_address:
            _ = self.api  # connected to the running cluster (a submit's prepare started it)
            request.runtime_env.setdefault("env_vars", {})[RAY_ADDRESS] = self._cluster.gcs_address
        return super()._submit_new(request)

    def _final_shortage(self) -> bool:
        return True  # no autoscaler adds nodes to the embedded cluster while a run waits

    def _never_fits(self, job: ResolvedJob, what: str, missing: str) -> list[str]:
        raise BadInput(f"{job.job_file}: {what} can never fit on the embedded cluster ({missing})")

    def local_cluster(self) -> LocalCluster:
        from .embedded import EmbeddedCluster

        return EmbeddedCluster()
