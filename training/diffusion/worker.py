"""The Ray Train worker of the pretrain step: latents, UNet (DDP) + EMA, epochs, samples, checkpoints.

Every rank reads the whole latents table and trains on its DistributedSampler share; held-out rows are split
exactly once over the ranks. Rank 0 alone loads the frozen VAE / text encoder / tokenizer: it samples the grids
and writes the checkpoints. A resumed worker (run restarted, or Ray Train's worker-group restart) reloads raw
weights, EMA, optimizer and history from the latest checkpoint and continues at the next epoch.
"""

from __future__ import annotations

import logging
from typing import Any

import ray.train
import ray.train.torch
import torch
from torch.utils.data import DataLoader, TensorDataset

from .. import checkpoint as shared_checkpoint
from .. import data as shared_data
from .. import loop
from .. import precision as amp
from ..hf import steps as hf_steps
from ..ray_ddp import set_sampler_epoch, setup_worker
from . import checkpoint, components, latents, objective, sampling

log = logging.getLogger(__name__)
_NOT_MEANINGFUL = ("train_accuracy", "val_accuracy")  # loop.EpochStats fields a denoising loss has no use for


def epoch_line(epoch: int, epochs: int, metrics: dict) -> str:
    return (f"epoch {epoch}/{epochs} train_loss={metrics['train_loss']:.4f} val_loss={metrics['val_loss']:.4f} "
            f"samples/s={metrics['train_samples_per_s']:.1f} time={metrics['epoch_time_s']:.1f}s "
            f"peak_mem={metrics['train_peak_mem_mb']:.0f}MB")


def loaders(config: dict, meta: latents.LatentsMeta, rank: int, world: int) -> tuple[DataLoader, DataLoader]:
    train_z, train_e, _ = latents.read_split(config["data"], meta, val=False)
    val_z, val_e, _ = latents.read_split(config["data"], meta, val=True)
    val_z_t = torch.from_numpy(val_z)
    noise, timesteps = objective.fixed_noise(val_z_t, objective.TRAIN_TIMESTEPS, config["seed"])
    val_set = TensorDataset(val_z_t, torch.from_numpy(val_e), noise, timesteps)
    batch = max(1, config["global_batch_size"] // world)
    if rank == 0:
        log.info(f"DATA: {len(train_z)} training + {len(val_z)} held-out latents {tuple(meta.latent_shape)} from "
                 f"{config['data']} ({meta.description}); {world} workers x batch {batch} per step")
    train = ray.train.torch.prepare_data_loader(
        DataLoader(TensorDataset(torch.from_numpy(train_z), torch.from_numpy(train_e)), batch_size=batch,
                   shuffle=True, drop_last=len(train_z) >= batch * world), move_to_device=False)
    val = DataLoader(shared_data.eval_shard(val_set, rank, world), batch_size=batch)
    return train, val


def model_and_state(config: dict, meta: latents.LatentsMeta, device: torch.device,
                    scaler: torch.amp.GradScaler | None = None
                    ) -> tuple[torch.nn.Module, torch.optim.Optimizer, Any, int, list[dict]]:
    """``(DDP UNet, AdamW, EMA, last finished epoch, history)``: fresh, or from the latest checkpoint (which also
    restores ``scaler``, fp16's)."""
    unet = components.build_unet(config["unet_size"], sample_size=meta.latent_shape[1],
                                 latent_channels=meta.latent_shape[0], cross_attention_dim=meta.text_shape[1],
                                 seed=config["seed"])
    if config["gradient_checkpointing"]:
        unet.enable_gradient_checkpointing()
    with checkpoint.latest() as path:
        if path is None:
            unet.to(device)
            ema, last_epoch, history = objective.new_ema(unet, config["ema_decay"]), 0, []
        else:
            ema, last_epoch, history = checkpoint.restore(path, unet, device, config["ema_decay"])
        net = ray.train.torch.prepare_model(unet)
        optimizer = torch.optim.AdamW(net.parameters(), lr=config["lr"], weight_decay=config["weight_decay"])
        if path is not None:
            shared_checkpoint.load_optimizer(path, optimizer, device, scaler)
    return net, optimizer, ema, last_epoch, history


def train_loop_per_worker(config: dict) -> None:
    setup_worker(config)
    components.quiet_progress_bars()
    context = ray.train.get_context()
    rank, world = context.get_world_rank(), context.get_world_size()
    device = ray.train.torch.get_device()
    precision, line = amp.for_device(config["precision"], device)  # the one rule (bf16 support, TF32)
    config["precision"] = precision
    if rank == 0:
        log.info(line)
    meta, uncond = latents.read_meta(config["data"])
    scheduler = objective.noise_scheduler(config["prediction_type"])
    scaler = hf_steps.grad_scaler(precision, device)
    net, optimizer, ema, last_epoch, history = model_and_state(config, meta, device, scaler)
    # Rank 0 samples and checkpoints: it alone needs the frozen models.
    frozen = tuple(m.to(device) if hasattr(m, "to") else m for m in components.load_saved(
        f"{config['data'].rstrip('/')}/{meta.models}")) if rank == 0 else None
    if rank == 0:
        params = sum(p.numel() for p in net.parameters())
        log.info(f"MODEL: UNet2DConditionModel {config['unet_size']} ({params / 1e6:.2f}M parameters) from scratch, "
                 f"DDP over {world} ranks, {config['prediction_type']} prediction, precision {precision}, "
                 f"EMA decay {config['ema_decay']} (diffusers EMAModel), grad clip {config['max_grad_norm']}")
        if last_epoch:
            log.info(loop.resume_line(last_epoch, config["epochs"]))
    train_loader, val_loader = loaders(config, meta, rank, world)
    uncond_t = torch.from_numpy(uncond).to(device)

    def one_epoch(epoch: int) -> tuple[loop.EpochStats, loop.EpochStats]:
        set_sampler_epoch(train_loader, epoch)
        torch.manual_seed(config["seed"] + 1000 * epoch + rank)  # new noise per epoch and rank; same on a rerun
        train = objective.train_epoch(net, train_loader, optimizer, scheduler, device, precision=precision,
                                      scaler=scaler, max_grad_norm=config["max_grad_norm"],
                                      cond_drop=config["cond_drop"], uncond=uncond_t, ema=ema)
        return train, objective.evaluate(net, val_loader, scheduler, device, precision=precision)

    def after_epoch(epoch: int, metrics: dict) -> None:
        for key in _NOT_MEANINGFUL:
            metrics.pop(key, None)  # the history holds this same row
        if rank == 0:
            log.info(epoch_line(epoch, config["epochs"], metrics))
            if frozen is not None and (epoch % config["sample_every"] == 0 or epoch == config["epochs"]):
                log.info(f"SAMPLES: {sample(net, ema, frozen, scheduler, config, epoch, device)}")
        checkpoint.save_and_report(metrics, unet=net, optimizer=optimizer, ema=ema, frozen=frozen,
                                   scheduler=scheduler, epoch=epoch, history=history, scaler=scaler)

    loop.run_epochs(last_epoch + 1, config["epochs"], history, one_epoch, after_epoch, None, precision)


def sample(net: torch.nn.Module, ema: Any, frozen: tuple[Any, Any, Any], scheduler: Any, config: dict,
           epoch: int, device: torch.device) -> str:
    """Rank 0: the epoch's grid from the EMA weights, saved under the run folder; returns its location."""
    unet = shared_checkpoint.unwrap(net)
    with checkpoint.ema_weights(unet, ema), hf_steps.autocast(config["precision"], device):
        pipeline = sampling.build_pipeline(unet, *frozen, scheduler)
        pipeline.set_progress_bar_config(disable=True)
        grid = sampling.sample_grid(pipeline, config["prompts"], config["sample_seeds"],
                                    steps=config["sample_steps"], guidance=config["guidance"])
    return sampling.save_grid(grid, config["run_dir"], epoch)
