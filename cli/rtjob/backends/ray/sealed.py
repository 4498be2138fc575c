"""The sealed package: the values of a job's `secrets:` that only this client holds (``env:`` references), on their
way to the run's companion without ``runtime_env.env_vars`` (which Ray's Jobs API returns to anyone who reaches the
dashboard) and without the run's record.

It is a ``py_modules`` folder, ``rtjob_sealed/`` (``__init__.py``, ``values.json``), made in a private temporary
folder only while ``submit_job`` packs and uploads it, and added to the runtime_env Ray is sent, never to the
request rtjob records or compares (``rerun`` sees the same request every time). Ray stores it in its GCS as
``gcs://_ray_pkg_<content hash>.zip``: the job info shows that URI, never the values; a retry submitted from the
job info reuses it, with no client alive. Who can still read it: anyone who can run code on the cluster or reach
its GCS (docs/guide/secrets.md).
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ...core.secret_refs import SEALED_FILE, SEALED_PACKAGE


@contextlib.contextmanager
def sealed_runtime_env(runtime_env: dict[str, Any], values: dict[str, str]) -> Iterator[dict[str, Any]]:
    """``runtime_env`` with the sealed package among its ``py_modules`` while the block runs (unchanged without
    values); the folder is removed after."""
    if not values:
        yield runtime_env
        return
    home = Path(tempfile.mkdtemp(prefix="rtjob-sealed-"))  # 0700: this user only
    try:
        folder = home / SEALED_PACKAGE
        folder.mkdir(mode=0o700)
        (folder / "__init__.py").write_text('"""Values rtjob sealed for one run (rtjob.runside.secret_env)."""\n')
        target = folder / SEALED_FILE
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(values, f, sort_keys=True)
        sent = copy.deepcopy(runtime_env)
        sent["py_modules"] = [*(sent.get("py_modules") or []), str(folder)]
        yield sent
    finally:
        shutil.rmtree(home, ignore_errors=True)
