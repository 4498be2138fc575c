"""Reads never write shared state: every read command (`status`, `show`, `logs`, `list`, `runs`, `runs --storage`,
`results`, `pull`) and every route of `rtjob ui` run over a team's storage (a local folder) that refuses writes:
each answers, and nothing in the storage changed. The runs there are the ones reads used to write for: a run whose
end the client never archived (the cluster says SUCCEEDED, the ledger RUNNING), a run whose companion stopped
beating, a retried run, and an index with entries left over (a listing used to compact it). Only this machine's
ledger (a cache of verdicts) may change."""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rtjob.backends import register
from rtjob.core.model import RunInfo, RunStatus
from rtjob.ledger import Ledger
from rtjob.storage import index
from rtjob.storage.objects import LocalObjects
from support.cli import base_env, run_in_process
from support.planted import plant_record
from support.toy_backend.backend import ToyBackend
from support.ui_runs import append_log_part, call, write_run

register("toy", "support.toy_backend.backend:ToyBackend")  # a live backend in this process (its runs: a dict)

LONG_AGO = (dt.datetime.now(dt.timezone.utc) - dt.timedelta(hours=1)).isoformat(timespec="milliseconds")
LOST = "its driver was lost (node died)"


def _tree(root: Path) -> dict[str, str]:
    """Every file under ``root`` and a hash of its bytes: what a write would change."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def team(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Path, dict[str, str]]]:
    """The team's storage with the four runs, and a HOME whose ledger knows the unarchived one (the toy backend's
    runs write on this machine, as the embedded cluster's do: a client may write their folders)."""
    from rtjob.jobspec.resolve import Placement

    monkeypatch.setattr(ToyBackend, "placement", classmethod(lambda cls: Placement(cls.name, embedded=True)))
    store = tmp_path / "store"
    write_run(store, "done-1", "train")
    going = write_run(store, "lost-1", "train", status="RUNNING")
    plant_record(going.storage_uri or "", dataclasses.replace(going, last_seen=LONG_AGO), None)
    retried = write_run(store, "retry-1", "train")
    retried = dataclasses.replace(retried, completed_by="supervisor", attempts=[
        {"id": "retry-1", "attempt": 1, "status": "FAILED", "exit_code": None, "retry_reason": LOST},
        {"id": "retry-1-retry1", "attempt": 2, "status": "SUCCEEDED", "exit_code": 0, "retry_reason": None}])
    plant_record(retried.storage_uri or "", retried, None)
    index.write_entry(str(store), None, retried)  # its end's entry, as lifecycle.write writes it
    append_log_part(dataclasses.replace(retried, id="retry-1-retry1"), 0, ["epoch 1 again", "done"])
    unarchived = write_run(store, "toy-1", "train", status="RUNNING", backend="toy", archived=False)
    home = tmp_path / "home"
    home.mkdir()
    with Ledger(home / "ledger.sqlite3") as book:
        book.save(dataclasses.replace(unarchived, carried_by=None))
    ToyBackend.runs.clear()
    ToyBackend.runs["toy-1"] = RunInfo(id="toy-1", job="train", backend="toy", status=RunStatus.SUCCEEDED,
                                       start_time=unarchived.start_time, end_time="2026-11-20T10:05:00+00:00",
                                       storage_uri=unarchived.storage_uri, address="toy://this-process")
    yield store, base_env(home)
    ToyBackend.runs.clear()


@pytest.fixture
def refused(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Storage that refuses writes: each write or delete of a local-folder storage raises (and is noted); a listing
    would compact after one entry left over."""
    tried: list[str] = []

    def refuse(name: str) -> Any:
        def write(self: LocalObjects, rel: str, *args: Any, **kwargs: Any) -> Any:
            tried.append(f"{name} {rel}")
            raise AssertionError(f"a read wrote to the storage: {name} {rel}")
        return write

    for name in ("put", "put_file", "delete"):
        monkeypatch.setattr(LocalObjects, name, refuse(name))
    monkeypatch.setattr(index, "COMPACT_AFTER", 1)
    return tried


READS = [
    ("runs", "--storage", "{store}"), ("runs", "--storage", "{store}", "-o", "json"),  # remembers the team's runs
    ("runs",), ("runs", "-o", "json"), ("list", "--backend", "toy"),
    ("status", "toy-1", "--backend", "toy"), ("status", "toy-1", "--backend", "toy", "-o", "json"),
    ("status", "lost-1"), ("status", "retry-1", "-o", "json"), ("status", "done-1", "-o", "json"),  # (write_run's cost has no text to print)
    ("show", "toy-1"), ("show", "lost-1", "--storage", "{store}"), ("show", "retry-1"), ("show", "done-1"),
    ("logs", "done-1"), ("logs", "retry-1", "--tail", "2"), ("logs", "toy-1", "--backend", "toy", "--follow"),
    ("results", "done-1"), ("pull", "done-1", "--to", "{dest}"),
]


def test_read_commands_write_nothing_to_the_storage(team: tuple[Path, dict[str, str]], refused: list[str],
                                                     tmp_path: Path) -> None:
    store, env = team
    before = _tree(store)
    said: dict[str, str] = {}
    for args in READS:
        argv = [a.format(store=store, dest=tmp_path / "pulled") for a in args]
        proc = run_in_process(*argv, env=env)
        assert proc.returncode == 0, (argv, proc.stdout, proc.stderr)
        said[" ".join(args)] = proc.stdout
    assert refused == [] and _tree(store) == before
    # What they said: the cluster's end of the unarchived run, the lost companion, one story of the retried run.
    assert json.loads(said["status toy-1 --backend toy -o json"])["status"] == "SUCCEEDED"
    assert "UNKNOWN" in said["status lost-1"] and "its companion was last seen" in said["status lost-1"]
    assert json.loads(said["status retry-1 -o json"])["status"] == "SUCCEEDED"
    listed = {row["id"]: row for row in json.loads(said["runs --storage {store} -o json"])}
    assert listed["lost-1"]["status"] == "UNKNOWN" and listed["retry-1"]["status"] == "SUCCEEDED"


UI_PATHS = ["/", "/?status=RUNNING", "/api/runs", "/api/runs?sort=status", "/compare?run=done-1&run=retry-1"]
UI_RUN_PATHS = ["/runs/{id}", "/runs/{id}/card", "/api/runs/{id}", "/api/runs/{id}/live", "/runs/{id}/log",
                "/runs/{id}/log/search?q=epoch"]


@pytest.mark.parametrize("source", ["storage", "ledger"])
def test_the_uis_routes_write_nothing_to_the_storage(team: tuple[Path, dict[str, str]], refused: list[str],
                                                     source: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from rtjob.ui.app import Config, create_app
    from support.ui_runs import UI_PORT

    store, env = team
    monkeypatch.setenv("RTJOB_HOME", env["RTJOB_HOME"])
    before = _tree(store)
    app = create_app(Config(storage=str(store) if source == "storage" else None, lookup_root=str(store),
                            endpoint=None, host="127.0.0.1", port=UI_PORT, token=None))
    paths = UI_PATHS + [p.format(id=run_id) for run_id in ("done-1", "lost-1", "retry-1", "toy-1")
                        for p in UI_RUN_PATHS]
    for path in paths:
        status, _headers, body = call(app, path)
        assert status == 200, (path, body[:300])
    assert refused == [] and _tree(store) == before
    _, _, lost = call(app, "/api/runs/lost-1")
    _, _, listed = call(app, "/api/runs")
    rows = {row["id"]: row for row in json.loads(listed)["runs"]}
    assert json.loads(lost)["status"] == "UNKNOWN"
    if source == "storage":  # the team's list says what the run's page says
        assert rows["lost-1"]["status"] == "UNKNOWN" and rows["retry-1"]["attempts"] == 2


def test_the_client_that_writes_a_runs_end_compacts_the_index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Compaction moved from the readers to the writers: the client's end write folds the entries left over."""
    from rtjob.runs.events import Quiet
    from rtjob.runs.lifecycle.archive import compact_index

    store = tmp_path / "store"
    ended = [write_run(store, f"c-{i}", "train") for i in range(3)]
    monkeypatch.setattr(index, "COMPACT_AFTER", 2)
    with index.index_objects(str(store)) as objects:
        assert index.read_index(objects).leftover() >= 2
    compact_index(ended[-1], Quiet())
    with index.index_objects(str(store)) as objects:
        snapshot = index.read_index(objects)
        assert snapshot.leftover() == 0 and {row["id"] for row in snapshot.runs()} == {"c-0", "c-1", "c-2"}


def test_a_teammates_run_is_answered_from_its_record_never_blamed_on_this_machines_cluster(tmp_path: Path) -> None:
    """A run a teammate submitted to their own embedded cluster, recorded PENDING with nothing carrying it yet: this
    machine's ledger never held it and its embedded cluster (not running here) is not the run's, so `status` answers
    from the record (exit 0), where it said "the embedded Ray cluster is not running" (exit 3)."""
    store = tmp_path / "store"
    pending = dataclasses.replace(write_run(store, "mate-1", "train", status="PENDING"), carried_by=None,
                                  timeline={"submitted": "2026-11-20T10:00:00+00:00"})
    (Path(pending.storage_uri or "") / "rtjob-run.json").write_text(pending.dumps())
    env = {**base_env(tmp_path / "teammate"), "RTJOB_STORAGE": str(store)}
    for argv in (("status", "mate-1", "-o", "json"), ("status", "mate-1")):
        proc = run_in_process(*argv, env=env)
        assert proc.returncode == 0, proc.stderr
        assert "embedded" not in proc.stderr and "not running" not in proc.stderr, proc.stderr
    assert json.loads(run_in_process("status", "mate-1", "-o", "json", env=env).stdout)["status"] == "PENDING"
