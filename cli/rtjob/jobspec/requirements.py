"""A job's pip requirements: read from the job (a list, or a requirements file beside the job file), and on
the embedded cluster, which runs from this very environment, the ones it already satisfies are dropped.

Why drop them: Ray's pip runtime_env builds a virtualenv that clones the running one (about 6 GB with torch)
for every distinct requirements set, to install packages that are already there.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
from dataclasses import dataclass
from pathlib import Path

from ..core.errors import BadInput

PYPROJECT = "pyproject.toml"  # `requirements: ../pyproject.toml` reads its [project].dependencies


@dataclass(frozen=True)
class RequirementLine:
    """One pip line and where it was written (``file:line``, or the job file and the list index)."""

    text: str
    where: str


def requirement_lines(declared: list[str] | str | None, job_file: Path, shown: str) -> list[RequirementLine] | None:
    """The job's requirements (None: the job declares none). A string is a file relative to the job file's folder:
    a requirements file, whose `-r OTHER` lines are read in (relative to that file), since the cluster installs from
    a copy of the lines, not from the file; or a pyproject.toml, read as its ``[project].dependencies``."""
    if declared is None:
        return None
    if isinstance(declared, list):
        return [RequirementLine(line, f"{shown} requirements[{index}]") for index, line in enumerate(declared)]
    path = Path(declared)
    path = path if path.is_absolute() else job_file.parent / path
    if path.name == PYPROJECT:
        return _read_pyproject(path, declared, shown)
    return _read_file(path, declared, shown, set())


def declared_at(shown: str, lines: dict[tuple[str | int, ...], int]) -> str:
    """``file:line`` of a job's `requirements:` key (errors about its file name it), else the job file."""
    line = lines.get(("requirements",))
    return f"{shown}:{line}" if line else shown


def read_requirements(declared: list[str] | str | None, job_file: Path, shown: str) -> list[str] | None:
    """The job's requirements as pip lines (None: the job declares none); see requirement_lines."""
    lines = requirement_lines(declared, job_file, shown)
    return None if lines is None else [line.text for line in lines]


def _read_text(path: Path, declared: str, shown: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise BadInput(f"{shown}: requirements file {declared!r} cannot be read ({exc.strerror or exc}; "
                       f"it is relative to the job file's folder)") from None


def _shown(path: Path) -> str:
    """A requirements file as messages name it: relative to the current folder when it is inside it."""
    resolved = Path(os.path.normpath(path.absolute()))
    try:
        return str(resolved.relative_to(Path.cwd()))
    except ValueError:
        return str(resolved)


def _read_file(path: Path, declared: str, shown: str, seen: set[Path]) -> list[RequirementLine]:
    if path.resolve() in seen:
        raise BadInput(f"{shown}: requirements file {path} includes itself (-r)")
    seen.add(path.resolve())
    text = _read_text(path, declared, shown)
    lines: list[RequirementLine] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split(None, 1)
        if parts[0] in {"-r", "--requirement"} and len(parts) == 2:
            lines += _read_file(path.parent / parts[1], parts[1], f"{_shown(path)}:{number}", seen)
        else:
            lines.append(RequirementLine(line, f"{_shown(path)}:{number}"))
    return lines


def _read_pyproject(path: Path, declared: str, shown: str) -> list[RequirementLine]:
    """``[project].dependencies`` of a pyproject.toml, each with the line it is written on."""
    from .settings import tomllib

    text = _read_text(path, declared, shown)
    try:
        dependencies = tomllib.loads(text).get("project", {}).get("dependencies")
    except tomllib.TOMLDecodeError as exc:
        raise BadInput(f"{shown}: requirements {declared!r} is not valid TOML ({exc})") from None
    if not isinstance(dependencies, list) or not all(isinstance(d, str) for d in dependencies):
        raise BadInput(f"{shown}: requirements {declared!r} has no [project].dependencies list (list them there, "
                       "or point requirements: at a requirements file)")
    written = text.splitlines()

    def line_of(dependency: str) -> str:
        quoted = (f'"{dependency}"', f"'{dependency}'")
        number = next((n for n, line in enumerate(written, start=1) if any(q in line for q in quoted)), None)
        return f"{_shown(path)}:{number}" if number else _shown(path)

    return [RequirementLine(d, line_of(d)) for d in dependencies]


# A line that installs from this machine's disk: an editable install, or a path (a folder, a wheel, a file: URL).
_LOCAL = re.compile(r"^(-e|--editable)\b|^(\.{1,2}|~)?/|^\.{1,2}$|^file:|@\s*file:|^[^:@\s]+\.(whl|tar\.gz|zip)$",
                    re.IGNORECASE)


def cluster_problems(lines: list[RequirementLine]) -> list[str]:
    """Lines that cannot install on a cluster, each as one warning with its file:line (secrets in the line, such
    as an index URL's password, masked)."""
    from ..core.redact import mask_url

    return [f"{line.where}: {mask_url(line.text)!r} installs from this machine's disk, which the cluster does not "
            "have: publish it to a package index, or ship it in the working dir and name it by a relative path "
            "in the entrypoint's own install step" for line in lines if _LOCAL.search(line.text)]


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
