"""One precision option for every training entrypoint (training/precision.py): the flag on each, the bf16 rule on
CPU (bf16 autocast works on a CPU too, so bf16 runs here; fp16 needs a GPU and is refused), bf16 losses beside
fp32's on the same seed, the GradScaler's state across a restart, DeepSpeed's config from the same option.
The fp16 and TF32 paths themselves run on a GPU only: tests/gpu/ (marker ``gpu``, deselected on CPU CI)."""

from __future__ import annotations

import importlib
import json

import pytest
from support.lazy import lazy

# torch and the entrypoints (which import it) at their first use, in the worker that runs these tests, never at
# collection (support/lazy.py).
torch = lazy("torch")
file_checkpoint, loop, precision, single = (lazy(f"training.{name}") for name in (
    "file_checkpoint", "loop", "precision", "single"))
deepspeed_ray = lazy("training.deepspeed_ray")

# Every entrypoint that trains, with the flags it needs besides the precision.
ENTRYPOINTS = [
    ("training.single", []), ("training.ray_ddp", []), ("training.ray_data_ddp", []),
    ("training.torchrun_ddp", []), ("training.deepspeed_ray", []), ("training.tune_sweep", []),
    ("training.fsdp2", []), ("training.hf_sft", ["--model", "tiny:qwen3"]),
    ("training.diffusion.pretrain", ["--data", "/x"]),
]


@pytest.mark.parametrize("module,required", ENTRYPOINTS, ids=[m for m, _ in ENTRYPOINTS])
def test_every_entrypoint_takes_the_precision_and_refuses_fp16_without_a_gpu(module, required, capsys):
    parse_args = importlib.import_module(module).parse_args
    assert parse_args([*required, "--no-use-gpu"]).precision == "fp32"
    assert parse_args([*required, "--use-gpu"]).precision == "bf16"
    assert parse_args([*required, "--no-use-gpu", "--precision", "bf16"]).precision == "bf16"  # CPU autocast
    assert parse_args([*required, "--use-gpu", "--precision", "fp16"]).precision == "fp16"
    with pytest.raises(SystemExit) as exit_info:
        parse_args([*required, "--precision", "fp16", "--no-use-gpu"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].endswith("--precision fp16 needs a GPU (float16 autocast + GradScaler); use bf16 or fp32 on CPU")


def test_fsdp2s_old_flag_fails_with_one_line_naming_the_new_one(capsys):
    from training import fsdp2

    with pytest.raises(SystemExit) as exit_info:
        fsdp2.parse_args(["--mixed-precision"])
    assert exit_info.value.code == 2
    assert "--mixed-precision was replaced by --precision bf16" in capsys.readouterr().err


@pytest.mark.parametrize("module", ["training.fsdp2", "training.deepspeed_ray"])
def test_compile_is_refused_where_it_is_not_wired(module, capsys):
    with pytest.raises(SystemExit):
        importlib.import_module(module).parse_args(["--compile"])
    assert "--compile is not supported with" in capsys.readouterr().err


def test_the_precision_line_on_cpu_and_fp16_refused_by_the_worker_too():
    cpu = torch.device("cpu")
    assert precision.for_device("bf16", cpu) == ("bf16", "PRECISION: bf16 (bfloat16 autocast, fp32 weights) on cpu")
    assert precision.for_device("fp32", cpu) == ("fp32", "PRECISION: fp32 (full fp32) on cpu")
    assert not torch.backends.cuda.matmul.allow_tf32  # TF32 is for Ampere+ GPUs only
    with pytest.raises(ValueError, match="fp16 needs a GPU"):
        precision.for_device("fp16", cpu)


def test_deepspeed_takes_its_precision_config_from_the_same_option():
    def config(name: str) -> dict:
        return deepspeed_ray.deepspeed_config(micro_batch=4, world_size=2, precision=name)

    assert config("bf16")["torch_autocast"] == {"enabled": True, "dtype": "bfloat16"}
    assert config("fp16")["fp16"] == {"enabled": True, "auto_cast": True}
    assert "fp16" not in config("fp32") and "torch_autocast" not in config("fp32") and "bf16" not in config("fp32")


def _single(tmp_path, prec: str, capsys) -> tuple[list[dict], str]:
    args = single.parse_args(["--model", "vit", "--vit-size", "tiny", "--dataset", "synthetic-cifar10",
                              "--train-size", "96", "--val-size", "32", "--epochs", "2", "--global-batch-size", "16",
                              "--threads", "1", "--storage-path", str(tmp_path / prec), "--run-name", "r",
                              "--precision", prec])
    single.train(vars(args))
    storage = file_checkpoint.RunStorage(str(tmp_path / prec), "r")
    history = json.loads(storage.read(storage.complete_checkpoints()[-1], "metrics.json"))
    return history, capsys.readouterr().out


def test_a_bf16_runs_epoch_losses_stay_beside_fp32s_on_the_same_seed(tmp_path, capsys):
    fp32, _ = _single(tmp_path, "fp32", capsys)
    bf16, out = _single(tmp_path, "bf16", capsys)
    assert "PRECISION: bf16 (bfloat16 autocast, fp32 weights) on cpu" in out.splitlines()[:3]
    assert [row["precision"] for row in bf16] == ["bf16", "bf16"] and fp32[-1]["precision"] == "fp32"
    for low, full in zip(bf16, fp32, strict=True):
        for key in ("train_loss", "val_loss"):
            assert abs(low[key] - full[key]) <= max(0.05, 0.05 * full[key]), (key, low, full)
    assert bf16[-1]["train_loss"] < bf16[0]["train_loss"] + 0.05  # it trains (2 tiny epochs: no steep fall)


def test_the_grad_scalers_state_survives_a_restart(tmp_path):
    """A scaler that found a smaller loss scale (after overflows) resumes at it, not at 2**16 again. The CPU
    GradScaler is the same class the GPU's fp16 run checkpoints (state_dict: scale, growth tracker)."""
    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.Adam(model.parameters())
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**16)
    step = loop.optimizer_step(optimizer, scaler)
    step(model(torch.full((2, 4), float("inf"))).sum())  # an overflow: the step is skipped, the scale halves
    step(model(torch.ones(2, 4)).sum())  # a good step: the growth tracker counts it
    assert scaler.get_scale() == 2.0**15
    storage = file_checkpoint.RunStorage(str(tmp_path), "r")
    file_checkpoint.save(storage, model=model, optimizer=optimizer, epoch=1, history=[], world_size=1, keep=2,
                         scaler=scaler)

    fresh = torch.amp.GradScaler("cpu", init_scale=2.0**16)  # the restarted process
    last, _, _ = file_checkpoint.restore(storage, torch.nn.Linear(4, 2), torch.optim.Adam(model.parameters()),
                                         torch.device("cpu"), fresh)
    assert last == 1 and fresh.get_scale() == 2.0**15
    assert fresh.state_dict()["_growth_tracker"] == scaler.state_dict()["_growth_tracker"] == 1
