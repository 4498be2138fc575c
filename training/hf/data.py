"""The SFT set: ``prompt`` → ``completion`` pairs, encoded so that only the completion is learned.

A data folder (local or ``s3://``) holds ``train.parquet`` and ``val.parquet`` with string columns ``prompt``
and ``completion`` (and optionally ``added_tokens.json``, see ``model.read_added_tokens``). Without one, the
``builtin`` set is generated offline: two small learnable tasks (reverse a word, add two numbers).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import torch

from .. import data as shared_data

IGNORE = -100  # label of a token the loss skips (prompt and padding): cross_entropy's ignore_index
COLUMNS = ("prompt", "completion")
SPLITS = ("train", "val")
BUILTIN = "builtin"
BUILTIN_TRAIN_SIZE, BUILTIN_VAL_SIZE = 1024, 256

Pairs = list[tuple[str, str]]
Example = tuple[list[int], list[int]]


def encode_example(tokenizer: Any, prompt: str, completion: str, max_len: int) -> Example:
    """``(input_ids, labels)``: prompt + completion + eos, cut to ``max_len`` tokens; labels are the ids of the
    completion and eos, ``IGNORE`` on the prompt (the model shifts nothing: ``steps`` compares position t's
    logits with labels[t + 1])."""
    prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    target_ids = tokenizer(completion, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    input_ids = (prompt_ids + target_ids)[:max_len]
    labels = ([IGNORE] * len(prompt_ids) + target_ids)[:max_len]
    return input_ids, labels


def collate(examples: Sequence[Example], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-padded batch: ``input_ids``, ``attention_mask`` (0 on padding) and ``labels`` (``IGNORE`` there)."""
    width = max(len(ids) for ids, _ in examples)
    input_ids = torch.full((len(examples), width), pad_id, dtype=torch.long)
    labels = torch.full((len(examples), width), IGNORE, dtype=torch.long)
    mask = torch.zeros((len(examples), width), dtype=torch.long)
    for row, (ids, target) in enumerate(examples):
        input_ids[row, :len(ids)] = torch.tensor(ids)
        labels[row, :len(target)] = torch.tensor(target)
        mask[row, :len(ids)] = 1
    return {"input_ids": input_ids, "attention_mask": mask, "labels": labels}


def read_split(data_dir: str, split: str) -> Pairs:
    """The ``(prompt, completion)`` rows of ``<data_dir>/<split>.parquet`` (local path or URI)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    fs, path = shared_data.filesystem(data_dir)
    location = f"{path.rstrip('/')}/{split}.parquet"
    try:
        table = pq.read_table(location, filesystem=fs, columns=list(COLUMNS))
    except FileNotFoundError:
        raise FileNotFoundError(f"{data_dir}: no {split}.parquet there") from None
    except (KeyError, pa.ArrowInvalid):  # a missing column
        raise ValueError(f"{data_dir}/{split}.parquet: needs string columns prompt and completion") from None
    prompts, completions = (table.column(c).to_pylist() for c in COLUMNS)
    if any(not isinstance(v, str) for v in (*prompts, *completions)):
        raise ValueError(f"{data_dir}/{split}.parquet: prompt and completion must be non-null strings")
    if not prompts:
        raise ValueError(f"{data_dir}/{split}.parquet: no rows")
    return list(zip(prompts, completions, strict=True))


def builtin_pairs(size: int, seed: int, split: str) -> Pairs:
    """``size`` generated instruction → answer pairs (half word reversal, half addition), reproducible from
    ``seed``; train and val draw from different streams."""
    rng = random.Random(f"{seed}-{split}")
    pairs = []
    for i in range(size):
        if i % 2:
            a, b = rng.randrange(100), rng.randrange(100)
            pairs.append((f"Add: {a}+{b}\nAnswer: ", str(a + b)))
        else:
            word = "".join(rng.choice("abcdefghij") for _ in range(rng.randint(3, 7)))
            pairs.append((f"Reverse: {word}\nAnswer: ", word[::-1]))
    return pairs


def load_pairs(data: str, train_size: int | None, val_size: int | None, seed: int) -> tuple[Pairs, Pairs]:
    """``(train, val)`` pairs of ``data`` (a folder, or ``builtin``), each cut to its size when one is given."""
    if data == BUILTIN:
        return (builtin_pairs(train_size or BUILTIN_TRAIN_SIZE, seed, "train"),
                builtin_pairs(val_size or BUILTIN_VAL_SIZE, seed, "val"))
    train, val = (read_split(data, split) for split in SPLITS)
    return train[:train_size], val[:val_size]


def describe(data: str, train: int, val: int) -> str:
    """One log line that makes it impossible to mistake the built-in set for the user's data."""
    if data == BUILTIN:
        return (f"DATA: using the BUILT-IN generated SFT set (offline: reverse a word, add two numbers); pass --data "
                f"DIR for your own train/val.parquet (train={train} val={val})")
    return f"DATA: {data} (train={train} val={val})"
