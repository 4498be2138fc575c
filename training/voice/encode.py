"""Step 2, encode: clips → discrete audio codes and the SFT set. ``python -m training.voice.encode [--codec REF]``

Reads ``<input>/clips/`` (``--input``, default ``$RTJOB_INPUT_URI``: the process step's folder). With ``--codec
REF`` a transformers audio codec (hub id or local folder) encodes; without it (offline, the default) a k-means
codebook of log-mel frames is fit on the train clips (codec.py). Writes into the run folder:

* ``codes/codes.parquet``: clip_id, speaker, split, text, codes (list<int32>);
* ``codec.json``: what decoding needs (sample rate, hop, n_mels and the codebook, or the codec's reference);
* ``sft/train.parquet``, ``sft/val.parquet``: string columns prompt, completion (sft.py), with clip_id, speaker
  and prompt_clip_id (the clip whose codes are the speaker prompt) for tracing;
* ``sft/added_tokens.json``: {"tokens": ["<a0>", ..., "<|text|>", ...]} for the train step's tokenizer.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import numpy as np

from . import codec as codecs
from . import sft, stage, store
from .features import MelConfig
from .process import CLIPS_DIR

CODES_FILE = "codes/codes.parquet"
SFT_DIR = "sft"
ADDED_TOKENS_FILE = "added_tokens.json"
SPLITS = ("train", "val")


def fit_codec(clips: list[dict[str, Any]], args: argparse.Namespace) -> codecs.Codec:
    if args.codec:
        return codecs.HFCodec(args.codec)
    train = [np.asarray(c["audio"], dtype=np.float32) for c in clips if c["split"] == "train"]
    if not train:
        raise ValueError("no train clips to fit the codebook on")
    config = MelConfig(hop=args.hop, n_fft=args.n_fft, n_mels=args.n_mels)
    return codecs.MelKMeansCodec.fit(train, size=args.codebook_size, config=config, seed=args.seed)


def codes_table(clips: list[dict[str, Any]]) -> Any:
    import pyarrow as pa

    schema = pa.schema([("clip_id", pa.string()), ("speaker", pa.string()), ("split", pa.string()),
                        ("text", pa.string()), ("codes", pa.list_(pa.int32()))])
    return pa.Table.from_pylist([{k: c[k] for k in schema.names} for c in clips], schema=schema)


def run(input_uri: str, out_uri: str, args: argparse.Namespace) -> dict[str, Any]:
    import pyarrow as pa

    clips = store.read_table(store.join(input_uri, CLIPS_DIR)).to_pylist()
    clips.sort(key=lambda c: c["clip_id"])  # the codebook must not depend on Ray's file order
    codec = fit_codec(clips, args)
    print(f"CODEC: {codec.describe()}", flush=True)
    for clip in clips:
        clip["codes"] = codec.encode(np.asarray(clip["audio"], dtype=np.float32)).tolist()
    store.write_table(store.join(out_uri, CODES_FILE), codes_table(clips))
    store.write_json(store.join(out_uri, codecs.CODEC_FILE), codec.to_json())
    rows, skipped = sft.build_rows(clips, prompt_frames=args.prompt_frames, seed=args.seed)
    for split in SPLITS:
        store.write_table(store.join(out_uri, SFT_DIR, f"{split}.parquet"),
                          pa.Table.from_pylist(rows.get(split, []), schema=pa.schema(
                              [(n, pa.string()) for n in ("clip_id", "speaker", "prompt_clip_id", "prompt",
                                                           "completion")])))
    store.write_json(store.join(out_uri, SFT_DIR, ADDED_TOKENS_FILE), {"tokens": sft.added_tokens(codec.size)})
    frames = [len(c["codes"]) for c in clips]
    return {"clips": len(clips), "train": len(rows.get("train", [])), "val": len(rows.get("val", [])),
            "skipped": skipped, "codes_per_clip": float(np.mean(frames)) if frames else 0.0}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog=f"python -m {__package__}.encode", description=__doc__.split("\n")[0])
    p.add_argument("--input", help="the process step's folder (default: $RTJOB_INPUT_URI)")
    p.add_argument("--run-dir", help="output folder (default: $RTJOB_RUN_URI)")
    p.add_argument("--codec", help="a transformers audio codec (hub id or folder); default: offline mel k-means")
    p.add_argument("--codebook-size", type=int, default=64, help="offline codec: k-means codes")
    p.add_argument("--n-mels", type=int, default=40)
    p.add_argument("--n-fft", type=int, default=1024)
    p.add_argument("--hop", type=int, default=320, help="samples per code at 16 kHz (320 = 20 ms)")
    p.add_argument("--prompt-frames", type=int, default=25, help="speaker prompt: codes of the reference clip")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        out, source = store.run_dir(args.run_dir), store.input_uri(args.input, "clips")
        counts = run(source, out, args)
    except stage.EXPECTED as error:
        return stage.failed(error)
    print(f"SFT: {counts['train']} train + {counts['val']} val examples ({counts['skipped']} clips without another "
          f"clip of their speaker skipped), {counts['codes_per_clip']:.1f} codes per clip -> "
          f"{store.join(out, SFT_DIR)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
