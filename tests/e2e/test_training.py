"""Real, tiny tests of the training package: no mocks, CPU only.

The Ray tests look at ``python -m training.ray_ddp`` as the session's ddp-resnet run on the 2-node embedded cluster
(support/shared_runs.py, shared with test_ddp_resnet_job.py: a Ray Train run costs ~30 s here), then resume it
with one more epoch through the same storage path and run name.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from support.cli import new_id, rtjob
from support.shared_runs import DdpRun, ddp_resnet
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

from training import choices, data, loop
from training.models import MODELS, build_model

# --- data ---------------------------------------------------------------------------


def test_synthetic_dataset_is_deterministic_and_well_formed():
    a = data.make_synthetic(300, seed=3, split="train")
    b = data.make_synthetic(300, seed=3, split="train")
    x, y = a.tensors
    assert x.shape == (300, 1, 28, 28) and x.dtype == torch.float32
    assert y.dtype == torch.int64 and set(y.tolist()) == set(range(10))
    assert torch.equal(x, b.tensors[0]) and torch.equal(y, b.tensors[1])
    assert not torch.equal(x, data.make_synthetic(300, seed=4, split="train").tensors[0])
    assert not torch.equal(x, data.make_synthetic(300, seed=3, split="val").tensors[0])


def test_synthetic_dataset_is_learnable_by_resnet18():
    torch.manual_seed(0)
    train, val = data.load_datasets("synthetic", train_size=320, val_size=256, seed=0)
    model = build_model("resnet18", in_channels=1, num_classes=10)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    cpu = torch.device("cpu")
    before = loop.evaluate(model, DataLoader(val, batch_size=128), cpu)
    stats = loop.train_epoch(model, DataLoader(train, batch_size=32, shuffle=True), optimizer, cpu)
    after = loop.evaluate(model, DataLoader(val, batch_size=128), cpu)
    assert stats.samples == 320 and after.samples == 256
    # 10 Adam steps reach about 0.5 (seeded); chance is 0.1.
    assert after.accuracy > 0.3, f"a few steps should beat chance clearly: {after}"
    assert after.loss < before.loss


def test_every_model_the_flags_offer_builds_that_model():
    from torchvision.models import ResNet, VisionTransformer

    assert sorted(MODELS) == sorted(choices.MODEL_NAMES)
    built = {name: build_model(name, in_channels=1, image_size=28, vit_size="tiny") for name in choices.MODEL_NAMES}
    assert isinstance(built["resnet18"], ResNet) and isinstance(built["vit"], VisionTransformer)


def test_mnist_download_failure_is_one_clear_error(tmp_path, monkeypatch):
    from torchvision.datasets import MNIST

    # Port 9 on localhost refuses at once: a real, fast download failure, no network needed.
    monkeypatch.setattr(MNIST, "mirrors", ["http://127.0.0.1:9/"])
    with pytest.raises(data.DatasetUnavailable) as info:
        data.load_datasets("mnist", data_dir=str(tmp_path))
    message = str(info.value)
    assert "\n" not in message and "--dataset synthetic" in message


# --- epoch means over ranks -----------------------------------------------------------

# Uneven on purpose: rank 0 has 5 samples in batches 2+2+1, rank 1 has 8 in 3+3+2.
_SPLIT, _BATCH = [5, 8], [2, 3]


def _fixture_data() -> tuple[torch.Tensor, torch.Tensor, nn.Module]:
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(sum(_SPLIT), 4, generator=gen)
    y = torch.randint(0, 3, (sum(_SPLIT),), generator=gen)
    torch.manual_seed(0)
    return x, y, nn.Linear(4, 3)


def _rank_main(rank: int, world_size: int, tmp: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{tmp}/pg", rank=rank, world_size=world_size)
    try:
        x, y, model = _fixture_data()
        start = sum(_SPLIT[:rank])
        shard = TensorDataset(x[start:start + _SPLIT[rank]], y[start:start + _SPLIT[rank]])
        loader = DataLoader(shard, batch_size=_BATCH[rank])
        cpu = torch.device("cpu")
        val = loop.evaluate(model, loader, cpu)
        # lr=0 keeps the weights fixed, so the training mean must equal the eval mean.
        train = loop.train_epoch(model, loader, torch.optim.SGD(model.parameters(), lr=0.0), cpu)
        local = F.cross_entropy(model(shard.tensors[0]), shard.tensors[1]).item()
        # Rank 0 comes 1 s late (as when it is still writing a checkpoint): DDP's gradient all-reduce makes
        # rank 1 wait for it, and that wait must not be counted as an epoch's time.
        ddp = nn.parallel.DistributedDataParallel(nn.Linear(4, 3))
        if rank == 0:
            time.sleep(1.0)
        late = loop.train_epoch(ddp, loader, torch.optim.SGD(ddp.parameters(), lr=0.0), cpu)
        Path(tmp, f"rank{rank}.json").write_text(
            json.dumps({"val": val.as_dict(), "train": train.as_dict(), "local_mean": local, "late": late.as_dict()})
        )
    finally:
        dist.destroy_process_group()


def test_epoch_means_are_exact_over_ranks_with_uneven_batches(tmp_path):
    mp.spawn(_rank_main, args=(2, str(tmp_path)), nprocs=2, join=True)
    results = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]

    x, y, model = _fixture_data()
    with torch.no_grad():
        logits = model(x)
    expected_loss = F.cross_entropy(logits, y).item()  # mean over all 13 samples
    expected_acc = (logits.argmax(1) == y).sum().item() / len(y)
    naive = sum(r["local_mean"] for r in results) / 2  # mean of rank means: the classic bug
    assert abs(naive - expected_loss) > 1e-3, "fixture must tell the two apart"

    for result in results:  # every rank gets the same global numbers
        for stats in (result["val"], result["train"]):
            assert stats["samples"] == 13
            assert stats["loss"] == pytest.approx(expected_loss, abs=1e-6)
            assert stats["accuracy"] == pytest.approx(expected_acc, abs=1e-9)
            assert stats["time_s"] > 0 and stats["peak_mem_mb"] > 0
        assert result["late"]["time_s"] < 0.5, result["late"]  # the clocks start together


# --- Ray Train DDP end to end ---------------------------------------------------------

EPOCH_LINE = re.compile(
    r"epoch (\d+)/(\d+) train_loss=([\d.]+) val_loss=([\d.]+) val_acc=([\d.]+) samples/s=([\d.]+) time=([\d.]+)s"
)


def _epoch_lines(output: str) -> list[tuple[int, int, float, float, float]]:
    return [(int(m[1]), int(m[2]), float(m[3]), float(m[4]), float(m[5])) for m in EPOCH_LINE.finditer(output)]


def _read_json(path: Path):
    return json.loads(path.read_text())


def _checkpoints(run_dir: Path) -> list[str]:
    return sorted(p.name for p in run_dir.iterdir() if p.is_dir() and p.name.startswith("checkpoint_"))


@pytest.fixture(scope="module")
def ray_run(cluster_env: dict[str, str]) -> DdpRun:
    """`python -m training.ray_ddp` (2 Ray Train workers, 2 epochs of its synthetic set) as the session's
    ddp-resnet run on the embedded cluster (support/shared_runs.py: test_ddp_resnet_job.py looks at the same run)."""
    run = ddp_resnet(cluster_env)
    assert run.proc.returncode == 0, run.log[-6000:]  # with --output json the followed log goes to stderr
    return run


@pytest.mark.cluster
def test_ray_ddp_two_workers_learns_and_rank0_checkpoints_each_epoch(ray_run):
    from training import checkpoint  # imports ray; kept out of the module the gloo children import

    lines = _epoch_lines(ray_run.log)
    assert [(e, n) for e, n, *_ in lines] == [(1, 2), (2, 2)], ray_run.log[-4000:]
    (_, _, loss1, _, _), (_, _, loss2, _, acc2) = lines
    assert loss2 < loss1, f"train loss should fall: {loss1} -> {loss2}"
    assert acc2 > 0.2, f"val accuracy should beat chance (0.1): {acc2}"
    assert "DATA: using SYNTHETIC digit-like data" in ray_run.log
    assert "RESULT: checkpoint=" in ray_run.log

    assert ray_run.checkpoints == ["checkpoint_epoch_0001", "checkpoint_epoch_0002"]
    for epoch, name in enumerate(ray_run.checkpoints, start=1):
        folder = ray_run.run_dir / name
        files = {checkpoint.MODEL_FILE, checkpoint.OPTIMIZER_FILE, checkpoint.STATE_FILE, checkpoint.METRICS_FILE}
        assert {p.name for p in folder.iterdir()} == files
        state = _read_json(folder / checkpoint.STATE_FILE)
        assert state == {"epoch": epoch, "written_by_rank": 0, "world_size": 2}
        assert [m["epoch"] for m in _read_json(folder / checkpoint.METRICS_FILE)] == list(range(1, epoch + 1))
    history = _read_json(ray_run.run_dir / "checkpoint_epoch_0002" / checkpoint.METRICS_FILE)
    # every sample once per epoch (the synthetic set's sizes: the job's local profile sets none)
    assert [m["train_samples"] for m in history] == [data.SYNTHETIC_TRAIN_SIZE] * 2
    assert [m["val_samples"] for m in history] == [data.SYNTHETIC_VAL_SIZE] * 2


@pytest.mark.cluster
def test_ray_ddp_resume_continues_at_next_epoch(ray_run, cluster_env):
    from training import checkpoint

    first_history = _read_json(ray_run.run_dir / "checkpoint_epoch_0002" / checkpoint.METRICS_FILE)
    # The same storage path and run name (the first run's id), one more epoch: a new run id that resumes.
    second = rtjob("submit", "ddp-resnet", "--nodes", "2", "--submission-id", new_id("ddp-resume"), "--output", "json",
                   "--set", f"args.run_name={ray_run.run['id']}", "--set", "args.epochs=3",
                   env=cluster_env, timeout=600)
    output = second.stderr
    assert second.returncode == 0, output[-6000:]

    assert "RESUME: loaded the checkpoint of epoch 2; continuing at epoch 3/3" in output
    lines = _epoch_lines(output)
    assert [(e, n) for e, n, *_ in lines] == [(3, 3)], output[-4000:]
    # Started from the trained weights, not from scratch: better than the first epoch.
    assert lines[0][2] < first_history[0]["train_loss"]

    assert _checkpoints(ray_run.run_dir) == [f"checkpoint_epoch_000{e}" for e in (1, 2, 3)]
    history = _read_json(ray_run.run_dir / "checkpoint_epoch_0003" / checkpoint.METRICS_FILE)
    assert history[:2] == first_history and history[2]["epoch"] == 3
