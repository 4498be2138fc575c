"""The git checkout a run is submitted from: its commit, whether the tree has changes, its branch. The run's record
keeps it (runs/records.py), and a tracked run's tags name it (jobspec/tracking.py: MLflow's mlflow.source.git.*)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any


def git_state(folder: Path) -> dict[str, Any] | None:
    """The commit checked out in ``folder``, whether the tree has changes, and the branch; None: not git."""
    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", "-C", str(folder), *args], capture_output=True, text=True, timeout=10,
                                  check=False)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    if not commit:
        return None
    changes = git("status", "--porcelain", "--untracked-files=normal")
    branch = git("rev-parse", "--abbrev-ref", "HEAD")
    return {"commit": commit, "dirty": bool(changes) if changes is not None else None,
            "branch": branch if branch and branch != "HEAD" else None}
