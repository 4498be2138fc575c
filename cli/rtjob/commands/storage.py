"""``rtjob pull`` and ``rtjob results``: a run's storage, found through its id (the backend's status) or
given as a URI or folder. Only click is imported here; boto3, rich and matplotlib when a command runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from ..core.errors import EXIT_SUCCEEDED, BadInput, RtjobError
from ..jobspec.project import PULLED_RUNS_DIR  # stdlib only: one home for the pull destination
from .events import PRINTED
from .options import backend_options, output_option
from .printing import echo, print_data, print_rich, say
from .settings import settings_from

if TYPE_CHECKING:
    from ..runs.history.sources import Source, StepSource

PULL_EPILOG = """\b
Exit codes:
  0  everything selected was pulled (or was already there, unchanged); FIFOs,
     sockets and devices in local storage are skipped and listed, never opened
  1  some keys were refused (they would land outside DIR: '..', absolute, empty
     segments, control or bidi characters, names that differ only in case, ...;
     none is written) or some files failed; the rest was pulled
  2  bad input: bad URI or --checkpoint, unknown run, a run without storage,
     an invalid metrics.json for best:, another pull writing into DIR, a
     symbolic link where rtjob keeps its own files in DIR
  3  storage unreachable, access denied, missing bucket, no AWS credentials
"""

RESULTS_EPILOG = """\b
Exit codes:
  0  printed (and plotted)
  2  bad input: unknown run, no metrics history or an invalid one (not a list
     of objects, strings where numbers belong, over 16 MiB, nested too deep),
     bad --plot name
  3  storage unreachable, access denied, missing bucket, no AWS credentials
"""

def _sources(arg: str, endpoint: str | None, backend: str | None, address: str | None, headers: tuple[str, ...],
             no_verify_tls: bool) -> list[StepSource]:
    """ARG's sources (runs/history/sources.py): one for a run, URI or folder; a pipeline run's steps, in order."""
    from ..runs.history.sources import sources_for

    return sources_for(arg, endpoint, lambda: settings_from(backend, address, headers, no_verify_tls), PRINTED)


@click.command(epilog=PULL_EPILOG)
@click.argument("source", metavar="ID|URI|DIR")
@click.option("--to", "dest", metavar="DIR", help=f"Destination folder (default: ./{PULLED_RUNS_DIR}/<run id or last segment>, which no submit "
                   "uploads).")
@click.option("--checkpoint", "choice", default="latest", show_default=True,
              metavar="latest|best[:METRIC[:min|max]]|all|NAME",
              help="Which checkpoint_* folders: the newest, the best by a metric of its metrics.json "
                   "(else of Ray Train's checkpoint_manager_snapshot.json; default val_loss; min unless the "
                   "name says accuracy/throughput), all, or one by its folder's name (checkpoint_epoch_0003).")
@click.option("--concurrency", type=click.IntRange(1, 128), default=16, show_default=True,
              help="Requests in flight.")
@click.option("--endpoint-url", help="S3-compatible endpoint (default: AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL, "
                                     "else the one the run recorded).")
@backend_options
@output_option
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

    \b
    Examples:
      rtjob pull RUN_ID                            the newest checkpoint into ./rtjob-runs/RUN_ID
      rtjob pull RUN_ID --checkpoint best:val_loss --to ./best
      rtjob pull s3://bucket/runs/ddp-resnet/RUN_ID --checkpoint all -o json
    """
    from ..core.redact import redact, redact_data
    from ..jobspec.run_env import credential_values
    from ..runs.history.sources import explained, redacted
    from ..storage.destination import default_destination
    from ..storage.known import NothingKnown
    from ..storage.layout import NothingStored, parse_checkpoint_choice
    from ..storage.pull import pull as do_pull
    from .pull_report import default_progress, say_problems, summary_lines

    secrets = credential_values()
    src: Source | None = None
    pulled: list[tuple[str | None, Any]] = []  # (step, report): one run, or each step of a pipeline run
    try:
        picked = parse_checkpoint_choice(choice)
        found = _sources(source, endpoint_url, backend, address, headers, no_verify_tls)
        for step, step_src in found:
            if isinstance(step_src, RtjobError):  # a step with nothing to pull (not run yet, no storage)
                say(redact(f"step {step}: nothing pulled: {step_src.message}", secrets))
                continue
            src = step_src
            secrets += src.secrets
            if step is None:
                target = Path(dest) if dest else default_destination(src.location.name)
            else:  # a pipeline run: DIR/<step>
                target = (Path(dest) if dest else default_destination(source)) / step
            try:
                pulled.append((step, do_pull(src.location, target, picked, endpoint=src.endpoint,
                                             concurrency=concurrency,
                                             progress=default_progress(redact(f"pulling {src.label}", secrets)))))
            except (NothingStored, NothingKnown) as exc:  # a step that writes nothing of its own; the others are pulled
                if step is None:
                    raise
                say(redact(f"step {step}: nothing pulled: {explained(exc, src).message}", secrets))
    except RtjobError as exc:
        raise redacted(explained(exc, src), secrets) from None
    if not pulled:
        raise BadInput(f"pipeline run {source}: none of its steps has anything to pull yet")
    if output != "text":
        data = [{**report.to_json(), **({"step": step} if step else {})} for step, report in pulled]
        print_data(redact_data(data[0] if found[0][0] is None else data, secrets), output)
    for step, report in pulled:
        if output == "text":
            echo(redact("\n".join(([f"step {step}:"] if step else []) + summary_lines(report)), secrets))
        say_problems(report, secrets)
    return max(report.exit_code for _, report in pulled)


@click.command(epilog=RESULTS_EPILOG)
@click.argument("sources", nargs=-1, required=True, metavar="ID|DIR|URI...")
@click.option("--plot", "plot_file", metavar="FILE.png",
              help="Draw loss and accuracy curves (matplotlib; .png, .svg or .pdf).")
@click.option("--samples", "which_samples", type=click.Choice(["latest", "all", "none"]), default="latest",
              show_default=True,
              help="A run's samples/ (image grids per epoch, audio): pulled into ./rtjob-runs/<run id>/samples and "
                   "listed; latest: the newest epoch's; with --plot the newest image beside the curves.")
@click.option("--endpoint-url", help="S3-compatible endpoint (default: AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL).")
@backend_options
@output_option
def results(sources: tuple[str, ...], plot_file: str | None, which_samples: str, endpoint_url: str | None,
            backend: str | None, address: str | None, headers: tuple[str, ...], no_verify_tls: bool,
            output: str) -> int:
    """Show runs' metrics history: epoch, train/val loss, accuracy, samples/s, time; and their samples.

    \b
    Examples:
      rtjob results ID                  one run (its history and newest samples)
      rtjob results ID --plot run.png   loss/accuracy curves, the newest sample grid beside them
      rtjob results A B C               several runs side by side
    """
    from ..core.redact import redact
    from ..jobspec.run_env import credential_values
    from ..runs.history.sources import explained, redacted
    from ..storage import results as res
    from ..storage import samples
    from ..storage.destination import default_destination
    from ..storage.layout import NothingStored
    from .results_tables import tables

    secrets = credential_values()
    target = res.check_plot_path(plot_file) if plot_file else None
    runs: list[res.RunHistory] = []
    src: Source | None = None
    try:
        for arg in sources:
            found = _sources(arg, endpoint_url, backend, address, headers, no_verify_tls)
            for step, step_src in found:
                if isinstance(step_src, RtjobError):
                    say(redact(f"{arg} step {step}: no results: {step_src.message}", secrets))
                    continue
                src = step_src
                secrets += src.secrets
                try:
                    rows, where = res.history_from_location(src.location, src.endpoint)
                except (res.NoHistory, NothingStored) as exc:
                    if step is None:
                        raise
                    say(redact(f"{arg} step {step}: no metrics history ({exc.message})", secrets))
                    continue
                if not rows:
                    raise BadInput(f"{where}: the metrics history is empty")
                run = res.RunHistory(f"{arg}/{step}" if step else src.label, where, rows)
                if which_samples != "none":
                    found_samples, problems = samples.fetch(src.location, src.endpoint,
                                                            default_destination(src.location.name))
                    run.samples = samples.chosen(found_samples, which_samples)
                    for line in problems:
                        say(redact(line, secrets))
                runs.append(run)
            if not runs:
                raise BadInput(f"pipeline run {arg}: none of its steps has a metrics history yet")
    except RtjobError as exc:
        raise redacted(explained(exc, src), secrets) from None
    from ..core.redact import redact_data

    res.unique_labels(runs)
    for run in runs:  # what the table prints besides numbers
        run.label, run.source = redact(run.label, secrets), redact(run.source, secrets)
    if output != "text":
        print_data(redact_data([{**run.to_json(), "summary": res.summary(run)} for run in runs], secrets), output)
    else:
        print_rich(*tables(runs))
        for run in runs:
            if run.samples:
                echo(f"samples of {run.label}:\n" + "\n".join(f"  {s.path}" for s in run.samples))
    if target is not None:
        images = [(f"{run.label}" + (f" epoch {image.epoch}" if image.epoch is not None else ""), image.path)
                  for run in runs for image in [s for s in run.samples if s.is_image][-1:]]
        res.plot(runs, target, images)
        say(f"plot: {target}")
    return EXIT_SUCCEEDED

