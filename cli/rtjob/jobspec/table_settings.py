"""The settings that are tables of a job's own blocks (`notify`, `tracking`), checked as a job's block is: one line
naming where, or nothing. The project config and the contexts file both check with these (contexts.check_settings)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..core.errors import BadInput


def check_notify(where: str, value: Any) -> None:
    """A `notify` table (schema.Notify: its target URLs are references ``{env = "VAR"}`` only), or one line."""
    from pydantic import ValidationError

    from .schema import Notify, describe_validation_error

    if not isinstance(value, dict):
        raise BadInput(f'{where}: notify must be a table, e.g. notify = {{on = ["failed"], targets = '
                       '[{type = "slack", url = {env = "SLACK_URL"}}]}')
    try:
        Notify.model_validate(value)
    except ValidationError as exc:
        raise BadInput(describe_validation_error(exc, Notify, lambda loc: where, "notify")) from None


def check_tracking(where: str, value: Any) -> None:
    """A `tracking` table (jobspec/tracking.Tracking: an address, never a token), or one line."""
    from pydantic import ValidationError

    from .schema import describe_validation_error
    from .tracking import Tracking

    if not isinstance(value, dict):
        raise BadInput(f'{where}: tracking must be a table, e.g. tracking = {{mlflow = {{tracking_uri = '
                       '"https://mlflow.example.com", experiment = "team"}}')
    try:
        Tracking.model_validate(value)
    except ValidationError as exc:
        raise BadInput(describe_validation_error(exc, Tracking, lambda loc: where, "tracking")) from None


TABLE_CHECKS: dict[str, Callable[[str, Any], None]] = {"notify": check_notify, "tracking": check_tracking}
