"""GPU benchmark for a one-GPU machine, finishing in <= 5 minutes: ``make bench-gpu`` (= ``python
benchmarks/gpu_bench.py --out PATH``); ``--rehearse`` runs the same code paths on a CPU with tiny sizes.

Rows come in priority order and are printed and written to ``--out`` (Markdown) as each finishes, so a run cut
short still leaves the first ones. Every figure is a ratio of two measurements taken side by side in this run:

1. ViT (training/vit.py) training steps through ``training.loop.train_epoch`` in fp32, TF32 matmuls, bf16 autocast,
   fp16 autocast + GradScaler and bf16 + ``torch.compile`` (compile time shown apart): samples/s, peak memory, the
   speed-up over fp32, and model FLOP utilisation = model FLOPs/s (6 x parameters x tokens per sample) / the card's
   bf16 matmul rate measured first in this run.
2. Ray Train through ``rtjob submit ddp-vit`` (the embedded cluster on this machine's GPU) vs ``torchrun
   --nproc-per-node 1 -m training.torchrun_ddp`` vs ``python -m training.single``: steady samples/s (the last
   epoch's) and time from process start to the first training step (``rtjob-event: first_step``). Needs Ray:
   skipped with the reason when ``import ray`` fails.
3. A Qwen3-shaped causal LM of ~0.5B parameters (random init, no download) and sd-pretrain's ``sd15`` UNet (random
   init; needs diffusers) in bf16: steps/s and peak memory.

What needs several GPUs (DDP vs FSDP2 memory per rank, NCCL all-reduce bandwidth) is listed as not measured.
Nothing here needs the network.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import queue
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "cli")]

import torch  # noqa: E402

from training import loop, precision  # noqa: E402

TOKENS_PER_SAMPLE = 65  # a 32x32 image in 4x4 patches + the class token
HEADER = "| # | measurement | value | ratio | note |\n|---|---|---|---|---|"


@dataclass
class Sizes:
    """What one mode of the script runs: the GPU's real sizes or the CPU rehearsal's tiny ones."""

    device: torch.device
    vits: tuple[str, ...]
    batch: int
    steps: int
    matmul_n: int
    e2e: dict[str, str]  # training flags of row 2's runs
    lm: dict[str, int]
    lm_batch: tuple[int, int]  # (sequences, tokens each)
    unet: str
    unet_batch: int
    unet_latent: int


GPU = Sizes(device=torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu"),
            vits=("base", "large"), batch=256, steps=12, matmul_n=8192,
            e2e={"model": "vit", "vit_size": "base", "dataset": "synthetic-cifar10", "train_size": "25600",
                 "val_size": "2560", "epochs": "2", "global_batch_size": "256"},
            lm=dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                    num_key_value_heads=2, head_dim=64, vocab_size=151936),
            lm_batch=(8, 512), unet="sd15", unet_batch=4, unet_latent=64)
REHEARSAL = Sizes(device=torch.device("cpu"), vits=("tiny", "small"), batch=8, steps=3, matmul_n=256,
                  e2e={"model": "vit", "vit_size": "tiny", "dataset": "synthetic-cifar10", "train_size": "128",
                       "val_size": "32", "epochs": "2", "global_batch_size": "32"},
                  lm=dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                          num_key_value_heads=2, head_dim=16, vocab_size=1024),
                  lm_batch=(2, 64), unet="tiny", unet_batch=2, unet_latent=16)


@dataclass
class Table:
    out: Path | None
    head: list[str]
    rows: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def row(self, measurement: str, value: str, ratio: str = "—", note: str = "") -> None:
        line = f"| {len(self.rows) + 1} | {measurement} | {value} | {ratio} | {note} |"
        self.rows.append(line)
        print(line, flush=True)
        self.write()

    def note(self, text: str) -> None:
        self.notes.append(text)
        print(f"- {text}", flush=True)
        self.write()

    def write(self) -> None:
        if self.out is None:
            return
        body = "\n".join([*self.head, "", HEADER, *self.rows, "", *(f"- {n}" for n in self.notes)]) + "\n"
        self.out.parent.mkdir(parents=True, exist_ok=True)
        self.out.write_text(body)


def machine_lines(rehearse: bool) -> list[str]:
    lines = ["# GPU benchmark" + (" — CPU rehearsal (tiny sizes, not GPU figures)" if rehearse else ""), "",
             *(["Same code paths and table shape as on a GPU; speeds and MFU here say nothing about a GPU (and "
                "little about a CPU shared with other work).", ""] if rehearse else []),
             f"- date: {time.strftime('%Y-%m-%dT%H:%M:%S%z')}",
             f"- torch {torch.__version__} (CUDA {torch.version.cuda}), Python {platform.python_version()}"]
    if torch.cuda.is_available() and not rehearse:
        smi = _run_text(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"])
        lines.append(f"- card: {torch.cuda.get_device_name(0)}; nvidia-smi: {smi.strip() or 'n/a'}")
    else:
        lines.append(f"- device: CPU ({platform.processor() or platform.machine()}, {os.cpu_count()} cores)")
    lines.append(f"- command: `{' '.join([Path(sys.executable).name, *sys.argv])}`")
    return lines


def _run_text(cmd: list[str]) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""


def millions(count: int) -> str:
    return f"{count / 1e6:.2f}M" if count < 10e6 else f"{count / 1e6:,.0f}M"


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def peak_mb(device: torch.device) -> str:
    return f"{torch.cuda.max_memory_allocated(device) / 2**20:,.0f} MiB" if device.type == "cuda" else "n/a on CPU"


def reset_peak(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)


# --- 1. precision x ViT size ---------------------------------------------------------------------------------------
def matmul_tflops(sizes: Sizes) -> float:
    """The card's bf16 matmul rate (TFLOP/s), measured: the denominator of model FLOP utilisation."""
    n, device = sizes.matmul_n, sizes.device
    a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    synchronize(device)
    reps = 20 if device.type == "cuda" else 3
    start = time.perf_counter()
    for _ in range(reps):
        a @ b
    synchronize(device)
    return 2 * n**3 * reps / (time.perf_counter() - start) / 1e12


@dataclass(frozen=True)
class Mode:
    name: str
    precision: str
    tf32: bool = False
    compile: bool = False


MODES = (Mode("fp32", "fp32"), Mode("TF32 matmuls", "fp32", tf32=True), Mode("bf16 autocast", "bf16"),
         Mode("fp16 autocast + GradScaler", "fp16"), Mode("bf16 + torch.compile", "bf16", compile=True))


def vit_step_rate(size: str, mode: Mode, sizes: Sizes) -> tuple[float, str, float, int]:
    """``(samples/s, peak memory, compile+first-step seconds, parameters)`` of ``sizes.steps`` optimizer steps."""
    from training.vit import vit

    device = sizes.device
    torch.manual_seed(0)
    model = vit(size=size).to(device)
    params = sum(p.numel() for p in model.parameters())
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    scaler = precision.grad_scaler(mode.precision, device)
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = mode.tf32
    forward = precision.maybe_compile(model, mode.compile)
    x = torch.randn(sizes.batch, 3, 32, 32, device=device)
    y = torch.randint(0, 10, (sizes.batch,), device=device)
    reset_peak(device)
    start = time.perf_counter()
    loop.train_epoch(forward, [(x, y)] * 2, optimizer, device, precision=mode.precision, scaler=scaler)  # warm-up
    first = time.perf_counter() - start
    stats = loop.train_epoch(forward, [(x, y)] * sizes.steps, optimizer, device, precision=mode.precision,
                             scaler=scaler)
    return stats.samples_per_s, peak_mb(device), first, params


def bench_precisions(table: Table, sizes: Sizes, rehearse: bool) -> None:
    rate = matmul_tflops(sizes)
    shown = f"{rate:,.1f} TFLOP/s" if rate >= 1 else f"{rate * 1000:,.1f} GFLOP/s"
    table.row(f"bf16 matmul rate ({sizes.matmul_n}x{sizes.matmul_n}, measured)", shown,
              note="the denominator of MFU below")
    for size in sizes.vits:
        base = None
        for mode in MODES:
            label = f"ViT-{size} batch {sizes.batch}, {mode.name}"
            if mode.precision == "fp16" and sizes.device.type != "cuda":
                table.row(label, "not rehearsed", note="fp16 + GradScaler needs a GPU")
                continue
            if mode.compile and rehearse:
                table.row(label, "not rehearsed", note="torch.compile on this CPU: ~36 s for a tiny ViT")
                continue
            if mode.tf32 and sizes.device.type != "cuda":
                table.row(label, "not rehearsed", note="TF32 is a GPU mode (Ampere+)")
                continue
            try:
                per_s, peak, first, params = vit_step_rate(size, mode, sizes)
            except torch.cuda.OutOfMemoryError:
                table.row(label, "out of memory")
                continue
            base = base or per_s
            mfu = 6 * params * TOKENS_PER_SAMPLE * per_s / 1e12 / rate
            extra = f"; compile + first steps {first:.1f} s" if mode.compile else ""
            table.row(label, f"{per_s:,.0f} samples/s, peak {peak}", f"{per_s / base:.2f}× fp32",
                      f"{millions(params)} params, MFU {mfu:.1%}{extra}")
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False


# --- 2. Ray Train via rtjob vs torchrun vs one process ------------------------------------------------------------
EPOCH = re.compile(r"epoch (\d+)/\d+ .*?samples/s=([\d.]+)")
FIRST_STEP = "rtjob-event: first_step"


def timed_run(cmd: list[str], env: dict[str, str], timeout: float) -> tuple[float | None, float | None, str]:
    """``(last epoch's samples/s, seconds from start to the first step, output's tail)`` of one process, ended
    (its whole process group) after ``timeout`` seconds even if it prints nothing."""
    start, first, last = time.perf_counter(), None, None
    lines: queue.Queue[str | None] = queue.Queue()
    tail: list[str] = []
    with subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          start_new_session=True) as proc:
        assert proc.stdout is not None
        threading.Thread(target=_pump, args=(proc.stdout, lines), daemon=True).start()
        try:
            while (left := timeout - (time.perf_counter() - start)) > 0:
                try:
                    line = lines.get(timeout=left)
                except queue.Empty:
                    break
                if line is None:
                    break
                tail = [*tail[-14:], line]
                if first is None and FIRST_STEP in line:
                    first = time.perf_counter() - start
                if match := EPOCH.search(line):
                    last = float(match.group(2))
        finally:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
    return last, first, "".join(tail)


def _pump(stream: Iterable[str], lines: queue.Queue[str | None]) -> None:
    for line in stream:
        lines.put(line)
    lines.put(None)  # the end of its output


def bench_launchers(table: Table, sizes: Sizes, budget_s: float) -> None:
    try:
        import ray  # noqa: F401
    except ImportError as exc:
        table.row("Ray Train via rtjob vs torchrun vs one process", "skipped", note=f"import ray failed: {exc}")
        return
    gpu = sizes.device.type == "cuda"
    flags = [f"--{k.replace('_', '-')}={v}" for k, v in sizes.e2e.items()] + ["--use-gpu" if gpu else "--no-use-gpu"]
    home = Path(tempfile.mkdtemp(prefix="rtjob-gpubench-"))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "cli"), os.environ.get("PYTHONPATH", "")]),
           "RTJOB_HOME": str(home / "rtjob"), "PYTHONUNBUFFERED": "1", "RAY_USAGE_STATS_ENABLED": "0"}
    sets = [f"--set=args.{k}={v}" for k, v in sizes.e2e.items()]
    runs = {
        "one process (`python -m training.single`)":
            [sys.executable, "-m", "training.single", *flags, f"--storage-path={home}/single"],
        "torchrun --nproc-per-node 1":
            [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "1", "-m",
             "training.torchrun_ddp", *flags, f"--storage-path={home}/torchrun", "--run-name=bench"],
        "Ray Train via `rtjob submit ddp-vit` (embedded cluster)":
            [sys.executable, "-m", "rtjob.main", "submit", "ddp-vit", "--nodes", "1", "--real-shape", *sets,
             "--set=requirements=[]", f"--storage={home}/ray", *(() if gpu else ("--set=resources_per_worker.gpus=0",))],
    }
    results: dict[str, float | None] = {}
    shares = {name: budget_s / 4 for name in runs}  # the Ray run (last) also starts a cluster: what is left
    deadline = time.monotonic() + budget_s
    try:
        for name, cmd in runs.items():
            left = deadline - time.monotonic()
            per_s, first, tail = timed_run(cmd, env, timeout=left if name == list(runs)[-1] else shares[name])
            results[name] = per_s
            if per_s is None:
                table.row(f"{name}: steady samples/s", "no epoch line", note=" ".join(tail.split())[-300:])
                continue
            ref = results.get("one process (`python -m training.single`)")
            table.row(f"{name}: steady samples/s (last epoch)", f"{per_s:,.0f} samples/s",
                      f"{per_s / ref:.3f}× one process" if ref else "—",
                      f"first step {first:.1f} s after process start" if first else "no first_step line")
    finally:
        subprocess.run([sys.executable, "-m", "rtjob.main", "local", "down"], cwd=ROOT, env=env,
                       capture_output=True, timeout=120)
        shutil.rmtree(home, ignore_errors=True)


# --- 3. hf-sft (Qwen3-shaped ~0.5B) and sd15 UNet in bf16 ------------------------------------------------------
def steps_per_s(step: Callable[[], None], device: torch.device, steps: int) -> float:
    step()
    step()
    synchronize(device)
    start = time.perf_counter()
    for _ in range(steps):
        step()
    synchronize(device)
    return steps / (time.perf_counter() - start)


def bench_big_models(table: Table, sizes: Sizes) -> None:
    bench_lm(table, sizes)  # each in its own function: its model's memory is freed before the next one
    bench_unet(table, sizes)


def bench_lm(table: Table, sizes: Sizes) -> None:
    device = sizes.device
    try:
        import transformers

        torch.manual_seed(0)
        config = transformers.Qwen3Config(max_position_embeddings=4096, tie_word_embeddings=True, **sizes.lm)
        model = transformers.Qwen3ForCausalLM(config).to(device)
        params = sum(p.numel() for p in model.parameters())
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
        ids = torch.randint(0, sizes.lm["vocab_size"], sizes.lm_batch, device=device)
        opt_step = loop.optimizer_step(optimizer)

        def lm_step() -> None:
            with precision.autocast("bf16", device):
                loss = model(input_ids=ids, labels=ids).loss
            opt_step(loss)

        reset_peak(device)
        rate = steps_per_s(lm_step, device, max(2, sizes.steps // 4))
        table.row(f"hf-sft: Qwen3-shaped LM ({millions(params)} params, random init), bf16, AdamW, "
                  f"batch {sizes.lm_batch[0]}x{sizes.lm_batch[1]} tokens", f"{rate:.2f} steps/s, peak {peak_mb(device)}",
                  note=f"{rate * sizes.lm_batch[0] * sizes.lm_batch[1]:,.0f} tokens/s")
    except (ImportError, torch.cuda.OutOfMemoryError) as exc:
        table.row("hf-sft: Qwen3-shaped LM, bf16", "not measured", note=f"{type(exc).__name__}: {exc}"[:200])


def bench_unet(table: Table, sizes: Sizes) -> None:
    device = sizes.device
    try:
        from training.diffusion.components import build_unet

        unet = build_unet(sizes.unet, sample_size=sizes.unet_latent, latent_channels=4, cross_attention_dim=768
                          if sizes.unet == "sd15" else 32, seed=0).to(device)
        params = sum(p.numel() for p in unet.parameters())
        optimizer = torch.optim.AdamW(unet.parameters(), lr=1e-5)
        latents = torch.randn(sizes.unet_batch, 4, sizes.unet_latent, sizes.unet_latent, device=device)
        text = torch.randn(sizes.unet_batch, 77, unet.config.cross_attention_dim, device=device)
        timesteps = torch.randint(0, 1000, (sizes.unet_batch,), device=device)
        opt_step = loop.optimizer_step(optimizer)

        def unet_step() -> None:
            with precision.autocast("bf16", device):
                out = unet(latents, timesteps, encoder_hidden_states=text).sample
            opt_step(torch.nn.functional.mse_loss(out.float(), latents))

        reset_peak(device)
        rate = steps_per_s(unet_step, device, max(2, sizes.steps // 4))
        table.row(f"sd-pretrain: `{sizes.unet}` UNet ({millions(params)} params, random init), bf16, AdamW, "
                  f"batch {sizes.unet_batch} latents {sizes.unet_latent}x{sizes.unet_latent}",
                  f"{rate:.2f} steps/s, peak {peak_mb(device)}", note="no gradient checkpointing")
    except (ImportError, torch.cuda.OutOfMemoryError) as exc:
        table.row(f"sd-pretrain: `{sizes.unet}` UNet, bf16", "not measured", note=f"{type(exc).__name__}: {exc}"[:200])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rehearse", action="store_true", help="tiny sizes on the CPU: the same code paths")
    parser.add_argument("--out", type=Path, help="write the Markdown table here (rewritten as each row finishes)")
    parser.add_argument("--budget-s", type=float,
                        help="the whole run's time (default 280 s on a GPU, 900 s for the CPU rehearsal); row 2's "
                        "three runs share what rows 1 and 3 leave")
    args = parser.parse_args(argv)
    if not args.rehearse and not torch.cuda.is_available():
        parser.error("no CUDA GPU here: run on a GPU machine, or pass --rehearse for the CPU rehearsal")
    sizes = REHEARSAL if args.rehearse else GPU
    budget = args.budget_s or (900.0 if args.rehearse else 280.0)
    start = time.monotonic()
    table = Table(args.out, machine_lines(args.rehearse))
    print("\n".join(table.head), flush=True)
    bench_precisions(table, sizes, args.rehearse)
    # Row 2 gets what is left but 45 s (row 3's share), at least 90 s.
    bench_launchers(table, sizes, max(90.0, budget - 45 - (time.monotonic() - start)))
    bench_big_models(table, sizes)
    table.row("DDP vs FSDP2 memory per rank; NCCL all-reduce bandwidth", "not measured",
              note="needs several GPUs (this script is for one)")
    table.note(f"total {time.monotonic() - start:.0f} s; each ratio compares runs made side by side in this run")
    return 0


if __name__ == "__main__":
    sys.exit(main())
