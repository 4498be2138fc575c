"""What `render` and `--dry-run` print: a planned run's request exactly as it will be sent, its shape, cost and
upload (secrets masked). Used by submit.py for one run and by pipeline.py for each step."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from .describe import run_dir_of, run_dir_text
from .printing import echo, print_data

if TYPE_CHECKING:
    from ..backends.base import Upload
    from ..jobspec.project import Settings
    from ..runs.runner import Plan


def _shown_setting(key: str, value: Any) -> Any:
    from ..core.redact import mask_url

    if key == "headers":
        return "(masked)"
    return mask_url(value) if isinstance(value, str) else value


def running_cluster(planned: Plan) -> dict[str, Any] | None:
    """The cluster on this machine as it runs now ({address, nodes, cpus, ...}), or None when the backend has
    none or it does not run: render describes that cluster, never one it would start."""
    from ..core.errors import Unreachable

    cluster = planned.backend.local_cluster()
    if cluster is None or not cluster.running():
        return None
    try:
        return cluster.describe()
    except Unreachable:
        return None


UNSTARTED_ADDRESS = "(chosen when the embedded cluster starts: submit starts it)"
ADDRESS_VARIABLE = "$RAY_API_SERVER_ADDRESS"  # what `eval "$(rtjob local env)"` sets once it runs


def _not_started(planned: Plan) -> bool:
    """Whether the run would go to an embedded cluster that does not run yet: its dashboard's port is chosen when
    it starts, so the address the backend holds now is no fact."""
    cluster = planned.backend.local_cluster()
    return cluster is not None and not cluster.running()


def _rendered(planned: Plan) -> tuple[dict[str, Any], str]:
    """The request as the backend renders it and its equivalent command, with the address said as it is known."""
    rendered = dict(planned.backend.render(planned.request))
    equivalent = planned.backend.equivalent_command(planned.request)
    if _not_started(planned) and isinstance(rendered.get("address"), str):
        equivalent = equivalent.replace(rendered["address"], ADDRESS_VARIABLE)
        rendered["address"] = UNSTARTED_ADDRESS
    return rendered, equivalent


def _cluster_text(planned: Plan, running: dict[str, Any] | None) -> str:
    """The embedded cluster a job without a worker shape runs on: the one running (a running cluster keeps its
    size; submit only adds nodes), else the one submit would start."""
    job = planned.job
    if running is None:
        return f"submit starts the embedded cluster with {job.nodes} node(s) × {job.local_cpus_per_node} CPU"
    text = f"the embedded cluster runs {running['nodes']} node(s), {running['cpus']:g} CPU in all"
    if job.nodes > running["nodes"]:
        text += f"; submit adds {job.nodes - running['nodes']} node(s) × {job.local_cpus_per_node} CPU"
    return text


def _embedded_text(job: Any) -> str:
    """Which configuration runs on the embedded cluster, and this machine's GPUs it gets."""
    profile = ("the job's `local:` profile (sized for a CPU laptop; --real-shape runs the job as written)"
               if job.local_profile else "the job as written (--real-shape; its `local:` profile not applied)")
    gpus = f"{job.local_gpus_per_node} GPU per node of this machine's" if job.local_gpus_per_node else "no GPU"
    return f"{profile}; {gpus}"


def _queue_text(queue: Any) -> str:
    return (f"{queue.name}, priority {queue.priority} (policy {queue.settings.policy}; waits until the cluster can "
            f"take the whole run)")


def files_data(upload: Upload) -> dict[str, Any]:
    """What `render --files` shows: every uploaded file (path, size), and what was left out grouped by top-level
    path and the rule that excluded it (Ray's default, a .gitignore/.rayignore, the job's excludes, rtjob's)."""
    groups: dict[tuple[str, str], list[str]] = {}
    for path, rule in upload.excluded:
        head, sep, _ = path.partition("/")
        groups.setdefault((head + sep, rule), []).append(path)
    return {"uploaded": [{"path": path, "size": size} for path, size in upload.listed],
            "excluded": [{"path": top, "rule": rule, "paths": paths} for (top, rule), paths in groups.items()]}


def _files_lines(upload: Upload) -> list[str]:
    from .describe import size

    data = files_data(upload)
    width = min(60, max((len(row["path"]) for rows in data.values() for row in rows), default=0))
    lines = [f"files:     {upload.files} uploaded ({size(upload.bytes)})"]
    lines += [f"  {row['path']:<{width}}  {size(row['size'])}" for row in data["uploaded"]]
    lines.append(f"excluded:  {len(upload.excluded)} path(s), by top-level path and rule" if upload.excluded
                 else "excluded:  nothing")
    for group in data["excluded"]:
        inside = [p for p in group["paths"] if p != group["path"]]
        shown = f": {', '.join(inside[:3])}{f' (+{len(inside) - 3} more)' if len(inside) > 3 else ''}" if inside else ""
        lines.append(f"  {group['path']:<{width}}  {group['rule']}{shown}")
    return lines


def _explained(planned: Plan, settings: Settings) -> dict[str, dict[str, Any]]:
    """Each effective setting's value (masked) and source; `notify` as the job got it (the job file's, else the
    project config's or a context's: the most specific wins whole); `tracking` as the run side gets it."""
    out = {k: {"value": _shown_setting(k, s.value), "source": s.source}
           for k, s in settings.values.items() if k != "notify"}
    notify = planned.job.notify
    if notify is not None:
        out["notify"] = {"value": notify.to_json(), "source": notify.source}
    from ..jobspec.tracking import tracking_shown

    tracking = tracking_shown(planned.job.env_vars)  # the job's `tracking:`, else MLflow's own variables
    if tracking is not None:
        out["tracking"] = tracking
    return out


def render_data(planned: Plan, settings: Settings, explain: bool, files: bool = False) -> dict[str, Any]:
    """What render -o json prints: the request as the backend renders it, the run's shape and cost."""
    job, cost = planned.job, planned.cost
    data = _rendered(planned)[0]
    data["cost"] = cost.to_json() if cost else None
    data["run"] = {
        "id": job.run_id, "job": job.spec.name, "job_file": job.job_file, "nodes": job.nodes,
        "workers": job.num_workers, "resources_per_worker": job.worker_resources(),
        "compute_config": job.compute_config_name, "storage_uri": job.storage_uri,
        "run_dir": run_dir_of(job.storage_uri, job.run_id) if job.storage_uri else None,  # what the script gets
        "upload": planned.upload.to_json() if planned.upload else None,
        "queue": job.queue.to_json() if job.queue else None,  # None: sent at once
    }
    if job.embedded:  # which configuration runs on this machine, and its GPUs
        data["run"].update({"profile": "local" if job.local_profile else "real shape (--real-shape)",
                            "gpus_per_node": job.local_gpus_per_node})
    if not job.shape_declared:  # null, never an invented worker count; and what the embedded cluster offers
        data["run"].update({"nodes": job.sized_nodes, "workers": None, "resources_per_worker": None,
                            "shape": "set by the entrypoint", "cpus_per_node": job.local_cpus_per_node})
        if job.local_cpus_per_node is not None:
            running = running_cluster(planned)
            data["run"]["cluster"] = ({"running": True, "nodes": running["nodes"], "cpus": running["cpus"]}
                                      if running else {"running": False})
    if explain:
        data["explain"] = _explained(planned, settings)
    data["notes"] = planned.notes
    if files:
        data["files"] = files_data(planned.upload) if planned.upload else None
    return data


def print_render(planned: Plan, settings: Settings, output: str, explain: bool, files: bool = False) -> None:
    """What render and --dry-run print: the request exactly as it will be sent (secrets masked); with ``files``
    the upload's files and what it leaves out (from the plan's one walk)."""
    from ..backends.base import NotSupported

    backend, job, request = planned.backend, planned.job, planned.request
    if output == "yaml":
        try:  # a file for the backend's own CLI (anyscale job submit -f), where it has one
            echo(backend.render_file(request), nl=False)
            return
        except NotSupported:
            pass  # else the same data as -o json, as YAML
    if output != "text":
        print_data(render_data(planned, settings, explain, files), output)
        return
    rendered, equivalent = _rendered(planned)
    cost = planned.cost
    res = ", ".join(f"{k}={v:g}" for k, v in job.worker_resources().items())
    if job.shape_declared:
        shape = f"{job.nodes} node(s) × {job.workers_per_node} worker(s) = {job.num_workers} worker(s), each {{{res}}}"
    else:
        shape = "set by the entrypoint (the job declares no resources_per_worker or compute config)"
        if job.local_cpus_per_node is not None:
            shape += f"; {_cluster_text(planned, running_cluster(planned))}"
    lines = [
        f"job:       {job.spec.name}  ({job.job_file})",
        f"backend:   {backend.name}  {backend.display_address}",
        f"shape:     {shape}",
        f"compute:   {job.compute_config_name or '-'}",
        *([f"embedded:  {_embedded_text(job)}"] if job.embedded else []),
        *([f"cost:      {cost.text()}"] if cost else []),
        *([f"queue:     {_queue_text(job.queue)}"] if job.queue else []),
        f"run id:    {job.run_id}",
        f"storage:   {job.storage_uri or '-'}",
        *([f"run dir:   {run_dir_text(job.storage_uri, job.run_id)}"] if job.storage_uri else []),
        f"upload:    {planned.upload.describe() if planned.upload else '-'}",
    ]
    if files and planned.upload:
        lines += _files_lines(planned.upload)
    lines += [f"note:      {note}" for note in planned.notes]
    if explain:
        lines.append("settings:")
        for key, shown in _explained(planned, settings).items():
            value = shown["value"]
            if key == "notify":
                value = "on " + ",".join(value["on"]) + ": " + ", ".join(f"{t['type']} ({t['env']})"
                                                                         for t in value["targets"])
            elif key == "tracking":
                mlflow, wandb = value.get("mlflow"), value.get("wandb")
                value = ", ".join([*([f"mlflow {mlflow['tracking_uri']} (experiment {mlflow['experiment']})"]
                                     if mlflow else []), *([f"wandb project {wandb['project']}"] if wandb else [])])
            lines.append(f"  {key:<15} {value!s:<40} from {shown['source']}")
    lines.append("request:")
    lines.append(json.dumps(rendered, indent=2))
    lines.append("equivalent:")
    lines.append("  " + equivalent)
    echo("\n".join(lines))
