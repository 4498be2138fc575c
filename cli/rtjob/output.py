"""Printing runs as text or JSON (rich for tables; imported only when a table is printed)."""

from __future__ import annotations

import datetime as dt
import json
import sys
from typing import Any

from .backends.base import RunInfo
from .masking import redact


def say(message: str) -> None:
    """Progress and outcome lines go to stderr, so stdout carries only logs or JSON."""
    print(f"rtjob: {message}", file=sys.stderr, flush=True)


def print_json(data: Any) -> None:
    print(json.dumps(data, indent=2, sort_keys=False, default=str), flush=True)


def duration(info: RunInfo) -> str:
    if not info.start_time:
        return "-"
    start = dt.datetime.fromisoformat(info.start_time)
    end = dt.datetime.fromisoformat(info.end_time) if info.end_time else dt.datetime.now(dt.timezone.utc)
    seconds = int((end - start).total_seconds())
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m" if seconds >= 3600 else f"{seconds // 60}m{seconds % 60:02d}s"


def run_text(info: RunInfo) -> str:
    message = redact(info.message or "", info.secrets)
    lines = [
        f"id:          {info.id}",
        f"job:         {info.job or '-'}",
        f"backend:     {info.backend} ({info.address})",
        f"status:      {info.status.value}",
        f"message:     {message or '-'}",
        f"started:     {info.start_time or '-'}",
        f"ended:       {info.end_time or '-'}",
        f"duration:    {duration(info)}",
        f"exit code:   {info.exit_code if info.exit_code is not None else '-'}",
        f"storage:     {info.storage_uri or '-'}",
    ]
    return "\n".join(lines)


def run_json(info: RunInfo) -> dict[str, Any]:
    data = info.to_json()
    if data.get("message"):
        data["message"] = redact(data["message"], info.secrets)
    return data


def runs_table(runs: list[RunInfo]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(box=None, header_style="bold")
    for column in ("ID", "JOB", "STATUS", "STARTED", "DURATION", "STORAGE"):
        table.add_column(column, overflow="fold")
    for run in runs:
        table.add_row(
            run.id, run.job or "-", run.status.value, (run.start_time or "-").replace("+00:00", "Z"),
            duration(run), run.storage_uri or "-",
        )
    Console(width=200 if not sys.stdout.isatty() else None).print(table)
