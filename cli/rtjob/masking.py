"""Keep secrets out of everything rtjob prints: rendered requests, JSON, logs, errors."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

MASK = "****"
_SECRET_NAME = re.compile(
    r"(SECRET|TOKEN|PASSWORD|PASSWD|PASSPHRASE|CREDENTIAL|PRIVATE|API[-_]?KEY|ACCESS[-_]?KEY|AUTH|SESSION|COOKIE|[-_]KEY$|^KEY$)",
    re.I,
)
# Values that are secrets whatever their name: AWS access key ids, bearer tokens, GitHub/Slack/Anyscale tokens.
_SECRET_VALUE = re.compile(
    r"^(AKIA|ASIA)[0-9A-Z]{16}$|^Bearer\s|^gh[pousr]_[A-Za-z0-9]{20,}|^xox[abpr]-|^aph0_|^sk-[A-Za-z0-9]{20,}"
)


def is_secret_name(name: str) -> bool:
    return bool(_SECRET_NAME.search(name))


def is_secret(name: str, value: str) -> bool:
    return is_secret_name(name) or bool(_SECRET_VALUE.search(value or ""))


def mask_mapping(values: Mapping[str, str]) -> dict[str, str]:
    return {k: (MASK if v and is_secret(k, str(v)) else v) for k, v in values.items()}


def secret_values(values: Mapping[str, str]) -> list[str]:
    """The values of ``values`` that must never be shown (long enough to redact safely)."""
    return [str(v) for k, v in values.items() if v and len(str(v)) >= 4 and is_secret(k, str(v))]


_URL_PASSWORD = re.compile(r"(://[^/@\s:]*:)[^/@\s]*@")


def mask_url(text: str) -> str:
    """``http://user:pass@host`` → ``http://user:****@host`` (a password in an address is shown nowhere)."""
    return _URL_PASSWORD.sub(rf"\g<1>{MASK}@", text)


def redact(text: str, secrets: Iterable[str]) -> str:
    for secret in sorted(set(secrets), key=len, reverse=True):
        if secret:
            text = text.replace(secret, MASK)
    return text
