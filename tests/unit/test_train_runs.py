"""Where an unchanged Ray Train script stored its run, from Ray's Train state (as Ray 2.60 answers
GET /api/train/v2/runs/v1, trimmed) or, without it, from the driver log's checkpoint lines."""

from __future__ import annotations

from rtjob.backends.ray.train_runs import folders_from_log, folders_from_state


def _run(submission_id: str | None, storage: str, name: str, filesystem: str | None = None) -> dict:
    return {"id": "636318aa", "name": name, "job_id": "01000000", "status": "FINISHED",
            "run_settings": {"run_config": {"name": name, "storage_path": storage, "storage_filesystem": filesystem}},
            "job_details": {"type": "SUBMISSION", "job_id": "01000000", "submission_id": submission_id}}


def test_the_state_api_gives_each_train_run_of_the_job_its_folder() -> None:
    runs = [_run("rtjob-a", "s3://team/ray-results/", "exp1"), _run("rtjob-b", "/mnt/x", "other"),
            _run("rtjob-a", "/tmp/storage", "exp2"), _run("rtjob-a", "bucket/p", "fs", filesystem="S3FileSystem"),
            _run(None, "/tmp/driver", "interactive")]
    assert folders_from_state(runs, "rtjob-a") == ["s3://team/ray-results/exp1", "/tmp/storage/exp2"]
    assert folders_from_state(runs, "rtjob-c") == []


def test_the_driver_logs_checkpoint_lines_give_the_folders_without_train_state() -> None:
    log = ("Training finished.\n"
           "Result(metrics={'loss': 0.1}, checkpoint=Checkpoint(filesystem=local, "
           "path=/tmp/storage/exp/checkpoint_2026-11-25_15-36-12.448117), error=None)\n"
           "Checkpoint(filesystem=s3, path=team/ray-results/exp9/checkpoint_2026-11-25_16-00-00.1)\n"
           "Checkpoint(filesystem=local, path=/tmp/storage/exp/checkpoint_2026-11-25_15-40-00.1)\n"
           "Checkpoint(filesystem=py::fsspec+gcs, path=b/x/checkpoint_1)\n")
    assert folders_from_log(log) == ["/tmp/storage/exp", "s3://team/ray-results/exp9"]
    assert folders_from_log("no checkpoints here\n") == []


class _Api:
    def __init__(self, runs: list[dict]) -> None:
        self.runs, self.log_reads = runs, 0

    def train_runs(self) -> list[dict]:
        return self.runs

    def logs(self, submission_id: str) -> str:
        self.log_reads += 1
        return "Checkpoint(filesystem=local, path=/tmp/from-log/exp/checkpoint_1)\n"


def test_the_ray_backend_prefers_rays_train_state_over_the_log() -> None:
    from rtjob.backends import configured
    from rtjob.backends.ray.backend import RayJobsBackend

    backend = RayJobsBackend(configured({"backend": "ray", "address": "http://127.0.0.1:1"}))
    backend._api = api = _Api([_run("rtjob-a", "/tmp/state", "exp")])  # type: ignore[assignment]
    assert backend.train_storage("rtjob-a") == ["/tmp/state/exp"] and api.log_reads == 0
    api.runs = []  # a cluster that keeps no Train state: the driver log's checkpoint lines
    assert backend.train_storage("rtjob-a") == ["/tmp/from-log/exp"] and api.log_reads == 1
    given = "Checkpoint(filesystem=local, path=/tmp/given/exp/checkpoint_1)"
    assert backend.train_storage("rtjob-a", given) == ["/tmp/given/exp"] and api.log_reads == 1
