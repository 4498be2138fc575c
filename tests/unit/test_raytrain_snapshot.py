"""Ray Train's own record of a run (checkpoint_manager_snapshot.json, storage/raytrain.py) read by `rtjob results`
and `rtjob pull --checkpoint best`, and what `results`/`pull ID` say when a run's storage holds nothing.

The fixture is a real snapshot from tests/support/plain_raytrain (its README says how it was made): two
checkpoints, {"epoch": 1, "loss": 0.85...} and {"epoch": 2, "loss": 0.22...}. No cluster.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from rtjob.core.errors import BadInput
from rtjob.core.model import RunInfo, RunStatus
from rtjob.runs.history.sources import explained, resolve_source
from rtjob.storage.layout import NothingStored, parse_checkpoint_choice
from rtjob.storage.location import parse_location
from rtjob.storage.opening import open_store
from rtjob.storage.pull_plan import plan_pull
from rtjob.storage.raytrain import SNAPSHOT_FILE, parse_snapshot, parse_snapshot_rows
from rtjob.storage.results import COLUMNS, columns_for, history_from_dir
from support.cli import REPO, in_process

SNAPSHOT = REPO / "tests/support/plain_raytrain" / SNAPSHOT_FILE
FIRST, SECOND = "checkpoint_2026-11-23_05-35-55.203654", "checkpoint_2026-11-23_05-35-55.309728"


def snapshot() -> dict[str, Any]:
    return json.loads(SNAPSHOT.read_text())


def run_folder(root: Path, data: dict[str, Any] | None = None) -> Path:
    """A plain Ray Train run's folder: the snapshot, one checkpoint folder per entry, Ray's marker."""
    data = data or snapshot()
    run = root / "plain"
    run.mkdir(parents=True)
    (run / SNAPSHOT_FILE).write_text(json.dumps(data))
    (run / ".validate_storage_marker").write_text("")
    for entry in data["checkpoint_results"]:
        (run / entry["checkpoint_dir_name"]).mkdir()
        (run / entry["checkpoint_dir_name"] / "model.pt").write_bytes(entry["checkpoint_dir_name"].encode())
    return run


def cli(*args: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        home: Path) -> subprocess.CompletedProcess[str]:
    """The console script's own main, in this process (nothing here contacts a cluster)."""
    monkeypatch.setenv("RTJOB_HOME", str(home))
    return in_process(capsys, *args)


def test_the_real_snapshot_parses_to_each_checkpoint_with_its_metrics_in_report_order():
    checkpoints = parse_snapshot(SNAPSHOT.read_bytes(), str(SNAPSHOT))
    assert [c.name for c in checkpoints] == [FIRST, SECOND]
    assert [c.metrics["epoch"] for c in checkpoints] == [1, 2]
    assert checkpoints[0].metrics["loss"] > checkpoints[1].metrics["loss"] > 0
    rows = parse_snapshot_rows(SNAPSHOT.read_bytes(), "x")
    assert rows[0] == {"checkpoint": FIRST, **checkpoints[0].metrics}


def test_results_sorted_by_score_are_read_in_the_order_they_were_reported():
    """With CheckpointConfig(checkpoint_score_attribute=...), Ray keeps checkpoint_results sorted by score;
    checkpoint_report_indices says when each was reported."""
    data = snapshot()
    data["checkpoint_results"].reverse()
    data["checkpoint_report_indices"] = [1, 0]
    assert [c.name for c in parse_snapshot(json.dumps(data).encode(), "x")] == [FIRST, SECOND]


@pytest.mark.parametrize(("text", "words"), [
    ("[]", "no checkpoint_results list"),
    ('{"checkpoint_results": {}}', "no checkpoint_results list"),
    ('{"checkpoint_results": [{"metrics": {}}]}', "checkpoint 1 has no plain checkpoint_dir_name"),
    ('{"checkpoint_results": [{"checkpoint_dir_name": "../x", "metrics": {}}]}', "no plain checkpoint_dir_name"),
    ('{"checkpoint_results": [{"checkpoint_dir_name": "c", "metrics": 3}]}', "checkpoint 1 (c) has no metrics"),
    ('{"checkpoint_results": [{"checkpoint_dir_name": "c", "metrics": {"epoch": "one"}}]}', "'epoch' is a string"),
    ("{not json", "not valid JSON"),
])
def test_a_malformed_snapshot_is_one_line_of_bad_input(text, words):
    with pytest.raises(BadInput) as err:
        parse_snapshot(text.encode(), "run/checkpoint_manager_snapshot.json")
    message = err.value.message
    assert "\n" not in message and words in message
    assert message.startswith("run/checkpoint_manager_snapshot.json: cannot read the metrics history")


def test_results_read_the_snapshot_of_a_plain_ray_train_run_folder(tmp_path):
    run = run_folder(tmp_path)
    rows, where = history_from_dir(run)
    assert where == str(run / SNAPSHOT_FILE)
    assert [(r["checkpoint"], r["epoch"]) for r in rows] == [(FIRST, 1), (SECOND, 2)]
    # The run's own metrics as columns (epoch first), then the checkpoint folder.
    assert [key for key, _, _ in columns_for(rows)] == ["epoch", "loss", "checkpoint"]


def test_rtjobs_own_metrics_json_comes_first_and_keeps_its_columns(tmp_path):
    run = run_folder(tmp_path)
    own = [{"epoch": 1, "train_loss": 1.0, "val_loss": 0.5}]
    (run / "metrics.json").write_text(json.dumps(own))
    rows, where = history_from_dir(run)
    assert rows == own and where == str(run / "metrics.json")
    assert columns_for(rows) == COLUMNS


def test_an_empty_folder_is_nothing_stored_and_says_so_as_before(tmp_path):
    with pytest.raises(NothingStored) as err:
        history_from_dir(tmp_path)
    assert "no metrics history" in err.value.message and SNAPSHOT_FILE in err.value.message


@pytest.mark.parametrize(("choice", "picked"), [("best:loss", SECOND), ("best:loss:min", SECOND),
                                                ("best:loss:max", FIRST), ("latest", SECOND)])
def test_pull_chooses_by_the_snapshots_metrics(tmp_path, choice, picked):
    store = open_store(parse_location(str(run_folder(tmp_path))), None, 2)
    plan = plan_pull(store, parse_checkpoint_choice(choice))
    assert plan.checkpoints == [picked]
    assert plan.history_rel == SNAPSHOT_FILE
    rels = {item.rel for item in plan.items}
    assert f"{picked}/model.pt" in rels and SNAPSHOT_FILE in rels
    assert not any(rel.startswith(FIRST if picked == SECOND else SECOND) for rel in rels)
    if choice.startswith("best"):
        assert plan.best is not None and plan.best["checkpoint"] == picked


def test_pull_best_skips_snapshot_entries_whose_folder_is_gone(tmp_path):
    run = run_folder(tmp_path)
    (run / SECOND / "model.pt").unlink()
    (run / SECOND).rmdir()
    plan = plan_pull(open_store(parse_location(str(run)), None, 2), parse_checkpoint_choice("best:loss"))
    assert plan.checkpoints == [FIRST]


def test_a_missing_metric_is_one_line_exit_2_listing_the_metrics_there_are(tmp_path, monkeypatch, capsys):
    run = run_folder(tmp_path)
    for choice in ("best", "best:accuracy"):
        proc = cli("pull", str(run), "--checkpoint", choice, "--to", str(tmp_path / "out"),
                   monkeypatch=monkeypatch, capsys=capsys, home=tmp_path / "home")
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1, proc.stderr
        assert "no checkpoint reports" in lines[0] and "(metrics: loss)" in lines[0], lines[0]
    assert not (tmp_path / "out" / FIRST).exists() and not (tmp_path / "out" / SECOND).exists()


def test_results_and_pull_of_a_plain_run_folder_through_the_cli(tmp_path, monkeypatch, capsys):
    run = run_folder(tmp_path)
    home = tmp_path / "home"
    table = cli("results", str(run), monkeypatch=monkeypatch, capsys=capsys, home=home)
    assert table.returncode == 0, table.stderr
    assert "EPOCH" in table.stdout and "LOSS" in table.stdout and SECOND in table.stdout
    dest = tmp_path / "pulled"
    pulled = cli("pull", str(run), "--checkpoint", "best:loss", "--to", str(dest), monkeypatch=monkeypatch,
                 capsys=capsys, home=home)
    assert pulled.returncode == 0, pulled.stderr
    assert f"→ {SECOND} (loss=" in pulled.stdout
    assert f"history: {dest / SNAPSHOT_FILE}" in pulled.stdout
    again = cli("results", str(dest), "--output", "json", monkeypatch=monkeypatch, capsys=capsys, home=home)
    assert [row["epoch"] for row in json.loads(again.stdout)[0]["history"]] == [1, 2]


def test_pull_and_results_of_a_folder_agree(tmp_path, monkeypatch, capsys):
    """A folder with nothing rtjob knows: both exit 2 saying what they expected, and pull writes nothing; a
    folder with files (a metrics history) but no checkpoint: pull copies them and says so."""
    home = tmp_path / "home"
    unknown = tmp_path / "unknown"
    (unknown / "sub").mkdir(parents=True)
    (unknown / "notes.txt").write_text("not a run\n")
    (unknown / "sub" / "metrics.json").write_text("[]")  # only the run folder's own metrics.json counts
    for command in (("results", str(unknown)), ("pull", str(unknown), "--to", str(tmp_path / "out"))):
        proc = cli(*command, monkeypatch=monkeypatch, capsys=capsys, home=home)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1, proc.stderr
        assert f"{unknown}" in lines[0] and "checkpoint_manager_snapshot.json" in lines[0], lines[0]
    assert "nothing rtjob knows to pull: no checkpoint_* folders, no metrics history" in lines[0]
    assert "no rtjob-run.json (not a run's folder)" in lines[0]
    assert not (tmp_path / "out").exists()

    history = tmp_path / "history"
    history.mkdir()
    (history / "metrics.json").write_text(json.dumps([{"epoch": 1, "train_loss": 0.5}]))
    (history / "notes.txt").write_text("kept\n")
    dest = tmp_path / "pulled"
    pulled = cli("pull", str(history), "--to", str(dest), monkeypatch=monkeypatch, capsys=capsys, home=home)
    assert pulled.returncode == 0, pulled.stderr
    assert "checkpoint: no checkpoint (the run stored no checkpoint_* folder)" in pulled.stdout
    assert (dest / "notes.txt").read_text() == "kept\n" and (dest / "metrics.json").is_file()

    # A run's folder (rtjob's record is there) whose script stored files of its own, no checkpoint, no history
    # (a pipeline step's output): pull copies them; results says it has no history.
    step = tmp_path / "step"
    step.mkdir()
    (step / "rtjob-run.json").write_text("{}")
    (step / "relay.txt").write_text("first\n")
    out = tmp_path / "step-pulled"
    pulled = cli("pull", str(step), "--to", str(out), monkeypatch=monkeypatch, capsys=capsys, home=home)
    assert pulled.returncode == 0 and "checkpoint: no checkpoint" in pulled.stdout, pulled.stderr
    assert (out / "relay.txt").read_text() == "first\n"
    assert cli("results", str(step), monkeypatch=monkeypatch, capsys=capsys, home=home).returncode == 2


# --- what a run id's storage holding nothing means --------------------------------------------------------


def _info(status: RunStatus, storage_uri: str | None) -> RunInfo:
    return RunInfo(id="r1", job="plain", backend="local", status=status, storage_uri=storage_uri)


@pytest.mark.parametrize(("status", "words"), [
    (RunStatus.SUCCEEDED, "the run r1 ended (SUCCEEDED) without writing results to"),
    (RunStatus.FAILED, "the run r1 ended (FAILED) without writing results to"),
    (RunStatus.RUNNING, "run r1 is RUNNING and has written nothing to"),
])
def test_a_runs_missing_storage_folder_says_what_happened_to_the_run(tmp_path, status, words):
    missing = tmp_path / "storage" / "plain" / "r1"
    with pytest.raises(BadInput) as err:
        resolve_source("r1", None, lambda _: _info(status, str(missing)), lambda: None)
    message = err.value.message
    assert words in message and str(missing) in message and "\n" not in message
    assert ("yet" in message) == (status is RunStatus.RUNNING)
    if status.terminal:
        assert "rtjob results PATH" in message


def test_a_run_without_storage_says_to_pass_the_folder():
    with pytest.raises(BadInput) as err:
        resolve_source("r1", None, lambda _: _info(RunStatus.SUCCEEDED, None), lambda: None)
    assert err.value.message.startswith("run r1 recorded no storage (the job writes where its script says; ")
    assert "rtjob results PATH" in err.value.message


def test_nothing_stored_in_s3_for_a_finished_run_is_said_in_terms_of_the_run():
    src = resolve_source("r1", None, lambda _: _info(RunStatus.FAILED, "s3://bucket/runs/plain/r1"), lambda: None)
    exc = explained(NothingStored("s3://bucket/runs/plain/r1"), src)
    assert exc.message.startswith("the run r1 ended (FAILED) without writing results to s3://bucket/runs/plain/r1")
    given = resolve_source("s3://bucket/x", None, lambda _: None, lambda: None)  # a URI: no run to speak of
    assert explained(NothingStored("s3://bucket/x"), given).message == "nothing stored at s3://bucket/x"
