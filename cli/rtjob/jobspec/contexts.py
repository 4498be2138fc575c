"""Named contexts: where to run, kept once per user in ``$XDG_CONFIG_HOME/rtjob/config.toml``.

A context holds settings (``CONTEXT_KEYS``). Secrets are never stored in clear: a header value (or the
address) that would hold one is a reference, ``{env = "NAME"}`` or ``{file = "path"}``, resolved only when a
command reads that setting (settings.Deferred) and handed to the redactor at once. Writes hold a file lock, keep
the user's comments (tomlkit) and replace the file atomically, readable by its owner only.

    current = "prod"

    [contexts.prod]
    address = "https://ray-prod:8265"
    headers = { Authorization = { env = "PROD_RAY_TOKEN" }, X-Team = "ml" }
"""

from __future__ import annotations

import contextlib
import difflib
import functools
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.errors import BadInput
from ..core.files import write_atomically
from ..core.redact import REDACTOR, is_secret, url_password
from . import queues, secret_settings, table_settings
from .settings import BOOLEAN_KEYS, SETTING_KEYS, Deferred, tomllib

CONTEXT_ENV = "RTJOB_CONTEXT"  # an explicitly chosen context, below --context
CONTEXT_KEYS = SETTING_KEYS  # every setting (jobspec/settings.py), a context's queue and [queues.NAME] among them
REF_KINDS, _TOP_KEYS = ("env", "file"), ("current", "contexts")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
_LOCK_TIMEOUT_S = 30.0

Layer = list[tuple[str, Any, str]]  # (setting, value, source) in the order they apply


def config_path() -> Path:
    """The user's config file (XDG: a relative $XDG_CONFIG_HOME is ignored, as the spec says)."""
    base = os.environ.get("XDG_CONFIG_HOME", "")
    folder = Path(base) if base and Path(base).is_absolute() else Path.home() / ".config"
    return folder / "rtjob" / "config.toml"


def shown_path(path: Path) -> str:
    try:
        return f"~/{path.relative_to(Path.home())}"
    except ValueError:
        return str(path)


@dataclass(frozen=True)
class Config:
    path: Path
    current: str | None
    contexts: dict[str, dict[str, Any]]  # as stored: references unresolved

    def get(self, name: str, how: str) -> dict[str, Any]:
        if name in self.contexts:
            return self.contexts[name]
        names = sorted(self.contexts)
        if not names:
            raise BadInput(f"{how}: no context {name!r}: {shown_path(self.path)} defines none (add one: rtjob context add NAME --address URL)")
        close = difflib.get_close_matches(name, names, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise BadInput(f"{how}: no context {name!r}{hint} (contexts in {shown_path(self.path)}: {', '.join(names)})")


def check_name(name: str, where: str = "context name") -> str:
    if not _NAME.match(name):
        raise BadInput(f"{where} {name[:40]!r}: use letters, digits, '.', '_' or '-' (at most 63), e.g. prod")
    return name


# --- reading and checking -------------------------------------------------------------------------------------


def _is_ref(value: Any) -> bool:
    return isinstance(value, dict) and len(value) == 1 and next(iter(value)) in REF_KINDS \
        and isinstance(next(iter(value.values())), str) and bool(next(iter(value.values())))


def _ref_hint(name: str) -> str:
    return f'reference it instead: {name} = {{env = "VAR"}} or {{file = "PATH"}}'


def _check_header(where: str, name: str, value: str) -> None:
    """The same checks as --header (spec.overrides.parse_headers): a token name, a one-line value."""
    from .overrides import parse_headers

    try:
        valid_name = list(parse_headers([f"{name}: -"])) == [name]  # ':' or a space would split the name
    except BadInput:
        valid_name = False
    if not valid_name:
        raise BadInput(f"{where}: header name {name!r} is not valid; use letters, digits and -_.!#$%&'*+^`|~, "
                       "e.g. X-Team")
    parse_headers([f"{name}: {value}"], source=f"{where}: header")


def check_settings(where: str, table: Any, *, references: bool = True, at: queues.Locator | None = None) -> dict[str, Any]:
    """A table of settings (a context, or the project config) checked: known keys, strings where strings are expected,
    verify_tls and storage_check booleans, headers a table of valid names to one-line values, queues (jobspec/queues.py)
    at ``at``'s file:line. With ``references`` (a context) a secret may only be a reference ``{env = "VAR"}`` /
    ``{file = "PATH"}``, never clear."""
    if not isinstance(table, dict):
        raise BadInput(f"{where}: must be a table of settings ({', '.join(CONTEXT_KEYS)})")
    for key, value in table.items():
        if key not in CONTEXT_KEYS:
            close = difflib.get_close_matches(key, CONTEXT_KEYS, n=1)
            hint = f"did you mean {close[0]!r}?" if close else f"valid keys: {', '.join(CONTEXT_KEYS)}"
            raise BadInput(f"{(at or (lambda loc: where))((key,))}: unknown key {key!r}; {hint}")
        if key in queues.SETTING_KEYS:
            queues.check_setting(key, value, at or (lambda loc: where))
        elif key in table_settings.EXAMPLES:
            table_settings.check_table(key, where, value)
        elif key == "secrets":
            secret_settings.check(value, at or (lambda loc: where))
        elif key in BOOLEAN_KEYS:
            if not isinstance(value, bool):
                raise BadInput(f"{where}: {key} must be true or false (unquoted)")
        elif key == "headers":
            example = ', Authorization = {env = "VAR"}' if references else ""
            if not isinstance(value, dict):
                raise BadInput(f'{where}: headers must be a table, e.g. headers = {{X-Team = "ml"{example}}}')
            for name, header in value.items():
                if references and _is_ref(header):
                    _check_header(where, name, "reference")
                    continue
                if not isinstance(header, str):
                    refs = ' or {env = "VAR"} / {file = "PATH"}' if references else ""
                    raise BadInput(f"{where}: header {name!r} must be a string{refs}")
                _check_header(where, name, header)
                if references and is_secret(name, header):  # the value is never printed, only its name
                    raise BadInput(f"{where}: header {name!r} holds a secret in clear; {_ref_hint(name)}")
        elif key == "address" and references and _is_ref(value):
            continue
        elif not isinstance(value, str) or not value:
            raise BadInput(f"{where}: {key} must be a non-empty string")
        elif key == "address" and references and url_password(value):
            raise BadInput(f"{where}: address holds a password in clear; {_ref_hint('address')}")
    return table


def parse_config(path: Path, text: str) -> Config:
    shown = shown_path(path)
    valid = f"valid: current = \"NAME\" and [contexts.NAME] tables with {', '.join(CONTEXT_KEYS)}"
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise BadInput(f"{shown}: not valid TOML ({exc}); {valid}") from None
    for key in (k for k in data if k not in _TOP_KEYS):
        raise BadInput(f"{queues.toml_locator(shown, text)((key,))}: unknown key {key!r}; {valid}")
    contexts = data.get("contexts", {})
    if not isinstance(contexts, dict):
        raise BadInput(f"{shown}: contexts must be tables [contexts.NAME]; {valid}")
    for name, ctx in contexts.items():
        check_name(name, f"{shown}: context")
        check_settings(f"{shown}: [contexts.{name}]", ctx, at=queues.toml_locator(shown, text, ("contexts", name)))
    current = data.get("current")
    if current is not None and (not isinstance(current, str) or current not in contexts):
        raise BadInput(f"{shown}: current = {current!r} names no context "
                       f"(defined: {', '.join(sorted(contexts)) or 'none'}); fix it with rtjob context use NAME")
    return Config(path, current, contexts)


def read_config(path: Path | None = None) -> Config:
    path = path or config_path()
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return Config(path, None, {})
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInput(f"{shown_path(path)}: cannot read the rtjob config: {exc}") from None
    return parse_config(path, text)


# --- using a context --------------------------------------------------------------------------------------------


def resolve_ref(ref: dict[str, str], where: str, base: Path) -> str:
    """A reference's value, which is a secret of this process from now on."""
    kind, target = next(iter(ref.items()))
    if kind == "env":
        value = os.environ.get(target)
        if not value:
            raise BadInput(f"{where}: environment variable {target} is not set (the context references it)")
    else:
        path = (base / Path(target).expanduser()).resolve()
        try:
            value = path.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise BadInput(f"{where}: cannot read {path} (the context references it): "
                           f"{getattr(exc, 'strerror', None) or exc}") from None
        if not value:
            raise BadInput(f"{where}: {path} is empty (the context references it)")
    REDACTOR.add([value])
    return value


def _resolved_headers(headers: dict[str, Any], where: str, name: str, base: Path) -> dict[str, str]:
    from .overrides import parse_headers

    values = {h: resolve_ref(v, f"{where} {h!r}", base) if _is_ref(v) else v for h, v in headers.items()}
    return parse_headers([f"{h}: {v}" for h, v in values.items()], source=f"context {name} header")


def context_settings(config: Config, name: str, source: str) -> Layer:
    """One context's settings, each tagged with ``source``; a setting holding a reference is ``Deferred``:
    resolved only if a command reads it (an unresolvable reference fails only a command that needs it)."""
    ctx = config.contexts[name]
    base = config.path.parent
    layer: Layer = []
    for key, value in ctx.items():
        where = f"context {name} ({shown_path(config.path)}) {key}"
        if key == "headers":
            if any(_is_ref(v) for v in value.values()):
                value = Deferred(functools.partial(_resolved_headers, value, where, name, base))
            else:
                value = _resolved_headers(value, where, name, base)
        elif _is_ref(value):
            value = Deferred(functools.partial(resolve_ref, value, where, base))
        layer.append((key, value, source))
    return layer


def context_layers(flag: str | None) -> tuple[Layer, Layer]:
    """(the explicitly chosen context: --context, else $RTJOB_CONTEXT; the current one, when none is chosen).

    The chosen context ranks above the environment, the current one below the project config."""
    env_name = os.environ.get(CONTEXT_ENV) or None
    config = read_config()
    shown = shown_path(config.path)
    if flag or env_name:
        how = "--context" if flag else CONTEXT_ENV
        name = flag or env_name or ""
        config.get(name, how)
        return context_settings(config, name, f"context {name} via {how} ({shown})"), []
    if config.current:
        return [], context_settings(config, config.current, f"current context {config.current} ({shown})")
    return [], []


# --- writing --------------------------------------------------------------------------------------------------


def _plain(value: Any) -> Any:
    """tomlkit's items as plain Python values (dicts, lists, str, bool...)."""
    unwrap = getattr(value, "unwrap", None)
    return unwrap() if unwrap else value


@contextlib.contextmanager
def editing(path: Path | None = None) -> Iterator[Any]:
    """The config as a tomlkit document, under the file lock; written back (checked, atomically) on success."""
    import tomlkit
    from filelock import FileLock, Timeout

    path = path or config_path()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    lock = FileLock(str(path) + ".lock", timeout=_LOCK_TIMEOUT_S)
    try:
        with lock:
            before = path.read_text(encoding="utf-8") if path.exists() else ""
            parse_config(path, before)  # a broken file is reported, never overwritten
            doc = tomlkit.parse(before)
            yield doc
            after = tomlkit.dumps(doc)
            parse_config(path, after)  # never write a file rtjob could not read back
            write_atomically(path, after)
    except Timeout:
        raise BadInput(f"{shown_path(path)}: another rtjob holds {path.name}.lock for over "
                       f"{_LOCK_TIMEOUT_S:g}s; try again") from None


def add_context(name: str, values: dict[str, Any], *, replace: bool = False, use: bool = False,
                path: Path | None = None) -> bool:
    """Store a context (values as in the file: references for secrets); True if it replaced one. Exists and
    not ``replace``: exit 2."""
    import tomlkit

    check_name(name)
    where = f"context {name}"
    check_settings(where, values)
    with editing(path) as doc:
        contexts = doc.get("contexts")
        if contexts is None:
            contexts = tomlkit.table(is_super_table=True)
            doc["contexts"] = contexts
        if name in contexts and not replace:
            raise BadInput(f"{where} already exists in {shown_path(path or config_path())}; "
                           "--replace to overwrite it, or rtjob context remove it first")
        table = tomlkit.table()
        for key, value in values.items():
            if key == "headers":
                headers = tomlkit.inline_table()
                for header, hv in value.items():
                    if isinstance(hv, dict):
                        ref = tomlkit.inline_table()
                        ref.update(hv)
                        hv = ref
                    headers[header] = hv
                table[key] = headers
            elif isinstance(value, dict):
                ref = tomlkit.inline_table()
                ref.update(value)
                table[key] = ref
            else:
                table[key] = value
        existed = name in contexts
        contexts[name] = table
        if use:
            _set_current(doc, name)
    return existed


def _set_current(doc: Any, name: str | None) -> None:
    if name is None:
        doc.pop("current", None)
    else:
        doc["current"] = name  # tomlkit puts a new key above the tables


def remove_context(name: str, path: Path | None = None) -> bool:
    """Remove a context; True if it was the current one (which is then unset)."""
    with editing(path) as doc:
        contexts = doc.get("contexts") or {}
        Config(path or config_path(), None, {k: _plain(v) for k, v in contexts.items()}).get(name, "context remove")
        del contexts[name]
        was_current = _plain(doc.get("current")) == name
        if was_current:
            _set_current(doc, None)
        if not contexts:
            doc.pop("contexts", None)
    return was_current


def use_context(name: str | None, path: Path | None = None) -> None:
    """Make ``name`` the current context (None: no current context)."""
    with editing(path) as doc:
        if name is not None:
            contexts = doc.get("contexts") or {}
            Config(path or config_path(), None, {k: _plain(v) for k, v in contexts.items()}).get(name, "context use")
        _set_current(doc, name)
