"""`rtjob local up|down|status|env`: the embedded cluster, the local-cluster capability of the backend that offers one
(the registry names it; that backend starts the cluster on demand)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import click

from ..core.errors import EXIT_SUCCEEDED
from .options import output_option
from .printing import echo, print_data, say

if TYPE_CHECKING:
    from ..backends.base import Backend
    from ..backends.capabilities import LocalCluster


def _cluster() -> tuple[Backend, LocalCluster]:
    """The backend that offers a cluster on this machine, and that cluster."""
    from ..backends import offering
    from ..backends.base import NotSupported
    from .settings import backend_from

    backend = backend_from(offering("local_cluster"), None, (), False)
    cluster = backend.local_cluster()
    if cluster is None:  # offering() found the method overridden: only a backend that breaks its contract
        raise NotSupported(f"backend {backend.name!r} has no cluster on this machine")
    return backend, cluster


@click.group()
def local() -> None:
    """The embedded local Ray cluster (started on demand by submit).

    \b
    Examples:
      rtjob local up --nodes 2 --cpus-per-node 2
      eval "$(rtjob local env)"   # then Ray's own CLI: ray job list, ray status
      rtjob local down
    """


@local.command("up")
@click.option("--nodes", type=click.IntRange(1, 16), default=1, show_default=True, help="Ray nodes (raylets) to run.")
@click.option("--cpus-per-node", type=click.IntRange(1, 64), default=1, show_default=True)
@click.option("--gpus-per-node", type=click.IntRange(0, 64), default=0, show_default=True,
              help="This machine's GPUs each node gets, its own (found with nvidia-smi).")
def local_up(nodes: int, cpus_per_node: int, gpus_per_node: int) -> int:
    """Start the embedded cluster (or grow it to NODES nodes).

    \b
    Examples:
      rtjob local up
      rtjob local up --nodes 2 --cpus-per-node 2
      rtjob local up --nodes 2 --gpus-per-node 1   # on a machine with 2 GPUs: one each
    """
    if gpus_per_node:
        from ..core.errors import BadInput
        from ..jobspec.gpus import inventory, machine_gpus

        here = machine_gpus()
        if nodes * gpus_per_node > len(here):
            raise BadInput(f"--nodes {nodes} x --gpus-per-node {gpus_per_node} needs {nodes * gpus_per_node} GPU(s); "
                           f"this machine has {inventory(here)}")
    running = _cluster()[1].up(nodes, cpus_per_node, log=say, gpus_per_node=gpus_per_node)
    say(f"embedded cluster up: {running['nodes']} node(s), dashboard {running['address']}")
    return EXIT_SUCCEEDED


@local.command("down")
def local_down() -> int:
    """Stop the embedded cluster (only the processes rtjob started).

    \b
    Examples:
      rtjob local down
    """
    from ..runs.lifecycle.cluster_down import before_cluster_stops, kept_after_cluster, node_folders_of
    from ..storage.node_dirs import kept_folders, remove_run_folder, run_folder
    from .events import PRINTED

    backend, cluster = _cluster()
    run_ids: list[str] = []
    if cluster.running():  # its runs' logs and ends are saved before they are gone
        say("saving the embedded cluster's runs (logs and ends; one still running is recorded STOPPED, one whose "
            "companion still stores its outputs is waited for) before it stops")
        archived = before_cluster_stops(backend, PRINTED)
        if archived:
            say(f"archived {archived} run(s) of the embedded cluster (rtjob runs, rtjob logs ID still show them)")
        run_ids = node_folders_of(backend, PRINTED)
    count = cluster.down(log=say)  # says what it stops before it waits for it
    say(f"embedded cluster stopped ({count} processes ended)" if count else "no embedded cluster was running")
    kept_after_cluster(PRINTED)  # a companion that kept its outputs: its end and "outputs not stored" recorded
    present = [run_id for run_id in run_ids if os.path.lexists(run_folder(run_id))]  # its nodes are this machine
    removed = [run_id for run_id in present if remove_run_folder(run_id)]  # a kept one is left: the only copy
    if removed:
        say(f"removed the node folders of {len(removed)} run(s)")
    for folder, marker in kept_folders():
        say(f"kept {folder}: {marker.get('not_stored', '?')} file(s) of run {marker.get('run_id')} that its "
            f"storage lacks (rtjob sync {marker.get('run_id')} stores them once storage is back)")
    return EXIT_SUCCEEDED


@local.command("status")
@output_option
def local_status(output: str) -> int:
    """Show the embedded cluster's nodes and resources, or that it is not running (exit 0 either way; exit 3 when
    its recorded state is damaged or names a cluster that does not answer).

    \b
    Examples:
      rtjob local status
      rtjob local status -o yaml
    """
    running = _cluster()[1].describe()
    if running is None:
        if output != "text":
            print_data({"running": False}, output)
        else:
            echo("not running (rtjob submit or rtjob local up starts it)")
        return EXIT_SUCCEEDED
    running = {"running": True, **running}
    if output != "text":
        print_data(running, output)
    else:
        gpus = (f"GPUs:    {running['gpus']:g} ({running['gpus_per_node']} per node, each node its own)\n"
                if running.get("gpus") else "")
        echo(f"address: {running['address']}\nnodes:   {running['nodes']}\nCPUs:    {running['cpus']:g}\n"
             f"{gpus}logs:    {running['temp_dir']}")
    return EXIT_SUCCEEDED


@local.command("env")
def local_env() -> int:
    """Print shell export lines that point Ray's own CLI at the embedded cluster (exit 3 if it is not running).

    rtjob takes that address as the embedded cluster: later rtjob commands keep its storage and history.

    \b
    Examples:
      eval "$(rtjob local env)" && ray job list && ray status
    """
    import shlex

    for name, value in _cluster()[1].env().items():
        echo(f"export {name}={shlex.quote(value)}")
    return EXIT_SUCCEEDED
