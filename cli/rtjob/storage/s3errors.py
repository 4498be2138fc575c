"""How a failure of storage reads: one line, never a credential in it, typed as transient or permanent
(core/errors.StorageError, exit 3 either way; ``s3_error``, ``transient_answer``, ``transient_text``); a file that
failed is one line of the pull's report (``describe_error``).

Transient (may pass, retried with backoff by storage/retrying.py): a refused or reset connection, a time-out, an
answer cut, HTTP 5xx, 408, 429, SlowDown and its kin. Permanent: no such bucket, access denied, bad or no
credentials, and any other 4xx."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..core import errors
from ..core.errors import RtjobError, StorageError

if TYPE_CHECKING:
    from .stores import Store

_DENIED = {"AccessDenied", "AllAccessDisabled", "403", "Forbidden"}
_AUTH = {"InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken", "InvalidToken", "TokenRefreshRequired",
         "InvalidClientTokenId", "AuthorizationHeaderMalformed"}
_TRANSIENT_CODES = {"SlowDown", "RequestTimeout", "RequestTimeoutException", "InternalError", "ServiceUnavailable",
                    "Throttling", "ThrottlingException", "RequestLimitExceeded", "TooManyRequests", "OperationAborted",
                    "BadGateway", "GatewayTimeout", "500", "502", "503", "504"}
# pyarrow (the AWS C++ SDK) says only text: these words in it mean a fault that may pass.
_TRANSIENT_WORDS = ("connection refused", "connection reset", "timed out", "timeout", "curlcode", "couldn't connect",
                    "could not connect", "network", "broken pipe", "slowdown", "slow down", "service unavailable",
                    "internal error", "bad gateway", "temporarily", "http response code 5", "error code 5")


def transient_answer(status: int, code: str = "") -> bool:
    """Whether S3's answer (HTTP ``status``, its error ``code``) is a fault that may pass."""
    if code in _TRANSIENT_CODES:
        return True
    if code in _DENIED or code in _AUTH or code in ("NoSuchBucket", "InvalidBucketName", "NoSuchKey"):
        return False
    return status >= 500 or status in (408, 429)


def transient_text(text: str) -> bool:
    """Whether a failure known only by its text (pyarrow's) reads as one that may pass."""
    low = text.lower()
    return any(word in low for word in _TRANSIENT_WORDS)


def s3_error(exc: BaseException, store: Store) -> RtjobError:
    """One line, exit 3 for storage that cannot be reached or read, typed transient or permanent; never a
    credential in it."""
    import botocore.exceptions as bex

    where = store.describe()
    if isinstance(exc, RtjobError):
        return exc
    if isinstance(exc, bex.NoCredentialsError):
        return StorageError(f"{where}: no AWS credentials found (set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, "
                            "AWS_PROFILE, or use an instance role)", transient=False)
    if isinstance(exc, bex.ClientError):
        error = exc.response.get("Error", {}) or {}
        code = str(error.get("Code", ""))
        status = int((exc.response.get("ResponseMetadata", {}) or {}).get("HTTPStatusCode") or 0)
        message = first_line_of(str(error.get("Message") or code))
        if code == "NoSuchBucket":
            return no_bucket(store.location.bucket, store.endpoint)
        if code in _DENIED:
            return StorageError(f"access denied to {where}: {message}", transient=False)
        if code in _AUTH:
            return StorageError(f"authentication failed for {where} ({code}): {message}", transient=False)
        return StorageError(f"{where}: {code}: {message}", transient=transient_answer(status, code))
    if isinstance(exc, (bex.EndpointConnectionError, bex.ConnectTimeoutError, bex.ConnectionClosedError,
                        bex.ReadTimeoutError)):
        return StorageError(f"cannot reach the S3 endpoint {store.endpoint or 'of AWS'} ({where})", transient=True)
    if isinstance(exc, (bex.PartialCredentialsError, bex.NoRegionError)):
        return StorageError(f"{where}: {first_line_of(str(exc))}", transient=False)
    if isinstance(exc, (bex.BotoCoreError, OSError)):
        return StorageError(f"{where}: {first_line_of(str(exc))}", transient=True)
    return StorageError(f"{where}: {errors.one_line(exc)}", transient=transient_text(str(exc)))


def no_bucket(bucket: str, endpoint: str | None) -> StorageError:
    """The one line of a bucket that does not exist (permanent)."""
    return StorageError(f"bucket {bucket!r} does not exist" + (f" at {endpoint}" if endpoint else ""),
                        transient=False)


def describe_error(exc: BaseException) -> tuple[str, str]:
    """(code, short credential-free description) of a per-file transfer error."""
    from .engines import TransferError

    if isinstance(exc, TransferError):
        return exc.code, f"{exc.code}: {first_line_of(exc.message)}" if exc.message else exc.code
    try:
        import botocore.exceptions as bex
    except ImportError:  # local storage: an OSError
        return type(exc).__name__, errors.one_line(exc)
    if isinstance(exc, bex.ClientError):
        error = exc.response.get("Error", {}) or {}
        code = str(error.get("Code", "error"))
        return code, f"{code}: {first_line_of(str(error.get('Message', '')))}"
    return type(exc).__name__, errors.one_line(exc)


def is_denial(code: str) -> bool:
    """An error code that means these credentials may not read this storage."""
    return code in _DENIED or code in _AUTH


def first_line_of(text: str) -> str:
    """The first non-blank line of a message, at most 300 characters."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return (lines[0] if lines else "")[:300]
