"""Following a run's log (runs/lifecycle/follow.py): every line printed once, whichever source delivered it.

Ray serves one file two ways: the State API stream sends its bytes, the full log (`/api/jobs/<id>/logs`, read once
more when the run ends) is the file read in text mode, where a lone carriage return ends a line. A progress bar
(tqdm redraws with "\\r") used to shift the full log's line count past the stream's, and the follower printed the
log's last lines again (one per "\\r"). The fake backend below serves a real file both ways, as Ray 2.60 does."""

from __future__ import annotations

import asyncio
import io
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from rtjob.core.model import RunInfo, RunStatus
from rtjob.runs.lifecycle import follow, logtail

# A job's driver log as bytes on disk: lines repeated on purpose, a progress bar redrawn with "\r", a line from a
# Windows tool ("\r\n"), lines after them, and a last line without newline.
LOG = (b"line 1\nsame\nsame\n\rprogress 1/3\rprogress 2/3\rprogress 3/3\nwindows line\r\nline 2\nline 3\n"
       b"last words")
PRINTED = ["line 1", "same", "same", "", "progress 1/3", "progress 2/3", "progress 3/3", "windows line", "line 2",
           "line 3", "last words"]


class FileBackend:
    """Serves a driver log file as Ray does: tail() its bytes in ``chunk``-byte pieces (the first connection drops
    after ``first_drop`` bytes, later ones replay it all), logs() the file in text mode (Ray's
    JobLogStorageClient.get_logs: `open(path, "r").read()`). The run ends once a connection has sent everything."""

    def __init__(self, path: Path, chunk: int, first_drop: int) -> None:
        self.path = path
        self.chunk = chunk
        self.first_drop = first_drop
        self.connections = 0
        self.streamed_all = False

    def status(self, run_id: str) -> RunInfo:
        status = RunStatus.SUCCEEDED if self.streamed_all else RunStatus.RUNNING
        return RunInfo(id=run_id, job="count", backend="ray", status=status)

    async def tail(self, run_id: str) -> AsyncIterator[str]:
        self.connections += 1
        data = self.path.read_bytes()
        if self.connections == 1:
            data = data[:self.first_drop]  # the stream ends early (Ray #51601): the follower reconnects
        for start in range(0, len(data), self.chunk):
            yield data[start:start + self.chunk].decode()
            await asyncio.sleep(0)
        self.streamed_all = self.connections > 1

    def logs(self, run_id: str) -> str:
        with open(self.path) as f:  # text mode, universal newlines, exactly as Ray reads it
            return f.read()


@pytest.mark.parametrize("chunk", [1, 7, len(LOG)])  # 1 and 7 cut between a "\r" and its "\n"
@pytest.mark.parametrize("first_drop", [18, 24, 70])  # just after a "\r", mid progress bar, inside "\r\n"
def test_each_line_is_printed_once_across_the_stream_its_replay_and_the_full_log(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int, first_drop: int) -> None:
    monkeypatch.setattr(follow, "POLL_S", 0.01)
    monkeypatch.setattr(logtail, "RECONNECT_S", 0.01)
    path = tmp_path / "job-driver-r1.log"
    path.write_bytes(LOG)
    backend = FileBackend(path, chunk, first_drop)
    out = io.StringIO()
    info = follow.follow(backend, "r1", out=out)  # type: ignore[arg-type]
    assert info.status == RunStatus.SUCCEEDED and backend.connections >= 2
    assert out.getvalue() == "".join(f"{line}\n" for line in PRINTED)


def test_lines_end_as_in_text_mode_across_chunks() -> None:
    lines = logtail.Lines()
    assert lines.feed("a\r") == []  # the "\r" may be half of a "\r\n"
    assert lines.feed("\nb\rc") == ["a", "b"] and lines.rest == "c"
    assert lines.feed("\r") == [] and lines.feed("", final=True) == ["c"] and lines.rest == ""
