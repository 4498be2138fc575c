"""The import contracts (pyproject.toml's import-linter contracts, checked by `lint-imports` in `make lint`) cover
the tree as it grows: a contract that names packages by hand goes stale the day a package is added, so these tests
list the folders and fail while one is missing from the contract that should hold it."""

from __future__ import annotations

from pathlib import Path

import tomllib
from support.cli import REPO

CLI = REPO / "cli" / "rtjob"
CONTRACTS = {c["id"]: c for c in tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]}


def _dotted(folder: Path) -> str:
    return ".".join(folder.relative_to(CLI.parent).parts)


def _packages(under: Path) -> list[Path]:
    return sorted(p.parent for p in under.rglob("__init__.py"))


def _backend_folders() -> list[str]:
    return sorted(_dotted(p.parent) for p in (CLI / "backends").glob("*/__init__.py"))


def test_the_walk_finds_the_backends() -> None:
    assert {"rtjob.backends.ray", "rtjob.backends.anyscale"} <= set(_backend_folders())


def test_every_backend_folder_is_private_and_independent_of_the_others() -> None:
    """A new cli/rtjob/backends/NAME/ is protected (only rtjob.backends imports it) and independent (it imports no
    other backend) from its first commit: add it to both contracts."""
    folders = _backend_folders()
    for contract, key in (("protected", "protected_modules"), ("backends-independent", "modules")):
        assert sorted(CONTRACTS[contract][key]) == folders, f"pyproject.toml: {contract}'s {key} = {folders}"
    assert CONTRACTS["protected"]["allowed_importers"] == ["rtjob.backends"]


def test_every_package_with_siblings_keeps_them_acyclic() -> None:
    """Each package of two or more modules (or subpackages) is an ancestor of acyclic-siblings; the top package's
    own modules and packages are ordered by the layers contract instead."""
    def children(package: Path) -> int:
        modules = [p for p in package.glob("*.py") if p.name != "__init__.py"]
        return len(modules) + len([p for p in package.glob("*/__init__.py")])

    wanted = {_dotted(p) for p in _packages(CLI) if p != CLI and children(p) >= 2}
    listed = set(CONTRACTS["acyclic-siblings"]["ancestors"])
    assert wanted - listed == set(), f"add to acyclic-siblings' ancestors: {sorted(wanted - listed)}"
    assert listed - {_dotted(p) for p in _packages(CLI)} == set(), "acyclic-siblings names a package that is gone"


def test_the_run_side_is_a_room_of_its_own() -> None:
    """What Ray runs imports no client use case (runs/, commands/, ui/, mcp/, the ledger); the layers put it
    beside runs/, above what both share (notify/, trackers/), so neither imports the other."""
    room = CONTRACTS["runside-imports-no-client"]
    assert room["type"] == "forbidden" and room["source_modules"] == ["rtjob.runside"]
    assert {"rtjob.runs", "rtjob.commands", "rtjob.ui", "rtjob.mcp"} <= set(room["forbidden_modules"])
    assert not room.get("allow_indirect_imports")  # a use case reached through another module counts too
    layers = CONTRACTS["layers"]["layers"]
    beside = next(layer for layer in layers if "rtjob.runside" in layer.split(" | "))
    assert "rtjob.runs" in beside.split(" | ")
    shared = next(layer for layer in layers if "rtjob.notify" in layer.split(" | "))
    assert layers.index(shared) == layers.index(beside) + 1
