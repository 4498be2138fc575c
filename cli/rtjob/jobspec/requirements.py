"""A job's pip requirements: read from the job (a list, or a requirements file beside the job file), and on
the embedded cluster, which runs from this very environment, the ones it already satisfies are dropped.

Why drop them: Ray's pip runtime_env builds a virtualenv that clones the running one (about 6 GB with torch)
for every distinct requirements set, to install packages that are already there.
"""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

from ..core.errors import BadInput


def read_requirements(declared: list[str] | str | None, job_file: Path, shown: str) -> list[str] | None:
    """The job's requirements as pip lines (None: the job declares none). A string is a requirements file,
    relative to the job file's folder; its `-r OTHER` lines are read in (relative to that file), since the
    cluster installs from a copy of the lines, not from the file."""
    if declared is None or isinstance(declared, list):
        return declared
    path = Path(declared)
    return _read_file(path if path.is_absolute() else job_file.parent / path, declared, shown, set())


def _read_file(path: Path, declared: str, shown: str, seen: set[Path]) -> list[str]:
    if path.resolve() in seen:
        raise BadInput(f"{shown}: requirements file {path} includes itself (-r)")
    seen.add(path.resolve())
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise BadInput(f"{shown}: requirements file {declared!r} cannot be read ({exc.strerror or exc}; "
                       f"it is relative to the job file's folder)") from None
    lines: list[str] = []
    for raw in text.splitlines():
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split(None, 1)
        if parts[0] in {"-r", "--requirement"} and len(parts) == 2:
            lines += _read_file(path.parent / parts[1], parts[1], shown, seen)
        else:
            lines.append(line)
    return lines


def _satisfied(line: str, depth: int = 0) -> bool:
    """Whether this environment already has what one requirement line asks for. Anything that is not a plain
    requirement (pip options, URLs, files) counts as unsatisfied: pip gets it."""
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.utils import canonicalize_name

    try:
        req = Requirement(line)
    except InvalidRequirement:
        return False
    if req.url:
        return False
    if req.marker is not None and not req.marker.evaluate():
        return True  # not for this platform: nothing to install
    try:
        installed = importlib.metadata.version(req.name)
    except importlib.metadata.PackageNotFoundError:
        return False
    if not req.specifier.contains(installed, prereleases=True):
        return False
    if req.extras and depth < 3:  # an extra is satisfied when its own requirements are
        provided = {canonicalize_name(e) for e in importlib.metadata.metadata(req.name).get_all("Provides-Extra") or []}
        if not {canonicalize_name(e) for e in req.extras} <= provided:
            return False  # pip's to judge (it warns about an extra the package lacks)
        needed = importlib.metadata.requires(req.name) or []
        for extra in req.extras:
            for dep in needed:
                dep_req = Requirement(dep)
                if dep_req.marker is not None and dep_req.marker.evaluate({"extra": extra}) \
                        and not dep_req.marker.evaluate({"extra": ""}):
                    plain = str(dep_req).split(";", 1)[0].strip()
                    if not _satisfied(plain, depth + 1):
                        return False
    return True


def split_satisfied(requirements: list[str]) -> tuple[list[str], list[str]]:
    """(still to install, already satisfied by the running environment)."""
    missing: list[str] = []
    present: list[str] = []
    for line in requirements:
        (present if _satisfied(line) else missing).append(line)
    return missing, present
