"""core/files.write_atomically: the one writer of rtjob's own files (contexts, the embedded cluster's state and
token, GitHub workflows)."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
from rtjob.core.files import write_atomically


def test_the_file_is_replaced_whole_with_its_mode_and_no_temp_file_left(tmp_path: Path) -> None:
    target = tmp_path / "state.json"
    target.write_text("old")
    write_atomically(target, "new ✓")
    assert target.read_text(encoding="utf-8") == "new ✓" and stat.S_IMODE(target.stat().st_mode) == 0o600
    write_atomically(target, "shared", mode=0o644)
    assert stat.S_IMODE(target.stat().st_mode) == 0o644
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]


def test_a_planted_link_is_replaced_never_followed(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("keep")
    (tmp_path / "token").symlink_to(victim)
    write_atomically(tmp_path / "token", "secret")
    assert not (tmp_path / "token").is_symlink() and victim.read_text() == "keep"


def test_a_failed_write_keeps_the_old_file_and_removes_the_temp_file(tmp_path: Path) -> None:
    target = tmp_path / "config.toml"
    target.write_text("old")
    with pytest.raises(UnicodeEncodeError):
        write_atomically(target, "\udc80")  # a lone surrogate: not encodable as UTF-8
    assert target.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["config.toml"]


def test_bytes_with_the_mode_a_new_file_gets_for_shared_storage(tmp_path: Path) -> None:
    """Local run storage (LocalStore.put_bytes) writes bytes, and its records stay readable as the umask allows."""
    import os

    umask = os.umask(0o022)
    try:
        target = tmp_path / "rtjob-run.json"
        write_atomically(target, b"\x00\xff record", mode=None, suffix=".rtjob-partial")
    finally:
        os.umask(umask)
    assert target.read_bytes() == b"\x00\xff record" and stat.S_IMODE(target.stat().st_mode) == 0o644
    assert [p.name for p in tmp_path.iterdir()] == ["rtjob-run.json"]


def test_sizes_print_sensibly_at_every_scale() -> None:
    from rtjob.commands.describe import size

    assert [size(n) for n in (0, 812, 999, 1000, 12_400, 3_100_000, 123_400_000, 1_250_000_000, 7e15)] == [
        "0 B", "812 B", "999 B", "1 kB", "12.4 kB", "3.1 MB", "123 MB", "1.25 GB", "7000 TB"]
