"""`rtjob submit` and `rtjob render`: one plan, printed exactly (render, --dry-run) or sent and followed."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from ..core.errors import EXIT_SUCCEEDED
from .events import PRINTED, log_stream, print_followed
from .options import (
    EXIT_CODES_HELP,
    backend_options,
    job_options,
    run_id_argument,
    run_options,
)
from .printing import echo, print_data, run_json
from .render import print_render
from .settings import parse_timeout, settings_from

if TYPE_CHECKING:
    from ..jobspec.project import Settings
    from ..runs.pipelines.pipeline import PipelinePlan
    from ..runs.runner import Plan


def _plan(job: str, settings: Settings, nodes: int | None, sets: tuple[str, ...], envs: tuple[str, ...],
          name: str | None, storage: str | None, submission_id: str | None, forward_aws_credentials: bool,
          resume: tuple[str, str] | None = None, real_shape: bool = False) -> Plan | PipelinePlan:
    """One run's plan, or a pipeline's (a job file with `steps:`): every step planned before anything runs."""
    from ..core.errors import BadInput
    from ..jobspec.resolve import JobSource, Overrides
    from ..runs.pipelines import pipeline as pipelines
    from ..runs.runner import plan

    overrides = Overrides(nodes=nodes, sets=sets, env=envs, name=name, submission_id=submission_id,
                          forward_aws_credentials=forward_aws_credentials, real_shape=real_shape)
    loaded = pipelines.load(job, settings.root)
    if isinstance(loaded, JobSource):
        if resume is not None:
            raise BadInput(f"--from {' '.join(resume)}: {job} is a job, not a pipeline (a file with steps:)")
        return plan(job, settings, overrides, storage_flag=storage, source=loaded)
    return pipelines.plan(loaded, settings, overrides, storage, resume)


FROM_HELP = ("Pipelines: a new pipeline run that reuses the runs of PIPELINE_ID's steps before STEP (they must have "
             "succeeded) and runs STEP and the steps after it.")


@click.command(epilog=EXIT_CODES_HELP)
@job_options
@backend_options
@click.option("--output", "-o", type=click.Choice(["text", "json", "yaml"]), default="text", show_default=True,
              help="yaml: a job file `anyscale job submit -f` accepts (--backend anyscale), else the json data "
                   "as YAML.")
@click.option("--explain", is_flag=True, help="Show where each effective setting came from.")
@click.option("--files", "files", is_flag=True,
              help="List the files the submit uploads (path, size) and the excluded ones with the rule that excluded "
                   "them (Ray's default, .gitignore, the job's excludes, rtjob's defaults).")
@click.option("--from", "resume", nargs=2, metavar="STEP PIPELINE_ID", help=FROM_HELP)
def render(job: str, nodes: int | None, sets: tuple[str, ...], envs: tuple[str, ...], name: str | None,
           storage: str | None, compute_config: str | None, submission_id: str | None, forward_aws_credentials: bool,
           real_shape: bool, backend: str | None, address: str | None, headers: tuple[str, ...], no_verify_tls: bool, output: str,
           explain: bool, files: bool, resume: tuple[str, str] | None) -> int:
    """Print the exact request a submit would send (same as submit --dry-run). Sends nothing.

    \b
    Examples:
      rtjob render ddp-resnet --nodes 2 --explain --files   # --files: what is uploaded, what is left out and why
      rtjob render ddp-resnet --backend anyscale -o yaml > job.yaml   # anyscale job submit -f job.yaml
      rtjob render jobs/my-job.yaml --set args.epochs=1 -o json
    """
    settings = settings_from(backend, address, headers, no_verify_tls, job, storage=storage,
                             compute_config=compute_config)
    planned = _plan(job, settings, nodes, sets, envs, name, storage, submission_id, forward_aws_credentials,
                    resume or None, real_shape)
    from ..runs.pipelines.pipeline import PipelinePlan

    if isinstance(planned, PipelinePlan):
        from .pipeline import render_pipeline

        render_pipeline(planned, settings, output, explain)
    else:
        print_render(planned, settings, output, explain, files)
    return EXIT_SUCCEEDED


@click.command(epilog=EXIT_CODES_HELP)
@job_options
@backend_options
@run_options(dry_run_help="Print the exact request and send nothing (= rtjob render).")
@click.option("--from", "resume", nargs=2, metavar="STEP PIPELINE_ID", help=FROM_HELP)
def submit(job: str, nodes: int | None, sets: tuple[str, ...], envs: tuple[str, ...], name: str | None,
           storage: str | None, compute_config: str | None, submission_id: str | None, forward_aws_credentials: bool,
           real_shape: bool, backend: str | None, address: str | None, headers: tuple[str, ...], no_verify_tls: bool, output: str, dry_run: bool,
           no_wait: bool, timeout: str | None, stop_on_interrupt: bool, explain: bool, no_storage_check: bool,
           resume: tuple[str, str] | None) -> int:
    """Submit JOB (a name in jobs/ or a YAML path), follow its logs, exit with its outcome.

    \b
    Examples:
      rtjob submit ddp-resnet --nodes 2
      rtjob submit jobs/my-job.yaml --address http://head:8265 --timeout 2h
      rtjob submit ddp-resnet --no-wait -o json
    """
    timeout_s = parse_timeout(timeout)
    settings = settings_from(backend, address, headers, no_verify_tls, job, storage=storage,
                             compute_config=compute_config, storage_check=False if no_storage_check else None)
    # Planned once, before anything starts: every check that needs no cluster fails here first.
    planned = _plan(job, settings, nodes, sets, envs, name, storage, submission_id, forward_aws_credentials,
                    resume or None, real_shape)
    from ..runs.pipelines.pipeline import PipelinePlan

    if isinstance(planned, PipelinePlan):
        from .pipeline import send_pipeline

        return send_pipeline(planned, settings, output=output, dry_run=dry_run, explain=explain, no_wait=no_wait,
                             timeout_s=timeout_s, stop_on_interrupt=stop_on_interrupt)
    return send(planned, settings, output=output, dry_run=dry_run, explain=explain, no_wait=no_wait,
                timeout_s=timeout_s, stop_on_interrupt=stop_on_interrupt, attach=submission_id is not None)


def send(planned: Plan, settings: Settings, *, output: str, dry_run: bool, explain: bool, no_wait: bool,
         timeout_s: float | None, stop_on_interrupt: bool, attach: bool) -> int:
    """A planned run printed (--dry-run) or submitted, recorded and followed: submit's and rerun's second half."""
    from ..runs.lifecycle.follow import follow_to_end
    from ..runs.lifecycle.submission import submit_and_record

    if dry_run:
        print_render(planned, settings, output, explain)
        return EXIT_SUCCEEDED
    info = submit_and_record(planned, attach=attach, events=PRINTED).run
    if no_wait:
        if output != "text":
            print_data(run_json(info), output)
        else:
            echo(info.id)
        return EXIT_SUCCEEDED
    followed = follow_to_end(planned.backend, info.id, out=log_stream(output), timeout_s=timeout_s,
                             stop_on_interrupt=stop_on_interrupt, events=PRINTED, request=planned.request)
    return print_followed(followed, output, info)


@click.command(epilog=EXIT_CODES_HELP)
@run_id_argument
@click.option("--nodes", type=click.IntRange(1, 1000), help="Nodes of the job's worker group (else as recorded).")
@click.option("--set", "sets", multiple=True, metavar="KEY.PATH=VALUE",
              help="Override a field of the recorded job, e.g. --set args.epochs=5.")
@click.option("--env", "envs", multiple=True, metavar="NAME=VALUE", help="Add or override an environment variable.")
@click.option("--submission-id", help="Run id of the new run (default: a new one).")
@backend_options
@run_options(dry_run_help="Print the exact request and send nothing.")
def rerun(run_id: str, nodes: int | None, sets: tuple[str, ...], envs: tuple[str, ...], submission_id: str | None,
          backend: str | None, address: str | None, headers: tuple[str, ...], no_verify_tls: bool, output: str,
          dry_run: bool, no_wait: bool, timeout: str | None, stop_on_interrupt: bool, explain: bool,
          no_storage_check: bool) -> int:
    """Submit a recorded run again: the same request with a new run id.

    \b
    The job, its compute config, overrides, storage and backend come from the
    run's record (the ledger, else the project's storage), not from the job
    file as it is now. Secrets are never recorded: they are found again in this
    environment (an env var of the same name, or --env / --set). The working
    dir is packed and uploaded again: rerun warns when its git commit or
    uncommitted changes differ from the recorded run's.

    \b
    Examples:
      rtjob rerun RUN_ID
      rtjob rerun RUN_ID --set args.epochs=20 --dry-run
    """
    from ..core.errors import BadInput
    from ..runs.history.rerun import plan_rerun, recorded_settings
    from ..runs.memory import find, remember
    from ..runs.places import storage_root

    timeout_s = parse_timeout(timeout)
    record = find(run_id, storage_root(settings_from(backend, address, headers, no_verify_tls)))
    if record is None:
        raise BadInput(f"run {run_id} is not in the run ledger or the project's storage (rtjob runs lists what "
                       "is; rtjob runs --storage s3://bucket/prefix finds a team's runs)")
    remember(record)  # found in the project's storage: this ledger knows it from now on
    if record.steps:
        raise BadInput(f"{run_id} is a pipeline run: run it again with rtjob submit {record.job_file or record.job} "
                       f"(--from STEP {run_id} reuses the steps before STEP)")
    recorded = recorded_settings(record)
    job_path = (record.spec or {}).get("job_path")
    flags = {k: v for k, v in recorded.items() if k not in ("backend", "address")}
    settings = settings_from(backend or recorded.get("backend"), address or recorded.get("address"), headers,
                             no_verify_tls, job_path, **flags, storage_check=False if no_storage_check else None)
    planned, warnings = plan_rerun(record, settings, sets, envs, nodes, submission_id)
    for warning in warnings:
        PRINTED.warning(warning)
    return send(planned, settings, output=output, dry_run=dry_run, explain=explain, no_wait=no_wait,
                timeout_s=timeout_s, stop_on_interrupt=stop_on_interrupt, attach=submission_id is not None)
