"""`rtjob results`: the metrics history the training entrypoints write, as a table, JSON, a plot, and several
runs side by side; from a pulled folder, a run folder in storage, or s3:// (moto on loopback). No cluster.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from support.cli import base_env, rtjob
from support.s3_server import bucket_fixture

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
    epoch4 = next(line for line in out.splitlines() if line.split("\t")[0] == "4")  # piped: tab-separated
    assert "-" in epoch4 and "0.3000 / 0.9000" in epoch4  # run-a had no epoch 4
    assert plot.read_bytes()[:8] == PNG

    # The stored layout: the newest checkpoint holds the whole history.
    data = json.loads(rtjob("results", str(b), "--output", "json", env=env).stdout)
    assert [row["epoch"] for row in data[0]["history"]] == [1, 2, 3, 4]
    # The same folder twice gets distinct labels.
    data = json.loads(rtjob("results", str(a), str(a), "--output", "json", env=env).stdout)
    assert [d["label"] for d in data] == ["run-a", "run-a (2)"]


s3 = bucket_fixture("results-tests")


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


# Hostile or broken metrics.json: one validator for `results` and `pull --checkpoint best`; each is one line,
# exit 2, never a traceback. (name, file content, words in the line)
DEEP = b"[" * 200_000 + b"]" * 200_000
BAD_HISTORIES = [
    ("deep", DEEP, "nested deeper than 16 levels"),
    ("deep-in-a-row", json.dumps([{"epoch": 1, "x": [[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]}]).encode(),
     "nested deeper than 16 levels"),
    ("huge", b'[{"epoch": 1, "note": "' + b"x" * (17 * 1024 * 1024) + b'"}]', "larger than 16 MiB"),
    ("string-loss", b'[{"epoch": 1, "val_loss": "0.5"}]', "entry 1: 'val_loss' is a string, not a number"),
    ("bool-accuracy", b'[{"epoch": 1, "val_accuracy": true}]', "'val_accuracy' is a boolean, not a number"),
    ("word-epoch", b'[{"epoch": "one", "val_loss": 0.5}]', "'epoch' is a string, not a number"),
    ("nan-epoch", b'[{"epoch": NaN, "val_loss": 0.5}]', "'epoch' is nan, not a whole number"),
    ("half-epoch", b'[{"epoch": 1.5, "val_loss": 0.5}]', "'epoch' is 1.5, not a whole number"),
    ("giant-epoch", b'[{"epoch": 1' + b"0" * 400 + b', "val_loss": 0.5}]', "too large"),
    ("not-objects", b"[1, 2, 3]", "entry 1 is a number, not an object"),
    ("mixed", b'[{"epoch": 1}, "two"]', "entry 2 is a string, not an object"),
    ("a-string", b'"history"', "expected a list of per-epoch objects, not a string"),
    ("not-json", b"{not json", "not valid JSON"),
]


@pytest.mark.parametrize("name,content,words", BAD_HISTORIES, ids=[case[0] for case in BAD_HISTORIES])
def test_a_hostile_metrics_history_is_one_line_exit_2_never_a_traceback(env, tmp_path, name, content, words):
    run = tmp_path / name
    (run / "checkpoint_epoch_0001").mkdir(parents=True)
    (run / "checkpoint_epoch_0001" / "metrics.json").write_bytes(content)
    proc = rtjob("results", str(run), env=env, timeout=120)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr[-3000:]
    assert "cannot read the metrics history" in lines[0] and words in lines[0], lines[0]


def test_nan_and_null_metrics_still_read_as_no_value(env, tmp_path):
    run = tmp_path / "nan"
    (run / "checkpoint_epoch_0002").mkdir(parents=True)
    (run / "checkpoint_epoch_0002" / "metrics.json").write_text(
        '[{"epoch": 1, "val_loss": NaN, "train_loss": null, "note": "any text"}, {"epoch": 2, "val_loss": 0.5}]')
    proc = rtjob("results", str(run), env=env)
    assert proc.returncode == 0, proc.stderr
    assert "best val loss 0.5000 at epoch 2" in proc.stdout


def test_results_and_pull_best_read_storage_through_the_same_validator(s3, env, tmp_path):
    """From s3://, `results` and `pull --checkpoint best` refuse the same histories with the same line; the
    16 MiB limit is checked against the listing, before the GET."""
    env = {**env, **s3.env()}
    client = s3.client()
    for name, content, words in BAD_HISTORIES:
        if name not in ("deep", "huge", "string-loss", "word-epoch", "not-objects"):
            continue
        prefix = f"runs/bad/{name}"
        good = json.dumps(history([0.5])).encode()
        for epoch, body in ((1, good), (2, content)):
            client.put_object(Bucket="results-tests", Key=f"{prefix}/checkpoint_epoch_{epoch:04d}/metrics.json",
                              Body=body)
        uri = f"s3://results-tests/{prefix}"
        for args in (("results", uri), ("pull", uri, "--checkpoint", "best", "--to", str(tmp_path / name))):
            proc = rtjob(*args, env=env, timeout=120)
            lines = proc.stderr.strip().splitlines()
            assert proc.returncode == 2 and len(lines) == 1, (args, proc.stderr[-3000:])
            assert f"{uri}/checkpoint_epoch_0002/metrics.json: cannot read the metrics history" in lines[0], lines
            assert words in lines[0] and s3.secret_key not in proc.stdout + proc.stderr, lines
    # `best` by a metric of the run's own naming: a string where it should be a number is refused too.
    prefix = "runs/bad/own-metric"
    for epoch, f1 in ((1, 0.5), (2, "high")):
        client.put_object(Bucket="results-tests", Key=f"{prefix}/checkpoint_epoch_{epoch:04d}/metrics.json",
                          Body=json.dumps([{"epoch": epoch, "f1": f1}]).encode())
    proc = rtjob("pull", f"s3://results-tests/{prefix}", "--checkpoint", "best:f1", "--to", str(tmp_path / "f1"),
                 env=env, timeout=120)
    assert proc.returncode == 2 and "'f1' is a string, not a number" in proc.stderr, proc.stderr
