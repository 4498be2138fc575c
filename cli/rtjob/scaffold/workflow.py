"""A GitHub Actions workflow (cron + manual trigger) that runs a job with rtjob and fails unless it succeeds:
scheduled runs for Ray-cluster users, and a CI alternative to Anyscale schedules. Unattended by default (the
cluster carries the run; a later short job checks it), or following the run to its end (``follow``). The text
is workflow_text.py's; this module checks the inputs and fills it in."""

from __future__ import annotations

import math
import re
import shlex
from pathlib import Path

import rtjob_contract as contract

from ..core.errors import BadInput
from .workflow_text import CHECK_CRON_ABOUT, FIND_RUN, skeleton


def _schedule_entry(cron: str, timezone: str) -> str:
    """The `on.schedule` entry: UTC (GitHub's default) needs no `timezone:` key, so such files stay as before."""
    if timezone == "UTC":
        return f'    - cron: "{cron}"  # GitHub Actions schedules are in UTC'
    return (f'    - cron: "{cron}"\n'
            f'      timezone: "{timezone}"  # IANA name; GitHub runs the cron in this time zone (DST included)')


def client_install(root: Path, extra: str) -> str:
    """What the workflow pip-installs: rtjob's own checkout in rtjob's repository, else the released client
    pinned to the version that rendered the workflow (a user's project is not rtjob)."""
    from .. import __version__
    from ..jobspec.settings import tomllib

    try:
        name = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8")).get("project", {}).get("name")
    except (OSError, tomllib.TOMLDecodeError):
        name = None
    return f'".[{extra}]"' if name == "rtjob" else f'"rtjob[{extra}]=={__version__}"'


def github_workflow(job_ref: str, cron: str, *, backend: str, nodes: int, timeout: str,
                    timezone: str = "UTC", root: Path | None = None, follow: bool = False,
                    check_cron: str | None = None) -> str:
    """A GitHub Actions workflow (cron + manual trigger) that runs ``job_ref`` with rtjob and fails unless
    it succeeds. ``cron`` runs in ``timezone`` (an IANA name; GitHub's default is UTC); ``root`` is the project
    the workflow lives in (which client it installs). ``follow``: one job submits and follows the run for at most
    ``timeout`` (rtjob's --timeout), holding its runner; else (unattended) a short `submit` job sends it with
    --no-wait and a `check` job, started by the run's `github` notification or by hand, reads how it ended.
    Cron that GitHub does not run and bad names are BadInput: nothing is rendered."""
    from ..backends import backend_class, workflow_backends
    from ..jobspec.cron import validate_github_cron, validate_iana_timezone
    from ..jobspec.overrides import parse_duration

    cron = validate_github_cron(cron)
    timezone = validate_iana_timezone(timezone)
    if check_cron is not None:
        check_cron = validate_github_cron(check_cron)
        if check_cron == cron:
            raise BadInput(f"--check-cron {check_cron!r} is --cron: the check runs after the submit, on a cron of its "
                           "own (e.g. 6 hours later)")

    if any(ord(c) < 32 or ord(c) == 127 for c in job_ref + timeout):  # pasted into YAML and shell lines
        raise BadInput("a job reference or --timeout with a control character cannot go into a workflow file")
    if backend not in workflow_backends():
        raise BadInput(f"--backend {backend!r}: a workflow submits to a cluster: use {' or '.join(workflow_backends())}")
    # The backend's own secrets and client extra come from the registry, not from this template; the extras
    # are client extras that never pull torch (the workflow checks).
    cls = backend_class(backend)
    seconds = parse_duration(timeout)
    slug = re.sub(r"[^A-Za-z0-9-]+", "-", job_ref.rsplit("/", 1)[-1].removesuffix(".yaml").removesuffix(".yml"))
    slug = slug.strip("-").lower() or "job"
    command = (f"rtjob schedule render {shlex.quote(job_ref)} --cron {shlex.quote(cron)} --github "
               f"--backend {backend} --nodes {nodes}" + (f" --follow --timeout {timeout}" if follow else ""))
    if timezone != "UTC":
        command += f" --timezone {timezone}"
    if check_cron is not None:
        command += f" --check-cron {shlex.quote(check_cron)}"
    # With a check cron, a job tells the two schedules apart by github.event.schedule (the cron as written).
    on_cron = ("github.event_name == 'schedule'" if check_cron is None
               else f"(github.event_name == 'schedule' && github.event.schedule == '{cron}')")
    values = {
        "JOB": slug,
        "JOBREF": shlex.quote(job_ref),
        "BACKEND": backend,
        "COMMAND": command,
        "NEEDS": "\n".join(f"#   secret {name:<21} {what}" for name, what in cls.ci_secrets),
        "BACKEND_ENV": "\n".join(f"      {name}: ${{{{ secrets.{name} }}}}" for name, _ in cls.ci_secrets),
        "INSTALL": client_install(root or Path.cwd(), cls.ci_extra),
        "SCHEDULE": _schedule_entry(cron, timezone) + (
            "" if check_cron is None else "\n" + _schedule_entry(check_cron, timezone).replace(
                "  # GitHub", "  # the check job's; GitHub")),
        "SUBMIT_ON": on_cron,
        "CHECK_IF": "" if check_cron is None else (
            f" || (github.event_name == 'schedule' && github.event.schedule == '{check_cron}')"),
        "FIND_RUN": "" if check_cron is None else FIND_RUN.replace("<<SLUG>>", slug),
        "CHECK_CRON_ABOUT": "" if check_cron is None else CHECK_CRON_ABOUT.replace("<<CHECK_CRON>>", check_cron),
        "NODES": str(nodes),
        "TIMEOUT": timeout,
        "SLUG": slug,
        # Following the job, plus installing and pulling the results.
        "MINUTES": str(math.ceil(seconds / 60) + 30),
        "EVENT": contract.GITHUB_DISPATCH_EVENT,
        # An unattended workflow's submit and check of one run never cancel each other (another group).
        "GROUP": "" if follow else ("-${{ github.event_name == 'repository_dispatch' && 'check' || 'submit' }}"
                                    if check_cron is None else
                                    f"-${{{{ (github.event_name == 'repository_dispatch' || github.event.schedule == "
                                    f"'{check_cron}') && 'check' || 'submit' }}}}"),
    }
    text = skeleton(follow)
    for key, value in values.items():
        text = text.replace(f"<<{key}>>", value)
    return text


def write_workflow(path: str, text: str) -> None:
    """Write ``text`` to ``path`` whole or not at all: a temporary file beside it, then a rename, so a
    failure leaves no half-written workflow and an existing file is replaced only by a complete one."""
    from pathlib import Path

    from ..core.files import write_atomically

    target = Path(path)
    if target.is_dir():
        raise BadInput(f"--out {path!r}: a folder; give the workflow file, e.g. .github/workflows/train.yml")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(target, text, mode=0o644)
    except OSError as exc:
        raise BadInput(f"--out {path!r}: cannot write it ({exc.strerror or exc}); give a writable file path") from None
