"""Sample grids and the ``StableDiffusionPipeline`` of a run.

The pipeline is assembled from the UNet (its EMA weights), the preprocess step's VAE, text encoder and tokenizer and
the training scheduler's config, with ``safety_checker=None``: it is what a checkpoint folder holds
(``save_pretrained``) and what ``StableDiffusionPipeline.from_pretrained(checkpoint folder)`` gives back.

Grids: one row per prompt, one column per seed, sampled with DDIM (``steps`` steps, classifier-free guidance
``guidance``), saved as PNG at ``<run>/samples/epoch_NNNN.png``.
"""

from __future__ import annotations

import io
from typing import Any

import numpy as np

from rtjob_contract import SAMPLES_DIR, sample_file_name

from .. import data as shared_data

DEFAULT_PROMPTS = ("a red circle on a black background", "a blue square on a gray background",
                   "a yellow triangle on a teal background", "a white circle on a teal background")


def sample_name(epoch: int) -> str:
    return f"{SAMPLES_DIR}/{sample_file_name(epoch)}"


def build_pipeline(unet: Any, vae: Any, text_encoder: Any, tokenizer: Any, scheduler: Any) -> Any:
    from diffusers import StableDiffusionPipeline

    return StableDiffusionPipeline(vae=vae, text_encoder=text_encoder, tokenizer=tokenizer, unet=unet,
                                   scheduler=scheduler, safety_checker=None, feature_extractor=None,
                                   requires_safety_checker=False)


def sample_grid(pipeline: Any, prompts: list[str] | tuple[str, ...], seeds: int, *, steps: int = 20,
                guidance: float = 3.0) -> np.ndarray:
    """``(rows × H, seeds × W, 3)`` uint8: prompt ``i`` with seed ``j`` at row ``i``, column ``j``."""
    import torch
    from diffusers import DDIMScheduler

    # DDIM for sampling (the checkpoint keeps the DDPM training scheduler); put back afterwards.
    training_scheduler = pipeline.scheduler
    pipeline.scheduler = DDIMScheduler.from_config(training_scheduler.config)
    try:
        rows = []
        for prompt in prompts:
            generators = [torch.Generator(device="cpu").manual_seed(seed) for seed in range(seeds)]
            images = pipeline([prompt] * seeds, generator=generators, num_inference_steps=steps,
                              guidance_scale=guidance, output_type="np").images
            rows.append(np.concatenate(list(images), axis=1))
    finally:
        pipeline.scheduler = training_scheduler
    grid = np.concatenate(rows, axis=0)
    return (np.clip(grid, 0, 1) * 255).round().astype(np.uint8)


def png_bytes(grid: np.ndarray) -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(grid).save(buffer, format="PNG")
    return buffer.getvalue()


def save_grid(grid: np.ndarray, run_dir: str, epoch: int) -> str:
    """Write the grid as ``<run_dir>/samples/epoch_NNNN.png`` (local or object store); returns its location."""
    fs, path = shared_data.filesystem(run_dir)
    fs.create_dir(f"{path.rstrip('/')}/{SAMPLES_DIR}", recursive=True)
    with fs.open_output_stream(f"{path.rstrip('/')}/{sample_name(epoch)}") as out:
        out.write(png_bytes(grid))
    return f"{run_dir.rstrip('/')}/{sample_name(epoch)}"
