"""The sealed package, as both backends send it: the secrets only this client holds, on their way to the run side
as a ``py_modules`` folder, ``rtjob_sealed/`` (``__init__.py``, ``values.json``: the job's ``env:`` references'
values, ``env.json``: the forwarded AWS credentials and notify URLs), never as env_vars (which Ray's job info and
Anyscale's JobConfig keep and show) and never in the run's record. The folder lives in a private temporary folder
only while the submit packs and uploads it (Ray into its GCS, Anyscale into the cloud's storage); the run side
unseals it at start (core/secret_refs.unseal). What each backend adds it to: ray/sealed.py, anyscale/request.py."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..core.secret_refs import SEALED_ENV_FILE, SEALED_FILE, SEALED_PACKAGE, SEALED_STEPS_FILE


@contextlib.contextmanager
def sealed_folder(values: Mapping[str, str], env: Mapping[str, str],
                  steps: Sequence[Mapping[str, Mapping[str, str]]] = ()) -> Iterator[str | None]:
    """The package's folder while the block runs (None when there is nothing to seal); removed after. ``steps``:
    a hosted pipeline's steps' own {"values", "env"} (``steps.json``), which its supervisor seals for each step."""
    if not values and not env and not any(s.get("values") or s.get("env") for s in steps):
        yield None
        return
    home = Path(tempfile.mkdtemp(prefix="rtjob-sealed-"))  # 0700: this user only
    try:
        folder = home / SEALED_PACKAGE
        folder.mkdir(mode=0o700)
        (folder / "__init__.py").write_text('"""Values rtjob sealed for one run (rtjob.runside.secret_env)."""\n')
        files: list[tuple[str, Any]] = [(SEALED_FILE, dict(values)), (SEALED_ENV_FILE, dict(env))]
        if steps:
            files.append((SEALED_STEPS_FILE, [{k: dict(v) for k, v in s.items()} for s in steps]))
        for name, sealed in files:
            fd = os.open(folder / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(sealed, f, sort_keys=True)
        yield str(folder)
    finally:
        shutil.rmtree(home, ignore_errors=True)
