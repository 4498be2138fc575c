"""YAML loading that remembers where every key came from, so errors can say file:line.

YAML 1.2 (ruamel.yaml), so values stay as written: `on`, `NO` and `010` are strings, only true/false are
booleans. Numbers under ``args`` end up on the script's command line (and those under ``env_vars`` and
``tags`` in its environment and run tags), so one that Python would print differently (`version: 1.10`,
`tag: 010`, `lr: 1e-3`) is kept as its text ("1.10", "010", "1e-3"); `epochs: 5` stays the int 5.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core.errors import BadInput

if TYPE_CHECKING:
    from ruamel.yaml.nodes import Node

# ruamel.yaml is imported where a file is parsed: `rtjob --help` and the commands that read no YAML skip it.

# Key paths whose values end up as text (the script's command line, its environment, run tags): a number
# there keeps its source text where str(value) would differ from what was written.
_JOB_TEXT: tuple[tuple[str, ...], ...] = (("args",), ("local", "args"), ("env_vars",), ("local", "env_vars"),
                                          ("tags",))
# ... in a job file, and in a pipeline file's defaults and steps (jobspec/pipeline.py).
AS_WRITTEN: tuple[tuple[str, ...], ...] = (*_JOB_TEXT, *(("defaults", *p) for p in _JOB_TEXT),
                                           *(("steps", "[]", *p) for p in _JOB_TEXT))

_STR = "tag:yaml.org,2002:str"
_MERGE = "tag:yaml.org,2002:merge"
_TIMESTAMP = "tag:yaml.org,2002:timestamp"
# Scalars kept as their text: strings, dates (plain data out), and a lone `=` or `<<` as a value.
_TEXT_TAGS = (_STR, _TIMESTAMP, "tag:yaml.org,2002:value", _MERGE)


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


class _Builder:
    """Nodes → plain Python data (dict, list, str, int, float, bool, None): no ruamel types leak out.
    Duplicate keys are refused with their line; timestamps stay text; under ``as_written`` paths a number
    whose str() differs from what was written stays text."""

    def __init__(self, as_written: tuple[tuple[str, ...], ...]) -> None:
        from ruamel.yaml import YAML

        self._scalars = YAML(typ="safe", pure=True).constructor
        self._as_written = as_written

    def build(self, node: Node, path: tuple[str, ...] = (), as_text: bool = False) -> Any:
        from ruamel.yaml.nodes import MappingNode, SequenceNode

        as_text = as_text or path in self._as_written
        if isinstance(node, MappingNode):
            return self._mapping(node, path, as_text)
        if isinstance(node, SequenceNode):
            return [self.build(item, (*path, "[]"), as_text) for item in node.value]
        if node.tag in _TEXT_TAGS:
            return node.value
        value = self._scalars.construct_object(node, deep=True)
        if as_text and isinstance(value, (int, float)) and not isinstance(value, bool) and str(value) != node.value:
            return node.value  # 1.10, 010, 1e-3: Python would print them back as 1.1, 10, 0.001
        return value

    def _mapping(self, node: Node, path: tuple[str, ...], as_text: bool) -> dict[Any, Any]:
        from ruamel.yaml.constructor import ConstructorError
        from ruamel.yaml.nodes import MappingNode

        out: dict[Any, Any] = {}
        merged: dict[Any, Any] = {}
        seen: dict[Any, int] = {}
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE:  # `<<: *base` (or a list of them): explicit keys win
                sources = [value_node] if isinstance(value_node, MappingNode) else value_node.value
                for source in reversed(sources if isinstance(sources, list) else [value_node]):
                    part = self.build(source, path, as_text)
                    if not isinstance(part, dict):
                        raise ConstructorError(None, None, "'<<' merges mappings only", source.start_mark)
                    merged.update(part)
                continue
            key = self.build(key_node)
            if isinstance(key, (dict, list)):
                raise ConstructorError(None, None, "a mapping or list cannot be a key", key_node.start_mark)
            if key in seen:
                raise ConstructorError(None, None, f"duplicate key {key!r} (first on line {seen[key]})",
                                       key_node.start_mark)
            seen[key] = key_node.start_mark.line + 1
            out[key] = self.build(value_node, (*path, str(key)), as_text)
        return {**{k: v for k, v in merged.items() if k not in out}, **out}


def _index_lines(node: Node, prefix: tuple[str | int, ...], out: dict[tuple[str | int, ...], int]) -> None:
    from ruamel.yaml.nodes import MappingNode, ScalarNode, SequenceNode

    if isinstance(node, MappingNode):
        for key_node, value_node in node.value:
            key = key_node.value if isinstance(key_node, ScalarNode) else str(key_node.value)
            loc = (*prefix, key)
            out[loc] = key_node.start_mark.line + 1
            _index_lines(value_node, loc, out)
    elif isinstance(node, SequenceNode):
        for i, item in enumerate(node.value):
            loc = (*prefix, i)
            out[loc] = item.start_mark.line + 1
            _index_lines(item, loc, out)


# A small file must not expand into millions of nodes through aliases ("billion laughs"): everything that
# walks the data afterwards (the line index, validation, overrides) would take as long.
MAX_NODES = 100_000


def _expanded_size(node: Node, memo: dict[int, int], depth: int = 0) -> int:
    """How many nodes ``node`` stands for once every alias is expanded (linear time: shared nodes are
    counted once and multiplied, never walked again)."""
    from ruamel.yaml.nodes import MappingNode, SequenceNode

    if id(node) in memo:
        return memo[id(node)]
    if depth > 200:
        return MAX_NODES + 1  # nesting this deep is no job file either
    size = 1
    if isinstance(node, MappingNode):
        size += sum(_expanded_size(k, memo, depth + 1) + _expanded_size(v, memo, depth + 1) for k, v in node.value)
    elif isinstance(node, SequenceNode):
        size += sum(_expanded_size(item, memo, depth + 1) for item in node.value)
    memo[id(node)] = min(size, MAX_NODES + 1)
    return memo[id(node)]


def _compose(text: str, path: str) -> Node | None:
    """The node graph of one YAML 1.2 document, or a one-line BadInput (with file:line when known)."""
    from ruamel.yaml import YAML
    from ruamel.yaml.error import MarkedYAMLError, YAMLError

    try:
        return YAML(typ="safe", pure=True).compose(text)
    except MarkedYAMLError as exc:
        raise BadInput(_marked(exc, path)) from None
    except YAMLError as exc:
        raise BadInput(f"{path}: invalid YAML: {str(exc).splitlines()[0]}") from None
    except RecursionError:
        raise BadInput(f"{path}: invalid YAML: nested too deeply") from None


# What a parser context opens, for the line that opened it (the parser notices the gap only lines later).
_OPENED = {"while parsing a flow mapping": "'{'", "while parsing a flow sequence": "'['",
           "while scanning a quoted scalar": "quote"}


def _marked(exc: Any, path: str) -> str:
    opened = _OPENED.get(exc.context or "")
    if opened and exc.context_mark and exc.problem_mark and exc.problem_mark.line != exc.context_mark.line:
        return (f"{path}:{exc.context_mark.line + 1}: invalid YAML: the {opened} opened here is not closed "
                f"(line {exc.problem_mark.line + 1}: {exc.problem})")
    mark = exc.problem_mark or exc.context_mark
    line = f":{mark.line + 1}" if mark else ""
    problem = exc.problem or exc.context or "malformed YAML"
    return f"{path}{line}: invalid YAML: {problem}"


def _build(node: Node, path: str, as_written: tuple[tuple[str, ...], ...], root_as_text: bool = False) -> Any:
    from ruamel.yaml.error import MarkedYAMLError, YAMLError

    if _expanded_size(node, {}) > MAX_NODES:
        raise BadInput(f"{path}: the YAML expands to more than {MAX_NODES:,} values (through aliases or "
                       "nesting); a job or compute config is a few dozen keys")
    try:
        return _Builder(as_written).build(node, as_text=root_as_text)
    except MarkedYAMLError as exc:
        raise BadInput(_marked(exc, path)) from None
    except (YAMLError, ValueError) as exc:
        raise BadInput(f"{path}: invalid YAML: {str(exc).splitlines()[0]}") from None
    except RecursionError:
        raise BadInput(f"{path}: invalid YAML: nested too deeply") from None


def parse_yaml(text: str, path: str, as_written: tuple[tuple[str, ...], ...] = AS_WRITTEN) -> Located:
    """Parse one YAML 1.2 document; malformed YAML becomes a one-line BadInput with file:line.
    Numbers under the key paths ``as_written`` keep their source text (see _Builder)."""
    node = _compose(text, path)
    if node is None:
        return Located(data=None, path=path)
    data = _build(node, path, as_written)
    lines: dict[tuple[str | int, ...], int] = {(): node.start_mark.line + 1}
    _index_lines(node, (), lines)
    return Located(data=data, path=path, lines=lines)


def parse_value(text: str, as_written: bool = False, label: str = "value") -> Any:
    """One YAML 1.2 value (a --set VALUE): plain data; numbers keep their text when ``as_written``."""
    node = _compose(text, label)
    return None if node is None else _build(node, label, (), root_as_text=as_written)


def load_yaml(path: Path, display: str | None = None) -> Located:
    shown = display or str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise BadInput(f"{shown}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInput(f"{shown}: cannot read: {exc}") from None
    return parse_yaml(text, shown)
