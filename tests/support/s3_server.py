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

    def client(self, access_key: str | None = None, secret_key: str | None = None) -> Any:
        import boto3

        return boto3.session.Session().client(
            "s3", endpoint_url=self.endpoint, region_name=REGION,
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
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
