"""The suite runs the usual way: a bare `pytest` (or `pytest tests`) from the repository root collects tests/unit
and tests/e2e in one session. Test folders are not packages, so pytest imports each test file by its basename
alone: two files of one name in different folders fail that collection ("import file mismatch")."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from types import SimpleNamespace

TESTS = Path(__file__).resolve().parents[1]


def test_every_test_file_basename_is_unique_across_tests():
    by_name: dict[str, list[str]] = defaultdict(list)
    for path in sorted(TESTS.rglob("*.py")):
        if path.name.startswith("test_") or path.name.endswith("_test.py"):  # pytest's default python_files
            by_name[path.name].append(str(path.relative_to(TESTS)))
    clashes = {name: paths for name, paths in by_name.items() if len(paths) > 1}
    assert not clashes, f"rename one of each (a name that says what it tests): {clashes}"


def test_collecting_only_starts_no_background_install(monkeypatch):
    """tests/conftest.py starts the adoption test's wheel install and the Python 3.10 venv when their tests are
    collected; `pytest --collect-only` runs neither test, so it must not start (and then wait for) either."""
    import conftest
    from support import py310, tool_venv

    started: list[str] = []
    monkeypatch.setattr(tool_venv, "start", lambda: started.append("wheel"))
    monkeypatch.setattr(py310, "prepare", lambda: started.append("py310"))
    items = [SimpleNamespace(path=TESTS / "e2e" / name) for name in (conftest.ADOPTION_MODULE, conftest.PY310_MODULE)]
    for collect_only, expected in ((True, []), (False, ["wheel", "py310"])):
        started.clear()
        conftest.pytest_collection_finish(SimpleNamespace(  # type: ignore[arg-type]
            items=items, config=SimpleNamespace(option=SimpleNamespace(collectonly=collect_only))))
        assert started == expected
    assert all((TESTS / "e2e" / name).is_file() for name in (conftest.ADOPTION_MODULE, conftest.PY310_MODULE))

