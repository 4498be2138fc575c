"""What Ray will upload as the working dir, measured before we send it (Ray's limit is 100 MiB)."""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path

import pathspec

from ...core.errors import BadInput

RAY_UPLOAD_LIMIT = 100 * 1024**2
# Ray's own default excludes for working_dir uploads.
DEFAULT_EXCLUDES = [".git", ".venv", "venv", "__pycache__"]


@dataclass(frozen=True)
class WorkingDirSize:
    total_bytes: int
    files: int
    largest: list[tuple[int, str]]


def _spec_from(lines: list[str]) -> pathspec.GitIgnoreSpec:
    return pathspec.GitIgnoreSpec.from_lines(lines)


@functools.lru_cache(maxsize=8)
def _measured(root: Path, excludes: tuple[str, ...]) -> WorkingDirSize:
    # submit plans twice (offline checks first, then against the started cluster): walk the tree once.
    return measure(root, list(excludes))


def measure(root: Path, excludes: list[str]) -> WorkingDirSize:
    """Walk ``root`` honouring excludes, .gitignore and .rayignore files (at any depth), as Ray does."""
    top = _spec_from(DEFAULT_EXCLUDES + list(excludes))
    nested: list[tuple[str, pathspec.GitIgnoreSpec]] = []
    total, count = 0, 0
    sizes: list[tuple[int, str]] = []
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        rel_dir = "" if rel_dir == "." else rel_dir + "/"
        for ignore_name in (".gitignore", ".rayignore"):
            ignore_file = Path(dirpath) / ignore_name
            if ignore_file.is_file():
                lines = ignore_file.read_text(encoding="utf-8", errors="ignore").splitlines()
                nested.append((rel_dir, _spec_from(lines)))

        def ignored(rel: str, is_dir: bool) -> bool:
            probe = rel + "/" if is_dir else rel
            if top.match_file(probe):
                return True
            return any(probe.startswith(base) and spec.match_file(probe[len(base):]) for base, spec in nested)

        dirnames[:] = [d for d in dirnames if not ignored(rel_dir + d, True)]
        for name in filenames:
            rel = rel_dir + name
            if ignored(rel, False):
                continue
            try:
                size = os.path.getsize(os.path.join(dirpath, name))
            except OSError:
                continue
            total += size
            count += 1
            sizes.append((size, rel))
    sizes.sort(reverse=True)
    return WorkingDirSize(total, count, sizes[:5])


def check_upload(root: Path, excludes: list[str], where: str) -> WorkingDirSize:
    size = _measured(root.resolve(), tuple(excludes))
    if size.total_bytes > RAY_UPLOAD_LIMIT:
        biggest = ", ".join(f"{rel} ({n / 1024**2:.1f} MiB)" for n, rel in size.largest[:3])
        raise BadInput(
            f"{where}: working_dir {root} is {size.total_bytes / 1024**2:.1f} MiB, above Ray's 100 MiB upload "
            f"limit; largest files: {biggest}; add them to the job's `excludes:` or .gitignore"
        )
    return size
