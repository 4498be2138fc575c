"""The sealed package: the secrets only this client holds, on their way to the run side without
``runtime_env.env_vars`` (which Ray's Jobs API returns to anyone who reaches the dashboard) and without the run's
record: the values of a job's ``env:`` references (``values.json``), the forwarded AWS credentials and each notify
target's URL (``env.json``: variables for the run side's environment).

It is a ``py_modules`` folder, ``rtjob_sealed/`` (``__init__.py`` and those files), made in a private temporary
folder only while ``submit_job`` (or a pipeline's upload) packs and uploads it, and added to the runtime_env Ray is
sent, never to the request rtjob records or compares (``rerun`` sees the same request every time). Ray stores it in
its GCS as ``gcs://_ray_pkg_<content hash>.zip``: the job info shows that URI, never the values. Every job rtjob
starts for the run from its job info (supervisor, sync job, a retry with no client alive) copies its py_modules, so
the package goes along, and the run side unseals it at start (runside/secret_env.unseal). Who can still read it:
anyone who can run code on the cluster or reach its GCS (docs/guide/secrets.md).
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

from ...core.secret_refs import SEALED_ENV_FILE, SEALED_FILE, SEALED_PACKAGE
from .request import RayJobRequest


@contextlib.contextmanager
def sealed_runtime_env(request: RayJobRequest) -> Iterator[dict[str, Any]]:
    """The request's runtime_env with the sealed package among its ``py_modules`` while the block runs (unchanged
    when it seals nothing); the folder is removed after."""
    runtime_env = request.runtime_env
    if not request.sealed and not request.sealed_env:
        yield runtime_env
        return
    home = Path(tempfile.mkdtemp(prefix="rtjob-sealed-"))  # 0700: this user only
    try:
        folder = home / SEALED_PACKAGE
        folder.mkdir(mode=0o700)
        (folder / "__init__.py").write_text('"""Values rtjob sealed for one run (rtjob.runside.secret_env)."""\n')
        for name, values in ((SEALED_FILE, request.sealed), (SEALED_ENV_FILE, request.sealed_env)):
            fd = os.open(folder / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(values, f, sort_keys=True)
        sent = copy.deepcopy(runtime_env)
        sent["py_modules"] = [*(sent.get("py_modules") or []), str(folder)]
        yield sent
    finally:
        shutil.rmtree(home, ignore_errors=True)
