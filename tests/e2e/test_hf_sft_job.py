"""`rtjob submit hf-sft --nodes 2` on the 2-node embedded cluster: a tiny Qwen3 fine-tuned with DDP on the built-in
SFT set, a training worker SIGKILLed after the first checkpoint (Ray Train restarts the group, which resumes at
the next epoch), and the last checkpoint reloaded with `from_pretrained` gives the run's own validation loss."""

from __future__ import annotations

import json
import re
import sys

import pytest
from support.cli import REPO, new_id, popen_rtjob
from test_fault_tolerance import RESUME_LINE, kill_a_worker_after_the_first_checkpoint, registered, storage_of

pytestmark = pytest.mark.cluster
EPOCH_LINE = re.compile(r"epoch (\d+)/3 train_loss=([\d.]+) val_loss=([\d.]+) val_acc=([\d.]+)")


def test_hf_sft_two_nodes_learns_resumes_after_a_killed_worker_and_reloads_with_from_pretrained(cluster_env):
    run_id = new_id("hfsft")
    run_dir = storage_of(cluster_env, "hf-sft", run_id)
    follower = popen_rtjob("submit", "hf-sft", "--nodes", "2", "--submission-id", run_id, "--set", "args.epochs=3",
                           env=cluster_env)
    out, err, saved = kill_a_worker_after_the_first_checkpoint(follower, run_id, lambda: registered(run_dir), 240, 300)
    assert follower.returncode == 0, (out + err)[-6000:]
    assert "using the BUILT-IN generated SFT set" in out  # no silent stand-in: the log says what it trained on
    assert "MODEL: tiny:qwen3" in out and "DDP over 2 ranks" in out, out[-3000:]
    resumes = [tuple(map(int, m)) for m in RESUME_LINE.findall(out)]
    assert len(resumes) == 1 and resumes[0][0] in (saved, saved + 1) and resumes[0][2] == 3, (resumes, saved)
    after = out[out.index("RESUME: loaded"):]
    # Not from zero, and each epoch's line printed once (tqdm's redraws once made the follower repeat the last lines).
    assert [int(m[0]) for m in EPOCH_LINE.findall(after)] == list(range(resumes[0][1], 4)), after
    results = [ln for ln in out.splitlines() if ln.startswith("RESULT: ")]
    assert results and len(results) == len(set(results)), results

    last = run_dir / "checkpoint_epoch_0003"
    history = json.loads((last / "metrics.json").read_text())
    assert [row["epoch"] for row in history] == [1, 2, 3]  # one history across the restart
    assert history[-1]["train_loss"] < history[0]["train_loss"]
    assert history[-1]["val_loss"] < history[0]["val_loss"] and history[-1]["val_accuracy"] > 0.3, history
    assert history[0]["val_samples"] == 256  # every validation example exactly once over both ranks
    state = json.loads((last / "state.json").read_text())
    assert state["epoch"] == 3 and state["written_by_rank"] == 0 and state["model"] == "full model"
    assert {"config.json", "model.safetensors", "tokenizer.json", "optimizer.pt"} <= {p.name for p in last.iterdir()}

    # The checkpoint is a plain save_pretrained folder: reloaded, it scores the run's own last val_loss.
    sys.path.insert(0, str(REPO))
    import torch
    from transformers import AutoModelForCausalLM

    from training.hf import data, model, steps

    tokenizer = model.load_tokenizer(str(last))
    reloaded = AutoModelForCausalLM.from_pretrained(str(last))
    _, val = data.load_pairs(data.BUILTIN, 1024, 256, 0)
    batch = data.collate([data.encode_example(tokenizer, p, c, 64) for p, c in val], tokenizer.pad_token_id)
    stats = steps.evaluate(reloaded, [batch], torch.device("cpu"))
    assert stats.loss == pytest.approx(history[-1]["val_loss"], rel=1e-4)
    assert stats.accuracy == pytest.approx(history[-1]["val_accuracy"], abs=1e-6)
