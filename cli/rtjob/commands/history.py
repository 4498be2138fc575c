"""Runs remembered beyond their cluster: `rtjob runs` (the local ledger, or a team's bucket) and `rtjob show ID`."""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any

import click

from ..core.errors import EXIT_SUCCEEDED, BadInput
from ..core.model import Attempts, RunInfo, RunStatus
from .events import PRINTED
from .options import (
    EXIT_CODES_HELP,
    BackendNamesHelp,
    backend_options,
    complete_job,
    output_option,
    run_id_argument,
)
from .printing import echo, print_data, runs_table, say
from .settings import settings_from

if TYPE_CHECKING:
    from ..core.model import RunInfo
    from ..core.record import RunRecord


@click.command(epilog=EXIT_CODES_HELP)
@output_option
@click.option("--job", "job_filter", metavar="NAME", shell_complete=complete_job, help="Only runs of this job.")
@click.option("--status", "status_filter", type=click.Choice([s.value for s in RunStatus], case_sensitive=False),
              help="Only runs in this state.")
@click.option("--backend", "backend_filter", metavar="NAME", help="Only runs on this backend ({backends}).", cls=BackendNamesHelp)
@click.option("--since", metavar="DURATION", help="Only runs started within this long (90s, 15m, 2h, 7d).")
@click.option("--limit", type=click.IntRange(1), default=50, show_default=True, help="At most this many runs.")
@click.option("--storage", "storage_uri", metavar="URI",
              help="List the runs recorded in this storage (s3://bucket/prefix or a folder: a team's runs, by their "
                   "rtjob-run.json) instead of this machine's ledger; they are remembered here too.")
@click.option("--endpoint-url", help="With --storage: the S3-compatible endpoint (default: AWS_ENDPOINT_URL_S3 / "
                                     "AWS_ENDPOINT_URL).")
@click.option("--user", "user_filter", metavar="NAME", help="With --storage: only runs this user submitted.")
@click.option("--reindex", is_flag=True, help="With --storage: rebuild the bucket's run index from the run records "
                                              "first (runs an older rtjob recorded appear after it).")
@click.option("--prune", is_flag=True, help="Forget ledger entries of ended runs older than --older-than (storage "
                                            "is never touched).")
@click.option("--older-than", metavar="DURATION", default="90d", show_default=True, help="With --prune.")
def runs(output: str, job_filter: str | None, status_filter: str | None, backend_filter: str | None,
         since: str | None, limit: int, storage_uri: str | None, endpoint_url: str | None, user_filter: str | None,
         reindex: bool, prune: bool, older_than: str) -> int:
    """List runs rtjob remembers, newest first: every run this machine submitted or followed, after its cluster
    is gone (`rtjob list`: what a cluster knows now).

    \b
    Examples:
      rtjob runs --status FAILED --since 7d -o json
      rtjob runs --storage s3://team-bucket/runs --user alice   a team's runs, from the bucket's index
      rtjob runs --prune --older-than 30d
    """
    from ..runs.history import listing
    from ..storage.run_filter import RunFilter

    wanted = RunFilter.from_flags(status=status_filter, job=job_filter, since=since, limit=limit,  # bad values fail
                                  user=user_filter, backend=backend_filter)                    # before any read
    if prune:
        from ..jobspec.overrides import parse_duration

        seconds = parse_duration(older_than, "--older-than")
        forgotten = listing.prune(seconds)
        say(f"forgot {forgotten} ended run(s) older than {older_than} (their storage is untouched)")
        return EXIT_SUCCEEDED
    if storage_uri is None and (user_filter is not None or reindex):
        raise BadInput(f"{'--user' if user_filter is not None else '--reindex'}: only with --storage URI (the "
                       "run ledger is this machine's own)")
    if storage_uri is not None:
        from ..storage.index import record_of, record_summary

        rows, problems = listing.storage_rows(storage_uri, endpoint_url, wanted, reindex=reindex)
        for line in problems:
            say(f"warning: {line}")
        if output != "text":  # an index's rows print as their records would, without making 100,000 records
            from ..core.verdict import of_entry, of_record

            print_data([{**record_summary(r), "verdict": of_entry(r).to_json()} if isinstance(r, dict) else
                        {**r.summary(), "verdict": of_record(r).to_json()} for r in rows], output)
        else:
            runs_table([_listed(record_of(r), r.get("attempts")) if isinstance(r, dict) else _listed(r) for r in rows])
        return EXIT_SUCCEEDED
    settings = settings_from(None, None, (), False)
    if output != "text":
        print_data(listing.recorded_summaries(wanted, settings, PRINTED), output)
    else:
        runs_table([_listed(r) for r in listing.recorded_runs(wanted, settings, PRINTED)])
    return EXIT_SUCCEEDED


def _listed(record: RunRecord, attempts: object = None) -> RunInfo:
    """A listed run as its verdict says it (core/verdict.py; an index row: the attempts its entry counted)."""
    import dataclasses

    from ..core.verdict import of_record
    from ..runs.queued import place  # a queued run: its place (its queue read); None for any other

    info = of_record(record, place=place(record)).onto(record.to_run_info())
    return dataclasses.replace(info, attempts=max(info.attempts, attempts)) if isinstance(attempts, int) else info


@click.command(epilog=EXIT_CODES_HELP)
@run_id_argument
@backend_options
@output_option
@click.option("--storage", "storage_uri", metavar="URI",
              help="Look for the run's record in this storage (default: the ledger, then the project's storage).")
@click.option("--request", "with_request", is_flag=True,
              help="Also print the exact request that was sent (secrets masked; -o json always has it).")
def show(run_id: str, backend: str | None, address: str | None, headers: tuple[str, ...], no_verify_tls: bool,
         output: str, storage_uri: str | None, with_request: bool) -> int:
    """Show what rtjob recorded about a run: a summary of what ran (its command, job, git commit), where, how it
    ended, its attempts, cost, metrics, archived logs and the checkpoints in its storage; --request (or -o json)
    adds the exact request.

    \b
    Examples:
      rtjob show RUN_ID
      rtjob show RUN_ID --request
      rtjob show RUN_ID -o json | jq .git
    """
    from ..runs.history.listing import checkpoints_of, record_as_now
    from ..runs.memory import find, remember
    from ..runs.notices import notices, undelivered_lines
    from ..runs.places import storage_root
    from ..runs.view import recorded_steps

    settings = settings_from(backend, address, headers, no_verify_tls)
    record = find(run_id, storage_root(settings, storage_uri))
    if record is None:
        raise BadInput(f"run {run_id} is not in the run ledger or the storage searched (rtjob runs lists what is; "
                       "rtjob runs --storage s3://bucket/prefix finds a team's runs)")
    remember(record)  # found in storage: this ledger knows it from now on
    record = record_as_now(settings, record, PRINTED)
    checkpoints = checkpoints_of(record, PRINTED)
    steps = recorded_steps(record, storage_root(settings, storage_uri)) if record.steps else None
    notified = notices(record)  # what became of its notifications (its folder's markers)
    if output != "text":
        from ..core.verdict import of_record
        from ..runs.view import recorded_pipeline_verdict

        judged = recorded_pipeline_verdict(record, steps) if steps else of_record(record)
        print_data({**record.to_json(), "verdict": judged.to_json(), "checkpoints": checkpoints,
                    **({"steps": steps} if steps else {}),
                    **({"notifications": notified} if notified else {})}, output)
        return EXIT_SUCCEEDED
    echo(_show_text(record, checkpoints, with_request, steps) + "".join(f"\nnotify:      {line}"
                                                                      for line in undelivered_lines(notified, record.id)))
    return EXIT_SUCCEEDED


def _show_text(record: RunRecord, checkpoints: list[dict[str, Any]] | None, with_request: bool = False,
               steps: list[dict[str, Any]] | None = None) -> str:
    """A run's summary: what a person asks first (status, times, attempts, command, storage), then the facts worth a
    line; the request only with ``with_request`` (`show --request`); a pipeline's steps when it has them."""
    from ..core.lifecycle import earlier
    from ..core.verdict import of_record
    from ..runs.tracking_view import tracking_lines
    from .describe import command_text, run_dir_text, size
    from .printing import carrier_text, run_text, stamp, timeline_text

    if steps:  # a pipeline: its start, end and duration are its steps' where its record has none
        from ..runs.view import recorded_pipeline_verdict

        info = recorded_pipeline_verdict(record, steps).onto(record.to_run_info())
    else:
        info = of_record(record).onto(record.to_run_info())
    git = record.git or {}
    lines = [run_text(info)]  # ends with its storage: what the script got as its folder beside it
    if record.storage_uri and not record.steps:  # a pipeline runs no script of its own: no run dir
        lines.append(f"run dir:     {run_dir_text(record.storage_uri, record.id)}")
    attempts = Attempts.recorded(record.attempts)
    if attempts.worth_showing:
        lines.append(f"attempts:    {attempts.describe()}")
    command = command_text(record.request)
    if command:
        lines.append(f"command:     {command}")
    lines.append(f"submitted:   {stamp(record.submitted_at) if record.submitted_at else '- (seen, not submitted from here)'}"
                 + (f" by {record.user}@{record.host}" if record.user else "")
                 + (f"; git {git.get('commit') or '-'}{' (uncommitted changes)' if git.get('dirty') else ''}"
                    f"{' on ' + git['branch'] if git.get('branch') else ''}" if git else ""))
    lines.append(f"job file:    {record.job_file or '-'}"
                 + (f"  (project {record.project_root})" if record.project_root else ""))
    shape = record.shape or {}
    if shape.get("nodes") is not None:
        lines.append(f"shape:       {shape['nodes']} node(s), {shape['workers']} worker(s)"
                     + (f", compute config {shape['compute_config']}" if shape.get("compute_config") else ""))
    if record.cost:
        lines.append(f"cost:        {record.cost.get('text')}")
    if record.carried_by or not record.run_status.terminal:
        lines.append(f"carried by:  {carrier_text(record.carried_by, record.last_seen, record.run_status.terminal)}"
                     + (f"; completed by {record.completed_by}" if record.completed_by else ""))
    if record.timeline and not record.steps:  # a pipeline's start-up is its steps' (their own `show`)
        lines.append(f"timeline:    {timeline_text(record.timeline, [a.to_json() for a in earlier(record)])}")
    lines += tracking_lines(record.tracking)  # the MLflow run that mirrors it
    shown_metrics = {k: v for k, v in (record.metrics or {}).items()  # the values there are: no '-', no run/source
                     if v is not None and k not in ("run", "source") and not isinstance(v, (dict, list))}
    if shown_metrics:
        lines.append("metrics:     " + ", ".join(f"{k}={_value(v)}" for k, v in shown_metrics.items()))
    if steps:  # a pipeline run: its steps' runs, each with its own record and logs
        lines.append("steps:       " + " -> ".join(f"{s.get('name')} {s.get('status') or 'not submitted'}"
                                                   for s in steps))
        lines += [f"  {s.get('name')}: {s.get('run_id')}" + (f" (from {s['reused_from']})" if s.get("reused_from")
                                                             else "") for s in steps]
        archived = sum(bool(s.get("logs")) for s in steps)
        lines.append(f"logs:        each step's: {archived} of {len(steps)} archived (rtjob logs {record.id})")
    else:
        unarchived = "- (not archived: rtjob has not seen it end)"
        lines.append(f"logs:        {', '.join(record.logs) if record.logs else unarchived}")
    if checkpoints is not None:
        lines.append(f"checkpoints: {len(checkpoints) or '-'}")
        lines += [f"  {c.get('name')}  {c.get('files', '?')} files, {size(c.get('bytes') or 0)}" for c in checkpoints]
    if record.train_storage:
        lines.append(f"train runs:  {', '.join(record.train_storage)}  (where its script stored its Ray Train runs)")
    if record.request is not None:
        if with_request:
            lines.append(f"spec hash:   {record.spec_hash or '-'}")
            lines.append("request:")
            lines.append(json.dumps(record.request, indent=2))
        else:
            lines.append(f"request:     rtjob show {record.id} --request (or -o json)")
    return "\n".join(lines)


def _value(value: Any) -> str:
    """A metric as people read it: '-' for none, a float to 4 significant digits (a whole one as an integer,
    a large one without an exponent), anything else as its text."""
    if value is None:
        return "-"
    if isinstance(value, float) and math.isfinite(value):
        if value.is_integer() and abs(value) < 1e15:
            return str(int(value))
        return f"{value:.0f}" if abs(value) >= 1e4 else f"{value:.4g}"
    return str(value)


COMMANDS = [runs, show]
