"""Every print helper of the CLI, and so the one redaction boundary: progress lines, plain output, JSON and rich
tables all pass ``REDACTOR`` (core/redact.py), which knows every secret value of this run. Nothing in commands/
prints any other way (tests/unit/test_hardening.py checks). It prints only: it calls no use case (runs/)."""

from __future__ import annotations

import datetime as dt
import json
import sys
from collections.abc import Callable, Sequence
from typing import Any

from ..core.end_words import end_line
from ..core.errors import EXIT_FAILED, EXIT_INTERNAL, EXIT_SUCCEEDED, EXIT_UNREACHABLE
from ..core.model import RunInfo, RunStatus, stamp
from ..core.redact import REDACTOR, redact
from ..core.verdict import run_seconds


def say(message: str) -> None:
    """Progress and outcome lines go to stderr, so stdout carries only logs or JSON."""
    print(f"rtjob: {REDACTOR.text(message)}", file=sys.stderr, flush=True)


def echo(text: str, *, err: bool = False, nl: bool = True) -> None:
    """Plain output (stdout, or stderr with ``err``)."""
    stream = sys.stderr if err else sys.stdout
    stream.write(REDACTOR.text(text) + ("\n" if nl else ""))
    stream.flush()


def _plain_data(data: Any) -> Any:
    """JSON-able data (anything else as its str), every secret masked: what json and yaml print alike."""
    return REDACTOR.data(data)


def _flat_rows(data: Any) -> bool:
    """A listing printed one row per line: rows as the redactor's ``rows`` takes them (a row's verdict nested)."""
    from ..core.redact import Redactor

    return isinstance(data, list) and bool(data) and all(
        type(row) is dict and Redactor.listing_row(row, {}) for row in data)


def print_json(data: Any) -> None:
    rows = REDACTOR.rows(data)  # a listing: one row per line (grep-able; 100,000 rows in a second or two)
    if rows is not None:
        print(_rows_json(rows), flush=True)
        return
    plain = _plain_data(data)
    if _flat_rows(plain):
        print("[\n" + ",\n".join("  " + json.dumps(row) for row in plain) + "\n]", flush=True)
        return
    print(json.dumps(plain, indent=2, sort_keys=False), flush=True)


def _rows_json(rows: list[dict[str, Any]]) -> str:
    """``[``, each row's json.dumps on a line of its own, ``]``: the list encoded in one call, its rows' boundaries
    ("}, {" between flat rows) put on lines of their own when they are the only "}, {" in it (else row by row)."""
    whole = json.dumps(rows)
    if whole.count("}, {") == len(rows) - 1:
        return "[\n  " + whole[1:-1].replace("}, {", "},\n  {") + "\n]"
    return "[\n" + ",\n".join("  " + json.dumps(row) for row in rows) + "\n]"


def print_yaml(data: Any) -> None:
    """The same data as print_json, as YAML that YAML 1.1 and 1.2 readers both load back as that data."""
    from ..core.yamlout import dump_yaml

    print(dump_yaml(_plain_data(data)), end="", flush=True)


def print_data(data: Any, output: str) -> None:
    """What a command prints for ``--output json|yaml`` (one function makes the data, this prints it)."""
    (print_yaml if output == "yaml" else print_json)(data)


def print_rich(*renderables: Any) -> None:
    """Rich tables and lines, rendered to text first so that they pass the redactor too.

    On a terminal (or with FORCE_COLOR): aligned columns, colour unless NO_COLOR is set. Piped or redirected:
    tables become plain tab-separated rows (no alignment padding, no trailing spaces) for scripts."""
    import io
    import os

    from rich.console import Console
    from rich.table import Table

    terminal = sys.stdout.isatty() or bool(os.environ.get("FORCE_COLOR"))
    if not terminal:
        echo("".join(_plain_table(r) if isinstance(r, Table) else f"{r}\n" for r in renderables), nl=False)
        return
    buffer = io.StringIO()
    # NO_COLOR (https://no-color.org): no escape codes at all, bold headers included.
    styled = not os.environ.get("NO_COLOR")
    console = Console(file=buffer, width=None if sys.stdout.isatty() else 200, force_terminal=styled,
                      color_system="auto" if styled else None, no_color=not styled)
    for renderable in renderables:
        console.print(renderable, soft_wrap=isinstance(renderable, str), highlight=False, markup=False)
    echo(buffer.getvalue(), nl=False)


def progress_console() -> Any:
    """The rich console a transient progress bar draws on: stderr (its label is redacted by the caller)."""
    from rich.console import Console

    return Console(stderr=True)


Column = tuple[str | Callable[[dict[str, Any]], Any], str]  # (key or function of the row, HEADER)


def print_rows(rows: list[dict[str, Any]], columns: Sequence[Column], output: str) -> None:
    """A list command's rows: the rows themselves for ``-o json|yaml``, else a table of ``columns``, each a
    (key or function of the row, HEADER); a cell whose value is None prints '-'."""
    if output != "text":
        print_data(rows, output)
        return
    from rich.table import Table

    table = Table(box=None, header_style="bold")
    for _, header in columns:
        table.add_column(header, overflow="fold")
    for row in rows:
        values = (row.get(key) if isinstance(key, str) else key(row) for key, _ in columns)
        table.add_row(*("-" if value is None else str(value) for value in values))
    print_rich(table)


def _plain_table(table: Any) -> str:
    """A rich Table as text for scripts: its title on a line, then the header and rows, cells tab-separated."""
    columns = [[str(column.header), *(str(cell) for cell in column.cells)] for column in table.columns]
    lines = [str(table.title)] if table.title else []
    lines += ["\t".join(cell.replace("\t", " ").replace("\n", " ") for cell in row) for row in zip(*columns, strict=True)]
    return "".join(f"{line}\n" for line in lines)


def learn_secrets_from_environment() -> None:
    """This client's own secrets (AWS keys, RAY_AUTH_TOKEN, ANYSCALE_CLI_TOKEN, any *_TOKEN/*_PASSWORD/...):
    never printed, whatever path they would take (an error body, a log line, a rendered file)."""
    import os

    REDACTOR.add_mapping(dict(os.environ))


def report_crash(exc: BaseException) -> int:
    """An unexpected exception: one line, the traceback in a file (and on stderr with RTJOB_DEBUG=1), exit 70."""
    import os
    import time
    import traceback

    from ..jobspec.project import rtjob_home

    text = REDACTOR.text("".join(traceback.format_exception(exc)))
    where = "not saved"
    try:
        folder = rtjob_home() / "crash"
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.txt"
        path.write_text(text, encoding="utf-8")
        where = str(path)
    except OSError as err:
        where = f"not saved: {err.strerror}"
    if os.environ.get("RTJOB_DEBUG") == "1":
        sys.stderr.write(text)
    first = (str(exc).strip().splitlines() or [""])[0][:200]
    echo(f"rtjob: internal error (a bug in rtjob, not the run's outcome): {type(exc).__name__}"
         f"{': ' + first if first else ''}; traceback {where} (RTJOB_DEBUG=1 prints it)", err=True)
    return EXIT_INTERNAL


def duration(info: RunInfo) -> str:
    """The verdict's duration as people read it ("-": none, e.g. a queued run's wait or an UNKNOWN end)."""
    exact = run_seconds(info)
    if exact is None:
        return "-"
    seconds = int(exact)
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m" if seconds >= 3600 else f"{seconds // 60}m{seconds % 60:02d}s"


def run_text(info: RunInfo) -> str:
    message = redact(end_line(info.message, info.status.value) or "", info.secrets)
    lines = [
        f"id:          {info.id}",
        f"job:         {info.job or '-'}",
        f"backend:     {info.backend}" + (f" ({info.address})" if info.address else ""),
        f"status:      {info.status.value}",
        f"message:     {message or '-'}",
        f"started:     {stamp(info.start_time)}",
        f"ended:       {stamp(info.end_time)}",
        f"duration:    {duration(info)}",
        f"exit code:   {info.exit_code if info.exit_code is not None else '-'}",
        f"storage:     {info.storage_uri or '-'}",
    ]
    if info.outputs is not None:
        outputs = info.outputs
        lines.append("outputs:     " + ("complete (every file and the end stored)" if outputs.get("complete") else
                                      f"NOT STORED: {not_stored_text(outputs)}"
                                      + (f", kept at {outputs['kept_at']}" if outputs.get("kept_at") else "")
                                      + f" (once storage is back: rtjob sync {info.id})"))
    return "\n".join(lines)


def timeline_text(timeline: dict[str, str], earlier: list[dict[str, Any]] | None = None) -> str:
    """The start-up timeline as people read it: each stage's time after the first one recorded (submitted), of
    the run's last attempt; ``earlier`` (core/lifecycle.earlier's): one line under it for each attempt before."""

    from rtjob_contract import TIMELINE_STAGES

    stamps = []
    for stage in (*TIMELINE_STAGES, *(s for s in timeline if s not in TIMELINE_STAGES)):
        try:
            stamps.append((stage, dt.datetime.fromisoformat(timeline[stage])))
        except (KeyError, ValueError):
            continue
    first = stamps[0][1] if stamps else None
    text = ", ".join(f"{stage.replace('_', ' ')} +{(when - first).total_seconds():.1f}s" for stage, when in stamps
                     if first is not None) or "-"
    for attempt in earlier or []:
        took = f" after {attempt['duration_s']:.1f}s" if attempt.get("duration_s") is not None else ""
        ended = f", ended {stamp(attempt['ended'])}" if attempt.get("ended") else ""
        text += f"\n             attempt {attempt['attempt']} ({attempt['id']}): {attempt.get('status') or '-'}{ended}{took}"
    return text


def carrier_text(carried_by: str | None, last_seen: str | None, ended: bool) -> str:
    """Who carries the run where it runs, and when it last said so."""
    if not carried_by:
        return "- (no run-side process: rtjob completes the record when it sees the run end)"
    return f"{carried_by}" + ("" if ended else f" (last seen {stamp(last_seen)})")


def run_json(info: RunInfo) -> dict[str, Any]:
    data = info.to_json()
    if data.get("message"):
        data["message"] = redact(data["message"], info.secrets)
    return data


def run_document(info: RunInfo) -> dict[str, Any]:
    """A run's -o json|yaml document in every command that prints one run (status, wait, submit, stop): the run
    and its ``verdict`` (``info``: the verdict's, Verdict.onto's)."""
    from ..core.verdict import said

    return {**run_json(info), "verdict": said(info)}


def runs_table(runs: list[RunInfo]) -> None:
    from rich.table import Table

    table = Table(box=None, header_style="bold")
    for column in ("ID", "JOB", "STATUS", "STARTED", "DURATION", "STORAGE"):
        table.add_column(column, overflow="fold")
    for run in runs:
        table.add_row(
            run.id, run.job or "-", run.status.value + (f" ({run.attempts} attempts)" if run.attempts > 1 else ""),
            stamp(run.start_time),
            duration(run), run.storage_uri or "-",
        )
    print_rich(table)


def outcome(info: RunInfo) -> int:
    """The exit code of a run that ended: 0 succeeded, 1 failed or stopped, 3 its outputs not stored (an
    environment fault, not the script's: the node keeps them for `rtjob sync`)."""
    if info.outputs_lost:
        return EXIT_UNREACHABLE
    return EXIT_SUCCEEDED if info.status == RunStatus.SUCCEEDED else EXIT_FAILED


def not_stored_text(outputs: dict[str, Any]) -> str:
    """What storage lacks: its files by count, or only the run's end (storage went down after the last file)."""
    count = outputs.get("not_stored")
    return "its end only (every file is stored)" if count == 0 else f"{count if count is not None else '?'} file(s)"


def outputs_line(info: RunInfo) -> str | None:
    """The one line of a run whose outputs are not stored (None: they are, or nothing says otherwise)."""
    if not info.outputs_lost:
        return None
    outputs = info.outputs or {}
    where = f", kept at {outputs['kept_at']}" if outputs.get("kept_at") else ""
    return (f"{info.id} {info.status.value}, outputs not stored: {not_stored_text(outputs)}{where}; "
            f"once storage is back: rtjob sync {info.id}")
