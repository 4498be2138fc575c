"""The Stable Diffusion pieces (training/diffusion/) without a Ray cluster: the synthetic set and the image transform,
tiny models and encode shapes, the latents' Parquet round-trip, S3 (moto) for data, latents and models, the
denoising objective (a fixed batch's loss falls; v-prediction targets), EMA math, checkpoints that resume and reload
as a StableDiffusionPipeline that generates, and mixed precision that is real (bf16 activations inside the UNet,
fp32 vs bf16 runs reaching similar loss, fp16 refused on CPU)."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
from support.lazy import lazy
from support.s3_server import S3Server, bucket_server

# torch, diffusers and transformers cost an xdist worker seconds to import: imported at their first use (in the
# worker that runs these tests), never at collection (support/lazy.py).
torch = lazy("torch")
pq = lazy("pyarrow.parquet")
Image = lazy("PIL.Image")
checkpoint = lazy("training.diffusion.checkpoint")
components = lazy("training.diffusion.components")
encode = lazy("training.diffusion.encode")
latents = lazy("training.diffusion.latents")
objective = lazy("training.diffusion.objective")
pairs = lazy("training.diffusion.pairs")
sampling = lazy("training.diffusion.sampling")

BUCKET = "sd-tests"
SIZE = 32
PREDICTION_TYPES = ["epsilon", "v_prediction"]  # objective.PREDICTION_TYPES, which a test below checks


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """As in a Ray Train worker: one intra-op thread (two on a shared 2-core machine oversubscribe it)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def frozen():
    vae, text_encoder, tokenizer, _ = components.load_frozen("tiny", "tiny", None, subfolders=False, seed=0)
    images = [r["image"] for r in pairs.synthetic_pairs(16, SIZE, seed=9)]
    vae.register_to_config(scaling_factor=encode.calibrate_scaling(vae, images, SIZE))  # as the step does
    return vae, text_encoder, tokenizer


@pytest.fixture(scope="module")
def rows():
    return pairs.synthetic_pairs(24, SIZE, seed=0)


@pytest.fixture(scope="module")
def encoded(frozen, rows):
    z, emb = encode.encode_pairs([r["image"] for r in rows], [r["caption"] for r in rows], frozen, SIZE)
    return torch.from_numpy(z), torch.from_numpy(emb)


def tiny_unet(seed: int = 0):
    return components.build_unet("tiny", sample_size=8, latent_channels=4, cross_attention_dim=32, seed=seed)


# --- preprocess pieces ------------------------------------------------------------------------------------------


def test_synthetic_set_is_deterministic_and_its_captions_name_what_is_drawn(rows):
    again = pairs.synthetic_pairs(24, SIZE, seed=0)
    assert [r["caption"] for r in rows] == [r["caption"] for r in again] and rows[0]["image"] == again[0]["image"]
    for row in rows[:8]:
        _, colour, shape, _, _, background, _ = row["caption"].split()
        assert colour in pairs.COLOURS and shape in pairs.SHAPES and background in pairs.BACKGROUNDS
        pixels = np.asarray(Image.open(io.BytesIO(row["image"])).convert("RGB"))
        assert tuple(pixels[0, 0]) == pairs.BACKGROUNDS[background] or tuple(pixels[-1, -1]) == \
            pairs.BACKGROUNDS[background]
        assert (pixels == pairs.COLOURS[colour]).all(axis=-1).sum() > 20  # the shape is there, in its colour


def test_to_pixels_resizes_the_short_side_and_center_crops():
    image = Image.new("RGB", (80, 40), (0, 0, 0))
    image.paste((255, 255, 255), (20, 0, 60, 40))  # a white middle band of width 40 = the center crop
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    pixels = pairs.to_pixels(buffer.getvalue(), 16)
    assert pixels.shape == (3, 16, 16) and pixels.dtype == np.float32
    assert pixels[:, :, 2:-2].min() > 0.9  # white band kept, scaled to [-1, 1]
    with pytest.raises(ValueError, match="expected PNG/JPEG bytes"):
        pairs.image_bytes("not bytes")
    assert pairs.image_bytes({"bytes": b"x"}) == b"x"  # a Hugging Face datasets image struct


def test_encode_shapes_and_the_tiny_tokenizer(frozen, encoded):
    _, text_encoder, tokenizer = frozen
    z, emb = encoded
    assert z.shape == (24, 4, 8, 8) and emb.shape == (24, components.TINY_MAX_TOKENS, 32)
    ids = tokenizer("a red circle").input_ids
    assert ids[-1] == tokenizer.eos_token_id and tokenizer.decode(ids[:-1]) == "a red circle"
    assert text_encoder.config.eos_token_id == tokenizer.eos_token_id
    # Different captions give different embeddings (the UNet can condition on them).
    assert not torch.allclose(emb[0], emb[1])


def test_calibrated_scaling_gives_unit_latent_std(frozen, rows):
    vae = components.tiny_vae(seed=0)
    images = [r["image"] for r in rows]
    vae.register_to_config(scaling_factor=encode.calibrate_scaling(vae, images, SIZE))
    z, _ = encode.encode_pairs(images, [""] * len(images), (vae, frozen[1], frozen[2]), SIZE)
    assert z.std() == pytest.approx(1.0, rel=1e-3)


def test_real_models_load_by_reference_from_an_sd_repository_layout(tmp_path, frozen):
    components.save_frozen(str(tmp_path), *frozen)  # vae/, text_encoder/, tokenizer/: a Stable Diffusion repo's
    vae, text_encoder, tokenizer, described = components.load_frozen(str(tmp_path), str(tmp_path), None,
                                                                     subfolders=True, seed=0)
    assert described == f"VAE {tmp_path}, text encoder {tmp_path}"
    assert vae.config.scaling_factor == frozen[0].config.scaling_factor
    assert tokenizer("a red circle").input_ids == frozen[2]("a red circle").input_ids
    assert torch.equal(text_encoder.get_input_embeddings().weight, frozen[1].get_input_embeddings().weight)


def test_half_tiny_half_real_is_refused():
    with pytest.raises(ValueError, match="both 'tiny'"):
        components.load_frozen("tiny", "openai/clip-vit-large-patch14", None, subfolders=False, seed=0)


def write_latents(run_dir: str, rows, z: torch.Tensor, emb: torch.Tensor, filesystem=None, path=None) -> None:
    """What the preprocess step writes (two Parquet files as Ray Data would, the meta and the empty caption)."""
    val = [latents.is_val(r["image"], 25.0) for r in rows]
    table = latents.table([r["caption"] for r in rows], z.numpy(), emb.numpy(), val)
    folder = f"{path or run_dir}/{latents.LATENTS_DIR}"
    if filesystem is None:
        Path(folder).mkdir(parents=True, exist_ok=True)
    else:
        filesystem.create_dir(folder, recursive=True)
    pq.write_table(table.slice(0, 10), f"{folder}/part-0.parquet", filesystem=filesystem)
    pq.write_table(table.slice(10), f"{folder}/part-1.parquet", filesystem=filesystem)
    meta = latents.LatentsMeta(latent_shape=[4, 8, 8], text_shape=[components.TINY_MAX_TOKENS, 32],
                               train_rows=val.count(False), val_rows=val.count(True), image_size=SIZE,
                               scaling_factor=1.0, models="models/", description="tiny")
    latents.write_meta(run_dir, meta, emb[0].numpy())


def test_latents_parquet_round_trip_and_a_split_by_image_hash(tmp_path, rows, encoded):
    z, emb = encoded
    write_latents(str(tmp_path), rows, z, emb)
    meta, uncond = latents.read_meta(str(tmp_path))
    assert np.array_equal(uncond, emb[0].numpy())
    train_z, train_e, train_c = latents.read_split(str(tmp_path), meta, val=False)
    val_z, _, val_c = latents.read_split(str(tmp_path), meta, val=True)
    assert len(train_c) == meta.train_rows and len(val_c) == meta.val_rows and meta.val_rows > 0
    assert len(train_c) + len(val_c) == len(rows) and train_z.shape[1:] == (4, 8, 8)
    for caption, latent, embedding in zip(train_c, train_z, train_e, strict=True):  # each row as it was written
        assert any(r["caption"] == caption and np.array_equal(latent, z[i].numpy())
                   and np.array_equal(embedding, emb[i].numpy()) for i, r in enumerate(rows))
    with pytest.raises(FileNotFoundError, match="run the preprocess step first"):
        latents.read_meta(str(tmp_path / "nothing"))


@pytest.fixture(scope="module")
def s3():
    with bucket_server(BUCKET) as server:
        yield server


@pytest.fixture
def s3_env(s3: S3Server, monkeypatch: pytest.MonkeyPatch, tmp_path) -> S3Server:
    for name, value in {**s3.env(), "AWS_EC2_METADATA_DISABLED": "true", "RTJOB_DATA_DIR": str(tmp_path)}.items():
        monkeypatch.setenv(name, value)
    return s3


def test_synthetic_set_latents_and_models_through_s3(s3_env, rows, encoded, frozen, tmp_path):
    from training import data as shared_data

    source = pairs.write_synthetic(f"s3://{BUCKET}/run/source", 6, SIZE, seed=1)
    fs, path = shared_data.filesystem(source)
    table = pq.read_table(f"{path}/synthetic.parquet", filesystem=fs)
    assert table.column_names == ["image", "caption"] and table.num_rows == 6

    run = f"s3://{BUCKET}/run"
    fs, path = shared_data.filesystem(run)
    write_latents(run, rows, *encoded, filesystem=fs, path=path)
    meta, _ = latents.read_meta(run)
    assert len(latents.read_split(run, meta, val=False)[2]) == meta.train_rows

    local = tmp_path / "models"
    components.save_frozen(str(local), *frozen)
    from training.diffusion import preprocess

    preprocess.upload_folder(str(local), f"{run}/models")
    vae, text_encoder, tokenizer = components.load_saved(f"{run}/models")  # downloaded once, under a lock
    ids = tokenizer(["a red circle"], padding="max_length", max_length=tokenizer.model_max_length,
                    return_tensors="pt").input_ids
    with torch.no_grad():
        assert torch.equal(text_encoder(ids)[0], frozen[1](ids)[0])
    assert vae.config.scaling_factor == frozen[0].config.scaling_factor


# --- pretrain pieces --------------------------------------------------------------------------------------------


def fixed_batch_loss(unet, scheduler, z, emb, precision="fp32") -> float:
    noise, timesteps = objective.fixed_noise(z, objective.TRAIN_TIMESTEPS, seed=3)
    with torch.no_grad():
        return float(objective.loss_sum(unet, scheduler, z, emb, noise, timesteps, precision)) / z.size(0)


def test_the_parametrized_prediction_types_are_objectives_own():
    assert tuple(PREDICTION_TYPES) == objective.PREDICTION_TYPES


@pytest.mark.parametrize("prediction_type", PREDICTION_TYPES)
def test_training_steps_reduce_the_loss_of_a_fixed_batch(encoded, prediction_type):
    z, emb = encoded
    torch.manual_seed(0)
    unet, scheduler = tiny_unet(), objective.noise_scheduler(prediction_type)
    optimizer = torch.optim.AdamW(unet.parameters(), lr=2e-3)
    before = fixed_batch_loss(unet, scheduler, z, emb)
    stats = objective.train_epoch(unet, [(z, emb)] * 15, optimizer, scheduler, torch.device("cpu"),
                                  max_grad_norm=1.0)
    assert stats.samples == 15 * len(z) and stats.loss > 0
    assert fixed_batch_loss(unet, scheduler, z, emb) < 0.8 * before


def test_v_prediction_target_is_the_velocity(encoded):
    z, _ = encoded
    scheduler = objective.noise_scheduler("v_prediction")
    noise, t = objective.fixed_noise(z, objective.TRAIN_TIMESTEPS, seed=0)
    a = scheduler.alphas_cumprod[t].sqrt()[:, None, None, None]
    s = (1 - scheduler.alphas_cumprod[t]).sqrt()[:, None, None, None]
    assert torch.allclose(scheduler.get_velocity(z, noise, t), a * noise - s * z, atol=1e-5)
    with pytest.raises(ValueError, match="unknown prediction type"):
        objective.noise_scheduler("sample")


def test_caption_dropout_uses_the_empty_caption(encoded):
    _, emb = encoded
    torch.manual_seed(0)
    dropped = objective.drop_captions(emb, emb[0], 0.5)
    replaced = [torch.equal(dropped[i], emb[0]) for i in range(1, len(emb))]
    assert any(replaced) and not all(replaced)
    assert torch.equal(objective.drop_captions(emb, emb[0], 0.0), emb)


def test_ema_update_follows_the_warmed_up_decay():
    net = torch.nn.Linear(2, 1, bias=False)
    with torch.no_grad():
        net.weight.fill_(1.0)
    ema = objective.new_ema(net, decay=0.9)
    expected = 1.0
    for step in range(1, 6):
        with torch.no_grad():
            net.weight.fill_(float(step + 1))
        ema.step(net.parameters())
        n = step - 1  # diffusers: no warm-up decay at the first step (0), then min(decay, (1 + n) / (10 + n))
        decay = 0.0 if n <= 0 else min(0.9, (1 + n) / (10 + n))
        expected = decay * expected + (1 - decay) * (step + 1)
        assert ema.shadow_params[0][0, 0].item() == pytest.approx(expected, rel=1e-6)
    assert ema.optimization_step == 5
    assert objective.new_ema(net, 0.9, step=7).optimization_step == 7


def test_checkpoint_reloads_resumes_and_is_a_pipeline_that_generates(tmp_path, frozen, encoded):
    from diffusers import StableDiffusionPipeline

    z, emb = encoded
    unet, scheduler = tiny_unet(), objective.noise_scheduler("epsilon")
    optimizer = torch.optim.AdamW(unet.parameters(), lr=1e-3)
    ema = objective.new_ema(unet, decay=0.9)
    objective.train_epoch(unet, [(z, emb)] * 3, optimizer, scheduler, torch.device("cpu"), ema=ema)
    folder = tmp_path / "checkpoint_epoch_0002"
    checkpoint.export(str(folder), unet, ema, frozen, scheduler)
    torch.save(optimizer.state_dict(), folder / "optimizer.pt")
    from training import checkpoint as shared

    shared.write_run_state(str(folder), {"epoch": 2, "ema_step": ema.optimization_step}, [{"epoch": 1}, {"epoch": 2}])

    resumed = tiny_unet(seed=5)
    ema2, last_epoch, history = checkpoint.restore(str(folder), resumed, torch.device("cpu"), ema_decay=0.9)
    assert (last_epoch, [r["epoch"] for r in history], ema2.optimization_step) == (2, [1, 2], 3)
    for mine, theirs in zip(unet.parameters(), resumed.parameters(), strict=True):
        assert torch.equal(mine, theirs)  # the raw trained weights
    for mine, theirs in zip(ema.shadow_params, ema2.shadow_params, strict=True):
        assert torch.equal(mine, theirs)  # the EMA weights
    optimizer2 = torch.optim.AdamW(resumed.parameters(), lr=1e-3)
    shared.load_optimizer(str(folder), optimizer2, torch.device("cpu"))
    assert optimizer2.state_dict()["state"][0]["step"] == optimizer.state_dict()["state"][0]["step"]

    pipeline = StableDiffusionPipeline.from_pretrained(str(folder), safety_checker=None)
    for served, shadow in zip(pipeline.unet.parameters(), ema.shadow_params, strict=True):
        assert torch.equal(served, shadow)  # unet/ holds the EMA weights
    pipeline.set_progress_bar_config(disable=True)
    grid = sampling.sample_grid(pipeline, ["a red circle on a black background", "a blue square"], 2, steps=3)
    assert grid.shape == (2 * SIZE, 2 * SIZE, 3) and grid.dtype == np.uint8 and grid.std() > 0
    png = sampling.save_grid(grid, str(tmp_path / "run"), 3)
    assert png.endswith("samples/epoch_0003.png")
    assert np.array_equal(np.asarray(Image.open(png)), grid)


# --- precision --------------------------------------------------------------------------------------------------


def test_bf16_autocast_runs_the_unet_activations_in_bf16(encoded):
    z, emb = encoded
    unet, scheduler = tiny_unet(), objective.noise_scheduler("epsilon")
    seen: dict[str, set] = {"fp32": set(), "bf16": set()}
    current = ["fp32"]
    inner = [m for m in unet.modules() if isinstance(m, (torch.nn.Linear, torch.nn.Conv2d))]
    assert len(inner) > 20  # convolutions and attention projections throughout the UNet
    hooks = [m.register_forward_hook(lambda mod, args, out: seen[current[0]].add(out.dtype)) for m in inner]
    noise, t = objective.fixed_noise(z[:4], objective.TRAIN_TIMESTEPS, seed=0)
    for precision in ("fp32", "bf16"):
        current[0] = precision
        objective.loss_sum(unet, scheduler, z[:4], emb[:4], noise, t, precision).backward()
    for hook in hooks:
        hook.remove()
    assert seen == {"fp32": {torch.float32}, "bf16": {torch.bfloat16}}
    assert all(p.dtype == torch.float32 for p in unet.parameters())  # master weights stay fp32
    assert all(p.grad.dtype == torch.float32 for p in unet.parameters() if p.grad is not None)


def test_fp32_and_bf16_short_runs_reach_similar_loss(encoded):
    z, emb = (t[:4] for t in encoded)
    final = {}
    for precision in ("fp32", "bf16"):
        torch.manual_seed(0)
        unet, scheduler = tiny_unet(), objective.noise_scheduler("epsilon")
        optimizer = torch.optim.AdamW(unet.parameters(), lr=5e-3)
        before = fixed_batch_loss(unet, scheduler, z, emb)
        objective.train_epoch(unet, [(z, emb)] * 6, optimizer, scheduler, torch.device("cpu"),
                              precision=precision)
        final[precision] = fixed_batch_loss(unet, scheduler, z, emb)  # measured in fp32 for both
        assert final[precision] < 0.8 * before, (precision, before, final)
    assert final["bf16"] == pytest.approx(final["fp32"], rel=0.15), final
