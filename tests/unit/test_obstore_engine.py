"""rtjob pull's obstore engine (storage/obstore_engine.py) and its botocore-free listing (storage/s3light.py):
when the environment alone may serve a pull, SigV4 as botocore signs, exact keys from the listing, If-Match on
every GET and every ranged part, a link under the partial name refused, errors in S3's words.

Against moto's server in a thread (a real S3 protocol on loopback); the whole pull runs on this engine in
tests/e2e/test_storage_pull.py and on SeaweedFS in benchmarks/pull_bench.py.
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import obstore  # noqa: F401 - the engine under test: without the s3 extra this fails, never skips
import pytest
from rtjob.storage import obstore_engine, s3light
from rtjob.storage.engines import TransferError
from rtjob.storage.location import parse_location
from rtjob.storage.s3errors import describe_error
from rtjob.storage.s3store import S3Store
from rtjob.storage.stores import RemoteFile
from support.s3_server import S3Server, threaded_server

BUCKET = "obstore-tests"


@pytest.fixture(autouse=True)
def aws_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_PROFILE", "AWS_REGION", "AWS_DEFAULT_REGION",
                 "AWS_SESSION_TOKEN", "AWS_CA_BUNDLE", "HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy",
                 "RTJOB_S3_ENGINE", "AWS_USE_FIPS_ENDPOINT", "AWS_USE_DUALSTACK_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAUNITTESTUNITTEST")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "unit-test-secret")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/dev/null")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


@pytest.fixture(scope="module")
def server() -> Iterator[S3Server]:
    with threaded_server() as s3:
        s3.client().create_bucket(Bucket=BUCKET)
        yield s3


@pytest.fixture
def served(server: S3Server, monkeypatch: pytest.MonkeyPatch) -> S3Server:
    for key, value in server.env().items():
        if key not in ("AWS_CONFIG_FILE",):
            monkeypatch.setenv(key, value)
    return server


# ---------------------------------------------------------------------------------------------
# when the environment alone serves a pull


def test_the_environment_alone_serves_a_pull_only_when_it_says_everything(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    server = s3light.target_for("runs", "http://127.0.0.1:9000")
    assert server is not None and (server.region, server.virtual_host) == ("us-east-1", False)
    assert server.base() == ("http", "127.0.0.1:9000", "/runs")
    assert s3light.target_for("runs", None) is None  # AWS, region only in ~/.aws/config: botocore's to find
    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    aws = s3light.target_for("team-runs", None)
    assert aws is not None and aws.base() == ("https", "team-runs.s3.eu-west-1.amazonaws.com", "")
    dotted = s3light.target_for("team.runs", None)  # not a valid TLS host name: path-style
    assert dotted is not None and dotted.base() == ("https", "s3.eu-west-1.amazonaws.com", "/team.runs")
    assert "unit-test-secret" not in repr(aws) and "AKIA" not in repr(aws)

    monkeypatch.setenv("AWS_USE_FIPS_ENDPOINT", "true")
    assert s3light.target_for("team-runs", None) is None
    monkeypatch.delenv("AWS_USE_FIPS_ENDPOINT")
    config = tmp_path / "no-config"
    config.write_text("[default]\nregion = eu-west-1\ns3 =\n  addressing_style = path\n")
    assert s3light.target_for("team-runs", None) is None  # a setting only botocore honours
    config.write_text("[default]\nregion = eu-west-1\n")
    assert s3light.target_for("team-runs", None) is not None
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")  # credentials from a profile, SSO, a role: botocore's chain
    assert s3light.target_for("team-runs", "http://127.0.0.1:9000") is None


def test_requests_are_signed_as_botocore_signs_them(monkeypatch: pytest.MonkeyPatch) -> None:
    import botocore.auth
    import botocore.credentials
    from botocore.awsrequest import AWSRequest

    monkeypatch.setenv("AWS_SESSION_TOKEN", "a-session-token")
    target = s3light.target_for("runs", "http://127.0.0.1:9000")
    assert target is not None
    now = datetime.datetime(2026, 11, 24, 1, 2, 3, tzinfo=datetime.timezone.utc)
    query = {"list-type": "2", "prefix": "runs/a b+ü~/", "encoding-type": "url", "continuation-token": "x/y=="}
    ours = s3light.sign("GET", "127.0.0.1:9000", "/runs", query, target, now=now)

    request = AWSRequest("GET", "http://127.0.0.1:9000/runs?" + s3light._query(query),
                         headers={"x-amz-content-sha256": ours["x-amz-content-sha256"]})
    monkeypatch.setattr(botocore.auth, "get_current_datetime", lambda: now.replace(tzinfo=None))
    credentials = botocore.credentials.Credentials("AKIAUNITTESTUNITTEST", "unit-test-secret", "a-session-token")
    botocore.auth.S3SigV4Auth(credentials, "s3", "us-east-1").add_auth(request)
    assert ours["Authorization"] == request.headers["Authorization"]


def test_the_listing_gives_every_key_exactly(served: S3Server) -> None:
    """Folder markers keep their '/', odd characters survive the url encoding, 1,000-key pages are followed."""
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.s3.models import s3_backends

    backend = s3_backends[DEFAULT_ACCOUNT_ID]["aws"]
    odd = ["list/r/checkpoint_epoch_0001/", "list/r/a b+c/ü%7E~*?#&=.bin", "list/r/../escape", "list/r//double"]
    for key in odd:
        backend.put_object(BUCKET, key, b"")
    for i in range(1003):
        backend.put_object(BUCKET, f"list/r/shards/{i:04d}.bin", b"x" * (i % 7))
    store = S3Store(parse_location(f"s3://{BUCKET}/list/r"))
    assert store.light is not None
    files = store.list_files()
    assert store.light is not None  # the light listing served it: no fallback to botocore
    keys = {f.key: f for f in files}
    assert set(odd) <= set(keys) and len(files) == len(odd) + 1003
    assert keys["list/r/shards/0005.bin"].size == 5 and keys["list/r/shards/0005.bin"].etag.startswith('"')
    assert keys["list/r/checkpoint_epoch_0001/"].rel == "checkpoint_epoch_0001/"


def test_a_listing_the_light_path_cannot_do_falls_back_to_botocore(served: S3Server,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from rtjob.core.errors import Unreachable

    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong")  # moto without IAM accepts it; a bucket it lacks:
    store = S3Store(parse_location("s3://no-such-bucket-here/runs"))
    with pytest.raises(Unreachable, match="bucket 'no-such-bucket-here' does not exist"):
        store.list_files()  # the light listing's 404 is worded by botocore's
    assert store.light is None


# ---------------------------------------------------------------------------------------------
# the downloads


def put(server: S3Server, key: str, data: bytes) -> RemoteFile:
    etag = server.client().put_object(Bucket=BUCKET, Key=key, Body=data)["ETag"]
    return RemoteFile(key, key, len(data), etag)


def fetch(store: S3Store, jobs: list[tuple[RemoteFile, Path]]) -> dict[str, BaseException | None]:
    done: dict[str, BaseException | None] = {}
    progress: list[int] = []
    store.download(jobs, progress.append, lambda item, target, error: done.__setitem__(item.key, error))
    assert store.engine == "obstore"
    assert sum(progress) == sum(item.size for item, _ in jobs if done[item.key] is None)
    return done


def test_large_files_come_in_ranged_parts_that_all_carry_if_match(served: S3Server, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(obstore_engine, "PART_SIZE", 64 * 1024)  # 5 parts of the file below
    data = os.urandom(4 * 64 * 1024 + 123)
    item = put(served, "dl/big.bin", data)
    small = put(served, "dl/a b+ü~.bin", b"tiny")
    store = S3Store(parse_location(f"s3://{BUCKET}/dl"))
    done = fetch(store, [(item, tmp_path / "big.part"), (small, tmp_path / "small.part")])
    assert done == {item.key: None, small.key: None}
    assert (tmp_path / "big.part").read_bytes() == data and (tmp_path / "small.part").read_bytes() == b"tiny"

    served.client().put_object(Bucket=BUCKET, Key=item.key, Body=os.urandom(len(data)))  # rewritten since listed
    served.client().put_object(Bucket=BUCKET, Key=small.key, Body=b"TINY")
    done = fetch(S3Store(parse_location(f"s3://{BUCKET}/dl")),
                 [(item, tmp_path / "big2.part"), (small, tmp_path / "small2.part")])
    for error in done.values():
        assert isinstance(error, TransferError) and error.code == "PreconditionFailed", error
        assert describe_error(error)[0] == "PreconditionFailed"


def test_a_link_under_the_partial_name_is_never_written_through(served: S3Server, tmp_path: Path) -> None:
    item = put(served, "dl/model.pt", b"weights")
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    partial = tmp_path / "model.pt.rtjob-partial"
    partial.symlink_to(victim)
    done = fetch(S3Store(parse_location(f"s3://{BUCKET}/dl")), [(item, partial)])
    error = done[item.key]
    assert isinstance(error, OSError) and error.errno == errno.ELOOP and victim.read_bytes() == b"precious"


def test_a_missing_key_and_a_closed_endpoint_read_as_s3_and_the_network_said(served: S3Server, tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    gone = RemoteFile("dl/gone.bin", "gone.bin", 3, '"0"')
    done = fetch(S3Store(parse_location(f"s3://{BUCKET}/dl")), [(gone, tmp_path / "gone.part")])
    error: Any = done[gone.key]
    assert isinstance(error, TransferError) and error.code in ("NoSuchKey", "PreconditionFailed")

    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{s.getsockname()[1]}"
    monkeypatch.setattr(obstore_engine, "ATTEMPTS", 1)
    store = S3Store(parse_location(f"s3://{BUCKET}/dl"), endpoint=closed)
    done = fetch(store, [(gone, tmp_path / "gone.part")])
    code, text = describe_error(done[gone.key])  # type: ignore[arg-type]
    assert code and text and "unit-test-secret" not in text


def test_credentials_only_botocore_resolves_are_handed_to_obstore(served: S3Server, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A profile (here: a credentials file) is botocore's to read; obstore then signs with what it resolved."""
    credentials = tmp_path / "credentials"
    credentials.write_text(f"[team]\naws_access_key_id = {served.access_key}\n"
                           f"aws_secret_access_key = {served.secret_key}\n")
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(credentials))
    monkeypatch.setenv("AWS_PROFILE", "team")
    item = put(served, "dl/profile.bin", b"from a profile")
    store = S3Store(parse_location(f"s3://{BUCKET}/dl"))
    assert store.light is None
    listed = {f.key: f for f in store.list_files()}
    done = fetch(store, [(listed[item.key], tmp_path / "p.part")])
    assert done == {item.key: None} and (tmp_path / "p.part").read_bytes() == b"from a profile"


def test_obstore_errors_read_as_s3_error_codes() -> None:
    from obstore import exceptions as ox

    quoted = ox.GenericError("Server returned non-2xx status code: 403 Forbidden: <?xml version=\"1.0\"?><Error>"
                             "<Code>InvalidAccessKeyId</Code><Message>The key does not exist.</Message></Error>")
    assert describe_error(obstore_engine.transfer_error(quoted)) == (
        "InvalidAccessKeyId", "InvalidAccessKeyId: The key does not exist.")
    error = obstore_engine.transfer_error(ox.PreconditionError("Request precondition failure for path x"))
    assert (error.code, error.status) == ("PreconditionFailed", 412)
    assert obstore_engine.transfer_error(ox.PermissionDeniedError("denied")).code == "AccessDenied"


def test_a_proxy_for_the_endpoint_leaves_the_pull_to_botocore(served: S3Server, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Neither the light listing nor obstore is pointed at a proxy: with one set, botocore lists and downloads."""
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")  # nothing listens there; NO_PROXY lets botocore by
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    item = put(served, "dl/proxied.bin", b"through botocore")
    store = S3Store(parse_location(f"s3://{BUCKET}/dl"))
    assert store.light is not None  # NO_PROXY covers the endpoint: no proxy for it
    monkeypatch.delenv("NO_PROXY")
    store = S3Store(parse_location(f"s3://{BUCKET}/dl"))
    assert store.light is None
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")  # the transfer itself must reach the server
    from rtjob.storage import crt

    for module in ("rtjob.storage.obstore_engine", "rtjob.storage.crt"):  # the proxy as the engines see it
        monkeypatch.setattr(f"{module}.proxy_reason", lambda url: "a proxy is set for http")
    assert crt.unusable_reason(served.endpoint)
    done: dict[str, BaseException | None] = {}
    store.download([(item, tmp_path / "p.part")], None, lambda i, t, e: done.__setitem__(i.key, e))
    assert done == {item.key: None} and store.engine == "botocore"
    assert (tmp_path / "p.part").read_bytes() == b"through botocore"


def test_ctrl_c_stops_every_transfer_and_leaves_no_thread_or_descriptor(served: S3Server, tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """SIGINT to the main thread while worker threads are writing: the download raises KeyboardInterrupt once every
    transfer has stopped; the files it did not finish are not reported done, nothing stays open or running."""
    import signal
    import threading

    monkeypatch.setattr(obstore_engine, "PART_SIZE", 64 * 1024)
    monkeypatch.setattr(obstore_engine, "CHUNK", 16 * 1024)
    items = [put(served, f"dl/int-{n}.bin", os.urandom(8 * 64 * 1024)) for n in range(4)]
    jobs = [(item, tmp_path / f"int-{n}.part") for n, item in enumerate(items)]
    store = S3Store(parse_location(f"s3://{BUCKET}/dl"))
    interrupted, seen = threading.Event(), threading.Event()
    done: list[str] = []

    def on_progress(_: int) -> None:  # a worker thread: the first chunk written, Ctrl-C arrives
        if not interrupted.is_set():
            interrupted.set()
            signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGINT)
            seen.wait(60)  # this file cannot finish before the main thread has taken the interrupt

    def on_sigint(*_: Any) -> None:
        seen.set()
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        with pytest.raises(KeyboardInterrupt):
            store.download(jobs, on_progress, lambda item, target, error: done.append(item.key))
    finally:
        signal.signal(signal.SIGINT, previous)
    assert interrupted.is_set() and len(done) < len(items)
    assert not [t for t in threading.enumerate() if t.name.startswith("rtjob-get")]
    open_here = []
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # the listing's own descriptor, closed by now
            open_here += [fd] if os.readlink(f"/proc/self/fd/{fd}").startswith(str(tmp_path)) else []
    assert open_here == []
