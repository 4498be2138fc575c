"""Sending one message to a run's targets: the claim first (one sender per outcome), then every target with its
tries, then what the targets answered to ``settle``. A target's URL (the secret) is in no line said.

Imports at module level only the standard library, ``rtjob_contract`` and ``requests``: the run side sends
(tests/unit/test_cluster_side_imports.py)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import requests

import rtjob_contract as contract

from .config import NotifyConfig, Target
from .message import Message, masked

TRIES = 3  # per target
DEADLINE_S = 20.0  # all tries of one target
REQUEST_TIMEOUT_S = 5.0  # one request (connect and read)
RETRY_DELAY_S = 1.0  # before the second try; doubled before each next one
EXTRA_HINT = "pip install 'rtjob[notify]'"  # where apprise comes from


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


def _send_one(target: Target, message: Message, secrets: list[str], retry_delay_s: float) -> str | None:
    """None when the target got the message, else why not (never the URL or an exception's text)."""
    if not target.url:
        return f"not sent: {target.env} is not set in this environment"
    message = masked(message, secrets)
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
