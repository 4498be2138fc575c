"""The SFT text format of the voice-clone task: text and a speaker's reference codes in, the clip's codes out.

    prompt     = <|text|>ka lu mi<|speaker|><a12><a7>...<|codes|>     (codes of ANOTHER clip of the same speaker)
    completion = <a3><a9>...<|end|>

Codes become added tokens ``<a0>`` ... ``<aN-1>`` (sft/added_tokens.json lists them with the markers), so each
code is one token whatever the tokenizer.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

import numpy as np

TEXT, SPEAKER, CODES, END = "<|text|>", "<|speaker|>", "<|codes|>", "<|end|>"
MARKERS = (TEXT, SPEAKER, CODES, END)
_CODE = re.compile(r"<a(\d+)>")


def code_token(code: int) -> str:
    return f"<a{code}>"


def added_tokens(codebook_size: int) -> list[str]:
    return [code_token(i) for i in range(codebook_size)] + list(MARKERS)


def codes_text(codes: Iterable[int]) -> str:
    return "".join(code_token(int(c)) for c in codes)


def prompt(text: str, speaker_codes: Iterable[int]) -> str:
    return f"{TEXT}{text}{SPEAKER}{codes_text(speaker_codes)}{CODES}"


def completion(codes: Iterable[int]) -> str:
    return codes_text(codes) + END


def parse_codes(text: str) -> list[int]:
    return [int(m) for m in _CODE.findall(text)]


def speaker_part(prompt_text: str) -> str:
    return prompt_text.split(SPEAKER, 1)[1].split(CODES, 1)[0]


def build_rows(clips: list[dict[str, Any]], *, prompt_frames: int, seed: int) -> tuple[dict[str, list[dict]], int]:
    """``({split: rows}, skipped)``. Each clip's speaker prompt is the first ``prompt_frames`` codes of another
    train clip of the same speaker, drawn with a fixed seed (train clips are the known voice samples, for val
    rows too); a clip whose speaker has no other train clip is skipped."""
    rng = np.random.default_rng(seed)
    references: dict[str, list[dict]] = defaultdict(list)
    for clip in sorted(clips, key=lambda c: c["clip_id"]):
        if clip["split"] == "train":
            references[clip["speaker"]].append(clip)
    rows: dict[str, list[dict]] = defaultdict(list)
    skipped = 0
    for clip in sorted(clips, key=lambda c: c["clip_id"]):
        others = [c for c in references[clip["speaker"]] if c["clip_id"] != clip["clip_id"]]
        if not others:
            skipped += 1
            continue
        ref = others[int(rng.integers(len(others)))]
        rows[clip["split"]].append({
            "clip_id": clip["clip_id"], "speaker": clip["speaker"], "prompt_clip_id": ref["clip_id"],
            "prompt": prompt(clip["text"], list(ref["codes"])[:prompt_frames]),
            "completion": completion(clip["codes"]),
        })
    return dict(rows), skipped
