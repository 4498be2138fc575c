"""`rtjob sync RUN_ID`: store what a node kept when storage failed at the run's end."""

from __future__ import annotations

import click

from ..core.errors import EXIT_SUCCEEDED
from .events import PRINTED
from .options import EXIT_CODES_HELP, output_option, run_id_argument
from .printing import print_data, say
from .settings import settings_from


@click.command("sync", epilog=EXIT_CODES_HELP)
@run_id_argument
@output_option
def sync(run_id: str, output: str) -> int:
    """Store a run's outputs that its node kept because storage failed at the run's end ("outputs not stored"):
    its files, its log and its record's end, so the run reads complete everywhere; then the node's copy goes.
    Run it on the node that keeps them (the embedded cluster's: this machine). Exit 3 while storage still refuses
    (nothing is removed: run it again).

    \b
    Examples:
      rtjob sync RUN_ID
    """
    from ..runs.lifecycle.repair import sync_kept
    from ..runs.places import storage_root

    done = sync_kept(run_id, storage_root(settings_from(None, None, (), False)), PRINTED)
    for one in done.folders:
        say(f"stored {one['files']} file(s)" + (" and the log" if one["log"] else "") + f" from {one['folder']}")
    if not done.folders:
        say(f"{run_id}: nothing kept on this machine" + (": its outputs are complete" if (done.outputs or {}).get(
            "complete") else ""))
    elif (done.outputs or {}).get("complete"):
        say(f"{run_id}: outputs complete")
    if output != "text":
        print_data(done.to_json(), output)
    return EXIT_SUCCEEDED


COMMANDS = [sync]
