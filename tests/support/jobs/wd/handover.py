"""Test pipeline step: appends its step name to what the previous step wrote (RTJOB_INPUT_DIR/relay.txt) and writes
the result into its own run folder (RTJOB_RUN_DIR/relay.txt); --fail exits 3 after writing nothing."""

import argparse
import os
import sys
from pathlib import Path

parser = argparse.ArgumentParser()
parser.add_argument("--fail", action="store_true")
args = parser.parse_args()
step = os.environ["RTJOB_STEP_NAME"]
before = ""
if os.environ.get("RTJOB_INPUT_URI"):
    with open(Path(os.environ["RTJOB_INPUT_DIR"]) / "relay.txt") as f:  # a local folder beside the URI
        before = f.read() + ","
if args.fail:
    print(f"step {step} failing on purpose", flush=True)
    sys.exit(3)
out = Path(os.environ["RTJOB_RUN_DIR"])
out.mkdir(parents=True, exist_ok=True)
(out / "relay.txt").write_text(before + step)
print(f"step {step} wrote {before + step}", flush=True)
