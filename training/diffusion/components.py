"""The models of the Stable Diffusion steps: the frozen VAE, text encoder and tokenizer, and the UNet to pretrain.

The frozen ones come by reference (a hub id, a local ``save_pretrained`` folder, or an ``s3://`` folder copied once
per node under a lock: ``training.hf.model.local_folder``), loaded with the library's own ``from_pretrained``; or,
chosen explicitly with ``tiny``, as tiny random-init models of the same architectures (``AutoencoderKL``,
``CLIPTextModel``) built from their configs, with an offline byte-level tokenizer. A random VAE is no autoencoder:
its latents are a fixed random function of the image and it decodes any latent to near-noise (see ``TINY_NOTE``).

The preprocess step saves whatever it used under ``<run>/models/`` so the pretrain step and the pipeline rebuilt
from a checkpoint use the very same ones.
"""

from __future__ import annotations

import logging
from typing import Any

import torch

from ..hf import model as hf_model

log = logging.getLogger(__name__)

TINY = "tiny"
VAE_DIR, TEXT_ENCODER_DIR, TOKENIZER_DIR = "vae", "text_encoder", "tokenizer"
TINY_MAX_TOKENS = 48  # byte-level tokens: the synthetic captions are at most ~45 bytes
TINY_NOTE = ("tiny random-init AutoencoderKL + CLIPTextModel + offline byte-level tokenizer (no download): the "
             "UNet learns to denoise the random VAE's latents, so loss and val_loss are meaningful, but the random "
             "VAE decodes every latent to near-noise: sample grids show no shapes or colours, only that sampling, "
             "EMA and the pipeline run end to end")

# UNet sizes (--unet-size). cross_attention_dim always follows the text encoder's hidden size (768: CLIP ViT-L/14
# of SD 1.x; 1024: OpenCLIP ViT-H/14 of SD 2.x) and sample_size the latents' (64 for 512 px images).
UNET_SIZES: dict[str, dict[str, Any]] = {
    # ~0.8M parameters (with the tiny 32-wide text encoder): CPU tests and the embedded cluster (4x8x8 latents).
    "tiny": dict(block_out_channels=(32, 64), layers_per_block=1, attention_head_dim=8, norm_num_groups=8,
                 down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
                 up_block_types=("UpBlock2D", "CrossAttnUpBlock2D")),
    # ~74M (cross-attention 768): a first real run on one A10G (e.g. 256 px images, 4x32x32 latents).
    "small": dict(block_out_channels=(128, 256, 512), layers_per_block=2, attention_head_dim=8,
                  down_block_types=("CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "DownBlock2D"),
                  up_block_types=("UpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D")),
    # SD 1.x UNet (859.5M): fp32 weights + grads + AdamW + EMA = ~17 GB before activations, so on an A10G (24 GB)
    # bf16 autocast, gradient checkpointing and a per-GPU batch of ~4-8 (an estimate: not measured here).
    "sd15": dict(block_out_channels=(320, 640, 1280, 1280), layers_per_block=2, attention_head_dim=8,
                 down_block_types=("CrossAttnDownBlock2D",) * 3 + ("DownBlock2D",),
                 up_block_types=("UpBlock2D",) + ("CrossAttnUpBlock2D",) * 3),
    # SD 2.x UNet (865.9M): linear projections, per-level head dims.
    "sd2": dict(block_out_channels=(320, 640, 1280, 1280), layers_per_block=2, attention_head_dim=(5, 10, 20, 20),
                use_linear_projection=True,
                down_block_types=("CrossAttnDownBlock2D",) * 3 + ("DownBlock2D",),
                up_block_types=("UpBlock2D",) + ("CrossAttnUpBlock2D",) * 3),
}


def quiet_progress_bars() -> None:
    """No per-load / per-save progress bars from diffusers and transformers in the job log."""
    from diffusers.utils import logging as diffusers_logging
    from transformers.utils import logging as transformers_logging

    diffusers_logging.disable_progress_bar()
    transformers_logging.disable_progress_bar()


def tiny_tokenizer() -> Any:
    """training/hf's offline byte-level tokenizer, ending every caption with eos (CLIP pools at its eos) and
    padded to ``TINY_MAX_TOKENS`` like CLIP's 77."""
    from tokenizers.processors import TemplateProcessing

    tokenizer = hf_model.byte_level_tokenizer()
    eos = tokenizer.eos_token
    tokenizer.backend_tokenizer.post_processor = TemplateProcessing(
        single=f"$A {eos}", special_tokens=[(eos, tokenizer.eos_token_id)])
    tokenizer.model_max_length = TINY_MAX_TOKENS
    return tokenizer


def tiny_text_encoder(tokenizer: Any, seed: int) -> Any:
    from transformers import CLIPTextConfig, CLIPTextModel

    config = CLIPTextConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                            num_attention_heads=4, max_position_embeddings=TINY_MAX_TOKENS,
                            pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
                            bos_token_id=tokenizer.eos_token_id)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return CLIPTextModel(config).eval()


def tiny_vae(seed: int) -> Any:
    """Three levels: a 32 px image becomes 4x8x8 latents (SD's VAE: four levels, 512 px -> 4x64x64)."""
    from diffusers import AutoencoderKL

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return AutoencoderKL(in_channels=3, out_channels=3, latent_channels=4, layers_per_block=1,
                             block_out_channels=(16, 32, 32), norm_num_groups=8,
                             down_block_types=("DownEncoderBlock2D",) * 3,
                             up_block_types=("UpDecoderBlock2D",) * 3).eval()


def load_frozen(vae_ref: str, text_encoder_ref: str, tokenizer_ref: str | None, *, subfolders: bool,
                seed: int) -> tuple[Any, Any, Any, str]:
    """``(vae, text_encoder, tokenizer, description)`` from references, or the tiny ones for ``tiny``.

    ``subfolders``: the references are Stable Diffusion repositories (``vae/``, ``text_encoder/``, ``tokenizer/``
    inside). A reference that cannot be loaded is an error, never a fallback to a tiny model."""
    from diffusers import AutoencoderKL
    from transformers import AutoTokenizer, CLIPTextModel

    if (vae_ref == TINY) != (text_encoder_ref == TINY):
        raise ValueError("--vae and --text-encoder: both 'tiny' or both real models (their sizes must agree)")
    if vae_ref == TINY:
        tokenizer = tiny_tokenizer()
        return tiny_vae(seed), tiny_text_encoder(tokenizer, seed), tokenizer, TINY_NOTE

    def sub(name: str) -> dict:
        return {"subfolder": name} if subfolders else {}

    vae = AutoencoderKL.from_pretrained(hf_model.local_folder(vae_ref), **sub(VAE_DIR)).eval()
    text_encoder = CLIPTextModel.from_pretrained(hf_model.local_folder(text_encoder_ref),
                                                 **sub(TEXT_ENCODER_DIR)).eval()
    tokenizer = AutoTokenizer.from_pretrained(hf_model.local_folder(tokenizer_ref or text_encoder_ref),
                                              **sub(TOKENIZER_DIR))
    return vae, text_encoder, tokenizer, f"VAE {vae_ref}, text encoder {text_encoder_ref}"


def save_frozen(directory: str, vae: Any, text_encoder: Any, tokenizer: Any) -> None:
    """``directory/{vae,text_encoder,tokenizer}/`` as ``save_pretrained`` folders."""
    vae.save_pretrained(f"{directory}/{VAE_DIR}")
    text_encoder.save_pretrained(f"{directory}/{TEXT_ENCODER_DIR}")
    tokenizer.save_pretrained(f"{directory}/{TOKENIZER_DIR}")


def load_saved(directory: str) -> tuple[Any, Any, Any]:
    """``(vae, text_encoder, tokenizer)`` saved by ``save_frozen`` (a local folder or an ``s3://`` one)."""
    from diffusers import AutoencoderKL
    from transformers import AutoTokenizer, CLIPTextModel

    folder = hf_model.local_folder(directory)
    return (AutoencoderKL.from_pretrained(f"{folder}/{VAE_DIR}").eval(),
            CLIPTextModel.from_pretrained(f"{folder}/{TEXT_ENCODER_DIR}").eval(),
            AutoTokenizer.from_pretrained(f"{folder}/{TOKENIZER_DIR}"))


def build_unet(size: str, *, sample_size: int, latent_channels: int, cross_attention_dim: int, seed: int) -> Any:
    """A random-init ``UNet2DConditionModel`` of ``UNET_SIZES[size]`` for latents of that shape."""
    from diffusers import UNet2DConditionModel

    if size not in UNET_SIZES:
        raise ValueError(f"unknown UNet size {size!r}; choose one of {', '.join(UNET_SIZES)}")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return UNet2DConditionModel(sample_size=sample_size, in_channels=latent_channels,
                                    out_channels=latent_channels, cross_attention_dim=cross_attention_dim,
                                    **UNET_SIZES[size])
