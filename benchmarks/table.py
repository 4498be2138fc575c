"""The rows of one benchmark as results.md's Markdown table, then its notes: what a `*_bench.py` prints when it
runs on its own (benchmarks/run.py renders the whole results.md itself)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

HEADER = "| measurement | rtjob | peer | ratio | goal | met? |\n|---|---|---|---|---|---|"
COLUMNS = ("measurement", "rtjob", "peer", "ratio", "goal", "met")


def print_table(rows: Iterable[Mapping[str, str]], notes: Iterable[str]) -> None:
    print(HEADER)
    for row in rows:
        print("| " + " | ".join(str(row[key]) for key in COLUMNS) + " |")
    print()
    for note in notes:
        print(f"- {note}")
