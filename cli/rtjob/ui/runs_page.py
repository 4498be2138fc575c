"""The runs page as plain data: one page of runs (this machine's ledger, or a team's storage through its index) that
the one run filter keeps (storage/run_filter.py), sorted and paged. Never writes to a run's storage (the index
listing never compacts; only this machine's ledger learns the team runs it lists, as `rtjob runs --storage`
does). Unredacted: the routes pass it through the redaction boundary (safety.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..core.errors import BadInput
from ..core.index_entry import entry_of, seen_row
from ..core.record import RunRecord
from ..storage.run_filter import RunFilter
from .table import table_row

PAGE_SIZE = 50
SORTS = ("start_time", "job", "status", "user", "backend", "cost_usd", "id")


@dataclass
class RunsQuery:
    """The runs page's query string: which runs (the one run filter: job, status, user, backend, since, q), their
    sort and page (bad values: BadInput)."""

    filter: RunFilter = field(default_factory=RunFilter)
    sort: str = "start_time"
    desc: bool = True
    page: int = 1

    @classmethod
    def parse(cls, params: dict[str, str]) -> RunsQuery:
        wanted = RunFilter.from_params(params)
        sort = (params.get("sort") or "").strip() or "start_time"
        if sort not in SORTS:
            raise BadInput(f"sort {sort!r}: expected one of {', '.join(SORTS)}")
        try:
            page = int((params.get("page") or "").strip() or "1")
        except ValueError:
            raise BadInput("page: expected a whole number") from None
        return cls(wanted, sort=sort, desc=(params.get("order") or "desc").strip() != "asc", page=max(1, page))


@dataclass
class RunsPage:
    rows: list[dict[str, Any]]
    total: int  # runs that match, over every page
    page: int
    pages: int
    source: str  # "ledger" or the storage root listed
    problems: list[str] = field(default_factory=list)


def _sort_key(name: str) -> Any:
    def key(row: dict[str, Any]) -> tuple[int, Any]:
        value = row.get(name)
        if name == "start_time":
            value = row.get("start_time") or row.get("submitted_at")
        return (0, "") if value is None else (1, value)
    return key


def runs_page(query: RunsQuery, storage: str | None, endpoint: str | None) -> RunsPage:
    """One page of runs, newest first unless sorted otherwise."""
    problems: list[str] = []
    wanted = query.filter
    if not storage and not wanted.needs_rows and query.sort == "start_time" and query.desc:
        return _ledger_page(query, problems)  # the common case, on 10,000 entries: one page read, the rest counted
    if storage:
        rows = _storage_rows(wanted, storage, endpoint, problems)
        source = storage
    else:
        rows = _ledger_rows(wanted, problems)
        source = "ledger"
    if query.sort != "start_time" or not query.desc:
        rows.sort(key=_sort_key(query.sort), reverse=query.desc)
    total = len(rows)
    pages = max(1, -(-total // PAGE_SIZE))
    page = min(query.page, pages)
    shown = rows[(page - 1) * PAGE_SIZE: page * PAGE_SIZE]
    if not storage:
        shown = _with_records(shown)
    return RunsPage(_seen(shown), total, page, pages, source, problems)


def _seen(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The shown rows as their verdicts say them, a queued run with its place (its queue read once per queue)."""
    from ..runs.queued import places_of

    places = places_of(rows) if any(row.get("status") == "QUEUED" for row in rows) else {}
    return [table_row(seen_row(row, place=places.get(str(row.get("id"))))) for row in rows]


def _with_records(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Ledger summaries of one page as table rows from their records (user, tags, args, final metrics)."""
    from ..runs.memory import ledger

    book = ledger()
    out = []
    for row in rows:
        record = None if "user" in row else book.get(str(row.get("id")))
        out.append(entry_of(record) if record is not None else row)
    return out


def _ledger_page(query: RunsQuery, problems: list[str]) -> RunsPage:
    """Newest first from the ledger: the runs up to the asked page read (their records: the user, args, tags), the
    rest counted."""
    from ..runs.memory import ledger

    book = ledger()
    filters = query.filter.ledger_query()
    total = book.matching(**filters)
    pages = max(1, -(-total // PAGE_SIZE))
    page = min(query.page, pages)
    rows = [entry_of(r) for r in book.query(**filters, limit=page * PAGE_SIZE)[(page - 1) * PAGE_SIZE:]]
    problems.extend(book.warnings)
    book.warnings.clear()
    return RunsPage(_seen(rows), total, page, pages, "ledger", problems)


def _ledger_rows(wanted: RunFilter, problems: list[str]) -> list[dict[str, Any]]:
    """This machine's runs from the ledger that ``wanted`` keeps, newest first: their summaries (a search matches
    id, job, message), or with a user filter their records (the summaries do not name the user, tags or args)."""
    from ..runs.memory import ledger

    book = ledger()
    filters = {**wanted.ledger_query(), "limit": None}
    if wanted.user:
        rows = [row for row in map(entry_of, book.query(**filters)) if wanted.keeps(row)]
    else:  # the summaries (a search over 10,000 runs reads no record); the shown page's records are read after
        rows = [row for row in book.summaries(**filters) if wanted.keeps(row)]
    problems.extend(book.warnings)
    book.warnings.clear()
    return rows


def _storage_rows(wanted: RunFilter, storage: str, endpoint: str | None,
                  problems: list[str]) -> list[dict[str, Any]]:
    from ..runs.history.listing import storage_rows

    found, more = storage_rows(storage, endpoint, wanted)
    problems.extend(more)
    return [entry_of(row) if isinstance(row, RunRecord) else dict(row) for row in found]
