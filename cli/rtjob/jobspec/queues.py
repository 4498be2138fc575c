"""A team's queue as the spec says it (issue 44): a run's `queue:` and `priority:` (a job, a context, the project
config, --queue/--priority) and a queue's settings, `[queues.NAME]` in the project config or a context.

Priority is an integer, higher first, default 0, between PRIORITY_MIN and PRIORITY_MAX (so that it maps one to one
onto Anyscale's 0-is-highest order: backends/anyscale/queue.py). A queue's settings:

- ``storage``: where the queue's state lives, one place for every run in it (default: the project's storage);
- ``policy``: ``best-effort`` (default: a later run that fits may start while an earlier one waits, until a run
  skipped ``max_skips`` times, default 3, blocks skip-ahead) or ``strict`` (FIFO within a priority);
- ``max_running`` and ``max_running_per_user``: caps on admitted runs (default none: capacity decides);
- ``anyscale_queue``: the Anyscale job queue the runs go to on Anyscale (default: the queue's name).

Who keeps the queue (its intents, state and keeper) is the keeper's part; this module only reads and checks.
Stdlib only; a TOML file's key lines come from ``toml_lines`` (tomllib keeps none), so errors say file:line.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..core.errors import BadInput

PRIORITY_MIN, PRIORITY_MAX = -1000, 1000
POLICIES = ("best-effort", "strict")
DEFAULT_MAX_SKIPS = 3
# `rtjob queue hold NAME`, `release NAME`, `priority ID N`: these words are never a queue's name.
RESERVED = ("hold", "release", "priority")
QUEUE_KEYS = ("storage", "policy", "max_skips", "max_running", "max_running_per_user", "anyscale_queue")
SETTING_KEYS = ("queue", "priority", "queues")  # the settings this module checks (jobspec/settings.py lists them)
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")

Locator = Callable[[tuple[str, ...]], str]  # a key path inside a settings table → "file:line" (or the file)


def queue_name(name: Any) -> str:
    """``name`` if it can name a queue, else a ValueError of one line (its caller adds where: file:line)."""
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError(f"{str(name)[:40]!r} is not a queue name; use letters, digits, '.', '_' or '-' (at most 63), "
                         "e.g. team")
    if name in RESERVED:
        raise ValueError(f"{name!r} is a word of `rtjob queue` ({', '.join(RESERVED)}), not a queue name")
    return name


def check_priority(value: Any) -> int:
    """``value`` if it is a priority, else a ValueError of one line."""
    if isinstance(value, bool) or not isinstance(value, int) or not PRIORITY_MIN <= value <= PRIORITY_MAX:
        raise ValueError(f"a priority is an integer from {PRIORITY_MIN} to {PRIORITY_MAX} (higher first, default 0)")
    return value


@dataclass(frozen=True)
class QueueSettings:
    """One queue's settings, checked (defaults filled in)."""

    name: str
    storage: str | None = None
    policy: str = "best-effort"
    max_skips: int = DEFAULT_MAX_SKIPS
    max_running: int | None = None
    max_running_per_user: int | None = None
    anyscale_queue: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "storage": self.storage, "policy": self.policy, "max_skips": self.max_skips,
                "max_running": self.max_running, "max_running_per_user": self.max_running_per_user,
                "anyscale_queue": self.anyscale_queue}

    @classmethod
    def from_table(cls, name: str, table: Any, at: Locator) -> QueueSettings:
        """``[queues.NAME]`` as read from TOML; unknown keys and bad values are one line at their file:line."""
        _bad(lambda: queue_name(name), f"{at(('queues', name))}: [queues.{name}]")
        if not isinstance(table, dict):
            raise BadInput(f"{at(('queues', name))}: [queues.{name}] must be a table of {', '.join(QUEUE_KEYS)}")
        for key, value in table.items():
            where = at(("queues", name, key))
            if key not in QUEUE_KEYS:
                close = difflib.get_close_matches(key, QUEUE_KEYS, n=1)
                hint = f"did you mean {close[0]!r}?" if close else f"valid keys: {', '.join(QUEUE_KEYS)}"
                raise BadInput(f"{where}: [queues.{name}]: unknown key {key!r}; {hint}")
            if key == "policy" and value not in POLICIES:
                raise BadInput(f"{where}: [queues.{name}] policy: expected one of {', '.join(POLICIES)}")
            if key in ("storage", "anyscale_queue") and (not isinstance(value, str) or not value.strip()):
                raise BadInput(f"{where}: [queues.{name}] {key} must be a non-empty string")
            low = 0 if key == "max_skips" else 1
            if key.startswith("max_") and (isinstance(value, bool) or not isinstance(value, int) or value < low):
                raise BadInput(f"{where}: [queues.{name}] {key} must be an integer of at least {low}")
        return cls(name=name, **table)


def _bad(check: Callable[[], Any], where: str) -> Any:
    try:
        return check()
    except ValueError as exc:
        raise BadInput(f"{where}: {exc}") from None


def check_setting(key: str, value: Any, at: Locator) -> Any:
    """A settings table's `queue`, `priority` or `queues` (the project config's, a context's), or one line."""
    if key == "queue":
        return _bad(lambda: queue_name(value), f"{at(('queue',))}: queue")
    if key == "priority":
        return _bad(lambda: check_priority(value), f"{at(('priority',))}: priority")
    if not isinstance(value, dict):
        raise BadInput(f"{at(('queues',))}: queues must be tables, e.g. [queues.team] policy = \"strict\"")
    for name, table in value.items():
        QueueSettings.from_table(name, table, at)
    return value


# --- where a TOML key is (tomllib keeps no lines) ---------------------------------------------------------------

_HEADER = re.compile(r"^\s*\[\s*([^\[\]]+?)\s*\]\s*(?:#.*)?$")
_KEY = re.compile(r"^\s*((?:[A-Za-z0-9_-]+|\"[^\"]*\"|'[^']*')(?:\s*\.\s*(?:[A-Za-z0-9_-]+|\"[^\"]*\"|'[^']*'))*)\s*=")


def _parts(dotted: str) -> tuple[str, ...]:
    return tuple(p.strip().strip("\"'") for p in re.findall(r"\"[^\"]*\"|'[^']*'|[^.]+", dotted))


def toml_lines(text: str) -> dict[tuple[str, ...], int]:
    """The line (1-based) of each table header and key in a TOML text, by its full key path (first one wins)."""
    lines: dict[tuple[str, ...], int] = {}
    table: tuple[str, ...] = ()
    for number, line in enumerate(text.splitlines(), 1):
        header = _HEADER.match(line)
        if header and not line.lstrip().startswith("[["):
            table = _parts(header.group(1))
            lines.setdefault(table, number)
            continue
        key = _KEY.match(line)
        if key:
            lines.setdefault((*table, *_parts(key.group(1))), number)
    return lines


def toml_locator(shown: str, text: str | None, prefix: tuple[str, ...] = ()) -> Locator:
    """Key paths of a settings table at ``prefix`` of a TOML file (``shown``) → "file:line" of the deepest known."""
    lines = toml_lines(text) if text else {}

    def at(loc: tuple[str, ...]) -> str:
        for end in range(len(loc), -1, -1):
            line = lines.get((*prefix, *loc[:end]))
            if line is not None:
                return f"{shown}:{line}"
        return shown

    return at


# --- a run's queue, resolved -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class QueuePlan:
    """The queue a run goes to: its settings, the run's priority, the queue's storage (its own, else the run's
    storage root) and where the name came from (``render --explain``)."""

    settings: QueueSettings
    priority: int
    storage: str | None
    source: str

    @property
    def name(self) -> str:
        return self.settings.name

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "priority": self.priority, "storage": self.storage, "policy": self.settings.policy,
                "source": self.source}


def defined(queues: Any) -> dict[str, Any]:
    return queues if isinstance(queues, dict) else {}


def resolve_queue(picked: list[tuple[Any, str]], priorities: list[tuple[Any, str]], queues: Any,
                  storage_root: str | None) -> QueuePlan | None:
    """The run's queue from the first named of ``picked`` ((name, where) by precedence: the flag, the job, the
    settings), its priority likewise (default 0); a queue no `[queues.NAME]` defines is refused where it was named
    (a typo would be a queue of its own)."""
    name, where = next(((n, w) for n, w in picked if n is not None), (None, ""))
    if name is None:
        return None
    _bad(lambda: queue_name(name), _keyed(where, "queue"))
    tables = defined(queues)
    if name not in tables:
        close = difflib.get_close_matches(name, list(tables), n=1)
        known = f"did you mean {close[0]!r}?" if close else (
            f"queues defined: {', '.join(sorted(tables))}" if tables else "none is defined")
        raise BadInput(f"{_keyed(where, 'queue')}: no queue {name!r} ({known}); define it with [queues.{name}] in the project config "
                       "(rtjob.toml, or [tool.rtjob.queues.NAME] in pyproject.toml) or a context")
    settings = QueueSettings(name=name, **tables[name])  # checked when the settings were read
    priority, at = next(((p, w) for p, w in priorities if p is not None), (0, "default"))
    _bad(lambda: check_priority(priority), _keyed(at, "priority"))
    return QueuePlan(settings, priority, settings.storage or storage_root, where)


def _keyed(where: str, key: str) -> str:
    return where if where.startswith("--") else f"{where}: {key}"


def plan_for(spec: Any, where: Callable[[tuple[str, ...]], str], settings: Any,
             storage_root: str | None) -> QueuePlan | None:
    """A resolved job's queue: --queue/--priority over the job's `queue:`/`priority:` (``where``: their file:line)
    over the settings' (a context, the project config)."""
    def pick(key: str, job_value: Any) -> list[tuple[Any, str]]:
        value, source = settings.get(key), settings.source(key)
        flag = source.startswith("flag")
        setting, job = (value, f"--{key}" if flag else source), (job_value, where((key,)))
        return [setting, job] if flag else [job, setting]

    return resolve_queue(pick("queue", spec.queue), pick("priority", spec.priority), settings.get("queues"),
                         storage_root)
