"""The settings that are tables of a job's own blocks (`notify`, `tracking`), checked as a job's block is: one line
naming where, or nothing. The project config and the contexts file both check with these (contexts.check_settings)."""

from __future__ import annotations

from typing import Any

from ..core.errors import BadInput

# Each table setting: its model (module of this package, class) and an example of its TOML form (said when the
# value is not a table). notify's target URLs are references ``{env = "VAR"}`` only (schema.Notify); tracking holds
# an address, never a token (tracking.Tracking).
TABLES = {
    "notify": ("schema", "Notify",
               'notify = {on = ["failed"], targets = [{type = "slack", url = {env = "SLACK_URL"}}]}'),
    "tracking": ("tracking", "Tracking",
                 'tracking = {mlflow = {tracking_uri = "https://mlflow.example.com", experiment = "team"}}'),
}
EXAMPLES = {key: example for key, (_, _, example) in TABLES.items()}


def _model(key: str) -> Any:
    """The setting's model, imported when first asked for (pydantic's models are the heavy part of jobspec)."""
    import importlib

    module, name, _ = TABLES[key]
    return getattr(importlib.import_module(f"{__package__}.{module}"), name)


def parsed(settings: Any, key: str) -> Any:
    """The table setting ``key`` of ``settings`` as its model (None: unset); checked already when it was read."""
    value = settings.get(key)
    return None if value is None else _model(key).model_validate(value)


def check_table(key: str, where: str, value: Any) -> None:
    """The table setting ``key`` (one of EXAMPLES) validated as the job's own block would be, or one line."""
    from pydantic import ValidationError

    from .schema import describe_validation_error

    if not isinstance(value, dict):
        raise BadInput(f"{where}: {key} must be a table, e.g. {EXAMPLES[key]}")
    model = _model(key)
    try:
        model.model_validate(value)
    except ValidationError as exc:
        raise BadInput(describe_validation_error(exc, model, lambda loc: where, key)) from None
