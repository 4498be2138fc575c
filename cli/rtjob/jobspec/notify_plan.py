"""A job's `notify:` as resolved for one run: the outcomes, the targets (each naming the variable that holds its URL,
never the URL) and where it came from; the URLs themselves come from this client's environment, as secrets."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import rtjob_contract as contract

from ..core.errors import BadInput

if TYPE_CHECKING:  # pydantic's models: the CLI's, never loaded by the run side through this module
    from .schema import JobSpec, NotifyTarget
    from .settings import Settings


@dataclass(frozen=True)
class NotifyPlan:
    """The run's notifications as resolved: which outcomes, which targets (type, the environment variable that
    holds its URL: never the URL), and where the `notify:` came from (``render --explain``)."""

    on: tuple[str, ...]
    # {"type", "env": the variable that holds its URL (a github target's token)} + a github target's repo, api_url
    targets: tuple[dict[str, str], ...]
    steps: bool
    source: str

    def to_json(self) -> dict[str, Any]:
        """What RTJOB_NOTIFY holds (JSON, no URL) and render shows."""
        return {"on": list(self.on), "targets": [dict(t) for t in self.targets], "steps": self.steps}


def resolve_notify(spec: JobSpec, shown: str, settings: Settings, data_env: dict[str, str],
                   client_env: Mapping[str, str] | None = None) -> tuple[NotifyPlan | None, dict[str, str]]:
    """The job's `notify:`, else the settings' (project config or a context): the most specific wins whole.
    Returns it and the variables to add to the job's env: each target's URL, forwarded from this client's
    environment (a secret: the redactor masks the variables RTJOB_NOTIFY names), and RTJOB_NOTIFY itself."""
    from .table_settings import parsed

    client_env = os.environ if client_env is None else client_env
    if spec.notify is not None:
        notify, source = spec.notify, shown
    else:
        notify, source = parsed(settings, "notify"), settings.source("notify")
        if notify is None:
            return None, {}
    plan = NotifyPlan(on=tuple(dict.fromkeys(notify.on)), targets=tuple(_target_json(t) for t in notify.targets),
                      steps=notify.steps, source=source)
    from_where = "" if source == shown else f" (notify from {source})"
    env: dict[str, str] = {}
    for kind, name in ((t["type"], t["env"]) for t in plan.targets):
        if name in data_env:
            raise BadInput(f"{shown}: env_vars sets {name}, which a notify {kind} target{from_where} references: "
                           f"leave it out; rtjob forwards {name} from your environment as a secret")
        value = client_env.get(name, "")
        if not value.strip():
            raise BadInput(f"{shown}: environment variable {name} is not set (the notify {kind} target"
                           f"{from_where} references it; rtjob forwards it to the run as a secret)")
        env[name] = value
    env[contract.ENV_NOTIFY] = json.dumps(plan.to_json(), separators=(",", ":"))
    return plan, env


def _target_json(target: NotifyTarget) -> dict[str, str]:
    out = {"type": target.type, "env": target.secret.env}
    if target.type == "github":
        out["repo"] = str(target.repo)
        out["api_url"] = (target.api_url or contract.GITHUB_API_URL).rstrip("/")
    return out
