"""The paths that need a GPU (marker ``gpu``): CI, on CPUs, deselects them (``-m "not gpu"`` in the Makefile's test
targets) and ``make test-gpu`` (or benchmarks/gpu_bench.py's machine) runs them. None of them skips: on a machine
without CUDA they fail, so a run that counts them passed ran them on a GPU.

``torch.compile`` of a tiny model is here too, although a CPU can run it: on this project's CPU machine the first
compiled step took 36 s (the C++ inductor build), too slow for the unit suite."""

from __future__ import annotations

import json

import pytest
import torch

from training import file_checkpoint, loop, precision, single
from training.vit import vit

pytestmark = pytest.mark.gpu


def _gpu() -> torch.device:
    assert torch.cuda.is_available(), "a gpu-marked test runs on a machine with a CUDA GPU (make test-gpu)"
    return torch.device("cuda", 0)


def _single(tmp_path, *flags: str) -> list[dict]:
    args = single.parse_args(["--model", "vit", "--vit-size", "tiny", "--dataset", "synthetic-cifar10",
                              "--train-size", "256", "--val-size", "64", "--epochs", "2", "--global-batch-size",
                              "32", "--storage-path", str(tmp_path), "--run-name", "r", *flags])
    single.train(vars(args))
    storage = file_checkpoint.RunStorage(str(tmp_path), "r")
    return json.loads(storage.read(storage.complete_checkpoints()[-1], "metrics.json"))


def test_bf16_is_the_default_on_a_gpu_and_fp32_turns_tf32_on_from_ampere(tmp_path):
    device = _gpu()
    assert single.parse_args(["--use-gpu"]).precision == "bf16"
    amp, line = precision.for_device("fp32", device)
    ampere = torch.cuda.get_device_capability(device) >= (8, 0)
    assert torch.backends.cuda.matmul.allow_tf32 == ampere and ("TF32" in line) == ampere
    history = _single(tmp_path, "--use-gpu")
    assert history[-1]["precision"] == ("bf16" if torch.cuda.is_bf16_supported() else "fp32")


def test_fp16_trains_with_a_grad_scaler_whose_state_is_checkpointed_and_restored(tmp_path):
    device = _gpu()
    history = _single(tmp_path, "--use-gpu", "--precision", "fp16")
    assert history[-1]["precision"] == "fp16" and history[-1]["train_loss"] < 2.35
    storage = file_checkpoint.RunStorage(str(tmp_path), "r")
    newest = storage.complete_checkpoints()[-1]
    assert storage.has(newest, "grad_scaler.pt")
    scaler = torch.amp.GradScaler("cuda", init_scale=1.0)
    model = vit(size="tiny").to(device)
    file_checkpoint.restore(storage, model, torch.optim.Adam(model.parameters()), device, scaler)
    assert scaler.get_scale() > 1.0  # the saved scale, not this one's


def test_a_compiled_tiny_vit_trains_one_step():
    device = _gpu()
    model = vit(size="tiny").to(device)
    optimizer = torch.optim.Adam(model.parameters())
    compiled = precision.maybe_compile(model, True)
    x, y = torch.randn(8, 3, 32, 32, device=device), torch.randint(0, 10, (8,), device=device)
    before = [p.detach().clone() for p in model.parameters()]
    stats = loop.train_epoch(compiled, [(x, y)], optimizer, device, precision="bf16")
    assert stats.samples == 8 and stats.loss > 0
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))  # it stepped
