"""`render --files` (issue 24 item 7): the files a submit uploads (path, size) and the excluded ones, grouped by
top-level path with the rule that excluded them, from the plan's one walk (Plan.upload); text and JSON."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from support.cli import in_process
from support.scrub import scrub

FILES = {
    "train.py": "print('hi')\n", "src/model.py": "x = 1\n", "src/__pycache__/model.cpython-311.pyc": "b",
    ".git/config": "[core]\n", ".env": "TOKEN=x\n", "data/big.bin": "d" * 100, ".gitignore": "data/\n",
    "logs/run.log": "l", "logs/keep.txt": "k", "notes/.gitignore": "*.tmp\n", "notes/a.tmp": "t", "notes/a.md": "m",
}


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    scrub(monkeypatch)
    monkeypatch.setenv("RTJOB_HOME", str(tmp_path / "home"))
    root = tmp_path / "proj"
    for rel, text in FILES.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    (root / "rtjob.toml").write_text("")
    (root / "jobs").mkdir()
    (root / "jobs" / "t.yaml").write_text("name: t\nentrypoint: python train.py\nexcludes: ['*.log']\n")
    monkeypatch.chdir(root)
    return root


def _json(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    proc = in_process(capsys, "render", "t", "--backend", "ray", "--address", "http://127.0.0.1:9", "-o", "json", *args)
    assert proc.returncode == 0, proc.stderr
    data: dict[str, Any] = json.loads(proc.stdout)
    return data


def test_render_files_lists_the_upload_and_what_is_excluded_by_which_rule(project, capsys) -> None:
    files = _json(capsys, "--files")["files"]
    assert files["uploaded"] == [
        {"path": ".gitignore", "size": 6}, {"path": "jobs/t.yaml", "size": 56}, {"path": "logs/keep.txt", "size": 1},
        {"path": "notes/.gitignore", "size": 6}, {"path": "notes/a.md", "size": 1}, {"path": "rtjob.toml", "size": 0},
        {"path": "src/model.py", "size": 6}, {"path": "train.py", "size": 12},
    ]
    assert files["excluded"] == [
        {"path": ".env", "rule": "rtjob default", "paths": [".env"]},
        {"path": ".git/", "rule": "Ray default", "paths": [".git/"]},
        {"path": "data/", "rule": ".gitignore", "paths": ["data/big.bin"]},
        {"path": "logs/", "rule": "the job's excludes", "paths": ["logs/run.log"]},
        {"path": "notes/", "rule": "notes/.gitignore", "paths": ["notes/a.tmp"]},
        {"path": "src/", "rule": "Ray default", "paths": ["src/__pycache__/"]},
    ]
    plain = _json(capsys)
    assert "files" not in plain and plain["run"]["upload"]["files"] == 8  # without --files: as before


def test_render_files_in_text(project, capsys) -> None:
    proc = in_process(capsys, "render", "t", "--backend", "ray", "--address", "http://127.0.0.1:9", "--files")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    start = lines.index("files:     8 uploaded (88 B)")
    assert lines[start + 1].split() == [".gitignore", "6", "B"]
    assert "excluded:  6 path(s), by top-level path and rule" in lines
    assert any(line.split() == ["src/", "Ray", "default:", "src/__pycache__/"] for line in lines), lines
    assert any(line.split() == [".git/", "Ray", "default"] for line in lines), lines


def test_a_job_re_including_a_default_exclude_uploads_it(project, capsys) -> None:
    (project / "jobs" / "t.yaml").write_text("name: t\nentrypoint: python train.py\nexcludes: ['!.env']\n")
    files = _json(capsys, "--files")["files"]
    assert {"path": ".env", "size": 8} in files["uploaded"]
    assert not [group for group in files["excluded"] if group["path"] == ".env"]
