"""Run control: `rtjob status`, `list`, `logs`, `wait`, `stop` (any backend, through its contract)."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

import click

from ..core.errors import EXIT_SUCCEEDED, BadInput, RtjobError, Unreachable
from ..core.model import Attempts, RunStatus
from .events import PRINTED, log_stream, print_followed, print_log
from .options import (
    EXIT_CODES_HELP,
    backend_options,
    complete_job,
    output_option,
    run_id_argument,
)
from .pipeline import carrier_line
from .printing import (
    carrier_text,
    duration,
    echo,
    outcome,
    print_data,
    run_document,
    run_json,
    run_text,
    runs_table,
    say,
    timeline_text,
)
from .settings import backend_for_run, backend_from, parse_timeout

if TYPE_CHECKING:
    from ..core.record import RunRecord


@click.command(epilog=EXIT_CODES_HELP)
@run_id_argument
@backend_options
@output_option
@click.option("--repair", is_flag=True, help="Replace the run's supervisor if it died while the run still had "
                                             "something to carry (status alone only says so).")
def status(run_id: str, backend: str | None, address: str | None, headers: tuple[str, ...], no_verify_tls: bool,
           output: str, repair: bool) -> int:
    """Show one run's status (exit 0 when it could be read); a pipeline run's: each step's.

    \b
    Examples:
      rtjob status rtjob-ddp-resnet-20261123-0210-ab12
      rtjob status RUN_ID --address http://head:8265 -o json
      rtjob status RUN_ID --repair     a dead supervisor replaced
    """
    from ..runs.cost import finished_run_cost
    from ..runs.notices import undelivered_lines
    from ..runs.tracking_view import tracking_lines
    from ..runs.view import dead_supervisor, look

    be, storage_root = backend_for_run(run_id, backend, address, headers, no_verify_tls)
    attempts_of = functools.cache(be.attempts)  # --repair archives a run seen ended with them: asked once
    view = look(be, run_id, storage_root, PRINTED, attempts_of, carry=repair)  # a read writes nothing shared
    info, record = view.info, view.record
    if view.pipeline:  # a pipeline run: its steps' runs
        from .pipeline import pipeline_status

        assert record is not None
        return pipeline_status(be, record, storage_root, output, repair)
    if record is not None:  # the cluster no longer knows the run: its record does
        say(f"{run_id}: from the run record (backend {be.name!r} does not know this run now)")
        cost = record.cost
        data_attempts: dict[str, object] = {"attempts": record.attempts} if record.attempts else {}
        attempts: Attempts | None = view.attempts
        carrier = None
    else:
        from ..runs.lifecycle.supervisor_state import supervisor_state

        cost = finished_run_cost(be, info)  # duration × the rate recorded with the run, once it has ended
        attempts = view.attempts  # rtjob's own retries (Ray); None where the platform retries
        data_attempts = attempts.to_json() if attempts else {}
        hint = None if repair else dead_supervisor(be, view)
        carrier = supervisor_state(be, info, PRINTED.note if repair else None)  # --repair: a dead supervisor replaced
        if hint:
            say(f"warning: {hint}")
    attempts_line = attempts.describe() if attempts and attempts.worth_showing else ""
    side = _run_side(record, run_id)
    notified = side.pop("notifications", None)
    if output != "text":
        print_data({**run_document(info), "cost": cost, **data_attempts, **side, **(
            carrier.to_json() if carrier else {}), **({"notifications": notified} if notified else {})}, output)
    else:
        line = f"\nattempts:    {attempts_line}" if attempts_line else ""
        if carrier is not None:  # its supervisor on the cluster: alive, or how it ended and when it was last seen
            line += f"\ncarried by:  {carrier_line(carrier, info.status)}"
        elif side.get("carried_by") or side.get("timeline"):
            line += f"\ncarried by:  {carrier_text(side['carried_by'], side['last_seen'], info.status.terminal)}"
        if side.get("timeline"):
            line += f"\ntimeline:    {timeline_text(side['timeline'], side.get('earlier_attempts'))}"
        for note in side.get("sync_notes") or []:  # an object no attempt of the run wrote: never overwritten
            line += f"\nsync:        {note}"
        for note in tracking_lines(side.get("tracking")):  # the MLflow run that mirrors it
            line += f"\n{note}"
        for note in undelivered_lines(notified, run_id):  # a message a target did not get after its tries
            line += f"\nnotify:      {note}"
        echo(run_text(info) + (f"\ncost:        {cost['text']}" if cost and cost.get("text") else "") + line)
    return EXIT_SUCCEEDED


def _run_side(record: RunRecord | None, run_id: str) -> dict[str, Any]:
    """What the run side recorded (carrier, last seen, timelines): its record in storage over this ledger's."""
    from ..core.lifecycle import earlier
    from ..runs.memory import find, with_run_side
    from ..runs.notices import notices

    try:
        record = record or find(run_id)
    except RtjobError:
        record = None
    if record is None:
        return {}
    record = with_run_side(record)
    return {"carried_by": record.carried_by, "completed_by": record.completed_by, "last_seen": record.last_seen,
            "timeline": record.timeline, "earlier_attempts": [a.to_json() for a in earlier(record)],
            "sync_notes": record.sync_notes, "notifications": notices(record), "tracking": record.tracking}


@click.command(name="list", epilog=EXIT_CODES_HELP)
@backend_options
@output_option
@click.option("--status", "status_filter", type=click.Choice([s.value for s in RunStatus], case_sensitive=False),
              help="Only runs in this state.")
@click.option("--job", "job_filter", metavar="NAME", shell_complete=complete_job, help="Only runs of this job.")
@click.option("--since", metavar="DURATION", help="Only runs started within this long (90s, 15m, 2h, 7d).")
@click.option("--limit", type=click.IntRange(1), default=50, show_default=True, help="At most this many runs.")
def list_runs(backend: str | None, address: str | None, headers: tuple[str, ...], no_verify_tls: bool, output: str,
              status_filter: str | None, job_filter: str | None, since: str | None, limit: int) -> int:
    """List runs on the cluster, newest first.

    \b
    Examples:
      rtjob list --status FAILED --since 1d
      rtjob list --job ddp-resnet --limit 5 -o json
      rtjob list --backend anyscale
    """
    from ..runs.listed import fold_retries, with_queued, with_recorded_times
    from ..runs.places import on_this_machine
    from ..storage.run_filter import RunFilter

    wanted = RunFilter.from_flags(status=status_filter, job=job_filter, since=since, limit=limit)  # before a request
    be = backend_from(backend, address, headers, no_verify_tls)
    try:
        listed = be.list()
    except Unreachable as exc:
        if not on_this_machine(be.name):
            raise
        # The embedded cluster is down: what it ran is still known, by the ledger.
        raise Unreachable(f"{exc.message}; rtjob runs lists the runs rtjob knows (they outlive the cluster)") \
            from None
    listed = with_queued(be, fold_retries(listed))  # a retried run one row; a queued run first, at its place
    runs = with_recorded_times(wanted.apply(listed))  # an ended run's duration as every other command shows it
    if output != "text":
        print_data([{**run_json(r), "attempts": r.attempts} for r in runs], output)
    else:
        runs_table(runs)
    return EXIT_SUCCEEDED


@click.command(epilog=EXIT_CODES_HELP)
@run_id_argument
@backend_options
@click.option("--follow", "-f", is_flag=True, help="Keep streaming until the run ends; exit with its outcome.")
@click.option("--timeout", metavar="DURATION", help="With --follow: give up after this long (exit 4).")
@click.option("--tail", "tail_lines", type=click.IntRange(1), metavar="N", help="Only the last N lines.")
@click.option("--attempt", "attempt", type=click.IntRange(1), metavar="N",
              help="The log of attempt N of a retried run (1: the first), from the run's storage or its cluster.")
@click.option("--raw", is_flag=True,
              help="Every line of the driver log, Ray's and rtjob's own lines too (the default shows what the "
                   "script printed).")
def logs(run_id: str, backend: str | None, address: str | None, headers: tuple[str, ...], no_verify_tls: bool,
         follow: bool, timeout: str | None, tail_lines: int | None, attempt: int | None, raw: bool) -> int:
    """Print a run's log (all of it; --tail N the end; --follow keeps streaming; --attempt N one attempt's): what
    its script printed; --raw adds Ray's and rtjob's own lines (the wrapper command, rtjob-event lines).

    \b
    Examples:
      rtjob logs RUN_ID --tail 50
      rtjob logs RUN_ID --follow --timeout 30m
      rtjob logs RUN_ID --attempt 1 --raw
    """
    from ..runs.events import Quiet
    from ..runs.lifecycle.archive import archived_log
    from ..runs.logview import lines_to_read
    from ..runs.view import look

    timeout_s = parse_timeout(timeout)
    if follow and tail_lines:
        raise click.UsageError("--tail and --follow: choose one (--follow prints the log from its start)")
    be, storage_root = backend_for_run(run_id, backend, address, headers, no_verify_tls)
    view = look(be, run_id, storage_root, Quiet())
    info, record = view.info, view.record
    read_lines = lines_to_read(tail_lines, raw)  # some lines are not shown
    if view.pipeline:  # a pipeline run: each step's log
        assert record is not None
        if attempt is not None:
            raise click.UsageError(f"--attempt: {run_id} is a pipeline run; ask for one step's run id")
        if follow:
            raise click.UsageError(f"--follow: {run_id} is a pipeline run; follow one step's run id, or rtjob "
                                   f"submit {record.job_file or record.job} --submission-id {run_id} to follow it")
        from .pipeline import pipeline_logs

        return pipeline_logs(be, record, storage_root, tail_lines, raw)
    if attempt is not None:
        if follow:
            raise click.UsageError("--attempt and --follow: choose one (--follow follows the run's latest attempt)")
        from ..runs.lifecycle.archive import attempt_log

        print_log(attempt_log(be, run_id, attempt, info, record, storage_root, read_lines), info.secrets,
                  tail_lines, raw)
        return EXIT_SUCCEEDED
    if record is not None:  # the cluster no longer knows it: the log archived when the run ended
        if follow and not info.status.terminal:
            raise click.UsageError(f"--follow: the cluster no longer knows run {run_id} ({info.message})")
        print_log(archived_log(record, read_lines), info.secrets, tail_lines, raw)  # streamed, never read whole
        return EXIT_SUCCEEDED
    if follow:
        from ..runs.lifecycle.follow import follow_to_end

        followed = follow_to_end(be, run_id, out=log_stream("text", raw), timeout_s=timeout_s,
                                 stop_on_interrupt=False, events=PRINTED, read_only=True)  # a read: acts on nothing
        return print_followed(followed, "text", info)
    latest = view.latest  # a retried run's log is its latest attempt's (--attempt N: another's)
    print_log([be.last_lines(latest, read_lines) if read_lines else be.logs(latest)], info.secrets, tail_lines, raw)
    return EXIT_SUCCEEDED


@click.command(epilog=EXIT_CODES_HELP)
@run_id_argument
@backend_options
@output_option
@click.option("--timeout", metavar="DURATION", help="Give up after this long (90s, 15m, 2h): exit 4, job left running; a queued run's wait in its queue counts.")
def wait(run_id: str, backend: str | None, address: str | None, headers: tuple[str, ...], no_verify_tls: bool,
         output: str, timeout: str | None) -> int:
    """Wait for a run to end; exit 0 succeeded, 1 failed/stopped, 3 its outputs not stored, 4 timed out.

    \b
    Examples:
      rtjob wait RUN_ID --timeout 2h
      rtjob wait RUN_ID -o json > outcome.json
    """
    from ..runs.view import look

    timeout_s = parse_timeout(timeout)
    be, storage_root = backend_for_run(run_id, backend, address, headers, no_verify_tls)
    view = look(be, run_id, storage_root, PRINTED, carry=True)  # wait carries the run: an end seen is archived
    info, record = view.info, view.record
    if view.pipeline:  # a pipeline run: its submitted steps, then its outcome
        from .pipeline import pipeline_wait

        assert record is not None
        return pipeline_wait(be, record, storage_root, output, timeout_s, info)
    if record is not None and record.status != "QUEUED":  # the cluster no longer knows it: its recorded end is the outcome
        if not info.status.terminal:  # its end was never seen: the run as recorded, and why rtjob cannot wait
            from ..runs.lifecycle.follow import Abandoned

            return print_followed(Abandoned(run_id, BadInput(f"run {run_id}: {info.message}"), info), output, info)
        say(f"{info.id} {info.status.value} after {duration(info)} (from the run record)")
        if output != "text":
            print_data(run_document(info), output)  # as a followed end's document
        return outcome(info)
    from ..runs.lifecycle.follow import follow_to_end

    # carry: a supervisor that died is replaced, so the run is carried after this wait too
    followed = follow_to_end(be, run_id, out=None, timeout_s=timeout_s, stop_on_interrupt=False, events=PRINTED,
                             carry=info)
    return print_followed(followed, output, info)


@click.command(epilog=EXIT_CODES_HELP)
@run_id_argument
@backend_options
@output_option
def stop(run_id: str, backend: str | None, address: str | None, headers: tuple[str, ...], no_verify_tls: bool,
         output: str) -> int:
    """Stop a run and wait (up to 30 s) until it has stopped.

    \b
    Examples:
      rtjob stop RUN_ID
      rtjob stop RUN_ID --backend anyscale -o json
    """
    from ..runs.events import stop_begins
    from ..runs.lifecycle.stopping import stop_run

    be, storage_root = backend_for_run(run_id, backend, address, headers, no_verify_tls)
    say(stop_begins(run_id))
    from ..runs.events import Quiet
    from ..runs.view import look, one_story

    view = look(be, run_id, storage_root, Quiet(), carry=True)
    if view.pipeline:  # a pipeline run: its supervisor and the step running now
        from .pipeline import pipeline_stop

        assert view.record is not None
        return pipeline_stop(be, view.record, storage_root, output)
    info = stop_run(be, view.latest)  # a retried run: its latest attempt is the one that runs
    if info.status.terminal:  # the end this client saw: archived (a companion's STOPPED, where it wrote one, stands)
        from ..runs.lifecycle.archive import observe

        observe(be, info, Quiet(), run_id=run_id)
    if view.latest != run_id:
        info = one_story(view.info, info, view.info.attempts)
    if output != "text":
        print_data(run_document(info), output)
    else:
        say(f"{info.id}: {info.status.value}")
    return EXIT_SUCCEEDED


@click.command(epilog=EXIT_CODES_HELP)
@run_id_argument
@backend_options
def delete(run_id: str, backend: str | None, address: str | None, headers: tuple[str, ...],
           no_verify_tls: bool) -> int:
    """Delete an ended run from the cluster: its record, log and metadata (its storage is kept).

    A run that has not ended is refused (exit 2): stop it first.

    \b
    Examples:
      rtjob delete RUN_ID
      rtjob stop RUN_ID && rtjob delete RUN_ID
    """
    backend_from(backend, address, headers, no_verify_tls).delete(run_id)
    say(f"{run_id}: deleted")
    return EXIT_SUCCEEDED


COMMANDS = [status, list_runs, logs, wait, stop, delete]
