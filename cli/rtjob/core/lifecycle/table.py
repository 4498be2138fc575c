"""The states × writers table, as docs/ARCHITECTURE.md shows it: generated from the kernel's ``TABLE`` (each
transition's row: the state it leads to, the writers that may hand it in), so the page says what ``apply``
enforces (tools/gen_reference.py writes it; tests/unit/test_docs.py fails while it is stale)."""

from __future__ import annotations

from ..model import RunStatus
from .rules import TABLE, Rule, Writer

# One row per state a run may be written in (a new RunStatus gets its row), the ends as one, then no change.
ROWS = (*((s.value, s.value) for s in RunStatus if not s.terminal and s != RunStatus.UNKNOWN),
        (" / ".join(s.value for s in RunStatus if s.terminal), "ended"), ("any (no status change)", "any"))
UNKNOWN_ROW = ("UNKNOWN: never written; the verdict's (core/verdict.py) for a run whose carrier stopped beating "
               "(90 s) or whose cluster forgot it with no end recorded")


def _row_of(entry: Rule) -> set[str]:
    states = {state.strip() for state in entry.leads_to.split(",")}
    ends = {s.value for s in RunStatus if s.terminal}
    return {"ended" if state == "ended" or state in ends else state for state in states}


def table_markdown() -> str:
    """The table (markdown): one row per state, one column per writer, each cell the transitions that writer hands
    in that lead there; then one line per transition: what it does."""
    writers = list(Writer)
    lines = ["| state | " + " | ".join(w.value for w in writers) + " |",
             "|---|" + "---|" * len(writers)]
    for label, key in ROWS:
        cells = []
        for writer in writers:
            names = [f"`{e.name}`" for e in TABLE.values() if key in _row_of(e) and writer in e.writers]
            cells.append(", ".join(names) or "—")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines.append(f"| {UNKNOWN_ROW} |" + " — |" * len(writers))
    lines.append("")
    order = [key for _, key in ROWS]
    legend = sorted(TABLE.values(), key=lambda e: (min(order.index(k) for k in _row_of(e)), e.name))
    lines += [f"- `{e.name}` (leads to {e.leads_to}): {e.what}" for e in legend]
    return "\n".join(lines) + "\n"
