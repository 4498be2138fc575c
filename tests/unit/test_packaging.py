"""Working-dir packaging: what Ray would upload, and the refusal above its 100 MiB limit (offline)."""

from __future__ import annotations

import os
from pathlib import Path

from rtjob.backends.packaging import RAY_UPLOAD_LIMIT, measure
from support.cli import base_env, run_in_process


def _sparse(path: Path, size: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        f.truncate(size)


def test_measure_honours_excludes_gitignore_and_ray_defaults(tmp_path):
    (tmp_path / "keep.py").write_text("x" * 10)
    (tmp_path / ".gitignore").write_text("*.ckpt\nout/\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / ".gitignore").write_text("local.bin\n")
    (tmp_path / "sub" / "local.bin").write_text("y" * 100)
    (tmp_path / "sub" / "code.py").write_text("z" * 5)
    (tmp_path / "model.ckpt").write_text("c" * 1000)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "x.txt").write_text("o" * 1000)
    (tmp_path / ".venv").mkdir()
    (tmp_path / ".venv" / "big").write_text("v" * 1000)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "d.bin").write_text("d" * 1000)
    size = measure(tmp_path, ["data/"])
    files = sorted(rel for _, rel in size.largest)
    assert files == [".gitignore", "keep.py", "sub/.gitignore", "sub/code.py"]


def test_working_dir_over_ray_limit_is_refused_naming_the_largest_files(tmp_path):
    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs" / "big.yaml").write_text("name: big\nentrypoint: python x.py\n")
    _sparse(tmp_path / "weights" / "huge.bin", RAY_UPLOAD_LIMIT + 1024)
    env = base_env(tmp_path / "home", RTJOB_PROJECT=str(tmp_path))
    for command in (["render", "big"], ["submit", "big"]):
        proc = run_in_process(*command, env=env, cwd=tmp_path)
        assert proc.returncode == 2, proc.stderr
        assert "weights/huge.bin (100.0 MiB)" in proc.stderr and "100 MiB upload limit" in proc.stderr
        assert proc.stderr.count("\n") == 1
    assert not (tmp_path / "home" / "local").exists()  # nothing was started
    # Excluding it makes the job sendable.
    (tmp_path / "jobs" / "big.yaml").write_text("name: big\nentrypoint: python x.py\nexcludes: ['weights/']\n")
    assert run_in_process("render", "big", env=env, cwd=tmp_path).returncode == 0
    assert os.path.getsize(tmp_path / "weights" / "huge.bin") > RAY_UPLOAD_LIMIT
