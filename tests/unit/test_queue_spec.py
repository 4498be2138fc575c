"""A team's queue as the spec says it (jobspec/queues.py, issue 44): `queue:`/`priority:` in a job, the project
config or a context, --queue/--priority over them, `[queues.NAME]` checked with file:line (exit 2, one line),
render showing where the run waits; and the kernel's queued run (core/queueing.py) with its one verdict line."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest
from rtjob.core import queueing
from rtjob.core.lifecycle import Admitted, Cancelled, IllegalTransition, Queued, Writer, apply, merge
from rtjob.core.model import RunStatus
from rtjob.core.record import RunRecord
from rtjob.core.verdict import EndReason, of_entry, of_record, verdict
from rtjob.jobspec.queues import QueueSettings, toml_lines
from support.project import ProjectCli, write_files

JOB = "name: train\nentrypoint: python train.py\n"
TEAM = 'storage = "/srv/runs"\n\n[queues.team]\npolicy = "strict"\nmax_running = 2\n\n[queues.cpu]\n'


@pytest.fixture
def cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> ProjectCli:
    return ProjectCli(tmp_path, monkeypatch, capsys)


def _project(cli: ProjectCli, toml: str = TEAM, job: str = JOB) -> None:
    write_files(cli.project, {"rtjob.toml": toml, "jobs/train.yaml": job, "train.py": "print(1)\n"})


def _queue(cli: ProjectCli, *flags: str) -> dict | None:
    proc = cli("render", "train", "-o", "json", *flags)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    meta = data["submit_job"]["metadata"]
    assert (meta.get("rtjob.queue"), meta.get("rtjob.priority")) == (
        (data["run"]["queue"]["name"], str(data["run"]["queue"]["priority"])) if data["run"]["queue"] else (None, None))
    return data["run"]["queue"]


def test_the_queue_and_priority_come_from_the_flag_over_the_job_over_the_settings(cli: ProjectCli) -> None:
    _project(cli, 'queue = "cpu"\npriority = 1\n' + TEAM)
    assert _queue(cli) == {"name": "cpu", "priority": 1, "storage": "/srv/runs", "policy": "best-effort",
                           "source": f"{cli.project / 'rtjob.toml'}"}
    _project(cli, 'queue = "cpu"\n' + TEAM, JOB + "queue: team\npriority: 7\n")
    assert (_queue(cli) or {})["name"] == "team" and (_queue(cli) or {})["priority"] == 7
    assert (_queue(cli) or {})["source"] == "jobs/train.yaml:3"
    got = _queue(cli, "--queue", "cpu", "--priority", "-5")
    assert got is not None and (got["name"], got["priority"], got["source"]) == ("cpu", -5, "--queue")
    _project(cli, TEAM)
    assert _queue(cli) is None  # no queue named anywhere: sent at once
    text = cli("render", "train", "--queue", "team")
    assert "queue:     team, priority 0 (policy strict;" in text.stdout


@pytest.mark.parametrize(("toml", "job", "flags", "error"), [
    (TEAM.replace("max_running", "max_runing"), JOB, (), "rtjob.toml:5: [queues.team]: unknown key 'max_runing'; "
                                                         "did you mean 'max_running'?"),
    (TEAM.replace('"strict"', '"fifo"'), JOB, (), "rtjob.toml:4: [queues.team] policy: expected one of best-effort, "
                                                   "strict"),
    (TEAM.replace("max_running = 2", "max_running = 0"), JOB, (), "rtjob.toml:5: [queues.team] max_running must be "
                                                                   "an integer of at least 1"),
    (TEAM + "[queues.hold]\n", JOB, (), "rtjob.toml:8: [queues.hold]: 'hold' is a word of `rtjob queue`"),
    ('priority = "high"\n' + TEAM, JOB, (), "rtjob.toml:1: priority: a priority is an integer from -1000 to 1000"),
    (TEAM, JOB + "queue: tema\n", (), "jobs/train.yaml:3: queue: no queue 'tema' (did you mean 'team'?)"),
    (TEAM, JOB + "queue: team\npriority: high\n", (), "jobs/train.yaml:4: priority: input should be a valid integer"),
    (TEAM, JOB + "queue: team\npriority: 1001\n", (), "jobs/train.yaml:4: priority: value error, a priority is an "
                                                      "integer from -1000 to 1000"),
    (TEAM, JOB, ("--queue", "team", "--priority", "5000"), "--priority: a priority is an integer from -1000 to 1000"),
    (TEAM, JOB, ("--queue", "release"), "--queue: 'release' is a word of `rtjob queue`"),
])
def test_a_bad_queue_is_one_line_at_its_file_line(cli: ProjectCli, toml: str, job: str, flags: tuple[str, ...],
                                                  error: str) -> None:
    _project(cli, toml, job)
    proc = cli("render", "train", *flags)
    assert proc.returncode == 2 and proc.stdout == ""
    assert error in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_contexts_queues_join_the_projects_by_name_and_are_checked_at_their_line(
        cli: ProjectCli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    config = tmp_path / "xdg" / "rtjob" / "config.toml"
    write_files(config.parent, {"config.toml": 'current = "lab"\n\n[contexts.lab]\nstorage = "/lab"\n\n'
                                               '[contexts.lab.queues.gpu]\nmax_running_per_user = 1\n'})
    _project(cli)
    got = _queue(cli, "--queue", "gpu")
    assert got is not None and got["name"] == "gpu" and got["storage"] == "/srv/runs"
    assert (_queue(cli, "--queue", "team") or {})["policy"] == "strict"  # the project's queues stay
    config.write_text(config.read_text().replace("max_running_per_user = 1", "max_running_per_user = -1\nmaxx = 1"))
    proc = cli("render", "train", "--queue", "gpu")
    assert proc.returncode == 2 and "config.toml:7: [queues.gpu] max_running_per_user must be an integer" in proc.stderr


def test_toml_lines_find_headers_dotted_and_quoted_keys() -> None:
    lines = toml_lines('[tool.rtjob]\nqueue = "a"\n[tool.rtjob.queues."team-a"]\npolicy = "strict"\n'
                       '[[x]]\ny.z = 1\n')
    assert lines[("tool", "rtjob", "queue")] == 2 and lines[("tool", "rtjob", "queues", "team-a", "policy")] == 4
    assert lines[("tool", "rtjob", "queues", "team-a", "y", "z")] == 6  # an array of tables is not a header here
    assert QueueSettings.from_table("t", {"max_skips": 0}, lambda loc: "f").max_skips == 0


# --- the kernel: queued, admitted, cancelled; the verdict's line -------------------------------------------------

NOW = dt.datetime(2026, 12, 2, 12, 0, tzinfo=dt.timezone.utc)
QUEUE = {"name": "team", "priority": 10, "storage": "/srv/runs"}


def _record() -> RunRecord:
    return RunRecord(id="r1", job="train", backend="ray", submitted_at="2026-12-02T11:00:00+00:00")


def test_a_queued_run_is_admitted_or_cancelled_once_and_each_transition_is_idempotent() -> None:
    r = apply(_record(), Queued(QUEUE, at="2026-12-02T11:00:00+00:00"))
    assert (r.status, r.queue, r.timeline) == ("QUEUED", QUEUE, {"queued": "2026-12-02T11:00:00+00:00"})
    assert apply(r, Queued(QUEUE)).timeline == r.timeline
    admitted = apply(RunRecord.from_json(r.to_json(), "x"), Admitted(at="2026-12-02T11:05:00+00:00"))
    assert admitted.status == "PENDING" and admitted.timeline["admitted"] == "2026-12-02T11:05:00+00:00"
    assert apply(admitted, Admitted()).status == "PENDING"
    with pytest.raises(IllegalTransition, match="admitted: stop it on the cluster"):
        apply(admitted, Cancelled())
    with pytest.raises(IllegalTransition, match="queued refused"):
        apply(admitted, Queued(QUEUE))
    with pytest.raises(IllegalTransition, match="the follower does not write it"):
        apply(_record(), Admitted(by=Writer.FOLLOWER))
    stopped = apply(RunRecord.from_json(r.to_json(), "x"), Cancelled())
    assert (stopped.status, stopped.completed_by) == ("STOPPED", "keeper")
    assert stopped.message == "cancelled while queued in team: it never reached the cluster"
    assert apply(stopped, Cancelled()).to_json() == stopped.to_json()
    with pytest.raises(IllegalTransition, match="ended STOPPED while queued"):
        apply(stopped, Admitted())
    # A client's QUEUED row never stands over the keeper's admission or its cancel.
    assert merge(RunRecord.from_json(r.to_json(), "x"), admitted).status == "PENDING"
    assert merge(RunRecord.from_json(r.to_json(), "x"), stopped).status == "STOPPED"


def test_the_verdict_of_a_queued_run_is_its_place_in_one_line_and_never_forgotten() -> None:
    r = apply(_record(), Queued(QUEUE))
    place = queueing.Place("team", 2, 5, "needs 2 nodes × 1 GPU, 1 free; behind priority 10", keeper_alive=True)
    seen = verdict(r, None, None, NOW, cluster_forgot=True, place=place)
    assert (seen.status, seen.reason, seen.line) == (
        RunStatus.QUEUED, EndReason.QUEUED, "position 2 of 5 in team: needs 2 nodes × 1 GPU, 1 free; behind priority 10")
    assert seen.duration_s is None and seen.to_json()["position"] == 2 and seen.to_json()["queue"] == "team"
    alone = of_record(r, NOW, cluster_forgot=True)  # no queue read: its queue's name, never "forgotten"
    assert (alone.status, alone.line, alone.place) == (RunStatus.QUEUED, "queued in team", queueing.Place("team"))
    held = verdict(r, None, None, NOW, place=queueing.Place("team", 1, 1, held=True))
    assert held.line == "position 1 of 1 in team: the queue is held"
    lost = verdict(r, None, None, NOW, place=queueing.Place("team", 1, 1, keeper_alive=False,
                                                              keeper_seen="2026-12-02T11:58:00+00:00"))
    assert (lost.status, lost.reason) == (RunStatus.UNKNOWN, EndReason.KEEPER_LOST)
    assert lost.line is not None and lost.line.startswith("queued in team, whose keeper is last seen 2026-12-02T11:58:00Z")
    row = {"id": "r1", "job": "train", "backend": "ray", "status": "QUEUED", "submitted_at": r.submitted_at}
    assert of_entry(row, NOW).status == RunStatus.QUEUED  # an index entry without its queue: still QUEUED
