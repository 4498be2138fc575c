"""Budgets the tree keeps (issue 35, docs/ARCHITECTURE.md): the client's use cases, the run side's actors (the
companion, the supervisor's loop), the UI and the files rtjob writes into a
project stay in small modules, so a reader finds each actor's loop in one module of a size one can read."""

from __future__ import annotations

from pathlib import Path

import pytest

CLI = Path(__file__).resolve().parents[2] / "cli" / "rtjob"
BUDGET = 300  # lines a module in these folders may have
FOLDERS = ["runs", "scaffold", "runside", "ui"]  # the client's use cases, the actors on the cluster, the UI


def _modules() -> list[Path]:
    return sorted(p for folder in FOLDERS for p in (CLI / folder).rglob("*.py"))


def test_the_budgeted_folders_hold_modules() -> None:
    assert len(_modules()) > 20  # the walk found the tree (a moved folder would pass the budget vacuously)


@pytest.mark.parametrize("module", _modules(), ids=lambda p: str(p.relative_to(CLI)))
def test_no_module_over_budget(module: Path) -> None:
    lines = len(module.read_text().splitlines())
    assert lines <= BUDGET, f"{module.relative_to(CLI)} has {lines} lines (budget {BUDGET}): split it along what it holds"
