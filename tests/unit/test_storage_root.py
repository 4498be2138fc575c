"""One storage-root rule (jobspec/storage_root.py): the --storage flag over the storage setting over the job's
`storage:` over the backend's default, `file://` stripped, a relative path made absolute on the embedded cluster and
refused elsewhere, a trailing "/" dropped; and its two users, resolving a job and looking a run up in the
project's storage (runs/places.storage_root), agree."""

from __future__ import annotations

from pathlib import Path

import pytest
from rtjob.core.errors import BadInput
from rtjob.jobspec.storage_root import storage_root
from support.scrub import scrub


def test_the_rule() -> None:
    def root(flag: str | None = None, setting: str | None = None, job: str | None = None,
             default: str | None = "/home/u/.rtjob/local/storage", embedded: bool = False) -> str | None:
        return storage_root(flag=flag, setting=setting, job=job, default=default, embedded=embedded)

    assert root("s3://flag/x", "s3://setting", "s3://job") == "s3://flag/x"
    assert root(None, "s3://setting/", "s3://job") == "s3://setting"
    assert root(job="s3://job/runs//") == "s3://job/runs"
    assert root() == "/home/u/.rtjob/local/storage"
    assert root(default=None) is None
    assert root(setting="file:///data/runs/") == "/data/runs"
    assert root(flag="file://") == "/home/u/.rtjob/local/storage"  # nothing left: the default
    assert root(flag="/") is None
    assert root(setting="runs", embedded=True) == str(Path("runs").resolve())
    with pytest.raises(BadInput, match="storage 'runs': use a URI"):
        root(setting="runs")


@pytest.mark.parametrize("backend", ["local", "ray"])
@pytest.mark.parametrize(("flag", "setting"), [
    (None, None), ("s3://bucket/flag/", "s3://bucket/setting"), (None, "file:///srv/runs/"),
    ("file:///srv/flag", None), (None, "s3://bucket/setting//"),
])
def test_resolving_a_job_and_looking_a_run_up_agree(backend: str, flag: str | None, setting: str | None,
                                                     tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from rtjob.backends import backend_class, configured
    from rtjob.jobspec.resolve import Overrides, resolve
    from rtjob.runs.places import storage_root as lookup_root

    scrub(monkeypatch)
    monkeypatch.setenv("RTJOB_HOME", str(tmp_path / "home"))
    job_file = tmp_path / "train.yaml"
    job_file.write_text("name: train\nentrypoint: python train.py\n")
    flags = {"backend": backend, **({"address": "http://127.0.0.1:8265"} if backend == "ray" else {}),
             **({"storage": setting} if setting else {})}
    settings = configured(flags, tmp_path)
    job = resolve(str(job_file), settings, Overrides(), backend_class(backend).placement(), storage_flag=flag)
    assert job.storage_root == lookup_root(settings, flag)
    if job.storage_root is not None:
        assert job.storage_uri == f"{job.storage_root}/train/{job.run_id}"
    expected = {None: None, "s3://bucket/flag/": "s3://bucket/flag", "file:///srv/flag": "/srv/flag"}[flag] or {
        None: None, "s3://bucket/setting": "s3://bucket/setting", "file:///srv/runs/": "/srv/runs",
        "s3://bucket/setting//": "s3://bucket/setting"}[setting] or (
        str(tmp_path / "home" / "local" / "storage") if backend == "local" else None)
    assert job.storage_root == expected
