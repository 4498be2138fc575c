"""The view lines of a run mirrored to an experiment tracker (the record's ``tracking``, runside/tracking/)."""

from __future__ import annotations

from typing import Any


def tracking_lines(tracking: dict[str, Any] | None) -> list[str]:
    """``mlflow:      URL`` (or where it was going), and what did not reach it with the command that sends it;
    ``wandb:`` lines for a W&B run."""
    wandb = (tracking or {}).get("wandb")
    lines = _wandb_lines(wandb) if isinstance(wandb, dict) else []
    mlflow = (tracking or {}).get("mlflow")
    if not isinstance(mlflow, dict):
        return lines
    where = mlflow.get("url") or f"{mlflow.get('tracking_uri')} (experiment {mlflow.get('experiment')}, no run yet)"
    lines[:0] = [f"mlflow:      {where}"]
    if mlflow.get("resend"):
        why = mlflow.get("fault") or "MLflow was not reached before the run ended"
        lines.insert(1, f"mlflow:      {mlflow.get('unsent') or 0} metric(s) not sent ({why}): "
                        f"`{mlflow['resend']}` sends them")
    return lines


def _wandb_lines(wandb: dict[str, Any]) -> list[str]:
    """``wandb:       URL`` (an offline run: its folder, for `wandb sync`), and its fault."""
    where = wandb.get("url") or (f"{wandb['dir']} (offline: `wandb sync` sends it)" if wandb.get("dir")
                                 else f"project {wandb.get('project')}, no run yet")
    lines = [f"wandb:       {where}"]
    if wandb.get("fault"):
        resend = f": `{wandb['resend']}` sends what W&B kept" if wandb.get("resend") else ""
        lines.append(f"wandb:       {wandb['fault']}{resend}")
    return lines
