"""Test job: the rtjob checkpoint layout, written the way a training script would, without torch (fast): one
checkpoint_epoch_NNNN/ per epoch with model.pt, state.json (last) and the metrics history so far."""

import argparse
import json
import os

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=2)
args = parser.parse_args()
run_dir = os.environ["RTJOB_RUN_DIR"]


def put(rel: str, data: bytes) -> None:
    if run_dir.startswith("s3://"):
        import boto3

        bucket, _, prefix = run_dir[len("s3://"):].partition("/")
        boto3.client("s3").put_object(Bucket=bucket, Key=f"{prefix}/{rel}", Body=data)
    else:
        path = os.path.join(run_dir, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)


history = []
for epoch in range(1, args.epochs + 1):
    history.append({"epoch": epoch, "train_loss": 1.0 / epoch, "val_loss": 1.5 / epoch, "val_accuracy": 0.4 * epoch,
                    "train_samples_per_s": 100.0, "epoch_time_s": 0.1})
    folder = f"checkpoint_epoch_{epoch:04d}"
    put(f"{folder}/model.pt", os.urandom(1024))
    put(f"{folder}/metrics.json", json.dumps(history).encode())
    put(f"{folder}/state.json", json.dumps({"epoch": epoch}).encode())
    print(f"epoch {epoch}: val_loss {history[-1]['val_loss']:.4f}", flush=True)
print("training done", flush=True)
