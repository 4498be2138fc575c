"""The view lines of a run mirrored to an experiment tracker (the record's ``tracking``, runside/tracking/)."""

from __future__ import annotations

from typing import Any


def tracking_lines(tracking: dict[str, Any] | None) -> list[str]:
    """``mlflow:      URL`` (or where it was going), and what did not reach it with the command that sends it."""
    mlflow = (tracking or {}).get("mlflow")
    if not isinstance(mlflow, dict):
        return []
    where = mlflow.get("url") or f"{mlflow.get('tracking_uri')} (experiment {mlflow.get('experiment')}, no run yet)"
    lines = [f"mlflow:      {where}"]
    if mlflow.get("resend"):
        why = mlflow.get("fault") or "MLflow was not reached before the run ended"
        lines.append(f"mlflow:      {mlflow.get('unsent') or 0} metric(s) not sent ({why}): "
                     f"`{mlflow['resend']}` sends them")
    return lines
