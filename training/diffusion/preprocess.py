"""Preprocess step (Ray Data): ``python -m training.diffusion.preprocess [flags]``.

Reads image–caption pairs (``--data``: a Parquet folder or an image folder, local or ``s3://``, layouts in
``pairs.py``; or ``synthetic``: a generated coloured-shapes set), resizes and center-crops them to
``--image-size``, encodes images with the VAE (latent mean × ``scaling_factor``) and captions with the CLIP text
encoder, and writes ``$RTJOB_RUN_URI/latents/*.parquet`` + ``latents.json`` + ``uncond_embedding.npy`` and the
models it used (``models/``) for the pretrain step (layout in ``latents.py``).

``--vae tiny --text-encoder tiny`` (the local profile) builds tiny random-init models offline; the log says so.
Their VAE's ``scaling_factor`` is calibrated to unit latent variance on the first images (SD's own recipe for
0.18215); a real VAE keeps its own.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile

import rtjob_contract as contract

from .. import data as shared_data
from .. import options
from . import components, encode, latents, pairs


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=f"python -m {__package__}.preprocess",
                                     description="Images + captions -> VAE latents + CLIP text embeddings (Ray Data)")
    parser.add_argument("--data", default=pairs.SYNTHETIC,
                        help="folder (local or s3://) of image-caption pairs, or 'synthetic' (generated offline)")
    parser.add_argument("--layout", choices=("parquet", "folder"), default="parquet",
                        help="parquet: *.parquet with image bytes + caption; folder: images with a .txt caption "
                        "beside each")
    parser.add_argument("--image-column", default="image")
    parser.add_argument("--caption-column", default="caption")
    parser.add_argument("--vae", required=True, help="hub id, local or s3:// folder, or 'tiny' (random-init, offline)")
    parser.add_argument("--text-encoder", required=True, help="CLIPTextModel: hub id, folder, s3:// or 'tiny'")
    parser.add_argument("--tokenizer", help="CLIP tokenizer reference (default: --text-encoder's)")
    parser.add_argument("--subfolders", action="store_true",
                        help="the references are SD repositories: read vae/, text_encoder/, tokenizer/ inside")
    parser.add_argument("--image-size", type=options.positive_int, default=512)
    parser.add_argument("--synthetic-size", type=options.positive_int, default=1024,
                        help="images of the synthetic set")
    parser.add_argument("--val-percent", type=float, default=10.0, help="held-out share, by image hash")
    parser.add_argument("--batch-size", type=options.positive_int, default=64, help="images per encode batch")
    # The run's storage folder: Ray Data writes it from workers on any node (RTJOB_RUN_DIR is the driver's node's).
    parser.add_argument("--output", default=os.environ.get(contract.ENV_RUN_URI) or os.environ.get(contract.ENV_RUN_DIR),
                        help="run folder to write (env RTJOB_RUN_URI)")
    parser.add_argument("--use-gpu", action=argparse.BooleanOptionalAction,
                        default=options.env_bool(contract.ENV_USE_GPU, False), help="encode on GPUs (one per task)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if not args.output:
        parser.error("no output folder: pass --output or set RTJOB_RUN_URI (rtjob sets it when the run has storage)")
    if not 0 < args.val_percent < 100:
        parser.error(f"--val-percent must be between 0 and 100, got {args.val_percent}")
    args.output = options.resolve_storage_path(args.output)
    return args


def upload_folder(local: str, uri: str) -> None:
    import pyarrow.fs as pafs

    fs, path = shared_data.filesystem(uri)
    fs.create_dir(path, recursive=True)
    pafs.copy_files(local, path, source_filesystem=pafs.LocalFileSystem(), destination_filesystem=fs)


def main(argv: list[str] | None = None) -> int:
    import ray

    logging.basicConfig(level=logging.INFO, format="%(message)s")
    args = parse_args(argv)
    components.quiet_progress_bars()
    out = args.output.rstrip("/")
    data = args.data
    if data == pairs.SYNTHETIC:
        data = pairs.write_synthetic(f"{out}/source", args.synthetic_size, args.image_size, args.seed)
        print(f"DATA: the SYNTHETIC coloured-shapes set ({args.synthetic_size} images of {args.image_size}px, "
              f"captions name colour, shape and background), written to {data}/synthetic.parquet", flush=True)
    else:
        print(f"DATA: {data} ({args.layout} layout)", flush=True)
    ray.init()
    ds = pairs.read_dataset(data, "parquet" if args.data == pairs.SYNTHETIC else args.layout, args.image_column,
                            args.caption_column)

    vae, text_encoder, tokenizer, described = components.load_frozen(
        args.vae, args.text_encoder, args.tokenizer, subfolders=args.subfolders, seed=args.seed)
    print(f"MODELS: {described}", flush=True)
    first = [pairs.image_bytes(r["image"]) for r in ds.take(64)]
    if args.vae == components.TINY:
        vae.register_to_config(scaling_factor=encode.calibrate_scaling(vae, first, args.image_size))
        print(f"MODELS: tiny VAE scaling_factor={vae.config.scaling_factor:.4f} (unit latent std on "
              f"{len(first)} images)", flush=True)
    with tempfile.TemporaryDirectory(prefix="rtjob-sd-models-") as tmp:
        components.save_frozen(tmp, vae, text_encoder, tokenizer)
        upload_folder(tmp, f"{out}/{latents.MODELS_DIR}")
    # One image with the empty caption: the latent shape, and the unconditional embedding.
    z0, empty = encode.encode_pairs(first[:1], [""], (vae, text_encoder, tokenizer), args.image_size)
    uncond = empty[0]

    encoded = ds.map_batches(
        encode.encode_batch, batch_size=args.batch_size, batch_format="numpy", zero_copy_batch=True,
        fn_kwargs={"models_dir": f"{out}/{latents.MODELS_DIR}", "size": args.image_size,
                   "val_percent": args.val_percent, "use_gpu": args.use_gpu},
        num_gpus=1 if args.use_gpu else None)
    fs, path = shared_data.filesystem(f"{out}/{latents.LATENTS_DIR}")
    fs.delete_dir_contents(path, missing_dir_ok=True)  # a retried run must not append a second copy
    encoded.write_parquet(path, filesystem=fs)

    import pyarrow.parquet as pq

    val_column = pq.read_table(path, filesystem=fs, columns=["val"])["val"].to_pylist()
    meta = latents.LatentsMeta(
        latent_shape=list(z0.shape[1:]), text_shape=list(uncond.shape), train_rows=val_column.count(False),
        val_rows=val_column.count(True), image_size=args.image_size,
        scaling_factor=float(vae.config.scaling_factor), models=f"{latents.MODELS_DIR}/", description=described)
    latents.write_meta(out, meta, uncond)
    print(f"LATENTS: {meta.train_rows} train + {meta.val_rows} held-out rows, latent {tuple(meta.latent_shape)}, "
          f"text embedding {tuple(meta.text_shape)} -> {out}/{latents.LATENTS_DIR}/", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
