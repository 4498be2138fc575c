"""Test job: prints numbered lines at a steady pace (for follow, reconnect and latency tests)."""

import argparse
import sys
import time

parser = argparse.ArgumentParser()
parser.add_argument("--lines", type=int, default=20)
parser.add_argument("--interval", type=float, default=0.1)
parser.add_argument("--exit-code", type=int, default=0)
parser.add_argument("--sleep-after", type=float, default=0.0)
parser.add_argument("--no-final-newline", action="store_true")
parser.add_argument("--progress-after", type=int, default=0, help="after this line, a progress bar as tqdm draws it")
args = parser.parse_args()
for i in range(1, args.lines + 1):
    print(f"line {i} of {args.lines}", flush=True)
    if i == args.progress_after:
        # tqdm redraws with a carriage return and ends with a newline: one line of the file, three to Ray's readers
        for step in range(3):
            sys.stdout.write(f"\rprogress {step + 1}/3")
            sys.stdout.flush()
        sys.stdout.write("\n")
        sys.stdout.flush()
    time.sleep(args.interval)
time.sleep(args.sleep_after)
if args.exit_code:
    print(f"failing on purpose with exit code {args.exit_code}", flush=True)
if args.no_final_newline:
    sys.stdout.write("last words without newline")
    sys.stdout.flush()
sys.exit(args.exit_code)
