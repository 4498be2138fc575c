"""Step 1, process: audio files → 16 kHz mono clips in Parquet. ``python -m training.voice.process [--audio DIR]``

Ray Data reads the audio files (WAV, FLAC, anything soundfile reads) from ``--audio`` (a folder or ``s3://``
prefix); each is mixed to mono, resampled to 16 kHz (soxr), trimmed of leading/trailing silence and split into
clips at pauses (audio.py). Transcripts: a ``metadata.csv`` in an audio file's folder, header
``file,speaker,text`` (``file`` relative to that folder; an empty ``speaker`` is the folder's name); audio without a
row there is skipped and counted. Without ``--audio`` (offline) the step writes a synthetic speech-like set
(synthetic.py) as WAV files into ``<run dir>/source_audio/`` first and reads it back through the same path.

Writes ``<run dir>/clips/*.parquet``: clip_id, speaker, text, split ("train"/"val", by a hash of the source
file, so clips of one recording never straddle the splits), sample_rate, audio (list<float32>).
"""

from __future__ import annotations

import argparse
import csv
import io
import os
import sys
import tempfile
import zlib
from typing import Any

from . import audio, stage, store, synthetic

CLIPS_DIR = "clips"
SOURCE_DIR = "source_audio"
AUDIO_SUFFIXES = (".wav", ".flac", ".ogg", ".aiff", ".aif")


def clip_schema() -> Any:
    import pyarrow as pa

    return pa.schema([("clip_id", pa.string()), ("speaker", pa.string()), ("text", pa.string()),
                      ("split", pa.string()), ("sample_rate", pa.int32()), ("audio", pa.list_(pa.float32()))])


def read_transcripts(audio_uri: str) -> dict[str, tuple[str, str]]:
    """{audio file's path relative to ``audio_uri``: (speaker, text)} from every metadata.csv under it."""
    out: dict[str, tuple[str, str]] = {}
    base = audio_uri.rstrip("/")
    for meta in store.list_files(audio_uri):
        if os.path.basename(meta) != synthetic.METADATA_FILE:
            continue
        folder = meta[len(base) + 1:].rpartition("/")[0]
        rows = csv.DictReader(io.StringIO(store.read_bytes(meta).decode("utf-8")))
        if not {"file", "text"} <= set(rows.fieldnames or ()):
            raise ValueError(f"{meta}: needs the header file,speaker,text")
        for row in rows:
            rel = f"{folder}/{row['file']}" if folder else row["file"]
            out[rel] = ((row.get("speaker") or "").strip() or os.path.basename(folder) or "speaker",
                        " ".join((row["text"] or "").split()))
    return out


def split_of(rel: str, val_fraction: float) -> str:
    return "val" if zlib.crc32(rel.encode()) % 10_000 < val_fraction * 10_000 else "train"


def clips_of_file(data: bytes, rel: str, speaker: str, text: str, split: str,
                  config: audio.SplitConfig) -> list[dict[str, Any]]:
    """One audio file's clips (the per-file work Ray Data runs)."""
    wave, rate = audio.decode(data)
    wave = audio.resample(wave, rate)
    pieces = audio.split(wave, audio.SAMPLE_RATE, config)
    segments = len(audio.voiced_segments(wave, audio.SAMPLE_RATE, config))
    texts = audio.clip_texts(text, [n for _, _, n in pieces], segments)
    stem = os.path.splitext(rel)[0].replace("/", "_")
    return [{"clip_id": f"{stem}-{i:02d}", "speaker": speaker, "text": t, "split": split,
             "sample_rate": audio.SAMPLE_RATE, "audio": wave[a:b]}
            for i, ((a, b, _), t) in enumerate(zip(pieces, texts, strict=True))]


class ToClips:
    """map_batches: a batch of (bytes, path) rows → a pyarrow table of clips (list<float32> audio, not Ray's
    tensor columns, so any Parquet reader sees plain lists)."""

    def __init__(self, base: str, transcripts: dict[str, tuple[str, str]], val_fraction: float,
                 config: audio.SplitConfig) -> None:
        self.base, self.transcripts, self.val_fraction, self.config = base, transcripts, val_fraction, config

    def __call__(self, batch: Any) -> Any:
        import pyarrow as pa

        rows: list[dict[str, Any]] = []
        for data, path in zip(batch.column("bytes").to_pylist(), batch.column("path").to_pylist(), strict=True):
            rel = path[len(self.base) + 1:]
            speaker, text = self.transcripts[rel]
            rows += clips_of_file(data, rel, speaker, text, split_of(rel, self.val_fraction), self.config)
        return pa.Table.from_pylist(rows, schema=clip_schema())


def run(audio_uri: str, out_uri: str, *, val_fraction: float, config: audio.SplitConfig) -> dict[str, int]:
    """Audio under ``audio_uri`` → ``out_uri/clips/``. Needs Ray (ray.init() done by the caller)."""
    import ray

    fs, base = store.filesystem(audio_uri)
    transcripts = read_transcripts(audio_uri)
    rels = [f[len(audio_uri.rstrip("/")) + 1:] for f in store.list_files(audio_uri, AUDIO_SUFFIXES)]
    known = [rel for rel in rels if rel in transcripts]
    if not known:
        raise FileNotFoundError(f"{audio_uri}: no audio file listed in a {synthetic.METADATA_FILE}")
    base = base.rstrip("/")
    ds = ray.data.read_binary_files([f"{base}/{rel}" for rel in known], filesystem=fs, include_paths=True)
    clips = ds.map_batches(ToClips(base, transcripts, val_fraction, config), batch_format="pyarrow", batch_size=16)
    out_fs, out_path = store.filesystem(store.join(out_uri, CLIPS_DIR))
    # A retried step (max_failures, rtjob's retries) replaces the clips of the attempt before, never adds to them.
    clips.write_parquet(out_path, filesystem=out_fs, mode=ray.data.SaveMode.OVERWRITE)
    splits = store.read_table(store.join(out_uri, CLIPS_DIR), columns=["split"]).column("split").to_pylist()
    return {"files": len(known), "unlabelled_files": len(rels) - len(known),
            "train": splits.count("train"), "val": splits.count("val")}


def write_synthetic(out_uri: str, *, speakers: int, per_speaker: int, seed: int) -> str:
    """The offline set, as WAV files under ``out_uri/source_audio`` (kept with the run)."""
    import pyarrow.fs as pafs

    target = store.join(out_uri, SOURCE_DIR)
    with tempfile.TemporaryDirectory(prefix="rtjob-voice-") as tmp:
        synthetic.write_set(tmp, n_speakers=speakers, per_speaker=per_speaker, seed=seed)
        fs, path = store.filesystem(target)
        fs.create_dir(path, recursive=True)
        pafs.copy_files(tmp, path, source_filesystem=pafs.LocalFileSystem(), destination_filesystem=fs)
    return target


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog=f"python -m {__package__}.process", description=__doc__.split("\n")[0])
    p.add_argument("--audio", help="folder or s3:// prefix of audio files with metadata.csv (default: synthetic)")
    p.add_argument("--run-dir", help="output folder (default: $RTJOB_RUN_URI)")
    p.add_argument("--val-fraction", type=float, default=0.1)
    p.add_argument("--max-clip-s", type=float, default=2.0)
    p.add_argument("--min-clip-s", type=float, default=0.3)
    p.add_argument("--top-db", type=float, default=40.0, help="silence: this many dB below the loudest frame")
    p.add_argument("--speakers", type=int, default=4, help="synthetic set: speakers")
    p.add_argument("--per-speaker", type=int, default=75, help="synthetic set: utterances per speaker (~1 s each)")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import ray

    try:
        out = store.run_dir(args.run_dir)
    except ValueError as error:
        return stage.failed(error)
    audio_uri = args.audio
    if audio_uri is None:
        audio_uri = write_synthetic(out, speakers=args.speakers, per_speaker=args.per_speaker, seed=args.seed)
        print(f"DATA: offline: synthetic speech-like set ({args.speakers} speakers x {args.per_speaker} "
              f"utterances, seed {args.seed}) written as WAV to {audio_uri}, read back like real audio", flush=True)
    else:
        print(f"DATA: audio from {audio_uri}", flush=True)
    if not ray.is_initialized():  # a job's driver joins its cluster; by hand, a local one starts
        ray.init(log_to_driver=True)
    context = ray.data.DataContext.get_current()
    context.enable_progress_bars = False
    context.print_on_execution_start = False
    config = audio.SplitConfig(top_db=args.top_db, max_clip_s=args.max_clip_s, min_clip_s=args.min_clip_s)
    try:
        counts = run(audio_uri, out, val_fraction=args.val_fraction, config=config)
    except stage.EXPECTED as error:
        return stage.failed(error, bad_input=False)  # the data, not the arguments
    print(f"CLIPS: {counts['train']} train + {counts['val']} val clips (16 kHz mono) from {counts['files']} files "
          f"({counts['unlabelled_files']} without a transcript row skipped) -> {store.join(out, CLIPS_DIR)}",
          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
