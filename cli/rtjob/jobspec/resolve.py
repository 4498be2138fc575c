"""Spec + compute config + overrides → a resolved job: everything a backend needs, nothing of YAML."""

from __future__ import annotations

import copy
import os
import secrets
import shlex
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

import rtjob_contract as contract

from ..core.errors import BadInput
from ..core.model import check_run_id
from . import catalog, secret_settings
from .gpus import inventory, machine_gpus
from .notify_plan import NotifyPlan, resolve_notify
from .overrides import overrides_applied
from .project import find_compute_config_file, find_job_file, job_file_root
from .queues import QueuePlan, plan_for
from .requirements import declared_at, read_requirements, split_satisfied
from .run_env import RAY_DEFAULT_ENV, job_storage_env
from .schema import (
    ComputeConfig,
    JobSpec,
    WorkerGroup,
    describe_validation_error,
    validate_compute_config,
    validate_job,
)
from .settings import Settings
from .storage_root import storage_root as pick_storage_root
from .tracking import tracking_env
from .yamlsrc import Located, load_yaml


@dataclass(frozen=True)
class Registered:
    """Compute configs a platform keeps by name: a job names one as PREFIX NAME[:VERSION] (e.g. the Anyscale
    backend's `anyscale:team-g5:2`) instead of a file."""

    prefix: str
    platform: str  # who keeps them, as messages name it
    backend: str  # the backend that takes them


@dataclass(frozen=True)
class Placement:
    """What resolving a job needs to know about where it will run. Each backend declares its own
    (``Backend.placement``), so nothing here tests a backend's name."""

    backend: str
    # Runs on this machine (the embedded cluster): the job's `local:` profile applies (unless --real-shape), this machine's GPUs if any, no cost.
    embedded: bool = False
    # Takes compute configs registered with the platform (PREFIX NAME[:VERSION]), not only files.
    registered: Registered | None = None
    # The other backends' registered compute configs (backends.placement_for fills them in), so a job that
    # names one is told which backend takes it instead of being told that no such file exists.
    registered_elsewhere: tuple[Registered, ...] = ()
    # Sizes the worker group to --nodes itself (Anyscale pins min = max = nodes); else a note when --nodes
    # is above the group's max_nodes.
    sizes_worker_group: bool = False
    # Where runs write when the job, the project and the flags set no storage (None: nowhere).
    default_storage: str | None = None


@dataclass
class Overrides:
    nodes: int | None = None
    sets: tuple[str, ...] = ()
    env: tuple[str, ...] = ()
    name: str | None = None
    submission_id: str | None = None
    forward_aws_credentials: bool = False  # copy the client's AWS credentials into the job (only when asked)
    # On the embedded cluster: the job as written (its args, data, epochs), not its `local:` profile: a
    # workstation's GPUs can train the real configuration.
    real_shape: bool = False


@dataclass
class JobSource:
    """Where a job's documents come from: its files (None) or, for `rtjob rerun`, a run record. A recorded job
    keeps the path of the file it came from: relative paths in it (working_dir, requirements) are relative to it."""

    path: Path  # the job file the document was read from at submit
    job_file: str  # how the run showed (and recorded) it
    shown: str  # how errors name it
    document: dict[str, Any]
    compute_config: tuple[str, dict[str, Any]] | None = None  # (name, document) of the compute config it used
    lines: dict[tuple[str | int, ...], int] = field(default_factory=dict)  # a file's key lines (errors: file:line)

    @classmethod
    def of_file(cls, path: Path, located: Located) -> JobSource:
        """A job file already parsed (``located``): resolving it reads nothing twice."""
        return cls(path, located.path, located.path, located.data, lines=located.lines)


@dataclass
class ResolvedJob:
    """One run of one job, fully decided. Backends turn this into their wire request."""

    spec: JobSpec
    job_file: str
    backend: str
    run_id: str
    nodes: int
    workers_per_node: int
    num_workers: int
    cpus_per_worker: float
    gpus_per_worker: float
    memory_gb_per_worker: float | None
    compute_config_name: str | None
    compute_config: ComputeConfig | None
    worker_group: WorkerGroup | None
    entrypoint: str
    env_vars: dict[str, str]
    working_dir: Path
    storage_root: str | None
    storage_uri: str | None
    notes: list[str] = field(default_factory=list)
    storage_endpoint: str | None = None  # the S3-compatible endpoint the job writes to (recorded with the run)
    embedded: bool = False  # runs on the embedded cluster (this machine: no cost)
    # False: the job declares no worker shape (no compute config or resources_per_worker; `nodes` and
    # `local.cpus_per_node` size the cluster only): its entrypoint decides how many workers it runs, so rtjob
    # neither shows nor exports a worker count.
    shape_declared: bool = True
    local_cpus_per_node: int | None = None  # the embedded cluster's node size (None: not the embedded cluster)
    local_gpus_per_node: int = 0  # this machine's GPUs each embedded node gets (its own: jobspec/gpus.py)
    local_profile: bool = False  # the job's `local:` profile applied (embedded cluster, without --real-shape)
    companion: bool = True  # the entrypoint runs under rtjob's run-side companion (job `companion:`, RTJOB_COMPANION)

    @property
    def sized_nodes(self) -> int | None:
        """The cluster's node count when the job (or --nodes) sizes it, even without a worker shape."""
        return self.nodes if self.shape_declared or "nodes" in self.spec.model_fields_set else None

    def shape_summary(self) -> str:
        """'2 node(s), 4 worker(s)', or what rtjob knows when the entrypoint sets its own shape."""
        if self.shape_declared:
            return f"{self.nodes} node(s), {self.num_workers} worker(s)"
        return "shape set by the entrypoint"
    # pip lines to install for the run (None: the job declares none); on the embedded cluster without those
    # the running environment already satisfies (jobspec/requirements.py).
    requirements: list[str] | None = None
    # The documents as read, before the local profile and overrides (a run record keeps them for rerun).
    document: dict[str, Any] = field(default_factory=dict, repr=False)
    compute_config_document: dict[str, Any] | None = field(default=None, repr=False)
    job_path: Path | None = None  # the job file, absolute
    # Notifications (None: none); the URLs are in sealed_env under the variables it names, RTJOB_NOTIFY holds it.
    notify: NotifyPlan | None = None
    # Client-held secrets for the run's environment (forwarded AWS credentials, notify URLs): they travel in the
    # sealed package (backends/sealed_package.py), never in env_vars (an Anyscale schedule's and pipeline's too).
    sealed_env: dict[str, str] = field(default_factory=dict, repr=False)
    queue: QueuePlan | None = None  # the team's queue it waits in (jobspec/queues.py); None: sent at once

    @property
    def use_gpu(self) -> bool:
        return self.gpus_per_worker > 0

    def worker_resources(self) -> dict[str, float]:
        res = {"CPU": self.cpus_per_worker}
        if self.gpus_per_worker:
            res["GPU"] = self.gpus_per_worker
        if self.memory_gb_per_worker:
            res["memory"] = self.memory_gb_per_worker * 1024**3
        return res


def render_args(args: dict[str, Any]) -> list[str]:
    """args: {global_batch_size: 128, use_gpu: true} → ['--global-batch-size', '128', '--use-gpu']."""
    out: list[str] = []
    for key, value in args.items():
        flag = "--" + key.replace("_", "-")
        if value is None or value is False:
            continue
        if value is True:
            out.append(flag)
        elif isinstance(value, list):
            out.extend([flag, *[str(v) for v in value]])
        else:
            out.extend([flag, str(value)])
    return out


def new_run_id(job_name: str) -> str:
    return f"rtjob-{job_name}-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"


def _validate_with_sets(data: dict[str, Any], located: Located, origins: list[tuple[list[str], str]]) -> JobSpec:
    """Validate the overridden data; an error in an overridden key names the flag that set it."""
    try:
        return JobSpec.model_validate(data)
    except ValidationError as exc:

        def where(error_loc: tuple[str | int, ...]) -> str:
            for parts, label in reversed(origins):
                n = min(len(parts), len(error_loc))
                if tuple(parts[:n]) == tuple(error_loc[:n]):
                    return label
            return located.where(error_loc)

        raise BadInput(describe_validation_error(exc, JobSpec, where)) from None


def load_job_file(ref: str, root: Path) -> tuple[JobSpec, str]:
    """Find, load and validate one job file (a name in jobs/ or a path): (spec, how to show the file)."""
    path, shown = find_job_file(ref, root)
    return validate_job(load_yaml(path, shown)), shown


def load_job(ref: str, root: Path, overrides: Overrides, local_profile: bool = False,
             source: JobSource | None = None) -> tuple[JobSpec, str]:
    """Load, validate, apply the local profile (on the embedded cluster) and the command-line overrides."""
    spec, shown, _ = _load_job(ref, root, overrides, local_profile, source)
    return spec, shown


def _load_job(ref: str, root: Path, overrides: Overrides, local_profile: bool,
              source: JobSource | None) -> tuple[JobSpec, str, Located]:
    if source is not None:
        located = Located(data=copy.deepcopy(source.document), path=source.shown, lines=source.lines)
    else:
        path, shown = find_job_file(ref, root)
        located = load_yaml(path, shown)
    shown = located.path
    spec = validate_job(located)  # errors point at the file first
    data: dict[str, Any] = copy.deepcopy(located.data)
    origins = overrides_applied(data, spec, overrides, local_profile)
    spec = _validate_with_sets(data, located, origins)
    return spec, shown, located


def load_compute_config(name: str, root: Path, referrer: str = "") -> tuple[ComputeConfig, str]:
    cc, shown, _ = _load_compute_config(name, root, referrer, None)
    return cc, shown


def _load_compute_config(name: str, root: Path, referrer: str,
                         source: JobSource | None) -> tuple[ComputeConfig, str, Located]:
    if source is not None and source.compute_config is not None and source.compute_config[0] == name:
        located = Located(data=copy.deepcopy(source.compute_config[1]), path=f"{source.shown} (compute config {name})")
    else:
        path, shown = find_compute_config_file(name, root, referrer)
        located = load_yaml(path, shown)
    return validate_compute_config(located), located.path, located


def pick_group(cc: ComputeConfig, wanted: str | None, where: str) -> WorkerGroup | None:
    if not cc.worker_nodes:
        return None
    if wanted:
        for group in cc.worker_nodes:
            if wanted in (group.name, group.instance_type):
                return group
        labels = ", ".join(g.label for g in cc.worker_nodes)
        raise BadInput(f"{where}: worker_group {wanted!r} is not in the compute config (groups: {labels})")
    for group in cc.worker_nodes:
        itype = catalog.lookup(group.instance_type)
        if (group.resources or {}).get("GPU") or (itype and itype.gpus):
            return group
    return cc.worker_nodes[0]


def _node_offer(group: WorkerGroup | None, cc: ComputeConfig | None, where: str) -> tuple[float, float]:
    """(CPUs, GPUs) one node of the group offers."""
    if group is None:
        head = cc.head_node if cc else None
        if head is None:
            return 1.0, 0.0
        itype_name, resources = head.instance_type, head.resources or {}
    else:
        itype_name, resources = group.instance_type, group.resources or {}
    itype = catalog.lookup(itype_name)
    if "CPU" in resources or "GPU" in resources:
        return float(resources.get("CPU", itype.vcpus if itype else 1)), float(resources.get("GPU", 0))
    if itype is None:
        known = ", ".join(sorted(catalog.CATALOG))
        raise BadInput(
            f"{where}: instance type {itype_name!r} is not in rtjob's catalog; give the group "
            f"`resources: {{CPU: n, GPU: m}}` or use one of: {known}"
        )
    return float(itype.vcpus), float(itype.gpus)


def declares_shape(spec: JobSpec, cc_name: str | None) -> bool:
    """Whether the job (or a flag: --set, --compute-config) declares a worker shape: only resources_per_worker
    or a compute config do. `nodes` and `local.cpus_per_node` size the cluster, not the script's workers."""
    return bool(cc_name or spec.resources_per_worker.model_fields_set)


def _wants_gpu(spec: JobSpec, cc: ComputeConfig | None, shown: str) -> bool:
    """Whether the job trains on GPUs where it runs for real: resources_per_worker.gpus, or its compute config's
    worker group (or head) offers GPUs."""
    if spec.resources_per_worker.gpus:
        return True
    if cc is None:
        return False
    group = pick_group(cc, spec.worker_group, shown)
    return _node_offer(group, cc, shown)[1] > 0


def machine_cpus() -> int:
    """The CPUs this process may use (its affinity mask where the platform has one)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # macOS, Windows
        return max(1, os.cpu_count() or 1)


def job_working_dir(spec: JobSpec, job_file: Path, shown: str) -> Path:
    """The folder uploaded for the job: `working_dir` relative to the job file's folder, or without one the
    job's project root (``job_file_root``), whatever folder rtjob runs in. Never the home folder or /."""
    if spec.working_dir is None:
        working_dir = job_file_root(job_file)
    else:
        working_dir = (job_file.resolve().parent / Path(spec.working_dir).expanduser()).resolve()
        if not working_dir.is_dir():
            raise BadInput(f"{shown}: working_dir {spec.working_dir!r} is not a folder (resolved to {working_dir}; "
                           "a relative working_dir is relative to the job file's folder)")
    home = Path.home().resolve()
    if working_dir == home or working_dir in home.parents:
        raise BadInput(f"{shown}: the working dir would be {working_dir}, which holds your home folder; rtjob "
                       "does not upload it: put the job file in a project folder (with rtjob.toml, .git or "
                       "jobs/) or set working_dir to the folder your code is in")
    return working_dir


def resolve(
    ref: str, settings: Settings, overrides: Overrides, placement: Placement, storage_flag: str | None = None,
    source: JobSource | None = None,
) -> ResolvedJob:
    """The job ``ref`` (its file, or ``source``'s recorded documents) as one run on ``placement``."""
    root = settings.root
    backend = placement.backend
    local_profile = placement.embedded and not overrides.real_shape
    spec, shown, located = _load_job(ref, root, overrides, local_profile, source)
    spec = secret_settings.applied(spec, shown, settings)  # a context's secrets (references): the job's own win
    notes: list[str] = []
    nodes = spec.nodes
    local_gpus = 0

    # Precedence: --compute-config > the job's compute_config > RTJOB_COMPUTE_CONFIG / [tool.rtjob]; an error
    # names where the name came from (the flag, the job file, the variable), not always the job file.
    cc_source = settings.source("compute_config")
    cc_name = settings.get("compute_config") if cc_source.startswith("flag") else None
    if cc_name:
        referrer = f"{cc_source}: "
    elif spec.compute_config:
        cc_name, referrer = spec.compute_config, f"{shown}: "
    else:
        cc_name = settings.get("compute_config")
        referrer = f"{cc_source}: " if cc_name else ""
    cc: ComputeConfig | None = None
    cc_shown: str | None = None
    cc_located: Located | None = None
    elsewhere = next((r for r in placement.registered_elsewhere if cc_name and cc_name.startswith(r.prefix)), None)
    if placement.registered is not None and cc_name and cc_name.startswith(placement.registered.prefix):
        pass  # a compute config registered with the platform is used there as it is
    elif elsewhere is not None:
        raise BadInput(f"{referrer}compute config {cc_name!r} is registered on {elsewhere.platform}; "
                       f"use --backend {elsewhere.backend}")
    elif cc_name:
        cc, cc_shown, cc_located = _load_compute_config(cc_name, root, referrer, source)

    rpw = spec.resources_per_worker
    group: WorkerGroup | None = None
    shape_declared = declares_shape(spec, cc_name)
    local_cpus: int | None = None
    if placement.embedded:
        # The embedded cluster: N Ray nodes on this machine, `local.cpus_per_node` CPUs each (and GPUs, below) (`nodes` and it
        # size the cluster). A job that sizes nothing gets one node with the machine's CPUs: its script asks Ray
        # for what it needs.
        sized = shape_declared or "nodes" in spec.model_fields_set or "cpus_per_node" in spec.local.model_fields_set
        local_cpus = spec.local.cpus_per_node if sized else machine_cpus()
        node_cpus = float(local_cpus)
        cpus = rpw.cpus or 1.0
        here = machine_gpus() if rpw.gpus != 0 and _wants_gpu(spec, cc, cc_shown or shown) else ()
        if here:
            # This machine's GPUs, each embedded node its own: the job's nodes, at most one per GPU a worker needs
            # (an explicit --nodes beyond that is refused), and the machine's GPUs split evenly between them.
            gpus = rpw.gpus or 1.0
            if overrides.nodes is None:
                nodes = max(1, min(nodes, int(len(here) // gpus)))
            if nodes * gpus > len(here):
                raise BadInput(
                    f"{shown}: {nodes} node(s) x {gpus:g} GPU per worker need {nodes * gpus:g} GPU(s); this machine "
                    f"has {inventory(here)}: use --nodes "
                    f"{max(1, int(len(here) // gpus))}, or --set resources_per_worker.gpus=0 to train on CPUs")
            local_gpus = len(here) // nodes
            per_node = max(1, int(local_gpus // gpus))
            notes.append(f"the embedded cluster: {nodes} node(s) x {local_gpus} GPU of this machine's {len(here)}"
                         f" ({here[0].name}), {per_node} worker(s) per node")
        else:
            gpus = rpw.gpus or 0.0
            per_node = max(1, int(node_cpus // cpus))
            if cc is not None:
                notes.append(f"compute config {cc_name} describes the cloud cluster; the embedded cluster uses "
                             f"{local_cpus} CPU per node, no GPU")
    else:
        group = pick_group(cc, spec.worker_group, cc_shown or shown) if cc else None
        if cc is None:
            node_cpus, node_gpus = (rpw.cpus or 1.0), (rpw.gpus or 0.0)
        else:
            node_cpus, node_gpus = _node_offer(group, cc, cc_shown or shown)
        if node_gpus > 0:
            # An explicit 0 (`--set resources_per_worker.gpus=0`) wins: the same layout, one worker per GPU
            # slot, without GPUs (so a GPU job runs on a CPU-only cluster with that flag alone).
            gpus = rpw.gpus if rpw.gpus is not None else 1.0
            per_node = max(1, int(node_gpus // gpus)) if gpus > 0 else max(1, int(node_gpus))
            cpus = rpw.cpus or 1.0
        else:
            gpus = rpw.gpus or 0.0
            cpus = rpw.cpus or max(1.0, node_cpus - 1)  # leave one CPU per node to Ray itself
            per_node = max(1, int(node_cpus // cpus))
        if gpus > node_gpus or cpus > node_cpus:
            label = group.instance_type if group else "the node"
            raise BadInput(f"{shown}: one worker needs CPU={cpus:g} GPU={gpus:g} but one {label} offers "
                           f"CPU={node_cpus:g} GPU={node_gpus:g}")
        if group is not None and not placement.sizes_worker_group and spec.nodes > group.max_nodes:
            notes.append(f"--nodes {spec.nodes} is above {group.label}'s max_nodes={group.max_nodes}")

    run_id = check_run_id(overrides.submission_id, "--submission-id") if overrides.submission_id else new_run_id(spec.name)
    storage_root = pick_storage_root(flag=storage_flag, setting=settings.get("storage"), job=spec.storage,
                                     default=placement.default_storage, embedded=placement.embedded)
    storage_uri = f"{storage_root}/{spec.name}/{run_id}" if storage_root else None

    num_workers = nodes * per_node
    env = {
        "PYTHONUNBUFFERED": "1",
        **RAY_DEFAULT_ENV,
        **spec.env_vars,
        contract.ENV_JOB_NAME: spec.name,
        contract.ENV_RUN_NAME: run_id, contract.ENV_BACKEND: backend,  # whichever run side writes its record first
    }
    if shape_declared:  # never an invented shape: a script that sets its own would be told something false
        env.update({
            contract.ENV_NODES: str(nodes),
            contract.ENV_NUM_WORKERS: str(num_workers),
            contract.ENV_CPUS_PER_WORKER: f"{cpus:g}",
            contract.ENV_GPUS_PER_WORKER: f"{gpus:g}",
            contract.ENV_USE_GPU: "1" if gpus > 0 else "0",
        })
    env[contract.ENV_MAX_FAILURES] = str(spec.max_failures)
    if storage_root:
        env[contract.ENV_STORAGE_PATH] = f"{storage_root}/{spec.name}"
        env[contract.ENV_RUN_DIR] = f"{storage_root}/{spec.name}/{run_id}"  # = storage_uri
        # Always the folder itself; with the companion RTJOB_RUN_DIR becomes a local folder it syncs there.
        env[contract.ENV_RUN_URI] = env[contract.ENV_RUN_DIR]
    # The S3 endpoint (+ credentials only if asked) for the workers.
    storage_env = job_storage_env(storage_root, spec.storage_endpoint, spec.env_vars, overrides.forward_aws_credentials)
    env.update(storage_env.env)
    notes += storage_env.notes
    notify, notify_env = resolve_notify(spec, shown, settings, spec.env_vars)
    # Client-held secrets (forwarded credentials, each notify target's URL) travel sealed, not in env_vars.
    sealed_env = {**storage_env.sealed, **{t["env"]: notify_env.pop(t["env"]) for t in notify.targets}} \
        if notify is not None else dict(storage_env.sealed)
    env.update(notify_env)
    entrypoint = " ".join([spec.entrypoint, *(shlex.quote(a) for a in render_args(spec.args))])
    job_file = source.path if source is not None else find_job_file(ref, root)[0]
    requirements = read_requirements(spec.requirements, job_file,
                                     declared_at(shown, source.lines) if source is not None else shown)
    if requirements and placement.embedded:
        requirements, present = split_satisfied(requirements)
        if present:
            notes.append(f"requirements this environment already satisfies are not installed again: {', '.join(present)}")
    working_dir = job_working_dir(spec, job_file, shown)
    env.update(tracking_env(spec.tracking, spec.args, spec.name, backend, shown, working_dir, os.environ, settings,
                            job_env=spec.env_vars))
    return ResolvedJob(
        spec=spec,
        job_file=source.job_file if source is not None else shown,
        backend=backend,
        run_id=run_id,
        nodes=nodes,
        workers_per_node=per_node,
        num_workers=num_workers,
        cpus_per_worker=cpus,
        gpus_per_worker=gpus,
        memory_gb_per_worker=rpw.memory_gb,
        compute_config_name=cc_name,
        compute_config=cc,
        worker_group=group,
        entrypoint=entrypoint,
        env_vars=env,
        working_dir=working_dir,
        storage_root=storage_root,
        storage_uri=storage_uri,
        notes=notes,
        storage_endpoint=storage_env.endpoint,
        embedded=placement.embedded,
        shape_declared=shape_declared,
        local_cpus_per_node=local_cpus,
        local_gpus_per_node=local_gpus,
        local_profile=local_profile,
        companion=secret_settings.companion_of(spec, shown, sealed_env),
        requirements=requirements,
        document=located.data,
        compute_config_document=cc_located.data if cc_located is not None else None,
        job_path=job_file.resolve(),
        notify=notify,
        sealed_env=sealed_env,
        queue=plan_for(spec, located.where, settings, storage_root),
    )
