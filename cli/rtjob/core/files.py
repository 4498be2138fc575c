"""Files written whole or not at all: the one atomic writer of rtjob's own files (contexts, the embedded
cluster's state and token, GitHub workflows)."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


def write_atomically(path: Path, text: str, mode: int = 0o600) -> None:
    """Replace ``path`` with ``text`` (UTF-8): a temp file in the same folder (mkstemp: O_CREAT|O_EXCL, 0600, so
    nobody reads it half-written or with a wider mode), fsynced, given ``mode``, then renamed over ``path``. A
    reader sees the old file or the new one, never half of one; a link planted at ``path`` is replaced, never
    followed; on any failure the temp file is removed and ``path`` is as it was. The folder must exist (its
    mode is the caller's choice)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
