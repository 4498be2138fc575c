"""`rtjob local up|down|status`: the embedded Ray cluster (the 'local' backend starts it on demand)."""

from __future__ import annotations

import click

from ..core.errors import EXIT_SUCCEEDED
from .options import output_option
from .printing import echo, print_data, say


@click.group()
def local() -> None:
    """The embedded local Ray cluster (started on demand by submit).

    \b
    Examples:
      rtjob local up --nodes 2 --cpus-per-node 2
      rtjob local status -o json
      rtjob local down
    """


@local.command("up")
@click.option("--nodes", type=click.IntRange(1, 16), default=1, show_default=True, help="Ray nodes (raylets) to run.")
@click.option("--cpus-per-node", type=click.IntRange(1, 64), default=1, show_default=True)
def local_up(nodes: int, cpus_per_node: int) -> int:
    """Start the embedded cluster (or grow it to NODES nodes).

    \b
    Examples:
      rtjob local up
      rtjob local up --nodes 2 --cpus-per-node 2
    """
    from ..backends.ray import cluster

    running = cluster.describe(cluster.up(nodes, cpus_per_node, log=say))
    say(f"embedded cluster up: {running['nodes']} node(s), dashboard {running['address']}")
    return EXIT_SUCCEEDED


@local.command("down")
def local_down() -> int:
    """Stop the embedded cluster (only the processes rtjob started).

    \b
    Examples:
      rtjob local down
    """
    from ..backends.ray import cluster
    from ..runs.archive import before_cluster_stops
    from .events import PRINTED
    from .settings import backend_from

    try:
        running = cluster.load_state() is not None
    except cluster.DamagedState:
        running = False  # down reports the damage and still stops what it finds
    if running:  # its runs' logs and ends are saved before they are gone
        archived = before_cluster_stops(backend_from("local", None, (), False), PRINTED)
        if archived:
            say(f"archived {archived} run(s) of the embedded cluster (rtjob runs, rtjob logs ID still show them)")
    count = cluster.down(log=say)
    say(f"embedded cluster stopped ({count} processes ended)" if count else "no embedded cluster was running")
    return EXIT_SUCCEEDED


@local.command("status")
@output_option
def local_status(output: str) -> int:
    """Show the embedded cluster's nodes and resources (exit 3 if it is not running).

    \b
    Examples:
      rtjob local status
      rtjob local status -o yaml
    """
    from ..backends.ray import cluster

    running = cluster.describe(cluster.require())
    if output != "text":
        print_data(running, output)
    else:
        echo(f"address: {running['address']}\nnodes:   {running['nodes']}\nCPUs:    {running['cpus']:g}\n"
                   f"logs:    {running['temp_dir']}")
    return EXIT_SUCCEEDED
