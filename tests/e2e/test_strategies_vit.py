"""ViT on CIFAR-shaped data under every strategy: the math without Ray, then each job end to end.

* Data and models: CIFAR-10 / FashionMNIST fail with one clear line offline (no silent fallback);
  the synthetic 3x32x32 set is deterministic; the ViT sizes and the 3-channel ResNet18.
* FSDP2 math on 2 gloo ranks (torch.multiprocessing, no Ray, one spawn for all of it): FSDP2 trains
  the same weights as one process on the whole batch; the full state dict loads into the plain model
  and gives the sharded model's outputs; a DCP round trip through per-rank folders merged into one
  (what Ray Train's upload does) restores model AND optimizer (the next step is identical); CPU
  offload and no-reshard change no number; mixed precision computes with bf16 parameters (fp32
  master shards) and still learns. DeepSpeed ZeRO-2, and ZeRO-3 with CPU offload, over the same
  process group also train the one-process weights, and their full export loads into the plain model.
* Each job through `rtjob submit JOB --nodes 2` on the real 2-node embedded cluster (synthetic data,
  tiny ViT, 2 CPU workers over gloo): exit 0, falling loss, accuracy above chance, the checkpoint
  layout (rank 0 only for single/ddp; every rank's shard for fsdp/deepspeed), and, for deepspeed-vit,
  a second run that resumes from Ray Train's checkpoint at the exact next epoch (the sharded
  strategies share that restore path, training.sharded). About 4 minutes on a quiet 2-core machine,
  most of it Ray Train's fixed start per run. Not ddp-vit: DDP's rank-0-only checkpoints are the ddp-resnet
  job's (test_ddp_resnet_job, test_training) and the ViT the other three jobs' (its render: test_gpu_discovery).

`pytest -k "resume or fault or kill"` selects the resume tests.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from support.cli import new_id, rtjob
from torch.nn import functional as F
from torch.utils.data import DataLoader, DistributedSampler

from training import data, loop
from training.fsdp2 import FSDPOptions, full_state_dict, load_sharded, save_sharded, shard_model
from training.models import build_model

# --- data and models --------------------------------------------------------------------------


def test_synthetic_cifar10_is_deterministic_learnable_shape_and_leaves_mnist_shape_alone():
    train, val = data.load_datasets("synthetic-cifar10", train_size=300, val_size=100, seed=1)
    x, y = train.tensors
    assert x.shape == (300, 3, 32, 32) and x.dtype == torch.float32 and y.dtype == torch.int64
    assert set(y.tolist()) == set(range(10)) and len(val) == 100
    assert torch.equal(x, data.make_synthetic(300, 1, "train", channels=3, image_size=32).tensors[0])
    assert not torch.equal(x[:100], val.tensors[0])
    assert data.input_shape("cifar10") == data.input_shape("synthetic-cifar10") == (3, 32)
    assert data.make_synthetic(10, 1).tensors[0].shape == (10, 1, 28, 28)
    assert "SYNTHETIC CIFAR-10-shaped" in data.describe("synthetic-cifar10", 300, 100)


@pytest.mark.parametrize("name, offline", [("cifar10", "synthetic-cifar10"), ("fashionmnist", "synthetic")])
def test_torchvision_download_failure_is_one_clear_error(tmp_path, monkeypatch, name, offline):
    from torchvision.datasets import CIFAR10, FashionMNIST

    # Port 9 on localhost refuses at once: a real, fast download failure, no network needed.
    monkeypatch.setattr(CIFAR10, "url", "http://127.0.0.1:9/cifar-10-python.tar.gz")
    monkeypatch.setattr(FashionMNIST, "mirrors", ["http://127.0.0.1:9/"])
    with pytest.raises(data.DatasetUnavailable) as info:
        data.load_datasets(name, data_dir=str(tmp_path))
    message = str(info.value)
    assert "\n" not in message and f"--dataset {offline}" in message
    assert (tmp_path / f"{name}.lock").exists()  # downloads are serialised per node


def test_vit_sizes_and_three_channel_resnet18():
    counts = {}
    for size in ("tiny", "base"):
        model = build_model("vit", 3, 10, image_size=32, vit_size=size)
        counts[size] = sum(p.numel() for p in model.parameters())
        assert model(torch.randn(2, 3, 32, 32)).shape == (2, 10)
    assert 13e6 < counts["base"] < 15e6 and counts["tiny"] < 1e5  # the workshop's ViT: 14.3M
    assert build_model("vit", 1, 10, image_size=28, vit_size="tiny")(torch.randn(2, 1, 28, 28)).shape == (2, 10)
    resnet = build_model("resnet18", 3, 10)
    assert resnet.conv1.in_channels == 3 and resnet(torch.randn(2, 3, 32, 32)).shape == (2, 10)


# --- FSDP2 and DeepSpeed math on 2 gloo ranks, without Ray --------------------------------------

WORLD, STEPS, PER_RANK, LR = 2, 3, 4, 1e-3


def _tiny_vit(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return build_model("vit", 3, 10, image_size=32, vit_size="tiny")


def _batches() -> tuple[torch.Tensor, torch.Tensor]:
    """STEPS + 1 fixed global batches of WORLD * PER_RANK samples; rank r trains on its slice."""
    gen = torch.Generator().manual_seed(7)
    n = (STEPS + 1) * WORLD * PER_RANK
    return torch.randn(n, 3, 32, 32, generator=gen), torch.randint(0, 10, (n,), generator=gen)


def _rank_slice(step: int, rank: int) -> slice:
    start = (step * WORLD + rank) * PER_RANK
    return slice(start, start + PER_RANK)


def _steps(model, optimizer, rank: int, steps: range) -> None:
    x, y = _batches()
    for step in steps:
        part = _rank_slice(step, rank)
        optimizer.zero_grad()
        F.cross_entropy(model(x[part]).float(), y[part]).backward()
        optimizer.step()


def _full_model_and_optimizer(model, optimizer) -> dict:
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict

    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    model_state, optim_state = get_state_dict(model, optimizer, options=options)
    return {"model": model_state, "optimizer": optim_state}


def _spawned_main(rank: int, tmp: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{tmp}/pg", rank=rank, world_size=WORLD)
    cpu = torch.device("cpu")
    out: dict = {}
    try:
        # 1. fp32 FSDP2: a few steps, then the full export and the sharded model's outputs.
        model = shard_model(_tiny_vit(), cpu)
        optimizer = torch.optim.Adam(model.parameters(), lr=LR)
        _steps(model, optimizer, rank, range(STEPS))
        out["full"] = full_state_dict(model)
        model.eval()
        with torch.no_grad():
            out["logits"] = model(_batches()[0][:8])
        model.train()
        out["sharded_param_dtype"] = str(next(iter(model.parameters())).to_local().dtype)

        # 2. DCP round trip into a differently initialised model and a fresh optimizer, the way
        # the Ray entrypoint does it: each rank saves into its own folder, the folders are merged
        # into one (Ray Train's upload of every rank's checkpoint), every rank loads the merged one.
        save_sharded(model, optimizer, f"{tmp}/dcp-rank{rank}")
        dist.barrier()
        if rank == 0:
            for r in range(WORLD):
                shutil.copytree(f"{tmp}/dcp-rank{r}", f"{tmp}/dcp", dirs_exist_ok=True)
        dist.barrier()
        out["dcp_files"] = sorted(os.listdir(f"{tmp}/dcp"))
        out["before"] = _full_model_and_optimizer(model, optimizer)
        fresh = shard_model(_tiny_vit(seed=123), cpu)
        fresh_optimizer = torch.optim.Adam(fresh.parameters(), lr=LR)
        load_sharded(fresh, fresh_optimizer, f"{tmp}/dcp")
        out["after"] = _full_model_and_optimizer(fresh, fresh_optimizer)
        _steps(model, optimizer, rank, range(STEPS, STEPS + 1))  # the next step, on both
        _steps(fresh, fresh_optimizer, rank, range(STEPS, STEPS + 1))
        out["next_original"], out["next_restored"] = full_state_dict(model), full_state_dict(fresh)

        # 3. CPU offload + no reshard after forward: same steps, same numbers.
        variant = shard_model(_tiny_vit(), cpu, FSDPOptions(cpu_offload=True, reshard_after_forward=False))
        variant_optimizer = torch.optim.Adam(variant.parameters(), lr=LR)
        _steps(variant, variant_optimizer, rank, range(STEPS))
        out["offload_noreshard"] = full_state_dict(variant)

        # 4. Mixed precision: the dtype the blocks compute with, and that it still learns.
        mixed = shard_model(_tiny_vit(), cpu, FSDPOptions(precision="bf16"))
        seen: dict[str, str] = {}
        block = mixed.encoder.layers[0]
        block.mlp[0].register_forward_hook(lambda mod, args, res: seen.update(block_weight=str(mod.weight.dtype)))
        mixed.conv_proj.register_forward_hook(lambda mod, args, res: seen.update(stem_weight=str(mod.weight.dtype)))
        train_set, val_set = data.load_datasets("synthetic-cifar10", train_size=512, val_size=200, seed=0)
        sampler = DistributedSampler(train_set, num_replicas=WORLD, rank=rank, shuffle=True, seed=0)
        loader = DataLoader(train_set, batch_size=16, sampler=sampler)
        val_loader = DataLoader(data.eval_shard(val_set, rank, WORLD), batch_size=50)  # equal shards
        mixed_optimizer = torch.optim.Adam(mixed.parameters(), lr=2e-3)
        epochs = []
        for epoch in range(2):
            sampler.set_epoch(epoch)
            epochs.append(loop.train_epoch(mixed, loader, mixed_optimizer, cpu, lambda o, t: F.cross_entropy(o.float(), t)))
        val = loop.evaluate(mixed, val_loader, cpu, lambda o, t: F.cross_entropy(o.float(), t))
        with torch.no_grad():
            seen["output"] = str(mixed(val_set.tensors[0][:2]).dtype)
        seen["master_shard"] = str(next(iter(mixed.parameters())).to_local().dtype)
        out["mixed"] = {"dtypes": seen, "train_loss": [e.loss for e in epochs], "val_accuracy": val.accuracy,
                        "val_samples": val.samples}

        # 5. DeepSpeed ZeRO-2, and ZeRO-3 with CPU offload, over the same process group (as in a
        # Ray Train worker: the group exists and these variables are set).
        os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(WORLD),
                          LOCAL_WORLD_SIZE=str(WORLD), MASTER_ADDR="127.0.0.1", MASTER_PORT="29500")
        from training import deepspeed_ray

        out["deepspeed"] = {}
        x, y = _batches()
        # ... and ZeRO-2 with the run's --precision bf16 (DeepSpeed's torch_autocast over fp32 weights).
        for stage, offload, precision in ((2, False, "fp32"), (3, True, "fp32"), (2, False, "bf16")):
            config = deepspeed_ray.deepspeed_config(micro_batch=PER_RANK, world_size=WORLD, zero_stage=stage,
                                                    cpu_offload=offload, precision=precision)
            engine, _ = deepspeed_ray.initialize(_tiny_vit(), LR, config)
            for step in range(STEPS):
                part = _rank_slice(step, rank)
                engine.backward(F.cross_entropy(engine(x[part]).float(), y[part]))
                engine.step()
            key = f"zero{stage}" if precision == "fp32" else f"zero{stage}-{precision}"
            out["deepspeed"][key] = deepspeed_ray.full_state_dict(engine, stage)  # ZeRO-3: a collective
        if rank == 0:
            torch.save(out, f"{tmp}/rank0.pt")
        dist.barrier()
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def spawned(tmp_path_factory):
    """One pair of gloo ranks computes everything the math tests check (a spawn costs two torch imports)."""
    tmp = tmp_path_factory.mktemp("ranks")
    mp.spawn(_spawned_main, args=(str(tmp),), nprocs=WORLD, join=True)
    return torch.load(tmp / "rank0.pt", weights_only=False)


def _assert_same_state(a: dict, b: dict, atol: float = 0.0) -> None:
    assert a.keys() == b.keys()
    for key in a:
        if isinstance(a[key], dict):
            _assert_same_state(a[key], b[key], atol)
        elif isinstance(a[key], torch.Tensor):
            torch.testing.assert_close(a[key], b[key], atol=atol, rtol=0 if atol == 0 else 1e-4, msg=key)
        else:
            assert a[key] == b[key], key


def test_fsdp2_trains_the_same_weights_as_one_process_on_the_whole_batch(spawned):
    model = _tiny_vit()
    optimizer = torch.optim.Adam(model.parameters(), lr=LR)
    x, y = _batches()
    for step in range(STEPS):  # the global batch = both ranks' slices
        part = slice(step * WORLD * PER_RANK, (step + 1) * WORLD * PER_RANK)
        optimizer.zero_grad()
        F.cross_entropy(model(x[part]), y[part]).backward()
        optimizer.step()
    # Adam turns gradients that are zero up to rounding (the attention's key bias) into steps of
    # ~lr; summation order differs between 1 and 2 ranks, so those may differ by ~3e-5 after 3 steps.
    _assert_same_state(model.state_dict(), spawned["full"], atol=1e-4)
    moved = max((a - b).abs().max().item() for a, b in zip(model.state_dict().values(),
                                                             _tiny_vit().state_dict().values(), strict=True))
    assert moved > 2e-3  # the weights moved far more than the tolerance
    assert spawned["sharded_param_dtype"] == "torch.float32"


def test_fsdp2_full_checkpoint_loads_into_plain_model_with_the_sharded_outputs(spawned):
    plain = build_model("vit", 3, 10, image_size=32, vit_size="tiny")
    plain.load_state_dict(spawned["full"])  # strict: every key, no "module."/sharding prefixes
    plain.eval()
    with torch.no_grad():
        logits = plain(_batches()[0][:8])
    torch.testing.assert_close(logits, spawned["logits"], atol=1e-5, rtol=1e-5)


def test_fsdp2_dcp_resume_restores_model_and_optimizer(spawned):
    assert spawned["dcp_files"] == [".metadata", "__0_0.distcp", "__1_0.distcp"]
    before, after = spawned["before"], spawned["after"]
    _assert_same_state(before["model"], after["model"])
    _assert_same_state(before["optimizer"], after["optimizer"])  # Adam moments and step counts
    assert any("exp_avg" in s for s in before["optimizer"]["state"].values())
    # The decisive check: one more step from the restored state equals one more step from the original.
    _assert_same_state(spawned["next_original"], spawned["next_restored"])


def test_fsdp2_cpu_offload_and_no_reshard_change_no_number(spawned):
    _assert_same_state(spawned["full"], spawned["offload_noreshard"], atol=1e-6)


def test_fsdp2_mixed_precision_computes_in_bf16_keeps_fp32_shards_and_learns(spawned):
    mixed = spawned["mixed"]
    assert mixed["dtypes"] == {
        "block_weight": "torch.bfloat16", "stem_weight": "torch.bfloat16",  # gathered params: bf16
        "output": "torch.bfloat16", "master_shard": "torch.float32",  # the optimizer's shards: fp32
    }
    first, second = mixed["train_loss"]
    assert second < first, mixed
    assert mixed["val_samples"] == 200 and mixed["val_accuracy"] > 0.2, mixed  # chance: 0.1


def test_deepspeed_bf16_from_the_precision_option_computes_in_bf16_and_stays_beside_fp32(spawned):
    fp32, bf16 = spawned["deepspeed"]["zero2"], spawned["deepspeed"]["zero2-bf16"]
    assert all(value.dtype == torch.float32 for value in bf16.values())  # fp32 weights under the autocast
    assert any(not torch.equal(fp32[key], bf16[key]) for key in fp32)  # bf16 matmuls changed the numbers ...
    _assert_same_state(fp32, bf16, atol=5e-3)  # ... a little


def test_deepspeed_zero2_and_zero3_offload_train_the_same_weights_as_one_process(spawned):
    model = _tiny_vit()
    optimizer = torch.optim.Adam(model.parameters(), lr=LR)
    x, y = _batches()
    for step in range(STEPS):
        part = slice(step * WORLD * PER_RANK, (step + 1) * WORLD * PER_RANK)
        optimizer.zero_grad()
        F.cross_entropy(model(x[part]), y[part]).backward()
        optimizer.step()
    # No gradient clipping (DeepSpeed 0.19 clips at 1.0 unless configured), same Adam, same numbers.
    for stage in ("zero2", "zero3"):
        _assert_same_state(model.state_dict(), spawned["deepspeed"][stage], atol=1e-4)
        build_model("vit", 3, 10, image_size=32, vit_size="tiny").load_state_dict(spawned["deepspeed"][stage])


# --- the jobs end to end on the embedded 2-node cluster ----------------------------------------

EPOCH = re.compile(r"epoch (\d+)/(\d+) train_loss=([\d.]+) val_loss=([\d.]+) val_acc=([\d.]+)")


def _submit(env: dict[str, str], job: str, *extra: str, run_id: str | None = None) -> tuple[dict, str]:
    run_id = run_id or new_id(job)
    proc = rtjob("submit", job, "--nodes", "2", "--submission-id", run_id, "--output", "json", *extra,
                 env=env, timeout=600)
    log = proc.stderr  # with --output json the followed log goes to stderr
    assert proc.returncode == 0, log[-4000:]
    run = json.loads(proc.stdout)
    assert run["status"] == "SUCCEEDED" and run["job"] == job
    return run, log


def _epochs(log: str) -> list[tuple[int, int, float, float]]:
    """(epoch, epochs, train_loss, val_acc), each line once (a log may repeat worker lines)."""
    seen = dict.fromkeys((int(e), int(n), float(tl), float(acc)) for e, n, tl, _, acc in EPOCH.findall(log))
    return list(seen)


def _assert_learned(log: str) -> list[tuple[int, int, float, float]]:
    assert "using SYNTHETIC CIFAR-10-shaped data" in log  # the local profile, said out loud
    epochs = _epochs(log)
    assert [(e, n) for e, n, *_ in epochs] == [(1, 2), (2, 2)], log[-4000:]
    assert epochs[1][2] < epochs[0][2], f"train loss should fall: {epochs}"
    assert epochs[1][3] > 0.2, f"val accuracy should beat chance (0.1): {epochs}"
    return epochs


def _checkpoints(run_dir: Path) -> list[str]:
    return sorted(p.name for p in run_dir.glob("checkpoint_epoch_*"))


def _files(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()}


def _loads_into_plain_vit(path: Path) -> None:
    build_model("vit", 3, 10, image_size=32, vit_size="tiny").load_state_dict(
        torch.load(path, map_location="cpu", weights_only=True)
    )


REPLICATED = {"model.pt", "optimizer.pt", "state.json", "metrics.json"}


@pytest.mark.cluster
def test_single_vit_job_learns_and_checkpoints_once_per_epoch(cluster_env):
    run, log = _submit(cluster_env, "single-vit")
    _assert_learned(log)
    assert "1 process" in log
    run_dir = Path(run["storage_uri"])
    assert _checkpoints(run_dir) == ["checkpoint_epoch_0001", "checkpoint_epoch_0002"]
    last = run_dir / "checkpoint_epoch_0002"
    assert _files(last) == REPLICATED
    state = json.loads((last / "state.json").read_text())
    assert state == {"epoch": 2, "written_by_rank": 0, "world_size": 1}
    _loads_into_plain_vit(last / "model.pt")


@pytest.mark.cluster
def test_fsdp_vit_job_learns_and_writes_sharded_and_full_checkpoints(cluster_env):
    # Resume from these DCP files is tested without Ray above (merged per-rank folders, as here);
    # the Ray resume path (sharded.restore) is the one test_deepspeed_vit_job_trains_and_resumes runs.
    run, log = _submit(cluster_env, "fsdp-vit")
    _assert_learned(log)
    assert "FSDP2 over 2 ranks (fp32, no offload, reshard after forward)" in log
    run_dir = Path(run["storage_uri"])
    assert _checkpoints(run_dir) == ["checkpoint_epoch_0001", "checkpoint_epoch_0002"]
    last = run_dir / "checkpoint_epoch_0002"
    # DCP files from both ranks (each wrote its own shard into its own folder; Ray merged them).
    assert _files(last) == {"model.pt", "state.json", "metrics.json",
                            "sharded/.metadata", "sharded/__0_0.distcp", "sharded/__1_0.distcp"}
    state = json.loads((last / "state.json").read_text())
    assert state["epoch"] == 2 and state["world_size"] == 2 and state["strategy"] == "fsdp2"
    _loads_into_plain_vit(last / "model.pt")


@pytest.mark.cluster
def test_deepspeed_vit_job_trains_and_resumes(cluster_env):
    first, log = _submit(cluster_env, "deepspeed-vit")
    first_epochs = _assert_learned(log)
    assert "DeepSpeed ZeRO-2 over 2 ranks" in log
    run_dir = Path(first["storage_uri"])
    last = run_dir / "checkpoint_epoch_0002"
    assert _files(last) >= {
        "model.pt", "state.json", "metrics.json", "deepspeed/latest",
        "deepspeed/epoch_0002/mp_rank_00_model_states.pt",
        "deepspeed/epoch_0002/zero_pp_rank_0_mp_rank_00_optim_states.pt",  # each rank's optimizer partition
        "deepspeed/epoch_0002/zero_pp_rank_1_mp_rank_00_optim_states.pt",
    }
    assert json.loads((last / "state.json").read_text())["strategy"] == "deepspeed-zero2"
    _loads_into_plain_vit(last / "model.pt")

    _, log = _submit(cluster_env, "deepspeed-vit", "--set", f"args.run_name={first['id']}", "--set", "args.epochs=3")
    assert "RESUME: loaded the checkpoint of epoch 2; continuing at epoch 3/3" in log
    epochs = _epochs(log)
    assert [(e, n) for e, n, *_ in epochs] == [(3, 3)], log[-4000:]
    assert epochs[0][2] < first_epochs[0][2]
    history = json.loads((run_dir / "checkpoint_epoch_0003" / "metrics.json").read_text())
    assert [m["epoch"] for m in history] == [1, 2, 3]
