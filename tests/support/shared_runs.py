"""Runs on the session's embedded cluster that several test files look at, each submitted once per session (on first
use; cached by the cluster's RTJOB_HOME), so that no two files pay for the same run:

* ``ddp_resnet``: `rtjob submit ddp-resnet --nodes 2` (tests/e2e/test_ddp_resnet_job.py: the run as rtjob reports it;
  tests/e2e/test_training.py: the entrypoint's own output, its checkpoints and a resume from them), ~30 s of Ray Train;
* ``relay``: the three-step relay pipeline submitted with --no-wait and waited for (tests/e2e/test_pipeline.py: what
  the supervisor did; tests/e2e/test_ui_live_cluster.py: its page in `rtjob ui`).
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .cli import new_id, rtjob

RELAY = "tests/support/jobs/relay.yaml"


@dataclass(frozen=True)
class DdpRun:
    proc: subprocess.CompletedProcess[str]  # with --output json: the record on stdout, the followed log on stderr
    run: dict[str, Any]  # the record (stdout), {} if the submit failed
    checkpoints: list[str]  # the run folder's checkpoint_epoch_* right after the run (a later resume adds more)

    @property
    def log(self) -> str:
        return self.proc.stderr

    @property
    def run_dir(self) -> Path:
        return Path(self.run["storage_uri"])


@dataclass(frozen=True)
class RelayRun:
    pid: str
    submitted: subprocess.CompletedProcess[str]  # `submit --no-wait -o json`
    waited: subprocess.CompletedProcess[str]  # `wait -o json`, after it


_DDP: dict[str, DdpRun] = {}
_RELAY: dict[str, RelayRun] = {}


def ddp_resnet(cluster_env: dict[str, str]) -> DdpRun:
    """The session's ddp-resnet run (its local profile: 2 epochs of synthetic data)."""
    home = cluster_env["RTJOB_HOME"]
    if home not in _DDP:
        proc = rtjob("submit", "ddp-resnet", "--nodes", "2", "--submission-id", new_id("ddp"), "--output", "json",
                     env=cluster_env, timeout=600)
        run = json.loads(proc.stdout) if proc.returncode == 0 else {}
        checkpoints = sorted(p.name for p in Path(run["storage_uri"]).glob("checkpoint_epoch_*")) if run else []
        _DDP[home] = DdpRun(proc, run, checkpoints)
    return _DDP[home]


def relay(cluster_env: dict[str, str]) -> RelayRun:
    """The session's relay pipeline: submitted with --no-wait (its supervisor runs the steps), then `rtjob wait`."""
    home = cluster_env["RTJOB_HOME"]
    if home not in _RELAY:
        pid = new_id("relay")
        submitted = rtjob("submit", RELAY, "--submission-id", pid, "--no-wait", "-o", "json", env=cluster_env,
                          timeout=300)
        waited = rtjob("wait", pid, "-o", "json", env=cluster_env, timeout=300)
        _RELAY[home] = RelayRun(pid, submitted, waited)
    return _RELAY[home]
