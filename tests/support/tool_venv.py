"""rtjob as a user installs it: this checkout's source built into a wheel and installed into a fresh venv with the
`[ray]` client extra (not editable, no torch).

The install takes about a minute of pip, so tests/conftest.py starts it in the background as soon as the adoption
test is collected (``start``); the test's fixture waits for it (``wait``). Run as a script it does the work:
``python tool_venv.py SCRATCH`` writes SCRATCH/venv and SCRATCH/done (or leaves the error in SCRATCH/log)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
EXTRA = "ray"
WHEELS = "wheels"  # under the scratch folder


def source_copy(dest: Path) -> Path:
    """This checkout under ``dest``/rtjob as a clean clone holds it: the files git tracks, and new ones it does not
    ignore. No build outputs (a stale build/lib would put removed modules back into the wheel), no caches, and
    no npm-built chart library (cli/rtjob/ui/static/vendor is git-ignored): a user's `pip install .` without npm."""
    source = dest / "rtjob"
    listed = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            capture_output=True, check=True, timeout=60).stdout.decode()
    for name in filter(None, listed.split("\0")):
        path = REPO / name
        if not path.exists() and not path.is_symlink():  # deleted here, not yet committed
            continue
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, source / name, follow_symlinks=False)
    return source


def build_wheel(source: Path, out: Path) -> Path:
    """The wheel of ``source``, built with this interpreter's setuptools (no isolation: offline)."""
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(out),
                    str(source)], check=True, timeout=300)
    (wheel,) = out.glob("rtjob-*.whl")
    return wheel


def _main(scratch: Path) -> None:
    wheel = build_wheel(source_copy(scratch), scratch / WHEELS)
    venv = scratch / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "--disable-pip-version-check", f"{wheel}[{EXTRA}]"],
                   check=True, timeout=900)
    (scratch / "done").touch()


class Background:
    """The build+install, running beside the other tests; one per session."""

    def __init__(self) -> None:
        self.scratch = Path(tempfile.mkdtemp(prefix="rtjob-tool-", dir="/tmp"))
        self._log = (self.scratch / "log").open("w")
        self.proc = subprocess.Popen([sys.executable, __file__, str(self.scratch)], stdout=self._log,
                                     stderr=subprocess.STDOUT)

    def wait(self, timeout: float = 1200) -> Path:
        """The venv, once installed; AssertionError with pip's output if the install failed."""
        code = self.proc.wait(timeout=timeout)
        self._log.close()
        log = (self.scratch / "log").read_text(errors="replace")
        assert code == 0 and (self.scratch / "done").exists(), f"building/installing the wheel failed:\n{log[-4000:]}"
        return self.scratch / "venv"

    def wheel(self) -> Path:
        """The wheel the venv was installed from (call after ``wait``)."""
        (wheel,) = (self.scratch / WHEELS).glob("rtjob-*.whl")
        return wheel

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._log.close()
        shutil.rmtree(self.scratch, ignore_errors=True)


_STARTED: Background | None = None


def start() -> Background:
    global _STARTED
    if _STARTED is None:
        _STARTED = Background()
    return _STARTED


def stop() -> None:
    global _STARTED
    if _STARTED is not None:
        _STARTED.close()
        _STARTED = None


if __name__ == "__main__":
    _main(Path(sys.argv[1]))
