"""A user's project in a temporary folder and rtjob's console entry point run in this process against it, with
the environment scrubbed of settings that would point rtjob or Ray elsewhere (support.scrub; unit tests: no
cluster)."""

from __future__ import annotations

import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .cli import in_process
from .scrub import scrub


def write_files(root: Path, files: Mapping[str, str]) -> None:
    """Each file of ``files`` (a path relative to ``root``: its text), folders made as needed."""
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


class ProjectCli:
    """``cli(*args, cwd=..., env=...)``: rtjob ARGS in this process (support.cli.in_process), standing in
    ``cwd`` (default: ``project``, an empty folder outside this repository). HOME (``home``) and RTJOB_HOME are
    temporary folders; a command run this way never starts the embedded cluster."""

    def __init__(self, tmp_path: Path, monkeypatch: Any, capsys: Any) -> None:
        self.monkeypatch, self.capsys = monkeypatch, capsys
        self.home = tmp_path / "user"
        self.rtjob_home = tmp_path / "rtjob-home"
        self.project = tmp_path / "project"
        self.home.mkdir()
        self.project.mkdir()
        scrub(monkeypatch)
        monkeypatch.setenv("HOME", str(self.home))
        monkeypatch.setenv("RTJOB_HOME", str(self.rtjob_home))
        monkeypatch.chdir(self.project)

    def __call__(self, *args: str, cwd: Path | None = None,
                 env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        for key, value in (env or {}).items():
            self.monkeypatch.setenv(key, value)
        self.monkeypatch.chdir(cwd or self.project)
        proc = in_process(self.capsys, *args)
        assert not (self.rtjob_home / "local" / "cluster.json").exists()
        return proc
