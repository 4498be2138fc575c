"""A module imported at its first use, not when the test file is collected.

pytest-xdist's workers each collect every test file; a test module that imports torch, diffusers or the anyscale
SDK at its top makes every worker pay seconds for it, also the workers that run none of its tests. With
``torch = lazy("torch")`` at the top instead, ``torch.zeros(...)`` imports torch at the first call (in the worker
that runs the test) and is the real module's attribute from then on. Only attribute access is deferred: module-level
code of the test file must not touch the module (parametrize lists are literals, constants are built in fixtures).
"""

from __future__ import annotations

import importlib
import sys
from types import ModuleType
from typing import Any


class LazyModule:
    def __init__(self, name: str) -> None:
        self._name = name

    @property
    def module(self) -> ModuleType:
        return importlib.import_module(self._name)  # sys.modules' entry once imported

    def __getattr__(self, attr: str) -> Any:
        # pytest's collection probes every module-level name (`__test__`, `__wrapped__`, `_mock_name`, ...): a
        # private name imports nothing; it is read from the module once something else has imported it.
        name = self.__dict__.get("_name")
        if name is None or (attr.startswith("_") and name not in sys.modules):
            raise AttributeError(attr)
        return getattr(self.module, attr)

    def __repr__(self) -> str:
        return f"<lazy module {self._name!r}>"


def lazy(name: str) -> Any:
    """``name`` (a dotted module path), imported when one of its attributes is first read."""
    return LazyModule(name)
