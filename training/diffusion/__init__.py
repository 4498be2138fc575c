"""Stable Diffusion pretraining as a pipeline: ``preprocess`` (Ray Data: images + captions -> VAE latents + CLIP
text embeddings as Parquet) then ``pretrain`` (Ray Train: a UNet2DConditionModel from scratch on those latents)."""
