"""import-linter contract types whose modules are the folders (subpackages) of one package, found in the import graph
each time the contract is checked: a folder added under it (cli/rtjob/backends/NAME/) is held from its first commit,
with no list in pyproject.toml to edit. Registered in pyproject.toml's ``contract_types`` (lint-imports puts the
project's root on sys.path, so ``tools.import_rooms`` imports from a checkout)."""

from __future__ import annotations

from typing import Any

from importlinter.contracts.independence import IndependenceContract
from importlinter.contracts.protected import ProtectedContract
from importlinter.domain import fields
from importlinter.domain.imports import ModuleExpression


def folders(graph: Any, container: str) -> list[str]:
    """The subpackages directly under ``container``: its children that have children of their own."""
    return sorted(child for child in graph.find_children(container) if graph.find_children(child))


class FoldersIndependent(IndependenceContract):
    """``independence`` over every folder of ``container`` (``modules`` is found, not given)."""

    container = fields.ModuleField()
    modules = fields.SetField(subfield=fields.ModuleExpressionField(), required=False)

    def check(self, graph: Any, verbose: bool) -> Any:
        self.modules = {ModuleExpression(name) for name in folders(graph, self.container.name)}  # type: ignore[attr-defined]
        return super().check(graph, verbose)


class FoldersProtected(ProtectedContract):
    """``protected`` over every folder of ``container`` (``protected_modules`` is found, not given)."""

    container = fields.ModuleField()
    protected_modules = fields.ListField(subfield=fields.ModuleExpressionField(), required=False)

    def check(self, graph: Any, verbose: bool) -> Any:
        self.protected_modules = [ModuleExpression(n) for n in folders(graph, self.container.name)]  # type: ignore[attr-defined]
        return super().check(graph, verbose)
