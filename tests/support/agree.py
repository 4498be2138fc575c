"""Every view of one run as a teammate on another machine reads it (a fresh RTJOB_HOME, the same storage): `runs
--storage`, `status` and `show` (-o json), and `rtjob ui`'s list and page (HTML) and its API (`/api/runs`,
`/api/runs/ID`), each in this process (no interpreter start-up each; the clock can be moved on, as a reader later
than the run would be), so that a test asserts they say one verdict: status, end reason, line, attempts, duration
(issue 43)."""

from __future__ import annotations

import contextlib
import datetime as dt
import html
import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from .cli import run_in_process
from .ui_runs import UI_PORT, call

AGREED = ("status", "reason", "line", "attempts", "duration_s", "start_time", "end_time")


@dataclass(frozen=True)
class Views:
    said: dict[str, dict[str, Any]]  # each view's verdict (AGREED), by the view's name
    listed: dict[str, list[str]]  # the ids each list shows (`runs --storage`, the UI's): one row a run
    status_stderr: str  # what `status` told besides (a teammate's lookup must blame no cluster of theirs)
    html_list: str  # the UI's runs list row of the run
    html_page: str  # the UI's run page

    def agree(self) -> dict[str, Any]:
        """The one verdict every view says (asserted here), for the test to check against what it knows."""
        first = next(iter(self.said.values()))
        for name, seen in self.said.items():
            assert seen == first, f"{name} says {seen}, {next(iter(self.said))} says {first}"
        status = first["status"]
        assert f'class="run status-{status.lower()}"' in self.html_list, self.html_list
        assert (f"{first['attempts']} attempts" in self.html_list) == (first["attempts"] > 1), self.html_list
        assert re.search(rf'id="status">{status}<', self.html_page), self.html_page[:3000]
        if first["line"]:
            assert html.escape(first["line"])[:60] in self.html_page, (first["line"], self.html_page[:3000])
        return first


def _picked(seen: dict[str, Any]) -> dict[str, Any]:
    from rtjob.core.model import stamp

    out = {key: seen.get(key) for key in AGREED}
    for key in ("start_time", "end_time"):  # the API's times are printed to the second; the CLI's as recorded
        out[key] = stamp(out[key]) if out[key] else None
    return out


@contextlib.contextmanager
def _as(env: dict[str, str], now: dt.datetime | None) -> Iterator[None]:
    from rtjob.core import clock

    with pytest.MonkeyPatch.context() as patch:
        for name in set(os.environ) - set(env):
            patch.delenv(name)
        for name, value in env.items():
            patch.setenv(name, value)
        if now is not None:
            patch.setattr(clock, "now", lambda: now)
        yield


def views(run_id: str, storage: str, env: dict[str, str], now: dt.datetime | None = None) -> Views:
    """``run_id`` in every view of a teammate whose environment is ``env`` (its own RTJOB_HOME), reading
    ``storage`` (the team's root); ``now``: the readers' clock (default: the real one)."""
    from rtjob.ui.app import Config, create_app

    said: dict[str, dict[str, Any]] = {}
    with _as(env, now):
        team = run_in_process("runs", "--storage", storage, "-o", "json", env=env)
        assert team.returncode == 0, team.stderr
        rows = json.loads(team.stdout)
        said["runs --storage"] = _picked(next(r for r in rows if r["id"] == run_id)["verdict"])
        stderr = ""
        for command in ("status", "show"):
            got = run_in_process(command, run_id, "-o", "json", env=env)
            assert got.returncode == 0, (command, got.stderr)
            said[command] = _picked(json.loads(got.stdout)["verdict"])
            stderr = got.stderr if command == "status" else stderr
        mine = run_in_process("runs", "-o", "json", env=env)  # this machine's ledger, which the reads above taught
        assert mine.returncode == 0, mine.stderr
        said["runs"] = _picked(next(r for r in json.loads(mine.stdout) if r["id"] == run_id)["verdict"])
        app = create_app(Config(storage=storage, lookup_root=storage, endpoint=None, host="127.0.0.1", port=UI_PORT,
                                token=None))
        listed = json.loads(call(app, "/api/runs")[2])["runs"]
        said["ui /api/runs"] = _picked(next(r for r in listed if r["id"] == run_id))
        said["ui /api/runs/ID"] = _picked(json.loads(call(app, f"/api/runs/{run_id}")[2])["verdict"])
        page = call(app, "/")[2]
        row = re.search(rf'<tr class="run[^"]*" data-run="{re.escape(run_id)}">.*?</tr>', page, re.S)
        assert row, page[:3000]
        card = call(app, f"/runs/{run_id}/card")[2]
    ids = {"runs --storage": [r["id"] for r in rows], "ui": [r["id"] for r in listed]}
    return Views(said, ids, stderr, row.group(0), card)
