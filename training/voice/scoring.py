"""Held-out scores of the voice-clone task, for a language model and for the code-frequency baselines.

Both score the same target tokens: the completion's code tokens, ``<|end|>`` and the tokenizer's eos (what the
train step learns). Loss is the mean cross-entropy in nats per target token; accuracy is teacher-forced top-1
over the code positions only. The baseline is a unigram distribution over the target tokens counted on the train
split (add-``alpha`` smoothing over the target vocabulary), globally or per speaker; its loss is the cross-entropy
of that unigram on the held-out tokens and its accuracy that of always guessing the most frequent code.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

IGNORE = -100

Example = tuple[list[int], list[int]]  # (input_ids, labels): labels are IGNORE on the prompt


@dataclass
class Scores:
    loss: float  # nats per target token
    accuracy: float  # top-1 on code targets
    tokens: int
    codes: int


def targets(example: Example) -> list[int]:
    return [t for t in example[1] if t != IGNORE]


class Unigram:
    """A unigram over ``vocab`` fit on token sequences (add-``alpha`` smoothing; alpha=0: plain frequencies)."""

    def __init__(self, sequences: Iterable[Sequence[int]], vocab: Sequence[int], code_ids: set[int],
                 alpha: float = 1.0) -> None:
        counts = Counter(t for seq in sequences for t in seq)
        total = sum(counts[v] for v in vocab) + alpha * len(vocab)
        self.prob = {v: (counts[v] + alpha) / total for v in vocab}
        codes = [v for v in vocab if v in code_ids]
        self.top_code = max(codes, key=lambda v: (counts[v], -v)) if codes else None

    def entropy(self) -> float:
        return -sum(p * math.log(p) for p in self.prob.values() if p > 0)


def unigram_scores(models: dict[str, Unigram], held_out: Sequence[tuple[str, Sequence[int]]],
                   code_ids: set[int], fallback: Unigram) -> Scores:
    """Scores of a unigram per group (speaker) on ``(group, target tokens)`` rows; unknown groups use
    ``fallback``."""
    nll, tokens, correct, codes = 0.0, 0, 0, 0
    for group, seq in held_out:
        model = models.get(group, fallback)
        for t in seq:
            nll -= math.log(model.prob.get(t, 0.0) or 1e-12)
            tokens += 1
            if t in code_ids:
                codes += 1
                correct += int(t == model.top_code)
    return Scores(nll / max(tokens, 1), correct / max(codes, 1), tokens, codes)


def model_scores(model: Any, examples: Sequence[Example], code_ids: set[int], pad_id: int,
                 batch_size: int = 16) -> Scores:
    """Teacher-forced scores of a causal LM: position t's logits predict labels[t + 1]."""
    import torch
    import torch.nn.functional as F
    from torch.nn.utils.rnn import pad_sequence

    codes_t = torch.tensor(sorted(code_ids))
    nll, tokens, correct, codes = 0.0, 0, 0, 0
    model.eval()
    with torch.no_grad():
        for start in range(0, len(examples), batch_size):
            chunk = examples[start:start + batch_size]
            ids = pad_sequence([torch.tensor(i) for i, _ in chunk], batch_first=True, padding_value=pad_id)
            labels = pad_sequence([torch.tensor(lab) for _, lab in chunk], batch_first=True, padding_value=IGNORE)
            mask = pad_sequence([torch.ones(len(i), dtype=torch.long) for i, _ in chunk], batch_first=True)
            logits = model(input_ids=ids, attention_mask=mask).logits[:, :-1].float()
            target = labels[:, 1:]
            nll += float(F.cross_entropy(logits.reshape(-1, logits.size(-1)), target.reshape(-1),
                                         ignore_index=IGNORE, reduction="sum"))
            tokens += int((target != IGNORE).sum())
            is_code = torch.isin(target, codes_t)
            correct += int(((logits.argmax(-1) == target) & is_code).sum())
            codes += int(is_code.sum())
    return Scores(nll / max(tokens, 1), correct / max(codes, 1), tokens, codes)


def generate_codes(model: Any, prompt_ids: list[int], allowed: list[int], stop_id: int, max_new: int) -> list[int]:
    """Greedy continuation of ``prompt_ids`` restricted to the ``allowed`` token ids, until ``stop_id`` (not
    returned) or ``max_new`` tokens."""
    import torch

    allowed_t = torch.tensor(allowed)
    out: list[int] = []
    model.eval()
    with torch.no_grad():
        step = model(input_ids=torch.tensor([prompt_ids]), use_cache=True)
        for _ in range(max_new):
            logits = step.logits[0, -1]
            token = int(allowed_t[logits[allowed_t].argmax()])
            if token == stop_id:
                break
            out.append(token)
            step = model(input_ids=torch.tensor([[token]]), past_key_values=step.past_key_values, use_cache=True)
    return out
