"""An unknown run id is bad input (exit 2) whether or not its cluster runs, and points at `rtjob runs` (the runs
rtjob knows, which outlive their cluster); `rtjob list` with the embedded cluster down points there too."""

from __future__ import annotations

from pathlib import Path

import pytest
from rtjob.backends import register
from support.cli import main_captured
from support.project import scrub
from support.toy_backend.backend import ToyBackend

register("toy", "support.toy_backend.backend:ToyBackend")


@pytest.fixture(autouse=True)
def _home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    scrub(monkeypatch)
    monkeypatch.setenv("RTJOB_HOME", str(tmp_path / "home"))  # no embedded cluster was ever started here
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    monkeypatch.chdir(tmp_path)
    ToyBackend.runs.clear()



@pytest.mark.parametrize("command", ["status", "wait", "logs"])
def test_an_unknown_run_with_the_embedded_cluster_down_is_bad_input(capsys: pytest.CaptureFixture[str],
                                                                      command: str) -> None:
    code, out, err = main_captured(capsys, command, "nosuchid", "--backend", "local")
    assert code == 2 and out == "", err
    assert "no run 'nosuchid'" in err and "rtjob runs lists the runs rtjob knows" in err and err.count("\n") == 1


def test_an_unknown_run_on_a_cluster_that_runs_points_at_rtjob_runs(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = main_captured(capsys, "status", "nosuchid", "--backend", "toy")
    assert code == 2 and "no run 'nosuchid' on the toy backend" in err and "rtjob runs lists the runs" in err


def test_list_with_the_embedded_cluster_down_points_at_rtjob_runs(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = main_captured(capsys, "list", "--backend", "local")
    assert code == 3 and "not running" in err and "rtjob runs lists the runs rtjob knows" in err
