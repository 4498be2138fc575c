"""The storage check before a run is sent (runs/lifecycle/storage_check.py): `rtjob submit` (and rerun, a pipeline's
submit) writes the run's record to its storage before the embedded cluster starts or a backend is reached. A
bucket that does not exist, a wrong secret, no credentials at all, a folder that cannot be made: exit 3, one line
naming the storage and what failed, nothing submitted, no cluster started, no run in the ledger.
`--no-storage-check` and the `storage_check = false` setting get past it to the backend; render, validate and
--dry-run never write to storage.

Real parts: the CLI's main (in this process, with each command's environment its whole environment); S3 is moto's server in a process of its own, with IAM authentication switched
on (its switch is process-wide) so a wrong secret is refused as AWS refuses it; the Ray address a closed port on
loopback. No cluster starts: every submit here ends before one would.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.cli import base_env, new_id, plant, run_in_process
from support.project import write_files
from support.s3_server import REGION, S3Server, free_port, process_server

BUCKET = "checked-runs"  # exists; "missing-bucket" does not
TRAIN = "name: train\nentrypoint: python train.py\n"
PIPELINE = "name: flow\nsteps:\n  - name: prep\n    entrypoint: python train.py\n  - name: fit\n" \
           "    entrypoint: python train.py\n"


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Server]:
    """moto with IAM auth on, and the keys of a user allowed everything in S3."""
    import boto3
    import requests

    with process_server() as (server, _proc):
        server.client().create_bucket(Bucket=BUCKET)
        iam = boto3.client("iam", endpoint_url=server.endpoint, region_name=REGION, aws_access_key_id="setup",
                           aws_secret_access_key="setup")
        iam.create_user(UserName="writer")
        iam.put_user_policy(UserName="writer", PolicyName="s3", PolicyDocument=json.dumps({
            "Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}))
        key = iam.create_access_key(UserName="writer")["AccessKey"]
        assert requests.post(f"{server.endpoint}/moto-api/reset-auth", data=b"0", timeout=10).ok
        yield S3Server(server.endpoint, key["AccessKeyId"], plant(key["SecretAccessKey"]))


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    write_files(root, {"jobs/train.yaml": TRAIN, "jobs/flow.yaml": PIPELINE, "train.py": "print('train')\n"})
    return root


def _env(tmp_path: Path, server: S3Server, **extra: str) -> dict[str, str]:
    return base_env(tmp_path / "home", **server.env(), AWS_EC2_METADATA_DISABLED="true", **extra)


def _cli(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The CLI's own main in this process with ``env`` as its whole environment (support/cli.run_in_process): what
    a subprocess would print and exit with, without a second each of interpreter and imports."""
    return run_in_process(*args, env=env, cwd=cwd)


def _refused(proc: subprocess.CompletedProcess[str], *words: str) -> str:
    """Exit 3 and one line (no traceback) with ``words``, the storage check's."""
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 3, proc.stderr
    assert len(lines) == 1 and lines[0].startswith("rtjob: error: storage check failed, nothing submitted: "), \
        proc.stderr
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


def _nothing_ran(env: dict[str, str], cwd: Path) -> None:
    """No embedded cluster started, no run in the ledger, no crash report."""
    home = Path(env["RTJOB_HOME"])
    assert not (home / "local" / "cluster.json").exists()
    status = _cli(env, cwd, "local", "status")
    assert status.returncode == 0 and "not running" in status.stdout, status.stdout + status.stderr
    runs = _cli(env, cwd, "runs", "-o", "json")
    assert runs.returncode == 0 and json.loads(runs.stdout) == [], runs.stdout + runs.stderr
    assert not (home / "crash").exists()


def _keys(server: S3Server) -> list[str]:
    listed = server.client().list_objects_v2(Bucket=BUCKET)
    return [o["Key"] for o in listed.get("Contents", [])]


def _closed_address() -> str:
    return f"http://127.0.0.1:{free_port()}"  # nothing listens there


def test_a_missing_bucket_stops_the_submit_before_the_embedded_cluster_starts(s3, project, tmp_path):
    server = s3
    env = _env(tmp_path, server)
    run_id = new_id("nobucket")
    proc = _cli(env, project, "submit", "train", "--storage", "s3://missing-bucket/runs", "--submission-id", run_id)
    _refused(proc, f"bucket 'missing-bucket' does not exist at {server.endpoint}", run_id, "--no-storage-check")
    assert proc.stdout == ""
    _nothing_ran(env, project)
    # A pipeline checks its storage once, before its first step or any cluster.
    _refused(_cli(env, project, "submit", "flow", "--storage", "s3://missing-bucket/runs"),
             f"bucket 'missing-bucket' does not exist at {server.endpoint}")
    _nothing_ran(env, project)


def test_a_wrong_secret_and_no_credentials_are_refused_in_one_line(s3, project, tmp_path):
    server = s3
    wrong = plant("rtjobWrongSecret/" + new_id("x"))
    env = {**_env(tmp_path, server), "AWS_SECRET_ACCESS_KEY": wrong}
    line = _refused(_cli(env, project, "submit", "train", "--storage", f"s3://{BUCKET}/runs"),
                    f"s3://{BUCKET}/runs/train/", server.endpoint, "SignatureDoesNotMatch")
    assert wrong not in line and server.secret_key not in line and server.access_key not in line
    _nothing_ran(env, project)

    bare = {k: v for k, v in _env(tmp_path, server).items() if not k.startswith("AWS_")}
    bare.update(AWS_ENDPOINT_URL=server.endpoint, AWS_EC2_METADATA_DISABLED="true",
                AWS_CONFIG_FILE=str(tmp_path / "no-config"), AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "no-keys"))
    _refused(_cli(bare, project, "submit", "train", "--storage", f"s3://{BUCKET}/runs"),
             f"s3://{BUCKET}/runs/train/", server.endpoint, "no AWS credentials found")
    _nothing_ran(bare, project)
    assert _keys(server) == []


def test_a_local_folder_that_cannot_be_made_is_refused(s3, project, tmp_path):
    server = s3
    env = _env(tmp_path, server)
    blocker = tmp_path / "file.txt"
    blocker.write_text("a file, not a folder\n")  # root ignores chmod: a path under a file cannot be written by anyone
    _refused(_cli(env, project, "submit", "train", "--storage", str(blocker / "sub")), str(blocker / "sub"),
             "cannot write")
    _nothing_ran(env, project)


def test_skipping_the_check_reaches_the_backend_and_a_passed_check_leaves_no_record_of_a_run_never_sent(
        s3, project, tmp_path):
    server = s3
    env = _env(tmp_path, server)
    ray = ("--backend", "ray", "--address", _closed_address(), "--no-wait")

    def unreachable_cluster(proc: subprocess.CompletedProcess[str]) -> None:
        assert proc.returncode == 3, proc.stderr
        assert "cannot reach the Ray cluster" in proc.stderr and "storage check" not in proc.stderr, proc.stderr

    unreachable_cluster(_cli(env, project, "submit", "train", "--storage", "s3://missing-bucket/runs",
                             "--no-storage-check", *ray))
    write_files(project, {"rtjob.toml": "storage_check = false\n"})  # the setting does the same as the flag
    unreachable_cluster(_cli(env, project, "submit", "train", "--storage", "s3://missing-bucket/runs", *ray))
    (project / "rtjob.toml").unlink()
    # The check passes (the bucket exists), then the cluster cannot be reached: its record is withdrawn.
    unreachable_cluster(_cli(env, project, "submit", "train", "--storage", f"s3://{BUCKET}/runs", *ray))
    assert _keys(server) == []
    _nothing_ran(env, project)
    # A pipeline's submit takes the flag too: past the check, its record's write is a warning, the backend decides.
    skipped = _cli(env, project, "submit", "flow", "--storage", "s3://missing-bucket/runs", "--no-storage-check", *ray)
    unreachable_cluster(skipped)
    assert "warning: run record not written to s3://missing-bucket/runs/flow/" in skipped.stderr


def test_rerun_checks_the_recorded_storage_and_its_flag_skips_it(s3, project, tmp_path, monkeypatch):
    """A run recorded in this ledger (made here from a real plan, as its submit records it) run again: its
    recorded storage is checked before anything starts."""
    from rtjob.backends import configured
    from rtjob.core.model import RunInfo, RunStatus
    from rtjob.jobspec.resolve import Overrides
    from rtjob.ledger import Ledger, ledger_path
    from rtjob.runs.records import new_record
    from rtjob.runs.runner import plan
    from support.scrub import scrub

    server = s3
    env = _env(tmp_path, server)
    scrub(monkeypatch)
    for name in ("RTJOB_HOME", *server.env()):  # planned here as the CLI plans it there
        monkeypatch.setenv(name, env[name])
    monkeypatch.chdir(project)
    planned = plan("train", configured({"backend": "local"}, project), Overrides(submission_id=new_id("old")),
                   storage_flag="s3://missing-bucket/runs")
    record = new_record(planned, RunInfo(planned.job.run_id, "train", "local", RunStatus.SUCCEEDED))
    with Ledger(ledger_path()) as ledger:
        ledger.save(record)
    listed = _cli(env, project, "runs", "-o", "json")
    assert [r["id"] for r in json.loads(listed.stdout)] == [record.id], listed.stdout + listed.stderr

    _refused(_cli(env, project, "rerun", record.id), f"bucket 'missing-bucket' does not exist at {server.endpoint}")
    assert not (Path(env["RTJOB_HOME"]) / "local" / "cluster.json").exists()
    skipped = _cli(env, project, "rerun", record.id, "--no-storage-check", "--backend", "ray", "--address",
                   _closed_address(), "--no-wait")
    assert skipped.returncode == 3 and "cannot reach the Ray cluster" in skipped.stderr, skipped.stderr
    assert [r["id"] for r in json.loads(_cli(env, project, "runs", "-o", "json").stdout)] == [record.id]


def test_render_validate_and_dry_run_never_write_to_storage(s3, project, tmp_path):
    server = s3
    env = _env(tmp_path, server)
    folder = tmp_path / "local-storage"
    for args, storage in ((("render", "train"), "s3://missing-bucket/runs"),
                          (("submit", "train", "--dry-run"), f"s3://{BUCKET}/runs"),
                          (("submit", "flow", "--dry-run"), str(folder))):
        proc = _cli(env, project, *args, "--storage", storage)
        assert proc.returncode == 0, proc.stderr
    assert _cli(env, project, "validate", "jobs/train.yaml").returncode == 0
    assert _keys(server) == [] and not folder.exists()
    _nothing_ran(env, project)


def test_the_check_writes_the_planned_run_pending_an_attach_writes_the_stored_record_back_and_withdraw_removes_it(
        project, tmp_path, monkeypatch):
    """In this process, on a local folder: what the check writes is the record the submit then writes over."""
    from rtjob.backends import configured
    from rtjob.jobspec.resolve import Overrides
    from rtjob.runs.events import Quiet
    from rtjob.runs.lifecycle import storage_check
    from rtjob.runs.lifecycle.submission import pending_record
    from rtjob.runs.runner import plan
    from rtjob.storage.records import read_record
    from support.scrub import scrub

    scrub(monkeypatch)
    monkeypatch.setenv("RTJOB_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(project)
    planned = plan("train", configured({"backend": "local"}, project), Overrides(submission_id=new_id("chk")),
                   storage_flag=str(tmp_path / "storage"))
    assert storage_check.wanted(planned.settings)
    checked = storage_check.check(pending_record(planned), Quiet())
    assert checked is not None and checked.created is not None
    run_dir = Path(checked.uri)
    stored = read_record(checked.uri, None)
    assert stored is not None and (stored.id, stored.status, stored.backend) == (planned.job.run_id, "PENDING", "local")
    assert stored.spec is not None and stored.submitted_at and "submitted" not in stored.timeline
    assert not (tmp_path / "home" / "ledger.sqlite3").exists()  # the ledger's row is the submit's, after it

    again = storage_check.check(pending_record(planned), Quiet())  # an attach: the stored record, unchanged
    assert again is not None and again.created is None
    again.withdraw(Quiet())
    assert read_record(checked.uri, None) == stored
    checked.withdraw(Quiet())  # the submit failed: the run never went
    assert read_record(checked.uri, None) is None and not run_dir.exists()
    monkeypatch.setenv("RTJOB_STORAGE_CHECK", "no")
    assert not storage_check.wanted(configured({"backend": "local"}, project))
