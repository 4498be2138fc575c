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


def _scaler_after_an_overflow():
    """A CPU GradScaler (the fp16 path's class; CPU here only to test its state) whose scale an overflow halved."""
    import torch

    weight = torch.nn.Parameter(torch.ones(2))
    optimizer = torch.optim.SGD([weight], lr=0.1)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0, growth_interval=3)
    scaler.scale(weight.sum()).backward()
    weight.grad[0] = float("inf")
    scaler.step(optimizer)  # skipped: the gradient overflowed
    scaler.update()
    return weight, optimizer, scaler


def test_the_fp16_scaler_state_goes_into_the_checkpoint_and_comes_back(tmp_path: Path):
    import torch

    from training import checkpoint
    from training.hf.checkpoint import restore_optimizer

    weight, optimizer, scaler = _scaler_after_an_overflow()
    assert scaler.get_scale() == 512.0
    checkpoint.save_optimizer(str(tmp_path), optimizer, scaler)
    checkpoint.write_run_state(str(tmp_path), {"epoch": 2}, [{"epoch": 1}, {"epoch": 2}])

    resumed = torch.amp.GradScaler("cpu", init_scale=1024.0, growth_interval=3)
    fresh = torch.optim.SGD([weight], lr=0.1)
    assert restore_optimizer(None, fresh, str(tmp_path), torch.device("cpu"), sharded=False,
                             scaler=resumed) == (2, [{"epoch": 1}, {"epoch": 2}])
    assert resumed.state_dict() == scaler.state_dict()
    assert resumed.get_scale() == 512.0  # not 1024 again: the run goes on at the scale it had found


def test_runs_without_a_scaler_write_none_and_old_checkpoints_restore(tmp_path: Path):
    import torch

    from training import checkpoint

    weight, optimizer, _ = _scaler_after_an_overflow()
    checkpoint.save_optimizer(str(tmp_path), optimizer, None)  # bf16 / fp32
    assert not (tmp_path / checkpoint.SCALER_FILE).exists()

    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    checkpoint.load_optimizer(str(tmp_path), torch.optim.SGD([weight], lr=0.1), torch.device("cpu"), scaler)
    assert scaler.get_scale() == 1024.0  # a checkpoint from before grad_scaler.pt: the scaler starts fresh
