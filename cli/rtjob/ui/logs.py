"""A run's log as the UI shows it: the user's view of its stored log (runs/logview.py) as a tail, the whole of it,
a search with context, and a running run's new parts as its companion writes them."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ..core.record import RunRecord
from ..runs.logview import terminal_line
from ..runs.view import RunView

LOG_TAIL_LINES = 1000


def log_tail(record: RunRecord, lines: int | None = LOG_TAIL_LINES) -> Iterator[str]:
    """The user's view of the run's stored log (runs/logview.py) as text chunks ending at line ends (its last
    ``lines``; None: all of it), streamed."""
    from ..runs.lifecycle.archive import archived_log
    from ..runs.logview import TAIL_SLACK, user_chunks, user_tail

    if record.steps:  # a pipeline has no log of its own: its steps', in order, as `rtjob logs PIPELINE_ID` prints
        return _steps_log(record, lines)
    if lines is None:
        return user_chunks(archived_log(record, None))
    return iter([user_tail(archived_log(record, lines + TAIL_SLACK), lines)])


def _steps_log(record: RunRecord, lines: int | None) -> Iterator[str]:
    """A pipeline's steps' logs, each under a line naming the step and its run (commands/pipeline.pipeline_logs)."""
    from ..core.errors import RtjobError
    from ..runs.memory import find

    for step in record.steps:
        run_id = str(step.get("run_id"))
        yield f"== step {step.get('name')}: {run_id} ==\n"
        # <root>/<job>/<run id>: its record is found in its root, else in the pipeline's own
        folder = str(step.get("storage_uri") or record.storage_uri or "")
        try:
            found = find(run_id, folder.rsplit("/", 2)[0] if folder.count("/") >= 2 else None, record.storage_endpoint)
            if found is None:
                yield "(no record of this step's run)\n"
                continue
            yield from log_tail(found, lines)
        except RtjobError as exc:
            yield f"(no log: {exc.message})\n"


def log_search(record: RunRecord, needle: str, limit: int = 1000) -> Iterator[tuple[int, str]]:
    """(line number, line) of each line holding ``needle`` (case-insensitive), streamed through the whole log."""
    lowered = needle.lower()
    number = 0
    found = 0
    for chunk in log_tail(record, None):
        for line in chunk.splitlines():
            number += 1
            if lowered in line.lower():
                yield number, line
                found += 1
                if found >= limit:
                    return


class LogFollower:
    """A running run's log as it grows: the parts its companion writes (immutable, cut at line ends), each read
    once, as they appear. ``start`` skips the parts already there (the page shows their tail)."""

    def __init__(self, view: RunView) -> None:
        from rtjob_contract import LOG_PART_PREFIX, RUN_LOGS_DIR

        from ..runs.places import log_home

        assert view.record is not None
        self.home, self.endpoint = log_home(view.record)
        self.prefix = f"{RUN_LOGS_DIR}/{view.latest}"  # its latest attempt's log: the run's log now
        self.part_prefix = LOG_PART_PREFIX
        self.seen: set[str] = set()

    def _parts(self) -> list[str]:
        from ..storage.opening import objects_for

        with objects_for(self.home, self.endpoint) as objects:
            return [item.rel for item in objects.list(self.prefix)
                    if item.rel.rsplit("/", 1)[-1].startswith(self.part_prefix)]

    def start(self, skip: int | None = None) -> None:
        """Count the parts there now as read (``skip``: only the first ``skip`` of them: those a tail already
        showed)."""
        parts = self._parts()
        self.seen.update(parts if skip is None else parts[:skip])

    def count(self) -> int:
        return len(self._parts())

    def new_text(self) -> str:
        """The text of the parts written since the last call ('' if none)."""
        from ..storage.opening import objects_for

        fresh = [rel for rel in self._parts() if rel not in self.seen]
        if not fresh:
            return ""
        out: list[bytes] = []
        with objects_for(self.home, self.endpoint) as objects:
            for rel in fresh:
                out.extend(objects.stream(rel))
                self.seen.add(rel)
        from ..runs.logview import user_text

        return user_text(b"".join(out).decode("utf-8", errors="replace"))  # parts end at line ends


def marked(line: str, needle: str) -> list[tuple[str, bool]]:
    """``line`` cut into (text, is a match of ``needle``) pieces, case-insensitively."""
    out: list[tuple[str, bool]] = []
    lowered, size, at = line.lower(), len(needle), 0
    while needle:
        found = lowered.find(needle.lower(), at)
        if found < 0:
            break
        if found > at:
            out.append((line[at:found], False))
        out.append((line[found:found + size], True))
        at = found + size
    if at < len(line) or not out:
        out.append((line[at:], False))
    return out


def log_matches(record: RunRecord, needle: str, context: int = 2, limit: int = 200) -> list[list[dict[str, Any]]]:
    """The log's lines holding ``needle`` with ``context`` lines either side, as groups of adjacent lines
    [{n, pieces, match}] (overlapping contexts merged); at most ``limit`` matches."""
    from collections import deque

    groups: list[list[dict[str, Any]]] = []
    before: deque[tuple[int, str]] = deque(maxlen=context)
    after = 0
    found = 0
    number = 0
    lowered = needle.lower()
    current: list[dict[str, Any]] | None = None
    for chunk in log_tail(record, None):
        for raw in chunk.splitlines():
            number += 1
            line = terminal_line(raw)
            if lowered in line.lower() and found < limit:
                found += 1
                first = before[0][0] if before else number
                if current is None or current[-1]["n"] < first - 1:
                    current = []
                    groups.append(current)
                current.extend({"n": n, "pieces": [(t, False)], "match": False} for n, t in before)
                current.append({"n": number, "pieces": marked(line, needle), "match": True})
                before.clear()
                after = context
            elif after > 0 and current is not None:
                current.append({"n": number, "pieces": [(line, False)], "match": False})
                after -= 1
            else:
                before.append((number, line))
        if found >= limit and after <= 0:
            break
    return groups
