"""The user's view of a run's log: what the script printed, without the lines that are not the script's.

A driver log also holds lines Ray's job manager and rtjob write around the script: Ray's "Runtime env is setting
up." and "Running entrypoint for job <id>: python -m rtjob.runside.companion '...'" (the companion's wrapper, not
the user's command), the companion's own "rtjob companion: ..." lines, and the "rtjob-event: ..." lines rtjob's
entrypoints print for the run's timeline (runs/events.py, training/events.py: the companion records them in the
run's record). Every reader that shows a log to a person (`rtjob logs`, the followed output of `submit` / `wait`,
the UI's log endpoints) passes it through here; what the script prints, Ray's INFO of its own ray.init included,
stays. The stored log keeps every line: `rtjob logs --raw` prints it as it is.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterable, Iterator
from typing import TextIO

import rtjob_contract as contract

from ..core.end_words import COMPANION_PREFIX
from ..core.secret_refs import NOT_STARTED

# The one pattern of a terminal's escape sequences (colours, cursor moves, titles): hidden lines are matched without
# them, and the UI's search shows lines as a terminal leaves them (terminal_line).
ESCAPES = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")
# A line a Ray worker printed comes with its actor's prefix: "(RayTrainWorker pid=12, ip=10.0.0.1) text".
_ACTOR_PREFIX = re.compile(r"^\([^()]*\) ")
_RAY_JOB_MANAGER = re.compile(r"^Running entrypoint for job \S+: |\bjob_manager\.py:\d+ -- Runtime env is setting up\.")


def hidden(line: str) -> bool:
    """True for a line of the driver log that is not the script's output (see the module's docstring)."""
    text = ESCAPES.sub("", line).rstrip("\r\n")
    if _RAY_JOB_MANAGER.search(text):
        return True
    own = _ACTOR_PREFIX.sub("", text, count=1)
    if own.startswith(COMPANION_PREFIX) and own.endswith(NOT_STARTED):
        return False  # why the script never ran (a secret not resolved): the one companion line a reader needs
    return own.startswith((COMPANION_PREFIX, contract.EVENT_LINE_PREFIX))


def terminal_line(line: str) -> str:
    """One log line as a terminal leaves it: escape sequences (colours) dropped, a carriage-return-redrawn line
    (a progress bar) reduced to its last state."""
    line = line.rstrip("\r")
    if "\r" in line:
        line = line.rsplit("\r", 1)[1]
    return ESCAPES.sub("", line)


def user_text(text: str) -> str:
    """``text`` (whole lines, the last one may be unfinished) without its hidden lines."""
    return "".join(line for line in text.splitlines(keepends=True) if not hidden(line))


def user_chunks(chunks: Iterable[str]) -> Iterator[str]:
    """Chunks of a log (as read: a line may span two) without their hidden lines; empty chunks are not yielded."""
    rest = ""
    for chunk in chunks:
        text = rest + chunk
        cut = max(text.rfind("\n"), text.rfind("\r")) + 1
        text, rest = text[:cut], text[cut:]
        shown = user_text(text)
        if shown:
            yield shown
    if rest and not hidden(rest):
        yield rest


def user_tail(chunks: Iterable[str], lines: int) -> str:
    """The last ``lines`` lines of the user's view of ``chunks`` (the tail of a log, read with some slack)."""
    kept = "".join(user_chunks(chunks)).splitlines(keepends=True)
    return "".join(kept[-lines:])


class UserView(io.TextIOBase):
    """A text stream that passes on the user's view of what is written to it: a followed log (runs/lifecycle/follow.py
    writes it a line at a time; a line written in pieces is held until its end)."""

    def __init__(self, out: TextIO) -> None:
        super().__init__()
        self.out = out
        self.rest = ""

    def write(self, text: str) -> int:
        whole = self.rest + text
        cut = whole.rfind("\n") + 1
        self.rest = whole[cut:]
        shown = user_text(whole[:cut])
        if shown:
            self.out.write(shown)
        return len(text)

    def flush(self) -> None:
        self.out.flush()


# Lines read beyond a --tail N so that the user's view still has N lines once the hidden ones are dropped (a
# log's hidden lines are a handful: the two of Ray's, the events, a companion's rare notice).
TAIL_SLACK = 50


def lines_to_read(tail_lines: int | None, raw: bool) -> int | None:
    """How many lines of a log to read for a --tail ``tail_lines`` (None: all): the user's view reads TAIL_SLACK
    more, ``raw`` shows every line read."""
    return tail_lines + TAIL_SLACK if tail_lines and not raw else tail_lines
