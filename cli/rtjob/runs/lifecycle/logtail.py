"""A followed run's log, printed once per line whichever source delivered it (follow.py runs it beside its loop).

The log stream can end while the job still runs and can miss its last lines (Ray #51601, #46413), so: the stream
is re-opened when it drops (each connection replays the log from its start, and lines already printed are skipped
by count), and once the job has ended the full log is read once more to print any line the stream never delivered
(``print_rest``). Skipping by count needs every source to count lines alike: Ray's full log (and its websocket)
reads the file as text, where a lone carriage return (a progress bar's redraw) ends a line, while the State API
stream sends the file's bytes; so both are split by the same rule (Lines).
"""

from __future__ import annotations

import asyncio
import io
from typing import TextIO

from ...backends.base import Backend
from ...core.redact import redact

RECONNECT_S = 0.5


class Lines:
    """Complete lines of a text that comes in chunks, ended as Python's text mode ends them (universal newlines:
    "\n", "\r\n" and a lone "\r"), which is how Ray reads a job's full log (JobLogStorageClient.get_logs):
    a line's position is then the same in the stream and in the full log. A "\r" at a chunk's end waits for the
    next chunk (it may be half of a "\r\n")."""

    def __init__(self) -> None:
        self._newlines = io.IncrementalNewlineDecoder(None, translate=True)
        self.rest = ""  # the unfinished last line

    def feed(self, chunk: str, final: bool = False) -> list[str]:
        *lines, self.rest = (self.rest + self._newlines.decode(chunk, final=final)).split("\n")
        return lines


class LinePrinter:
    """Prints complete lines once each, counting them so a replayed stream can be skipped."""

    def __init__(self, out: TextIO, secrets: list[str]) -> None:
        self.out = out
        self.secrets = secrets
        self.printed = 0

    def emit(self, line: str) -> None:
        self.out.write(redact(line, self.secrets) + "\n")
        self.out.flush()
        self.printed += 1

    def print_rest(self, text: str) -> None:
        """The run's whole log, read after its end: the lines the stream did not deliver (its last lines, a final
        line without newline)."""
        lines_of = Lines()
        lines = lines_of.feed(text, final=True)
        if lines_of.rest:
            lines.append(lines_of.rest)
        for line in lines[self.printed:]:
            self.emit(line)


async def tail_forever(backend: Backend, run_id: str, printer: LinePrinter, done: asyncio.Event) -> None:
    """The run's log stream into ``printer`` until ``done``, re-opened whenever it drops."""
    while not done.is_set():
        seen = 0
        lines_of = Lines()
        try:
            async for chunk in backend.tail(run_id):
                for line in lines_of.feed(chunk):
                    seen += 1
                    if seen > printer.printed:
                        printer.emit(line)
        except asyncio.CancelledError:
            raise
        except Exception:  # noqa: BLE001 - any drop of the stream: reconnect, the status decides
            pass
        if not done.is_set():
            await asyncio.sleep(RECONNECT_S)
