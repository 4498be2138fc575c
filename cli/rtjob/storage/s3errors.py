"""How a failure of storage reads: one line, never a credential in it. A store that cannot be reached or read is
exit 3 (``s3_error``); a file that failed is one line of the pull's report (``describe_error``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..core import errors
from ..core.errors import RtjobError, Unreachable

if TYPE_CHECKING:
    from .stores import Store

_DENIED = {"AccessDenied", "AllAccessDisabled", "403", "Forbidden"}
_AUTH = {"InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken", "InvalidToken", "TokenRefreshRequired",
         "InvalidClientTokenId", "AuthorizationHeaderMalformed"}


def s3_error(exc: BaseException, store: Store) -> RtjobError:
    """One line, exit 3 for storage that cannot be reached or read; never a credential in it."""
    import botocore.exceptions as bex

    where = store.describe()
    if isinstance(exc, RtjobError):
        return exc
    if isinstance(exc, bex.NoCredentialsError):
        return Unreachable(f"{where}: no AWS credentials found (set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, "
                           "AWS_PROFILE, or use an instance role)")
    if isinstance(exc, bex.ClientError):
        error = exc.response.get("Error", {}) or {}
        code = str(error.get("Code", ""))
        message = one_line(str(error.get("Message") or code))
        if code == "NoSuchBucket":
            return Unreachable(f"bucket {store.location.bucket!r} does not exist"
                               + (f" at {store.endpoint}" if store.endpoint else ""))
        if code in _DENIED:
            return Unreachable(f"access denied to {where}: {message}")
        if code in _AUTH:
            return Unreachable(f"authentication failed for {where} ({code}): {message}")
        return Unreachable(f"{where}: {code}: {message}")
    if isinstance(exc, (bex.EndpointConnectionError, bex.ConnectTimeoutError, bex.ConnectionClosedError)):
        return Unreachable(f"cannot reach the S3 endpoint {store.endpoint or 'of AWS'} ({where})")
    if isinstance(exc, bex.BotoCoreError):
        return Unreachable(f"{where}: {one_line(str(exc))}")
    if isinstance(exc, OSError):
        return Unreachable(f"{where}: {one_line(str(exc))}")
    return Unreachable(f"{where}: {errors.one_line(exc)}")


def describe_error(exc: BaseException) -> tuple[str, str]:
    """(code, short credential-free description) of a per-file transfer error."""
    from .engines import TransferError

    if isinstance(exc, TransferError):
        return exc.code, f"{exc.code}: {one_line(exc.message)}" if exc.message else exc.code
    try:
        import botocore.exceptions as bex
    except ImportError:  # local storage: an OSError
        return type(exc).__name__, errors.one_line(exc)
    if isinstance(exc, bex.ClientError):
        error = exc.response.get("Error", {}) or {}
        code = str(error.get("Code", "error"))
        return code, f"{code}: {one_line(str(error.get('Message', '')))}"
    return type(exc).__name__, errors.one_line(exc)


def is_denial(code: str) -> bool:
    """An error code that means these credentials may not read this storage."""
    return code in _DENIED or code in _AUTH


def one_line(text: str) -> str:
    """The first non-blank line of a message, at most 300 characters."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return (lines[0] if lines else "")[:300]
