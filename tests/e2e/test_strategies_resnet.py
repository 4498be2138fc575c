"""The other training strategies, for real and tiny: vanilla DDP under torchrun, the torchrun launcher,
Ray Data ingest (Parquet decoding) and the Ray Tune sweep over Ray Train runs.

2 CPU processes / workers, a few hundred synthetic samples, 1-2 epochs. The Ray-level runs of
data-resnet and torchrun-resnet (2 nodes) live in test_fault_tolerance.py, where the same runs also
survive a killed worker / a killed driver and are checked for learning there too.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from support.cli import REPO, new_id, rtjob

EPOCH_LINE = re.compile(r"epoch (\d+)/(\d+) train_loss=([\d.]+) val_loss=([\d.]+) val_acc=([\d.]+)")
TINY = ["--dataset", "synthetic", "--train-size", "512", "--val-size", "256", "--global-batch-size", "32",
        "--seed", "0"]


def epochs_of(log: str) -> list[tuple[int, int, float, float, float]]:
    return [(int(m[1]), int(m[2]), float(m[3]), float(m[4]), float(m[5])) for m in EPOCH_LINE.finditer(log)]


def assert_learns(log: str, epochs: int) -> None:
    lines = epochs_of(log)
    assert [e for e, *_ in lines] == list(range(1, epochs + 1)), log[-4000:]
    assert lines[-1][2] < lines[0][2], f"train loss should fall: {lines}"
    assert lines[-1][4] > 0.2, f"val accuracy should beat chance (0.1): {lines}"


def torchrun(*flags: str, storage: Path, nproc: int = 2, timeout: int = 240) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "RTJOB_"))}
    env.update(PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc),
           "-m", "training.torchrun_ddp", *TINY, "--storage-path", str(storage), "--run-name", "tr", *flags]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
    proc.output = proc.stdout + proc.stderr  # type: ignore[attr-defined]
    assert proc.returncode == 0, proc.output[-6000:]  # type: ignore[attr-defined]
    return proc


# --- vanilla DDP under torchrun (one node, as in the workshop) --------------------------------------


@pytest.fixture(scope="module")
def torchrun_run(tmp_path_factory):
    storage = tmp_path_factory.mktemp("torchrun")
    return storage, torchrun("--epochs", "2", storage=storage)


def test_torchrun_single_node_learns_and_only_rank0_checkpoints(torchrun_run):
    storage, proc = torchrun_run
    log = proc.output
    assert_learns(log, 2)
    assert "DATA: using SYNTHETIC digit-like data" in log
    assert "DATA: 2 processes x batch 16 per step (backend gloo, device cpu)" in log
    # save() prints which process wrote: exactly one line per epoch, always rank 0.
    writers = re.findall(r"CHECKPOINT: epoch (\d+) written by rank (\d+)", log)
    assert writers == [("1", "0"), ("2", "0")], log[-3000:]
    run_dir = storage / "tr"
    assert sorted(p.name for p in run_dir.iterdir()) == ["checkpoint_epoch_0001", "checkpoint_epoch_0002"]
    folder = run_dir / "checkpoint_epoch_0002"
    assert {p.name for p in folder.iterdir()} == {"model.pt", "optimizer.pt", "state.json", "metrics.json"}
    assert json.loads((folder / "state.json").read_text()) == {"epoch": 2, "written_by_rank": 0, "world_size": 2}
    history = json.loads((folder / "metrics.json").read_text())
    assert [m["train_samples"] for m in history] == [512, 512]  # DistributedSampler: every sample once
    assert [m["val_samples"] for m in history] == [256, 256]  # exact, unpadded validation shards
    sys.path.insert(0, str(REPO))
    from training.models import build_model

    build_model("resnet18", 1, 10).load_state_dict(torch.load(folder / "model.pt", map_location="cpu"))


def test_torchrun_resume_continues_at_next_epoch(torchrun_run):
    storage, first = torchrun_run
    first_history = json.loads((storage / "tr" / "checkpoint_epoch_0002" / "metrics.json").read_text())
    second = torchrun("--epochs", "3", storage=storage)
    assert "RESUME: loaded the checkpoint of epoch 2; continuing at epoch 3/3" in second.output
    lines = epochs_of(second.output)
    assert [(e, n) for e, n, *_ in lines] == [(3, 3)]
    assert lines[0][2] < first_history[0]["train_loss"]  # continued from trained weights
    history = json.loads((storage / "tr" / "checkpoint_epoch_0003" / "metrics.json").read_text())
    assert history[:2] == first_history and history[2]["epoch"] == 3


# --- the torchrun launcher's commands (no cluster) ----------------------------------------------------


def test_torchrun_ddp_shapes_the_model_for_a_3_channel_dataset(tmp_path):
    """--model vit --dataset synthetic-cifar10 under torchrun: a 3x32x32 model, not the MNIST-shaped default."""
    proc = torchrun("--epochs", "1", "--model", "vit", "--vit-size", "tiny", "--dataset", "synthetic-cifar10",
                    "--train-size", "64", "--val-size", "32", storage=tmp_path)
    assert [e for e, *_ in epochs_of(proc.output)] == [1], proc.output[-3000:]
    state = torch.load(tmp_path / "tr" / "checkpoint_epoch_0001" / "model.pt", map_location="cpu")
    assert state["conv_proj.weight"].shape[1] == 3  # the ViT's patch projection takes 3 channels


def test_torchrun_launcher_builds_one_command_per_node_and_passes_flags_on(monkeypatch):
    from training import torchrun_launcher as launcher

    monkeypatch.setenv("RTJOB_NODES", "2")
    monkeypatch.setenv("RTJOB_NUM_WORKERS", "4")
    monkeypatch.setenv("RTJOB_RUN_NAME", "run-1")
    args, rest = launcher.parse_args(["--epochs", "3", "--dataset", "synthetic"])
    assert (args.nodes, args.nproc_per_node) == (2, 2) and rest == ["--epochs", "3", "--dataset", "synthetic"]
    cmd = launcher.torchrun_command(args, 1, "10.0.0.5", 29511, rest)
    assert cmd[1:] == ["-m", "torch.distributed.run", "--nproc-per-node", "2", "--nnodes", "2", "--node-rank", "1",
                       "--master-addr", "10.0.0.5", "--master-port", "29511", "-m", "training.torchrun_ddp",
                       "--epochs", "3", "--dataset", "synthetic"]
    args, rest = launcher.parse_args(["--nodes", "1", "--nproc-per-node", "2"])
    assert "--standalone" in launcher.torchrun_command(args, 0, "x", 1, rest)
    monkeypatch.delenv("RTJOB_RUN_NAME")
    _, rest = launcher.parse_args([])
    assert rest[0] == "--run-name"  # every node must agree on one run folder


# --- Ray Data: the Parquet layout --data-uri reads (no cluster) ---------------------------------------


def test_parquet_export_decodes_back_to_the_same_images(tmp_path):
    import pyarrow.parquet as pq

    from training import data
    from training.image_rows import decode_batch, export_parquet

    train, _ = data.load_datasets("synthetic", train_size=40, val_size=8)
    export_parquet(train, str(tmp_path / "train"), rows_per_file=16)
    files = sorted((tmp_path / "train").glob("*.parquet"))
    assert len(files) == 3
    table = pq.read_table(tmp_path / "train")
    batch = decode_batch({name: table.column(name).to_numpy(zero_copy_only=False) for name in ("image", "label")})
    x, y = train.tensors
    assert batch["image"].shape == (40, 1, 28, 28) and batch["image"].dtype.name == "float32"
    assert (batch["label"] == y.numpy()).all()
    # PNG stores 8-bit pixels: the round trip is exact up to one grey level.
    assert abs(torch.from_numpy(batch["image"]) - x).max().item() <= 0.5 / 255 / data.MNIST_STD + 1e-6


# --- Ray Tune over Ray Train (a real sweep on the 2-node embedded cluster) ----------------------------


@pytest.mark.cluster
def test_tune_sweep_runs_every_trial_and_reports_the_best_checkpoint(cluster_env):
    run_id = new_id("tune")
    proc = rtjob("submit", "tune-resnet", "--nodes", "2", "--submission-id", run_id, "--output", "json",
                 "--set", "args.train_size=256", "--set", "args.val_size=128", "--set", "args.lrs=[0.001, 0.01]",
                 env=cluster_env, timeout=600)
    log = proc.stderr
    assert proc.returncode == 0, log[-5000:]
    run = json.loads(proc.stdout)
    assert run["status"] == "SUCCEEDED"
    finals = dict(re.findall(r"TRIAL (trial-lr[\d.e-]+-bs32): val_loss=([\d.]+) ", log))
    assert set(finals) == {"trial-lr0.001-bs32", "trial-lr0.01-bs32"}, log[-4000:]
    best = re.search(r"BEST: trial=(\S+) lr=([\d.e-]+) global_batch_size=32 val_loss=([\d.]+)", log)
    assert best, log[-3000:]
    assert best[1] == min(finals, key=lambda name: float(finals[name]))  # the lowest final val_loss wins
    metrics = json.loads(re.search(r"BEST: metrics=(\{.*\})", log)[1])
    assert metrics["val_accuracy"] > 0.15 and metrics["epoch"] == 1
    checkpoint = Path(re.search(r"BEST: checkpoint=(\S+)", log)[1])
    assert checkpoint == Path(run["storage_uri"]) / "train" / best[1] / "checkpoint_epoch_0001"
    state = json.loads((checkpoint / "state.json").read_text())
    assert state == {"epoch": 1, "written_by_rank": 0, "world_size": 2}  # 2 workers per trial, rank 0 wrote
