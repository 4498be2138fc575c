"""The Hugging Face SFT pieces (training/hf/) without a Ray cluster: tokenizer and added tokens, label masking,
exact token-weighted metrics (also over two gloo ranks), gradient accumulation, tiny-model determinism,
checkpoints that reload with from_pretrained, the fp16-on-CPU refusal, and models and data read from S3 (moto)."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from support.lazy import lazy
from support.s3_server import S3Server, bucket_server

import rtjob_contract as contract

# torch and transformers cost an xdist worker seconds to import: imported at their first use (in the worker
# that runs these tests), never at collection (support/lazy.py).
torch = lazy("torch")
dist = lazy("torch.distributed")
mp = lazy("torch.multiprocessing")
hf_sft = lazy("training.hf_sft")
checkpoint = lazy("training.hf.checkpoint")
data = lazy("training.hf.data")
model = lazy("training.hf.model")
steps = lazy("training.hf.steps")
step_rows = lazy("training.step_rows")

BUCKET = "hf-models"
AUDIO = [f"<a{i}>" for i in range(4)] + ["<|speaker|>"]


def cpu() -> torch.device:
    return torch.device("cpu")


@pytest.fixture(scope="module")
def tok():
    return model.load_tokenizer("tiny:qwen3")


def batch_of(tokenizer, pairs, max_len=64):
    return data.collate([data.encode_example(tokenizer, p, c, max_len) for p, c in pairs], tokenizer.pad_token_id)


def logits(net, batch):
    with torch.no_grad():
        return net(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits


# --- tokenizer, added tokens, model -----------------------------------------------------------------


def test_tiny_tokenizer_is_byte_level_and_lossless_with_pad_and_eos(tok):
    text = "Reverse: héllo wörld\n\t42 ✓"
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert tok.decode(ids) == text and max(ids) < 256  # bytes only, no merges
    assert tok.pad_token_id != tok.eos_token_id and {tok.pad_token_id, tok.eos_token_id} <= set(range(256, len(tok)))
    assert model.load_tokenizer("tiny:llama").get_vocab() == tok.get_vocab()  # fixed: same on every worker


def test_added_tokens_from_the_data_folder_are_single_ids_and_the_embeddings_grow(tmp_path: Path, tok):
    (tmp_path / "added_tokens.json").write_text(json.dumps({"tokens": AUDIO}))
    grown = model.load_tokenizer("tiny:qwen3", data_dir=str(tmp_path), added_tokens=["<|lang|>"])
    assert len(grown) == len(tok) + len(AUDIO) + 1
    ids = grown("<|speaker|><a3><a0>x<|lang|>", add_special_tokens=False)["input_ids"]
    assert ids[:3] == grown.convert_tokens_to_ids(["<|speaker|>", "<a3>", "<a0>"]) and len(ids) == 5
    net = model.load_model("tiny:qwen3", grown)
    assert net.get_input_embeddings().weight.shape[0] == len(grown)
    assert net.get_output_embeddings().weight.shape[0] == len(grown)
    # A saved (non-tiny) model with a smaller vocabulary: loading it with more tokens resizes its embeddings.
    saved = tmp_path / "base"
    model.load_model("tiny:qwen3", tok).save_pretrained(saved)
    tok.save_pretrained(saved)
    more = model.load_tokenizer(str(saved), added_tokens=AUDIO)
    assert len(more) == len(tok) + len(AUDIO)
    assert model.load_model(str(saved), more).get_input_embeddings().weight.shape[0] == len(more)


def test_bad_added_tokens_file_is_one_clear_error(tmp_path: Path):
    (tmp_path / "added_tokens.json").write_text(json.dumps(["<a0>"]))
    with pytest.raises(ValueError, match=r'expected \{"tokens"'):
        model.load_tokenizer("tiny:qwen3", data_dir=str(tmp_path))


def test_load_model_is_deterministic_per_seed(tok):
    a, b, c = (model.load_model("tiny:qwen3", tok, seed=s) for s in (7, 7, 8))
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values(), strict=True))
    assert not torch.equal(a.get_input_embeddings().weight, c.get_input_embeddings().weight)
    assert type(model.load_model("tiny:llama", tok)).__name__ == "LlamaForCausalLM"
    assert len(model.decoder_layers(a)) == a.config.num_hidden_layers  # FSDP2's units
    with pytest.raises(ValueError, match="unknown tiny model"):
        model.load_model("tiny:gpt9", tok)


# --- data: masking, padding, the sets -------------------------------------------------------------------


def test_encode_example_masks_the_prompt_and_learns_completion_plus_eos(tok):
    ids, labels = data.encode_example(tok, "Add: 1+2\nAnswer: ", "3", 64)
    prompt_len = len("Add: 1+2\nAnswer: ")
    assert len(ids) == len(labels) == prompt_len + 2
    assert labels[:prompt_len] == [data.IGNORE] * prompt_len
    assert labels[prompt_len:] == ids[prompt_len:] == [tok.convert_tokens_to_ids("3"), tok.eos_token_id]
    cut_ids, cut_labels = data.encode_example(tok, "Add: 1+2\nAnswer: ", "3", 5)
    assert cut_ids == ids[:5] and cut_labels == [data.IGNORE] * 5


def test_collate_pads_right_with_mask_and_ignored_labels(tok):
    batch = batch_of(tok, [("ab", "c"), ("abcd", "ef")])
    assert batch["input_ids"].shape == batch["labels"].shape == (2, 7)
    assert batch["attention_mask"].tolist() == [[1, 1, 1, 1, 0, 0, 0], [1] * 7]
    assert batch["input_ids"][0, 4:].tolist() == [tok.pad_token_id] * 3
    ignore, c = data.IGNORE, tok.convert_tokens_to_ids("c")
    assert batch["labels"][0].tolist() == [ignore, ignore, c, tok.eos_token_id, ignore, ignore, ignore]


def test_parquet_folder_is_read_and_checked(tmp_path: Path):
    pq.write_table(pa.table({"prompt": ["p1", "p2"], "completion": ["c1", "c2"]}), tmp_path / "train.parquet")
    pq.write_table(pa.table({"prompt": ["v"], "completion": ["w"]}), tmp_path / "val.parquet")
    assert data.load_pairs(str(tmp_path), 1, None, 0) == ([("p1", "c1")], [("v", "w")])
    pq.write_table(pa.table({"prompt": ["v"]}), tmp_path / "val.parquet")
    with pytest.raises(ValueError, match="prompt and completion"):
        data.read_split(str(tmp_path), "val")
    pq.write_table(pa.table({"prompt": pa.array([], pa.string()), "completion": pa.array([], pa.string())}),
                   tmp_path / "val.parquet")
    with pytest.raises(ValueError, match="val.parquet: no rows"):
        data.read_split(str(tmp_path), "val")
    with pytest.raises(FileNotFoundError, match="no train.parquet"):
        data.read_split(str(tmp_path / "nowhere"), "train")


def test_builtin_set_is_reproducible_and_train_differs_from_val():
    train, val = data.load_pairs(data.BUILTIN, 64, 16, 0)
    assert (train, val) == data.load_pairs(data.BUILTIN, 64, 16, 0) and len(train) == 64 and len(val) == 16
    assert not set(train) & set(val[:4]) or train[:4] != val[:4]
    prompt, answer = next((p, c) for p, c in train if p.startswith("Add"))
    a, b = map(int, prompt.split()[1].split("+"))
    assert int(answer) == a + b


def test_default_data_is_the_pipeline_input_else_builtin(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv(contract.ENV_INPUT_URI, raising=False)
    assert hf_sft.default_data() == data.BUILTIN
    monkeypatch.setenv(contract.ENV_INPUT_URI, "s3://b/runs/encode-1/")
    assert hf_sft.default_data() == "s3://b/runs/encode-1/sft"


# --- exact metrics and gradient accumulation ----------------------------------------------------------------


def test_epoch_loss_is_token_weighted_not_a_mean_of_batch_means(tok):
    net = model.load_model("tiny:qwen3", tok, seed=3)
    pairs = [("Reverse: ab\nAnswer: ", "ba"), ("Add: 10+20\nAnswer: ", "30"), ("x", "a much longer completion")]
    whole = steps.evaluate(net, [batch_of(tok, pairs)], cpu())
    split = steps.evaluate(net, [batch_of(tok, pairs[:1]), batch_of(tok, pairs[1:])], cpu())
    assert split.loss == pytest.approx(whole.loss, rel=1e-5) and split.accuracy == whole.accuracy
    assert split.samples == 3
    # By hand: the summed cross entropy of every target token over their count.
    full = batch_of(tok, pairs)
    out = logits(net, full)[:, :-1]
    targets = full["labels"][:, 1:]
    keep = targets != data.IGNORE
    manual = torch.nn.functional.cross_entropy(out[keep], targets[keep])
    assert whole.loss == pytest.approx(manual.item(), rel=1e-5)


def test_grad_accumulation_steps_like_one_big_batch(tok, capsys):
    pairs = data.builtin_pairs(8, 0, "train")
    nets = [model.load_model("tiny:qwen3", tok, seed=1) for _ in range(2)]
    optimizers = [torch.optim.SGD(n.parameters(), lr=0.5) for n in nets]
    step_rows.configure(1)  # a step row each optimizer step (issue 36): one per call here, both windows alike
    try:
        whole = steps.train_epoch(nets[0], [batch_of(tok, pairs)], optimizers[0], cpu(), grad_accum=1)
        steps.train_epoch(nets[1], [batch_of(tok, pairs[:3]), batch_of(tok, pairs[3:])], optimizers[1], cpu(),
                          grad_accum=2)
    finally:
        step_rows.configure(0)
    rows = [json.loads(line.split(" ", 2)[2]) for line in capsys.readouterr().out.splitlines()
            if line.startswith("rtjob-event: step_row ")]
    assert [(r["step"], r["lr"]) for r in rows] == [(1, 0.5), (2, 0.5)]
    assert rows[0]["loss"] == pytest.approx(whole.loss, rel=1e-5) == pytest.approx(rows[1]["loss"], rel=1e-4)
    for a, b in zip(nets[0].parameters(), nets[1].parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


def _two_rank_eval(rank: int, port: int, out: str) -> None:
    # A forked child must not enter the OpenMP pool its parent already started (it would hang): one thread runs
    # every op inline.
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        tokenizer = model.load_tokenizer("tiny:qwen3")
        net = model.load_model("tiny:qwen3", tokenizer, seed=5)
        _, val = data.load_pairs(data.BUILTIN, 8, 11, 0)
        shard = [val[i] for i in range(rank, len(val), 2)]  # 6 and 5 examples: unequal shards
        stats = steps.evaluate(net, [batch_of(tokenizer, shard[:2]), batch_of(tokenizer, shard[2:])], cpu())
        if rank == 0:
            Path(out).write_text(json.dumps([stats.loss, stats.accuracy, stats.samples]))
    finally:
        dist.destroy_process_group()


def test_metrics_all_reduced_over_two_gloo_ranks_equal_one_process_over_all_examples(tmp_path: Path, tok):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = tmp_path / "rank0.json"
    # Forked, not spawned: a spawned child re-imports transformers and this module (tens of seconds here).
    ranks = [mp.get_context("fork").Process(target=_two_rank_eval, args=(rank, port, str(out))) for rank in (0, 1)]
    try:
        for proc in ranks:
            proc.start()
        for proc in ranks:
            proc.join(120)
    finally:
        for proc in ranks:
            if proc.is_alive():
                proc.kill()
    assert [proc.exitcode for proc in ranks] == [0, 0]
    loss, accuracy, samples = json.loads(out.read_text())
    _, val = data.load_pairs(data.BUILTIN, 8, 11, 0)
    single = steps.evaluate(model.load_model("tiny:qwen3", tok, seed=5), [batch_of(tok, val)], cpu())
    assert samples == 11 and loss == pytest.approx(single.loss, rel=1e-5) and accuracy == single.accuracy


# --- precision ---------------------------------------------------------------------------------------------


def test_fp16_is_refused_on_cpu_in_the_worker():  # the command line's refusal: test_precision.py
    with pytest.raises(ValueError, match="fp16 needs a GPU"):
        steps.grad_scaler("fp16", cpu())
    assert steps.grad_scaler("bf16", cpu()) is None


@pytest.mark.parametrize("argv,message", [
    (["--model", "tiny:gpt9"], "unknown tiny model"),
    (["--model", "tiny:qwen3", "--fsdp", "--lora-r", "8"], "--lora-r with --fsdp is not supported"),
    (["--model", "tiny:qwen3", "--lora-r", "-1"], "--lora-r must be >= 0"),
])
def test_bad_flags_are_usage_errors(argv, message, capsys: pytest.CaptureFixture[str]):
    with pytest.raises(SystemExit) as exit_info:
        hf_sft.parse_args(argv)
    assert exit_info.value.code == 2 and message in capsys.readouterr().err


def test_bf16_autocast_on_cpu_gives_close_logits(tok):
    net = model.load_model("tiny:qwen3", tok)
    batch = batch_of(tok, data.builtin_pairs(4, 0, "val"))
    fp32 = steps.evaluate(net, [batch], cpu(), precision="fp32")
    bf16 = steps.evaluate(net, [batch], cpu(), precision="bf16")
    assert bf16.loss == pytest.approx(fp32.loss, rel=2e-2)


# --- checkpoints reload with from_pretrained -----------------------------------------------------------------


def test_exported_checkpoint_reloads_with_from_pretrained_and_gives_the_same_logits(tmp_path: Path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = model.load_tokenizer("tiny:qwen3", added_tokens=AUDIO)
    net = model.load_model("tiny:qwen3", tokenizer, seed=2)
    assert checkpoint.export(net, tokenizer, str(tmp_path)) == "full model"
    reloaded = AutoModelForCausalLM.from_pretrained(str(tmp_path))
    again = AutoTokenizer.from_pretrained(str(tmp_path))
    assert again.get_vocab() == tokenizer.get_vocab() and again.pad_token == tokenizer.pad_token
    batch = batch_of(tokenizer, [("<|speaker|>say: ", "<a1><a2>")])
    torch.testing.assert_close(logits(reloaded, batch), logits(net, batch), rtol=0, atol=0)
    # The entrypoint's own loaders read it back too (what a resumed run and the evaluate step do).
    assert model.load_tokenizer(str(tmp_path)).get_vocab() == tokenizer.get_vocab()


@pytest.mark.parametrize("added", [(), AUDIO], ids=["plain", "added-tokens"])
def test_lora_checkpoint_is_the_merged_model_plus_the_adapter(tmp_path: Path, added):
    from transformers import AutoModelForCausalLM

    from training.hf.worker import with_lora

    tok = model.load_tokenizer("tiny:qwen3", added_tokens=added)
    config = {"lora_r": 4, "lora_alpha": None, "lora_dropout": 0.0, "added_tokens": len(added)}
    peft_model = with_lora(model.load_model("tiny:qwen3", tok), config, None)
    full = {name for name, p in peft_model.named_parameters() if p.requires_grad and "lora_" not in name}
    # New tokens' embedding rows must learn: with added tokens the embeddings and the head train fully.
    assert len(full) == (2 if added else 0), full
    with torch.no_grad():  # a trained adapter (a fresh one is zero: merging would change nothing)
        for name, param in peft_model.named_parameters():
            if "lora_B" in name or name in full:
                param.add_(torch.randn_like(param) * 0.1)
    assert checkpoint.export(peft_model, tok, str(tmp_path)) == "merged LoRA model + adapter/"
    assert (tmp_path / "adapter" / "adapter_config.json").is_file()
    batch = batch_of(tok, data.builtin_pairs(2, 0, "val"))
    merged = AutoModelForCausalLM.from_pretrained(str(tmp_path))
    torch.testing.assert_close(logits(merged, batch), logits(peft_model, batch), rtol=1e-4, atol=1e-5)
    resumed = with_lora(model.load_model("tiny:qwen3", tok), config, str(tmp_path / "adapter"))
    torch.testing.assert_close(logits(resumed, batch), logits(peft_model, batch), rtol=0, atol=0)
    assert any(p.requires_grad for p in resumed.parameters())  # trainable again


# --- S3: a model folder and an SFT set on an S3 server (moto) ------------------------------------------------


@pytest.fixture(scope="module")
def s3() -> S3Server:
    with bucket_server(BUCKET) as server:
        yield server


@pytest.fixture
def s3_env(s3: S3Server, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> S3Server:
    for name, value in s3.env().items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv(contract.ENV_DATA_DIR, str(tmp_path / "cache"))
    return s3


def _upload(server: S3Server, folder: Path, prefix: str) -> None:
    client = server.client()
    for path in folder.rglob("*"):
        if path.is_file():
            client.upload_file(str(path), BUCKET, f"{prefix}/{path.relative_to(folder)}")


def test_s3_model_folder_is_downloaded_once_and_loads_the_same_model(s3_env: S3Server, tmp_path: Path, tok):
    net = model.load_model("tiny:qwen3", tok, seed=4)
    net.save_pretrained(tmp_path / "src")
    tok.save_pretrained(tmp_path / "src")
    _upload(s3_env, tmp_path / "src", "models/tiny")
    uri = f"s3://{BUCKET}/models/tiny"
    tokenizer = model.load_tokenizer(uri)
    loaded = model.load_model(uri, tokenizer)
    batch = batch_of(tokenizer, [("a", "b")])
    torch.testing.assert_close(logits(loaded, batch), logits(net, batch), rtol=0, atol=0)
    local = model.local_folder(uri)
    assert local.startswith(str(tmp_path / "cache")) and os.path.isfile(os.path.join(local, "config.json"))
    s3_env.client().delete_object(Bucket=BUCKET, Key="models/tiny/config.json")
    assert model.local_folder(uri) == local  # the node's complete copy is reused, not fetched again


def test_missing_s3_model_is_an_error_not_a_fallback(s3_env: S3Server):
    with pytest.raises(FileNotFoundError, match=f"s3://{BUCKET}/models/none: no files there"):
        model.load_tokenizer(f"s3://{BUCKET}/models/none")


def test_sft_set_and_added_tokens_read_from_s3(s3_env: S3Server, tmp_path: Path):
    src = tmp_path / "sft"
    src.mkdir()
    pq.write_table(pa.table({"prompt": ["p"], "completion": ["<a1>"]}), src / "train.parquet")
    pq.write_table(pa.table({"prompt": ["q"], "completion": ["<a2>"]}), src / "val.parquet")
    (src / "added_tokens.json").write_text(json.dumps({"tokens": AUDIO}))
    _upload(s3_env, src, "runs/encode/sft")
    uri = f"s3://{BUCKET}/runs/encode/sft"
    assert data.load_pairs(uri, None, None, 0) == ([("p", "<a1>")], [("q", "<a2>")])
    assert model.read_added_tokens(uri) == AUDIO
