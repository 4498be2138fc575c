"""What a run record keeps for rerun: secrets out (by name and shape, in the job document and the overrides),
and put back from this environment, or refused by name; ordinary values kept as they were."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from rtjob.core.errors import BadInput
from rtjob.jobspec.resolve import Overrides
from rtjob.runs.recorded_spec import SECRET, record_spec, restore

TOKEN = "hf_" + "Q" * 30
KEY = "sk-live-" + "7" * 24


def _job(document: dict, cc: dict | None = None) -> SimpleNamespace:
    return SimpleNamespace(document=document, compute_config_document=cc, job_path=Path("/p/jobs/a.yaml"),
                           job_file="jobs/a.yaml", compute_config_name="g5" if cc else None, backend="ray",
                           storage_root="s3://b/runs")


DOC = {
    "name": "a",
    "entrypoint": "python train.py",
    "args": {"epochs": 3, "hf_token": TOKEN, "model": "resnet18"},
    "env_vars": {"WANDB_API_KEY": KEY, "LOG_LEVEL": "info"},
    "tags": {"team": "vision"},
}


def test_secrets_are_taken_out_and_listed_ordinary_values_kept() -> None:
    overrides = Overrides(nodes=2, sets=("args.epochs=5", f"args.api_key={KEY}"),
                          env=(f"DB_PASSWORD={KEY}", "MODE=fast"), forward_aws_credentials=True)
    spec = record_spec(_job(DOC, {"name": "g5", "cloud": "c"}), overrides, {"address": "http://u:pw123456@h:8265"})
    text = repr(spec)
    assert TOKEN not in text and KEY not in text and "pw123456" not in text
    assert spec["document"]["args"] == {"epochs": 3, "hf_token": SECRET, "model": "resnet18"}
    assert spec["document"]["env_vars"] == {"WANDB_API_KEY": SECRET, "LOG_LEVEL": "info"}
    assert spec["overrides"]["sets"] == ["args.epochs=5", f"args.api_key={SECRET}"]
    assert spec["overrides"]["env"] == [f"DB_PASSWORD={SECRET}", "MODE=fast"]
    assert sorted(spec["secrets"]) == ["--env DB_PASSWORD", "--set args.api_key", "args.hf_token",
                                       "env_vars.WANDB_API_KEY"]
    assert spec["settings"]["address"] == "http://u:****@h:8265" and spec["settings"]["storage"] == "s3://b/runs"
    assert spec["compute_config"] == {"name": "g5", "document": {"name": "g5", "cloud": "c"}}


def test_restore_finds_env_secrets_again_and_names_every_missing_one(monkeypatch: pytest.MonkeyPatch) -> None:
    overrides = Overrides(sets=(f"args.api_key={KEY}",), env=(f"DB_PASSWORD={KEY}",))
    spec = record_spec(_job(DOC), overrides, {})
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv("DB_PASSWORD", raising=False)
    with pytest.raises(BadInput) as caught:
        restore(spec, "r1", (), (), None)
    message = caught.value.message
    for name in ("env_vars.WANDB_API_KEY", "--env DB_PASSWORD", "--set args.api_key", "args.hf_token"):
        assert name in message
    assert KEY not in message and TOKEN not in message

    monkeypatch.setenv("WANDB_API_KEY", KEY)
    monkeypatch.setenv("DB_PASSWORD", KEY)
    source, again = restore(spec, "r1", (f"args.api_key={KEY}", f"args.hf_token={TOKEN}"), (), 3)
    assert source.document["env_vars"]["WANDB_API_KEY"] == KEY
    assert source.path == Path("/p/jobs/a.yaml") and "r1" in source.shown
    assert again.env == (f"DB_PASSWORD={KEY}",)
    assert again.sets == (f"args.api_key={KEY}", f"args.hf_token={TOKEN}")  # the rerun's own, the recorded one dropped
    assert again.nodes == 3


def test_rerun_overrides_come_after_the_recorded_ones() -> None:
    spec = record_spec(_job({"name": "a", "entrypoint": "x"}), Overrides(nodes=2, sets=("args.epochs=5",),
                                                                         env=("MODE=fast",)), {})
    _, again = restore(spec, "r1", ("args.lr=0.1",), ("MODE=slow",), None)
    assert again.sets == ("args.epochs=5", "args.lr=0.1")
    assert again.env == ("MODE=slow",) and again.nodes == 2


def test_rerun_warns_when_the_code_is_not_the_recorded_commit(tmp_path: Path) -> None:
    """A real git repository: the same commit and a clean tree say nothing; uncommitted changes, then another
    commit, are each one warning."""
    import subprocess

    from rtjob.core.record import RunRecord
    from rtjob.runs.history.rerun import git_differences
    from rtjob.runs.records import git_state

    def git(*args: str) -> None:
        subprocess.run(["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@x", *args],
                       check=True, capture_output=True)

    git("init", "-q")
    (tmp_path / "train.py").write_text("print(1)\n")
    git("add", ".")
    git("commit", "-qm", "one")
    record = RunRecord(id="r1", job="a", backend="ray", git=git_state(tmp_path))
    assert record.git is not None and record.git["dirty"] is False and len(record.git["commit"]) == 40
    planned = SimpleNamespace(job=SimpleNamespace(working_dir=tmp_path))
    assert git_differences(record, planned) == []  # type: ignore[arg-type]
    (tmp_path / "train.py").write_text("print(2)\n")
    assert [w for w in git_differences(record, planned) if "uncommitted" in w]  # type: ignore[arg-type]
    git("commit", "-qam", "two")
    warnings = git_differences(record, planned)  # type: ignore[arg-type]
    assert len(warnings) == 1 and record.git["commit"][:12] in warnings[0]


def test_rerun_on_the_embedded_cluster_ignores_where_the_cluster_listens_but_not_what_changed() -> None:
    """The embedded cluster gets new ports each start: its dashboard (address) and its GCS (the RAY_ADDRESS rtjob
    gives the job there) are where the run goes, not what it is. Another env value still differs."""
    from rtjob.core.record import RunRecord
    from rtjob.runs.history.rerun import request_differences

    def request(gcs: str, mode: str) -> dict:
        return {"address": "http://127.0.0.1:8265" if gcs.endswith("1") else "http://127.0.0.1:9999",
                "submit_job": {"submission_id": "r-old", "runtime_env": {"env_vars": {"RAY_ADDRESS": gcs, "MODE": mode}}}}

    record = RunRecord(id="r-old", job="count", backend="local", request=request("127.0.0.1:6001", "a"))

    def planned(mode: str, embedded: bool = True) -> SimpleNamespace:
        fresh = json.loads(json.dumps(request("127.0.0.1:7002", mode)).replace("r-old", "r-new"))
        return SimpleNamespace(job=SimpleNamespace(run_id="r-new", embedded=embedded),
                               backend=SimpleNamespace(render=lambda _: fresh), request=None)

    assert request_differences(record, planned("a")) == []  # type: ignore[arg-type]
    changed = request_differences(record, planned("b"))  # type: ignore[arg-type]
    assert changed == ["the request differs from r-old's at: submit_job.runtime_env.env_vars.MODE"]
    elsewhere = request_differences(record, planned("a", embedded=False))  # type: ignore[arg-type]
    assert any("RAY_ADDRESS" in line for line in elsewhere) and "was sent to" in elsewhere[0]
