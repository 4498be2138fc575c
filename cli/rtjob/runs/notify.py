"""Tell people how a run ended: one message per outcome to each target of the run's `notify:`.

Runs where the outcome is seen (the run's companion on the cluster), so it imports at module level only the
standard library, ``rtjob_contract`` and ``requests`` (tests/unit/test_cluster_side_imports.py).

The client puts the job's notify config into the job's environment (``RTJOB_NOTIFY``: outcomes and targets, each
target naming the variable that holds its URL) and forwards each URL under that variable as a secret;
``config_from_env`` reads both back from an environment. ``send`` posts one message to every target:

* only for an outcome the config lists, and only when ``claim(outcome)`` says this process is the first to
  claim it (``claim_in``: ``rtjob_contract.notify_claim_marker(outcome)`` created if absent): one sender per
  outcome; what the targets answered is recorded after the tries (``settle_in``: ``notified_marker`` once every
  target got it, else ``undelivered_marker`` with each target's error), never before;
* a generic webhook gets a JSON POST of the message's fields, a Slack incoming webhook ``{"text": ...}``, an
  apprise URL (any service apprise knows; the optional ``notify`` extra) apprise's own request, a ``github``
  target a repository_dispatch (``rtjob_contract.GITHUB_DISPATCH_EVENT``, the fields as its client_payload);
* at most ``TRIES`` tries in ``DEADLINE_S`` seconds per target, each request at most ``REQUEST_TIMEOUT_S``;
  connection errors, time-outs, 5xx and 429 are retried, other answers are not;
* a target that fails is one line through ``say``, naming the target by its type and variable, never by its URL
  (the URL is the secret, whole or in part: Slack and Discord keep it in the path); ``send`` never raises for it.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import requests

import rtjob_contract as contract

TRIES = 3  # per target
DEADLINE_S = 20.0  # all tries of one target
REQUEST_TIMEOUT_S = 5.0  # one request (connect and read)
RETRY_DELAY_S = 1.0  # before the second try; doubled before each next one
EXTRA_HINT = "pip install 'rtjob[notify]'"  # where apprise comes from
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


# What became of one message: the labels of the targets that got it, and {"target": label, "error": why} of each
# that did not.
Settle = Callable[["Message", list[str], list[dict[str, str]]], None]


def send(config: NotifyConfig, message: Message, claim: Callable[[str], bool], *, say: Callable[[str], None],
         retry_delay_s: float = RETRY_DELAY_S, settle: Settle | None = None) -> list[str]:
    """Send ``message`` to every target of ``config`` if its outcome is one ``config.on`` lists and
    ``claim(message.outcome)`` (called once, before anything is sent) returns True. Returns the labels of the
    targets that got it (``slack target (SLACK_URL)``); every failure is one line through ``say``; ``settle``
    hears what became of the message once every target was tried. Never raises for a target, a claim that fails
    (then nothing is sent: at most once), a settle that fails or apprise missing."""
    if message.kind not in config.on or not config.targets:
        return []
    try:
        claimed = claim(message.outcome)
    except Exception as exc:  # noqa: BLE001 - storage trouble must not end the caller
        say(f"notify: {message.outcome}: not sent: the notification could not be claimed ({type(exc).__name__})")
        return []
    if not claimed:
        return []
    sent, failed = deliver(config.targets, message, say=say, retry_delay_s=retry_delay_s)
    if settle is not None:
        try:
            settle(message, sent, failed)
        except Exception as exc:  # noqa: BLE001 - storage trouble must not end the caller
            say(f"notify: {message.outcome}: what the targets answered is not recorded ({type(exc).__name__})")
    return sent


def deliver(targets: tuple[Target, ...], message: Message, *, say: Callable[[str], None],
            retry_delay_s: float = RETRY_DELAY_S) -> tuple[list[str], list[dict[str, str]]]:
    """``message`` to each of ``targets`` (no claim): the labels of those that got it, and each failure."""
    secrets = [t.url for t in targets if t.url]
    sent: list[str] = []
    failed: list[dict[str, str]] = []
    for target in targets:
        try:
            failure = _send_one(target, message, secrets, retry_delay_s)
        except Exception as exc:  # noqa: BLE001 - a target never ends the caller; its text may hold the URL
            failure = f"not sent ({type(exc).__name__})"
        if failure is None:
            sent.append(target.label)
        else:
            failed.append({"target": target.label, "error": failure})
            say(f"notify: {target.label}: {failure}")
    return sent, failed


# -- the run folder's markers: who sends, and what became of each message ------------------------------------


def claim_in(objects: Any, outcome: str, stamp: str) -> bool:
    """Claim ``outcome``'s notification in a run's folder (``objects``: storage.objects.Objects): True for the one
    process that creates its claim marker first."""
    from ..storage.objects import PreconditionFailed  # the run side's storage: importable on the cluster

    try:
        objects.put(contract.notify_claim_marker(outcome), stamp.encode(), if_absent=True)
        return True
    except PreconditionFailed:
        return False


def settle_in(objects: Any, message: Message, sent: list[str], failed: list[dict[str, str]], stamp: str) -> None:
    """What became of ``message``, in the run's folder: ``notified_marker`` once every target got it (an earlier
    ``undelivered_marker`` removed), else ``undelivered_marker`` with each target's error (and the message, which
    `rtjob notify` resends)."""
    data = {"at": stamp, "message": message.to_json(), "delivered": sent, "undelivered": failed}
    body = json.dumps(data, indent=2).encode()
    if failed:
        objects.put(contract.undelivered_marker(message.outcome), body)
        return
    objects.put(contract.notified_marker(message.outcome), body)
    if objects.head(contract.undelivered_marker(message.outcome)) is not None:
        objects.delete(contract.undelivered_marker(message.outcome))


def notices_in(objects: Any) -> dict[str, dict[str, Any]]:
    """Each claimed outcome of a run (its folder's markers): {"delivered": bool | None (None: claimed, no answer
    recorded yet), "at", "message", "delivered_to", "undelivered"}, by outcome. Read by name (an end's outcomes,
    then retrying-2, -3, ... while claimed): a run's folder may hold many files, never listed for this."""
    out: dict[str, dict[str, Any]] = {}

    def read(outcome: str) -> bool:
        if objects.head(contract.notify_claim_marker(outcome)) is None:
            return False
        entry: dict[str, Any] = {"delivered": None}
        for marker, state in ((contract.notified_marker(outcome), True), (contract.undelivered_marker(outcome), False)):
            got = objects.get(marker, 1 << 20)
            if got is None:
                continue
            try:
                data = json.loads(got.data)
            except ValueError:
                data = {}
            entry.update({"delivered": state, "at": data.get("at"), "message": data.get("message"),
                          "delivered_to": data.get("delivered") or [], "undelivered": data.get("undelivered") or []})
            break  # delivered (by a resend) stands over an earlier failure
        out[outcome] = entry
        return True

    for outcome in contract.NOTIFY_OUTCOMES:
        if outcome != "retrying":
            read(outcome)
    attempt = 2
    while attempt <= 101 and read(f"retrying-{attempt}"):
        attempt += 1
    return out


def message_from(data: Mapping[str, Any]) -> Message:
    """A message as ``Message.to_json`` recorded it."""
    def number(key: str) -> float | None:
        value = data.get(key)
        return float(value) if isinstance(value, (int, float)) else None

    return Message(job=data.get("job"), run_id=str(data.get("run_id")), outcome=str(data.get("outcome")),
                   duration_s=number("duration_s"), cost_usd=number("cost_usd"), error=data.get("error"),
                   log_command=str(data.get("log_command") or ""))


def _masked(message: Message, secrets: list[str]) -> Message:
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


def _send_one(target: Target, message: Message, secrets: list[str], retry_delay_s: float) -> str | None:
    """None when the target got the message, else why not (never the URL or an exception's text)."""
    if not target.url:
        return f"not sent: {target.env} is not set in this environment"
    message = _masked(message, secrets)
    if target.type == "apprise":
        return _apprise(target, message, retry_delay_s)
    url, headers = target.url, {}
    if target.type == "slack":
        body: dict[str, object] = {"text": message.text()}
    elif target.type == "webhook":
        body = message.to_json()
    elif target.type == "github":  # repository_dispatch: the token is the secret, the URL is not
        url = f"{target.api_url.rstrip('/')}/repos/{target.repo}/dispatches"
        headers = {"Authorization": f"Bearer {target.url}", "Accept": "application/vnd.github+json",
                   "X-GitHub-Api-Version": "2022-11-28"}
        body = {"event_type": contract.GITHUB_DISPATCH_EVENT,
                "client_payload": {k: v for k, v in message.to_json().items() if k != "text"}}
    else:
        return f"not sent: unknown target type (known: {', '.join(contract.NOTIFY_TARGET_TYPES)})"

    def post(timeout: float) -> tuple[bool, bool, str]:
        try:
            response = requests.post(url, json=body, headers=headers, timeout=timeout, allow_redirects=False)
        except requests.Timeout:
            return False, True, "timed out"
        except (requests.ConnectionError, requests.exceptions.ChunkedEncodingError):
            return False, True, "connection failed"
        except requests.RequestException as exc:  # an invalid URL ...: trying again changes nothing
            return False, False, type(exc).__name__
        code = response.status_code
        response.close()
        if 200 <= code < 300:
            return True, False, ""
        return False, code >= 500 or code == 429, f"HTTP {code}"

    return _tries(post, retry_delay_s)


def _tries(attempt: Callable[[float], tuple[bool, bool, str]], retry_delay_s: float) -> str | None:
    """Call ``attempt(timeout)`` -> (done, worth retrying, why not) at most TRIES times within DEADLINE_S."""
    deadline = time.monotonic() + DEADLINE_S
    why, tries = "", 0
    for n in range(TRIES):
        left = deadline - time.monotonic()
        if left <= 0.5:
            break
        tries += 1
        done, again, why = attempt(min(REQUEST_TIMEOUT_S, left))
        if done:
            return None
        if not again or n == TRIES - 1:
            break
        time.sleep(max(0.0, min(retry_delay_s * 2 ** n, deadline - time.monotonic() - 0.5)))
    return f"not sent after {tries} {'try' if tries == 1 else 'tries'} ({why or 'out of time'})"


def _apprise(target: Target, message: Message, retry_delay_s: float) -> str | None:
    try:
        import apprise
    except ImportError:
        return f"not sent: apprise is not installed here ({EXTRA_HINT})"
    notifier = apprise.Apprise()
    if not notifier.add(target.url):
        return "not sent: apprise does not take the URL (unknown scheme or malformed)"
    # apprise logs its failures with the service's host or more: kept out of the caller's output; its requests
    # time out after 4 s (connect) and 4 s (read) unless the URL says otherwise (cto=, rto=).
    log = logging.getLogger("apprise")
    handlers, propagate = log.handlers[:], log.propagate
    log.handlers, log.propagate = [logging.NullHandler()], False
    try:
        def notify(_timeout: float) -> tuple[bool, bool, str]:
            ok = bool(notifier.notify(title=message.title, body=message.text()))
            return ok, True, "" if ok else "apprise reported a failure"

        return _tries(notify, retry_delay_s)
    finally:
        log.handlers, log.propagate = handlers, propagate
