"""storage/ holds storage: it prints nothing and draws nothing (the commands word and draw what it reports), and a
store's kind is asked through its methods, never by a type switch."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest
from rtjob.storage.location import parse_location
from rtjob.storage.stores import LocalStore, RemoteFile, Store
from support.cli import REPO, base_env, run_in_process

STORAGE = REPO / "cli" / "rtjob" / "storage"


def test_storage_imports_no_ui_and_prints_nothing() -> None:
    found = []
    for path in sorted(STORAGE.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            where = f"{path.name}:{getattr(node, 'lineno', 0)}"
            if isinstance(node, ast.Import):
                found += [f"{where}: import {a.name}" for a in node.names if a.name.split(".")[0] in ("rich", "click")]
            elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in ("rich", "click"):
                found.append(f"{where}: from {node.module}")
            elif isinstance(node, ast.Call):
                name = ast.unparse(node.func)
                if name in ("print", "sys.stdout.write", "sys.stderr.write"):
                    found.append(f"{where}: {name}")
                switch = name == "isinstance" and "S3Store" in ast.unparse(node)
                if switch or name == "getattr" and "endpoint" in ast.unparse(node):
                    found.append(f"{where}: a type switch on the store: {ast.unparse(node)}")
    assert not found, "\n".join(found)


def test_a_local_pull_draws_no_bar_and_writes_nothing_to_stdout(tmp_path: Path) -> None:
    """A pull reports bytes through its Progress callback and its outcome as data: in a process of its own (no test
    has imported rich there), it neither imports rich nor writes a byte to stdout or stderr."""
    run = tmp_path / "run"
    (run / "checkpoint_epoch_0001").mkdir(parents=True)
    (run / "checkpoint_epoch_0001" / "model.pt").write_bytes(b"weights")
    code = f"""
import json, sys
from pathlib import Path
from rtjob.storage.layout import parse_checkpoint_choice
from rtjob.storage.location import parse_location
from rtjob.storage.pull import pull

moved = []

class Counting:
    def start(self, total_bytes, files): moved.append(("start", total_bytes, files))
    def advance(self, nbytes): moved.append(("advance", nbytes))
    def stop(self): moved.append(("stop",))

report = pull(parse_location({str(run)!r}), Path({str(tmp_path / "out")!r}), parse_checkpoint_choice("latest"),
              progress=Counting())
json.dump({{"rich": "rich" in sys.modules, "moved": moved, "downloaded": report.downloaded}}, open({str(tmp_path / "r.json")!r}, "w"))
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert (proc.stdout, proc.stderr) == ("", "")
    result = json.loads((tmp_path / "r.json").read_text())
    assert result == {"rich": False, "moved": [["start", 7, 1], ["advance", 7], ["stop"]], "downloaded": 1}


def test_a_store_is_an_abc_and_says_itself_whether_a_local_file_holds_its_content(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="same_content"):
        Store()  # type: ignore[abstract]
    source, copy, other = tmp_path / "a.bin", tmp_path / "b.bin", tmp_path / "c.bin"
    source.write_bytes(b"same")
    copy.write_bytes(b"same")
    other.write_bytes(b"diff")
    store = LocalStore(parse_location(str(tmp_path)))
    item = RemoteFile(str(source), "a.bin", 4, "4-0")
    assert store.same_content(item, copy) and not store.same_content(item, other)
    assert store.endpoint is None and store.translate_error(OSError("x")) is None  # a local error is worded as is


def test_one_checkpoint_is_pulled_by_its_name_and_an_unknown_name_is_one_line(tmp_path: Path) -> None:
    """`--checkpoint checkpoint_epoch_0002`: that folder only (the command rtjob ui shows for each checkpoint)."""

    run = tmp_path / "run"
    for n in (1, 2, 3):
        (run / f"checkpoint_epoch_000{n}").mkdir(parents=True)
        (run / f"checkpoint_epoch_000{n}" / "model.pt").write_bytes(b"w" * n)
    env = base_env(tmp_path / "home")
    out = tmp_path / "out"
    proc = run_in_process("pull", str(run), "--to", str(out), "--checkpoint", "checkpoint_epoch_0002", env=env)
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == [".rtjob", "checkpoint_epoch_0002"]  # + its manifest
    missing = run_in_process("pull", str(run), "--to", str(tmp_path / "out2"), "--checkpoint", "checkpoint_epoch_0009",
                             env=env)
    assert missing.returncode == 2 and missing.stdout == "" and not (tmp_path / "out2").exists()
    [line] = missing.stderr.strip().splitlines()
    assert "--checkpoint checkpoint_epoch_0009: no such checkpoint" in line and "checkpoint_epoch_0003" in line
