"""The flags every Ray Train entrypoint shares (training/options.py parse_ray_entrypoint): the precision rule is one
rule, checked once per entrypoint that uses it (hf-sft, sd-pretrain's pretrain step)."""

from __future__ import annotations

import importlib

import pytest

ENTRYPOINTS = [("training.hf_sft", ["--model", "tiny:qwen3"]), ("training.diffusion.pretrain", ["--data", "/x"])]


@pytest.mark.parametrize("module,required", ENTRYPOINTS, ids=[m for m, _ in ENTRYPOINTS])
def test_precision_defaults_to_the_device_and_fp16_without_a_gpu_is_a_usage_error(module, required, capsys):
    parse_args = importlib.import_module(module).parse_args
    assert parse_args([*required, "--no-use-gpu"]).precision == "fp32"
    assert parse_args([*required, "--use-gpu"]).precision == "bf16"
    assert parse_args([*required, "--use-gpu", "--precision", "fp16"]).precision == "fp16"
    with pytest.raises(SystemExit) as exit_info:
        parse_args([*required, "--precision", "fp16", "--no-use-gpu"])
    assert exit_info.value.code == 2
    assert "--precision fp16 needs a GPU" in capsys.readouterr().err
