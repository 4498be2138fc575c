"""Runs side by side: what was asked of each (args, tags, env, shape, the request), without what differs in every run
anyway (its ids, folders, addresses)."""

from __future__ import annotations

import re
from typing import Any

from ..core.index_entry import recorded_part
from ..core.record import RunRecord

MAX_COMPARE = 5

# Keys whose values name the run itself (ids, folders, addresses): shown, never counted as a difference.
_OWN_KEY = re.compile(r"(^|[._])(id|run_id|submission_id|uri|url|path|dir|working_dir|storage|address|"
                      r"endpoint|[A-Z0-9_]*(RUN_ID|_URI|_DIR|_PATH|_ID|JOB_NAME))$", re.IGNORECASE)


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict) and value:
        out: dict[str, Any] = {}
        for key, item in value.items():
            out.update(_flatten(item, f"{prefix}.{key}" if prefix else str(key)))
        return out
    return {prefix: value}


def _entrypoint_args(entrypoint: Any) -> dict[str, str]:
    """``--name value`` / ``--name=value`` / a bare ``--flag`` of an entrypoint command, as args."""
    import shlex

    try:
        words = shlex.split(str(entrypoint)) if entrypoint else []
    except ValueError:
        return {}
    out: dict[str, str] = {}
    for n, word in enumerate(words):
        if word.startswith("--") and len(word) > 2:
            name, eq, value = word[2:].partition("=")
            if not eq:
                following = words[n + 1] if n + 1 < len(words) else None
                value = following if following is not None and not following.startswith("--") else "true"
            out[name] = value
    return out


def compare_rows(records: list[RunRecord]) -> list[dict[str, Any]]:
    """The runs side by side: {section, key, values, differs, own}: args (its entrypoint's flags, and the job's
    args over them), tags, env (names and values), shape, then the rest of the request flattened. ``own``: a value
    that names the run itself (ids, paths): never counted as a difference."""
    def args_of(record: RunRecord) -> dict[str, Any]:
        flags = _entrypoint_args((record.request or {}).get("entrypoint"))
        return {**flags, **recorded_part(record, "args")}

    def env_of(record: RunRecord) -> dict[str, Any]:
        env = ((record.request or {}).get("runtime_env") or {}).get("env_vars") or {}
        return env if isinstance(env, dict) else {}

    def rest_of(record: RunRecord) -> dict[str, Any]:
        flat = _flatten(record.request or {})
        return {k: v for k, v in flat.items() if not k.startswith("runtime_env.env_vars.")}

    def tags_of(record: RunRecord) -> dict[str, Any]:
        return {k: str(v) for k, v in recorded_part(record, "tags").items()}  # as its index entry lists them

    sections = [("args", [args_of(r) for r in records]),
                ("tags", [tags_of(r) for r in records]),
                ("env", [env_of(r) for r in records]),
                ("shape", [dict(r.shape or {}) for r in records]),
                ("request", [rest_of(r) for r in records])]
    rows = []
    for section, dicts in sections:
        flats = [_flatten(d) if d else {} for d in dicts]
        keys: list[str] = []
        for flat in flats:
            keys.extend(key for key in flat if key not in keys and key)
        for key in keys:
            values = [flat.get(key) for flat in flats]
            own = bool(_OWN_KEY.search(key))
            differs = any(v != values[0] for v in values[1:])
            rows.append({"section": section, "key": key, "values": values, "differs": differs and not own,
                         "own": own})
    return rows
