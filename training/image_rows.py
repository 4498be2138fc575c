"""Image rows as the Ray Data entrypoint reads them (``training.ray_data_ddp --data-uri``) and as a test or a user
writes them: Parquet with an ``image`` column (encoded PNG/JPEG bytes, Hugging Face's ``{bytes, path}`` struct or
pixel arrays) and a ``label`` column, or an image folder whose class folders are the labels; decoded to
MNIST-normalised 1x28x28 float32 images and int64 labels. One home for the layout, both ways (no Ray here)."""

from __future__ import annotations

import io
import os

import numpy as np
import torch

from . import data

IMAGE, LABEL = "image", "label"


def _normalise(pixels: np.ndarray) -> np.ndarray:
    """(N, 28, 28) / (N, 784) / (N, 1, 28, 28) pixels -> (N, 1, 28, 28) float32, MNIST-normalised."""
    images = pixels.reshape(len(pixels), data.IN_CHANNELS, data.IMAGE_SIZE, data.IMAGE_SIZE)
    if images.dtype == np.uint8:
        return ((images.astype(np.float32) / 255.0 - data.MNIST_MEAN) / data.MNIST_STD).astype(np.float32)
    return images.astype(np.float32)


def _decode(encoded: bytes) -> np.ndarray:
    from PIL import Image

    image = Image.open(io.BytesIO(encoded)).convert("L")
    if image.size != (data.IMAGE_SIZE, data.IMAGE_SIZE):
        image = image.resize((data.IMAGE_SIZE, data.IMAGE_SIZE))
    return np.asarray(image, dtype=np.uint8)


def decode_batch(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Parquet rows -> normalised image tensors and int64 labels."""
    column = batch[IMAGE]
    first = column[0] if len(column) else None
    if isinstance(first, dict):  # Hugging Face image feature: {"bytes": ..., "path": ...}
        pixels = np.stack([_decode(item["bytes"]) for item in column])
    elif isinstance(first, (bytes, bytearray)):
        pixels = np.stack([_decode(item) for item in column])
    elif column.dtype == object:  # variable-length lists of pixel values
        pixels = np.stack([np.asarray(item) for item in column])
    else:
        pixels = column
    return {IMAGE: _normalise(np.asarray(pixels)), LABEL: np.asarray(batch[LABEL], dtype=np.int64)}


def label_from_folder(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    labels = [int(os.path.basename(os.path.dirname(path))) for path in batch["path"]]
    return {IMAGE: _normalise(np.asarray(batch[IMAGE])), LABEL: np.asarray(labels, dtype=np.int64)}


def export_parquet(dataset: torch.utils.data.TensorDataset, folder: str, rows_per_file: int = 512) -> None:
    """Write a normalised TensorDataset as Parquet (PNG bytes + label), the layout --data-uri reads."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from PIL import Image

    os.makedirs(folder, exist_ok=True)
    x, y = dataset.tensors
    pixels = ((x * data.MNIST_STD + data.MNIST_MEAN).clamp(0, 1) * 255).round().to(torch.uint8).squeeze(1).numpy()
    for part, start in enumerate(range(0, len(pixels), rows_per_file)):
        encoded = []
        for image in pixels[start:start + rows_per_file]:
            buffer = io.BytesIO()
            Image.fromarray(image, mode="L").save(buffer, format="PNG")
            encoded.append(buffer.getvalue())
        table = pa.table({IMAGE: pa.array(encoded, pa.binary()),
                          LABEL: pa.array(y[start:start + rows_per_file].numpy(), pa.int64())})
        pq.write_table(table, os.path.join(folder, f"part-{part:05d}.parquet"))
