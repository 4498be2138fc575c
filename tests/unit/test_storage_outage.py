"""Readers of a run's storage while it is down, in this process (the issue "Nothing lost when storage fails",
readers' side): `rtjob ui` answers 503 while the storage cannot be read and 200 again after; one record denied is
that run's problem line, a fault that may pass fails the listing; a reader's patience (RTJOB_STORAGE_PATIENCE_S) is
waited once per outage. The CLI's readers as subprocesses (waiting out an outage, exit 3 in one line, `rtjob ui`
not starting): tests/e2e/test_storage_outage_cli.py.

Real parts: the session's moto server on loopback, behind support/outage.Forwarder (a real outage: refused
connections, 502s, cut connections); a real HTTP server standing in for S3 (support/http_faults.StandIn); the UI's
real app."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from rtjob.ui.app import Config, create_app
from support.http_faults import StandIn
from support.outage import Forwarder, forwarding_to
from support.s3_server import S3Server, bucket_fixture, in_env
from support.ui_runs import UI_PORT, call, seed_run

BUCKET = "outage-reads"
ROOT = f"s3://{BUCKET}/root"
RUN = "o-run-1"
s3 = bucket_fixture(BUCKET)


@pytest.fixture(autouse=True)
def no_outage_left_over() -> Iterator[None]:
    """A test that ends in an outage (in this process) leaves no outage clock running for the next one."""
    from rtjob.storage.retrying import outage_forgotten

    outage_forgotten()
    yield
    outage_forgotten()


@pytest.fixture(scope="module")
def seeded(s3: S3Server) -> S3Server:
    return seed_run(s3, ROOT, RUN)


@pytest.fixture
def forwarder(seeded: S3Server) -> Iterator[Forwarder]:
    with forwarding_to(seeded.endpoint) as fwd:
        yield fwd


UI_PATHS = ["/", "/api/runs", f"/runs/{RUN}", f"/api/runs/{RUN}", f"/api/runs/{RUN}/live", f"/runs/{RUN}/log",
            f"/runs/{RUN}/card"]


def test_the_ui_answers_503_while_storage_is_down_and_200_after(seeded: S3Server, forwarder: Forwarder,
                                                                tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    in_env(seeded, monkeypatch)
    monkeypatch.setenv("RTJOB_HOME", str(tmp_path / "home"))  # a ledger that does not know the run: storage only
    monkeypatch.setenv("RTJOB_STORAGE_PATIENCE_S", "0")
    app = create_app(Config(storage=ROOT, lookup_root=ROOT, endpoint=forwarder.url, host="127.0.0.1", port=UI_PORT,
                            token=None))
    forwarder.down()
    for path in UI_PATHS:
        status, headers, body = call(app, path)
        assert status == 503, (path, status, body[:300])
        message = json.loads(body)["error"] if headers["content-type"].startswith("application/json") else body
        assert f"127.0.0.1:{forwarder.port}" in message, (path, message[:300])
        if not headers["content-type"].startswith("text/html"):
            assert message.strip().count("\n") == 0, (path, message)
    forwarder.up()
    for path in UI_PATHS:
        status, _headers, body = call(app, path)
        assert status == 200, (path, status, body[:300])
    assert "hello from the run" in call(app, f"/runs/{RUN}/log")[2]


def _listing(prefixes: list[str]) -> tuple[int, str, bytes]:
    common = "".join(f"<CommonPrefixes><Prefix>{p}</Prefix></CommonPrefixes>" for p in prefixes)
    return 200, "application/xml", (f'<?xml version="1.0" encoding="UTF-8"?><ListBucketResult><Name>{BUCKET}</Name>'
                                    f"<KeyCount>{len(prefixes)}</KeyCount><IsTruncated>false</IsTruncated>{common}"
                                    "</ListBucketResult>").encode()


@pytest.mark.parametrize("answer", [403, 503])
def test_one_record_denied_is_its_problem_line_one_that_may_pass_fails_the_listing(
        answer: int, seeded: S3Server, monkeypatch: pytest.MonkeyPatch) -> None:
    """A server that lists the root and one run folder, then answers the run's record ``answer``: denied on that
    record alone (the listing was allowed) is that run's problem line; a 503 is the storage's fault (exit 3)."""
    from urllib.parse import parse_qs

    from rtjob.core.errors import StorageError
    from rtjob.storage.records import list_records

    code = b"AccessDenied" if answer == 403 else b"ServiceUnavailable"

    def respond(method: str, path: str) -> tuple[int, str, bytes]:
        query = parse_qs(urlsplit(path).query)
        if "list-type" in query:
            prefix = query.get("prefix", [""])[0]
            return _listing({"root/": ["root/job/"], "root/job/": ["root/job/r-one/"]}.get(prefix, []))
        return answer, "application/xml", (b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>' + code +
                                           b"</Code><Message>no</Message></Error>")

    in_env(seeded, monkeypatch)
    monkeypatch.setenv("RTJOB_STORAGE_PATIENCE_S", "0")
    with StandIn(respond) as server:
        if answer == 403:
            listed = list_records(ROOT, server.address)
            assert listed.records == [] and len(listed.problems) == 1 and "denied" in listed.problems[0]
        else:
            with pytest.raises(StorageError) as caught:
                list_records(ROOT, server.address)
            assert caught.value.transient


def test_a_readers_patience_counts_once_per_outage(monkeypatch: pytest.MonkeyPatch) -> None:
    """Many reads in one outage wait the patience once: after it, each read is tried once; a success ends the
    outage (the next one waits again); a permanent fault is never tried again."""
    from rtjob.core.errors import StorageError
    from rtjob.storage.retrying import read_patiently

    monkeypatch.setenv("RTJOB_STORAGE_PATIENCE_S", "0.3")
    tries: list[str] = []

    def down() -> None:
        tries.append("down")
        raise StorageError("s3://b: S3 at http://127.0.0.1:1 failed: connection refused", transient=True)

    start = time.monotonic()
    with pytest.raises(StorageError):
        read_patiently(down)
    assert time.monotonic() - start >= 0.3 and len(tries) >= 2  # waited out, tried again
    tries.clear()
    with pytest.raises(StorageError):
        read_patiently(down)
    assert tries == ["down"]  # the patience is spent: one try
    assert read_patiently(lambda: "back") == "back"
    tries.clear()
    with pytest.raises(StorageError):
        read_patiently(down)
    assert len(tries) >= 2  # a new outage: waited out again

    def denied() -> None:
        tries.append("denied")
        raise StorageError("access denied to s3://b", transient=False)

    tries.clear()
    read_patiently(lambda: None)
    with pytest.raises(StorageError):
        read_patiently(denied)
    assert tries == ["denied"]
