"""Test job: prints numbered lines at a steady pace (for follow, reconnect and latency tests). With --epoch-every N,
every N lines are an "epoch": metrics.json (a row per epoch so far) and checkpoint.json (the last line done) are
written to $RTJOB_RUN_DIR, and a run that finds its checkpoint there resumes after that line (a plain script
resuming from its own checkpoint file, as a retry of the run does); summary.txt at the end. Given COUNT_TOKEN (a
secret), it prints the value's digest first."""

import argparse
import hashlib
import json
import os
import sys
import time

parser = argparse.ArgumentParser()
parser.add_argument("--lines", type=int, default=20)
parser.add_argument("--interval", type=float, default=0.1)
parser.add_argument("--exit-code", type=int, default=0)
parser.add_argument("--sleep-after", type=float, default=0.0)
parser.add_argument("--no-final-newline", action="store_true")
parser.add_argument("--progress-after", type=int, default=0, help="after this line, a progress bar as tqdm draws it")
parser.add_argument("--epoch-every", type=int, default=0)
args = parser.parse_args()


def write(path: str, data: object) -> None:
    with open(path + ".tmp", "w") as f:
        json.dump(data, f)
    os.replace(path + ".tmp", path)


if os.environ.get("COUNT_TOKEN"):  # a secret the run was given (a test's `secrets:`): its digest, never itself
    print(f"token sha256 {hashlib.sha256(os.environ['COUNT_TOKEN'].encode()).hexdigest()[:16]}", flush=True)
start = 1
run_dir = os.environ.get("RTJOB_RUN_DIR", "")
checkpoint = os.path.join(run_dir, "checkpoint.json")
if args.epoch_every:
    os.makedirs(run_dir, exist_ok=True)
    if os.path.exists(checkpoint):
        with open(checkpoint) as f:
            start = json.load(f)["line"] + 1
        print(f"resuming after line {start - 1} (its checkpoint)", flush=True)
for i in range(start, args.lines + 1):
    print(f"line {i} of {args.lines}", flush=True)
    if args.epoch_every and i % args.epoch_every == 0:
        write(os.path.join(run_dir, "metrics.json"),
              [{"epoch": e, "train_loss": 1.0 / e} for e in range(1, i // args.epoch_every + 1)])
        write(checkpoint, {"line": i})
    if i == args.progress_after:
        # tqdm redraws with a carriage return and ends with a newline: one line of the file, three to Ray's readers
        for step in range(3):
            sys.stdout.write(f"\rprogress {step + 1}/3")
            sys.stdout.flush()
        sys.stdout.write("\n")
        sys.stdout.flush()
    time.sleep(args.interval)
if args.epoch_every:
    with open(os.path.join(run_dir, "summary.txt"), "w") as f:
        f.write(f"{args.lines} lines")
time.sleep(args.sleep_after)
if args.exit_code:
    print(f"failing on purpose with exit code {args.exit_code}", flush=True)
if args.no_final_newline:
    sys.stdout.write("last words without newline")
    sys.stdout.flush()
sys.exit(args.exit_code)
