"""Which stored names may become local paths: a key that would land outside the pull's folder, hide what it
says, or overwrite another one on a case-insensitive filesystem is refused (pull_plan.py), and a name is printed
only with its control characters escaped."""

from __future__ import annotations

import unicodedata

from .stores import is_bookkeeping


def unsafe_reason(rel: str) -> str | None:
    """Why a stored name must not become a local path (None: it is safe under the destination)."""
    if rel == "":
        return "empty name"
    if rel.startswith("/"):
        return "absolute path"
    if "\\" in rel:
        return "backslash in the name"
    if not (rel.isascii() and rel.isprintable()):  # printable ASCII has neither (a per-character look-up cost
        # a 2,000-file pull ~0.1 s of CPU)
        if any(unicodedata.category(ch) == "Cc" for ch in rel):  # C0, DEL and C1
            return "control character in the name"
        hidden = next((ch for ch in rel if unicodedata.category(ch) in _HIDDEN), None)
        if hidden is not None:  # a name that reads differently from what is written (U+202E flips the text)
            return f"invisible or bidirectional formatting character (U+{ord(hidden):04X}) in the name"
    parts = rel.split("/")
    for part in parts:
        if part == "":
            return "empty path segment"
        if part == "..":
            return "'..' segment"
        if part == ".":
            return "'.' segment"
        if len(part.encode("utf-8", "surrogateescape")) > 255:
            return "name longer than 255 bytes"
    if any(is_bookkeeping(part) for part in parts):
        return "reserved name (rtjob's own bookkeeping)"
    return None


# Format characters (bidi overrides and isolates, LRM/RLM, zero-width ones) and line/paragraph separators.
_HIDDEN = ("Cf", "Zl", "Zp")


def fold(rel: str) -> str:
    """A name as a case-insensitive, normalising filesystem (macOS, Windows) compares it."""
    return unicodedata.normalize("NFC", rel).casefold()


def printable(text: str) -> str:
    """A stored name as it may be printed: control characters escaped (no terminal escapes from a key)."""
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in text)


def case_collisions(rels: list[str]) -> dict[str, str]:
    """Landing paths that differ only in case or Unicode normalisation ("A/x" and "a/x"): on macOS or Windows
    one would silently overwrite the other, so all of them are refused. rel → another one it collides with."""
    groups: dict[str, list[str]] = {}
    for rel in dict.fromkeys(rels):
        groups.setdefault(fold(rel), []).append(rel)
    return {rel: next(other for other in group if other != rel)
            for group in groups.values() if len(group) > 1 for rel in group}
