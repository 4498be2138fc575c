"""The sealed package: the secrets only this client holds, on their way to the run side without
``runtime_env.env_vars`` (which Ray's Jobs API returns to anyone who reaches the dashboard) and without the run's
record: the values of a job's ``env:`` references (``values.json``), the forwarded AWS credentials and each notify
target's URL (``env.json``: variables for the run side's environment).

It is a ``py_modules`` folder (backends/sealed_package.py), made in a private temporary folder only while
``submit_job`` (or a pipeline's upload) packs and uploads it, and added to the runtime_env Ray is
sent, never to the request rtjob records or compares (``rerun`` sees the same request every time). Ray stores it in
its GCS as ``gcs://_ray_pkg_<content hash>.zip``: the job info shows that URI, never the values. Every job rtjob
starts for the run from its job info (supervisor, sync job, a retry with no client alive) copies its py_modules, so
the package goes along, and the run side unseals it at start (runside/secret_env.unseal). Who can still read it:
anyone who can run code on the cluster or reach its GCS (docs/guide/secrets.md).
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator
from typing import Any

from ..sealed_package import sealed_folder
from .request import RayJobRequest


@contextlib.contextmanager
def sealed_runtime_env(request: RayJobRequest) -> Iterator[dict[str, Any]]:
    """The request's runtime_env with the sealed package among its ``py_modules`` while the block runs (unchanged
    when it seals nothing); the folder is removed after."""
    with sealed_folder(request.sealed, request.sealed_env) as folder:
        if folder is None:
            yield request.runtime_env
            return
        sent = copy.deepcopy(request.runtime_env)
        sent["py_modules"] = [*(sent.get("py_modules") or []), folder]
        yield sent
