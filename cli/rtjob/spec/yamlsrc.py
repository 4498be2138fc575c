"""YAML loading that remembers where every key came from, so errors can say file:line."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ..core.errors import BadInput


@dataclass
class Located:
    """A parsed YAML document plus the line (1-based) of every key path in it."""

    data: Any
    path: str
    lines: dict[tuple[str | int, ...], int] = field(default_factory=dict)

    def line_of(self, loc: tuple[str | int, ...]) -> int | None:
        """The line of the deepest known prefix of ``loc``."""
        for end in range(len(loc), -1, -1):
            line = self.lines.get(tuple(loc[:end]))
            if line is not None:
                return line
        return None

    def where(self, loc: tuple[str | int, ...]) -> str:
        line = self.line_of(loc)
        return f"{self.path}:{line}" if line else self.path


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that rejects duplicate keys (PyYAML silently keeps the last one)."""


def _construct_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r} (first on line {seen[key]})", key_node.start_mark
            )
        seen[key] = key_node.start_mark.line + 1
    return loader.construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _index_lines(node: yaml.Node, prefix: tuple[str | int, ...], out: dict[tuple[str | int, ...], int]) -> None:
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else str(key_node.value)
            loc = (*prefix, key)
            out[loc] = key_node.start_mark.line + 1
            _index_lines(value_node, loc, out)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            loc = (*prefix, i)
            out[loc] = item.start_mark.line + 1
            _index_lines(item, loc, out)


# A small file must not expand into millions of nodes through aliases ("billion laughs"): everything that
# walks the data afterwards (the line index, validation, overrides) would take as long.
MAX_NODES = 100_000


def _expanded_size(node: yaml.Node, memo: dict[int, int], depth: int = 0) -> int:
    """How many nodes ``node`` stands for once every alias is expanded (linear time: shared nodes are
    counted once and multiplied, never walked again)."""
    if id(node) in memo:
        return memo[id(node)]
    if depth > 200:
        return MAX_NODES + 1  # nesting this deep is no job file either
    size = 1
    if isinstance(node, yaml.MappingNode):
        size += sum(_expanded_size(k, memo, depth + 1) + _expanded_size(v, memo, depth + 1) for k, v in node.value)
    elif isinstance(node, yaml.SequenceNode):
        size += sum(_expanded_size(item, memo, depth + 1) for item in node.value)
    memo[id(node)] = min(size, MAX_NODES + 1)
    return memo[id(node)]


def parse_yaml(text: str, path: str) -> Located:
    """Parse one YAML document; malformed YAML becomes a one-line BadInput with file:line."""
    try:
        node = yaml.compose(text, Loader=_UniqueKeyLoader)
        if node is not None and _expanded_size(node, {}) > MAX_NODES:
            raise BadInput(f"{path}: the YAML expands to more than {MAX_NODES:,} values (through aliases or "
                           "nesting); a job or compute config is a few dozen keys")
        data = yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - SafeLoader subclass
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = f":{mark.line + 1}" if mark else ""
        problem = exc.problem or exc.context or "malformed YAML"
        raise BadInput(f"{path}{line}: invalid YAML: {problem}") from None
    except yaml.YAMLError as exc:
        raise BadInput(f"{path}: invalid YAML: {str(exc).splitlines()[0]}") from None
    except RecursionError:
        raise BadInput(f"{path}: invalid YAML: nested too deeply") from None
    lines: dict[tuple[str | int, ...], int] = {}
    if node is not None:
        lines[()] = node.start_mark.line + 1
        _index_lines(node, (), lines)
    return Located(data=data, path=path, lines=lines)


def load_yaml(path: Path, display: str | None = None) -> Located:
    shown = display or str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise BadInput(f"{shown}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInput(f"{shown}: cannot read: {exc}") from None
    return parse_yaml(text, shown)
