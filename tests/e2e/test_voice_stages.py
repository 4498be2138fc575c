"""The voice pipeline's stages run for real on tiny data, in this process: process through Ray Data (a private local
Ray instance, one CPU, shut down after: why this is not a unit test) and encode, against S3 (moto on loopback) and a
local folder; evaluate's gate on a model that did not learn."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from support.s3_server import S3Server, with_bucket

import rtjob_contract as contract
from training.voice import audio, encode, process, sft, store, synthetic

pytestmark = pytest.mark.cluster
BUCKET = "voice"


@pytest.fixture(scope="module")
def s3(shared_s3: S3Server) -> Iterator[S3Server]:
    """The session's moto server, whose credentials this process (and so the Ray workers it starts) uses."""
    server = with_bucket(shared_s3, BUCKET)
    with pytest.MonkeyPatch.context() as patch:
        for name, value in server.env().items():
            patch.setenv(name, value)
        yield server


@pytest.fixture(scope="module")
def ray_local(s3: S3Server, tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    import ray

    # address="local": a new instance, never the session's embedded cluster (nor any other found on the machine).
    # A local ray.init writes its auth token to ~/.ray/auth_token, which later Ray starts on this machine would
    # pick up: HOME is a folder of the test's own while it runs.
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HOME", str(tmp_path_factory.mktemp("ray-home")))
        ray.init(address="local", num_cpus=1, include_dashboard=False, log_to_driver=False)
        ray.data.DataContext.get_current().enable_progress_bars = False
        try:
            yield
        finally:
            ray.shutdown()


def _upload(server: S3Server, folder: str, prefix: str) -> None:
    client = server.client()
    for name in sorted(os.listdir(folder)):
        client.upload_file(os.path.join(folder, name), BUCKET, f"{prefix}/{name}")


def test_process_and_encode_read_and_write_s3(s3, ray_local, tmp_path):
    synthetic.write_set(str(tmp_path / "audio"), n_speakers=2, per_speaker=6, seed=1)
    _upload(s3, str(tmp_path / "audio"), "in/audio")
    counts = process.run(f"s3://{BUCKET}/in/audio", f"s3://{BUCKET}/runs/process", val_fraction=0.3,
                         config=audio.SplitConfig())
    assert counts["files"] == 12 and counts["train"] + counts["val"] == 12 and counts["val"] > 0
    clips = store.read_table(f"s3://{BUCKET}/runs/process/{process.CLIPS_DIR}")
    assert clips.schema.equals(process.clip_schema())  # plain list<float32> audio, not Ray's tensor columns
    rows = clips.to_pylist()
    assert len({r["clip_id"] for r in rows}) == 12 and {r["sample_rate"] for r in rows} == {16_000}
    assert {r["speaker"] for r in rows} == {"spk0", "spk1"} and all(r["text"] for r in rows)
    assert all(r["split"] == process.split_of(r["clip_id"].rsplit("-", 1)[0] + ".wav", 0.3) for r in rows)
    again = process.run(f"s3://{BUCKET}/in/audio", f"s3://{BUCKET}/runs/process", val_fraction=0.3,
                        config=audio.SplitConfig())  # a retried attempt: the same clips, not twice as many
    assert again == counts

    args = encode.parse_args(["--input", f"s3://{BUCKET}/runs/process", "--run-dir", f"s3://{BUCKET}/runs/encode",
                              "--codebook-size", "16"])
    summary = encode.run(args.input, args.run_dir, args)
    assert summary["train"] + summary["val"] + summary["skipped"] == 12
    listing = s3.client().list_objects_v2(Bucket=BUCKET, Prefix="runs/encode/")["Contents"]
    keys = {o["Key"] for o in listing if not o["Key"].endswith("/")}  # pyarrow also writes empty folder keys
    assert keys == {f"runs/encode/{k}" for k in (encode.CODES_FILE, "codec.json", "sft/train.parquet",
                                                 "sft/val.parquet", "sft/added_tokens.json")}
    codes = store.read_table(f"s3://{BUCKET}/runs/encode/{encode.CODES_FILE}").to_pylist()
    assert all(min(r["codes"]) >= 0 and max(r["codes"]) < 16 and len(r["codes"]) > 10 for r in codes)
    val = store.read_table(f"s3://{BUCKET}/runs/encode/sft/val.parquet").to_pylist()
    assert val and all(sft.parse_codes(r["completion"]) == next(c["codes"] for c in codes
                                                                if c["clip_id"] == r["clip_id"]) for r in val)


@pytest.fixture(scope="module")
def offline_runs(ray_local) -> Iterator[Path]:
    """process (offline: the synthetic set) then encode, in local folders, through their entrypoints."""
    root = Path(tempfile.mkdtemp(prefix="rtjob-voice-t-"))
    assert process.main(["--run-dir", str(root / "process"), "--speakers", "2", "--per-speaker", "8",
                         "--val-fraction", "0.25"]) == 0
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(contract.ENV_INPUT_URI, str(root / "process"))
        patch.setenv(contract.ENV_RUN_DIR, str(root / "encode"))
        assert encode.main(["--codebook-size", "16", "--prompt-frames", "8"]) == 0
    yield root


def test_offline_process_writes_the_synthetic_wavs_and_reads_them_back(offline_runs, capsys):
    wavs = sorted((offline_runs / "process" / process.SOURCE_DIR).glob("*.wav"))
    assert len(wavs) == 16 and (offline_runs / "process" / process.SOURCE_DIR / synthetic.METADATA_FILE).is_file()
    clips = store.read_table(str(offline_runs / "process" / process.CLIPS_DIR)).to_pylist()
    assert len(clips) == 16 and all(np.isfinite(c["audio"]).all() for c in clips)
    tokens = json.loads((offline_runs / "encode" / "sft" / encode.ADDED_TOKENS_FILE).read_text())["tokens"]
    assert tokens == sft.added_tokens(16)


def test_stages_refuse_a_missing_location_with_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv(contract.ENV_INPUT_URI, raising=False)
    assert encode.main(["--run-dir", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip().count("\n") == 0
    monkeypatch.setenv(contract.ENV_STEP_URIS, "not json")
    from training.voice import evaluate

    assert evaluate.main(["--model", "tiny:qwen3", "--run-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ERROR: ") and contract.ENV_STEP_URIS in err and err.strip().count("\n") == 0


def test_evaluate_refuses_a_model_that_did_not_learn(s3, offline_runs, tmp_path, capsys, monkeypatch):
    """The 'checkpoint' is the untrained base model itself, in S3: the gate fails with one line, the table is
    written."""
    from training.hf import model as model_api
    from training.voice import evaluate

    encode_dir = offline_runs / "encode"
    tokenizer = model_api.load_tokenizer("tiny:qwen3", data_dir=str(encode_dir / "sft"))
    ckpt = tmp_path / "train" / contract.checkpoint_dir_name(1)
    model_api.load_model("tiny:qwen3", tokenizer, seed=0).save_pretrained(ckpt)
    tokenizer.save_pretrained(ckpt)
    (ckpt / contract.STATE_FILE).write_text(json.dumps({"epoch": 1}))
    (tmp_path / "train" / contract.checkpoint_dir_name(2)).mkdir()
    (tmp_path / "train" / contract.checkpoint_dir_name(2) / "config.json").write_text("{}")  # no state.json: skipped
    for folder in (contract.checkpoint_dir_name(1), contract.checkpoint_dir_name(2)):
        _upload(s3, str(tmp_path / "train" / folder), f"train/{folder}")
    monkeypatch.setenv(contract.ENV_STEP_URIS, json.dumps({"encode": str(encode_dir), "train": f"s3://{BUCKET}/train"}))
    out = tmp_path / "eval"
    assert evaluate.main(["--model", "tiny:qwen3", "--run-dir", str(out)]) == 1
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith("ERROR: the fine-tuned model does not beat base, unigram/speaker, unigram/global")
    result = json.loads((out / evaluate.EVALUATION_FILE).read_text())
    assert result["checkpoint"].endswith(contract.checkpoint_dir_name(1))
    rows = {r[contract.METRIC_MODEL]: r for r in json.loads((out / contract.METRICS_FILE).read_text())}
    assert rows[evaluate.FINE_TUNED][contract.METRIC_VAL_LOSS] == rows[evaluate.BASE][contract.METRIC_VAL_LOSS]
    assert rows[evaluate.UNIGRAM_SPEAKER][contract.METRIC_VAL_LOSS] < rows[evaluate.BASE][contract.METRIC_VAL_LOSS]
    assert all(Path(f).read_bytes()[:4] == b"RIFF" for f in result["sample"]["files"].values())
    assert evaluate.main(["--model", "tiny:qwen3", "--run-dir", str(out), "--no-require-better"]) == 0
