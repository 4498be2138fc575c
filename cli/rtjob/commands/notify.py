"""`rtjob notify RUN_ID`: resend the run's notifications that a target did not get."""

from __future__ import annotations

import click

from ..core.errors import EXIT_FAILED, EXIT_SUCCEEDED, BadInput
from .events import PRINTED
from .options import EXIT_CODES_HELP, output_option, run_id_argument
from .printing import print_data, say
from .settings import settings_from


@click.command(epilog=EXIT_CODES_HELP)
@run_id_argument
@output_option
@click.option("--force", is_flag=True, help="Resend a message every target already got, too.")
def notify(run_id: str, output: str, force: bool) -> int:
    """Resend a run's notifications that a target did not get (from this machine: each target's URL from the
    variable its job names, in this environment); once each, also when two run at once. Exit 1 if a target still
    did not get one.

    \b
    Examples:
      rtjob notify RUN_ID
      SLACK_URL=... rtjob notify RUN_ID --force
    """
    from ..runs.memory import find, remember
    from ..runs.notices import resend
    from ..runs.places import storage_root

    record = find(run_id, storage_root(settings_from(None, None, (), False)))
    if record is None:
        raise BadInput(f"run {run_id} is not in the run ledger or the project's storage (rtjob runs lists what is)")
    remember(record)
    done = resend(record, force, PRINTED)
    for one in done:
        if one.elsewhere:
            say(f"{one.outcome}: another rtjob notify is resending it (nothing sent from here)")
            continue
        say(f"{one.outcome}: " + (f"delivered to {', '.join(one.sent)}" if one.sent else "delivered to none")
            + (f"; not delivered to {', '.join(f['target'] for f in one.failed)}" if one.failed else ""))
    if not done:
        say(f"{run_id}: no undelivered notification" + ("" if force else " (--force resends a delivered one)"))
    if output != "text":
        print_data([one.to_json() for one in done], output)
    return EXIT_FAILED if any(one.failed for one in done) else EXIT_SUCCEEDED


COMMANDS = [notify]
