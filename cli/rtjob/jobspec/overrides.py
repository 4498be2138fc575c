"""Command-line overrides (--set, --env, --nodes ...) and duration parsing."""

from __future__ import annotations

import re
from typing import Any

from ..core.errors import BadInput
from .yamlsrc import AS_WRITTEN, parse_value

# ruamel (inside .yamlsrc) and .schema (pydantic) are imported where they are used: `rtjob status/wait/logs`
# import this module for parse_duration/parse_headers and must not pay for the job schema.

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|sec|m|min|h|hr|d)?\s*$", re.I)
# Characters of a key path (--set, --env) and of an HTTP header name (RFC 9110 token).
_KEY_CHARS = r"A-Za-z0-9_.\-"
_HEADER_CHARS = r"A-Za-z0-9!#$%&'*+.^_`|~\-"
_UNIT_S = {"ms": 0.001, "s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "hr": 3600, "d": 86400, None: 1}
# The longest duration any option takes: `now - 100 years` is still a date and 100 years fits every timeout
# (threading.TIMEOUT_MAX is ~292 years), so no caller meets an overflow.
MAX_DURATION_DAYS = 36500


def _leading(item: str, chars: str) -> str:
    """The name-like start of a malformed item: an error must not echo a value (it may be a secret)."""
    match = re.match(f"[{chars}]*", item.strip())
    return match.group() if match and match.group() else item.strip()[:1]


def parse_duration(text: str, flag: str = "--timeout") -> float:
    """'90s', '2h', '15m', '1.5h' or plain seconds → seconds, more than zero and at most MAX_DURATION_DAYS (every
    duration option and the UI's `since` come through here)."""
    match = _DURATION.match(text or "")
    shown = text if len(text or "") <= 40 else text[:37] + "..."
    if not match:
        raise BadInput(f"{flag} {shown!r}: not a duration; use e.g. 90s, 15m, 2h or a number of seconds")
    value = float(match.group(1)) * _UNIT_S[(match.group(2) or "").lower() or None]
    if value <= 0:
        raise BadInput(f"{flag} {shown!r}: must be greater than zero")
    if value > MAX_DURATION_DAYS * 86400:  # also a number too long for a float (inf)
        raise BadInput(f"{flag} {shown!r}: too long; at most {MAX_DURATION_DAYS}d (100 years)")
    return value


def _is_args(parts: list[str]) -> bool:
    """A key path whose value ends up as text (args, env_vars, tags: see yamlsrc.AS_WRITTEN)."""
    return any(tuple(parts[: len(prefix)]) == prefix for prefix in AS_WRITTEN)


def parse_set(items: tuple[str, ...] | list[str]) -> list[tuple[list[str], Any, str]]:
    """--set key.path=value → (path, YAML 1.2-typed value, original text)."""
    out = []
    for item in items:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise BadInput(f"--set {_leading(item, _KEY_CHARS)!r}: expected KEY.PATH=VALUE, e.g. --set args.epochs=5")
        parts = key.split(".")
        if any(not p for p in parts):
            raise BadInput(f"--set {key!r}=...: empty segment in the key path; expected KEY.PATH=VALUE, e.g. args.epochs=5")
        # YAML 1.2 (`off` stays a string); a value for the script's command line keeps its text (`1.10`).
        try:
            value = parse_value(raw, _is_args(parts)) if raw.strip() else ""
        except BadInput:
            value = raw
        out.append((parts, value, item))
    return out


def apply_set(data: dict[str, Any], parts: list[str], value: Any, item: str) -> None:
    node: Any = data
    for depth, part in enumerate(parts[:-1]):
        nxt = node.get(part) if isinstance(node, dict) else None
        if nxt is None:
            nxt = {}
            node[part] = nxt
        elif not isinstance(nxt, dict):
            where = ".".join(parts[: depth + 1])
            raise BadInput(f"--set {'.'.join(parts)}=...: {where!r} is not a mapping, it cannot have sub-keys")
        node = nxt
    node[parts[-1]] = value


def parse_env(items: tuple[str, ...] | list[str]) -> dict[str, str]:
    from .schema import ENV_NAME_RE

    env: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise BadInput(f"--env {_leading(item, _KEY_CHARS)!r}: expected NAME=VALUE, e.g. --env WANDB_MODE=offline")
        if not ENV_NAME_RE.match(key):
            raise BadInput(f"--env {key!r}: not a valid environment variable name (letters, digits, _)")
        env[key] = value
    return env


def parse_headers(items: tuple[str, ...] | list[str], source: str = "--header") -> dict[str, str]:
    """'Name: value' or 'Name=value' items, or a JSON object (RAY_JOB_HEADERS)."""
    headers: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition(":")
        if not sep:
            name, sep, value = item.partition("=")
        if not sep or not name.strip() or not re.match(r"^[A-Za-z0-9!#$%&'*+.^_`|~-]+$", name.strip()):
            raise BadInput(f"{source} {_leading(item, _HEADER_CHARS)!r}: expected 'Name: value', e.g. --header 'X-Team: ml'")
        if any(ord(c) < 32 or ord(c) == 127 for c in value.strip()):  # a newline would split the HTTP request
            raise BadInput(f"{source} {name.strip()!r}: the value holds a control character (a newline?); "
                           "header values are one line of printable text")
        headers[name.strip()] = value.strip()
    return headers


def overrides_applied(data: dict[str, Any], spec: Any, overrides: Any,
                      local_profile: bool) -> list[tuple[list[str], str]]:
    """The job file's ``data`` with the flags (jobspec/resolve.Overrides) and, on the embedded cluster, the job's
    `local:` profile applied in place, in this order: `--set local.*` (so it changes the profile it sets), the
    profile's args and env_vars over the job's (``spec``: the file as validated), the other `--set`s, --env,
    --nodes, --name. Returns where each changed key came from (a --set's key only: its value may be a secret)."""
    sets = parse_set(overrides.sets)
    profiled = [s for s in sets if s[0][:1] == ["local"]]
    for parts, value, item in profiled:
        apply_set(data, parts, value, item)
    if local_profile:
        profile = data.get("local") or {}
        data["args"] = {**spec.args, **(profile.get("args") or {})}
        data["env_vars"] = {**spec.env_vars, **(profile.get("env_vars") or {})}
    for parts, value, item in [s for s in sets if s not in profiled]:
        apply_set(data, parts, value, item)
    if overrides.env:
        data["env_vars"] = {**data.get("env_vars", {}), **parse_env(overrides.env)}
    if overrides.nodes is not None:
        data["nodes"] = overrides.nodes
    if overrides.name:
        data["name"] = overrides.name
    origins = [(parts, f"--set {'.'.join(parts)}=...") for parts, _, _ in sets]
    if overrides.env:
        origins.append((["env_vars"], "--env"))
    if overrides.nodes is not None:
        origins.append((["nodes"], f"--nodes {overrides.nodes}"))
    if overrides.name:
        origins.append((["name"], f"--name {overrides.name}"))
    return origins
