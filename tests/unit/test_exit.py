"""A process that ran obstore (pull's S3 engine) ends without the interpreter's finalization, where obstore's tokio
threads can abort it (SIGABRT after a successful pull); its output is flushed first and its exit code kept. A
caller running main in its own process (argv given) is never ended this way."""

from __future__ import annotations

import subprocess
import sys

import pytest

SCRIPT = """
import atexit, sys
if sys.argv[1] == "obstore":
    import obstore  # noqa: F401  (what a pull with the obstore engine imports)
atexit.register(lambda: print("FINALIZED", flush=True))
from rtjob.commands import main
sys.argv = ["rtjob", *sys.argv[2:]]
main() if sys.argv[1:] != ["in-process"] else main(["--version"])
"""


@pytest.mark.parametrize(("imported", "args", "finalized", "code"), [
    ("obstore", ["--version"], False, 0),
    ("obstore", ["status"], False, 2),  # a usage error keeps its exit code
    ("none", ["--version"], True, 0),
    ("obstore", ["in-process"], True, 0),  # main(argv): the caller's process is left alone
])
def test_a_process_that_ran_obstore_ends_without_finalization_keeping_its_output_and_code(
        imported: str, args: list[str], finalized: bool, code: int) -> None:
    proc = subprocess.run([sys.executable, "-c", SCRIPT, imported, *args], capture_output=True, text=True, timeout=120)
    assert proc.returncode == code, proc.stderr
    assert ("FINALIZED" in proc.stdout) is finalized
    if args == ["--version"]:
        assert "rtjob" in proc.stdout.lower()  # printed before the exit: flushed
