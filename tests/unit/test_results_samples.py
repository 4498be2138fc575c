"""`rtjob results` shows what a run generated (`<run>/samples/`): the newest epoch's grid (or every epoch's) as a
path list, pulled from S3 next to where `rtjob pull` puts the run (moto on loopback), read in place from a folder,
and with --plot placed beside the loss curves in one figure. No cluster."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from support.project import ProjectCli, write_files
from support.s3_server import S3Server, bucket_server

BUCKET = "sample-runs"
HISTORY = [{"epoch": 1, "train_loss": 0.8, "val_loss": 0.6}, {"epoch": 2, "train_loss": 0.5, "val_loss": 0.4}]


def _png(colour: tuple[int, int, int], size: int = 16) -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    buffer = io.BytesIO()
    plt.imsave(buffer, np.full((size, size, 3), colour, dtype=np.uint8), format="png")
    return buffer.getvalue()


def _run_files() -> dict[str, bytes]:
    return {"metrics.json": json.dumps(HISTORY).encode(), "samples/epoch_0001.png": _png((255, 0, 0)),
            "samples/epoch_0002.png": _png((0, 0, 255)), "samples/clip_generated.wav": b"RIFF" + b"\0" * 40}


@pytest.fixture
def cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> ProjectCli:
    return ProjectCli(tmp_path, monkeypatch, capsys)


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Server]:
    with bucket_server(BUCKET) as server:
        yield server


def test_a_folder_run_lists_its_newest_grid_in_place_and_every_epoch_on_request(cli, tmp_path):
    run = tmp_path / "store" / "sd" / "run-1"
    for rel, data in _run_files().items():
        (run / rel).parent.mkdir(parents=True, exist_ok=True)
        (run / rel).write_bytes(data)
    latest = cli("results", str(run))
    assert latest.returncode == 0, latest.stderr
    assert f"  {run}/samples/epoch_0002.png" in latest.stdout and "epoch_0001.png" not in latest.stdout
    assert f"  {run}/samples/clip_generated.wav" in latest.stdout  # not named by an epoch: always listed
    every = json.loads(cli("results", str(run), "--samples", "all", "-o", "json").stdout)
    assert [(s["epoch"], s["image"]) for s in every[0]["samples"]] == [(None, False), (1, True), (2, True)]
    assert all(Path(s["path"]).parent == run / "samples" for s in every[0]["samples"])  # read in place
    none = json.loads(cli("results", str(run), "--samples", "none", "-o", "json").stdout)
    assert none[0]["samples"] == []


def test_an_s3_run_pulls_its_samples_beside_the_pulled_run_and_plots_the_grid_beside_the_curves(cli, s3):
    client = s3.client()
    for rel, data in _run_files().items():
        client.put_object(Bucket=BUCKET, Key=f"runs/sd/run-2/{rel}", Body=data)
    for key, value in s3.env().items():
        cli.monkeypatch.setenv(key, value)
    plot = cli.project / "run.png"
    out = cli("results", f"s3://{BUCKET}/runs/sd/run-2", "--plot", str(plot), "-o", "json")
    assert out.returncode == 0, out.stderr
    samples = json.loads(out.stdout)[0]["samples"]
    pulled = cli.project / "rtjob-runs" / "run-2" / "samples"
    assert [Path(s["path"]) for s in samples] == [pulled / "clip_generated.wav", pulled / "epoch_0002.png"]
    assert (pulled / "epoch_0002.png").read_bytes() == _run_files()["samples/epoch_0002.png"]
    import matplotlib.pyplot as plt

    with_grid = plt.imread(str(plot))
    alone = cli.project / "alone.png"
    assert cli("results", f"s3://{BUCKET}/runs/sd/run-2", "--samples", "none", "--plot", str(alone)).returncode == 0
    assert with_grid.shape[1] > plt.imread(str(alone)).shape[1]  # a third panel: the newest grid
    again = cli("results", f"s3://{BUCKET}/runs/sd/run-2", "-o", "json")  # unchanged files are not fetched again
    assert again.returncode == 0 and json.loads(again.stdout)[0]["samples"] == samples


def test_a_run_without_samples_shows_none(cli, tmp_path):
    write_files(tmp_path / "plain", {"metrics.json": json.dumps(HISTORY)})
    out = cli("results", str(tmp_path / "plain"))
    assert out.returncode == 0 and "samples of" not in out.stdout


def test_the_table_shows_only_the_columns_that_have_values(cli, tmp_path):
    """A script that writes only train_loss gets EPOCH and TRAIN LOSS, not rtjob's always-empty columns; two such
    runs side by side: a summary without empty columns either."""
    history = [{"epoch": 1, "train_loss": 0.9}, {"epoch": 2, "train_loss": 0.7}]
    for name in ("a", "b"):
        write_files(tmp_path / name, {"metrics.json": json.dumps(history)})
    out = cli("results", str(tmp_path / "a"))
    assert out.returncode == 0, out.stderr
    header = next(line for line in out.stdout.splitlines() if "TRAIN LOSS" in line)
    assert header.split() == ["EPOCH", "TRAIN", "LOSS"], out.stdout
    both = cli("results", str(tmp_path / "a"), str(tmp_path / "b"))
    assert both.returncode == 0, both.stderr
    summary = next(line for line in both.stdout.splitlines() if line.lstrip().startswith("RUN"))
    assert summary.split() == ["RUN", "EPOCHS", "TRAIN", "LOSS"], both.stdout
    assert "val loss / accuracy" not in both.stdout  # no run validated: no per-epoch table of dashes
