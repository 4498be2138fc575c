"""`rtjob context list|show|use|add|remove`: named places to run, in the user's config (jobspec/contexts.py)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import click

from ..backends import WITH_ADDRESS
from ..core.errors import EXIT_SUCCEEDED, BadInput
from .options import CONTEXT, BackendChoice, output_option
from .printing import echo, print_data, print_rich, say

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _shown(value: Any) -> Any:
    """A stored value as printed: references as env:NAME / file:PATH, URLs without a password."""
    from ..core.redact import mask_url

    if isinstance(value, dict) and len(value) == 1 and next(iter(value)) in ("env", "file"):
        kind, target = next(iter(value.items()))
        return f"{kind}:{target}"
    if isinstance(value, dict):
        return {k: _shown(v) for k, v in value.items()}
    return mask_url(value) if isinstance(value, str) else value


@click.group("context", context_settings=CONTEXT)
def context_group() -> None:
    """Named contexts (backend, address, headers, TLS, storage, Anyscale cloud/project) in
    $XDG_CONFIG_HOME/rtjob/config.toml (default ~/.config/rtjob/config.toml).

    \b
    Precedence, highest first: flags > --context NAME / RTJOB_CONTEXT > environment variables
    > [tool.rtjob] > the current context (rtjob context use) > defaults; render --explain shows each source.

    \b
    Examples:
      rtjob context add prod --address https://ray-prod:8265 --header-env 'Authorization=PROD_RAY_TOKEN'
      rtjob context add dev --address http://dev-head:8265 --use
      rtjob submit ddp-resnet --context prod
    """


@context_group.command("list")
@output_option
def list_contexts(output: str) -> int:
    """List the contexts; * marks the current one.

    \b
    Examples:
      rtjob context list
      rtjob context list -o json
    """
    from ..jobspec.contexts import read_config, shown_path

    config = read_config()
    rows = [{"name": name, "current": name == config.current, **{k: _shown(v) for k, v in ctx.items()}}
            for name, ctx in sorted(config.contexts.items())]
    if output != "text":
        print_data({"config": str(config.path), "current": config.current, "contexts": rows}, output)
        return EXIT_SUCCEEDED
    if not rows:
        say(f"no contexts in {shown_path(config.path)} (add one: rtjob context add NAME --address URL)")
        return EXIT_SUCCEEDED
    from rich.table import Table

    table = Table(box=None, header_style="bold")
    for column in ("CURRENT", "NAME", "BACKEND", "ADDRESS", "STORAGE"):
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row("*" if row["current"] else "", row["name"], row.get("backend") or "-",
                      str(row.get("address") or "-"), row.get("storage") or "-")
    print_rich(table)
    return EXIT_SUCCEEDED


@context_group.command("show")
@click.argument("name", required=False)
@output_option
def show_context(name: str | None, output: str) -> int:
    """Show one context as stored (secrets stay references); default: the current one.

    \b
    Examples:
      rtjob context show prod
      rtjob context show -o yaml
    """
    from ..jobspec.contexts import read_config, shown_path

    config = read_config()
    if name is None:
        if config.current is None:
            raise BadInput(f"no current context in {shown_path(config.path)}: name one, or rtjob context use NAME")
        name = config.current
    stored = {k: _shown(v) for k, v in config.get(name, "context show").items()}
    if output != "text":
        print_data({"name": name, "current": name == config.current, "config": str(config.path), "settings": stored},
                   output)
        return EXIT_SUCCEEDED
    lines = [f"context {name}{' (current)' if name == config.current else ''}  ({shown_path(config.path)})"]
    for key, value in stored.items():
        if isinstance(value, dict):
            lines += [f"  {key}:"] + [f"    {k}: {v}" for k, v in value.items()]
        else:
            lines.append(f"  {key}: {str(value).lower() if isinstance(value, bool) else value}")
    echo("\n".join(lines))
    return EXIT_SUCCEEDED


@context_group.command("use")
@click.argument("name", required=False)
@click.option("--none", "unset", is_flag=True, help="No current context from now on.")
def use(name: str | None, unset: bool) -> int:
    """Make NAME the current context (it ranks below the environment and the project config).

    \b
    Examples:
      rtjob context use dev
      rtjob context use --none
    """
    from ..jobspec.contexts import use_context

    if (name is None) == (not unset):
        raise BadInput("context use: give a context NAME or --none")
    use_context(name)
    say(f"current context: {name}" if name else "no current context")
    return EXIT_SUCCEEDED


def _pairs(items: tuple[str, ...], flag: str, what: str) -> dict[str, str]:
    """'Header=VALUE' items of --header-env / --header-file."""
    out: dict[str, str] = {}
    for item in items:
        header, sep, target = item.partition("=")
        if not sep or not header.strip() or not target.strip():
            raise BadInput(f"{flag} {item[:60]!r}: expected 'Header={what}', e.g. {flag} 'Authorization={what}'")
        out[header.strip()] = target.strip()
    return out


def _env_ref(name: str, flag: str) -> dict[str, str]:
    if not _ENV_NAME.match(name):
        raise BadInput(f"{flag} {name[:60]!r}: not an environment variable name (letters, digits, _)")
    return {"env": name}


def _file_ref(path: str, flag: str) -> dict[str, str]:
    target = Path(path).expanduser().resolve()
    if not target.is_file():
        raise BadInput(f"{flag}: {target}: no such file (the context would read the secret from it)")
    return {"file": str(target)}


def _headers(headers: tuple[str, ...], header_env: tuple[str, ...], header_file: tuple[str, ...]) -> dict[str, Any]:
    from ..core.redact import is_secret
    from ..jobspec.overrides import parse_headers

    out: dict[str, Any] = {}
    for name, value in parse_headers(headers).items():
        if is_secret(name, value):  # refused, and never echoed: the file must never hold a secret
            raise BadInput(f"--header {name!r}: looks like a secret, which a context never stores in clear; "
                           f"use --header-env '{name}=VAR' (or --header-file '{name}=PATH')")
        out[name] = value
    parse_headers([f"{h}: x" for h in (*_pairs(header_env, "--header-env", "VAR"),
                                      *_pairs(header_file, "--header-file", "PATH"))])  # the names' checks
    out.update({h: _env_ref(v, "--header-env") for h, v in _pairs(header_env, "--header-env", "VAR").items()})
    out.update({h: _file_ref(v, "--header-file") for h, v in _pairs(header_file, "--header-file", "PATH").items()})
    return out


@context_group.command("add")
@click.argument("name")
@click.option("--backend", type=BackendChoice(), help=f"Where to run (default: {WITH_ADDRESS} with an address).")
@click.option("--address", help="Ray dashboard / Jobs API address, e.g. https://ray-prod:8265.")
@click.option("--address-env", metavar="VAR", help="Read the address from $VAR (an address with a password).")
@click.option("--header", "headers", multiple=True, metavar="'NAME: VALUE'",
              help="A header that is not a secret (repeatable); secrets are refused: use --header-env.")
@click.option("--header-env", multiple=True, metavar="'NAME=VAR'",
              help="A header whose value is read from $VAR when the context is used (repeatable).")
@click.option("--header-file", multiple=True, metavar="'NAME=PATH'",
              help="A header whose value is read from the file PATH when the context is used (repeatable).")
@click.option("--no-verify-tls", is_flag=True, help="Do not verify the cluster's TLS certificate.")
@click.option("--storage", help="Where runs write: s3://bucket/prefix or a path.")
@click.option("--no-storage-check", is_flag=True,
              help="Submits do not write the run's record to storage before sending it (storage_check = false): "
                   "the cluster writes with a role of its own.")
@click.option("--compute-config", help="Default compute config (name or path).")
@click.option("--cloud", help="Anyscale cloud for jobs that name none.")
@click.option("--project", help="Anyscale project for jobs that name none.")
@click.option("--use", "make_current", is_flag=True, help="Make it the current context too.")
@click.option("--replace", is_flag=True, help="Overwrite a context of the same name.")
def add(name: str, backend: str | None, address: str | None, address_env: str | None, headers: tuple[str, ...],
        header_env: tuple[str, ...], header_file: tuple[str, ...], no_verify_tls: bool, storage: str | None,
        no_storage_check: bool, compute_config: str | None, cloud: str | None, project: str | None, make_current: bool,
        replace: bool) -> int:
    """Add context NAME. Secrets are stored as references (--header-env, --header-file, --address-env), never
    in clear.

    \b
    Examples:
      rtjob context add prod --address https://ray-prod:8265 --header-env 'Authorization=PROD_RAY_TOKEN'
      rtjob context add any --backend anyscale --cloud my-cloud --project ml --storage s3://bucket/runs
    """
    from ..core.redact import url_password
    from ..jobspec.contexts import add_context, config_path, shown_path

    if address and address_env:
        raise BadInput("context add: --address or --address-env, not both")
    if address and url_password(address):
        raise BadInput("--address holds a password, which a context never stores in clear; "
                       "put the address in a variable and use --address-env VAR")
    values: dict[str, Any] = {"backend": backend, "address": address, "storage": storage,
                              "compute_config": compute_config, "cloud": cloud, "project": project}
    values = {k: v for k, v in values.items() if v}
    if address_env:
        values["address"] = _env_ref(address_env, "--address-env")
    header_values = _headers(headers, header_env, header_file)
    if header_values:
        values["headers"] = header_values
    if no_verify_tls:
        values["verify_tls"] = False
    if no_storage_check:
        values["storage_check"] = False
    replaced = add_context(name, values, replace=replace, use=make_current)
    say(f"context {name} {'replaced' if replaced else 'added'} in {shown_path(config_path())}"
        + ("; it is the current context" if make_current else ""))
    return EXIT_SUCCEEDED


@context_group.command("remove")
@click.argument("name")
def remove(name: str) -> int:
    """Remove context NAME (if it was the current one, no context is current afterwards).

    \b
    Examples:
      rtjob context remove dev
    """
    from ..jobspec.contexts import remove_context

    was_current = remove_context(name)
    say(f"context {name} removed" + ("; no context is current now" if was_current else ""))
    return EXIT_SUCCEEDED
