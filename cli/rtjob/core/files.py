"""Files written whole or not at all: the one atomic writer of rtjob's own files (contexts, the embedded
cluster's state and token, GitHub workflows, run records and logs in local storage)."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path


def write_atomically(path: Path, data: str | bytes, mode: int | None = 0o600, *, suffix: str = ".tmp") -> None:
    """Replace ``path`` with ``data`` (text as UTF-8): a temp file ``.NAME.<random><suffix>`` in the same folder
    (O_CREAT|O_EXCL|O_NOFOLLOW, 0600, so nobody reads it half-written or with a wider mode, and nothing is
    written through a link), fsynced, given ``mode``, then renamed over ``path``. A reader sees the old file or
    the new one, never half of one; a link planted at ``path`` is replaced, never followed; on any failure the
    temp file is removed and ``path`` is as it was. The folder must exist (its mode is the caller's choice).
    ``mode=None``: the mode any new file gets (0666 less the umask), for files others share (local run storage)."""
    raw = data.encode("utf-8") if isinstance(data, str) else data
    tmp = path.with_name(f".{path.name}.{os.urandom(6).hex()}{suffix}")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
    fd = os.open(tmp, flags, 0o666 if mode is None else 0o600)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(raw)
            out.flush()
            os.fsync(out.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
