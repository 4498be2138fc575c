"""The first job end to end: `rtjob submit ddp-resnet --nodes 2` on the real 2-node embedded cluster (the session's
one run of it, support/shared_runs.py: test_training.py looks at the same run and resumes it)."""

from __future__ import annotations

import json
import re

import pytest
import torch
from support.cli import REPO, rtjob
from support.shared_runs import ddp_resnet

from rtjob_contract import (
    EVENT_FIRST_REPORT,
    EVENT_FIRST_STEP,
    EVENT_PROCESS_GROUP_READY,
    EVENT_WORKERS_STARTED,
    TRAIN_PHASES,
)

pytestmark = pytest.mark.cluster


def test_ddp_resnet_on_two_local_nodes_succeeds_with_falling_loss_and_rank0_checkpoints(cluster_env):
    shared = ddp_resnet(cluster_env)
    proc, log, run = shared.proc, shared.log, shared.run  # with --output json the followed log goes to stderr
    assert proc.returncode == 0, log[-3000:]
    run_id = proc.args[proc.args.index("--submission-id") + 1]
    assert run["status"] == "SUCCEEDED" and run["job"] == "ddp-resnet" and run["id"] == run_id
    # No silent fallback: the local profile chose synthetic data and the log says so.
    assert "using SYNTHETIC digit-like data" in log
    epochs = re.findall(r"epoch (\d)/2 train_loss=([\d.]+) val_loss=([\d.]+) val_acc=([\d.]+)", log)
    assert [e[0] for e in epochs] == ["1", "2"], log[-3000:]
    assert float(epochs[1][1]) < float(epochs[0][1])  # train loss falls
    assert float(epochs[1][3]) > 0.3  # well above chance (0.1)
    assert "workers=2" in log
    # The start-up timeline: Ray Train's phases (rtjob's Train callback), then rtjob's entrypoint's first step and
    # Ray Train's first report, in order (rtjob's workers_started comes with train_fn_started: no order between them).
    shown = rtjob("show", run_id, "--output", "json", env=cluster_env)
    timeline = json.loads(shown.stdout)["timeline"]
    phases = ["driver_started", *TRAIN_PHASES, EVENT_FIRST_STEP, EVENT_FIRST_REPORT, "ended"]
    assert [timeline.get(name) for name in phases] == sorted(timeline.get(name) or "" for name in phases), timeline
    assert timeline[EVENT_PROCESS_GROUP_READY] <= timeline[EVENT_WORKERS_STARTED] <= timeline[EVENT_FIRST_STEP]
    # Ray Train's per-report INFO line (the whole metrics dict, per rank, per epoch) is held to the
    # job's train_log_level (WARNING), like the rest of Ray Train's own logging.
    assert "Reporting training result" not in log, log[-3000:]
    # Rank-0 checkpoints, one per epoch, in the run's own storage folder.
    run_dir = shared.run_dir
    assert run_dir.name == run_id and run_dir.parent.name == "ddp-resnet"
    checkpoints = shared.checkpoints  # as the run left them (test_training.py resumes the run later)
    assert checkpoints == ["checkpoint_epoch_0001", "checkpoint_epoch_0002"]
    state = json.loads((run_dir / checkpoints[-1] / "state.json").read_text())
    assert state["epoch"] == 2 and state["written_by_rank"] == 0 and state["world_size"] == 2
    # The checkpoint loads into the plain (unwrapped) model.
    import sys

    sys.path.insert(0, str(REPO))
    from training.models import build_model

    model = build_model("resnet18", 1, 10)
    model.load_state_dict(torch.load(run_dir / checkpoints[-1] / "model.pt", map_location="cpu"))
