"""Who a run tells, and of what: the notify config the client put into the job's environment (RTJOB_NOTIFY: the
outcomes and the targets, each naming the variable that holds its URL), read back with each URL from that variable.

Stdlib and ``rtjob_contract`` only: the run side imports it (tests/unit/test_cluster_side_imports.py)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field

import rtjob_contract as contract


@dataclass(frozen=True)
class Target:
    type: str  # one of rtjob_contract.NOTIFY_TARGET_TYPES
    env: str  # the variable that holds the URL (a github target's token): how every line names the target
    url: str = field(repr=False)  # its value; "" when the variable is not set in this environment
    repo: str = ""  # a github target's OWNER/NAME
    api_url: str = contract.GITHUB_API_URL  # a github target's API (GitHub Enterprise's, or a test's)

    @property
    def label(self) -> str:
        return f"{self.type} target ({self.env})"


@dataclass(frozen=True)
class NotifyConfig:
    on: tuple[str, ...]
    targets: tuple[Target, ...]
    steps: bool = False


def config_from_env(env: Mapping[str, str]) -> NotifyConfig | None:
    """The run's notify config from an environment: RTJOB_NOTIFY, each target's URL from the variable it names
    (a target whose variable is unset keeps an empty URL: ``send`` says so). None: the run notifies nobody.
    A malformed RTJOB_NOTIFY raises ValueError (its text holds no URL)."""
    raw = env.get(contract.ENV_NOTIFY)
    if not raw:
        return None
    try:
        data = json.loads(raw)
        on = tuple(str(o) for o in data["on"])
        targets = tuple(Target(str(t["type"]), str(t["env"]), env.get(str(t["env"]), "").strip(),
                               str(t.get("repo") or ""), str(t.get("api_url") or contract.GITHUB_API_URL))
                        for t in data["targets"])
        steps = bool(data.get("steps", False))
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"{contract.ENV_NOTIFY} is not a notify config ({type(exc).__name__})") from None
    return NotifyConfig(on=on, targets=targets, steps=steps)


def run_end_notifies(config: NotifyConfig, env: Mapping[str, str]) -> bool:
    """Whether a run's own end is told: a pipeline's step only with ``notify.steps`` (the pipeline's supervisor
    sends the pipeline's one message)."""
    return config.steps or not env.get(contract.ENV_PIPELINE_ID)
