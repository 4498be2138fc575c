#!/usr/bin/env bash
# Every check for a one-GPU machine, in one go, each stage under its own time limit (a stage that hangs costs its
# share, not the run): the gpu-marked tests (make test-gpu), the GPU benchmark (make bench-gpu: its table), and
# `rtjob submit ddp-vit` against a Ray cluster started by hand with the GPU (`ray start --num-gpus 1`), default
# precision. Logs and the table land in $OUT.
#
# The GPU machine has Python 3.12 with torch but no Ray and no network: build its wheels here first,
#   ../shared/gpu-host/wheelhouse.sh .gpu-wheels && mkdir -p .gpu-host && cp ../shared/gpu-host/activate.sh .gpu-host/
# (both folders are git-ignored), carry them, and run `OUT=... bash benchmarks/gpu_host.sh` there.
# REHEARSE=1 runs the same stages here on the CPU with the project's venv (tiny sizes, no GPU). STAGES picks stages
# (default "tests bench cluster"): "live" submits ddp-vit on the embedded cluster and keeps the run's live rows
# (metrics.jsonl step rows, system.jsonl with the GPU's utilisation and memory as nvidia-smi gives them); "batch"
# measures ViT-base bf16 against fp32 at batch 256 and 1024 (is the small model's bf16 gain bound by the per-op
# launch cost at 256?).
set -uo pipefail
STAGES=" ${STAGES:-tests bench cluster} "
OUT=${OUT:-$PWD/benchmarks/.work/gpu-host}
mkdir -p "$OUT"
step() { echo "== $(date -u +%T) $*" | tee -a "$OUT/steps.log"; }
if [[ ${REHEARSE:-0} == 1 ]]; then
  PY=$PWD/.venv/bin/python; BENCH=(--rehearse --budget-s 240); GPU_SET=(--set resources_per_worker.gpus=0)
  SIZE=(--set args.vit_size=tiny --set args.train_size=256 --set args.val_size=64 --set args.global_batch_size=32)
  export PATH=$PWD/.venv/bin:$PATH
else
  step "activate the wheel set"
  # shellcheck disable=SC1091
  source .gpu-host/activate.sh .gpu-wheels || { step "activate failed"; exit 1; }
  PY=python3; BENCH=(); GPU_SET=()
  SIZE=(--set args.vit_size=base --set args.train_size=25600 --set args.val_size=2560 --set args.global_batch_size=256)
  nvidia-smi >"$OUT/nvidia-smi.txt" 2>&1
fi
$PY -c "import platform, torch, ray; print('python', platform.python_version(), 'torch', torch.__version__, 'ray',
ray.__version__, 'cuda', torch.cuda.is_available() and torch.cuda.get_device_name(0))" 2>&1 | tee -a "$OUT/steps.log"

if [[ $STAGES == *" tests "* ]]; then
step "test-gpu"
timeout 150 $PY -m pytest -q -ra -p no:cacheprovider --confcutdir=tests/gpu -m gpu tests/gpu >"$OUT/test-gpu.log" 2>&1
step "test-gpu exit $?"
fi

if [[ $STAGES == *" bench "* ]]; then
step "bench-gpu"
timeout 330 $PY benchmarks/gpu_bench.py "${BENCH[@]}" --out "$OUT/gpu-results.md" >"$OUT/bench.log" 2>&1
step "bench-gpu exit $?"
fi

if [[ $STAGES == *" cluster "* ]]; then
step "a Ray cluster started by hand with the GPU, then rtjob submit ddp-vit --address"
home=$(mktemp -d); export RTJOB_HOME=$home/rtjob RAY_USAGE_STATS_ENABLED=0
ray start --head --num-gpus "$([[ ${REHEARSE:-0} == 1 ]] && echo 0 || echo 1)" --num-cpus 4 --port 6391 \
  --dashboard-port 8275 --dashboard-agent-listen-port 52375 --include-dashboard true --temp-dir "$home/ray" \
  >"$OUT/ray-cluster.log" 2>&1
timeout 240 $PY -m rtjob.main submit ddp-vit --address http://127.0.0.1:8275 --nodes 1 --set 'requirements=[]' \
  --set args.dataset=synthetic-cifar10 --set args.epochs=2 "${SIZE[@]}" "${GPU_SET[@]}" --storage "$home/store" \
  >>"$OUT/ray-cluster.log" 2>&1
step "submit to the hand-started cluster exit $?"
grep -E "precision|samples/s|SUCCEEDED|FAILED" "$OUT/ray-cluster.log" | tail -8 | tee -a "$OUT/steps.log"
# By pid (never `ray stop`: it ends every cluster of the machine): the processes that name this cluster's folder.
pkill -TERM -f -- "$home/ray" ; for _ in 1 2 3 4 5; do pgrep -f -- "$home/ray" >/dev/null || break; sleep 1; done
pkill -KILL -f -- "$home/ray"
rm -rf "$home"
fi

if [[ $STAGES == *" batch "* ]]; then
step "ViT-base bf16 vs fp32 by batch size"
timeout 120 $PY - >"$OUT/batch.log" 2>&1 <<'PY'
import dataclasses, os, sys
sys.path[:0] = ["benchmarks"]
import gpu_bench as b
sizes = b.REHEARSAL if os.environ.get("REHEARSE") == "1" else b.GPU
size = sizes.vits[0]
for batch in (sizes.batch, 4 * sizes.batch):
    s = dataclasses.replace(sizes, batch=batch)
    fp32 = b.vit_step_rate(size, b.Mode("fp32", "fp32"), s)[0]
    bf16 = b.vit_step_rate(size, b.Mode("bf16", "bf16"), s)[0]
    print(f"ViT-{size} batch {batch}: fp32 {fp32:,.0f} samples/s, bf16 {bf16:,.0f} samples/s: {bf16 / fp32:.2f}x")
PY
step "batch exit $?"; cat "$OUT/batch.log" | tee -a "$OUT/steps.log"
fi

if [[ $STAGES == *" precisions "* ]]; then
step "ViT-base and ViT-large: fp32, TF32, bf16, fp16 again, 30 steps each, two rounds in turn"
timeout 150 $PY - >"$OUT/precisions.log" 2>&1 <<'PY'
import dataclasses, os, sys
sys.path[:0] = ["benchmarks"]
import gpu_bench as b
sizes = b.REHEARSAL if os.environ.get("REHEARSE") == "1" else b.GPU
sizes = dataclasses.replace(sizes, steps=30)
modes = [m for m in b.MODES if not m.compile and (m.precision != "fp16" or sizes.device.type == "cuda")]
for size in sizes.vits:
    rates = {m.name: [] for m in modes}
    for _ in range(2):
        for m in modes:
            rates[m.name].append(b.vit_step_rate(size, m, sizes)[0])
    fp32 = max(rates["fp32"])
    print(f"ViT-{size} batch {sizes.batch}, 30 steps, best of 2: " + ", ".join(
        f"{n} {max(r):,.0f} ({max(r) / fp32:.2f}x; {min(r):,.0f}-{max(r):,.0f})" for n, r in rates.items()), flush=True)
PY
step "precisions exit $?"; grep ViT "$OUT/precisions.log" | tee -a "$OUT/steps.log"
fi

if [[ $STAGES == *" live "* ]]; then
step "live rows of a run on the embedded cluster"
home=$(mktemp -d); export RTJOB_HOME=$home/rtjob RAY_USAGE_STATS_ENABLED=0
timeout 240 $PY -m rtjob.main submit ddp-vit --nodes 1 --real-shape --set 'requirements=[]' \
  --set args.dataset=synthetic-cifar10 --set args.epochs=2 "${SIZE[@]}" "${GPU_SET[@]}" --storage "$home/store" \
  >"$OUT/live-run.log" 2>&1
step "live submit exit $?"
run=$(find "$home/store" -name system.jsonl | head -1); run=${run%/system.jsonl}
{ echo "# $run"; echo "## metrics.jsonl (last 3 of $(wc -l <"$run/metrics.jsonl") rows)"; tail -3 "$run/metrics.jsonl"
  echo "## system.jsonl ($(wc -l <"$run/system.jsonl") rows)"; cat "$run/system.jsonl"; } >"$OUT/live-rows.txt" 2>&1
head -c 3000 "$OUT/live-rows.txt" | tee -a "$OUT/steps.log"
timeout 60 $PY -m rtjob.main local down >/dev/null 2>&1
rm -rf "$home"
fi
step "done"
