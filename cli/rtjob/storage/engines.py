"""Which engine moves ``rtjob pull``'s bytes from S3, and how a failed transfer reads (shared by the engines).

Engines, in order of preference (each gives way to the next where it cannot serve the endpoint; the order is
applied in one place, ``s3store.S3Store.download``):
- ``obstore`` (obstore_engine.py, ``serves``): Rust's object_store; imports in ~6 ms, and with credentials in the
  environment the whole pull runs without botocore (s3light.py lists the keys);
- ``crt`` (crt.py, ``unusable_reason``): the AWS Common Runtime's S3 client;
- ``botocore`` (botocore_engine.py): botocore + s3transfer, the engine that serves everything (proxies included).
``RTJOB_S3_ENGINE=crt`` or ``=botocore`` starts further down the list.
"""

from __future__ import annotations

import os
import re
from urllib.parse import urlsplit

ENGINE_ENV = "RTJOB_S3_ENGINE"
ENGINES = ("obstore", "crt", "botocore")
AWS_S3 = "https://s3.amazonaws.com"  # the endpoint when none is named (for the proxy check)


class TransferError(Exception):
    """A failed GET, as S3 (or the network) said it: ``code`` is S3's error code or the engine's error name."""

    def __init__(self, code: str, message: str, status: int | None = None) -> None:
        super().__init__(f"{code}: {message}" if message else code)
        self.code = code
        self.message = message
        self.status = status


# What S3 means by a status when the body says nothing (a HEAD-like error, or a server that sends no XML).
STATUS_CODES = {304: "NotModified", 400: "BadRequest", 403: "AccessDenied", 404: "NoSuchKey",
                412: "PreconditionFailed", 416: "InvalidRange", 500: "InternalError", 503: "SlowDown"}


def chosen_engine() -> str:
    """The engine asked for by RTJOB_S3_ENGINE (default: the first); bad values are bad input."""
    from ..core.errors import BadInput

    value = (os.environ.get(ENGINE_ENV) or ENGINES[0]).strip().lower()
    if value not in ENGINES:
        raise BadInput(f"{ENGINE_ENV}={value!r}: not an S3 engine (valid: {', '.join(ENGINES)})")
    return value


def allowed(engine: str) -> bool:
    """Whether ``engine`` may be tried: it is the chosen one or comes after it."""
    return ENGINES.index(engine) >= ENGINES.index(chosen_engine())


def proxy_reason(endpoint_url: str) -> str | None:
    """Why an engine that does not go through HTTP(S)_PROXY must not serve this endpoint (None: no proxy)."""
    import urllib.request

    parts = urlsplit(endpoint_url)
    proxies = urllib.request.getproxies()
    if proxies.get(parts.scheme) and not urllib.request.proxy_bypass(parts.hostname or ""):
        return f"a proxy is set for {parts.scheme}"
    return None


def custom_endpoint(url: str) -> str | None:
    """The endpoint if it is not AWS's own (an S3-compatible server keeps its URL in every region)."""
    return None if url.endswith(".amazonaws.com") or ".amazonaws.com." in url else url or None


_CODE = re.compile(r"<Code>([^<]{1,100})</Code>")
_MESSAGE = re.compile(r"<Message>([^<]{0,500})</Message>")


def s3_error_in(text: str) -> tuple[str, str]:
    """S3's error code and message from an ``<Error>`` XML body (or text that quotes one); ("", "") if none."""
    code, message = _CODE.search(text), _MESSAGE.search(text)
    return (code.group(1).strip() if code else "", message.group(1).strip() if message else "")
