"""Where a command runs: its settings (flags over the chosen context, environment, project config), the backend
they choose, and the timeout flag. Apart from options.py (the Click decorators) so that shell completion can
build a backend without importing the options that call it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from ..backends.base import Backend
    from ..jobspec.project import Settings

CONTEXT_KEY = "rtjob.context"  # where --context leaves its value in the Click context (options.context_option)
QUEUE_KEY = "rtjob.queue-flags"  # ... and --queue, --priority theirs (options.queue_options): QUEUE_KEY.queue, .priority


def settings_from(backend: str | None, address: str | None, headers: tuple[str, ...], no_verify_tls: bool,
                  job: str | None = None, **extra: Any) -> Settings:
    """The current context < project config < environment < the chosen context (--context) < these flags, with
    the backend settled by the registry. With ``job``: the project config of that job's project (a job file's own
    project, wherever rtjob runs)."""
    from ..backends import configured
    from ..jobspec.overrides import parse_headers
    from ..jobspec.project import project_of

    flags: dict[str, Any] = {"backend": backend, "address": address, **extra}
    if headers:
        flags["headers"] = parse_headers(headers)
    if no_verify_tls:
        flags["verify_tls"] = False
    click_ctx = click.get_current_context(silent=True)
    if click_ctx is not None:
        flags.update({k: click_ctx.meta[f"{QUEUE_KEY}.{k}"] for k in ("queue", "priority") if f"{QUEUE_KEY}.{k}" in click_ctx.meta})
    settings = configured(flags, project_of(job) if job else None,
                          context=click_ctx.meta.get(CONTEXT_KEY) if click_ctx else None)
    half = settings.half_applied_context()
    if half:
        from .printing import say

        say(f"warning: {half}")
    # Header values and a password in the address reach the redactor as they are set (spec.project.Settings.set)
    # or resolved: reading them here would resolve a context reference that this command may never need.
    return settings


def backend_from(backend: str | None, address: str | None, headers: tuple[str, ...], no_verify_tls: bool) -> Backend:
    from ..backends import get_backend

    return get_backend(settings_from(backend, address, headers, no_verify_tls))


def backend_with_storage(backend: str | None, address: str | None, headers: tuple[str, ...],
                         no_verify_tls: bool) -> tuple[Backend, str | None]:
    """The backend, and where a run's record is looked for when the cluster and the ledger do not know it."""
    from ..backends import get_backend
    from ..runs.places import storage_root

    settings = settings_from(backend, address, headers, no_verify_tls)
    return get_backend(settings), storage_root(settings)


def backend_for_run(run_id: str, backend: str | None, address: str | None, headers: tuple[str, ...],
                    no_verify_tls: bool) -> tuple[Backend, str | None]:
    """backend_with_storage for a command about one run (status, logs, wait, stop): unless --backend, --address or
    --context chooses, the backend and address that ran it, as the ledger remembers them (a user of several
    backends names none for a known run)."""
    click_ctx = click.get_current_context(silent=True)
    if not (backend or address or (click_ctx is not None and click_ctx.meta.get(CONTEXT_KEY))):
        from ..runs.memory import where_it_ran

        ran = where_it_ran(run_id)
        if ran is not None:
            backend, address = ran
    return backend_with_storage(backend, address, headers, no_verify_tls)


def parse_timeout(timeout: str | None) -> float | None:
    from ..jobspec.overrides import parse_duration

    return parse_duration(timeout) if timeout is not None else None
