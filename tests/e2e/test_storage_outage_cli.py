"""Readers of a run's storage while it is down, as the CLI (a subprocess: its exit code and its one line) meets it
(the issue "Nothing lost when storage fails", readers' side): a fault that may pass is waited out for the reader's
patience (RTJOB_STORAGE_PATIENCE_S), then the reader gives up with exit 3 and one line; a permanent fault (no bucket,
a key S3 refuses, no credentials) is exit 3 at once; `rtjob ui` does not start on storage it cannot read. The same
readers in this process (the UI's 503s, a record denied, the patience counted once per outage):
tests/unit/test_storage_outage.py.

Real parts: the session's moto server on loopback, behind support/outage.Forwarder (a real outage: refused
connections, 502s, cut connections); a real HTTP server standing in for S3 that refuses the key
(support/http_faults.StandIn); the real CLI as a subprocess. No cluster."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from support.cli import base_env, popen_rtjob, record, rtjob
from support.http_faults import StandIn
from support.outage import Forwarder, forwarding_to
from support.s3_server import S3Server, bucket_fixture, free_port
from support.ui_runs import seed_run

BUCKET = "outage-reads-cli"
ROOT = f"s3://{BUCKET}/root"
RUN = "o-run-1"
s3 = bucket_fixture(BUCKET)
DENIED = (b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>InvalidAccessKeyId</Code><Message>The AWS Access Key '
          b"Id you provided does not exist in our records.</Message></Error>")


@pytest.fixture(scope="module")
def seeded(s3: S3Server) -> S3Server:
    return seed_run(s3, ROOT, RUN)


@pytest.fixture
def forwarder(seeded: S3Server) -> Iterator[Forwarder]:
    with forwarding_to(seeded.endpoint) as fwd:
        yield fwd


def env_for(server: S3Server, home: Path, endpoint: str, patience: str, **extra: str) -> dict[str, str]:
    return base_env(home, **{**server.env(), "AWS_ENDPOINT_URL": endpoint, "AWS_EC2_METADATA_DISABLED": "true",
                             "RTJOB_STORAGE_PATIENCE_S": patience, **extra})


def until(check: Callable[[], bool], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "the condition never held"
        time.sleep(0.05)


def one_line_exit_3(proc: Any, *names: str) -> str:
    """The command failed with exit 3 and one line naming ``names`` (the bucket, the endpoint), no traceback."""
    err = proc.stderr.strip()
    assert proc.returncode == 3, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr and err.count("\n") == 0, proc.stderr
    assert err.startswith("rtjob: error: "), err
    for name in names:
        assert name in err, (name, err)
    return err


def test_a_reader_waits_out_an_outage_that_ends_within_its_patience(seeded: S3Server, forwarder: Forwarder,
                                                                     tmp_path: Path) -> None:
    env = env_for(seeded, tmp_path, forwarder.url, patience="120", RTJOB_STORAGE=ROOT)

    def through_an_outage(*args: str) -> str:
        forwarder.faults(600)  # 502s and cut connections until told otherwise
        seen = sum(forwarder.injected.values())
        proc = popen_rtjob(*args, env=env)
        try:
            until(lambda: sum(forwarder.injected.values()) >= seen + 3)  # the reader is in the outage, trying again
            forwarder.faults(0)  # the storage is back
            out, err = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        record(out, err)
        assert proc.returncode == 0, (args, err)
        return out

    assert [row["id"] for row in json.loads(through_an_outage("runs", "--storage", ROOT, "-o", "json"))] == [RUN]
    assert "hello from the run" in through_an_outage("logs", RUN)  # the record found in storage, then its log


def test_an_outage_longer_than_the_patience_exits_3_in_one_line(seeded: S3Server, forwarder: Forwarder,
                                                               tmp_path: Path) -> None:
    forwarder.down()  # connection refused: a fault that may pass, waited out for 1 s
    env = env_for(seeded, tmp_path, forwarder.url, patience="1", RTJOB_STORAGE=ROOT)
    dest = tmp_path / "pulled"
    for args in (("runs", "--storage", ROOT), ("show", RUN, "--storage", ROOT), ("status", RUN), ("logs", RUN),
                 ("pull", f"{ROOT}/train/{RUN}", "--to", str(dest)), ("results", f"{ROOT}/train/{RUN}")):
        start = time.monotonic()
        proc = rtjob(*args, env=env, timeout=120)
        one_line_exit_3(proc, f"127.0.0.1:{forwarder.port}")
        assert time.monotonic() - start >= 1.0, (args, "gave up before its patience")


@pytest.mark.parametrize("case", ["missing bucket", "key refused", "connection refused", "no credentials"])
def test_runs_storage_faults_are_exit_3_in_one_line(case: str, seeded: S3Server, tmp_path: Path) -> None:
    uri, names, patience = ROOT, [BUCKET, seeded.endpoint], "30"  # a permanent fault: at once, not after 30 s
    env = env_for(seeded, tmp_path, seeded.endpoint, patience)
    if case == "missing bucket":
        uri, names = "s3://no-such-bucket-here/runs", ["no-such-bucket-here", seeded.endpoint]
    elif case == "no credentials":
        del env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"]
    elif case == "connection refused":
        endpoint = f"http://127.0.0.1:{free_port()}"  # nothing listens there
        env.update(AWS_ENDPOINT_URL=endpoint, RTJOB_STORAGE_PATIENCE_S="0.5")
        names = [BUCKET, endpoint]
    with StandIn(lambda method, path: (403, "application/xml", DENIED)) as denying:
        if case == "key refused":
            env["AWS_ENDPOINT_URL"] = denying.address
            names = [BUCKET, denying.address]
        start = time.monotonic()
        proc = rtjob("runs", "--storage", uri, env=env, timeout=120)
    err = one_line_exit_3(proc, *names)
    assert proc.stdout == ""
    if case != "connection refused":
        assert time.monotonic() - start < 25, ("a permanent fault waited", err)
    if case == "key refused":
        assert "InvalidAccessKeyId" in err or "authentication" in err, err


def test_ui_on_storage_it_cannot_read_does_not_start(seeded: S3Server, tmp_path: Path) -> None:
    env = env_for(seeded, tmp_path, seeded.endpoint, patience="30")
    proc = rtjob("ui", "--storage", "s3://no-such-bucket-here/runs", "--port", "0", env=env, timeout=60)
    one_line_exit_3(proc, "no-such-bucket-here")
    assert "serving" not in proc.stdout + proc.stderr
