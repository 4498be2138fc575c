"""The developer's shell never reaches a test: the variables that would point rtjob or Ray at another cluster,
project, context, storage or account, change what a run uploads, or colour what rtjob prints. One list, derived
from rtjob's own settings (``jobspec.settings.ENV_NAMES``), so a new setting is scrubbed the day it exists.

The user's own contexts ($XDG_CONFIG_HOME/rtjob) are gone before any test runs: tests/conftest.py points
XDG_CONFIG_HOME at a private folder for the whole session. It stays set here, because without it rtjob would read
~/.config/rtjob of whatever HOME the test has."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from rtjob.jobspec.contexts import CONTEXT_ENV
from rtjob.jobspec.settings import ENV_NAMES

NAMES = frozenset({
    *(name for names in ENV_NAMES.values() for name in names),  # every setting's variables
    CONTEXT_ENV,  # an explicitly chosen context
    "RTJOB_PROJECT",  # the current project (jobspec.project.find_root)
    "NO_COLOR", "FORCE_COLOR",  # how rich prints
})
# Ray's (address, token auth, what the upload holds, the embedded cluster's own) and the Anyscale SDK's (token, host).
PREFIXES = ("RAY_", "ANYSCALE_")


def scrubbed(name: str) -> bool:
    return name in NAMES or name.startswith(PREFIXES)


def scrubbed_environ(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """``environ`` (default: this process's) without those variables: the start of a subprocess's environment."""
    return {k: v for k, v in (os.environ if environ is None else environ).items() if not scrubbed(k)}


def scrub(monkeypatch: Any) -> None:
    """Those variables removed from this process's environment until the test ends."""
    for name in [name for name in os.environ if scrubbed(name)]:
        monkeypatch.delenv(name)
