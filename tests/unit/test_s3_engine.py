"""rtjob pull's CRT engine (storage/crt.py): where its requests go, which engine is chosen, how errors read.
(The obstore engine and the botocore-free listing: tests/unit/test_obstore_engine.py.)

No network here: the CRT client is built (it connects only on a request) and URLs come from botocore's own
rules, as in a pull. The transfers themselves run against real S3 servers in tests/e2e/test_storage_pull.py
(moto) and benchmarks/pull_bench.py (SeaweedFS).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import awscrt  # noqa: F401 - the engine under test: without the s3 extra this fails, never skips
import pytest
from rtjob.core.errors import BadInput
from rtjob.storage import crt, engines
from rtjob.storage.s3errors import describe_error


@pytest.fixture(autouse=True)
def aws_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_PROFILE", "HTTP_PROXY", "HTTPS_PROXY",
                 "http_proxy", "https_proxy", "NO_PROXY", "no_proxy", engines.ENGINE_ENV):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAUNITTESTUNITTEST")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "unit-test-secret")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/dev/null")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/dev/null")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


def client(region: str = "us-east-1", endpoint: str | None = None) -> tuple[Any, Any]:
    import botocore.session

    session = botocore.session.get_session()
    return session, session.create_client("s3", region_name=region, endpoint_url=endpoint)


def test_an_s3_compatible_server_is_addressed_path_style_at_its_own_host() -> None:
    session, s3 = client(endpoint="http://127.0.0.1:9000")
    engine = crt.CrtDownloader(session, s3, "runs")
    assert (engine.host, engine.url_prefix) == ("127.0.0.1:9000", "/runs/")


def test_aws_buckets_are_virtual_hosted_in_the_region_the_listing_reported() -> None:
    session, s3 = client("us-east-1")
    assert crt.CrtDownloader(session, s3, "team-runs").host == "team-runs.s3.amazonaws.com"
    elsewhere = crt.CrtDownloader(session, s3, "team-runs", region="eu-west-1")
    assert (elsewhere.host, elsewhere.url_prefix) == ("team-runs.s3.eu-west-1.amazonaws.com", "/")
    dotted = crt.CrtDownloader(session, s3, "team.runs", region="eu-west-1")  # not a valid TLS host name
    assert dotted.url_prefix == "/team.runs/" and dotted.host == "s3.eu-west-1.amazonaws.com"


@pytest.mark.parametrize("key", ["runs/r1/checkpoint_epoch_0001/model.pt", "runs/a b/ü+%#?=&.bin", "runs/~x/*"])
def test_keys_are_quoted_as_botocore_quotes_them(key: str) -> None:
    from urllib.parse import quote

    session, s3 = client(endpoint="http://127.0.0.1:9000")
    engine = crt.CrtDownloader(session, s3, "runs")
    theirs = urlsplit(crt._request_url(s3, "runs", key)).path
    assert engine.url_prefix + quote(key, safe="/~") == theirs


def test_the_engine_is_chosen_by_env_and_bad_values_are_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    assert engines.chosen_engine() == "obstore" and crt.unusable_reason("http://127.0.0.1:9000") is None
    monkeypatch.setenv(engines.ENGINE_ENV, "crt")  # obstore skipped, the CRT and its fallback allowed
    assert not engines.allowed("obstore") and engines.allowed("crt") and engines.allowed("botocore")
    monkeypatch.setenv(engines.ENGINE_ENV, "botocore")
    assert crt.unusable_reason("http://127.0.0.1:9000") == f"{engines.ENGINE_ENV}=botocore"
    monkeypatch.setenv(engines.ENGINE_ENV, "fast")
    with pytest.raises(BadInput, match=r"RTJOB_S3_ENGINE='fast': not an S3 engine \(valid: obstore, crt, botocore\)"):
        engines.chosen_engine()


def test_a_proxy_for_the_endpoint_falls_back_to_botocore(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.internal:3128")
    assert "proxy" in (crt.unusable_reason("https://s3.eu-west-1.amazonaws.com") or "")
    assert crt.unusable_reason("http://127.0.0.1:9000") is None  # no proxy for http
    monkeypatch.setenv("NO_PROXY", "s3.eu-west-1.amazonaws.com")
    assert crt.unusable_reason("https://s3.eu-west-1.amazonaws.com") is None


def test_errors_read_as_s3_said_them() -> None:
    body = (b"<?xml version='1.0' encoding='UTF-8'?><Error><Code>PreconditionFailed</Code>"
            b"<Message>At least one of the pre-conditions you specified did not hold</Message></Error>")
    error = crt._transfer_error(RuntimeError("AWS_ERROR_S3_INVALID_RESPONSE_STATUS"),
                                {"status_code": 412, "error_body": body})
    assert (error.code, error.status) == ("PreconditionFailed", 412)
    assert describe_error(error) == ("PreconditionFailed", "PreconditionFailed: At least one of the "
                                     "pre-conditions you specified did not hold")
    assert crt._transfer_error(RuntimeError("x"), {"status_code": 403}).code == "AccessDenied"  # no body (HEAD-like)

    class CrtError(Exception):
        name = "AWS_IO_SOCKET_CONNECTION_REFUSED"
        message = "socket connection refused."

    refused = crt._transfer_error(CrtError(), {})
    assert describe_error(refused) == ("AWS_IO_SOCKET_CONNECTION_REFUSED",
                                       "AWS_IO_SOCKET_CONNECTION_REFUSED: socket connection refused.")


def test_a_link_under_the_partial_name_fails_that_file_and_is_never_written_through(tmp_path: Path) -> None:
    from rtjob.storage.stores import RemoteFile

    session, s3 = client(endpoint="http://127.0.0.1:9")  # never reached: the link is refused before a GET
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    partial = tmp_path / "model.pt.rtjob-partial"
    partial.symlink_to(victim)
    done: list[tuple[str, BaseException | None]] = []
    crt.CrtDownloader(session, s3, "runs").download(
        [(RemoteFile("runs/model.pt", "model.pt", 7, '"etag"'), partial)], None,
        lambda item, target, error: done.append((item.rel, error)))
    assert len(done) == 1 and isinstance(done[0][1], OSError) and victim.read_bytes() == b"precious"


def test_the_throughput_target_follows_the_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    from awscrt import s3

    monkeypatch.setattr(s3, "get_recommended_throughput_target_gbps", lambda: None)
    monkeypatch.setattr(crt.os, "cpu_count", lambda: 16)
    assert crt.throughput_target() == 8.0
    monkeypatch.setattr(crt.os, "cpu_count", lambda: 2)
    assert crt.throughput_target() == 1.0
    monkeypatch.setattr(s3, "get_recommended_throughput_target_gbps", lambda: 100.0)  # e.g. a p5 instance
    assert crt.throughput_target() == 100.0
