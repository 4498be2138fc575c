"""`rtjob queue [NAME]`, `rtjob queue priority RUN_ID N`, `rtjob queue hold NAME`, `rtjob queue release NAME`: a
team's queue (docs/guide/queues.md) through runs/queued.py. `hold`, `release` and `priority` are words of this
command, never queue names (jobspec/queues.py refuses them as names)."""

from __future__ import annotations

from typing import Any

import click

from ..core.errors import EXIT_SUCCEEDED
from .events import PRINTED
from .options import EXIT_CODES_HELP, backend_options, output_option, run_id_argument
from .printing import echo, print_rows, say
from .settings import settings_from

COLUMNS: list[tuple[Any, str]] = [
    (lambda r: r["position"] if r["position"] is not None else ("-" if r["status"] == "ADMITTED" else "unknown"), "POS"),
    ("status", "STATUS"), ("priority", "PRIO"), ("user", "USER"), ("job", "JOB"),
    (lambda r: _stamp(r.get("waiting_since")), "WAITING SINCE"), ("id", "RUN ID"), ("reason", "WHY"),
]


def _stamp(when: str | None) -> str:
    from ..core.model import stamp

    return stamp(when)


class _QueueGroup(click.Group):
    """`rtjob queue [NAME]` lists; a first word that is not a subcommand is the queue's name."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if not args or (args[0] not in self.commands and args[0] not in ("-h", "--help")):
            args = ["list", *args]
        return super().parse_args(ctx, args)


@click.group("queue", cls=_QueueGroup, epilog=EXIT_CODES_HELP, subcommand_metavar="[NAME] | COMMAND [ARGS]...")
def queue_group() -> None:
    """A team's queue: its queued and admitted runs, a run's priority, hold and release.

    \b
    Examples:
      rtjob queue team                      position, priority, user, job, waiting since, why
      rtjob queue team -o json              [{"id", "status", "position" (1 = next), "priority", "user", ...}]
      rtjob queue hold team                 admit nothing until `rtjob queue release team`
    """


def _storage(settings: Any) -> str | None:
    from ..runs.places import storage_root

    return storage_root(settings)


@queue_group.command("list", hidden=True)
@click.argument("name", required=False)
@backend_options
@output_option
def list_queue(name: str | None, backend: str | None, address: str | None, headers: tuple[str, ...],
               no_verify_tls: bool, output: str) -> int:
    """List queue NAME (default: the settings' `queue`): admitted runs, then queued ones in order.

    \b
    Examples:
      rtjob queue list team
      rtjob queue list team -o json
    """
    from ..backends import get_backend

    settings = settings_from(backend, address, headers, no_verify_tls)
    be = get_backend(settings)
    if be.queues_itself:  # the platform keeps the queue (Anyscale): the runs sent to it, as its SDK says them now
        from ..runs.history.listing import platform_queue_rows
        from ..runs.queued import queue_settings

        print_rows(platform_queue_rows(be, queue_settings(settings, name), PRINTED), COLUMNS, output)
        return EXIT_SUCCEEDED
    from ..runs.queued import listed

    found = listed(settings, name, _storage(settings))
    rows = found.rows()
    if output == "text":
        view = found.view
        keeper = f"keeper {view.keeper} (alive)" if view.keeper_alive else (
            f"keeper {view.keeper} NOT holding its lease" if view.keeper else "no keeper yet")
        say(f"queue {view.name}: {sum(r['status'] == 'QUEUED' for r in rows)} queued, "
            f"{sum(r['status'] == 'ADMITTED' for r in rows)} admitted{', HELD' if view.held else ''}; {keeper}"
            + (f"; free now: {view.free}" if view.free else "")
            + (f"; grown to its largest: {view.largest}" if view.largest else ""))
        if not rows:
            echo("(empty)")
            return EXIT_SUCCEEDED
    print_rows(rows, COLUMNS, output)
    return EXIT_SUCCEEDED


@queue_group.command("priority")
@run_id_argument
@click.argument("priority", type=int)
@backend_options
def priority(run_id: str, priority: int, backend: str | None, address: str | None, headers: tuple[str, ...],
             no_verify_tls: bool) -> int:
    """Set queued run RUN_ID's priority (higher first, -1000..1000); its queue's keeper reorders it.

    \b
    Examples:
      rtjob queue priority ddp-resnet-20261202-1a2b 50
      rtjob queue priority ddp-resnet-20261202-1a2b -10
    """
    from ..core.errors import BadInput
    from ..jobspec.queues import check_priority
    from ..runs.memory import find
    from ..runs.queued import change

    try:
        check_priority(priority)
    except ValueError as exc:
        raise BadInput(f"PRIORITY: {exc}") from None
    settings = settings_from(backend, address, headers, no_verify_tls)
    storage = _storage(settings)
    record = find(run_id, storage)
    if record is None or not record.queue:
        raise BadInput(f"run {run_id} is not a queued run this machine or the project's storage knows (rtjob queue "
                       "lists a queue's runs)")
    if record.run_status.terminal or record.status != "QUEUED":
        raise BadInput(f"run {run_id} is {record.status}, not queued: its priority no longer matters")
    name = change(settings, str(record.queue.get("storage") or storage), "priority", str(record.queue.get("name")),
                  run_id, priority)
    say(f"{run_id}: priority {priority} in {name} (its keeper reorders the queue)")
    return EXIT_SUCCEEDED


def _hold_or_release(what: str) -> click.Command:
    @click.argument("name")
    @backend_options
    def command(name: str, backend: str | None, address: str | None, headers: tuple[str, ...],
                no_verify_tls: bool) -> int:
        from ..runs.queued import change

        settings = settings_from(backend, address, headers, no_verify_tls)
        done = change(settings, _storage(settings), what, name)
        say(f"queue {done}: " + ("held: its keeper admits nothing until `rtjob queue release " + done + "`"
                                 if what == "hold" else "released: its keeper admits again"))
        return EXIT_SUCCEEDED

    command.__doc__ = (("Hold queue NAME: nothing is admitted until it is released (admitted runs go on)."
                        if what == "hold" else "Release queue NAME: its keeper admits runs again.")
                       + f"\n\n    \b\n    Examples:\n      rtjob queue {what} team\n      rtjob queue {what} team --backend ray\n")
    return click.command(what)(command)


queue_group.add_command(_hold_or_release("hold"))
queue_group.add_command(_hold_or_release("release"))
COMMANDS = [queue_group]
