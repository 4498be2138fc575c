"""An offline, learnable speech-like set: speakers with their own pitch and timbre say words made of vowel-like
phones, and the transcript names the words.

Each speaker has a base pitch, a spectral tilt and a formant scale (a longer or shorter "vocal tract"); each word
is two or three phones (a formant pair and a pitch movement each). So the audio depends on both the text (which
formants, in which order) and the speaker (pitch, tilt, formant scale): what a voice-cloning model must learn.
Files are written as WAV at 22.05 kHz (some stereo) with a metadata.csv, and read back through the same path as
real recordings (resampling and the mono mix-down included).
"""

from __future__ import annotations

import csv
import os

import numpy as np

GEN_RATE = 22_050
# (F1, F2) of a few vowels, Hz
VOWELS = [(730, 1090), (270, 2290), (300, 870), (530, 1840), (640, 1190), (390, 1990), (490, 1350), (440, 1020)]
WORDS = ["ka", "lu", "mi", "so", "ta", "ne", "ro", "vi", "po", "du", "fe", "ga"]
PHONE_S = 0.13
GAP_S = 0.07
METADATA_FILE = "metadata.csv"


def speakers(n: int, seed: int) -> list[dict[str, float]]:
    rng = np.random.default_rng(seed)
    pitches = np.linspace(100, 250, n) if n > 1 else np.array([150.0])
    return [{"f0": float(f0), "tilt": float(rng.uniform(0.55, 0.85)), "scale": float(rng.uniform(0.85, 1.2))}
            for f0 in pitches]


def lexicon(seed: int) -> dict[str, list[tuple[int, float]]]:
    """Each word: its phones as (vowel index, pitch movement over the phone)."""
    rng = np.random.default_rng(seed + 1)
    return {w: [(int(rng.integers(len(VOWELS))), float(rng.uniform(-0.25, 0.25)))
                for _ in range(int(rng.integers(2, 4)))] for w in WORDS}


def _phone(speaker: dict[str, float], vowel: int, glide: float, rate: int, phase0: float) -> tuple[np.ndarray, float]:
    n = int(PHONE_S * rate)
    t = np.arange(n) / rate
    f0 = speaker["f0"] * (1 + glide * t / PHONE_S)
    phase = phase0 + 2 * np.pi * np.cumsum(f0) / rate
    harmonics = np.arange(1, int(4000 / f0.max()) + 1)
    centre = np.array(VOWELS[vowel]) * speaker["scale"]
    freqs = harmonics * speaker["f0"]
    gain = speaker["tilt"] ** harmonics * sum(1 / (1 + ((freqs - c) / 90.0) ** 2) for c in centre) + 0.02
    wave = (gain[:, None] * np.sin(harmonics[:, None] * phase[None, :])).sum(axis=0)
    envelope = np.minimum(1, np.minimum(np.arange(n), np.arange(n)[::-1]) / (0.01 * rate))
    return wave * envelope, float(phase[-1])


def utterance(speaker: dict[str, float], words: list[str], lex: dict[str, list[tuple[int, float]]],
              rng: np.random.Generator, rate: int = GEN_RATE) -> np.ndarray:
    parts = [np.zeros(int(rng.uniform(0.08, 0.15) * rate))]
    phase = 0.0
    for i, word in enumerate(words):
        if i:
            parts.append(np.zeros(int(GAP_S * rate)))
        for vowel, glide in lex[word]:
            wave, phase = _phone(speaker, vowel, glide, rate, phase)
            parts.append(wave)
    parts.append(np.zeros(int(rng.uniform(0.08, 0.15) * rate)))
    wave = np.concatenate(parts)
    wave = 0.5 * wave / np.abs(wave).max() * rng.uniform(0.5, 1.0)  # recording level varies
    return (wave + rng.normal(0, 1e-4, len(wave))).astype(np.float32)


def write_set(folder: str, *, n_speakers: int = 4, per_speaker: int = 75, seed: int = 0) -> int:
    """WAV files and metadata.csv (file,speaker,text) in ``folder``; returns the number of files."""
    import soundfile as sf

    os.makedirs(folder, exist_ok=True)
    rng = np.random.default_rng(seed + 2)
    lex = lexicon(seed)
    rows = []
    for s, speaker in enumerate(speakers(n_speakers, seed)):
        for u in range(per_speaker):
            words = [WORDS[int(i)] for i in rng.integers(len(WORDS), size=int(rng.integers(2, 4)))]
            wave = utterance(speaker, words, lex, rng)
            name = f"spk{s}_{u:03d}.wav"
            data = np.stack([wave, 0.9 * wave], axis=1) if u % 3 == 0 else wave  # every third one stereo
            sf.write(os.path.join(folder, name), data, GEN_RATE, subtype="PCM_16")
            rows.append((name, f"spk{s}", " ".join(words)))
    with open(os.path.join(folder, METADATA_FILE), "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["file", "speaker", "text"])
        writer.writerows(rows)
    return len(rows)
