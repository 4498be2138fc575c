"""The suite runs the usual way: a bare `pytest` (or `pytest tests`) from the repository root collects tests/unit
and tests/e2e in one session. Test folders are not packages, so pytest imports each test file by its basename
alone: two files of one name in different folders fail that collection ("import file mismatch")."""

from __future__ import annotations

import ast
import os
from collections import defaultdict
from pathlib import Path
from types import SimpleNamespace

from rtjob.jobspec.settings import ENV_NAMES
from support.cli import base_env
from support.scrub import scrub

TESTS = Path(__file__).resolve().parents[1]
SETTING_VARIABLES = sorted({name for names in ENV_NAMES.values() for name in names})


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


def test_the_one_scrub_removes_every_setting_variable_in_process_and_for_subprocesses(monkeypatch, tmp_path):
    shell = [*SETTING_VARIABLES, "RTJOB_CONTEXT", "RTJOB_PROJECT", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH",
             "RAY_OVERRIDE_RUNTIME_ENV_DEFAULT_EXCLUDES", "ANYSCALE_CLI_TOKEN", "FORCE_COLOR"]
    for name in shell:
        monkeypatch.setenv(name, "from-the-developer-shell")
    env = base_env(tmp_path)
    assert [name for name in shell if name in env] == []
    assert env["XDG_CONFIG_HOME"] == str(tmp_path / "xdg-config")
    xdg = os.environ["XDG_CONFIG_HOME"]  # tests/conftest.py's private one for the session: it stays
    scrub(monkeypatch)
    assert [name for name in shell if name in os.environ] == []
    assert os.environ["XDG_CONFIG_HOME"] == xdg


def test_no_test_file_keeps_its_own_list_of_setting_variables():
    """support/scrub.py derives the list from rtjob's settings; a copy elsewhere drifts (eight copies did)."""
    copies = []
    for path in sorted(TESTS.rglob("*.py")):
        if path == TESTS / "support" / "scrub.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
                named = {e.value for e in node.elts if isinstance(e, ast.Constant) and e.value in SETTING_VARIABLES}
                if len(named) >= 3:
                    copies.append(f"{path.relative_to(TESTS)}:{node.lineno}")
    assert not copies, f"use support.scrub instead of a list of your own: {copies}"
