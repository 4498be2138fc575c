"""Audio ⇄ discrete codes. Two codecs, one interface (``encode``, ``decode``, ``describe``, ``to_json``):

* ``MelKMeansCodec`` (offline, the default): log-mel frames quantised by a k-means codebook fit with numpy on the
  train split (fixed seed: the same clips give the same codebook). Decoding looks the codes' centroids up and
  turns those log-mel frames back into a waveform with Griffin-Lim (features.py).
* ``HFCodec``: a ``transformers`` neural audio codec (EnCodec, Mimi, ...) loaded with its own ``from_pretrained``
  (a hub id or a local folder); its first (coarsest) quantizer's codes are used, so one token per frame.

``codec.json`` in the encode step's folder holds what decoding needs: the offline codebook itself, or the
reference of the transformers codec.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from .audio import SAMPLE_RATE, resample
from .features import MelConfig, griffin_lim, log_mel, project

CODEC_FILE = "codec.json"


class Codec(Protocol):
    sample_rate: int
    size: int  # number of distinct codes

    def encode(self, wave: np.ndarray) -> np.ndarray: ...  # 16 kHz mono → int32 codes
    def decode(self, codes: np.ndarray) -> np.ndarray: ...  # codes → waveform at self.sample_rate
    def describe(self) -> str: ...
    def to_json(self) -> dict[str, Any]: ...


def kmeans(points: np.ndarray, k: int, *, seed: int, iterations: int = 25) -> np.ndarray:
    """Lloyd's k-means with k-means++ seeding; deterministic for a given seed and input order."""
    rng = np.random.default_rng(seed)
    x = points.astype(np.float64)
    centres = [x[rng.integers(len(x))]]
    dist = ((x - centres[0]) ** 2).sum(1)
    for _ in range(1, k):
        centres.append(x[rng.choice(len(x), p=dist / dist.sum())] if dist.sum() > 0 else x[rng.integers(len(x))])
        dist = np.minimum(dist, ((x - centres[-1]) ** 2).sum(1))
    c = np.stack(centres)
    for _ in range(iterations):
        labels = nearest(x, c)
        for j in range(k):
            members = x[labels == j]
            if len(members):
                c[j] = members.mean(0)
    return c.astype(np.float32)


def nearest(x: np.ndarray, centres: np.ndarray) -> np.ndarray:
    d = (x ** 2).sum(1)[:, None] - 2 * project(x, centres) + (centres ** 2).sum(1)[None, :]
    return np.asarray(d.argmin(1), dtype=np.int32)


class MelKMeansCodec:
    kind = "mel-kmeans"

    def __init__(self, config: MelConfig, codebook: np.ndarray, seed: int = 0) -> None:
        self.config, self.codebook, self.seed = config, codebook.astype(np.float32), seed
        self.sample_rate, self.size = config.sample_rate, len(codebook)

    @classmethod
    def fit(cls, waves: list[np.ndarray], *, size: int, config: MelConfig, seed: int) -> MelKMeansCodec:
        frames = np.concatenate([log_mel(w, config) for w in waves])
        return cls(config, kmeans(frames, size, seed=seed), seed)

    def encode(self, wave: np.ndarray) -> np.ndarray:
        return nearest(log_mel(wave, self.config).astype(np.float64), self.codebook.astype(np.float64))

    def decode(self, codes: np.ndarray) -> np.ndarray:
        return griffin_lim(self.codebook[np.asarray(codes)], self.config)

    def describe(self) -> str:
        c = self.config
        return (f"offline codec: k-means ({self.size} codes, seed {self.seed}) of {c.n_mels}-band log-mel frames "
                f"(n_fft {c.n_fft}, hop {c.hop} = {1000 * c.hop / c.sample_rate:.0f} ms) fit on the train split; "
                f"decoded with Griffin-Lim")

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, **self.config.to_json(), "seed": self.seed, "codebook_size": self.size,
                "codebook": np.round(self.codebook.astype(np.float64), 5).tolist()}


class HFCodec:
    kind = "transformers"

    def __init__(self, ref: str) -> None:
        from transformers import AutoFeatureExtractor, AutoModel

        self.ref = ref
        self.model = AutoModel.from_pretrained(ref).eval()
        self.extractor = AutoFeatureExtractor.from_pretrained(ref)
        self.sample_rate = int(self.extractor.sampling_rate)
        self.size = int(self.model.config.codebook_size)

    def encode(self, wave: np.ndarray) -> np.ndarray:
        import torch

        audio = resample(wave, SAMPLE_RATE, self.sample_rate)
        inputs = self.extractor(raw_audio=audio, sampling_rate=self.sample_rate, return_tensors="pt")
        with torch.no_grad():
            codes = self.model.encode(inputs["input_values"], inputs.get("padding_mask")).audio_codes
        # EnCodec: (chunks, batch, quantizers, frames); Mimi, DAC: (batch, quantizers, frames).
        return codes.reshape(-1, codes.shape[-2], codes.shape[-1])[0, 0].numpy().astype(np.int32)

    def decode(self, codes: np.ndarray) -> np.ndarray:
        import torch

        first = torch.as_tensor(np.asarray(codes, dtype=np.int64))[None, None, :]  # one quantizer
        with torch.no_grad():
            if self.model.config.model_type == "encodec":
                audio = self.model.decode(first[None], [None]).audio_values
            else:
                audio = self.model.decode(first).audio_values
        return np.asarray(audio.reshape(-1).numpy(), dtype=np.float32)

    def describe(self) -> str:
        return (f"transformers codec {self.ref} ({self.model.config.model_type}, {self.size} codes, first "
                f"quantizer only, {self.sample_rate} Hz)")

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "ref": self.ref, "sample_rate": self.sample_rate, "codebook_size": self.size}


def from_json(spec: dict[str, Any]) -> Codec:
    if spec.get("kind") == MelKMeansCodec.kind:
        config = MelConfig(**{k: int(spec[k]) for k in ("sample_rate", "n_fft", "hop", "n_mels")})
        return MelKMeansCodec(config, np.asarray(spec["codebook"], dtype=np.float32), int(spec.get("seed", 0)))
    if spec.get("kind") == HFCodec.kind:
        return HFCodec(str(spec["ref"]))
    raise ValueError(f"{CODEC_FILE}: unknown codec kind {spec.get('kind')!r}")
