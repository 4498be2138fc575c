"""``rtjob pull`` and ``rtjob results``: a run's storage, found through its id (the backend's status) or
given as a URI or folder. Only click is imported here; boto3, rich and matplotlib when a command runs.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from .errors import EXIT_SUCCEEDED, BadInput, RtjobError

if TYPE_CHECKING:
    from .backends.base import Backend
    from .storage import Location

PULL_EPILOG = """\b
Exit codes:
  0  everything selected was pulled (or was already there, unchanged)
  1  some keys were refused (they would land outside DIR: '..', absolute, empty
     segments, ...; none is written) or some files failed; the rest was pulled
  2  bad input: bad URI or --checkpoint, unknown run, a run without storage
  3  storage unreachable, access denied, missing bucket, no AWS credentials
"""

RESULTS_EPILOG = """\b
Exit codes:
  0  printed (and plotted)
  2  bad input: unknown run, no metrics history, bad --plot name
  3  storage unreachable, access denied, missing bucket, no AWS credentials
"""

RunBackend = Callable[[str | None, str | None, tuple[str, ...], bool], "Backend"]


@dataclass
class Source:
    """Where one run's results are: a storage location (+ endpoint) and how to call the run."""

    location: Location
    endpoint: str | None
    label: str
    run_id: str | None = None
    secrets: list[str] = field(default_factory=list)


def _looks_like_path(arg: str) -> bool:
    return "/" in arg or os.sep in arg or arg.startswith("~") or arg in (".", "..")


def resolve_source(arg: str, endpoint: str | None, lookup: Callable[[str], Any], backend: str | None) -> Source:
    """ID → the run's recorded storage (through the backend's status); a URI or a path as given.

    A bare name is a run id first; if no backend knows it, an existing folder of that name, then a run folder
    in the embedded cluster's local storage (the embedded cluster forgets its runs when it stops).
    """
    from .storage import parse_location

    if "://" in arg or _looks_like_path(arg):
        location = parse_location(arg)
        return Source(location, endpoint, location.name)
    try:
        info = lookup(arg)
    except RtjobError:
        if os.path.isdir(arg):
            location = parse_location(arg)
            return Source(location, endpoint, location.name)
        found = _local_run_dir(arg) if backend in (None, "local") else None
        if found is None:
            raise
        return Source(parse_location(str(found)), endpoint, arg, arg)
    if not info.storage_uri:
        raise BadInput(f"run {arg} recorded no storage (it ran without `storage:` / --storage)")
    location = parse_location(info.storage_uri)
    if location.scheme == "file" and not os.path.isdir(location.path):
        if info.backend != "local":
            raise BadInput(f"run {arg} wrote to {location.path} on the cluster's own disk, which this machine "
                           "cannot read; use s3:// storage to pull it")
        raise BadInput(f"run {arg}: its storage folder {location.path} does not exist (yet)")
    recorded = info.storage_endpoint
    return Source(location, endpoint or _env_endpoint() or recorded, arg, arg, list(info.secrets))


def _env_endpoint() -> str | None:
    from .storage import endpoint_from_env

    return endpoint_from_env()


def _local_run_dir(run_id: str) -> Path | None:
    from .project import rtjob_home

    if "/" in run_id or run_id in (".", ".."):
        return None
    matches = [p for p in (rtjob_home() / "local" / "storage").glob(f"*/{run_id}") if p.is_dir()]
    return matches[0] if len(matches) == 1 else None


def _redacted(exc: RtjobError, secrets: list[str]) -> RtjobError:
    from .masking import redact

    exc.message = redact(exc.message, secrets)
    return exc


def storage_commands(backend_options: Callable[[Any], Any], run_backend: RunBackend) -> list[click.Command]:
    """The commands, built with the front's backend options (``main`` registers them)."""

    def lookup_for(backend: str | None, address: str | None, headers: tuple[str, ...],
                   no_verify_tls: bool) -> Callable[[str], Any]:
        def lookup(run_id: str) -> Any:
            return run_backend(backend, address, headers, no_verify_tls).status(run_id)

        return lookup

    @click.command(epilog=PULL_EPILOG)
    @click.argument("source", metavar="ID|URI|DIR")
    @click.option("--to", "dest", metavar="DIR", help="Destination folder (default: ./<run id or last segment>).")
    @click.option("--checkpoint", "choice", default="latest", show_default=True,
                  metavar="latest|best[:METRIC[:min|max]]|all",
                  help="Which checkpoint_* folders: the newest, the best by a metric of its metrics.json "
                       "(default val_loss; min unless the name says accuracy/throughput), or all.")
    @click.option("--concurrency", type=click.IntRange(1, 128), default=16, show_default=True,
                  help="Requests in flight.")
    @click.option("--endpoint-url", help="S3-compatible endpoint (default: AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL, "
                                         "else the one the run recorded).")
    @backend_options
    @click.option("--output", "-o", type=click.Choice(["text", "json"]), default="text", show_default=True)
    def pull(source: str, dest: str | None, choice: str, concurrency: int, endpoint_url: str | None,
             backend: str | None, address: str | None, headers: tuple[str, ...], no_verify_tls: bool,
             output: str) -> int:
        """Copy a run's checkpoint(s) and metrics history from its storage (s3:// or a folder) into DIR.

        \b
        ID is a run id (its storage comes from the backend: Ray job metadata or
        Anyscale tags); URI is s3://bucket/prefix/JOB/RUN, a local path or file://.
        Resumable: unchanged files (size + ETag) are skipped; downloads go to
        NAME.rtjob-partial and are renamed only when complete and of the right size.
        Credentials: the standard AWS chain; they are never printed.
        """
        from .output import print_json, say
        from .pull import default_progress, summary_lines
        from .pull import pull as do_pull
        from .storage import credential_values, parse_checkpoint_choice

        secrets = credential_values()
        try:
            picked = parse_checkpoint_choice(choice)
            src = resolve_source(source, endpoint_url, lookup_for(backend, address, headers, no_verify_tls),
                                 backend)
            secrets += src.secrets
            target = Path(dest) if dest else Path.cwd() / src.location.name
            report = do_pull(src.location, target, picked, endpoint=src.endpoint, concurrency=concurrency,
                             progress=default_progress(f"pulling {src.label}"))
        except RtjobError as exc:
            raise _redacted(exc, secrets) from None
        from .masking import redact

        if output == "json":
            print_json(report.to_json())
        else:
            click.echo(redact("\n".join(summary_lines(report)), secrets))
        for item in report.refused:
            say(redact(f"refused {item['key']}: {item['reason']}", secrets))
        for item in report.failed:
            say(redact(f"failed {item['key']}: {item['error']}", secrets))
        if report.refused:
            say(f"{len(report.refused)} key(s) refused: nothing was written outside {report.destination}")
        if report.failed:
            say(f"{len(report.failed)} file(s) failed; run the same pull again to retry them")
        return report.exit_code

    @click.command(epilog=RESULTS_EPILOG)
    @click.argument("sources", nargs=-1, required=True, metavar="ID|DIR|URI...")
    @click.option("--plot", "plot_file", metavar="FILE.png",
                  help="Draw loss and accuracy curves (matplotlib; .png, .svg or .pdf).")
    @click.option("--endpoint-url", help="S3-compatible endpoint (default: AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL).")
    @backend_options
    @click.option("--output", "-o", type=click.Choice(["text", "json"]), default="text", show_default=True)
    def results(sources: tuple[str, ...], plot_file: str | None, endpoint_url: str | None, backend: str | None,
                address: str | None, headers: tuple[str, ...], no_verify_tls: bool, output: str) -> int:
        """Show runs' metrics history: epoch, train/val loss, accuracy, samples/s, time.

        \b
        rtjob results ID                  one run (reads its history from storage)
        rtjob results ./ID --plot run.png a pulled run, with loss/accuracy curves
        rtjob results A B C               several runs side by side
        """
        from . import results as res
        from .output import print_json, say
        from .storage import credential_values

        secrets = credential_values()
        target = res.check_plot_path(plot_file) if plot_file else None
        runs: list[res.RunHistory] = []
        lookup = lookup_for(backend, address, headers, no_verify_tls)
        try:
            for arg in sources:
                src = resolve_source(arg, endpoint_url, lookup, backend)
                secrets += src.secrets
                rows, where = res.history_from_location(src.location, src.endpoint)
                label = src.label
                if not rows:
                    raise BadInput(f"{where}: the metrics history is empty")
                runs.append(res.RunHistory(label, where, rows))
        except RtjobError as exc:
            raise _redacted(exc, secrets) from None
        res.unique_labels(runs)
        if output == "json":
            print_json([{**run.to_json(), "summary": res.summary(run)} for run in runs])
        else:
            res.print_tables(runs)
        if target is not None:
            res.plot(runs, target)
            say(f"plot: {target}")
        return EXIT_SUCCEEDED

    return [pull, results]
