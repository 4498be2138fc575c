"""A plain Ray Train script (tests/support/plain_raytrain/train.py: knows nothing of rtjob, picks its own
RunConfig(storage_path, name), reads ./data through a relative path) through a three-line job file on the real
embedded cluster: it runs (Ray Train V2 workers stay in the working dir), its own run folder works with
`rtjob results` and `rtjob pull --checkpoint best:loss[:max]` through Ray Train's checkpoint_manager_snapshot.json,
and so does its run id: rtjob recorded the folder Ray reported for the run when it ended (`rtjob show`).
"""

from __future__ import annotations

import hashlib
import json

import pytest
import torch
from support.cli import REPO, new_id, rtjob

from rtjob_contract import EVENT_FIRST_REPORT, TRAIN_PHASES

pytestmark = pytest.mark.cluster
TOKEN = "plain-raytrain-token-5e4d3c2b"


def test_a_plain_ray_train_script_runs_and_its_own_run_folder_gives_results_and_the_best_checkpoint(
    cluster_env, tmp_path
):
    storage = tmp_path / "own-storage"
    job = tmp_path / "plain.yaml"
    (tmp_path / "token").write_text(TOKEN + "\n")  # a file:// secret (issue 45): each Ray Train worker gets it
    job.write_text(f"name: plain-raytrain\n"
                   f"entrypoint: python train.py --storage-path {storage} --name plain --epochs 2\n"
                   f"working_dir: {REPO / 'tests/support/plain_raytrain'}\n"
                   f"secrets:\n  PLAIN_TOKEN: file://{tmp_path / 'token'}\n")
    run_id = new_id("plain")
    submit = rtjob("submit", str(job), "--submission-id", run_id, "--output", "json", env=cluster_env, timeout=600)
    assert submit.returncode == 0, submit.stderr[-3000:]
    assert json.loads(submit.stdout)["status"] == "SUCCEEDED"  # ./data/points.csv was found by both workers
    logs = rtjob("logs", run_id, env=cluster_env)
    digest = hashlib.sha256(TOKEN.encode()).hexdigest()[:16]
    assert all(f"worker {rank} token sha256 {digest}" in logs.stdout for rank in (0, 1)), logs.stdout[-3000:]
    assert TOKEN not in logs.stdout + submit.stdout + submit.stderr

    run = storage / "plain"
    # rtjob's storage holds nothing of this script's: the record names the folder Ray reported for the run.
    shown = rtjob("show", run_id, "--output", "json", env=cluster_env)
    assert shown.returncode == 0 and json.loads(shown.stdout)["train_storage"] == [str(run)], shown.stderr
    # Ray Train's phases of the unchanged script, stamped by rtjob's Train callback, in their order.
    timeline = json.loads(shown.stdout)["timeline"]
    phases = ["driver_started", *TRAIN_PHASES, EVENT_FIRST_REPORT, "ended"]
    assert [timeline.get(name) for name in phases] == sorted(timeline.get(name) or "" for name in phases), timeline
    shown = rtjob("results", str(run), "--output", "json", env=cluster_env)
    assert shown.returncode == 0, shown.stderr
    history = json.loads(shown.stdout)[0]["history"]
    assert [row["epoch"] for row in history] == [1, 2]
    assert all(row["checkpoint"].startswith("checkpoint_") and row["loss"] > 0 for row in history)
    table = rtjob("results", str(run), env=cluster_env)
    assert table.returncode == 0 and "LOSS" in table.stdout and history[1]["checkpoint"] in table.stdout

    by_loss = {row["loss"]: row for row in history}
    for choice, pick in (("best:loss", min), ("best:loss:max", max)):
        dest = tmp_path / choice.replace(":", "-")
        pulled = rtjob("pull", str(run), "--checkpoint", choice, "--to", str(dest), "--output", "json",
                       env=cluster_env)
        assert pulled.returncode == 0, pulled.stderr
        wanted = by_loss[pick(by_loss)]
        assert json.loads(pulled.stdout)["checkpoints"] == [wanted["checkpoint"]]
        saved = torch.load(dest / wanted["checkpoint"] / "model.pt", weights_only=True)
        assert saved["epoch"] == wanted["epoch"]

    # By run id, as by folder.
    by_id = rtjob("results", run_id, "--output", "json", env=cluster_env)
    assert by_id.returncode == 0, by_id.stderr
    assert json.loads(by_id.stdout)[0]["history"] == history
    dest = tmp_path / "by-id"
    pulled = rtjob("pull", run_id, "--checkpoint", "best:loss", "--to", str(dest), "--output", "json",
                   env=cluster_env)
    assert pulled.returncode == 0, pulled.stderr
    assert json.loads(pulled.stdout)["checkpoints"] == [by_loss[min(by_loss)]["checkpoint"]]
