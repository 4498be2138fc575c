"""A queue's keeper on a Ray cluster, as the backends serve it (rtjob.queue's keeper decides; this acts):
- the client's part: ``start_keeper`` submits ``rtjob-keeper-<queue>-<n>`` (a Ray job of 0 CPUs on the head,
  running ``python -m rtjob.queue.keeper``, rtjob travelling as its py_modules; hidden from `list` as a
  supervisor of ``queue:<name>``), and ``queued_body`` turns a planned request into the Jobs API body the keeper
  POSTs at admission, its packages uploaded to the cluster and their zips kept in the queue's storage;
- the cluster's part: ``RayKeeperCluster``, what the keeper's loop asks of the cluster from inside it (free and
  total resources per node, whether an autoscaler can add nodes, how large it can grow and its one standing
  request, a run's Jobs API state, whether it is placed or ended, its submit and stop, its packages put back from
  the queue's storage when Ray has collected them).

Imports at module level: the stdlib and rtjob_contract (the cluster runs it); ray inside functions."""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import rtjob_contract as contract

from ..core.errors import BadInput

KEEPER_MODULE = "rtjob.queue.keeper"
PASSED_VARS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_DEFAULT_REGION", "AWS_REGION",
               "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "RTJOB_S3_OBJECTS")
# The credentials among them travel in the keeper's sealed package, never its env_vars (Ray's job info shows those
# to anyone who reaches the dashboard): the keeper unseals them first (core/secret_refs.unseal).
SEALED_VARS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")
TERMINAL = ("SUCCEEDED", "FAILED", "STOPPED")
SEALED_URI = "rtjob_sealed_uri"  # a queued body's key (popped before it is POSTed): its sealed package's gcs:// URI
MAX_KEEPERS = 50
GROWS_TTL_S = 60.0


def keeper_id(name: str, n: int) -> str:
    return f"rtjob-keeper-{name}-{n}"


def _ray_api(backend: Any) -> Any:
    api = getattr(backend, "api", None)
    if api is None or not hasattr(api, "job"):
        raise BadInput(f"queues need a Ray cluster: backend {getattr(backend, 'name', backend)!r} has no Jobs API here")
    return api


def start_keeper(backend: Any, name: str, folder: str, endpoint: str | None, n: int, env: dict[str, str] | None,
                 limits: dict[str, Any] | None = None) -> str:
    """Start the queue's keeper number ``n`` or later (one whose job ended is passed over; one that is starting is
    returned as it is): its id."""
    import json

    from .packaging import companion_modules
    from .ray.request import RayJobRequest

    api = _ray_api(backend)
    for k in range(n, n + MAX_KEEPERS):
        data = api.job(keeper_id(name, k))
        if data is None:
            break
        if data.get("status") not in TERMINAL:
            return keeper_id(name, k)
    else:
        raise BadInput(f"queue {name}: {MAX_KEEPERS} keepers ended in a row; see `ray job logs {keeper_id(name, k)}`")
    given = dict(env) if env is not None else {v: os.environ[v] for v in PASSED_VARS if os.environ.get(v)}
    sealed = {k: v for k, v in given.items() if k in SEALED_VARS}
    passed = {k: v for k, v in given.items() if k not in SEALED_VARS}
    passed[contract.ENV_DASHBOARD_ADDRESS] = backend.address
    passed[contract.ENV_QUEUE] = json.dumps({"uri": folder, "name": name, "endpoint": endpoint, "limits": limits or {}})
    request = RayJobRequest(
        run_id=keeper_id(name, k), job_file="", notes=[], entrypoint=f"python -m {KEEPER_MODULE} {keeper_id(name, k)}",
        runtime_env={"py_modules": companion_modules(), "env_vars": passed},
        metadata={contract.META_ROLE: contract.ROLE_SUPERVISOR, contract.META_SUPERVISES: f"queue:{name}"},
        entrypoint_num_cpus=0, cluster_ray_address=bool(getattr(backend, "_cluster", None)))
    request.sealed_env = sealed
    backend.submit(request)
    return keeper_id(name, k)


def in_cluster_backend() -> Any:
    """The cluster's Jobs API as a backend, from a process on the cluster (a pipeline's supervisor starting its
    steps' queue's keeper): the dashboard's address it was given (backends/ray/in_cluster.py)."""
    from pathlib import Path

    from ..jobspec.settings import Settings
    from .ray.backend import RayJobsBackend
    from .ray.in_cluster import in_cluster_api

    settings = Settings(Path.cwd())
    settings.set("address", in_cluster_api().address, "the cluster's dashboard")
    return RayJobsBackend(settings)


def queued_body(backend: Any, request: Any, keep: Callable[[str, Path], None],
                kept: Callable[[str], bool] = lambda package: False) -> dict[str, Any]:
    """The Jobs API body of planned ``request`` with its packages uploaded to the cluster (gcs:// URIs) and each
    package's zip handed to ``keep(name, path)`` (the queue's storage) unless ``kept(name)``, so the keeper can put
    it back later; all but the sealed package (the run's client-held secrets, backends/ray/sealed.py), which is
    never stored: the keeper holds a copy in its memory (``RayKeeperCluster.hold_sealed``) and puts it back."""
    from ray._private.runtime_env.packaging import create_package
    from ray.dashboard.modules.job.common import uri_to_http_components
    from ray.job_submission import JobSubmissionClient

    from ..core.secret_refs import SEALED_PACKAGE
    from .ray.client import quiet_ray_client
    from .ray.request import RayJobRequest
    from .ray.sealed import sealed_runtime_env
    from .ray.supervisor_jobs import step_body

    if not isinstance(request, RayJobRequest):
        raise BadInput("queues need a Ray cluster: this backend's runs are queued by its platform")
    api = _ray_api(backend)
    quiet_ray_client()
    client = JobSubmissionClient(backend.address, headers=api.headers, verify=api.verify, create_cluster_if_needed=False)
    upload = client._upload_package_if_needed  # noqa: SLF001 - Ray's own upload, the one submit_job uses

    def upload_and_keep(package_path: str, include_gitignore: bool, include_parent_dir: bool = False,
                        excludes: list[str] | None = None, is_file: bool = False) -> str:
        uri = upload(package_path, include_gitignore, include_parent_dir, excludes, is_file)
        if Path(package_path).name == SEALED_PACKAGE:  # secrets are never written to the queue's storage
            return str(uri)
        _, package = uri_to_http_components(uri)
        if kept(package):  # named by its content's hash: kept already, nothing to zip again
            return str(uri)
        with tempfile.TemporaryDirectory() as tmp:
            zipped = Path(package_path) if is_file else Path(tmp) / package
            if not is_file:
                create_package(package_path, zipped, include_gitignore=include_gitignore,
                               include_parent_dir=include_parent_dir, excludes=excludes)
            keep(package, zipped)
        return str(uri)

    client._upload_package_if_needed = upload_and_keep  # type: ignore[method-assign]  # noqa: SLF001
    import copy

    with sealed_runtime_env(request) as sent:  # the run's client-held secrets: its sealed package, as a submit's
        env = copy.deepcopy(sent)
        client._upload_working_dir_if_needed(env)  # noqa: SLF001
        client._upload_py_modules_if_needed(env)  # noqa: SLF001
    body = step_body(request)
    body["runtime_env"] = env
    if request.sealed or request.sealed_env:  # the last py_module: which one restore_code cannot put back
        body[SEALED_URI] = env["py_modules"][-1]
    body["entrypoint_resources"] = dict(request.entrypoint_resources)
    if request.cluster_ray_address and getattr(backend, "_cluster", None) is not None:
        env.setdefault("env_vars", {}).setdefault("RAY_ADDRESS", backend._cluster.gcs_address)  # noqa: SLF001
    return body


class RayKeeperCluster:
    """The cluster as the keeper's loop sees it from inside (the Jobs API over REST, Ray's GCS for resources and
    placement groups)."""

    def __init__(self) -> None:
        from .ray.in_cluster import RayClusterJobs, in_cluster_api

        self.api = in_cluster_api()
        self.jobs = RayClusterJobs(self.api)
        self._ray = False
        self._grows: tuple[bool, float] | None = None
        self._largest: tuple[tuple[list[dict[str, float]], str] | None, float] | None = None
        self._sealed: dict[str, bytes] = {}  # a queued run's sealed package (its gcs:// URI): its zip
        self._seen: set[str] = set()  # the queued runs whose sealed package was looked for

    def _init(self) -> None:
        if not self._ray:
            import ray

            ray.init(address=os.environ.get("RAY_ADDRESS") or "auto", logging_level=40, log_to_driver=False)
            self._ray = True

    def free_per_node(self) -> list[dict[str, float]]:
        self._init()
        from ray._private import state

        return [_plain(v) for v in state.available_resources_per_node().values()]

    def total_per_node(self) -> list[dict[str, float]]:
        self._init()
        from ray._private import state

        return [_plain(v) for v in state.total_resources_per_node().values()]

    def grows(self) -> bool:
        """Whether an autoscaler can add nodes (Ray's monitor, asked again once a minute)."""
        if self._grows is None or time.monotonic() - self._grows[1] > GROWS_TTL_S:
            self._grows = (self.api.has_autoscaler() is True, time.monotonic())
        return self._grows[0]

    def largest_per_node(self) -> tuple[list[dict[str, float]], str] | None:
        """The growing cluster's nodes at their largest and the autoscaling config they were read from (None:
        not known), read again once a minute (ray/largest_shape.py)."""
        if self._largest is None or time.monotonic() - self._largest[1] > GROWS_TTL_S:
            self._init()
            import ray
            from ray._private import state

            from .ray.largest_shape import read_largest

            heads = [v for v in state.total_resources_per_node().values() if "node:__internal_head__" in v]
            port = int(str(ray.get_runtime_context().gcs_address).rsplit(":", 1)[-1])
            self._largest = (read_largest(port, _plain(heads[0])) if heads else None, time.monotonic())
        return self._largest[0]

    def hold_sealed(self, queued: list[Any], request_of: Callable[[str], dict[str, Any]]) -> None:
        """Copy each queued run's sealed package from Ray's GCS into this keeper's memory, once: Ray collects an
        upload no job references after RAY_RUNTIME_ENV_TEMPORARY_REFERENCE_EXPIRATION_S (600 s), and the queue's
        storage never keeps secrets, so ``restore_code`` puts it back from here however long the run waits."""
        for entry in (e for e in queued if e.run_id not in self._seen):
            self._seen.add(entry.run_id)
            uri = request_of(entry.intent).get(SEALED_URI)
            if uri and uri not in self._sealed:
                self._init()
                from ray.experimental.internal_kv import _internal_kv_get  # a package's zip, keyed by its URI

                if data := _internal_kv_get(uri):
                    self._sealed[uri] = data

    def ask_for(self, bundles: list[dict[str, float]]) -> None:
        """Ray's one standing autoscaler request for the cluster, replaced by ``bundles`` ([]: withdrawn)."""
        self._init()
        from ray.autoscaler.sdk import request_resources

        request_resources(bundles=[dict(b) for b in bundles])

    def job(self, run_id: str) -> dict[str, Any] | None:
        return self.api.job(run_id)

    def submit(self, body: dict[str, Any]) -> bool:
        """POST the run (its id is its submission id: Ray refuses a second, which is an attach); True: created."""
        resp = self.api.request("POST", "/api/jobs/", json={k: v for k, v in body.items() if k != "job_file"})
        if resp.status_code >= 400 and "already exists" not in resp.text:
            raise RuntimeError(f"Ray refused {body.get('submission_id')}: HTTP {resp.status_code} "
                               f"{resp.text.strip()[-300:]}")
        self._supervise(str(body.get("submission_id")))
        return resp.status_code < 400

    def _supervise(self, run_id: str) -> None:
        """Start the run's supervisor when it allows retries, as a client's submit does (its id is deterministic:
        a keeper that starts it again attaches), so its retries keep its admission with no client alive."""
        from .ray.in_cluster import submit_over_rest
        from .ray.supervisor_jobs import supervisor_request, wants_supervisor

        data = self.api.job(run_id)
        if data is not None and wants_supervisor(data):
            submit_over_rest(self.api, supervisor_request(data, self.api.address))

    def restore_code(self, body: dict[str, Any], fetch: Callable[[str], bytes | None]) -> list[str]:
        """Put back the body's packages Ray no longer has, from ``fetch(name)`` (the queue's storage) or this
        keeper's memory (its sealed package, dropped from memory now); the ones it could not are returned."""
        from .ray.supervisor_jobs import missing_packages

        lost = []
        sealed = body.pop(SEALED_URI, None)  # never kept in the queue's storage (queued_body)
        for uri in missing_packages(self.api, dict(body.get("runtime_env") or {})):
            package = uri[len("gcs://"):]
            data = self._sealed.get(uri) if uri == sealed else fetch(package)
            resp = None if data is None else self.api.request("PUT", f"/api/packages/gcs/{package}", data=data)
            if resp is None or resp.status_code != 200:
                lost.append(f"its sealed secrets ({uri})" if uri == sealed else f"its code ({uri})")
        self._sealed.pop(str(sealed), None)  # the run's job refers to it from now on: Ray keeps it
        return lost

    def placed(self, run_id: str, data: dict[str, Any], workers: int) -> str | None:
        """How the run holds its place: "pg" (a placement group its job created is placed), "driver" (its driver
        runs and it declares no workers), None (not yet)."""
        job_id = data.get("job_id")
        if workers and job_id:
            self._init()
            from ray.util.state import list_placement_groups

            groups = list_placement_groups(filters=[("creator_job_id", "=", str(job_id))], raise_on_missing_output=False)
            if any(str(getattr(g, "state", "")) == "CREATED" for g in groups):
                return "pg"
        if data.get("status") == "RUNNING" and not workers:
            return "driver"
        return None

    def ended(self, run_id: str, grace_s: float = 120.0) -> bool:
        """Whether the run left the cluster for good: its latest attempt ended and no retry comes (a retriable
        end with retries left keeps its slot while the supervisor resubmits, up to ``grace_s``)."""
        latest = self.jobs.latest_attempt(run_id)
        state = self.jobs.state(latest)
        if state is None or state.status not in TERMINAL:
            return False
        from ..core.retry_rule import retries_left

        if state.retry_reason is not None and retries_left(state.attempt, state.max_retries):
            end = float((self.job(latest) or {}).get("end_time") or 0) / 1000
            return bool(end) and time.time() - end > grace_s
        return True

    def stop(self, run_id: str) -> None:
        self.api.stop(self.jobs.latest_attempt(run_id))


def _plain(resources: dict[str, Any]) -> dict[str, float]:
    return {k: float(v) for k, v in resources.items() if not k.startswith("node:") and "_group_" not in k}
