"""How a voice stage's ``main`` ends on an error it expects: one ``ERROR:`` line on stderr and an exit code (2: bad
input, a ValueError; 1: something the stage needed is missing or failed), never a traceback."""

from __future__ import annotations

import sys

EXPECTED = (ValueError, FileNotFoundError)  # what a stage's main catches: everything else is a bug and shows as one


def failed(error: BaseException, *, bad_input: bool = True) -> int:
    """Print ``error`` as one line; the exit code: 2 for a ValueError when ``bad_input`` (the arguments are at
    fault), else 1."""
    print(f"ERROR: {error}", file=sys.stderr, flush=True)
    return 2 if bad_input and isinstance(error, ValueError) else 1
