"""Restoring a Ray Train checkpoint (training/checkpoint.local_copy): a checkpoint in remote storage is read from a
download private to the process, never from the node-shared folder of ``Checkpoint.as_directory()``, where a late
peer re-downloads over files being read (ray-project/ray#48726). A pyarrow SubTreeFileSystem stands in for remote
storage here: like S3 it is not a LocalFileSystem, so Ray downloads from it."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow.fs
import pytest

# ray.train and torch are imported by the tests, not at collection: every xdist worker collects every module.


@pytest.fixture
def remote(tmp_path: Path):
    import ray.train

    (tmp_path / "store" / "ckpt").mkdir(parents=True)
    (tmp_path / "store" / "ckpt" / "state.json").write_text('{"epoch": 3}')
    fs = pyarrow.fs.SubTreeFileSystem(str(tmp_path / "store"), pyarrow.fs.LocalFileSystem())
    return ray.train.Checkpoint("ckpt", filesystem=fs)


def test_a_remote_checkpoint_is_read_from_a_private_download_removed_after(remote):
    from training.checkpoint import local_copy

    shared = remote._get_temporary_checkpoint_dir()  # where as_directory() would put it for every process
    with local_copy(remote) as first, local_copy(remote) as second:
        assert first != second and shared not in (first, second)
        assert Path(first, "state.json").read_text() == Path(second, "state.json").read_text() == '{"epoch": 3}'
    assert not os.path.exists(first) and not os.path.exists(second)
    assert not os.path.exists(shared)


def test_a_local_checkpoint_is_read_in_place(tmp_path):
    import ray.train

    from training.checkpoint import local_copy

    (tmp_path / "state.json").write_text("{}")
    with local_copy(ray.train.Checkpoint.from_directory(str(tmp_path))) as path:
        assert path == str(tmp_path)
    assert (tmp_path / "state.json").exists()  # nothing of the run's storage is removed
