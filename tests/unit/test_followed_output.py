"""`submit`, `rerun` and `wait` with -o json|yaml print one document for every exit that has a run id: when rtjob
stops following before the run's end (the --timeout, a lost cluster, a run stopped because it waits in vain,
Ctrl-C), the run as last known plus the one-line ``error``; the exit code and the error line are unchanged."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import yaml
from rtjob.backends import register
from rtjob.core.model import RunInfo, RunStatus
from rtjob.runs.lifecycle import follow, stuck_watch
from support.cli import main_captured
from support.project import scrub
from support.toy_backend.backend import ToyBackend

register("toy", "support.toy_backend.backend:ToyBackend")


@pytest.fixture(autouse=True)
def _home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    scrub(monkeypatch)
    monkeypatch.setenv("RTJOB_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(follow, "POLL_S", 0.01)
    ToyBackend.runs.clear()
    ToyBackend.calls.clear()
    ToyBackend.runs["t1"] = RunInfo(id="t1", job="count", backend="toy", status=RunStatus.RUNNING,
                                    start_time="2026-11-25T10:00:00+00:00", address="toy://this-process")



@pytest.mark.parametrize("output", ["json", "yaml"])
def test_wait_past_its_timeout_prints_the_run_and_the_error(capsys: pytest.CaptureFixture[str], output: str) -> None:
    code, out, err = main_captured(capsys, "wait", "t1", "--backend", "toy", "--timeout", "0.2s", "-o", output)
    assert code == 4
    doc = json.loads(out) if output == "json" else yaml.safe_load(out)
    assert doc["id"] == "t1" and doc["status"] == "RUNNING"
    assert "after the --timeout" in doc["error"] and "\n" not in doc["error"]
    assert f"rtjob: error: {doc['error']}" in err  # the same one line on stderr


def test_a_run_stopped_because_it_waits_in_vain_prints_its_document(capsys: pytest.CaptureFixture[str],
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The follower's never-fits stop (exit 2) used to leave stdout empty."""
    from rtjob.backends.base import Stuck

    monkeypatch.setattr(stuck_watch, "STUCK_POLL_S", 0.0)
    monkeypatch.setenv("RTJOB_STUCK_GRACE_S", "0")
    monkeypatch.setattr(ToyBackend, "stuck", lambda self, run_id: Stuck("1 GPU per worker", final=True))
    seen = ToyBackend.status  # a copy per read, as a remote backend answers (the toy's stop changes its own)
    monkeypatch.setattr(ToyBackend, "status", lambda self, run_id: dataclasses.replace(seen(self, run_id)))
    code, out, err = main_captured(capsys, "wait", "t1", "--backend", "toy", "-o", "json")
    assert code == 2, err
    doc = json.loads(out)
    assert doc["id"] == "t1" and doc["status"] == "STOPPED" and "was stopped: it waited for 1 GPU" in doc["error"]
    assert ToyBackend.runs["t1"].status == RunStatus.STOPPED
    # One line where rtjob's stop begins: Ray's shutdown output after it reads as Ray's.
    assert "resources that will not come: stopping t1 ... (Ray's shutdown output" in err


def test_rtjob_stop_says_where_its_stop_begins(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = main_captured(capsys, "stop", "t1", "--backend", "toy")
    assert code == 0 and err.splitlines()[0].startswith("rtjob: stopping t1 ... (Ray's shutdown output")
    assert "'*** SIGTERM received'" in err.splitlines()[0] and err.splitlines()[1] == "rtjob: t1: STOPPED"
    code, out, err = main_captured(capsys, "stop", "t1", "--backend", "toy", "-o", "json")  # stopped already
    doc = json.loads(out)
    assert code == 0 and doc["status"] == doc["verdict"]["status"] == "STOPPED", (out, err)  # its verdict too


def test_text_output_keeps_stdout_for_the_log(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = main_captured(capsys, "wait", "t1", "--backend", "toy", "--timeout", "0.2s")
    assert code == 4 and out == "" and "after the --timeout" in err


def test_a_pipeline_that_rtjob_stops_following_prints_its_document(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """The pipeline's document (each step's status as last known) and the error, exit as the error's."""
    from support.project import ProjectCli, write_files

    cli = ProjectCli(tmp_path, monkeypatch, capsys)
    write_files(cli.project, {"rtjob.toml": f'storage = "{tmp_path / "runs"}"\n', "jobs/flow.yaml": (
        "name: flow\ndefaults:\n  requirements: []\nsteps:\n  - name: prep\n    entrypoint: python -c pass\n"
        "  - name: train\n    entrypoint: python -c pass\n")})
    proc = cli("submit", "flow", "--backend", "toy", "--submission-id", "p1", "--timeout", "0.3s", "-o", "json")
    assert proc.returncode == 4, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["id"] == "p1" and [s["status"] for s in doc["steps"]] == ["PENDING", None]
    assert "after the --timeout" in doc["error"] and f"rtjob: error: {doc['error']}" in proc.stderr


def test_wait_for_a_run_its_cluster_forgot_before_its_end_prints_the_record(capsys: pytest.CaptureFixture[str]) -> None:
    from rtjob.core.record import RunRecord
    from rtjob.runs.memory import ledger

    ledger().save(RunRecord(id="gone1", job="count", backend="toy", status="RUNNING"))
    code, out, err = main_captured(capsys, "wait", "gone1", "--backend", "toy", "-o", "json")
    doc = json.loads(out)
    assert code == 2 and doc["id"] == "gone1" and doc["status"] == "UNKNOWN"
    assert "its cluster no longer knows this run" in doc["error"] and f"rtjob: error: {doc['error']}" in err


def test_wait_prints_the_verdict_that_status_prints(capsys: pytest.CaptureFixture[str]) -> None:
    """One verdict: `wait -o json` of an ended run carries the same `verdict` as `status -o json` (its start, end,
    duration, attempts, reason and line), from the record the wait archived."""
    ToyBackend.runs["t1"] = dataclasses.replace(ToyBackend.runs["t1"], status=RunStatus.FAILED, exit_code=3,
                                                end_time="2026-11-25T10:01:30.250+00:00",
                                                message="the entrypoint exited with code 3")
    code, out, err = main_captured(capsys, "wait", "t1", "--backend", "toy", "-o", "json")
    assert code == 1, err
    waited = json.loads(out)["verdict"]
    code, out, err = main_captured(capsys, "status", "t1", "--backend", "toy", "-o", "json")
    assert code == 0, err
    assert waited == json.loads(out)["verdict"], (waited, out)
    assert waited["duration_s"] == 90.25 and waited["reason"] == "script_failed"
    assert waited["line"] == "the entrypoint exited with code 3"


def test_wait_of_an_ended_run_its_cluster_forgot_carries_the_verdict_that_status_prints(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The wait that answers from the run's record (its cluster no longer knows it) prints the same ``verdict`` as
    `status -o json` of that run, as a followed end's document does."""
    from rtjob.core.record import RunRecord
    from rtjob.runs.memory import ledger

    ledger().save(RunRecord(id="old1", job="count", backend="toy", status="FAILED", exit_code=1, archived=True,
                            start_time="2026-11-25T10:00:00.000+00:00", end_time="2026-11-25T10:00:42.500+00:00",
                            message="the entrypoint exited with code 1"))
    code, out, err = main_captured(capsys, "wait", "old1", "--backend", "toy", "-o", "json")
    assert code == 1 and "(from the run record)" in err, err
    waited = json.loads(out)
    code, out, err = main_captured(capsys, "status", "old1", "--backend", "toy", "-o", "json")
    assert code == 0, err
    assert waited["verdict"] == json.loads(out)["verdict"], (waited, out)
    assert waited["verdict"]["duration_s"] == 42.5 and waited["verdict"]["status"] == waited["status"] == "FAILED"


def test_wait_of_an_ended_pipeline_carries_the_verdict_that_status_prints(capsys: pytest.CaptureFixture[str]) -> None:
    """A pipeline run's `wait -o json` and `stop -o json` head their documents as `status -o json` does: its
    status, start, end and the whole ``verdict`` (its record's end, its steps as recorded)."""
    from rtjob.core.record import RunRecord
    from rtjob.runs.memory import ledger

    steps = [{"name": "prep", "run_id": "pp1-prep"}, {"name": "train", "run_id": "pp1-train"}]
    for name, end in (("prep", "10:00:30"), ("train", "10:02:00")):
        ledger().save(RunRecord(id=f"pp1-{name}", job=name, backend="toy", status="SUCCEEDED", archived=True,
                                pipeline="pp1", start_time="2026-11-25T10:00:00+00:00",
                                end_time=f"2026-11-25T{end}+00:00"))
    ledger().save(RunRecord(id="pp1", job="flow", backend="toy", status="SUCCEEDED", archived=True, steps=steps,
                            start_time="2026-11-25T10:00:00+00:00", end_time="2026-11-25T10:02:00+00:00"))
    code, out, err = main_captured(capsys, "wait", "pp1", "--backend", "toy", "-o", "json")
    assert code == 0, err
    waited = json.loads(out)
    assert [(s["name"], s["run_id"], s["status"]) for s in waited["steps"]] == [
        ("prep", "pp1-prep", "SUCCEEDED"), ("train", "pp1-train", "SUCCEEDED")]
    code, out, err = main_captured(capsys, "status", "pp1", "--backend", "toy", "-o", "json")
    assert code == 0, err
    shown = json.loads(out)
    assert waited["verdict"] == shown["verdict"] and waited["verdict"]["duration_s"] == 120
    assert (waited["status"], waited["start_time"], waited["end_time"]) == (
        shown["status"], shown["start_time"], shown["end_time"]) == (
        "SUCCEEDED", "2026-11-25T10:00:00+00:00", "2026-11-25T10:02:00+00:00")
    code, out, err = main_captured(capsys, "stop", "pp1", "--backend", "toy", "-o", "json")  # nothing left to stop
    assert code == 0 and json.loads(out)["verdict"] == shown["verdict"], (out, err)


def test_logs_follow_ends_with_the_verdicts_line_and_archives_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    """`logs --follow` is a read: it archives nothing, yet its end line is the verdict's, as `wait`'s is: the end
    its companion recorded (its words, its end time) over the backend's last answer."""
    from rtjob.core.record import RunRecord
    from rtjob.runs.memory import ledger

    ToyBackend.runs["t1"] = dataclasses.replace(ToyBackend.runs["t1"], status=RunStatus.FAILED, exit_code=1,
                                                end_time="2026-11-25T10:09:00+00:00",
                                                message="Job entrypoint command failed with exit code 1")
    ledger().save(RunRecord(id="t1", job="count", backend="toy", status="FAILED", exit_code=1,
                            completed_by="companion", start_time="2026-11-25T10:00:00.000+00:00",
                            end_time="2026-11-25T10:01:30.500+00:00", message="ValueError: lr must be positive"))
    code, out, err = main_captured(capsys, "logs", "t1", "--backend", "toy", "--follow")
    assert code == 1, err
    assert "t1 FAILED after 1m30s: ValueError: lr must be positive" in err, err
    assert not ledger().get("t1").archived  # type: ignore[union-attr]  # a read wrote nothing
