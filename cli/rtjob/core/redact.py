"""Keep secrets out of everything rtjob prints: rendered requests, JSON, logs, errors."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

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


def secret_arg_values(command: str) -> list[str]:
    """Values of secret flags inside a command line (``--api-key VALUE``, ``--token=VALUE``), also inside a
    wrapped ``bash -c '...'`` payload, and flag values with a secret's shape whatever the flag's name."""
    import shlex

    def tokens(text: str, depth: int = 0) -> list[str]:
        try:
            parts = shlex.split(text)
        except ValueError:
            parts = text.split()
        out: list[str] = []
        for part in parts:
            if depth < 2 and " " in part:
                out += tokens(part, depth + 1)
            else:
                out.append(part)
        return out

    found: list[str] = []
    words = tokens(command)
    for index, word in enumerate(words):
        if not word.startswith("--"):
            continue
        name, eq, value = word[2:].partition("=")
        if not eq:
            if index + 1 >= len(words) or words[index + 1].startswith("--"):
                continue
            value = words[index + 1]
        if len(value) >= 4 and is_secret(name, value):
            found.append(value)
    return found


def redact_data(value: Any, secrets: Iterable[str]) -> Any:
    """``redact`` through JSON-shaped data (strings, list items, keys and values), before it is serialised:
    JSON escaping would otherwise hide a secret from a search of the text."""
    secrets = list(secrets)
    if isinstance(value, str):
        return redact(value, secrets)
    if isinstance(value, list):
        return [redact_data(item, secrets) for item in value]
    if isinstance(value, dict):
        return {redact_data(k, secrets): redact_data(v, secrets) for k, v in value.items()}
    return value
