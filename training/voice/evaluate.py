"""Step 4, evaluate: the fine-tuned model vs its base vs code-frequency baselines on the held-out clips.
``python -m training.voice.evaluate --model REF [--encode-dir URI] [--train-dir URI]``

Reads the encode step's folder (``--encode-dir``, default ``$RTJOB_STEP_URIS["encode"]``: sft/val.parquet,
sft/train.parquet for the baselines, codec.json) and the train step's latest complete checkpoint
(``--train-dir``, default ``$RTJOB_STEP_URIS["train"]``, else ``$RTJOB_INPUT_URI``: the newest
``checkpoint_epoch_*`` holding state.json). The base model is ``--model`` loaded with the checkpoint's tokenizer
(for ``tiny:*`` with the train step's seed: the very weights fine-tuning started from). Scores (scoring.py): loss
in nats per target token and teacher-forced code accuracy. A greedy continuation (restricted to code tokens) of one
held-out prompt is decoded to audio with the encode step's codec (offline: codebook log-mel frames → Griffin-Lim),
beside the true codes decoded the same way: ``samples/*.wav``.

Writes ``evaluation.json`` (the table and what was compared), ``metrics.json`` (one row per model: what ``rtjob
results`` shows) and ``evaluation.png`` (if matplotlib is installed). With ``--require-better`` (default) it exits 1
when the fine-tuned model's held-out loss does not beat both the base model's and every baseline's.
"""

from __future__ import annotations

import argparse
import io
import sys
from typing import Any

import rtjob_contract as contract

from . import codec as codecs
from . import scoring, sft, stage, store
from .encode import ADDED_TOKENS_FILE, SFT_DIR

EVALUATION_FILE = "evaluation.json"
PLOT_FILE = "evaluation.png"
SAMPLES_DIR = contract.SAMPLES_DIR
FINE_TUNED, BASE, UNIGRAM_SPEAKER, UNIGRAM_GLOBAL = "fine-tuned", "base", "unigram/speaker", "unigram/global"


def latest_checkpoint(train_uri: str) -> str:
    """The newest complete ``checkpoint_epoch_*`` folder (one with state.json) of a train run."""
    names = [n for n in store.list_dirs(train_uri) if n.startswith(contract.EPOCH_CHECKPOINT_PREFIX)]
    complete = [n for n in names if store.exists(store.join(train_uri, n, contract.STATE_FILE))]
    if not complete:
        raise FileNotFoundError(f"{train_uri}: no complete {contract.EPOCH_CHECKPOINT_PREFIX}* folder "
                                f"(with {contract.STATE_FILE})")
    return store.join(train_uri, complete[-1])


def train_uri(flag: str | None) -> str:
    try:
        return store.step_uri(flag, "train", "--train-dir")
    except ValueError:
        return store.input_uri(None, "train step folder (--train-dir)")


class Vocabulary:
    """The token ids of the codes and markers in a tokenizer that has the encode step's added tokens."""

    def __init__(self, tokenizer: Any, tokens: list[str]) -> None:
        ids = {t: tokenizer.convert_tokens_to_ids(t) for t in tokens}
        missing = [t for t, i in ids.items() if i is None or i == tokenizer.unk_token_id]
        if missing:
            raise ValueError(f"the checkpoint's tokenizer lacks {len(missing)} of the encode step's tokens "
                             f"(e.g. {missing[0]}): was it trained on this encode step's sft/?")
        self.code_of = {ids[t]: code for t in tokens if (code := _code(t)) is not None}
        self.end_id, self.eos_id = ids[sft.END], int(tokenizer.eos_token_id)
        self.code_ids = set(self.code_of)
        self.targets = sorted(self.code_ids | {self.end_id, self.eos_id})


def _code(token: str) -> int | None:
    codes = sft.parse_codes(token)
    return codes[0] if codes and token == sft.code_token(codes[0]) else None


def baseline_rows(train: list[tuple[str, list[int]]], val: list[tuple[str, list[int]]], vocab: Vocabulary,
                  alpha: float) -> dict[str, scoring.Scores]:
    overall = scoring.Unigram((seq for _, seq in train), vocab.targets, vocab.code_ids, alpha)
    per_speaker = {s: scoring.Unigram((seq for sp, seq in train if sp == s), vocab.targets, vocab.code_ids, alpha)
                   for s in {sp for sp, _ in train}}
    return {UNIGRAM_SPEAKER: scoring.unigram_scores(per_speaker, val, vocab.code_ids, overall),
            UNIGRAM_GLOBAL: scoring.unigram_scores({}, val, vocab.code_ids, overall)}


def wav_bytes(wave: Any, rate: int) -> bytes:
    import soundfile as sf

    buffer = io.BytesIO()
    sf.write(buffer, wave, rate, format="WAV", subtype="PCM_16")
    return buffer.getvalue()


def write_plot(rows: list[dict[str, Any]], target: str) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    names = [r[contract.METRIC_MODEL] for r in rows]
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.6))
    for ax, key, title in ((axes[0], contract.METRIC_VAL_LOSS, "held-out loss (nats/token, lower is better)"),
                           (axes[1], contract.METRIC_VAL_ACCURACY, "code accuracy (teacher-forced top-1)")):
        ax.bar(names, [r[key] for r in rows], color=[f"C{i}" for i in range(len(rows))])
        ax.set_title(title, fontsize="medium")
        ax.tick_params(axis="x", labelrotation=20)
        ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    plt.close(fig)
    store.write_bytes(target, buffer.getvalue())
    return True


def run(args: argparse.Namespace, out: str) -> dict[str, Any]:
    encode_uri = store.step_uri(args.encode_dir, "encode", "--encode-dir")
    checkpoint = latest_checkpoint(train_uri(args.train_dir))
    from transformers.utils import logging as hf_logging

    from ..hf.data import encode_example  # the train step's own encoding: the same targets it learned
    from ..hf.model import load_model, load_tokenizer

    hf_logging.disable_progress_bar()  # the job log gets this step's lines, not loading bars
    sft_uri = store.join(encode_uri, SFT_DIR)
    tokens = store.read_json(store.join(sft_uri, ADDED_TOKENS_FILE))["tokens"]
    val_rows = store.read_table(store.join(sft_uri, "val.parquet")).to_pylist()[: args.max_examples]
    train_rows = store.read_table(store.join(sft_uri, "train.parquet")).to_pylist()
    if not val_rows:
        raise ValueError(f"{sft_uri}/val.parquet: no held-out examples")
    local, tmp = store.local_copy(checkpoint)
    try:
        tokenizer = load_tokenizer(local)
        vocab = Vocabulary(tokenizer, tokens)
        tuned = load_model(local, tokenizer)
        base = load_model(args.model, tokenizer, seed=args.seed)
    finally:
        store.remove_local(tmp)
    examples = [encode_example(tokenizer, r["prompt"], r["completion"], args.max_len) for r in val_rows]
    full = [encode_example(tokenizer, r["prompt"], r["completion"], 10**6)[0] for r in val_rows]
    cut = sum(len(ids) > args.max_len for ids in full)
    if not all(scoring.targets(e) for e in examples):  # a loss over no tokens would read as 0: a false win
        raise ValueError(f"--max-len {args.max_len} leaves some held-out examples no target token (their prompts "
                         f"are up to {max(len(ids) for ids in full)} tokens with the completion): raise it, with "
                         f"the train step's --max-len")
    train_targets = [(r["speaker"], scoring.targets(encode_example(tokenizer, r["prompt"], r["completion"], 10**6)))
                     for r in train_rows]
    val_targets = [(r["speaker"], scoring.targets(e)) for r, e in zip(val_rows, examples, strict=True)]
    scores = {FINE_TUNED: scoring.model_scores(tuned, examples, vocab.code_ids, tokenizer.pad_token_id),
              BASE: scoring.model_scores(base, examples, vocab.code_ids, tokenizer.pad_token_id),
              **baseline_rows(train_targets, val_targets, vocab, args.alpha)}
    rows = [{contract.METRIC_MODEL: name, contract.METRIC_VAL_LOSS: s.loss, contract.METRIC_VAL_ACCURACY: s.accuracy,
             "val_tokens": s.tokens} for name, s in scores.items()]
    sample = write_sample(args, out, tuned, tokenizer, vocab, val_rows[args.sample % len(val_rows)], encode_uri)
    others = {name: s.loss for name, s in scores.items() if name != FINE_TUNED}
    return {"encode_dir": encode_uri, "checkpoint": checkpoint, "base_model": args.model,
            "val_examples": len(examples), "truncated_examples": cut, "max_len": args.max_len,
            "loss": "mean cross-entropy, nats per target token (codes, <|end|>, eos)",
            "accuracy": "teacher-forced top-1 over code positions", "baseline_smoothing_alpha": args.alpha,
            "rows": rows, "beats": {name: scores[FINE_TUNED].loss < loss for name, loss in others.items()},
            "sample": sample}


def write_sample(args: argparse.Namespace, out: str, model: Any, tokenizer: Any, vocab: Vocabulary,
                 row: dict[str, Any], encode_uri: str) -> dict[str, Any]:
    codec = codecs.from_json(store.read_json(store.join(encode_uri, codecs.CODEC_FILE)))
    true_codes = sft.parse_codes(row["completion"])
    prompt_ids = tokenizer(row["prompt"], add_special_tokens=False)["input_ids"]
    generated = scoring.generate_codes(model, prompt_ids, sorted(vocab.code_ids) + [vocab.end_id], vocab.end_id,
                                       max_new=len(true_codes) + 10)
    codes = [vocab.code_of[t] for t in generated]
    name = row["clip_id"].replace("/", "_")
    files = {}
    for kind, values in (("generated", codes), ("reference", true_codes)):
        if values:
            target = store.join(out, SAMPLES_DIR, f"{name}_{kind}.wav")
            store.write_bytes(target, wav_bytes(codec.decode(values), codec.sample_rate))
            files[kind] = target
    same = sum(a == b for a, b in zip(codes, true_codes, strict=False))
    return {"clip_id": row["clip_id"], "text": row["prompt"].split(sft.SPEAKER)[0][len(sft.TEXT):],
            "generated_codes": len(codes), "true_codes": len(true_codes),
            "positional_code_match": same / max(len(true_codes), 1), "files": files,
            "decoder": codec.describe()}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog=f"python -m {__package__}.evaluate", description=__doc__.split("\n")[0])
    p.add_argument("--model", required=True, help="the base model the train step started from (e.g. tiny:qwen3)")
    p.add_argument("--encode-dir", help='the encode step\'s folder (default: $RTJOB_STEP_URIS["encode"])')
    p.add_argument("--train-dir", help='the train step\'s folder (default: $RTJOB_STEP_URIS["train"], '
                   "else $RTJOB_INPUT_URI)")
    p.add_argument("--run-dir", help="output folder (default: $RTJOB_RUN_URI)")
    p.add_argument("--seed", type=int, default=0, help="tiny:* base model: the train step's --seed")
    p.add_argument("--max-len", type=int, default=256, help="tokens per example, as the train step's --max-len")
    p.add_argument("--max-examples", type=int, default=None, help="score at most this many held-out examples")
    p.add_argument("--alpha", type=float, default=1.0, help="baseline unigram: add-alpha smoothing")
    p.add_argument("--sample", type=int, default=0, help="which held-out example to continue and decode")
    p.add_argument("--require-better", action=argparse.BooleanOptionalAction, default=True,
                   help="exit 1 unless the fine-tuned model beats the base model and every baseline on loss")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        out = store.run_dir(args.run_dir)
        result = run(args, out)
    except stage.EXPECTED as error:
        return stage.failed(error)
    result["plot"] = store.join(out, PLOT_FILE) if write_plot(result["rows"], store.join(out, PLOT_FILE)) else None
    store.write_json(store.join(out, EVALUATION_FILE), result)
    store.write_json(store.join(out, contract.METRICS_FILE), result["rows"])
    print(f"EVAL: {result['val_examples']} held-out examples from {result['encode_dir']}, checkpoint "
          f"{result['checkpoint']}" + (f" ({result['truncated_examples']} cut to --max-len)"
                                        if result["truncated_examples"] else ""), flush=True)
    for row in result["rows"]:
        print(f"EVAL: {row[contract.METRIC_MODEL]:<16} loss {row[contract.METRIC_VAL_LOSS]:.4f} nats/token  "
              f"code accuracy {row[contract.METRIC_VAL_ACCURACY]:.4f}", flush=True)
    if result["plot"] is None:
        print("PLOT: matplotlib is not installed here: no evaluation.png (pip install matplotlib)", flush=True)
    sample = result["sample"]
    print(f"SAMPLE: {sample['clip_id']} ({sample['text']!r}): {sample['generated_codes']} codes generated "
          f"({sample['true_codes']} true, {sample['positional_code_match']:.0%} same position-wise) -> "
          f"{', '.join(sample['files'].values())}; {sample['decoder']}", flush=True)
    lost = [name for name, won in result["beats"].items() if not won]
    if lost and args.require_better:
        print(f"ERROR: the fine-tuned model does not beat {', '.join(lost)} on held-out loss "
              f"(see {store.join(out, EVALUATION_FILE)})", file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
