"""What Ray will upload as the working dir, measured before we send it (Ray's limit is 100 MiB).

The walk mirrors Ray 2.60's own (``ray._private.runtime_env.packaging._dir_travel`` and ``_zip_files``):
each path, relative to the working dir and without a trailing slash, is tested against one gitwildmatch
PathSpec of Ray's default excludes plus the request's ``excludes``, and against the .gitignore (unless
RAY_RUNTIME_ENV_IGNORE_GITIGNORE=1) and .rayignore of every folder above it, each relative to its own folder;
an excluded folder is not entered. Ray follows symlinks (a link to a folder is zipped as the folder, a link to
a file as the file's content), so a link that leaves the working dir would ship what it points at: rtjob
refuses it (exit 2) instead; a link inside the working dir is counted as Ray zips it, once per path.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ..core.errors import BadInput
from ..jobspec.project import PULLED_RUNS_DIR

if TYPE_CHECKING:
    from .base import Upload

RAY_UPLOAD_LIMIT = 100 * 1024**2
# Ray's own default excludes for working_dir uploads (ray_constants.RAY_RUNTIME_ENV_DEFAULT_EXCLUDES), which
# the client's Ray adds to every request; RAY_OVERRIDE_RUNTIME_ENV_DEFAULT_EXCLUDES replaces them.
RAY_DEFAULT_EXCLUDES = [".git", ".venv", "venv", "__pycache__"]
# What rtjob adds to every job's `excludes:` (a job re-includes one with `!PATTERN`): secrets, which have no
# business on a cluster, rtjob's own state, and the runs `rtjob pull` writes by default.
RTJOB_EXCLUDES = [
    ".env", ".env.*", ".envrc",  # dotenv files
    ".aws/", ".ssh/", ".gnupg/", ".kube/", ".docker/", ".azure/", ".config/gcloud/",  # credential folders
    "credentials", "credentials.json", ".netrc", "_netrc", ".git-credentials", ".pypirc", ".npmrc",
    "*.pem", "*.key", "*.p12", "*.pfx", "*.jks", "*.keystore",  # keys and certificates with keys
    "id_rsa*", "id_dsa*", "id_ecdsa*", "id_ed25519*",  # SSH keys
    ".rtjob/", f"{PULLED_RUNS_DIR}/",
]
# Everything excluded from a working dir by default (Anyscale packs it as Ray does and is sent all of it).
DEFAULT_EXCLUDES = [*RAY_DEFAULT_EXCLUDES, *RTJOB_EXCLUDES]


def sent_excludes(job_excludes: list[str]) -> list[str]:
    """The `excludes` of a Ray request: rtjob's defaults, then the job's own (Ray adds its defaults itself)."""
    return [*RTJOB_EXCLUDES, *(e for e in job_excludes if e not in RTJOB_EXCLUDES)]


def ray_default_excludes() -> list[str]:
    """Ray's default excludes as the client's Ray computes them (ray_constants.get_runtime_env_default_excludes)."""
    value = os.environ.get("RAY_OVERRIDE_RUNTIME_ENV_DEFAULT_EXCLUDES", ",".join(RAY_DEFAULT_EXCLUDES))
    return [x.strip() for x in value.split(",") if x.strip()]


@dataclass(frozen=True)
class Excluded:
    """A path the walk left out (a folder is not entered: its path ends with /) and the rule that did it."""

    path: str
    rule: str  # "Ray default", ".gitignore" / "sub/.rayignore", "the job's excludes", "rtjob default"


@dataclass(frozen=True)
class WorkingDirSize:
    total_bytes: int
    files: int
    largest: list[tuple[int, str]]
    listed: list[tuple[int, str]] = field(default_factory=list)  # every uploaded (size, path), by path
    excluded: list[Excluded] = field(default_factory=list)  # in the walk's order

    def as_upload(self, working_dir: str) -> Upload:
        """The plan's upload fact, with what render --files lists."""
        from .base import Upload

        return Upload(working_dir, self.files, self.total_bytes, tuple((rel, n) for n, rel in self.listed),
                      tuple((e.path, e.rule) for e in self.excluded))


Matcher = Callable[[Path], bool]
Rule = Callable[[Path], str]  # which rule excluded a path a matcher matched


def _matcher(base: Path, lines: list[str]) -> Matcher:
    """Ray's matcher for one set of patterns: the path relative to ``base``, as str(Path) (no trailing /)."""
    # pathspec only when a working dir is measured: a Ray request (sent_excludes) is built on a cluster too.
    import pathspec

    try:  # what Ray's "gitwildmatch" is since pathspec 1.0 (that name now warns on every pattern)
        from pathspec.patterns.gitignore.spec import GitIgnoreSpecPattern as pattern
    except ImportError:  # pragma: no cover - pathspec < 1.0
        pattern = "gitwildmatch"  # type: ignore[assignment,misc]
    spec = pathspec.PathSpec.from_lines(pattern, lines)
    return lambda path: spec.match_file(str(path.relative_to(base)))


def _ignore_files(folder: Path, root: Path) -> list[tuple[Matcher, Rule]]:
    names = [".rayignore"]
    if os.environ.get("RAY_RUNTIME_ENV_IGNORE_GITIGNORE", "0") != "1":
        names.insert(0, ".gitignore")
    found: list[tuple[Matcher, Rule]] = []
    for name in names:
        path = folder / name
        if path.is_file():
            found.append((_matcher(folder, path.read_text(encoding="utf-8", errors="ignore").splitlines()),
                          _named(str(path.relative_to(root)))))
    return found


def _named(rule: str) -> Rule:
    return lambda path: rule


def _top_rule(root: Path, excludes: list[str]) -> Rule:
    """Which group of the one top-level PathSpec excluded a path: Ray decides with all of them at once (later
    patterns win, so a job's `!PATTERN` re-includes), rtjob only names the group, the job's own first."""
    ray = [*ray_default_excludes(), *(e for e in excludes if e in RAY_DEFAULT_EXCLUDES)]
    ours = [e for e in excludes if e in RTJOB_EXCLUDES]
    job = [e for e in excludes if e not in RTJOB_EXCLUDES and e not in RAY_DEFAULT_EXCLUDES]
    groups = [("the job's excludes", _matcher(root, job)), ("rtjob default", _matcher(root, ours)),
              ("Ray default", _matcher(root, ray))]
    return lambda path: next((name for name, match in groups if match(path)), "excludes")


def _outside(link: Path, target: Path, root_real: Path) -> str:
    return (f"{link} is a symlink to {target}, outside the working dir {root_real}: Ray would upload what it "
            "points at; add it to the job's `excludes:` (or .gitignore), or copy the data into the working dir")


def uploaded_files(root: Path, excludes: list[str], excluded: list[Excluded] | None = None) -> list[tuple[int, str]]:
    """(size, relative path) of every file Ray would zip from ``root`` with ``excludes`` (request + Ray's);
    ``excluded``, when given, collects what the walk left out and the rule that did (one walk for both)."""
    root = root.absolute()
    root_real = Path(os.path.realpath(root))
    top = (_matcher(root, [*ray_default_excludes(), *excludes]), _top_rule(root, excludes))
    files: list[tuple[int, str]] = []

    def travel(path: Path, matchers: list[tuple[Matcher, Rule]], real_parents: tuple[Path, ...]) -> None:
        real = real_parents
        if path.is_dir():
            matchers = matchers + _ignore_files(path, root)
        hit = next((rule for match, rule in matchers if match(path)), None)
        if hit is not None:
            if excluded is not None:
                excluded.append(Excluded(str(path.relative_to(root)) + ("/" if path.is_dir() else ""), hit(path)))
            return
        if path.is_symlink():
            target = Path(os.path.realpath(path))
            if not path.exists():
                return  # a dangling link: Ray skips it
            if target != root_real and root_real not in target.parents:
                raise BadInput(_outside(path.relative_to(root), target, root_real))
            if path.is_dir() and target in real_parents:
                raise BadInput(f"{path.relative_to(root)} is a symlink to {target}, a folder that holds it: Ray "
                               "would follow it forever; add it to the job's `excludes:` or remove it")
        if path.is_dir():
            real = (*real_parents, Path(os.path.realpath(path)))
            for child in sorted(path.iterdir()):
                travel(child, matchers, real)
        elif path.is_file():
            files.append((path.stat().st_size, str(path.relative_to(root))))

    travel(root, [top], ())
    return files


def measure(root: Path, excludes: list[str]) -> WorkingDirSize:
    """What Ray would zip from ``root`` with the request's ``excludes``: bytes, file count, largest files.
    Raises BadInput for a symlink that leaves ``root`` or loops."""
    excluded: list[Excluded] = []
    files = uploaded_files(root, excludes, excluded)
    return WorkingDirSize(sum(n for n, _ in files), len(files), sorted(files, reverse=True)[:5],
                          sorted(files, key=lambda f: f[1]), excluded)


def check_upload(root: Path, excludes: list[str], where: str, limit: int | None = RAY_UPLOAD_LIMIT) -> WorkingDirSize:
    """Measure the upload of a request with these ``excludes``; refuse one above ``limit`` (Ray's)."""
    try:
        size = measure(root.resolve(), excludes)
    except BadInput as exc:
        raise BadInput(f"{where}: {exc.message}") from None
    if limit is not None and size.total_bytes > limit:
        biggest = ", ".join(f"{rel} ({n / 1024**2:.1f} MiB)" for n, rel in size.largest[:3])
        raise BadInput(
            f"{where}: working_dir {root} is {size.total_bytes / 1024**2:.1f} MiB, above Ray's 100 MiB upload "
            f"limit; largest files: {biggest}; add them to the job's `excludes:` or .gitignore"
        )
    return size


# ---------------------------------------------------------------------------------------------
# The run-side companion travels with the request: rtjob and rtjob_contract as runtime_env py_modules (packed by
# Ray like the working dir, never installed with pip), and the entrypoint given to Ray runs the job's own under it.

COMPANION_MODULE = "rtjob.runside.companion"
# Ray's SIGTERM-to-SIGKILL wait on a stop (3 s by default, read from the job's env): the companion's last log
# part, files, record and notification fit in it.
STOP_WAIT_ENV = "RAY_JOB_STOP_WAIT_TIME_S"
STOP_WAIT_S = "30"


def companion_modules() -> list[str]:
    """The folders of the packages the companion imports (rtjob's own and its contract), as py_modules."""
    import rtjob_contract

    rtjob_dir = Path(__file__).resolve().parents[1]
    return [str(rtjob_dir), str(Path(rtjob_contract.__file__).resolve().parent)]


def companion_entrypoint(entrypoint: str) -> str:
    """The entrypoint Ray runs: the companion with the job's own entrypoint as one argument (run with sh -c)."""
    return f"python -m {COMPANION_MODULE} {shlex.quote(entrypoint)}"


def script_entrypoint(entrypoint: str) -> str:
    """The job's own entrypoint inside ``companion_entrypoint``'s (as it is, when it is not one)."""
    prefix = f"python -m {COMPANION_MODULE} "
    if not entrypoint.startswith(prefix):
        return entrypoint
    try:
        parts = shlex.split(entrypoint[len(prefix):])
    except ValueError:
        return entrypoint
    return parts[0] if len(parts) == 1 else entrypoint
