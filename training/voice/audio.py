"""Audio in: decode (soundfile: WAV, FLAC, ...), mono, resample (soxr), trim silence, split into clips.

Silence is judged per 20 ms frame against the loudest frame of the file (``top_db`` below it), so it works at
any recording level. Splitting keeps words whole: voiced segments (separated by pauses of at least
``min_gap_s``) are packed into clips of at most ``max_clip_s``; only a segment longer than that is cut.
"""

from __future__ import annotations

import io
from dataclasses import dataclass

import numpy as np

SAMPLE_RATE = 16_000
FRAME_S = 0.02


@dataclass(frozen=True)
class SplitConfig:
    top_db: float = 40.0  # a frame this far below the loudest one is silence
    min_gap_s: float = 0.04  # a pause at least this long separates voiced segments
    max_clip_s: float = 2.0
    min_clip_s: float = 0.3  # shorter clips are dropped (too little to encode)


def decode(data: bytes) -> tuple[np.ndarray, int]:
    """``(mono float32 waveform, sample rate)`` of an encoded audio file (channels averaged)."""
    import soundfile as sf

    wave, rate = sf.read(io.BytesIO(data), dtype="float32", always_2d=True)
    return wave.mean(axis=1).astype(np.float32), int(rate)


def resample(wave: np.ndarray, rate: int, target: int = SAMPLE_RATE) -> np.ndarray:
    if rate == target:
        return wave.astype(np.float32)
    import soxr

    return np.asarray(soxr.resample(wave, rate, target), dtype=np.float32)


def _frame_db(wave: np.ndarray, frame: int) -> np.ndarray:
    n = max(1, len(wave) // frame)
    frames = wave[: n * frame].reshape(n, frame) if len(wave) >= frame else wave[None, :]
    rms = np.sqrt(np.mean(frames.astype(np.float64) ** 2, axis=1) + 1e-20)
    return np.asarray(20 * np.log10(rms))


def voiced_segments(wave: np.ndarray, rate: int, config: SplitConfig) -> list[tuple[int, int]]:
    """Sample ranges ``[start, end)`` of the voiced parts, pauses shorter than ``min_gap_s`` bridged."""
    frame = int(rate * FRAME_S)
    db = _frame_db(wave, frame)
    loud = db > db.max() - config.top_db
    if not loud.any() or db.max() < -80:  # digital silence
        return []
    runs: list[list[int]] = []
    for i in np.flatnonzero(loud):
        if runs and (i - runs[-1][1]) * FRAME_S < config.min_gap_s + FRAME_S:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    return [(a * frame, min(len(wave), (b + 1) * frame)) for a, b in runs]


def trim(wave: np.ndarray, rate: int, config: SplitConfig) -> np.ndarray:
    segments = voiced_segments(wave, rate, config)
    return wave[segments[0][0]:segments[-1][1]] if segments else wave[:0]


def split(wave: np.ndarray, rate: int, config: SplitConfig) -> list[tuple[int, int, int]]:
    """Clips as ``(start, end, number of voiced segments in it)``: segments packed greedily up to max_clip_s."""
    limit = int(config.max_clip_s * rate)
    pieces: list[tuple[int, int]] = []
    for a, b in voiced_segments(wave, rate, config):
        pieces += [(s, min(b, s + limit)) for s in range(a, b, limit)]  # only an over-long segment is cut
    clips: list[list[int]] = []
    for a, b in pieces:
        if clips and b - clips[-1][0] <= limit:
            clips[-1][1:] = [b, clips[-1][2] + 1]
        else:
            clips.append([a, b, 1])
    return [(a, b, n) for a, b, n in clips if b - a >= config.min_clip_s * rate]


def clip_texts(text: str, counts: list[int], segments_in_file: int) -> list[str]:
    """Each clip's transcript. One clip: the file's. Several: exact only when the file has one voiced segment per
    word (words are then assigned to their segments); otherwise no alignment is known and the clips get ""."""
    if len(counts) == 1:
        return [text]
    words = text.split()
    if len(words) != segments_in_file or sum(counts) != segments_in_file:
        return [""] * len(counts)
    out, at = [], 0
    for n in counts:
        out.append(" ".join(words[at:at + n]))
        at += n
    return out
