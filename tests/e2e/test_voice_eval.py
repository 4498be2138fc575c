"""The voice pipeline's scoring and evaluation table (training/voice/scoring.py, `rtjob results` on an
evaluation), without a cluster."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import pytest
from support.cli import base_env, rtjob
from support.lazy import lazy

import rtjob_contract as contract
from training.voice import scoring

torch = lazy("torch")  # seconds to import: at its first use, not when an xdist worker collects this file

CODES = {0, 1, 2, 3}
END, EOS = 4, 5
VOCAB = [0, 1, 2, 3, 4, 5]


def _toy() -> list[tuple[str, list[int]]]:
    return [("a", [0, 0, 1, END, EOS]), ("a", [0, 2, 2, 0, END, EOS]), ("b", [3, 3, 3, 1, END, EOS])]


def test_baseline_loss_is_the_unigram_entropy_on_its_own_data():
    toy = _toy()
    unigram = scoring.Unigram((seq for _, seq in toy), VOCAB, CODES, alpha=0.0)
    scores = scoring.unigram_scores({}, toy, CODES, unigram)
    assert math.isclose(scores.loss, unigram.entropy(), rel_tol=1e-12)
    counts = [4, 2, 2, 3, 3, 3]  # tokens 0..5 over all 17
    assert math.isclose(unigram.entropy(), -sum(c / 17 * math.log(c / 17) for c in counts), rel_tol=1e-12)
    assert unigram.top_code == 0 and math.isclose(scores.accuracy, 4 / 11)  # always "0", right on 4 of 11 codes
    assert (scores.tokens, scores.codes) == (17, 11)


def test_per_speaker_baseline_and_smoothing():
    toy = _toy()
    overall = scoring.Unigram((seq for _, seq in toy), VOCAB, CODES, alpha=1.0)
    assert math.isclose(sum(overall.prob.values()), 1.0) and min(overall.prob.values()) > 0
    per = {s: scoring.Unigram((seq for t, seq in toy if t == s), VOCAB, CODES, alpha=0.0) for s in ("a", "b")}
    held_out = [("b", [3, 3, END]), ("zed", [0, END])]  # an unknown speaker falls back to the global unigram
    scores = scoring.unigram_scores(per, held_out, CODES, overall)
    expected = -(2 * math.log(3 / 6) + math.log(1 / 6) + math.log(overall.prob[0]) + math.log(overall.prob[END])) / 5
    assert math.isclose(scores.loss, expected)
    assert scores.accuracy == 1.0  # b's top code is 3 (both right), the fallback's is 0 (right)


def constant_lm(probs: list[float]) -> torch.nn.Module:
    """A 'language model' whose next-token distribution is always ``probs`` (what the unigram predicts). The class
    is made here, not at the module's top: torch is imported at its first use (support/lazy.py)."""

    class ConstantLM(torch.nn.Module):
        def __init__(self, probs: list[float]) -> None:
            super().__init__()
            self.logits = torch.log(torch.tensor(probs, dtype=torch.float64))

        def forward(self, input_ids: torch.Tensor, **_: object) -> SimpleNamespace:
            return SimpleNamespace(logits=self.logits.expand(*input_ids.shape, -1), past_key_values=None)

    return ConstantLM(probs)


def test_model_scores_agree_with_the_unigram_scores_for_a_unigram_model():
    toy = _toy()
    unigram = scoring.Unigram((seq for _, seq in toy), VOCAB, CODES, alpha=1.0)
    model = constant_lm([unigram.prob[v] for v in VOCAB] + [1e-9])  # + a pad token the targets never use
    # (input_ids, labels): a 2-token prompt (ignored), then the targets; uneven lengths exercise the padding.
    examples = [([9, 9, *seq], [scoring.IGNORE, scoring.IGNORE, *seq]) for _, seq in toy]
    examples = [([min(t, 6) for t in ids], labels) for ids, labels in examples]
    got = scoring.model_scores(model, examples, CODES, pad_id=6, batch_size=2)
    want = scoring.unigram_scores({}, toy, CODES, unigram)
    # Position t predicts labels[t + 1]: every target token follows a prompt token or a target, so all are scored.
    assert got.tokens == want.tokens and got.codes == want.codes
    assert math.isclose(got.loss, want.loss, rel_tol=1e-6) and math.isclose(got.accuracy, want.accuracy)


def test_generation_only_emits_allowed_tokens_and_stops_at_the_stop_token():
    favourite_is_forbidden = constant_lm([0.05, 0.3, 0.05, 0.05, 0.05, 0.5])  # 5 (eos) most likely, not allowed
    assert scoring.generate_codes(favourite_is_forbidden, [0, 1], allowed=[0, 1, 2, 3, END], stop_id=END,
                                  max_new=7) == [1] * 7
    stops = constant_lm([0.1, 0.1, 0.1, 0.1, 0.5, 0.1])
    assert scoring.generate_codes(stops, [0], allowed=[0, 1, 2, 3, END], stop_id=END, max_new=7) == []


def test_results_shows_an_evaluation_as_a_model_table(tmp_path):
    rows = [{contract.METRIC_MODEL: "fine-tuned", contract.METRIC_VAL_LOSS: 1.25, contract.METRIC_VAL_ACCURACY: 0.5},
            {contract.METRIC_MODEL: "base", contract.METRIC_VAL_LOSS: 5.5, contract.METRIC_VAL_ACCURACY: 0.0},
            {contract.METRIC_MODEL: "unigram/speaker", contract.METRIC_VAL_LOSS: 3.0,
             contract.METRIC_VAL_ACCURACY: 0.125}]
    run = tmp_path / "eval-run"
    run.mkdir()
    (run / contract.METRICS_FILE).write_text(json.dumps(rows))
    env = base_env(tmp_path / "home")
    proc = rtjob("results", str(run), "--plot", str(tmp_path / "eval.png"), env=env)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[1].split() == ["MODEL", "VAL", "LOSS", "ACCURACY"]  # no epoch, time or speed columns
    assert lines[2].split() == ["fine-tuned", "1.2500", "0.5000"]
    assert lines[4].split() == ["unigram/speaker", "3.0000", "0.1250"]
    assert "lowest val loss 1.2500: fine-tuned" in proc.stdout
    assert (tmp_path / "eval.png").read_bytes().startswith(b"\x89PNG")
    shown = json.loads(rtjob("results", str(run), "-o", "json", env=env).stdout)
    assert shown[0]["history"] == rows
    assert shown[0]["summary"] == {"run": "eval-run", "models": 3, "best_val_loss": 1.25, "best_model": "fine-tuned"}


@pytest.mark.parametrize("rows", [[{contract.METRIC_EPOCH: 1, contract.METRIC_VAL_LOSS: 0.5}]])
def test_a_training_history_keeps_its_epoch_table(tmp_path, rows):
    run = tmp_path / "train-run"
    run.mkdir()
    (run / contract.METRICS_FILE).write_text(json.dumps(rows))
    proc = rtjob("results", str(run), env=base_env(tmp_path / "home"))
    assert proc.returncode == 0 and "EPOCH" in proc.stdout and "best val loss 0.5000 at epoch 1" in proc.stdout
