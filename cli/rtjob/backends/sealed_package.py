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
from collections.abc import Iterator, Mapping
from pathlib import Path

from ..core.secret_refs import SEALED_ENV_FILE, SEALED_FILE, SEALED_PACKAGE


@contextlib.contextmanager
def sealed_folder(values: Mapping[str, str], env: Mapping[str, str]) -> Iterator[str | None]:
    """The package's folder while the block runs (None when there is nothing to seal); removed after."""
    if not values and not env:
        yield None
        return
    home = Path(tempfile.mkdtemp(prefix="rtjob-sealed-"))  # 0700: this user only
    try:
        folder = home / SEALED_PACKAGE
        folder.mkdir(mode=0o700)
        (folder / "__init__.py").write_text('"""Values rtjob sealed for one run (rtjob.runside.secret_env)."""\n')
        for name, sealed in ((SEALED_FILE, values), (SEALED_ENV_FILE, env)):
            fd = os.open(folder / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(dict(sealed), f, sort_keys=True)
        yield str(folder)
    finally:
        shutil.rmtree(home, ignore_errors=True)
