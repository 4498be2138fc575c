"""What a notification says: the message, its text and JSON body, and the error line a log shows.

Stdlib only: the run side imports it (tests/unit/test_cluster_side_imports.py)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

_MASK = "****"


@dataclass
class Message:
    """What a notification says. ``outcome`` is one of rtjob_contract.NOTIFY_OUTCOMES, or ``retrying-N`` for
    the retry that starts attempt N (each retry is its own outcome, claimed once). ``error``: the first line is
    sent. ``log_command`` empty: ``rtjob logs <run id>``."""

    job: str | None
    run_id: str
    outcome: str
    duration_s: float | None
    cost_usd: float | None
    error: str | None
    log_command: str = ""

    def __post_init__(self) -> None:
        self.log_command = self.log_command or f"rtjob logs {self.run_id}"

    @property
    def kind(self) -> str:
        """The outcome as `notify: on:` names it (``retrying-2`` → ``retrying``)."""
        return self.outcome.partition("-")[0]

    @property
    def error_line(self) -> str | None:
        lines = [line.strip() for line in (self.error or "").splitlines() if line.strip()]
        return lines[0] if lines else None

    @property
    def title(self) -> str:
        return f"rtjob: {self.job or self.run_id} {self.shown_outcome}"

    @property
    def shown_outcome(self) -> str:
        kind, _, attempt = self.outcome.partition("-")
        return f"{kind} (attempt {attempt})" if attempt else kind

    def text(self) -> str:
        """The message as a few lines of plain text (Slack, apprise, and the webhook's ``text``)."""
        lines = [self.title, f"run: {self.run_id}"]
        if self.duration_s is not None:
            lines.append(f"duration: {human_duration(self.duration_s)}")
        if self.cost_usd is not None:
            lines.append(f"cost: ${self.cost_usd:,.2f}")
        if self.error_line:
            lines.append(f"error: {self.error_line}")
        lines.append(f"log: {self.log_command}")
        return "\n".join(lines)

    def to_json(self) -> dict[str, object]:
        """The generic webhook's JSON body."""
        return {"job": self.job, "run_id": self.run_id, "outcome": self.outcome, "duration_s": self.duration_s,
                "cost_usd": self.cost_usd, "error": self.error_line, "log_command": self.log_command,
                "text": self.text()}


def error_line_of(log_text: str) -> str | None:
    """The error as a log shows it: the last line of its last Python traceback (``ValueError: bad lr``), the line
    a person looks for; None when the log holds no traceback."""
    lines = log_text.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("Traceback (most recent call last):")]
    if not starts:
        return None
    for line in lines[starts[-1] + 1:]:
        if line.strip() and not line[0].isspace():  # the frames are indented; the exception line is not
            return line.strip()
    return None


def human_duration(seconds: float) -> str:
    """42s, 3m 07s, 2h 05m."""
    total = max(0, round(seconds))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h {minutes:02d}m"
    return f"{minutes}m {secs:02d}s" if minutes else f"{secs}s"


def message_from(data: Mapping[str, Any]) -> Message:
    """A message as ``Message.to_json`` recorded it."""
    def number(key: str) -> float | None:
        value = data.get(key)
        return float(value) if isinstance(value, (int, float)) else None

    return Message(job=data.get("job"), run_id=str(data.get("run_id")), outcome=str(data.get("outcome")),
                   duration_s=number("duration_s"), cost_usd=number("cost_usd"), error=data.get("error"),
                   log_command=str(data.get("log_command") or ""))


def masked(message: Message, secrets: list[str]) -> Message:
    """The message with the targets' URLs and the run's known secrets out of its free text."""

    def clean(text: str | None) -> str | None:
        if not text:
            return text
        for secret in secrets:
            text = text.replace(secret, _MASK)
        from ..core.redact import REDACTOR  # stdlib only, but outside this module's own imports

        return REDACTOR.text(text)

    return Message(message.job, message.run_id, message.outcome, message.duration_s, message.cost_usd,
                   clean(message.error), message.log_command)
