"""The app's safety, in one place: every request's Host header is checked (DNS rebinding); off loopback a token is
required (header X-Rtjob-Token or the cookie /login sets; never in a URL); every value a template prints, every
JSON answer and every log line passes the redaction boundary (core/redact.py) and has bidi controls made visible;
every answer carries a strict Content-Security-Policy. (Templates autoescape; a sample's name cannot leave the run's
samples folder: run_page.sample_stream.)"""

from __future__ import annotations

import hmac
import re
from collections.abc import MutableMapping
from dataclasses import dataclass
from typing import Any

from markupsafe import Markup
from starlette.responses import PlainTextResponse, RedirectResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from ..core.redact import redact, redact_data

TOKEN_HEADER = "x-rtjob-token"
TOKEN_COOKIE = "rtjob_ui_token"
LOOPBACK = ("127.0.0.1", "localhost", "::1")
WILDCARD = ("0.0.0.0", "::")  # every interface: any Host name reaches it, and the token guards every request
# Bidi controls and isolates (they reorder what a reader sees: "Trojan Source"), shown as their code points.
BIDI = re.compile("[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
CSP = ("default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data: blob:; "
       "media-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")


def _visible(text: str) -> str:
    """Bidi controls made visible (<U+202E>)."""
    return BIDI.sub(lambda m: f"<U+{ord(m.group()):04X}>", text)


def clean(text: str) -> str:
    """Text as shown: redacted, with bidi controls made visible (<U+202E>)."""
    return _visible(redact(text))


def clean_data(value: Any) -> Any:
    value = redact_data(value, ())
    if isinstance(value, str):
        return _visible(value)
    if isinstance(value, list):
        return [clean_data(item) for item in value]
    if isinstance(value, dict):
        return {clean_data(k): clean_data(v) for k, v in value.items()}
    return value


def finalize(value: Any) -> Any:
    """Every {{ value }} a template prints passes here before it is escaped."""
    if isinstance(value, Markup):  # tojson and the like: already escaped markup, redacted as text
        return Markup(clean(str(value)))
    if isinstance(value, str):
        return clean(value)
    return value


@dataclass
class Config:
    storage: str | None  # the team's storage root listed on the runs page (None: this machine's ledger)
    lookup_root: str | None  # where a run's record is looked for beyond the ledger
    endpoint: str | None
    host: str
    port: int
    token: str | None  # required off loopback


class Guard:
    """Host header check on every request, and the token when one is set (pure ASGI: streaming stays streaming)."""

    def __init__(self, app: ASGIApp, config: Config) -> None:
        self.app = app
        self.config = config

    def _allowed_host(self, value: str) -> bool:
        host, _, port = value.rpartition(":") if not value.endswith("]") else (value, "", "")
        if not host:
            host, port = value, ""
        host = host.strip("[]").lower()
        port = port or "80"  # a browser leaves the default port out
        if port != str(self.config.port) or not host:
            return False
        if self.config.host in WILDCARD:
            return self.config.token is not None
        names = {*LOOPBACK} if self.config.host in LOOPBACK else {self.config.host.lower()}
        return host in names

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        if not self._allowed_host(headers.get("host", "")):
            await PlainTextResponse("bad Host header", status_code=421)(scope, receive, send)
            return
        token = self.config.token
        if token is not None and scope["path"] not in ("/login",) and not scope["path"].startswith("/static/"):
            given = headers.get(TOKEN_HEADER) or _cookie(headers.get("cookie", ""), TOKEN_COOKIE) or ""
            if not hmac.compare_digest(given.encode(), token.encode()):
                if scope["method"] == "GET" and "text/html" in headers.get("accept", ""):
                    await RedirectResponse("/login", status_code=303)(scope, receive, send)
                else:
                    await PlainTextResponse("a token is required (header X-Rtjob-Token)",
                                            status_code=401)(scope, receive, send)
                return

        async def secured(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []),
                                      (b"content-security-policy", CSP.encode()),
                                      (b"x-content-type-options", b"nosniff"),
                                      (b"referrer-policy", b"no-referrer"),
                                      (b"x-frame-options", b"DENY")]
            await send(message)

        await self.app(scope, receive, secured)


def _cookie(header: str, name: str) -> str | None:
    for part in header.split(";"):
        key, _, value = part.strip().partition("=")
        if key == name:
            return value
    return None
