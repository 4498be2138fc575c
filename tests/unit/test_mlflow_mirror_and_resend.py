"""The MLflow mirror never in the run's way (runside/tracking/mirror.py) against a slow MLflow on loopback (a real
HTTP server answering MLflow's REST calls, each metrics batch taking 0.2 s): the end's flush starts no call past
its bound and says what is left with the command that sends it; a tick sends for at most TICK_S. And `rtjob track
resend` for a run whose mirror never reached MLflow: the run created as the mirror would (tags, args as params),
every row sent, the run's end set as MLflow's status."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rtjob.runside.tracking import mirror as mirror_module
from rtjob.runside.tracking.mirror import MlflowMirror
from rtjob.trackers.mlflow_rest import MlflowRest
from support.mlflow_stub import Call, bodies, mlflow_stub

BATCH_S = 0.2


@pytest.fixture
def slow_mlflow() -> Iterator[tuple[str, list[Call]]]:
    """MLflow's REST answers on loopback (support/mlflow_stub.py), each metrics batch taking BATCH_S."""
    with mlflow_stub(metrics_s=BATCH_S) as served:
        yield served


def _mirror(url: str, folder: Path, notes: list[dict[str, Any]]) -> MlflowMirror:
    rows = "".join(json.dumps({"step": i, "time": 1.7e9 + i, "loss": 1.0 / (i + 1)}) + "\n" for i in range(5000))
    (folder / "metrics.jsonl").write_text(rows)  # 5,000 metrics: 5 batches of 1,000, 1 s of MLflow's time
    return MlflowMirror(MlflowRest(url), "rtjob", "r1", str(folder), lambda line: None, notes.append, params={},
                        tags={"rtjob.attempt": "1"})


def _metric_batches(got: list[Call]) -> int:
    return sum(1 for path, body in bodies(got) if path.endswith("log-batch") and body.get("metrics"))


def test_the_ends_flush_starts_no_call_past_its_bound_and_says_what_is_left(
        slow_mlflow: tuple[str, list[Call]], tmp_path: Path) -> None:
    url, got = slow_mlflow
    notes: list[dict[str, Any]] = []
    mirror = _mirror(url, tmp_path, notes)
    mirror.finish("SUCCEEDED", within_s=0.3)  # a batch started before 0.3 s may end after it; none starts later
    assert _metric_batches(got) < 5
    said = notes[-1]["mlflow"]
    assert said["unsent"] == 5000 - said["sent"] > 0 and said["resend"] == "rtjob track resend r1"


def test_a_tick_sends_for_at_most_its_budget_and_the_next_goes_on(
        slow_mlflow: tuple[str, list[Call]], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    url, got = slow_mlflow
    monkeypatch.setattr(mirror_module, "TICK_S", 0.1)
    mirror = _mirror(url, tmp_path, [])
    mirror.tick()
    assert mirror.pending and _metric_batches(got) < 5  # the companion's loop goes on meanwhile
    while mirror.pending:
        mirror.tick()
    assert mirror.sent == 5000 and _metric_batches(got) == 5 and mirror.fault is None


def test_track_resend_creates_the_run_as_the_mirror_would_and_sets_its_end(
        slow_mlflow: tuple[str, list[Call]], tmp_path: Path) -> None:
    import dataclasses

    from support.cli import base_env, run_in_process
    from support.ui_runs import write_run

    import rtjob_contract as contract

    url, got = slow_mlflow
    config = {"mlflow": {"tracking_uri": url, "experiment": "team"}, "params": {"lr": "0.1"},
              "tags": {"rtjob.job": "train", "rtjob.user": "alice"}}
    store = tmp_path / "store"
    record = write_run(store, "r1", "train", request={"entrypoint": "python train.py", "runtime_env": {
        "env_vars": {contract.ENV_TRACKING: json.dumps(config)}}})
    record = dataclasses.replace(record, tracking={"mlflow": {"tracking_uri": url, "experiment": "team",
                                                              "run_id": None, "sent": 0, "unsent": 3}})
    folder = Path(record.storage_uri or "")
    (folder / "rtjob-run.json").write_text(record.dumps())
    (folder / "metrics.jsonl").write_text("".join(json.dumps({"step": i, "time": 1.7e9 + i, "loss": 0.5 / (i + 1)})
                                                  + "\n" for i in range(3)))
    proc = run_in_process("track", "resend", "r1", env={**base_env(tmp_path / "home"), "RTJOB_STORAGE": str(store)})
    assert proc.returncode == 0, proc.stderr
    [created] = [body for path, body in bodies(got) if path.endswith("runs/create")]
    tags = {t["key"]: t["value"] for t in created["tags"]}
    assert tags["rtjob.run_id"] == "r1" and tags["rtjob.user"] == "alice" and tags["rtjob.status_command"] == \
        "rtjob status r1"
    params = [p for path, body in bodies(got) if path.endswith("log-batch") for p in body.get("params") or []]
    assert params == [{"key": "lr", "value": "0.1"}]
    sent = {(m["key"], m["step"], m["timestamp"]) for path, body in bodies(got) if path.endswith("log-batch")
            for m in body["metrics"]}
    assert {("loss", i, int((1.7e9 + i) * 1000)) for i in range(3)} <= sent  # the step rows (beside the epochs)
    [ended] = [body for path, body in bodies(got) if path.endswith("runs/update")]
    assert ended["status"] == "FINISHED"  # the record's SUCCEEDED


@pytest.mark.parametrize(("ended", "mlflow_status"), [("SUCCEEDED", "FINISHED"), ("FAILED", "FAILED"),
                                                      ("STOPPED", "KILLED")])
def test_the_end_is_mlflows_status_and_a_retry_sets_the_same_run_running_again(
        ended: str, mlflow_status: str, tmp_path: Path) -> None:
    """A first attempt creates the MLflow run; a retry finds it (its rtjob.run_id tag), sets it RUNNING again with
    its attempt, and its end is MLflow's status: SUCCEEDED is FINISHED, FAILED is FAILED, STOPPED is KILLED."""
    for existing, attempt in ((None, "1"), ("m-earlier", "2")):
        with mlflow_stub(existing=existing) as (url, got):
            mirror = MlflowMirror(MlflowRest(url), "rtjob", "r1", str(tmp_path), lambda line: None, lambda note: None,
                                  params={}, tags={"rtjob.attempt": attempt})
            mirror.finish(ended, within_s=5)
        calls = bodies(got)
        updates = [body for path, body in calls if path.endswith("runs/update")]
        created = [body for path, body in calls if path.endswith("runs/create")]
        if existing is None:
            assert len(created) == 1 and [u["status"] for u in updates] == [mlflow_status]
        else:
            assert created == [] and [u["status"] for u in updates] == ["RUNNING", mlflow_status]
            assert {"key": "rtjob.attempt", "value": "2"} in [t for path, body in calls
                                                               if path.endswith("log-batch") for t in body["tags"]]
            assert {u["run_id"] for u in updates} == {"m-earlier"}
