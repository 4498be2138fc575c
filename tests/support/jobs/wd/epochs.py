"""Test job: short "epochs", each checkpointed straight into the run's storage (RTJOB_STORAGE_PATH/RTJOB_RUN_NAME,
which a retry of the run shares), resuming after the latest complete one; prints "epoch N trained" once per epoch
it trains. --consume (a later pipeline step): reads the checkpoints of the step before with open() from the local
folder rtjob gives it (RTJOB_INPUT_DIR) and writes which epochs it found into its own run folder (consumed.txt).
EPOCHS_TOKEN (a secret a test gives the step): the hash of the value this attempt saw is printed ("token ...")."""

import argparse
import hashlib
import json
import os
import time

import pyarrow.fs as pafs

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--interval", type=float, default=2.0)
parser.add_argument("--consume", action="store_true")
args = parser.parse_args()


def folder(uri: str) -> tuple[pafs.FileSystem, str]:
    if "://" in uri:
        return pafs.FileSystem.from_uri(uri)
    return pafs.LocalFileSystem(), os.path.abspath(uri)


def epochs_in(uri: str) -> list[int]:
    fs, base = folder(uri)
    found = fs.get_file_info(pafs.FileSelector(base, allow_not_found=True, recursive=True))
    return sorted(int(f.path.split("checkpoint_epoch_")[1][:4]) for f in found
                  if f.path.endswith("/state.json") and "checkpoint_epoch_" in f.path)


if args.consume:
    inputs = os.environ["RTJOB_INPUT_DIR"]  # a local folder, whatever the storage
    got = []
    for name in sorted(os.listdir(inputs)):
        if name.startswith("checkpoint_epoch_") and os.path.exists(os.path.join(inputs, name, "state.json")):
            with open(os.path.join(inputs, name, "state.json")) as f:
                got.append(json.load(f)["epoch"])
    os.makedirs(os.environ["RTJOB_RUN_DIR"], exist_ok=True)
    with open(os.path.join(os.environ["RTJOB_RUN_DIR"], "consumed.txt"), "w") as out:
        out.write(",".join(map(str, got)))
    print(f"consumed epochs {got} from {inputs}", flush=True)
    raise SystemExit(0)

run = f"{os.environ['RTJOB_STORAGE_PATH'].rstrip('/')}/{os.environ['RTJOB_RUN_NAME']}"
done = epochs_in(run)
start = (done[-1] if done else 0) + 1
print(f"starting at epoch {start}", flush=True)
if os.environ.get("EPOCHS_TOKEN"):  # a `secrets:` entry the test gave the step: which value it saw, as a hash
    print("token " + hashlib.sha256(os.environ["EPOCHS_TOKEN"].encode()).hexdigest()[:16], flush=True)
fs, base = folder(run)
for epoch in range(start, args.epochs + 1):
    time.sleep(args.interval)
    fs.create_dir(f"{base}/checkpoint_epoch_{epoch:04d}")
    print(f"epoch {epoch} trained", flush=True)
    with fs.open_output_stream(f"{base}/checkpoint_epoch_{epoch:04d}/state.json") as out:  # last: complete
        out.write(json.dumps({"epoch": epoch}).encode())
print("training done", flush=True)
