"""The run-side companion, run as Ray runs an entrypoint (``sh -c``, stdout and stderr into the driver log file),
against a local storage folder: the exit code Ray sees is the entrypoint's, the time limit ends it as `timeout`
did, the log reaches storage as masked parts equal to the driver's file, the record's end says who wrote it, and
a companion error is one line in the log, never the run's outcome. (On a real cluster: tests/e2e/test_run_side.py.)"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rtjob.core.record import RunRecord
from rtjob.runside.child import KILLED_AFTER_TIMEOUT, TIMED_OUT, Child
from rtjob.runside.outcome import attempt_end
from rtjob.storage.records import update_record
from support.cli import REPO

SECRET = "companion-secret-4242xyz"


def companion(tmp_path: Path, entrypoint: str, storage: Path | None, **env: str) -> tuple[int, str, Path]:
    """Run the companion like Ray's job supervisor: ``sh -c 'python -m rtjob.runside.companion ...'`` with its
    output appended to a driver log file. Returns (return code, the driver log, the storage folder)."""
    log = tmp_path / "job-driver.log"
    log.write_text("Running entrypoint for job r1: ...\n")  # what Ray writes before the entrypoint starts
    full_env = {"PATH": os.environ["PATH"], "PYTHONPATH": f"{REPO / 'cli'}:{REPO}", "RTJOB_RUN_NAME": "r1",
                "RTJOB_JOB_NAME": "job", "RTJOB_COMPANION_INTERVAL_S": "0.2", "MY_API_TOKEN": SECRET, **env}
    if storage is not None:
        full_env["RTJOB_RUN_URI"] = str(storage)
    command = f"{shlex.quote(sys.executable)} -m rtjob.runside.companion {shlex.quote(entrypoint)}"
    with open(log, "a") as out:
        proc = subprocess.run(command, shell=True, stdout=out, stderr=subprocess.STDOUT, env=full_env,
                              start_new_session=True, timeout=120)
    return proc.returncode, log.read_text(), storage or tmp_path


def same_end(a: int, b: int) -> bool:
    """Two exit codes of one end: equal, or one signal told as -N and as 128+N (by a shell that did not exec)."""
    return a == b or (min(a, b) < 0 and max(a, b) == 128 - min(a, b))


def record_of(storage: Path) -> dict:
    return json.loads((storage / "rtjob-run.json").read_text())


def parts_of(storage: Path, attempt: str = "r1") -> str:
    folder = storage / "logs" / attempt
    return "".join(p.read_text() for p in sorted(folder.iterdir()))


KILL_SELF = "{python} -c 'import os, signal; os.kill(os.getpid(), signal.{sig})'"


@pytest.mark.parametrize(("entrypoint", "status", "says"), [
    ("echo done", "SUCCEEDED", None),
    ("echo failing; exit 3", "FAILED", "exited with code 3"),
    (KILL_SELF.format(python=sys.executable, sig="SIGKILL"), "FAILED", "killed by SIGKILL"),
    (KILL_SELF.format(python=sys.executable, sig="SIGTERM"), "FAILED", "killed by SIGTERM"),
], ids=["exit-0", "exit-3", "sigkill", "sigterm"])
def test_ray_sees_the_exit_code_it_would_see_without_the_companion(tmp_path: Path, entrypoint: str, status: str,
                                                                   says: str | None) -> None:
    # Without the companion Ray runs `sh -c ENTRYPOINT`: the same shell, the same exit code (a signal's death is
    # -N where the shell execs its one command, 128+N where it does not).
    with open(tmp_path / "bare.log", "w") as out:
        bare = subprocess.run(entrypoint, shell=True, stdout=out, stderr=subprocess.STDOUT, timeout=60).returncode
    rc, log, storage = companion(tmp_path, entrypoint, tmp_path / "run")
    assert rc == bare, log
    record = record_of(storage)
    assert record["status"] == status and same_end(record["exit_code"], bare)
    assert record["completed_by"] == "companion" and record["carried_by"] == "companion"
    assert (says is None and record["message"] is None) or says in record["message"]
    assert "rtjob companion:" not in log  # nothing to say when all went well


def test_the_time_limit_ends_the_entrypoint_with_124_and_is_recorded(tmp_path: Path) -> None:
    started = time.monotonic()
    rc, _, storage = companion(tmp_path, "echo start; sleep 60", tmp_path / "run", RTJOB_TIME_LIMIT_S="1")
    assert rc == TIMED_OUT and time.monotonic() - started < 30
    record = record_of(storage)
    assert record["status"] == "FAILED" and "time limit timeout_s=1 (exit code 124)" in record["message"]


def test_an_entrypoint_that_ignores_the_time_limits_term_is_killed_137() -> None:
    child = Child("trap '' TERM; while true; do sleep 0.1; done", os.environ, time_limit_s=0.5, kill_after_s=1)
    ended = child.wait()
    assert ended.code == KILLED_AFTER_TIMEOUT == 137 and ended.timed_out


def test_the_log_reaches_storage_as_masked_parts_equal_to_the_driver_file(tmp_path: Path) -> None:
    script = ("import sys, time\n"
              "for i in range(3000):\n"
              f"    print(f'line {{i}} token {SECRET}' if i % 500 == 0 else f'line {{i}} ' + 'x' * 200)\n"
              "    if i % 1000 == 0: sys.stdout.flush(); time.sleep(0.5)\n"
              "    if i == 1500: print('(RayTrainWorker pid=1) rtjob-event: workers_started', flush=True)\n"
              "print('rtjob-event: first_step', flush=True)\n")
    (tmp_path / "s.py").write_text(script)
    rc, log, storage = companion(tmp_path, f"{sys.executable} {tmp_path / 's.py'}", tmp_path / "run")
    assert rc == 0
    assert log.count(SECRET) == 6  # the driver's own file holds it (Ray's, on the head node)
    stored = parts_of(storage)
    assert SECRET not in stored and stored == log.replace(SECRET, "****")
    assert len(list((storage / "logs" / "r1").iterdir())) >= 3  # written as it grew, not once at the end
    assert (storage / "logs" / "driver.log").read_text() == stored  # the whole log at a clean end
    assert (storage / "logs" / "r1.log").read_text() == stored  # and as the attempt's own archived log
    record = record_of(storage)
    assert record["logs"] == ["logs/r1.log", "logs/driver.log"]
    assert [(a["id"], a["attempt"], a["status"], a["exit_code"]) for a in record["attempts"]] == [
        ("r1", 1, "SUCCEEDED", 0)]
    timeline = record_of(storage)["timeline"]
    assert (timeline["driver_started"] <= timeline["first_log_line"] <= timeline["workers_started"]
            <= timeline["first_step"] <= timeline["ended"])


def test_a_stop_marker_makes_the_stops_sigterm_a_stop() -> None:
    from rtjob.runside.child import ChildExit

    assert attempt_end(ChildExit(-15), True, True, None)[0] == "STOPPED"
    assert attempt_end(ChildExit(1), True, True, None)[0] == "STOPPED"  # the script's own handler exited 1
    assert attempt_end(ChildExit(-15), True, False, None) == ("FAILED", "the entrypoint was killed by SIGTERM (exit code -15)")
    assert attempt_end(ChildExit(0), False, True, None)[0] == "SUCCEEDED"  # ended before the stop reached it


def test_the_stops_sigterm_to_the_companion_waits_for_the_entrypoint_and_records_stopped(tmp_path: Path) -> None:
    storage = tmp_path / "run"
    storage.mkdir()
    (storage / "rtjob-stop-requested").write_text("now")
    log = tmp_path / "driver.log"
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": f"{REPO / 'cli'}:{REPO}", "RTJOB_RUN_NAME": "r1",
           "RTJOB_RUN_URI": str(storage), "RTJOB_COMPANION_INTERVAL_S": "0.2"}
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "rtjob.runside.companion", "echo up; sleep 60"], stdout=out,
                                stderr=subprocess.STDOUT, env=env, start_new_session=True)
    deadline = time.monotonic() + 60
    while "up" not in log.read_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGTERM)  # Ray's stop: the whole process tree
    assert proc.wait(timeout=60) == -signal.SIGTERM
    record = record_of(storage)
    assert record["status"] == "STOPPED" and record["completed_by"] == "companion"


def test_a_companion_error_is_one_line_and_never_the_runs_outcome(tmp_path: Path) -> None:
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("a file where the run's folder should be")
    rc, log, _ = companion(tmp_path, "echo working; exit 7", blocked)
    assert rc == 7
    lines = [line for line in log.splitlines() if line.startswith("rtjob companion:")]
    assert lines and all("Traceback" not in line for line in lines) and "Traceback" not in log


def test_companion_0_runs_the_entrypoint_bare(tmp_path: Path) -> None:
    rc, log, storage = companion(tmp_path, "echo bare; exit 5", tmp_path / "run", RTJOB_COMPANION="0")
    assert rc == 5 and "bare" in log and not storage.exists()


def test_a_client_write_never_replaces_the_run_sides_end(tmp_path: Path) -> None:
    run = str(tmp_path / "run")
    ended = RunRecord(id="r1", job="job", backend="unknown", status="FAILED", exit_code=-9, completed_by="companion",
                      end_time="2026-11-26T10:00:05+00:00", timeline={"driver_started": "2026-11-26T10:00:01+00:00"})
    update_record(run, None, lambda stored: ended)
    client = RunRecord(id="r1", job="job", backend="local", status="RUNNING", user="alice",
                       timeline={"submitted": "2026-11-26T10:00:00+00:00"})
    from rtjob.storage.records import read_record
    from support.planted import plant_record

    written = plant_record(run, client, None)
    stored = read_record(run, None)
    assert stored == written and stored is not None
    assert (stored.status, stored.exit_code, stored.completed_by, stored.backend, stored.user) == (
        "FAILED", -9, "companion", "local", "alice")
    assert set(stored.timeline) == {"submitted", "driver_started"}


def test_a_run_whose_companion_is_no_longer_seen_reads_unknown_with_when_it_was_seen() -> None:
    import datetime as dt

    def seen(seconds_ago: float) -> RunRecord:
        when = (dt.datetime.now(dt.timezone.utc) - dt.timedelta(seconds=seconds_ago)).isoformat()
        return RunRecord(id="r1", job="j", backend="ray", status="RUNNING", carried_by="companion", last_seen=when)

    assert seen(10).to_run_info().status.value == "RUNNING"
    lost = seen(600).to_run_info()
    assert lost.status.value == "UNKNOWN" and "companion was last seen" in (lost.message or "")
    ended = seen(600)
    ended.status = "SUCCEEDED"
    assert ended.to_run_info().status.value == "SUCCEEDED"


def test_node_folders_are_per_user_private_and_made_afresh_for_each_attempt(tmp_path: Path) -> None:
    from rtjob.storage.node_dirs import fresh_run_folder, node_root, remove_run_folder, run_folder

    root = node_root(str(tmp_path))
    assert root == str(tmp_path / f"rtjob-run-dirs-{os.getuid()}")
    folder = fresh_run_folder("run-1", str(tmp_path))
    assert folder == run_folder("run-1", str(tmp_path)) and os.path.isdir(folder)
    assert os.stat(root).st_mode & 0o777 == 0o700 and os.stat(folder).st_mode & 0o777 == 0o700
    Path(folder, "left-by-attempt-1.txt").write_text("stale")
    os.chmod(root, 0o755)  # made by an older rtjob: made private again
    again = fresh_run_folder("run-1", str(tmp_path))
    assert os.listdir(again) == [] and os.stat(root).st_mode & 0o777 == 0o700
    assert remove_run_folder("run-1", str(tmp_path)) and not os.path.exists(folder)
    assert not remove_run_folder("run-1", str(tmp_path))
    with pytest.raises(ValueError):
        run_folder("../etc", str(tmp_path))
    # A root that is a link (planted by someone else) is refused: the companion takes a private folder instead.
    other = tmp_path / "other"
    other.mkdir()
    linked = tmp_path / "linked"
    linked.mkdir()
    os.symlink(other, node_root(str(linked)))
    with pytest.raises(PermissionError):
        fresh_run_folder("run-2", str(linked))
    assert os.listdir(other) == []
