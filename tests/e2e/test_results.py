"""`rtjob results`: the metrics history the training entrypoints write, as a table, JSON, a plot, and several
runs side by side; from a pulled folder, a run folder in storage, or s3:// (moto on loopback). No cluster.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.cli import base_env, rtjob
from support.s3_server import S3Server, threaded_server

PNG = b"\x89PNG\r\n\x1a\n"


def history(val_losses: list[float], speed: float = 400.0) -> list[dict[str, float]]:
    return [{"epoch": e, "epoch_time_s": 10.0 + e, "train_loss": 2.0 / e, "train_accuracy": 0.3 + e / 10,
             "train_samples_per_s": speed + e, "val_loss": v, "val_accuracy": 0.5 + e / 10}
            for e, v in enumerate(val_losses, start=1)]


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return base_env(tmp_path / "home", AWS_EC2_METADATA_DISABLED="true")


def pulled(root: Path, name: str, rows: list[dict[str, float]]) -> Path:
    """The layout `rtjob pull` leaves: DIR/metrics.json + the checkpoint folder."""
    run = root / name
    (run / "checkpoint_epoch_0003").mkdir(parents=True)
    (run / "metrics.json").write_text(json.dumps(rows))
    (run / "checkpoint_epoch_0003" / "metrics.json").write_text(json.dumps(rows))
    return run


def stored(root: Path, name: str, rows: list[dict[str, float]]) -> Path:
    """The layout in storage: only checkpoint_*/metrics.json, each with the history so far."""
    run = root / name
    for epoch in range(1, len(rows) + 1):
        ckpt = run / f"checkpoint_epoch_{epoch:04d}"
        ckpt.mkdir(parents=True)
        (ckpt / "metrics.json").write_text(json.dumps(rows[:epoch]))
    return run


def test_one_run_as_a_table_json_and_plot(env, tmp_path):
    rows = history([0.9, 0.45, 0.5])
    run = pulled(tmp_path, "run-a", rows)
    proc = rtjob("results", str(run), env=env)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    for title in ("EPOCH", "TRAIN LOSS", "VAL LOSS", "ACCURACY", "SAMPLES/S", "TIME"):
        assert title in out
    assert "0.4500" in out and "401.0" in out and "13.0s" in out and "1.0000" in out  # train loss 2/2
    assert "best val loss 0.4500 at epoch 2" in out
    assert out.splitlines()[0] == f"run-a  ({run / 'metrics.json'})"  # the source whole, on its own line

    proc = rtjob("results", str(run), "--output", "json", env=env)
    data = json.loads(proc.stdout)
    assert data[0]["history"] == rows and data[0]["label"] == "run-a"
    assert data[0]["summary"]["best_epoch"] == 2 and data[0]["summary"]["epochs"] == 3

    for suffix in ("png", "svg"):
        plot = tmp_path / f"curves.{suffix}"
        proc = rtjob("results", str(run), "--plot", str(plot), env=env)
        assert proc.returncode == 0, proc.stderr
        assert f"plot: {plot}" in proc.stderr
        head = plot.read_bytes()[:100]
        assert head.startswith(PNG) if suffix == "png" else b"<svg" in plot.read_bytes()[:2000]


def test_several_runs_side_by_side_from_pulled_and_stored_layouts(env, tmp_path):
    a = pulled(tmp_path / "pulled", "run-a", history([0.9, 0.45, 0.5]))
    b = stored(tmp_path / "storage", "run-b", history([0.8, 0.6, 0.35, 0.3], speed=800.0))
    plot = tmp_path / "compare.png"
    proc = rtjob("results", str(a), str(b), "--plot", str(plot), env=env)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "run-a" in out and "run-b" in out and "summary" in out
    assert "0.4500 (2)" in out and "0.3000 (4)" in out  # best val loss (epoch) per run
    assert "0.4500 / 0.7000" in out  # epoch 2 of run-a: val loss / accuracy
    epoch4 = next(line for line in out.splitlines() if line.strip().startswith("4 "))
    assert "-" in epoch4 and "0.3000 / 0.9000" in epoch4  # run-a had no epoch 4
    assert plot.read_bytes()[:8] == PNG

    # The stored layout: the newest checkpoint holds the whole history.
    data = json.loads(rtjob("results", str(b), "--output", "json", env=env).stdout)
    assert [row["epoch"] for row in data[0]["history"]] == [1, 2, 3, 4]
    # The same folder twice gets distinct labels.
    data = json.loads(rtjob("results", str(a), str(a), "--output", "json", env=env).stdout)
    assert [d["label"] for d in data] == ["run-a", "run-a (2)"]


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Server]:
    with threaded_server() as server:
        server.client().create_bucket(Bucket="results-tests")
        yield server


def test_results_read_from_s3_without_pulling(s3, env):
    rows = history([0.7, 0.5])
    client = s3.client()
    for epoch in (1, 2):
        client.put_object(Bucket="results-tests", Key=f"runs/job/r1/checkpoint_epoch_{epoch:04d}/metrics.json",
                          Body=json.dumps(rows[:epoch]).encode())
        client.put_object(Bucket="results-tests", Key=f"runs/job/r1/checkpoint_epoch_{epoch:04d}/model.pt",
                          Body=b"w" * 1000)
    env = {**env, **s3.env()}
    proc = rtjob("results", "s3://results-tests/runs/job/r1", "--output", "json", env=env)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)[0]
    assert data["history"] == rows and data["label"] == "r1"
    assert data["source"] == "s3://results-tests/runs/job/r1/checkpoint_epoch_0002/metrics.json"
    assert s3.secret_key not in proc.stdout + proc.stderr


def test_bad_inputs_are_one_line_exit_2(env, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    run = pulled(tmp_path, "run", history([0.5]))
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "metrics.json").write_text("{not json")
    cases = [
        (("results", str(empty)), "no metrics history"),
        (("results", str(broken)), "cannot read the metrics history"),
        (("results", str(run), "--plot", str(tmp_path / "plot.txt")), "must end in"),
        (("results", str(run), "--plot", str(tmp_path / "nowhere" / "p.png")), "does not exist"),
        (("results", "gs://bucket/run"), "gs://"),
    ]
    for args, words in cases:
        proc = rtjob(*args, env=env)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1 and words in lines[0], (args, proc.stderr)
    assert rtjob("results", env=env).returncode == 2  # at least one run


def test_the_training_history_has_the_columns_results_reads():
    """training/ writes what `rtjob results` reads: loop.run_epochs builds every history row, and every
    entrypoint that keeps a history goes through it."""
    import sys

    from support.cli import REPO

    sys.path.insert(0, str(REPO))
    from rtjob.storage.results import COLUMNS

    from training import loop

    train = loop.EpochStats(loss=0.5, accuracy=0.9, samples=64, time_s=2.0, samples_per_s=32.0, peak_mem_mb=100.0)
    val = dataclasses.replace(train, loss=0.7, accuracy=0.8)
    rows: list[dict] = []
    handed: list[int] = []
    last = loop.run_epochs(2, 3, rows, lambda epoch: (train, val), lambda epoch, m: handed.append(epoch), None)
    assert [row["epoch"] for row in rows] == [2, 3] == handed and last is rows[-1]
    assert {key for key, _, _ in COLUMNS} <= set(rows[0])
    assert rows[0]["train_loss"] == 0.5 and rows[0]["val_loss"] == 0.7 and rows[0]["val_accuracy"] == 0.8
    # No entrypoint builds rows of its own: the only `history.append(` is loop.py's.
    sources = {p.name: p.read_text() for p in (REPO / "training").glob("*.py")}
    assert [name for name, text in sources.items() if "history.append(" in text] == ["loop.py"]
    for name in ("ray_ddp.py", "ray_data_ddp.py", "sharded.py", "single.py", "torchrun_ddp.py"):
        assert "loop.run_epochs(" in sources[name], name
