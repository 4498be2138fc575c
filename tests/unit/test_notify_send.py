"""notify/ against a real HTTP receiver on loopback: what a webhook, a Slack incoming webhook and an
apprise json:// URL receive, the retries (3 tries in 20 s at most), exactly once per claimed outcome, and a
target's URL (the secret: a token in its path) in no line said and no exception."""

from __future__ import annotations

import datetime
import json
import time
from pathlib import Path

import pytest
from rtjob import notify
from rtjob.notify import Message, NotifyConfig, Target, config_from_env, send
from support.webhook import Receiver

import rtjob_contract as contract

TOKEN = "SECRETXYZ123"  # what Slack keeps in the path of an incoming webhook's URL
SLACK_PATH = f"/services/T000/B000/{TOKEN}"
QUICK = 0.05  # the retry delay in these tests (the default is 1 s, doubled per try)




def _message(outcome: str = "failed", **changes: object) -> Message:
    fields: dict[str, object] = dict(job="ddp-resnet", run_id="rtjob-ddp-resnet-20261126-101500-ab12", outcome=outcome,
                                     duration_s=3725.0, cost_usd=1.5,
                                     error="RuntimeError: CUDA out of memory\n  at step 12\n")
    fields.update(changes)
    return Message(**fields)  # type: ignore[arg-type]


class Said(list[str]):
    def __call__(self, line: str) -> None:
        self.append(line)


def _claims() -> tuple[list[str], object]:
    claimed: list[str] = []

    def claim(outcome: str) -> bool:
        first = outcome not in claimed
        claimed.append(outcome)
        return first

    return claimed, claim


def _config(*targets: Target, on: tuple[str, ...] = ("failed", "succeeded")) -> NotifyConfig:
    return NotifyConfig(on=on, targets=targets)


def test_a_webhook_gets_the_messages_fields_as_json(receiver: Receiver) -> None:
    said = Said()
    target = Target("webhook", "HOOK_URL", receiver.url("/hook"))
    sent = send(_config(target), _message(), lambda _: True, say=said)
    assert sent == ["webhook target (HOOK_URL)"] and said == []
    [body] = receiver.bodies("/hook")
    assert isinstance(body, dict)
    assert {k: v for k, v in body.items() if k != "text"} == {
        "job": "ddp-resnet", "run_id": "rtjob-ddp-resnet-20261126-101500-ab12", "outcome": "failed",
        "duration_s": 3725.0, "cost_usd": 1.5, "error": "RuntimeError: CUDA out of memory",
        "log_command": "rtjob logs rtjob-ddp-resnet-20261126-101500-ab12"}
    assert body["text"].splitlines() == [
        "rtjob: ddp-resnet failed", "run: rtjob-ddp-resnet-20261126-101500-ab12", "duration: 1h 02m",
        "cost: $1.50", "error: RuntimeError: CUDA out of memory", "log: rtjob logs rtjob-ddp-resnet-20261126-101500-ab12"]
    [(_, headers, _)] = receiver.got
    assert headers["Content-Type"] == "application/json"


def test_slack_gets_an_incoming_webhook_text(receiver: Receiver) -> None:
    target = Target("slack", "SLACK_URL", receiver.url(SLACK_PATH))
    message = _message("succeeded", error=None, cost_usd=None, duration_s=42.4)
    assert send(_config(target), message, lambda _: True, say=Said()) == ["slack target (SLACK_URL)"]
    assert receiver.bodies(SLACK_PATH) == [{"text": "rtjob: ddp-resnet succeeded\n"
                                            "run: rtjob-ddp-resnet-20261126-101500-ab12\nduration: 42s\n"
                                            "log: rtjob logs rtjob-ddp-resnet-20261126-101500-ab12"}]


def test_a_500_then_200_is_retried_once(receiver: Receiver) -> None:
    receiver.script[SLACK_PATH] = [500]
    said = Said()
    sent = send(_config(Target("slack", "SLACK_URL", receiver.url(SLACK_PATH))), _message(), lambda _: True,
                say=said, retry_delay_s=QUICK)
    assert sent == ["slack target (SLACK_URL)"] and said == []
    assert len(receiver.bodies(SLACK_PATH)) == 2


def test_a_target_that_always_fails_is_tried_3_times_said_once_and_raises_nothing(receiver: Receiver) -> None:
    assert (notify.TRIES, notify.DEADLINE_S, notify.RETRY_DELAY_S) == (3, 20.0, 1.0) and notify.REQUEST_TIMEOUT_S <= 5
    receiver.script[SLACK_PATH] = [500] * 10
    receiver.script["/hook"] = [429]
    said = Said()
    start = time.monotonic()
    config = _config(Target("slack", "SLACK_URL", receiver.url(SLACK_PATH)),
                     Target("webhook", "HOOK_URL", receiver.url("/hook")))
    sent = send(config, _message(), lambda _: True, say=said, retry_delay_s=QUICK)
    assert time.monotonic() - start < notify.DEADLINE_S
    assert len(receiver.bodies(SLACK_PATH)) == 3
    assert said == ["notify: slack target (SLACK_URL): not sent after 3 tries (HTTP 500)"]
    assert sent == ["webhook target (HOOK_URL)"]  # a failing target stops no other (429 was retried)


def test_a_client_error_is_not_retried(receiver: Receiver) -> None:
    receiver.script["/gone"] = [404, 404, 404]
    said = Said()
    send(_config(Target("webhook", "HOOK_URL", receiver.url("/gone"))), _message(), lambda _: True, say=said,
         retry_delay_s=QUICK)
    assert len(receiver.got) == 1 and said == ["notify: webhook target (HOOK_URL): not sent after 1 try (HTTP 404)"]


def test_an_unreachable_target_with_a_secret_url_is_one_masked_line(receiver: Receiver) -> None:
    port = receiver.server.server_address[1]
    receiver.server.shutdown()
    receiver.server.server_close()  # nothing listens there now: connection refused
    url = f"http://127.0.0.1:{port}{SLACK_PATH}"
    said = Said()
    sent = send(_config(Target("slack", "SLACK_URL", url)), _message(error=f"failed posting to {url}"),
                lambda _: True, say=said, retry_delay_s=QUICK)
    assert sent == [] and said == ["notify: slack target (SLACK_URL): not sent after 3 tries (connection failed)"]
    assert not any(TOKEN in line or "/services/" in line or str(port) in line for line in said)


def test_an_invalid_url_is_said_by_its_kind_never_its_text() -> None:
    said = Said()
    send(_config(Target("webhook", "HOOK_URL", f"notaurl/{TOKEN}")), _message(), lambda _: True, say=said)
    assert said == ["notify: webhook target (HOOK_URL): not sent after 1 try (MissingSchema)"]


def test_the_message_never_carries_a_targets_url(receiver: Receiver) -> None:
    """The error line may quote the URL (a script that failed to post): the targets' URLs are masked in it."""
    url = receiver.url(SLACK_PATH)
    send(_config(Target("slack", "SLACK_URL", url)), _message(error=f"HTTPError: 403 for url: {url}"),
         lambda _: True, say=Said())
    [body] = receiver.bodies(SLACK_PATH)
    assert isinstance(body, dict) and TOKEN not in body["text"] and "error: HTTPError: 403 for url: ****" in body["text"]


def test_an_outcome_not_in_on_sends_nothing_and_claims_nothing(receiver: Receiver) -> None:
    claimed, claim = _claims()
    config = _config(Target("webhook", "HOOK_URL", receiver.url("/hook")), on=("failed",))
    assert send(config, _message("succeeded"), claim, say=Said()) == []  # type: ignore[arg-type]
    assert claimed == [] and receiver.got == []


def test_each_outcome_is_sent_once_whoever_sends_it(receiver: Receiver) -> None:
    """The claim (the caller's notified-<outcome> marker, created if absent) lets only the first sender through."""
    claimed, claim = _claims()
    config = _config(Target("webhook", "HOOK_URL", receiver.url("/hook")), on=("failed", "retrying"))
    for outcome in ("retrying-2", "retrying-2", "retrying-3", "failed", "failed"):
        send(config, _message(outcome), claim, say=Said())  # type: ignore[arg-type]
    assert claimed == ["retrying-2", "retrying-2", "retrying-3", "failed", "failed"]
    bodies = receiver.bodies("/hook")
    assert [b["outcome"] for b in bodies] == ["retrying-2", "retrying-3", "failed"]  # type: ignore[index]
    assert bodies[0]["text"].startswith("rtjob: ddp-resnet retrying (attempt 2)\n")  # type: ignore[index]


def test_claim_false_or_failing_sends_nothing(receiver: Receiver) -> None:
    config = _config(Target("webhook", "HOOK_URL", receiver.url("/hook")))
    assert send(config, _message(), lambda _: False, say=Said()) == []

    def broken(_: str) -> bool:
        raise OSError(f"cannot write {receiver.url(SLACK_PATH)}")

    said = Said()
    assert send(config, _message(), broken, say=said) == []
    assert said == ["notify: failed: not sent: the notification could not be claimed (OSError)"]
    assert receiver.got == []


def test_config_from_env_reads_the_contract_variable_and_the_urls() -> None:
    env = {contract.ENV_NOTIFY: json.dumps({"on": ["failed"], "steps": False, "targets": [
        {"type": "slack", "env": "SLACK_URL"}, {"type": "webhook", "env": "UNSET_URL"}]}),
        "SLACK_URL": f"https://hooks.slack.com{SLACK_PATH}"}
    config = config_from_env(env)
    assert config is not None and config.on == ("failed",) and not config.steps
    assert [(t.type, t.env, t.url) for t in config.targets] == [
        ("slack", "SLACK_URL", f"https://hooks.slack.com{SLACK_PATH}"), ("webhook", "UNSET_URL", "")]
    assert TOKEN not in repr(config)
    assert config_from_env({}) is None
    with pytest.raises(ValueError, match="RTJOB_NOTIFY is not a notify config"):
        config_from_env({contract.ENV_NOTIFY: "{"})
    said = Said()
    unset = NotifyConfig(on=config.on, targets=config.targets[1:])
    assert send(unset, _message(), lambda _: True, say=said) == []
    assert said == ["notify: webhook target (UNSET_URL): not sent: UNSET_URL is not set in this environment"]


def test_apprise_sends_to_a_json_url(receiver: Receiver) -> None:
    pytest.importorskip("apprise")
    port = receiver.server.server_address[1]
    target = Target("apprise", "APPRISE_URL", f"json://127.0.0.1:{port}/apprise/{TOKEN}")
    said = Said()
    assert send(_config(target), _message(), lambda _: True, say=said) == ["apprise target (APPRISE_URL)"]
    [body] = receiver.bodies(f"/apprise/{TOKEN}")
    assert isinstance(body, dict) and body["title"] == "rtjob: ddp-resnet failed"
    assert "log: rtjob logs rtjob-ddp-resnet-20261126-101500-ab12" in body["message"]


def test_a_failing_apprise_target_is_one_masked_line(receiver: Receiver, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("apprise")
    port = receiver.server.server_address[1]
    receiver.script[f"/apprise/{TOKEN}"] = [500] * 5
    said = Said()
    target = Target("apprise", "APPRISE_URL", f"json://127.0.0.1:{port}/apprise/{TOKEN}")
    assert send(_config(target), _message(), lambda _: True, say=said, retry_delay_s=QUICK) == []
    assert said == ["notify: apprise target (APPRISE_URL): not sent after 3 tries (apprise reported a failure)"]
    out = capsys.readouterr()
    assert TOKEN not in out.out + out.err  # apprise's own log lines stay out of the caller's output


def test_without_apprise_one_line_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins

    real_import = builtins.__import__

    def no_apprise(name: str, *args: object, **kwargs: object) -> object:
        if name == "apprise":
            raise ImportError("No module named 'apprise'")
        return real_import(name, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(builtins, "__import__", no_apprise)
    said = Said()
    send(_config(Target("apprise", "APPRISE_URL", f"json://127.0.0.1:9/{TOKEN}")), _message(), lambda _: True, say=said)
    assert said == ["notify: apprise target (APPRISE_URL): not sent: apprise is not installed here "
                    "(pip install 'rtjob[notify]')"]


def test_durations_read_as_people_write_them() -> None:
    assert [notify.human_duration(s) for s in (0, 42.4, 187, 3725, 90000)] == ["0s", "42s", "3m 07s", "1h 02m",
                                                                              "25h 00m"]


def test_a_retry_the_client_submits_is_written_as_retrying_then_told_once(receiver: Receiver, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from rtjob.backends.base import Retry
    from rtjob.core.model import RunInfo, RunStatus
    from rtjob.core.record import RunRecord
    from rtjob.runs.events import Quiet
    from rtjob.runs.lifecycle.follow import record_retry
    from rtjob.runs.memory import ledger
    from rtjob.storage.records import read_record

    monkeypatch.setenv("RTJOB_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("RETRY_HOOK", receiver.url("/retries"))
    notify = json.dumps({"on": ["retrying"], "targets": [{"type": "webhook", "env": "RETRY_HOOK"}], "steps": False})
    ledger().save(RunRecord(id="r1", job="j", backend="local", storage_uri=str(tmp_path / "run"), spec={"job": "j"},
                            status="FAILED", request={"submit_job": {"runtime_env": {"env_vars": {"RTJOB_NOTIFY": notify}}}}))
    retry = RunInfo(id="r1-retry1", job="j", backend="local", status=RunStatus.PENDING)
    decision = Retry("r1", "its driver was killed by SIGKILL (exit code -9)", 1, 1, retry, created=True)
    record_retry("r1", retry, decision, Quiet())  # the kernel's `retrying`, then the notice (after the record)
    record_retry("r1", retry, decision, Quiet())  # another follower that attached to the same retry
    [body] = receiver.bodies("/retries")
    stored = read_record(str(tmp_path / "run"), None)
    assert stored is not None and stored.status == "PENDING"
    assert [(a["id"], a["status"]) for a in stored.attempts] == [("r1", "FAILED"), ("r1-retry1", "PENDING")]
    assert body["outcome"] == "retrying-2" and "r1-retry1" in body["error"]
    assert (tmp_path / "run" / "rtjob-notified-retrying-2").exists()


@pytest.mark.parametrize(("attempt", "told"), [(1, False), (2, True)])
def test_a_lost_driver_with_retries_left_is_told_by_its_last_attempt(receiver: Receiver, tmp_path: Path,
                                                                    attempt: int, told: bool) -> None:
    from rtjob.runside.child import ChildExit
    from rtjob.runside.outcome import Outcome
    from rtjob.storage.location import parse_location
    from rtjob.storage.objects import LocalObjects

    run = tmp_path / "run"
    env = {"RTJOB_NOTIFY": json.dumps({"on": ["failed"], "targets": [{"type": "webhook", "env": "HOOK"}]}),
           "HOOK": receiver.url("/ends"), "RAY_JOB_CONFIG_JSON_ENV_VAR": json.dumps(
               {"metadata": {"rtjob.max_retries": "1", "rtjob.attempt": str(attempt)}})}
    outcome = Outcome(str(run), "r1", env, LocalObjects(parse_location(str(run))), Said().append)
    outcome.started("2026-11-26T10:00:00+00:00")
    outcome.ended(ChildExit(-9), False, None, [], [])
    assert [b["outcome"] for b in receiver.bodies("/ends")] == (["failed"] if told else [])


def test_a_github_target_sends_a_repository_dispatch_with_the_token_as_its_bearer(receiver: Receiver) -> None:
    """GitHub's API is not reachable here: its part of the contract (POST /repos/OWNER/REPO/dispatches, a bearer
    token, event_type and client_payload of at most 10 keys) goes to the loopback receiver as the target's api_url."""
    token = "ghp_" + "D1spatchT0ken" * 3
    said = Said()
    target = Target("github", "GITHUB_DISPATCH_TOKEN", token, repo="acme/train", api_url=receiver.url("/api"))
    sent = send(_config(target), _message(error=f"boom {token}"), lambda _: True, say=said)
    assert sent == ["github target (GITHUB_DISPATCH_TOKEN)"] and said == []
    [(path, headers, raw)] = receiver.got
    assert path == "/api/repos/acme/train/dispatches"
    assert headers["Authorization"] == f"Bearer {token}" and headers["Accept"] == "application/vnd.github+json"
    body = json.loads(raw)
    assert body["event_type"] == contract.GITHUB_DISPATCH_EVENT
    payload = body["client_payload"]
    assert payload["run_id"] == "rtjob-ddp-resnet-20261126-101500-ab12" and payload["outcome"] == "failed"
    assert len(payload) <= 10 and token not in raw.decode()  # GitHub's limit; the token never in the body


def test_a_github_target_refused_is_one_line_without_its_token(receiver: Receiver) -> None:
    token = "ghp_" + "R3fusedT0ken" * 3
    receiver.script["/api/repos/acme/train/dispatches"] = [401]
    said = Said()
    target = Target("github", "GITHUB_DISPATCH_TOKEN", token, repo="acme/train", api_url=receiver.url("/api"))
    assert send(_config(target), _message(), lambda _: True, say=said, retry_delay_s=QUICK) == []
    assert said == ["notify: github target (GITHUB_DISPATCH_TOKEN): not sent after 1 try (HTTP 401)"]


def test_an_undelivered_message_is_recorded_and_resent_once(receiver: Receiver, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """A target that answers 500 to every try: the message is recorded undelivered (never marked notified);
    `rtjob notify`'s resend delivers it once, and a second resend sends nothing; --force sends it again."""
    from rtjob.core.record import RunRecord
    from rtjob.runs.events import Quiet
    from rtjob.runs.memory import ledger
    from rtjob.runs.notices import notices, resend, undelivered_lines
    from rtjob.storage.opening import objects_for

    monkeypatch.setenv("RTJOB_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("DOWN_HOOK", receiver.url("/down"))
    config = json.dumps({"on": ["failed"], "targets": [{"type": "webhook", "env": "DOWN_HOOK"}], "steps": False})
    run = tmp_path / "run"
    run.mkdir()
    record = RunRecord(id="r1", job="j", backend="local", storage_uri=str(run),
                       request={"submit_job": {"runtime_env": {"env_vars": {"RTJOB_NOTIFY": config}}}})
    ledger().save(record)
    receiver.script["/down"] = [500, 500, 500]
    message = notify.Message("j", "r1", "failed", 3.0, None, "ValueError: bad")
    with objects_for(str(run)) as objects:
        sent = notify.send(notify.config_from_env({"RTJOB_NOTIFY": config, "DOWN_HOOK": receiver.url("/down")}),
                           message, lambda o: notify.claim_in(objects, o, "t0"), say=lambda line: None,
                           retry_delay_s=0.01,
                           settle=lambda m, s, f: notify.settle_in(objects, m, s, f, "t1"))
    assert sent == [] and len(receiver.bodies("/down")) == 3
    assert not (run / "rtjob-notified-failed").exists() and (run / "rtjob-notifying-failed").exists()
    found = notices(record)
    assert found is not None and found["failed"]["delivered"] is False
    assert undelivered_lines(found, "r1") == ["failed: not delivered (webhook target (DOWN_HOOK): not sent after 3 "
                                              "tries (HTTP 500)); rtjob notify r1 resends it"]

    [done] = resend(record, False, Quiet())
    assert done.sent == ["webhook target (DOWN_HOOK)"] and done.failed == []
    assert receiver.bodies("/down")[-1]["error"] == "ValueError: bad" and len(receiver.bodies("/down")) == 4
    assert (run / "rtjob-notified-failed").exists() and not (run / "rtjob-undelivered-failed").exists()
    assert resend(record, False, Quiet()) == [] and len(receiver.bodies("/down")) == 4  # once
    assert [d.sent for d in resend(record, True, Quiet())] == [["webhook target (DOWN_HOOK)"]]
    assert len(receiver.bodies("/down")) == 5


def test_the_error_is_the_last_tracebacks_exception_line() -> None:
    log = ("epoch 1\nTraceback (most recent call last):\n  File \"a.py\", line 1, in <module>\n    f()\n"
           "KeyError: 'x'\n\nDuring handling of the above exception, another exception occurred:\n\n"
           "Traceback (most recent call last):\n  File \"a.py\", line 3, in <module>\n    g()\n    ^^^\n"
           "ValueError: bad lr 0.5\n  detail on a second line\nrtjob-companion: the entrypoint exited with code 1\n")
    assert notify.error_line_of(log) == "ValueError: bad lr 0.5"
    assert notify.error_line_of("all fine\n") is None


def test_two_resends_at_once_deliver_once(receiver: Receiver, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Three `rtjob notify r1` while the first is in the middle of its delivery (the receiver holds its request):
    a second on the same machine waits for it (the file lock), then finds the message delivered; one from another
    machine (its own RTJOB_HOME, the same run folder) finds the claim marker held and sends nothing. The target
    gets the message exactly once."""
    import subprocess
    import threading

    from rtjob.core.record import RunRecord
    from rtjob.runs.memory import ledger
    from rtjob.storage.opening import objects_for
    from support.cli import base_env, popen_rtjob, rtjob

    config = json.dumps({"on": ["failed"], "targets": [{"type": "webhook", "env": "DOWN_HOOK"}], "steps": False})
    run = tmp_path / "run"
    run.mkdir()
    record = RunRecord(id="r1", job="j", backend="local", storage_uri=str(run),
                       request={"submit_job": {"runtime_env": {"env_vars": {"RTJOB_NOTIFY": config}}}})
    homes = [tmp_path / "here", tmp_path / "there"]
    for home in homes:  # both machines know the run
        monkeypatch.setenv("RTJOB_HOME", str(home))
        ledger().save(record)
    receiver.script["/down"] = [500, 500, 500]
    with objects_for(str(run)) as objects:
        notify.send(notify.config_from_env({"RTJOB_NOTIFY": config, "DOWN_HOOK": receiver.url("/down")}),
                    notify.Message("j", "r1", "failed", 3.0, None, "ValueError: bad"),
                    lambda o: notify.claim_in(objects, o, "t0"), say=lambda line: None, retry_delay_s=0.01,
                    settle=lambda m, s, f: notify.settle_in(objects, m, s, f, "t1"))
    assert len(receiver.bodies("/down")) == 3 and (run / "rtjob-undelivered-failed").exists()

    def until(check: object, what: str) -> None:
        deadline = time.monotonic() + 60
        while not check():  # type: ignore[operator]
            assert time.monotonic() < deadline, f"waited 60 s for {what}"
            time.sleep(0.05)

    gate = receiver.held["/down"] = threading.Event()
    here, there = (base_env(home, DOWN_HOOK=receiver.url("/down")) for home in homes)
    first = popen_rtjob("notify", "r1", env=here, cwd=tmp_path)
    second: subprocess.Popen[str] | None = None
    try:
        until(lambda: len(receiver.got) == 4, "the first resend's request")
        second = popen_rtjob("notify", "r1", env=here, cwd=tmp_path)
        assert second.stderr is not None
        waiting = second.stderr.readline()
        assert "another rtjob notify r1 is running here; waiting for it" in waiting, waiting
        elsewhere = rtjob("notify", "r1", env=there, cwd=tmp_path, timeout=60)
        assert elsewhere.returncode == 0, elsewhere.stderr
        assert "failed: another rtjob notify is resending it (nothing sent from here)" in elsewhere.stderr, \
            elsewhere.stderr
        assert "no undelivered notification" not in elsewhere.stderr  # it was undelivered: another resends it
        assert len(receiver.got) == 4  # nothing sent from there
    finally:
        gate.set()
        out1, err1 = first.communicate(timeout=60)
        out2, err2 = second.communicate(timeout=60) if second is not None else ("", "")
    assert first.returncode == 0 and "failed: delivered to webhook target (DOWN_HOOK)" in err1, (out1, err1)
    assert second.returncode == 0 and "r1: no undelivered notification" in err2, (out2, err2)
    assert len(receiver.bodies("/down")) == 4  # the three failed tries, then exactly one resend
    assert (run / "rtjob-notified-failed").exists() and not (run / "rtjob-undelivered-failed").exists()
    claim = json.loads((run / "rtjob-notifying-failed").read_text())
    assert claim["claimed_at"] == "t0" and "resending_since" not in claim and claim["resent_at"]


def test_a_resend_that_died_is_taken_over(tmp_path: Path) -> None:
    """The claim marker held by a resend: a second is refused while the hold is fresh, takes it over once it is
    older than RESEND_STALE_S (that resender died), and an unclaimed outcome is never held."""
    from rtjob.core import clock
    from rtjob.storage.opening import objects_for

    def holding(since: str) -> None:
        (tmp_path / "rtjob-notifying-failed").write_text(json.dumps({"claimed_at": "t0", "resending_since": since}))

    with objects_for(str(tmp_path)) as objects:
        holding(clock.now_iso())
        with notify.held_for_resend(objects, "failed") as held:
            assert held is False
        old = clock.now() - datetime.timedelta(seconds=notify.RESEND_STALE_S + 1)
        holding(old.isoformat())
        with notify.held_for_resend(objects, "failed") as held:
            assert held is True
            with notify.held_for_resend(objects, "failed") as again:
                assert again is False
        assert "resending_since" not in json.loads((tmp_path / "rtjob-notifying-failed").read_text())
        with notify.held_for_resend(objects, "succeeded") as held:
            assert held is False
