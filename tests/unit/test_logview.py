"""The user's view of a run's log (runs/logview.py): what the script printed, without Ray's job-manager lines, the
companion's wrapper and notices, and rtjob's event lines; shared by `rtjob logs`, a followed run and the UI."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rtjob.core.model import RunStatus
from rtjob.runs import logview
from rtjob.runs.lifecycle import follow, logtail

import rtjob_contract as contract
from tests.unit.test_follow import FileBackend

# A driver log as Ray 2.60 and rtjob write it: Ray's two lines first, the companion's notice, rtjob's events (one
# from a Ray Train worker, with its actor's prefix and colours), and the script's own output, Ray's INFO included.
RAW = (
    "2026-11-27 10:03:11,123\tINFO job_manager.py:581 -- Runtime env is setting up.\n"
    "Running entrypoint for job rtjob-mnist-1a2b: python -m rtjob.runside.companion 'python train.py'\n"
    "rtjob companion: log part 0 not uploaded (tried again): timed out\n"
    "epoch 1 loss 0.5\n"
    f"{contract.EVENT_LINE_PREFIX} {contract.EVENT_FIRST_STEP}\n"
    f"\x1b[36m(RayTrainWorker pid=4242, ip=10.0.0.1)\x1b[0m {contract.EVENT_LINE_PREFIX} "
    f"{contract.EVENT_WORKERS_STARTED}\n"
    f"{contract.EVENT_LINE_PREFIX} system_row\n"  # a kind added later is hidden too
    "2026-11-27 10:03:15,001\tINFO worker.py:1800 -- Connected to Ray cluster.\n"
    "(RayTrainWorker pid=4242) loss went down\n"
    "my script says rtjob-event: is a fine word mid-line\n"
    "done"
)
SHOWN = (
    "epoch 1 loss 0.5\n"
    "2026-11-27 10:03:15,001\tINFO worker.py:1800 -- Connected to Ray cluster.\n"
    "(RayTrainWorker pid=4242) loss went down\n"
    "my script says rtjob-event: is a fine word mid-line\n"
    "done"
)


def test_the_view_keeps_the_scripts_output_and_hides_rays_and_rtjobs_lines() -> None:
    assert logview.user_text(RAW) == SHOWN


@pytest.mark.parametrize("size", [1, 5, 64, len(RAW)])
def test_chunks_cut_anywhere_give_the_same_view(size: int) -> None:
    chunks = [RAW[i:i + size] for i in range(0, len(RAW), size)]
    assert "".join(logview.user_chunks(chunks)) == SHOWN


def test_one_escape_pattern_for_hidden_lines_and_the_uis_search() -> None:
    """A line cleared and coloured by a progress display (erase-line, cursor moves) is matched as what it says:
    hidden when it is rtjob's, shown as a terminal leaves it (the UI's search) when it is the script's."""
    assert logview.hidden(f"\x1b[2K\x1b[1G\x1b[36m(RayTrainWorker pid=1)\x1b[0m {contract.EVENT_LINE_PREFIX} x")
    assert not logview.hidden("\x1b[2K\x1b[?25lepoch 2 loss 0.4")
    assert logview.terminal_line("\x1b]0;title\x07\x1b[2Kepoch 2 loss 0.4\x1b[?25h") == "epoch 2 loss 0.4"


def test_a_tail_counts_only_shown_lines() -> None:
    assert logview.user_tail([RAW], 2) == "my script says rtjob-event: is a fine word mid-line\ndone"


def test_the_companions_own_lines_are_hidden(capsys: pytest.CaptureFixture[str]) -> None:
    from rtjob.runside.companion import say

    say("the run's record was not written")
    printed = capsys.readouterr().err
    assert "record was not written" in printed and logview.user_text(printed) == ""


def test_why_the_script_never_started_is_the_one_companion_line_shown(capsys: pytest.CaptureFixture[str]) -> None:
    """A secret the node cannot resolve: the companion's line saying so is what `rtjob logs` and the UI show of a
    run whose script never ran (its other lines stay hidden)."""
    import json

    from rtjob.core import secret_refs
    from rtjob.runside.companion import say
    from rtjob.runside.secret_env import RunSecrets

    import rtjob_contract as contract

    RunSecrets({secret_refs.ENV_SECRETS: json.dumps({"TOK": "file:///nonexistent/rtjob-token"}),
                contract.ENV_RUN_NAME: "r-1"}, say)
    say("the run's record was not written")
    shown = logview.user_text(capsys.readouterr().err)
    assert shown.count("\n") == 1 and "secrets.TOK: file:///nonexistent/rtjob-token could not be resolved" in shown
    assert shown.rstrip().endswith(secret_refs.NOT_STARTED), shown


def test_training_event_lines_are_hidden(capsys: pytest.CaptureFixture[str]) -> None:
    from training import events

    events._said.discard("logview_test_event")
    events.say_once("logview_test_event", rank=0)
    events._said.discard("logview_test_event")
    printed = capsys.readouterr().out
    assert printed.startswith(contract.EVENT_LINE_PREFIX) and logview.user_text(printed) == ""


def test_a_followed_log_prints_the_users_view_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Through the follower (its stream dropped mid-way and replayed, then the full log read once more): each shown
    line once, in order; the hidden lines still count for skipping the replay."""
    monkeypatch.setattr(follow, "POLL_S", 0.01)
    monkeypatch.setattr(logtail, "RECONNECT_S", 0.01)
    path = tmp_path / "job-driver-r1.log"
    path.write_bytes(RAW.encode())
    backend = FileBackend(path, 7, 200)
    out = io.StringIO()
    info = follow.follow(backend, "r1", out=logview.UserView(out))  # type: ignore[arg-type]
    assert info.status == RunStatus.SUCCEEDED and backend.connections >= 2
    assert out.getvalue() == SHOWN + "\n"
