"""A plain Ray Train script that knows nothing of rtjob (tests): the shape users bring.

Two CPU workers fit y = 3x + 1 from ``./data/points.csv`` (read by every worker through a relative path, the
common ``./data`` pattern), and report ``{"epoch", "loss"}`` with a checkpoint (``model.pt``) each epoch to
``RunConfig(storage_path=..., name=...)`` given on the command line. Ray Train writes
``<storage_path>/<name>/checkpoint_<timestamp>/`` folders and ``checkpoint_manager_snapshot.json``.
"""

import argparse
import csv
import hashlib
import os
import tempfile

import ray.train
import torch
from ray.train import Checkpoint, RunConfig, ScalingConfig
from ray.train.torch import TorchTrainer, prepare_model


def train_loop(config: dict) -> None:
    token = os.environ.get("PLAIN_TOKEN", "")  # a secret the job may give it (the test hashes what each worker sees)
    print(f"worker {ray.train.get_context().get_world_rank()} token sha256 "
          f"{hashlib.sha256(token.encode()).hexdigest()[:16]}", flush=True)
    with open(os.path.join("data", "points.csv")) as f:  # relative: the job's working dir
        rows = [(float(x), float(y)) for x, y in csv.reader(f)]
    x = torch.tensor([[r[0]] for r in rows])
    y = torch.tensor([[r[1]] for r in rows])
    torch.manual_seed(0)
    model = prepare_model(torch.nn.Linear(1, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    for epoch in range(1, config["epochs"] + 1):
        for _ in range(20):
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()
        metrics = {"epoch": epoch, "loss": loss.item()}
        with tempfile.TemporaryDirectory() as tmp:
            checkpoint = None
            if ray.train.get_context().get_world_rank() == 0:
                torch.save({"epoch": epoch, "model": getattr(model, "module", model).state_dict()}, os.path.join(tmp, "model.pt"))
                checkpoint = Checkpoint.from_directory(tmp)
            ray.train.report(metrics, checkpoint=checkpoint)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--storage-path", required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--num-workers", type=int, default=2)
    args = parser.parse_args()
    trainer = TorchTrainer(
        train_loop,
        train_loop_config={"epochs": args.epochs},
        scaling_config=ScalingConfig(num_workers=args.num_workers, use_gpu=False),
        run_config=RunConfig(storage_path=args.storage_path, name=args.name),
    )
    result = trainer.fit()
    print(f"done: {result.path} {result.metrics}", flush=True)


if __name__ == "__main__":
    main()
