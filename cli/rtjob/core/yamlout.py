"""YAML that rtjob writes for other tools (the Anyscale job file, compute configs, schedules).

Its readers disagree on plain scalars: PyYAML (Anyscale's CLI) reads YAML 1.1, where `on`, `NO`, `010` and
`1.10` are a bool, an octal int and a float; YAML 1.2 readers (ruamel, rtjob's own loader) take `1e-3` and
`0o10` for numbers. A string either of them would read as something else is written quoted.
"""

from __future__ import annotations

import functools
from typing import Any

_STR_TAG = "tag:yaml.org,2002:str"
_UNICODE_BREAKS = "\x85\u2028\u2029"  # NEL, LS, PS: line breaks to a YAML reader


@functools.cache
def _yaml12_resolver() -> Any:
    from ruamel.yaml.resolver import VersionedResolver

    return VersionedResolver(version=(1, 2))


def _plain_is_not_a_string_in_yaml12(text: str) -> bool:
    from ruamel.yaml.nodes import ScalarNode

    return bool(_yaml12_resolver().resolve(ScalarNode, text, (True, False)) != _STR_TAG)


@functools.cache
def _dumper() -> Any:
    import yaml

    class Dumper(yaml.SafeDumper):
        """PyYAML quotes what YAML 1.1 would misread by itself; this also quotes what YAML 1.2 would."""

    def represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
        style = "'" if _plain_is_not_a_string_in_yaml12(value) else None
        if any(c in value for c in _UNICODE_BREAKS):
            style = '"'  # PyYAML writes them raw in other styles, where readers fold them into spaces
        return dumper.represent_scalar(_STR_TAG, value, style=style)

    Dumper.add_representer(str, represent_str)
    return Dumper


def dump_yaml(data: Any, allow_unicode: bool = True) -> str:
    """Block-style YAML, keys in their order, that YAML 1.1 and 1.2 readers load back as ``data``."""
    import yaml

    return yaml.dump(data, Dumper=_dumper(), sort_keys=False, default_flow_style=False,  # noqa: S506
                     allow_unicode=allow_unicode, width=100)
