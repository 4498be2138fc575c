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
    other backend) from its first commit: both contracts find the folders in the import graph when checked
    (tools/import_rooms.py), and find exactly the ones on disk."""
    import grimp

    from tools.import_rooms import folders

    for contract, kind in (("protected", "folders_protected"), ("backends-independent", "folders_independent")):
        assert (CONTRACTS[contract]["type"], CONTRACTS[contract]["container"]) == (kind, "rtjob.backends")
    assert CONTRACTS["protected"]["allowed_importers"] == ["rtjob.backends"]
    assert folders(grimp.build_graph("rtjob", cache_dir=None), "rtjob.backends") == _backend_folders()


SCRATCH = """
[tool.importlinter]
root_packages = ["pkg"]
contract_types = ["folders_independent: tools.import_rooms.FoldersIndependent",
                  "folders_protected: tools.import_rooms.FoldersProtected"]

[[tool.importlinter.contracts]]
name = "each backend its own room"
type = "folders_independent"
container = "pkg.backends"

[[tool.importlinter.contracts]]
name = "a backend's folder is private"
type = "folders_protected"
container = "pkg.backends"
allowed_importers = ["pkg.backends"]
"""


def test_a_folder_added_under_the_container_is_held_with_no_edit_of_the_contract(tmp_path: Path) -> None:
    """A scratch project whose contracts name only the container: a folder added later that imports another backend,
    or that the rest of the package imports directly, breaks them."""
    import os
    import subprocess
    import sys

    def write(rel: str, text: str = "") -> None:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)

    (tmp_path / "pyproject.toml").write_text(SCRATCH)
    for rel in ("pkg/__init__.py", "pkg/backends/__init__.py", "pkg/backends/base.py", "pkg/backends/one/__init__.py",
                "pkg/backends/one/m.py", "pkg/use.py"):
        write(rel)
    write("pkg/backends/two/__init__.py")
    write("pkg/backends/two/m.py", "from pkg.backends import base\n")
    lint = [str(Path(sys.executable).parent / "lint-imports"), "--no-logo", "--no-cache"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    kept = subprocess.run(lint, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert kept.returncode == 0, kept.stdout + kept.stderr
    write("pkg/backends/three/__init__.py")  # added later: no contract names it
    write("pkg/backends/three/m.py", "from pkg.backends.one import m\n")
    write("pkg/use.py", "from pkg.backends.three import m\n")
    broken = subprocess.run(lint, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert broken.returncode == 1, broken.stdout + broken.stderr
    assert "pkg.backends.three is not allowed to import pkg.backends.one" in broken.stdout, broken.stdout
    assert "pkg.use -> pkg.backends.three" in broken.stdout, broken.stdout


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
