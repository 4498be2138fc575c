"""End to end against a real 2-node embedded Ray cluster: submit, follow, exit codes, stop, wait,
detach, idempotent submit, dropped log streams, token auth, resource pre-check."""

from __future__ import annotations

import json
import re
import signal
import threading
import time
from pathlib import Path

import pytest
from support.cli import base_env, new_id, popen_rtjob, rtjob, wait_for_status
from support.tcp_proxy import DroppingProxy

pytestmark = pytest.mark.cluster


def _cluster_state(env: dict[str, str]) -> dict[str, str]:
    return json.loads((Path(env["RTJOB_HOME"]) / "local" / "cluster.json").read_text())


def test_submit_follows_logs_and_exits_0(cluster_env):
    run_id = new_id("ok")
    proc = rtjob("submit", "tests/support/jobs/count.yaml", "--submission-id", run_id, "--set", "args.lines=15",
                 env=cluster_env)
    assert proc.returncode == 0, proc.stderr
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("line ")]
    assert lines == [f"line {i} of 15" for i in range(1, 16)]
    assert f"{run_id} SUCCEEDED" in proc.stderr


def test_submit_json_output_has_the_contract_fields(cluster_env):
    proc = rtjob("submit", "tests/support/jobs/count.yaml", "--set", "args.lines=2", "--output", "json", env=cluster_env)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    for key in ("id", "job", "backend", "status", "message", "start_time", "end_time", "storage_uri"):
        assert key in data
    assert data["job"] == "count" and data["status"] == "SUCCEEDED" and data["backend"] == "local"
    assert data["storage_uri"].endswith(f"/count/{data['id']}")
    assert "line 1 of 2" in proc.stderr  # logs go to stderr when stdout carries JSON


def test_failing_job_exits_1_with_its_message(cluster_env):
    proc = rtjob("submit", "tests/support/jobs/fail.yaml", env=cluster_env)
    assert proc.returncode == 1
    assert "failing on purpose with exit code 3" in proc.stdout
    assert re.search(r"FAILED after .*exited with code 3", proc.stderr), proc.stderr
    closing = next(line for line in proc.stderr.splitlines() if " FAILED after " in line)
    assert closing.endswith(": the entrypoint exited with code 3"), closing  # Ray's log tail is cut
    run_id = re.search(r"(\S+) FAILED after ", closing).group(1)
    status = rtjob("status", run_id, env=cluster_env)
    assert "status:      FAILED" in status.stdout, status.stdout + status.stderr
    message = next(line for line in status.stdout.splitlines() if line.startswith("message:"))
    # one line in rtjob's words: not Ray's sentence, its job-manager lines, the wrapper's command or the log's tail
    assert message.split(None, 1)[1] == "the entrypoint exited with code 3", status.stdout
    assert "rtjob.runside.companion" not in status.stdout and "INFO" not in status.stdout and "on purpose" not in status.stdout


def test_a_run_that_fails_on_a_missing_module_says_where_to_declare_it(cluster_env):
    proc = rtjob("submit", "tests/support/jobs/missing-module.yaml", env=cluster_env)
    assert proc.returncode == 1, proc.stderr
    assert "No module named 'rtjob_no_such_module'" in proc.stdout
    last = proc.stderr.strip().splitlines()[-1]
    assert "module 'rtjob_no_such_module'" in last and "tests/support/jobs/missing-module.yaml" in last, last


def test_a_progress_bar_does_not_repeat_the_last_lines(cluster_env):
    """A tqdm-like line (carriage returns, one newline) mid-run: the stream and the final full-log read must agree
    on where each line is, so the lines printed after it are not printed again when the run ends."""
    proc = rtjob("submit", "tests/support/jobs/count.yaml", "--set", "args.lines=8", "--set", "args.progress_after=5",
                 env=cluster_env)
    assert proc.returncode == 0, proc.stderr
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(("line ", "progress "))]
    numbered = [f"line {i} of 8" for i in range(1, 9)]
    assert lines == [*numbered[:5], "progress 1/3", "progress 2/3", "progress 3/3", *numbered[5:]], proc.stdout


def test_last_line_without_newline_is_not_lost(cluster_env):
    proc = rtjob("submit", "tests/support/jobs/count.yaml", "--set", "args.lines=3", "--set", "args.no_final_newline=true",
                 env=cluster_env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.rstrip().endswith("last words without newline")


def test_stop_makes_the_follower_exit_1(cluster_env):
    run_id = new_id("stop")
    follower = popen_rtjob("submit", "tests/support/jobs/sleepy.yaml", "--submission-id", run_id, env=cluster_env)
    try:
        wait_for_status(cluster_env, run_id, {"RUNNING"})
        stopped = rtjob("stop", run_id, "--output", "json", env=cluster_env)
        assert stopped.returncode == 0, stopped.stderr
        assert json.loads(stopped.stdout)["status"] == "STOPPED"
        out, err = follower.communicate(timeout=60)
        assert follower.returncode == 1, err
        assert "STOPPED" in err
    finally:
        follower.kill()


def test_wait_timeout_exits_4_and_leaves_the_job_running(cluster_env):
    run_id = new_id("wait")
    sub = rtjob("submit", "tests/support/jobs/sleepy.yaml", "--submission-id", run_id, "--no-wait", env=cluster_env)
    assert sub.returncode == 0 and sub.stdout.strip() == run_id
    try:
        started = time.monotonic()
        waited = rtjob("wait", run_id, "--timeout", "3s", env=cluster_env)
        assert waited.returncode == 4, waited.stderr
        assert time.monotonic() - started < 30
        assert "left running" in waited.stderr
        assert wait_for_status(cluster_env, run_id, {"RUNNING", "PENDING"}, timeout=10)
    finally:
        rtjob("stop", run_id, env=cluster_env)
    # the stop wrote the end it saw (the kernel's archived): no later look needed to complete the record
    from rtjob.ledger import Ledger

    recorded = Ledger(Path(cluster_env["RTJOB_HOME"]) / "ledger.sqlite3").get(run_id)
    assert recorded is not None and (recorded.status, recorded.archived) == ("STOPPED", True)
    assert rtjob("wait", run_id, "--timeout", "60s", env=cluster_env).returncode == 1  # stopped → 1


def test_job_timeout_s_ends_the_run(cluster_env):
    proc = rtjob("submit", "tests/support/jobs/too-slow.yaml", env=cluster_env, timeout=120)
    assert proc.returncode == 1
    assert "stopped by its time limit timeout_s=" in proc.stderr and "exit code 124" in proc.stderr  # coreutils timeout


def test_ctrl_c_detaches_and_the_job_keeps_running(cluster_env):
    run_id = new_id("detach")
    follower = popen_rtjob("submit", "tests/support/jobs/sleepy.yaml", "--submission-id", run_id, env=cluster_env)
    try:
        assert follower.stdout is not None
        first = follower.stdout.readline()  # a log line proves it is following
        assert first
        follower.send_signal(signal.SIGINT)
        _, err = follower.communicate(timeout=30)
        assert follower.returncode == 130, err
        assert "detached" in err and f"rtjob logs {run_id} --follow" in err
        assert wait_for_status(cluster_env, run_id, {"RUNNING"}, timeout=10) == "RUNNING"
    finally:
        follower.kill()
        rtjob("stop", run_id, env=cluster_env)


def test_ctrl_c_with_stop_on_interrupt_stops_the_job(cluster_env):
    run_id = new_id("intstop")
    follower = popen_rtjob("submit", "tests/support/jobs/sleepy.yaml", "--submission-id", run_id, "--stop-on-interrupt",
                           env=cluster_env)
    try:
        assert follower.stdout is not None and follower.stdout.readline()
        follower.send_signal(signal.SIGINT)
        _, err = follower.communicate(timeout=60)
        assert follower.returncode == 1, err
        assert wait_for_status(cluster_env, run_id, {"STOPPED"}, timeout=30) == "STOPPED"
    finally:
        follower.kill()


def test_resubmit_with_the_same_id_attaches(cluster_env):
    run_id = new_id("idem")
    first = rtjob("submit", "tests/support/jobs/count.yaml", "--submission-id", run_id, "--no-wait", env=cluster_env)
    second = rtjob("submit", "tests/support/jobs/count.yaml", "--submission-id", run_id, "--no-wait", env=cluster_env)
    assert first.returncode == 0 and second.returncode == 0, second.stderr
    assert "already exists" in second.stderr and "attaching" in second.stderr
    # A third submit follows the existing run to its end and reports its outcome.
    third = rtjob("submit", "tests/support/jobs/count.yaml", "--submission-id", run_id, env=cluster_env)
    assert third.returncode == 0, third.stderr
    assert third.stdout.count("line 20 of 20") == 1
    runs = json.loads(rtjob("list", "--output", "json", "--limit", "1000", env=cluster_env).stdout)
    assert [r["id"] for r in runs].count(run_id) == 1


def test_dropped_log_stream_loses_and_repeats_no_line(cluster_env):
    """The Jobs API goes through a proxy that cuts every connection twice while the job prints."""
    state = _cluster_state(cluster_env)
    host, port = state["address"].removeprefix("http://").split(":")
    proxy = DroppingProxy(host, int(port))
    token = Path(state["token_path"]).read_text().strip()
    env = {**cluster_env, "RAY_AUTH_TOKEN": token}
    try:
        follower = popen_rtjob("submit", "tests/support/jobs/count.yaml", "--backend", "ray", "--address",
                               f"http://127.0.0.1:{proxy.port}", "--set", "args.lines=40",
                               "--set", "args.interval=0.15", env=env)
        seen: list[str] = []

        def read() -> None:
            assert follower.stdout is not None
            for line in follower.stdout:
                seen.append(line.rstrip("\n"))
                if line.startswith(("line 10 ", "line 25 ")):
                    proxy.drop_all()

        reader = threading.Thread(target=read)
        reader.start()
        reader.join(timeout=120)
        follower.wait(timeout=30)
        err = follower.stderr.read() if follower.stderr else ""
        assert follower.returncode == 0, err
        assert proxy.drops >= 2
        numbered = [ln for ln in seen if ln.startswith("line ")]
        assert numbered == [f"line {i} of 40" for i in range(1, 41)]
    finally:
        proxy.close()


def test_token_auth_is_on_and_tokens_are_honoured(cluster_env, tmp_path):
    state = _cluster_state(cluster_env)
    token = Path(state["token_path"]).read_text().strip()
    # No token anywhere (HOME without ~/.ray/auth_token): the cluster refuses, rtjob says so, exit 3.
    bare = base_env(Path(cluster_env["RTJOB_HOME"]), HOME=str(tmp_path))
    proc = rtjob("list", "--backend", "ray", "--address", state["address"], env=bare)
    assert proc.returncode == 3
    assert "authentication failed" in proc.stderr and proc.stderr.count("\n") == 1
    wrong = rtjob("list", "--backend", "ray", "--address", state["address"], env={**bare, "RAY_AUTH_TOKEN": "nope"})
    assert wrong.returncode == 3 and "rejected" in wrong.stderr
    # The token from a file (RAY_AUTH_TOKEN_PATH), as Ray's own clients read it.
    ok = rtjob("list", "--backend", "ray", "--address", state["address"], "--output", "json",
               env={**bare, "RAY_AUTH_TOKEN_PATH": state["token_path"]})
    assert ok.returncode == 0, ok.stderr
    assert isinstance(json.loads(ok.stdout), list)
    assert token not in ok.stdout + ok.stderr


def test_unreachable_address_exits_3(tmp_path):
    env = base_env(tmp_path)
    proc = rtjob("status", "anything", "--backend", "ray", "--address", "http://127.0.0.1:9", env=env)
    assert proc.returncode == 3
    assert "cannot reach" in proc.stderr and "Traceback" not in proc.stderr
    sub = rtjob("submit", "tests/support/jobs/count.yaml", "--address", "http://127.0.0.1:9", env=env)
    assert sub.returncode == 3, sub.stderr


def test_a_job_that_can_never_fit_exits_2(cluster_env):
    proc = rtjob("submit", "tests/support/jobs/count.yaml", "--set", "resources_per_worker.gpus=1", env=cluster_env)
    assert proc.returncode == 2
    assert "can never fit" in proc.stderr and "GPU: needs 1, cluster has 0" in proc.stderr
    too_many = rtjob("submit", "tests/support/jobs/count.yaml", "--set", "resources_per_worker.cpus=2", env=cluster_env)
    assert too_many.returncode == 2 and "can never fit" in too_many.stderr


def test_status_list_and_logs_of_a_finished_run(cluster_env):
    run_id = new_id("info")
    submitted = rtjob("submit", "tests/support/jobs/count.yaml", "--submission-id", run_id, "--set", "args.lines=3",
                      env=cluster_env)
    assert submitted.returncode == 0, submitted.stderr
    assert re.search(r"uploading working dir \S+/tests/support/jobs/wd \(\d+ files, [\d.]+ KiB\)", submitted.stderr)
    status = json.loads(rtjob("status", run_id, "--output", "json", env=cluster_env).stdout)
    assert status["status"] == "SUCCEEDED" and status["exit_code"] == 0 and status["job"] == "count"
    logs = rtjob("logs", run_id, env=cluster_env)
    assert logs.returncode == 0 and "line 3 of 3" in logs.stdout
    followed = rtjob("logs", run_id, "--follow", env=cluster_env)
    assert followed.returncode == 0 and followed.stdout.count("line 3 of 3") == 1
    table = rtjob("list", env=cluster_env)
    assert table.returncode == 0 and run_id in table.stdout
    unknown = rtjob("status", "no-such-run", env=cluster_env)
    assert unknown.returncode == 2 and "no run 'no-such-run'" in unknown.stderr
    tail = rtjob("logs", run_id, "--tail", "2", env=cluster_env)
    assert tail.returncode == 0 and tail.stdout == "".join(logs.stdout.splitlines(keepends=True)[-2:]) != ""
    # Ray's delete_job on the ended run: the cluster forgets it; rtjob's run ledger does not (status and the
    # archived log come from the run's record from then on), and `list` (what the cluster knows) no longer shows it.
    deleted = rtjob("delete", run_id, env=cluster_env)
    assert deleted.returncode == 0 and f"{run_id}: deleted" in deleted.stderr, deleted.stderr
    gone = rtjob("status", run_id, "--output", "json", env=cluster_env)
    assert gone.returncode == 0 and json.loads(gone.stdout)["status"] == "SUCCEEDED", gone.stderr
    assert "from the run record" in gone.stderr
    assert rtjob("logs", run_id, env=cluster_env).stdout == logs.stdout
    assert run_id not in rtjob("list", env=cluster_env).stdout
