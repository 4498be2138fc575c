"""The preprocess step's output, as the pretrain step reads it: ``<run>/latents/*.parquet`` + ``<run>/latents.json``.

Each Parquet row: ``caption`` (string), ``latent`` (VAE latent mean × the VAE's ``scaling_factor``, float32, flat)
``text_embedding`` (the text encoder's last hidden state, float32, flat) and ``val`` (held out: chosen by a hash of
the image bytes, so the split is the same whatever the order or the number of encoders). ``latents.json`` holds the
shapes, the row counts, the models' folder (``models/``: vae, text_encoder, tokenizer as save_pretrained) and
``uncond_embedding.npy`` (the embedding of the empty caption: dropped captions in training, the negative prompt of
classifier-free guidance).
"""

from __future__ import annotations

import hashlib
import io
import json
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from .. import data as shared_data

LATENTS_DIR, META_FILE, MODELS_DIR, UNCOND_FILE = "latents", "latents.json", "models", "uncond_embedding.npy"


@dataclass(frozen=True)
class LatentsMeta:
    latent_shape: list[int]  # (channels, height, width)
    text_shape: list[int]  # (tokens, hidden size)
    train_rows: int
    val_rows: int
    image_size: int
    scaling_factor: float
    models: str  # "models/" (relative to the run folder)
    description: str  # which VAE / text encoder / data made them


def is_val(image: bytes, val_percent: float) -> bool:
    return int.from_bytes(hashlib.sha256(image).digest()[:4], "big") % 10_000 < val_percent * 100


def table(captions: list[str], latents: np.ndarray, embeddings: np.ndarray, val: list[bool]) -> Any:
    """One Arrow table of encoded rows (flat fixed-size float32 lists)."""
    import pyarrow as pa

    def flat(array: np.ndarray) -> Any:
        size = int(np.prod(array.shape[1:]))
        return pa.FixedSizeListArray.from_arrays(pa.array(array.reshape(-1).astype(np.float32)), size)

    return pa.table({"caption": pa.array(captions, pa.string()), "latent": flat(latents),
                     "text_embedding": flat(embeddings), "val": pa.array(val, pa.bool_())})


def write_meta(run_dir: str, meta: LatentsMeta, uncond: np.ndarray) -> None:
    fs, path = shared_data.filesystem(run_dir)
    with fs.open_output_stream(f"{path.rstrip('/')}/{UNCOND_FILE}") as out:
        buffer = io.BytesIO()
        np.save(buffer, uncond.astype(np.float32))
        out.write(buffer.getvalue())
    with fs.open_output_stream(f"{path.rstrip('/')}/{META_FILE}") as out:  # last: marks a complete output
        out.write(json.dumps(asdict(meta), indent=1).encode())


def read_meta(run_dir: str) -> tuple[LatentsMeta, np.ndarray]:
    fs, path = shared_data.filesystem(run_dir)
    try:
        with fs.open_input_stream(f"{path.rstrip('/')}/{META_FILE}") as f:
            meta = LatentsMeta(**json.loads(f.read()))
    except FileNotFoundError:
        raise FileNotFoundError(f"{run_dir}/{META_FILE} not found: run the preprocess step first "
                                f"(python -m training.diffusion.preprocess)") from None
    with fs.open_input_stream(f"{path.rstrip('/')}/{UNCOND_FILE}") as f:
        uncond = np.load(io.BytesIO(f.read()))
    return meta, uncond


def read_split(run_dir: str, meta: LatentsMeta, *, val: bool) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """``(latents (N, C, H, W), text embeddings (N, T, D), captions)`` of the training or held-out rows, in a
    fixed order (sorted by caption then latent bytes: the same on every worker whatever the file order)."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    fs, path = shared_data.filesystem(run_dir)
    table = pq.read_table(f"{path.rstrip('/')}/{LATENTS_DIR}", filesystem=fs)
    table = table.filter(pc.equal(table["val"], val))
    latents = table["latent"].combine_chunks().flatten().to_numpy().reshape(-1, *meta.latent_shape)
    embeddings = table["text_embedding"].combine_chunks().flatten().to_numpy().reshape(-1, *meta.text_shape)
    captions = table["caption"].to_pylist()
    order = sorted(range(len(captions)), key=lambda i: (captions[i], latents[i].tobytes()))
    return latents[order], embeddings[order], [captions[i] for i in order]
