"""Models and tokenizers by reference: a hub id, a local folder, an ``s3://`` folder, or ``tiny:<arch>``.

``tiny:qwen3`` / ``tiny:llama`` build a tiny random-init model of that architecture from its transformers config
(offline; same seed → same weights) and an offline byte-level tokenizer (256 byte symbols, no merges: fixed and
deterministic, so every worker and every later step builds the same one). They are chosen explicitly: a failed
download is an error, never a silent fallback to a tiny model.

An ``s3://`` folder is copied to a local cache folder once per node (the first worker copies under a file lock,
the others find it complete), then loaded with the library's own ``from_pretrained``.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import rtjob_contract as contract

from .. import data as shared_data

TINY_PREFIX = "tiny:"
PAD, EOS, UNK = "<|pad|>", "<|endoftext|>", "<|unk|>"
ADDED_TOKENS_FILE = "added_tokens.json"  # {"tokens": ["<a0>", ...]} beside the SFT parquet files
_COMPLETE = ".rtjob-complete"  # marks a finished copy of an s3:// folder in the cache


def _tiny_config(arch: str, vocab_size: int, pad_id: int, eos_id: int) -> Any:
    import transformers

    sizes = dict(vocab_size=vocab_size, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
                 pad_token_id=pad_id, eos_token_id=eos_id, bos_token_id=eos_id, tie_word_embeddings=False)
    if arch == "qwen3":
        return transformers.Qwen3Config(head_dim=16, **sizes)
    if arch == "llama":
        return transformers.LlamaConfig(**sizes)
    raise ValueError(f"unknown tiny model {TINY_PREFIX}{arch}; choose {TINY_PREFIX}qwen3 or {TINY_PREFIX}llama")


TINY_ARCHS = ("qwen3", "llama")


def is_tiny(ref: str) -> bool:
    return ref.startswith(TINY_PREFIX)


def cache_root() -> str:
    base = os.environ.get(contract.ENV_DATA_DIR) or str(Path("~/.cache/rtjob").expanduser())
    return os.path.join(base, "models")


def local_folder(ref: str) -> str:
    """Where ``from_pretrained`` reads ``ref``: the folder itself, the node's copy of an s3:// folder, or the
    hub id unchanged (the hub client caches and locks its own downloads)."""
    if ref.startswith("s3://"):
        return download_folder(ref, cache_root())
    if os.path.isdir(os.path.expanduser(ref)):
        return os.path.expanduser(ref)
    if "://" in ref:
        raise ValueError(f"--model {ref}: only s3:// URIs, local folders, hub ids and tiny:* are supported")
    return ref


def download_folder(uri: str, cache: str) -> str:
    """Copy the object-store folder ``uri`` into ``cache`` once per node; returns the local folder."""
    import pyarrow.fs as pafs
    from filelock import FileLock

    dest = os.path.join(cache, hashlib.sha256(uri.rstrip("/").encode()).hexdigest()[:16])
    os.makedirs(cache, exist_ok=True)
    with FileLock(dest + ".lock"):
        if os.path.exists(os.path.join(dest, _COMPLETE)):
            return dest
        fs, path = shared_data.filesystem(uri)
        try:
            files = [i for i in fs.get_file_info(pafs.FileSelector(path, recursive=True, allow_not_found=True))
                     if i.type == pafs.FileType.File]
        except OSError as exc:
            raise RuntimeError(f"cannot list {uri}: {' '.join(str(exc).split())[:300]}") from None
        if not files:
            raise FileNotFoundError(f"{uri}: no files there (expected a save_pretrained folder)")
        for info in files:
            target = os.path.join(dest, os.path.relpath(info.path, path))
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with fs.open_input_stream(info.path) as src, open(target, "wb") as out:
                while chunk := src.read(8 << 20):
                    out.write(chunk)
        Path(dest, _COMPLETE).touch()
    return dest


def read_added_tokens(data_dir: str | None) -> list[str]:
    """The tokens listed in ``<data_dir>/added_tokens.json`` (none if the file is absent)."""
    if data_dir is None:
        return []
    fs, path = shared_data.filesystem(data_dir)
    try:
        with fs.open_input_stream(f"{path.rstrip('/')}/{ADDED_TOKENS_FILE}") as f:
            doc = json.loads(f.read())
    except FileNotFoundError:
        return []
    tokens = doc.get("tokens") if isinstance(doc, dict) else None
    if not isinstance(tokens, list) or not all(isinstance(t, str) and t for t in tokens):
        raise ValueError(f"{data_dir}/{ADDED_TOKENS_FILE}: expected {{\"tokens\": [\"<a0>\", ...]}}")
    return tokens


def byte_level_tokenizer() -> Any:
    """An offline tokenizer: the 256 byte symbols (no merges) plus pad/eos/unk; ``decode(encode(s)) == s``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {symbol: i for i, symbol in enumerate(alphabet)}
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    backend.decoder = decoders.ByteLevel()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend)
    tokenizer.add_special_tokens({"pad_token": PAD, "eos_token": EOS, "unk_token": UNK})
    return tokenizer


def load_tokenizer(ref: str, *, data_dir: str | None = None, added_tokens: list[str] | tuple[str, ...] = ()) -> Any:
    """The tokenizer of ``ref`` (its own; byte-level for ``tiny:*``) with pad/eos set, plus ``added_tokens`` and
    those of ``<data_dir>/added_tokens.json``. Returns a ``PreTrainedTokenizerFast``."""
    if is_tiny(ref):
        tokenizer = byte_level_tokenizer()
    else:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(local_folder(ref))
    if tokenizer.eos_token is None:
        tokenizer.add_special_tokens({"eos_token": EOS})
    if tokenizer.pad_token is None:  # many causal LMs ship none; padding is masked, so eos serves
        tokenizer.pad_token = tokenizer.eos_token
    extra = [t for t in [*added_tokens, *read_added_tokens(data_dir)] if t not in tokenizer.get_vocab()]
    if extra:
        tokenizer.add_tokens(list(dict.fromkeys(extra)))
    return tokenizer


def load_model(ref: str, tokenizer: Any, *, seed: int = 0, dtype: Any = None) -> Any:
    """The causal LM of ``ref`` with room for every token of ``tokenizer`` (embeddings resized to
    ``len(tokenizer)`` when they are smaller); ``tiny:*`` is random-init from ``seed`` (same seed → same weights)."""
    import torch
    from transformers import AutoModelForCausalLM

    if is_tiny(ref):
        config = _tiny_config(ref[len(TINY_PREFIX):], len(tokenizer), tokenizer.pad_token_id, tokenizer.eos_token_id)
        with torch.random.fork_rng(devices=[]):  # the caller's RNG stream is left as it was
            torch.manual_seed(seed)
            model = AutoModelForCausalLM.from_config(config)
        if dtype is not None:
            model = model.to(dtype)
    else:
        model = AutoModelForCausalLM.from_pretrained(local_folder(ref), dtype=dtype)
    if model.get_input_embeddings().weight.shape[0] < len(tokenizer):
        # Only ever grown (hub models often pad their vocabulary beyond the tokenizer's length); the new rows
        # are drawn from `seed`, so they are deterministic too.
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model.resize_token_embeddings(len(tokenizer), mean_resizing=False)
    model.config.pad_token_id = tokenizer.pad_token_id
    return model


def decoder_layers(model: Any) -> list[Any]:
    """The transformer blocks of a transformers model (also inside a peft wrapper): FSDP2's sharding units."""
    names = set(getattr(_base_model(model), "_no_split_modules", None) or ())
    return [module for module in model.modules() if type(module).__name__ in names]


def _base_model(model: Any) -> Any:
    get_base = getattr(model, "get_base_model", None)  # peft
    return get_base() if callable(get_base) else model
