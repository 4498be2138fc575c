"""`rtjob sync RUN_ID`: store what a node kept when storage failed at the run's end."""

from __future__ import annotations

import click

from ..core.errors import EXIT_SUCCEEDED
from .events import PRINTED
from .options import EXIT_CODES_HELP, backend_options, output_option, run_id_argument
from .printing import print_data, say
from .settings import backend_for_run, settings_from


@click.command("sync", epilog=EXIT_CODES_HELP)
@run_id_argument
@backend_options
@output_option
def sync(run_id: str, backend: str | None, address: str | None, headers: tuple[str, ...], no_verify_tls: bool,
         output: str) -> int:
    """Store a run's outputs that its node kept because storage failed at the run's end ("outputs not stored"):
    its files, its log and its record's end, so the run reads complete everywhere; then the node's copy goes.
    On the embedded cluster the node is this machine; on another Ray cluster a small job pinned to each node that
    ran the run stores them there. Exit 3 while storage still refuses (nothing is removed: run it again).

    \b
    Examples:
      rtjob sync RUN_ID
    """
    from ..runs.lifecycle.repair import sync_kept
    from ..runs.places import storage_root

    done = sync_kept(run_id, storage_root(settings_from(backend, address, headers, no_verify_tls)), PRINTED,
                     lambda: backend_for_run(run_id, backend, address, headers, no_verify_tls)[0])
    for one in done.folders:
        if one["files"] is not None:
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
