"""`rtjob submit sd-pretrain --nodes 2` on the 2-node embedded cluster with S3 storage (moto): the preprocess step
encodes the synthetic set with the tiny VAE and text encoder (Ray Data), the pretrain step trains the UNet (Ray
Train DDP); a training worker SIGKILLed after the first registered checkpoint is restarted by Ray Train and
resumes at the next epoch; the loss falls, sample grids land in S3 as valid PNGs, and `rtjob pull PIPELINE_ID`
brings the UNet and the samples, which reload as a StableDiffusionPipeline; `rtjob results PIPELINE_ID` shows the
newest sample grid beside the loss curves."""

from __future__ import annotations

import io
import json
import re
import sys

import pytest
from support.cli import REPO, new_id, popen_rtjob, rtjob
from support.s3_server import S3Server, bucket_fixture
from test_fault_tolerance import RESUME_LINE, kill_a_worker_after_the_first_checkpoint

pytestmark = pytest.mark.cluster
BUCKET = "sd-runs"
EPOCH_LINE = re.compile(r"epoch (\d+)/4 train_loss=([\d.]+) val_loss=([\d.]+)")


s3 = bucket_fixture(BUCKET)


def registered(s3: S3Server, prefix: str) -> list[int]:
    """Epochs whose checkpoint Ray Train's controller has registered (what a restarted group resumes from)."""
    try:
        body = s3.client().get_object(Bucket=BUCKET, Key=f"{prefix}/checkpoint_manager_snapshot.json")["Body"]
        snapshot = json.loads(body.read())
    except Exception:  # not written yet
        return []
    return sorted(int(r["metrics"]["epoch"]) for r in snapshot.get("checkpoint_results", []))


def test_sd_pretrain_pipeline_on_s3_learns_resumes_after_a_killed_worker_and_pulls_unet_and_samples(
        cluster_env, s3, tmp_path):
    from PIL import Image

    env = {**cluster_env, **s3.env()}
    pid = new_id("sd")
    prefix = f"runs/sd-pretrain-pretrain/{pid}-pretrain"
    follower = popen_rtjob("submit", "sd-pretrain", "--nodes", "2", "--storage", f"s3://{BUCKET}/runs",
                           "--forward-aws-credentials", "--submission-id", pid, env=env)
    # Bounds, not timings: the first checkpoint's wait counts from the submit, the preprocess step included (137 s
    # of it beside the voice-clone pipeline in one CI run, which then timed out at 300 s).
    out, err, saved = kill_a_worker_after_the_first_checkpoint(follower, f"{pid}-pretrain",
                                                               lambda: registered(s3, prefix), 600, 420)
    assert follower.returncode == 0, (out + err)[-6000:]
    assert f"pipeline {pid} SUCCEEDED (2/2 steps succeeded)" in err, err[-2000:]
    # No silent stand-ins: the log says what was encoded and with which models.
    assert "the SYNTHETIC coloured-shapes set" in out and "tiny random-init AutoencoderKL" in out
    assert "DDP over 2 ranks" in out, out[-3000:]
    resumes = [tuple(map(int, m)) for m in RESUME_LINE.findall(out)]
    assert len(resumes) == 1 and resumes[0][0] in (saved, saved + 1) and resumes[0][2] == 4, (resumes, saved)
    after = out[out.index("RESUME: loaded"):]
    assert list(dict.fromkeys(int(m[0]) for m in EPOCH_LINE.findall(after))) == list(range(resumes[0][1], 5))

    client = s3.client()
    history = json.loads(client.get_object(Bucket=BUCKET, Key=f"{prefix}/checkpoint_epoch_0004/metrics.json")
                         ["Body"].read())
    assert [row["epoch"] for row in history] == [1, 2, 3, 4]  # one history across the restart
    assert history[-1]["train_loss"] < history[0]["train_loss"], history
    assert history[-1]["val_loss"] < history[0]["val_loss"], history
    listed = client.list_objects_v2(Bucket=BUCKET, Prefix=f"{prefix}/samples/")["Contents"]
    keys = {o["Key"] for o in listed if not o["Key"].endswith("/")}  # pyarrow's create_dir leaves a folder key
    assert {f"{prefix}/samples/epoch_{e:04d}.png" for e in (2, 4)} <= keys, keys  # --sample-every 2
    for key in keys:
        image = Image.open(io.BytesIO(client.get_object(Bucket=BUCKET, Key=key)["Body"].read()))
        image.verify()
        assert image.size == (2 * 32, 4 * 32)  # 2 seeds x 4 prompts of 32 px

    pulled = json.loads(rtjob("pull", pid, "--to", str(tmp_path / "p"), "-o", "json", env=env, timeout=120).stdout)
    assert [p["step"] for p in pulled] == ["preprocess", "pretrain"]
    pretrain = tmp_path / "p" / "pretrain"
    assert (pretrain / "samples" / "epoch_0004.png").is_file()
    folder = pretrain / "checkpoint_epoch_0004"
    assert {"model_index.json", "unet", "unet_train", "vae", "text_encoder", "tokenizer", "scheduler",
            "state.json"} <= {p.name for p in folder.iterdir()}

    # `rtjob results PIPELINE_ID`: the pretrain step's history and its newest sample grid, pulled and beside the curves.
    plot = tmp_path / "results.png"
    shown = rtjob("results", pid, "--plot", str(plot), "-o", "json", env=env, timeout=120, cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr[-2000:]
    steps = {r["label"]: r for r in json.loads(shown.stdout)}
    grids = steps[f"{pid}/pretrain"]["samples"]
    assert [(g["epoch"], g["image"]) for g in grids] == [(4, True)]
    assert grids[0]["path"] == str(tmp_path / "rtjob-runs" / f"{pid}-pretrain" / "samples" / "epoch_0004.png")
    assert Image.open(plot).size[0] > Image.open(grids[0]["path"]).size[0]

    sys.path.insert(0, str(REPO))
    import torch
    from diffusers import StableDiffusionPipeline

    pipeline = StableDiffusionPipeline.from_pretrained(str(folder), safety_checker=None)
    pipeline.set_progress_bar_config(disable=True)
    image = pipeline("a red circle on a black background", num_inference_steps=3, output_type="np",
                     generator=torch.Generator().manual_seed(0)).images[0]
    assert image.shape == (32, 32, 3)
