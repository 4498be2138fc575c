"""End to end against a real S3-protocol server on loopback (moto): `rtjob submit ddp-resnet --nodes 2
--storage s3://...` on the real 2-node embedded cluster writes its checkpoints to S3; `rtjob pull ID` (latest
and best) gives a checkpoint that loads; `rtjob results ID --plot` draws it; no output ever shows a secret.
`data-resnet` trains from Parquet folders in the same S3 server and checkpoints there.
"""

from __future__ import annotations

import json
import re
import sys

import pytest
import torch
from support.cli import REPO, new_id, rtjob
from support.s3_server import bucket_fixture

pytestmark = pytest.mark.cluster

BUCKET = "rtjob-runs"


s3 = bucket_fixture(BUCKET)


def test_ddp_resnet_writes_checkpoints_to_s3_and_pull_gives_a_loadable_checkpoint_and_a_plot(
    cluster_env, s3, tmp_path
):
    env = {**cluster_env, **s3.env()}
    run_id = new_id("s3")
    outputs: list[str] = []

    def cli(*args: str, timeout: float = 120) -> object:
        proc = rtjob(*args, env=env, timeout=timeout)
        outputs.extend([proc.stdout, proc.stderr])
        return proc

    # The request shows the endpoint; the forwarded keys travel sealed (issue 45): named, never in env_vars.
    render = cli("render", "ddp-resnet", "--nodes", "2", "--storage", f"s3://{BUCKET}/runs",
                 "--forward-aws-credentials", "--submission-id", run_id, "--output", "json")
    assert render.returncode == 0, render.stderr
    request = json.loads(render.stdout)
    job_env = request["submit_job"]["runtime_env"]["env_vars"]
    assert job_env["AWS_ENDPOINT_URL"] == s3.endpoint
    assert "AWS_ACCESS_KEY_ID" not in job_env and "AWS_SECRET_ACCESS_KEY" not in job_env
    assert ("rtjob_sealed/ (sealed: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY)"
            in request["submit_job"]["runtime_env"]["py_modules"])
    assert request["submit_job"]["runtime_env"]["worker_process_setup_hook"] == "rtjob.runside.secret_env.setup"
    assert request["submit_job"]["metadata"]["rtjob.storage_endpoint"] == s3.endpoint

    submit = cli("submit", "ddp-resnet", "--nodes", "2", "--storage", f"s3://{BUCKET}/runs",
                 "--forward-aws-credentials", "--submission-id", run_id, "--output", "json",
                 "--set", "args.train_size=384", "--set", "args.val_size=128", "--set", "args.log_every_steps=1",
                 timeout=600)
    assert submit.returncode == 0, submit.stderr[-3000:]
    run = json.loads(submit.stdout)
    assert run["status"] == "SUCCEEDED"
    assert run["storage_uri"] == f"s3://{BUCKET}/runs/ddp-resnet/{run_id}"

    # What landed in S3: one folder per epoch under the run's own prefix.
    keys = [o["Key"] for o in s3.client().list_objects_v2(Bucket=BUCKET, Prefix=f"runs/ddp-resnet/{run_id}/")
            ["Contents"]]
    for epoch in (1, 2):
        for name in ("model.pt", "optimizer.pt", "state.json", "metrics.json"):
            assert f"runs/ddp-resnet/{run_id}/checkpoint_epoch_{epoch:04d}/{name}" in keys, keys

    # Live rows (issue 36): rank 0's step rows, printed in a Ray Train worker and forwarded by Ray to the driver's
    # log, collected by the companion into metrics.jsonl (each once: this cluster's two log monitors may show a
    # worker's line twice); system.jsonl has the driver node's rows (both nodes are this machine: no GPU, gpus []).
    def rows(name: str) -> list[dict]:
        body = s3.client().get_object(Bucket=BUCKET, Key=f"runs/ddp-resnet/{run_id}/{name}")["Body"].read()
        return [json.loads(line) for line in body.decode().splitlines()]

    steps = rows("metrics.jsonl")  # 384 samples / 128 a step: 3 steps an epoch, a row each (--log-every-steps 1)
    assert [(r["step"], r["epoch"]) for r in steps] == [(1, 1), (2, 1), (3, 1), (4, 2), (5, 2), (6, 2)], steps
    assert all(r["loss"] > 0 and r["lr"] == 0.001 and r["samples_per_s"] > 0 and r["time"] > 0 for r in steps)
    system = rows("system.jsonl")
    assert system and all(r["gpus"] == [] and 0 <= r["cpu_percent"] <= 100 and r["mem_total_mb"] > 0 for r in system)

    # `rtjob pull ID` needs nothing else: the run's metadata names its storage and endpoint.
    no_endpoint = {k: v for k, v in env.items() if not k.startswith("AWS_ENDPOINT_URL")}
    latest_dir = tmp_path / "latest"
    pull = rtjob("pull", run_id, "--to", str(latest_dir), "--output", "json", env=no_endpoint, timeout=120)
    outputs.extend([pull.stdout, pull.stderr])
    assert pull.returncode == 0, pull.stderr
    report = json.loads(pull.stdout)
    assert report["checkpoints"] == ["checkpoint_epoch_0002"] and report["endpoint"] == s3.endpoint
    assert report["refused"] == [] and report["failed"] == []
    history = json.loads((latest_dir / "metrics.json").read_text())
    assert [row["epoch"] for row in history] == [1, 2]

    sys.path.insert(0, str(REPO))
    from training.models import build_model

    model = build_model("resnet18", 1, 10)
    model.load_state_dict(torch.load(latest_dir / "checkpoint_epoch_0002" / "model.pt", map_location="cpu"))
    state = json.loads((latest_dir / "checkpoint_epoch_0002" / "state.json").read_text())
    assert state["epoch"] == 2 and state["world_size"] == 2

    # best (val_loss, min) is the epoch with the lowest validation loss of the history.
    best_epoch = min(history, key=lambda row: (row["val_loss"], -row["epoch"]))["epoch"]
    best_dir = tmp_path / "best"
    best = cli("pull", run_id, "--to", str(best_dir), "--checkpoint", "best", "--output", "json")
    assert best.returncode == 0, best.stderr
    assert json.loads(best.stdout)["checkpoints"] == [f"checkpoint_epoch_{best_epoch:04d}"]
    model.load_state_dict(torch.load(best_dir / f"checkpoint_epoch_{best_epoch:04d}" / "model.pt",
                                     map_location="cpu"))

    # Results straight from storage, with a plot; and from the pulled folder.
    plot = tmp_path / "curves.png"
    results = cli("results", run_id, "--plot", str(plot))
    assert results.returncode == 0, results.stderr
    assert "VAL LOSS" in results.stdout and "ACCURACY" in results.stdout
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and plot.stat().st_size > 10_000
    local = cli("results", str(latest_dir), "--output", "json")
    assert local.returncode == 0 and json.loads(local.stdout)[0]["history"] == history

    # Everything the user saw, including the followed training log: no key, no secret.
    status = cli("status", run_id, "--output", "json")
    logs = cli("logs", run_id)
    assert status.returncode == 0 and logs.returncode == 0
    text = "\n".join(outputs)
    assert s3.secret_key not in text and s3.access_key not in text
    assert "epoch 2/2" in text  # the log really was part of what was checked

    # An unknown run id is bad input (2), in one line.
    unknown = cli("pull", "t-no-such-run-0000", "--to", str(tmp_path / "none"))
    assert unknown.returncode == 2 and len(unknown.stderr.strip().splitlines()) == 1, unknown.stderr


def test_data_resnet_trains_from_parquet_in_s3_and_checkpoints_there(cluster_env, s3, tmp_path):
    """`data-resnet --set args.data_uri=s3://...`: Ray Data reads Parquet train/ and val/ folders from the S3
    server (the endpoint and keys reach the job as for storage), trains, and checkpoints to S3."""
    sys.path.insert(0, str(REPO))
    from training import data
    from training.image_rows import export_parquet

    train, val = data.load_datasets("synthetic", train_size=512, val_size=128)
    client = s3.client()
    for split, dataset in (("train", train), ("val", val)):
        folder = tmp_path / split
        export_parquet(dataset, str(folder), rows_per_file=128)
        for path in sorted(folder.glob("*.parquet")):
            client.upload_file(str(path), BUCKET, f"datasets/digits-parquet/{split}/{path.name}")

    run_id = new_id("pq")
    proc = rtjob("submit", "data-resnet", "--nodes", "2", "--storage", f"s3://{BUCKET}/runs",
                 "--forward-aws-credentials", "--submission-id", run_id, "--output", "json",
                 "--set", f"args.data_uri=s3://{BUCKET}/datasets/digits-parquet", "--set", "args.epochs=2",
                 env={**cluster_env, **s3.env()}, timeout=600)
    log = proc.stderr
    assert proc.returncode == 0, log[-3000:]
    assert json.loads(proc.stdout)["status"] == "SUCCEEDED"
    where = f"s3://{BUCKET}/datasets/digits-parquet"
    assert f"DATA: Ray Data from {where}/train + {where}/val" in log, log[-3000:]
    epochs = re.findall(r"epoch (\d)/2 train_loss=([\d.]+) val_loss=([\d.]+) val_acc=([\d.]+)", log)
    assert [e[0] for e in epochs] == ["1", "2"], log[-3000:]
    assert float(epochs[1][1]) < float(epochs[0][1]) and float(epochs[1][3]) > 0.3  # learns; chance is 0.1
    # 512 training rows, each seen once per epoch across the two workers.
    metrics = json.loads(client.get_object(
        Bucket=BUCKET, Key=f"runs/data-resnet/{run_id}/checkpoint_epoch_0002/metrics.json")["Body"].read())
    assert [row["train_samples"] for row in metrics] == [512, 512] and metrics[-1]["val_samples"] == 128
    assert s3.secret_key not in log + proc.stdout
