"""The voice pipeline's audio side, without a cluster: the synthetic set, audio reading and clip splitting, the
offline codec, and the SFT rows (training/voice)."""

from __future__ import annotations

import io
import os

import numpy as np
import pytest
import soundfile as sf

from training.voice import audio, codec, sft, synthetic
from training.voice.features import MelConfig, log_mel
from training.voice.process import clips_of_file, read_transcripts


def _clips(folder: str) -> list[tuple[str, str, np.ndarray]]:
    """(speaker, text, 16 kHz clip) of every file of a synthetic set, through the process step's per-file path."""
    rows = read_transcripts(folder)
    out = []
    for rel, (speaker, text) in sorted(rows.items()):
        with open(os.path.join(folder, rel), "rb") as f:
            for clip in clips_of_file(f.read(), rel, speaker, text, "train", audio.SplitConfig()):
                out.append((clip["speaker"], clip["text"], clip["audio"]))
    return out


@pytest.fixture(scope="module")
def small_set(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[str, str, np.ndarray]]:
    folder = str(tmp_path_factory.mktemp("voice-set"))
    assert synthetic.write_set(folder, n_speakers=3, per_speaker=8, seed=0) == 24
    return _clips(folder)


def test_synthetic_set_reads_back_as_one_clip_per_utterance_with_its_transcript(small_set):
    assert len(small_set) == 24
    for speaker, text, wave in small_set:
        assert speaker.startswith("spk") and 2 <= len(text.split()) <= 3
        assert all(word in synthetic.WORDS for word in text.split())
        assert 0.4 < len(wave) / audio.SAMPLE_RATE < 1.5  # silence trimmed, ~1 s utterances


def test_synthetic_speakers_differ_more_than_their_utterances_do(small_set):
    """Learnable: a nearest-centroid classifier on mean log-mel frames names every held-out clip's speaker."""
    config = MelConfig()
    features = [(speaker, log_mel(wave, config).mean(0)) for speaker, _, wave in small_set]
    for i, (speaker, feature) in enumerate(features):
        rest = [f for j, f in enumerate(features) if j != i]
        centres = {s: np.mean([v for t, v in rest if t == s], axis=0) for s in {t for t, _ in rest}}
        assert min(centres, key=lambda s: np.linalg.norm(centres[s] - feature)) == speaker


def _two_bursts(rate: int) -> np.ndarray:
    """0.2 s silence, 0.5 s tone, 0.3 s silence, 0.5 s tone, 0.2 s silence (at 1e-4 noise)."""
    t = np.arange(int(0.5 * rate)) / rate
    tone = 0.4 * np.sin(2 * np.pi * 220 * t)
    gap = np.zeros(int(0.3 * rate))
    edge = np.zeros(int(0.2 * rate))
    wave = np.concatenate([edge, tone, gap, 0.7 * tone, edge])
    return wave + np.random.default_rng(0).normal(0, 1e-4, len(wave))


@pytest.mark.parametrize("fmt", ["WAV", "FLAC"])
def test_read_resample_trim_and_split(fmt):
    rate = 44_100
    stereo = np.stack([_two_bursts(rate), _two_bursts(rate)], axis=1)
    buffer = io.BytesIO()
    sf.write(buffer, stereo, rate, format=fmt, subtype="PCM_16")
    wave, got_rate = audio.decode(buffer.getvalue())
    assert got_rate == rate and wave.ndim == 1
    wave = audio.resample(wave, rate)
    assert abs(len(wave) - int(1.7 * audio.SAMPLE_RATE)) <= 2
    trimmed = audio.trim(wave, audio.SAMPLE_RATE, audio.SplitConfig())
    assert 1.25 < len(trimmed) / audio.SAMPLE_RATE < 1.4  # 0.5 + 0.3 + 0.5 s, to a 20 ms frame
    # Both bursts fit in 2 s: one clip, the whole transcript.
    one = audio.split(wave, audio.SAMPLE_RATE, audio.SplitConfig(max_clip_s=2.0))
    assert [n for _, _, n in one] == [2]
    assert audio.clip_texts("hello world", [2], 2) == ["hello world"]
    # At most 0.7 s a clip: split at the pause, each word with its burst.
    two = audio.split(wave, audio.SAMPLE_RATE, audio.SplitConfig(max_clip_s=0.7))
    assert len(two) == 2 and all(0.45 < (b - a) / audio.SAMPLE_RATE < 0.56 for a, b, _ in two)
    assert two[0][1] <= int(0.75 * audio.SAMPLE_RATE) <= two[1][0]  # the cut lies in the pause
    assert audio.clip_texts("hello world", [1, 1], 2) == ["hello", "world"]
    assert audio.clip_texts("three words here", [1, 1], 2) == ["", ""]  # no alignment known: no text


def test_digital_silence_gives_no_clip():
    assert audio.split(np.zeros(audio.SAMPLE_RATE, dtype=np.float32), audio.SAMPLE_RATE, audio.SplitConfig()) == []


def test_quantiser_is_deterministic_and_survives_a_round_trip(small_set):
    waves = [wave for _, _, wave in small_set]
    a = codec.MelKMeansCodec.fit(waves, size=32, config=MelConfig(), seed=3)
    b = codec.MelKMeansCodec.fit(waves, size=32, config=MelConfig(), seed=3)
    assert np.array_equal(a.codebook, b.codebook)
    reloaded = codec.from_json(a.to_json())  # what codec.json keeps is enough to decode
    agreement = []
    for wave in waves[:6]:
        codes = a.encode(wave)
        assert np.array_equal(codes, reloaded.encode(wave))
        again = a.encode(reloaded.decode(codes))
        n = min(len(codes), len(again))
        assert abs(len(codes) - len(again)) <= 1
        agreement.append(np.mean(codes[:n] == again[:n]))
    assert np.mean(agreement) > 0.6, agreement  # chance is 1/32


def _fake_clips() -> list[dict]:
    clips = []
    for s, count in (("ann", 4), ("bob", 3), ("cid", 1)):
        for i in range(count):
            clips.append({"clip_id": f"{s}-{i}", "speaker": s, "text": f"word{i} x", "split": "val" if i == 0 else
                          "train", "codes": [(7 * i + len(s) + k) % 16 for k in range(10 + i)]})
    return clips


def test_sft_rows_prompt_with_another_clip_of_the_same_speaker():
    clips = _fake_clips()
    by_id = {c["clip_id"]: c for c in clips}
    rows, skipped = sft.build_rows(clips, prompt_frames=6, seed=0)
    assert skipped == 1  # cid's only clip is in val: no other clip of that speaker to prompt with
    assert {split: len(r) for split, r in rows.items()} == {"train": 5, "val": 2}
    for split, split_rows in rows.items():
        for row in split_rows:
            clip, ref = by_id[row["clip_id"]], by_id[row["prompt_clip_id"]]
            assert clip["split"] == split
            assert ref["clip_id"] != clip["clip_id"] and ref["speaker"] == clip["speaker"] and ref["split"] == "train"
            assert row["prompt"] == f"{sft.TEXT}{clip['text']}{sft.SPEAKER}{sft.codes_text(ref['codes'][:6])}{sft.CODES}"
            assert sft.parse_codes(sft.speaker_part(row["prompt"])) == ref["codes"][:6]
            assert row["completion"].endswith(sft.END) and sft.parse_codes(row["completion"]) == clip["codes"]
    assert sft.build_rows(clips, prompt_frames=6, seed=0) == (rows, skipped)  # same seed, same rows
    tokens = sft.added_tokens(16)
    assert tokens[:16] == [f"<a{i}>" for i in range(16)] and set(sft.MARKERS) <= set(tokens)


def test_a_transformers_codec_loads_with_from_pretrained_encodes_and_decodes(tmp_path, small_set):
    """A tiny random EnCodec saved locally stands in for a hub codec (same loading path: from_pretrained)."""
    from transformers import EncodecConfig, EncodecFeatureExtractor, EncodecModel

    from training.voice import encode

    config = EncodecConfig(sampling_rate=24_000, audio_channels=1, num_filters=4, hidden_size=16, codebook_size=32,
                           codebook_dim=16, upsampling_ratios=[8, 5, 4, 2], num_lstm_layers=1,
                           target_bandwidths=[1.5], normalize=False, chunk_length_s=None, overlap=None)
    EncodecModel(config).save_pretrained(tmp_path)
    EncodecFeatureExtractor(feature_size=1, sampling_rate=24_000).save_pretrained(tmp_path)
    args = encode.parse_args(["--codec", str(tmp_path)])
    hf = encode.fit_codec([], args)  # nothing to fit: the codec is pretrained
    assert hf.size == 32 and hf.sample_rate == 24_000 and "encodec" in hf.describe()
    wave = small_set[0][2]
    codes = hf.encode(wave)
    assert codes.dtype == np.int32 and abs(len(codes) - len(wave) / audio.SAMPLE_RATE * 75) <= 2  # 75 codes/s
    assert codes.min() >= 0 and codes.max() < 32
    assert len(hf.decode(codes)) == len(codes) * 320  # 24 kHz audio back, hop 320
    assert np.array_equal(codec.from_json(hf.to_json()).encode(wave), codes)


def test_transcripts_come_from_the_metadata_csv_beside_each_audio_file(tmp_path):
    (tmp_path / "alice").mkdir()
    (tmp_path / "alice" / "metadata.csv").write_text('file,speaker,text\none.flac,,"Hello,   there"\n'
                                                     "two.wav,Al,bye\n")
    (tmp_path / "metadata.csv").write_text("file,speaker,text\ntop.wav,bob,hi\n")
    assert read_transcripts(str(tmp_path)) == {"alice/one.flac": ("alice", "Hello, there"),  # speaker: the folder
                                               "alice/two.wav": ("Al", "bye"), "top.wav": ("bob", "hi")}
    (tmp_path / "alice" / "metadata.csv").write_text("name,words\nx.wav,hi\n")
    with pytest.raises(ValueError, match="needs the header file,speaker,text"):
        read_transcripts(str(tmp_path))


def test_the_split_follows_the_source_file():
    from training.voice.process import split_of

    splits = [split_of(f"spk{i % 3}/utt{i}.wav", 0.2) for i in range(2000)]
    assert splits == [split_of(f"spk{i % 3}/utt{i}.wav", 0.2) for i in range(2000)]
    assert 0.17 < splits.count("val") / len(splits) < 0.23
