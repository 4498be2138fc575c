"""The trackers a run is mirrored to, as the companion's one stage (``Mirrors``): RTJOB_TRACKING read once
(jobspec/tracking.py writes it), MLflow's mirror (mirror.py) and W&B's (wandb_mirror.py) each fed and ended on
its own, so one tracker's fault never starves the other; their notes are one ``tracking`` in the run's record."""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import rtjob_contract as contract

from ...core.clock import now_iso

if TYPE_CHECKING:
    from ...storage.objects import Objects
    from ..outcome import Outcome
    from .mirror import MlflowMirror
    from .wandb_mirror import WandbMirror

Note = Callable[[dict[str, Any]], None]  # the record's `tracking` (the companion writes it)


def mirror_for(env: Mapping[str, str], run_id: str, rows_folder: str | None, say: Callable[[str], None],
               note: Note, objects: Objects | None = None) -> Mirrors | None:
    """The run's mirrors when the job's env asks for one (RTJOB_TRACKING) and the rows have a folder (``objects``:
    the run's storage, where its epoch history is)."""
    from ...trackers.mlflow_rest import run_tags
    from ..outcome import job_metadata
    from .feeds import EpochFeed
    from .mirror import mlflow_mirror

    raw = env.get(contract.ENV_TRACKING)
    if not raw or not rows_folder:
        return None
    mirrors = Mirrors(note)
    attempt = job_metadata(env).get(contract.META_ATTEMPT) or 1
    try:
        config = json.loads(raw)
        tags = run_tags(config, run_id, attempt)
        if config.get("mlflow"):
            mirrors.mlflow = mlflow_mirror(config, run_id, rows_folder, say, mirrors.part, tags, objects, env)
        if config.get("wandb"):
            mirrors.wandb = _wandb(config, run_id, rows_folder, say, mirrors.part, tags,
                                   EpochFeed(objects, say) if objects is not None else None, env)
    except (ValueError, KeyError, TypeError, AttributeError):
        say(f"{contract.ENV_TRACKING} is not what rtjob writes: the run is not mirrored")
        return None
    return mirrors if mirrors.mlflow or mirrors.wandb else None


def _wandb(config: dict[str, Any], run_id: str, folder: str, say: Callable[[str], None], note: Note,
           tags: dict[str, str], epochs: Any, env: Mapping[str, str]) -> WandbMirror | None:
    spec = importlib.util.find_spec("wandb")  # the job's environment's own package, never rtjob's
    if spec is None or spec.origin is None:  # none, or W&B's own run folder, ./wandb, read as a namespace package
        say("tracking: wandb: the job's environment has no `wandb` package (add it to the job's requirements): "
            "the run is not mirrored to W&B")
        note({"wandb": {"project": config["wandb"]["project"], "fault": "no wandb package in the job's environment"}})
        return None
    from .wandb_mirror import WandbMirror

    return WandbMirror(config["wandb"], run_id, folder, say, note, dict(config.get("params", {})), tags, epochs,
                       api_key=env.get("WANDB_API_KEY"))  # the job's: a `secrets:` entry the companion resolved


def noted_in(outcome: Outcome) -> Note:
    """The record's ``tracking`` written as one of the outcome's owed writes (tried again while storage fails)."""
    def note(tracking: dict[str, Any]) -> None:
        from ...core import lifecycle

        outcome._write([lifecycle.Tracked(tracking)], indexed=False)  # noqa: SLF001

    return note


class Mirrors:
    def __init__(self, note: Note) -> None:
        self.note = note
        self.mlflow: MlflowMirror | None = None
        self.wandb: WandbMirror | None = None
        self.parts: dict[str, Any] = {}

    def part(self, tracking: dict[str, Any]) -> None:
        """One tracker's note: the record's ``tracking`` holds every tracker's latest (the newest note wins when
        two writers' records meet: its ``at``)."""
        self.parts.update({k: v for k, v in tracking.items() if k != "at"})
        self.note({**self.parts, "at": now_iso()})

    def each(self) -> list[tuple[str, MlflowMirror | WandbMirror]]:
        return [(name, one) for name, one in (("the MLflow mirror", self.mlflow), ("the W&B mirror", self.wandb))
                if one is not None]
