"""The rows of one benchmark as results.md's Markdown table, then its notes: what a `*_bench.py` prints when it
runs on its own (benchmarks/run.py renders the whole results.md itself)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

HEADER = "| measurement | rtjob | peer | ratio | goal | met? |\n|---|---|---|---|---|---|"
COLUMNS = ("measurement", "rtjob", "peer", "ratio", "goal", "met")


def print_table(rows: Iterable[Mapping[str, str]], notes: Iterable[str]) -> None:
    print(HEADER)
    for row in rows:
        print("| " + " | ".join(str(row[key]) for key in COLUMNS) + " |")
    print()
    for note in notes:
        print(f"- {note}")


def run_alone(doc: str, bench: Callable[..., list[dict[str, str]]]) -> int:
    """A ``*_bench.py`` run on its own (``--repeats N``): its rows as the table, then its notes."""
    import argparse

    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    notes: list[str] = []
    print_table(bench(repeats=args.repeats, notes=notes), notes)
    return 0
