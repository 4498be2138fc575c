"""The voice-clone pipeline end to end on the real 2-node embedded cluster with S3 storage (moto on loopback):
process (Ray Data) → encode → train (hf-sft) → evaluate, first submitted with --no-wait (its supervisor on the cluster
runs the steps) and followed with `rtjob wait`. The evaluate step first fails on purpose (a --max-len that
leaves the held-out clips no target token, refused), which stops the pipeline with exit 1; `--from evaluate` then reuses
the process, encode and train runs (what a user whose evaluation failed does: no second training) and passes the
real bar: the fine-tuned model beats the base model and the code-frequency baselines on held-out clips, loss falls
over the epochs, and the checkpoint reloads with `from_pretrained`.
`status`, `results` and `pull` of the pipeline id cover its steps."""

from __future__ import annotations

import json

import pytest
from support.cli import new_id, rtjob
from support.s3_server import bucket_fixture

pytestmark = pytest.mark.cluster

BUCKET = "voice-runs"


s3 = bucket_fixture(BUCKET)


def ok(proc) -> str:
    assert proc.returncode == 0, (proc.stdout[-2000:], proc.stderr[-4000:])
    return proc.stdout


def test_voice_clone_runs_its_four_steps_and_from_evaluate_resumes_after_a_failed_evaluate(cluster_env, s3, tmp_path):
    env = {**cluster_env, **s3.env()}
    storage = f"s3://{BUCKET}/team"
    failed_id, fixed_id = new_id("voice"), new_id("voicefix")
    common = ("--nodes", "2", "--storage", storage, "--forward-aws-credentials", "-o", "json")

    # Submitted with --no-wait: the pipeline's supervisor on the cluster runs the steps; `wait` follows them.
    ok(rtjob("submit", "voice-clone", *common, "--submission-id", failed_id, "--no-wait",
             "--set", "evaluate.args.max_len=8", env=env, timeout=300))
    failed = rtjob("wait", failed_id, "-o", "json", env=env, timeout=900)
    assert failed.returncode == 1, (failed.stdout[-2000:], failed.stderr[-4000:])
    outcome = json.loads(failed.stdout)
    assert outcome["id"] == failed_id and outcome["status"] == "FAILED"
    assert [(s["name"], s["status"]) for s in outcome["steps"]] == [
        ("process", "SUCCEEDED"), ("encode", "SUCCEEDED"), ("train", "SUCCEEDED"), ("evaluate", "FAILED")]
    logs = ok(rtjob("logs", failed_id, env=env))
    assert "no target token" in logs
    assert "synthetic" in logs.lower()  # the offline set says what it is in the step's log

    fixed = rtjob("submit", "voice-clone", *common, "--submission-id", fixed_id, "--from", "evaluate", failed_id,
                  env=env, timeout=900)
    done = json.loads(ok(fixed))
    assert done["status"] == "SUCCEEDED"
    assert [(s["name"], s["reused_from"]) for s in done["steps"]] == [
        ("process", failed_id), ("encode", failed_id), ("train", failed_id), ("evaluate", None)]
    assert done["steps"][2]["run_id"] == f"{failed_id}-train" and done["steps"][3]["run_id"] == f"{fixed_id}-evaluate"

    # The evaluation: the fine-tuned model beats the base and both code-frequency baselines on held-out clips.
    s3c = s3.client()
    evaluate_dir = done["steps"][3]["storage_uri"].removeprefix(f"s3://{BUCKET}/")
    table = json.loads(s3c.get_object(Bucket=BUCKET, Key=f"{evaluate_dir}/evaluation.json")["Body"].read())
    losses = {row["model"]: row["val_loss"] for row in table["rows"]}
    tuned = losses.pop("fine-tuned")
    assert losses and all(tuned < other for other in losses.values()), (tuned, losses)
    wavs = s3c.list_objects_v2(Bucket=BUCKET, Prefix=f"{evaluate_dir}/samples/")["Contents"]
    assert any(o["Key"].endswith(".wav") and o["Size"] > 44 for o in wavs)

    # status, results and pull of the pipeline id cover its steps.
    status = json.loads(ok(rtjob("status", fixed_id, "-o", "json", env=env)))
    assert [s["status"] for s in status["steps"]] == ["SUCCEEDED"] * 4
    results = json.loads(ok(rtjob("results", fixed_id, "-o", "json", env=env)))
    by_label = {r["label"]: r for r in results}
    train = by_label[f"{fixed_id}/train"]["history"]
    assert len(train) == 2 and train[-1]["train_loss"] < train[0]["train_loss"]
    assert {row["model"] for row in by_label[f"{fixed_id}/evaluate"]["history"]} >= {"fine-tuned", "base"}
    pulled = json.loads(ok(rtjob("pull", fixed_id, "--to", str(tmp_path / "p"), "-o", "json", env=env)))
    assert [p["step"] for p in pulled] == ["process", "encode", "train", "evaluate"]

    from transformers import AutoModelForCausalLM  # the pulled checkpoint is a save_pretrained folder

    checkpoint = next((tmp_path / "p" / "train").glob("checkpoint_epoch_*"))
    model = AutoModelForCausalLM.from_pretrained(checkpoint)
    assert model.config.model_type == "qwen3"
