"""Encoding image-caption pairs: the VAE's latent mean (× ``scaling_factor``) and the text encoder's last hidden
state, as a Ray Data ``map_batches`` function (a module of its own: Ray pickles it by reference, not by value)."""

from __future__ import annotations

from typing import Any

import numpy as np

from . import components, latents, pairs

_MODELS: dict[str, tuple[Any, Any, Any]] = {}  # per Ray worker process: the frozen models, loaded once


def encode_pairs(images: list[bytes], captions: list[str], models: tuple[Any, Any, Any], size: int,
                 device: Any = "cpu") -> tuple[np.ndarray, np.ndarray]:
    """``(latents (N, C, h, w), text embeddings (N, T, D))`` of a batch, float32."""
    import torch

    vae, text_encoder, tokenizer = models
    pixels = torch.from_numpy(np.stack([pairs.to_pixels(b, size) for b in images])).to(device)
    tokens = tokenizer(captions, padding="max_length", max_length=tokenizer.model_max_length, truncation=True,
                       return_tensors="pt").input_ids.to(device)
    with torch.no_grad():
        z = vae.encode(pixels).latent_dist.mean * vae.config.scaling_factor
        emb = text_encoder(tokens)[0]
    return z.float().cpu().numpy(), emb.float().cpu().numpy()


def encode_batch(batch: dict, *, models_dir: str, size: int, val_percent: float, use_gpu: bool) -> Any:
    """Ray Data ``map_batches`` function: raw rows -> an Arrow table of encoded rows."""
    import torch

    device = "cuda" if use_gpu else "cpu"
    if models_dir not in _MODELS:
        torch.set_num_threads(1)
        components.quiet_progress_bars()
        _MODELS[models_dir] = tuple(m.to(device) if hasattr(m, "to") else m
                                    for m in components.load_saved(models_dir))  # type: ignore[assignment]
    images = [pairs.image_bytes(v) for v in batch["image"]]
    captions = [str(c) for c in batch["caption"]]
    z, emb = encode_pairs(images, captions, _MODELS[models_dir], size, device)
    return latents.table(captions, z, emb, [latents.is_val(b, val_percent) for b in images])


def calibrate_scaling(vae: Any, images: list[bytes], size: int) -> float:
    """1 / std of the unscaled latent means of ``images`` (how SD chose its VAE's 0.18215)."""
    import torch

    pixels = torch.from_numpy(np.stack([pairs.to_pixels(b, size) for b in images]))
    with torch.no_grad():
        z = vae.encode(pixels).latent_dist.mean
    return float(1.0 / z.float().std())
