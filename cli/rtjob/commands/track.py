"""`rtjob track resend RUN_ID`: send a run's step rows to the MLflow run that mirrors it (runs/tracking_resend.py)."""

from __future__ import annotations

import click

from ..core.errors import EXIT_SUCCEEDED, BadInput
from .options import EXIT_CODES_HELP, run_id_argument
from .printing import say
from .settings import settings_from


@click.group(epilog=EXIT_CODES_HELP)
def track() -> None:
    """The run's mirror in an experiment tracker (a job's `tracking:`; docs/guide/tracking.md).

    \b
    Examples:
      rtjob track resend RUN_ID
    """


@track.command(epilog=EXIT_CODES_HELP)
@run_id_argument
def resend(run_id: str) -> int:
    """Send the run's step, system and epoch rows that its MLflow run lacks (from the run's storage; what MLflow
    has is kept as it is). For a run whose record says metrics were not sent.

    \b
    Examples:
      rtjob track resend RUN_ID
    """
    from ..runs.memory import find, with_run_side
    from ..runs.places import storage_root
    from ..runs.tracking_resend import resend as resend_rows

    record = find(run_id, storage_root(settings_from(None, None, (), False)))
    if record is None:
        raise BadInput(f"run {run_id} is not in the run ledger or the project's storage (rtjob runs lists what is)")
    done = resend_rows(with_run_side(record))
    say(f"{run_id}: {done.sent} metric value(s) sent, {done.had} MLflow already had: {done.url}")
    return EXIT_SUCCEEDED


COMMANDS = [track]
