"""End to end: a job submitted by path from another folder runs in its own project's working dir (its files
there, its `.env` not), on the real embedded cluster."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.cli import new_id, rtjob

pytestmark = pytest.mark.cluster

READER = """\
import os
print("config:", open("data/config.txt").read().strip())
print("dotenv uploaded:", os.path.exists(".env"))
print("decoy uploaded:", os.path.exists("decoy.txt"))
"""


def test_a_job_by_path_from_another_folder_runs_in_its_own_project(cluster_env, tmp_path: Path):
    project = tmp_path / "proj"
    (project / "jobs").mkdir(parents=True)
    (project / "data").mkdir()
    (project / ".git").mkdir()
    (project / "jobs" / "reader.yaml").write_text("name: reader\nentrypoint: python read.py\n")
    (project / "read.py").write_text(READER)
    (project / "data" / "config.txt").write_text("from-the-project\n")
    (project / ".env").write_text("LOCAL_ONLY=1\n")
    elsewhere = tmp_path / "elsewhere"  # where the user stands: not the project, with files of its own
    elsewhere.mkdir()
    (elsewhere / "decoy.txt").write_text("not part of the job\n")
    run_id = new_id("by-path")
    proc = rtjob("submit", str(project / "jobs" / "reader.yaml"), "--submission-id", run_id, env=cluster_env,
                 cwd=elsewhere)
    assert proc.returncode == 0, proc.stderr
    assert "config: from-the-project" in proc.stdout
    assert "dotenv uploaded: False" in proc.stdout and "decoy uploaded: False" in proc.stdout
