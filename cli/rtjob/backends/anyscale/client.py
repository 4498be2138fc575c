"""The Anyscale SDK, reached through one client: authentication, the SDK's own timer, and every SDK failure
turned into one line with rtjob's exit code. Injecting a client is private API: `anyscale` is pinned."""

from __future__ import annotations

import contextlib
import datetime as dt
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from ...core import clock
from ...core.errors import BadInput, RtjobError, Unreachable
from ...core.redact import redact

if TYPE_CHECKING:
    from ...jobspec.settings import Settings

ANYSCALE_VERSION = "0.26.112"  # the SDK this adapter was written and tested against (pinned in pyproject)
DEFAULT_HOST = "https://console.anyscale.com"
CREDENTIALS_ENV = "ANYSCALE_CLI_TOKEN"
CREDENTIALS_FILE = "~/.anyscale/credentials.json"

def host() -> str:
    return (os.environ.get("ANYSCALE_HOST") or DEFAULT_HOST).rstrip("/")


def credentials_source() -> str | None:
    """Where the SDK will find a token (the SDK's own order), or None."""
    if os.environ.get(CREDENTIALS_ENV):
        return f"env {CREDENTIALS_ENV}"
    if Path(CREDENTIALS_FILE).expanduser().is_file():
        return CREDENTIALS_FILE
    return None


def _token() -> list[str]:
    token = os.environ.get(CREDENTIALS_ENV) or ""
    return [token] if len(token) >= 4 else []


# ---------------------------------------------------------------------------------------------
# errors: every SDK failure becomes one line with rtjob's exit code


def _chain(exc: BaseException) -> list[BaseException]:
    out: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in out and len(out) < 6:
        out.append(current)
        current = current.__cause__ or current.__context__
    return out


def _is_connection_error(exc: BaseException) -> bool:
    import requests
    import urllib3

    return isinstance(exc, (ConnectionError, requests.exceptions.ConnectionError, urllib3.exceptions.HTTPError))


def _first_line(exc: BaseException) -> str:
    fmt = getattr(exc, "format_message", None)  # click.ClickException, which the SDK's auth raises
    text = str(fmt() if callable(fmt) else exc).strip()
    return (text.splitlines() or [type(exc).__name__])[0][:300]


def translate(exc: BaseException, what: str, secrets: Iterable[str] = ()) -> RtjobError:
    """An SDK / API exception as rtjob's error: auth and network → exit 3; bad names, missing runs,
    configs the SDK's models reject → exit 2; anything else → exit 1. Secrets are redacted."""
    hide = [*_token(), *secrets]
    chain = _chain(exc)
    text = redact(_first_line(exc), hide)
    status = next((s for s in (getattr(e, "status", None) for e in chain) if isinstance(s, int)), None)
    if status in (401, 403) or any(type(e).__name__ == "ClickException" for e in chain):
        cause = redact(_first_line(next(e for e in chain if getattr(e, "status", None) in (401, 403)
                                        or type(e).__name__ == "ClickException")), hide)
        return Unreachable(f"Anyscale authentication failed while {what}: {cause}")
    if any(_is_connection_error(e) for e in chain):
        return Unreachable(f"cannot reach Anyscale at {host()} while {what}: {text}")
    if type(exc).__name__ == "CloudNotFoundError" or status == 404:
        return BadInput(f"{what}: {text}")
    if isinstance(exc, (ValueError, TypeError)):
        return BadInput(f"{what}: {text}")
    if isinstance(exc, RuntimeError) and "not found" in text.lower():
        return BadInput(text)
    return Unreachable(f"Anyscale: {what} failed: {text}")


@contextlib.contextmanager
def anyscale_errors(what: str, secrets: Iterable[str] = ()) -> Iterator[None]:
    try:
        yield
    except RtjobError:
        raise
    except Exception as exc:  # noqa: BLE001 - every SDK failure becomes one line with an exit code
        raise translate(exc, what, secrets) from None


def _not_found(exc: BaseException) -> bool:
    """The SDK's 'Job with ID/name ... was not found' (it also wraps API errors that way: check the cause)."""
    if not isinstance(exc, RuntimeError) or "not found" not in str(exc):
        return False
    cause = exc.__cause__
    return cause is None or getattr(cause, "status", None) == 404


def default_timer() -> Any:
    """The SDK's real timer (its waits sleep between polls); tests use the SDK's FakeTimer."""
    from anyscale._private.sdk.timer import RealTimer

    return RealTimer()


def default_client() -> Any:
    """The SDK's real client, authenticated the SDK's usual way; no credentials → exit 3, one line."""
    if credentials_source() is None:
        raise Unreachable(
            f"no Anyscale credentials: set {CREDENTIALS_ENV} (in CI, from a secret) or run `anyscale login` "
            f"(it writes {CREDENTIALS_FILE})"
        )
    try:
        from anyscale._private.anyscale_client import AnyscaleClient
    except ImportError:
        raise BadInput(f"the Anyscale backend needs the anyscale SDK: pip install 'rtjob[anyscale]' "
                         f"(anyscale=={ANYSCALE_VERSION})") from None
    with anyscale_errors("authenticating"):
        return AnyscaleClient()


def state_name(state: Any) -> str:
    """An SDK state (an enum, a string or None) as its upper-case name."""
    return str(getattr(state, "value", state) or "UNKNOWN").upper()


class SdkAccess(Protocol):
    """What the Anyscale capabilities use of their backend: its settings, its SDK objects, its error wording
    (declared here, so that schedules.py and compute_configs.py never import backend.py, which builds them)."""

    settings: Settings
    supervisor_backend: ClassVar[str | None]  # Backend.supervisor_backend: whose loop hosts a pipeline

    def _sdk(self, kind: str) -> Any: ...

    def _errors(self, what: str) -> contextlib.AbstractContextManager[None]: ...


def iso_time(value: Any) -> str | None:
    """A time the SDK gives (a datetime, naive ones UTC, or ISO text) as ISO 8601 UTC to the second; None: none."""
    if not value:
        return None
    if isinstance(value, str):
        value = clock.parse(value)
    if not isinstance(value, dt.datetime):
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.timezone.utc)
    return value.astimezone(dt.timezone.utc).isoformat(timespec="seconds")
