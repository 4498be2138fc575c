"""How much the libraries rtjob calls may say on the user's terminal: their INFO lines are rtjob's internals (Ray's
client logs every packaging step: "Ignoring upload to cluster for these files", "Package gcs://... already exists,
skipping upload", "Uploading package ..."), and rtjob says what matters itself ("uploading working dir ..."). With
`rtjob --verbose` (or RTJOB_VERBOSE=1) they are left as the library sets them."""

from __future__ import annotations

import logging
import os

VERBOSE_ENV = "RTJOB_VERBOSE"


def verbose() -> bool:
    return os.environ.get(VERBOSE_ENV, "") not in ("", "0")


def quiet_loggers(*names: str) -> None:
    """Only errors from these loggers (and those below them), unless verbose."""
    if verbose():
        return
    for name in names:
        logging.getLogger(name).setLevel(logging.ERROR)
