"""Log-mel frames and their inverse (Griffin-Lim), in numpy: the offline codec's front and back end.

torchaudio has no build for this torch, and librosa is not a dependency; these few functions are all the codec
needs (a Hann-window STFT, a Slaney-style mel filterbank, overlap-add inverse).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from functools import lru_cache

import numpy as np

LOG_FLOOR = 1e-5


@dataclass(frozen=True)
class MelConfig:
    sample_rate: int = 16_000
    n_fft: int = 1024
    hop: int = 320  # 20 ms: 50 frames (codes) a second
    n_mels: int = 40

    def to_json(self) -> dict[str, int]:
        return asdict(self)


def project(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b.T`` without BLAS: these products are small, and a multi-threaded BLAS on a busy 2-core machine
    took ~16 ms for one 45x513x40 product (0.15 ms on one thread); einsum's own loop takes ~1 ms."""
    return np.einsum("ij,kj->ik", a, b)


def _window(n_fft: int) -> np.ndarray:
    return np.hanning(n_fft + 1)[:-1]


def stft(wave: np.ndarray, config: MelConfig) -> np.ndarray:
    """Complex STFT, shape (frames, n_fft // 2 + 1); centred frames (reflect padding): frame i is at i * hop."""
    pad = config.n_fft // 2
    x = np.pad(wave.astype(np.float64), pad, mode="reflect" if len(wave) > pad else "constant")
    n = 1 + (len(x) - config.n_fft) // config.hop
    idx = np.arange(config.n_fft)[None, :] + config.hop * np.arange(n)[:, None]
    return np.fft.rfft(x[idx] * _window(config.n_fft), axis=1)


def istft(spec: np.ndarray, config: MelConfig, length: int) -> np.ndarray:
    """Weighted overlap-add inverse of ``stft``."""
    frames = np.fft.irfft(spec, n=config.n_fft, axis=1) * _window(config.n_fft)
    total = config.n_fft + config.hop * (len(frames) - 1)
    out, norm = np.zeros(total), np.zeros(total)
    win2 = _window(config.n_fft) ** 2
    for i, frame in enumerate(frames):
        out[i * config.hop:i * config.hop + config.n_fft] += frame
        norm[i * config.hop:i * config.hop + config.n_fft] += win2
    out /= np.maximum(norm, 1e-8)
    pad = config.n_fft // 2
    return out[pad:pad + length]


@lru_cache(maxsize=8)
def mel_filterbank(config: MelConfig) -> np.ndarray:
    """(n_mels, n_fft // 2 + 1) triangular filters, equal area (Slaney norm), on the HTK mel scale."""
    def hz_to_mel(f: np.ndarray) -> np.ndarray:
        return 2595 * np.log10(1 + f / 700)

    def mel_to_hz(m: np.ndarray) -> np.ndarray:
        return 700 * (10 ** (m / 2595) - 1)

    bins = np.linspace(0, config.sample_rate / 2, config.n_fft // 2 + 1)
    edges = mel_to_hz(np.linspace(0, hz_to_mel(np.array(config.sample_rate / 2)), config.n_mels + 2))
    bank = np.zeros((config.n_mels, len(bins)))
    for m in range(config.n_mels):
        lo, mid, hi = edges[m], edges[m + 1], edges[m + 2]
        rising, falling = (bins - lo) / (mid - lo), (hi - bins) / (hi - mid)
        bank[m] = np.maximum(0, np.minimum(rising, falling)) * 2 / (hi - lo)
    return bank


def log_mel(wave: np.ndarray, config: MelConfig) -> np.ndarray:
    """(frames, n_mels) natural-log mel power."""
    power = np.abs(stft(wave, config)) ** 2
    return np.asarray(np.log(project(power, mel_filterbank(config)) + LOG_FLOOR), dtype=np.float32)


def griffin_lim(log_mel_frames: np.ndarray, config: MelConfig, *, iterations: int = 32, seed: int = 0) -> np.ndarray:
    """A waveform whose log-mel approximates ``log_mel_frames``: mel power → linear magnitude by the filterbank's
    pseudo-inverse, then Griffin-Lim phase recovery (fixed seed: the same frames give the same audio)."""
    bank = mel_filterbank(config)
    power = project(np.maximum(np.exp(log_mel_frames.astype(np.float64)) - LOG_FLOOR, 0), np.linalg.pinv(bank))
    magnitude = np.sqrt(np.maximum(power, 0))
    length = config.hop * (len(magnitude) - 1)
    rng = np.random.default_rng(seed)
    angles = np.exp(2j * np.pi * rng.random(magnitude.shape))
    wave = istft(magnitude * angles, config, length)
    for _ in range(iterations):
        spec = stft(wave, config)[: len(magnitude)]
        angles = np.exp(1j * np.angle(spec))
        wave = istft(magnitude * angles, config, length)
    peak = np.abs(wave).max()
    return np.asarray(wave / peak * 0.5 if peak > 0 else wave, dtype=np.float32)
