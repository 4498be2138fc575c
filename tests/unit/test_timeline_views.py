"""A retried run's timeline in every view that shows one: its last attempt's stages (`show`, the UI's card, drawn
as one bar there), each earlier attempt one line under it (its end, its duration), from a record the kernel's
transitions wrote (core/lifecycle)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from rtjob.core import lifecycle
from rtjob.core.retry_rule import AttemptEnd
from rtjob.storage.run_ports import run_ports
from rtjob.ui.app import Config, create_app
from support.cli import main_captured
from support.ui_runs import UI_PORT, call, write_run


def _retried(root: Path) -> None:
    record = write_run(root, "u-two", "train", status="PENDING")
    record.attempts, record.timeline, record.end_time, record.completed_by = [], {}, None, None
    for step in (lifecycle.Submitted("2026-11-20T10:00:00.000+00:00"),
                 lifecycle.Started("u-two", 1, "2026-11-20T10:00:05.000+00:00"),
                 lifecycle.AttemptEnded("u-two", 1, AttemptEnd("FAILED", 137), "killed", "2026-11-20T10:00:30.125+00:00"),
                 lifecycle.Retrying(1, "its driver was lost", "u-two", "u-two-retry1", "2026-11-20T10:00:31.000+00:00"),
                 lifecycle.Started("u-two-retry1", 2, "2026-11-20T10:00:40.000+00:00"),
                 lifecycle.AttemptEnded("u-two-retry1", 2, AttemptEnd("SUCCEEDED", 0), None,
                                        "2026-11-20T10:01:19.000+00:00")):
        lifecycle.apply(record, step)
    assert record.storage_uri is not None
    lifecycle.write(run_ports(record.storage_uri), [], mine=record)


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("timeline-storage")
    _retried(root)
    return root


def test_show_prints_the_last_attempts_timeline_and_each_earlier_attempt(root: Path, capsys: Any) -> None:
    code, out, err = main_captured(capsys, "show", "u-two", "--storage", str(root))
    assert code == 0, err
    line = next(line for line in out.splitlines() if line.startswith("timeline:"))
    assert line == "timeline:    submitted +0.0s, driver started +9.0s, ended +48.0s", out  # not ended +30.1s
    assert "attempt 1 (u-two): FAILED, ended 2026-11-20T10:00:30Z after 30.1s" in out, out


def test_the_ui_card_draws_the_last_attempts_timeline_as_a_bar_with_the_earlier_attempt_under_it(root: Path) -> None:
    app = create_app(Config(storage=str(root), lookup_root=str(root), endpoint=None, host="127.0.0.1", port=UI_PORT,
                            token=None))
    card = call(app, "/runs/u-two/card")[2]
    assert "(attempt 2, the last)" in card and card.count('class="stage stage-') == 3, card
    assert 'title="ended +48.0s"' in card and 'style="left: 18.75%; width: 81.25%"' in card  # driver started..end
    assert "attempt 1 (<code>u-two</code>): FAILED, ended 2026-11-20T10:00:30Z after 30 s" in card, card


def test_status_says_the_same_in_text_and_json_with_its_cluster_gone(root: Path, capsys: Any) -> None:
    from rtjob.runs.memory import remember
    from rtjob.storage.records import read_record

    remember(read_record(str(root / "train" / "u-two"), None))  # as `rtjob runs --storage` leaves it
    code, out, err = main_captured(capsys, "status", "u-two", "--backend", "local", "-o", "json")
    assert code == 0, err
    told = json.loads(out)
    assert told["timeline"]["submitted"] == "2026-11-20T10:00:31.000+00:00", told  # the last attempt's
    assert told["earlier_attempts"] == [{"attempt": 1, "id": "u-two", "status": "FAILED",
                                         "ended": "2026-11-20T10:00:30.125+00:00", "duration_s": 30.125}]
    code, out, err = main_captured(capsys, "status", "u-two", "--backend", "local")
    assert code == 0 and "ended +48.0s" in out and "attempt 1 (u-two): FAILED" in out, out + err
