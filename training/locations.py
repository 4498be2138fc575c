"""Where training code reads and writes: a local path or a URI, as a pyarrow filesystem (what Ray Data and Ray
Train use). Torch-free on purpose: Ray Data workers of the voice process step import it without loading torch."""

from __future__ import annotations

import os
from typing import Any


def filesystem(location: str) -> tuple[Any, str]:
    """``(pyarrow filesystem, path in it)`` of a local path or a URI (``s3://bucket/key``: the standard AWS
    variables, AWS_ENDPOINT_URL included, configure it)."""
    import pyarrow.fs as pafs

    if "://" in location:
        return pafs.FileSystem.from_uri(location)
    return pafs.LocalFileSystem(), os.path.abspath(os.path.expanduser(location))
