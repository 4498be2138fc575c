"""W&B's offline runs read back for the W&B mirror's test: the SDK (.venv-wandb, `make wandb-sdk`) writes each run
as a transaction log, ``offline-run-*/run-ID.wandb``: W&B's header (``:W&B``, a magic, a version) then LevelDB's
log format (32 KiB blocks of records: a CRC, a length, a FULL/FIRST/MIDDLE/LAST type), each record one of W&B's
own protobuf ``Record`` messages. The records are parsed by W&B's own schema (wandb.proto), in .venv-wandb's
Python: nothing of W&B's is imitated, and no W&B server is involved (offline mode needs none)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from .cli import REPO

PYTHON = REPO / ".venv-wandb" / "bin" / "python"

READER = r'''
import json, struct, sys
from google.protobuf.json_format import MessageToDict
from wandb.proto import wandb_internal_pb2 as pb
BLOCK = 32768
data = open(sys.argv[1], "rb").read()
assert data[:4] == b":W&B", data[:4]
pos, pending, out = 7, b"", []
while pos + 7 <= len(data):
    left = BLOCK - pos % BLOCK
    if left < 7:
        pos += left
        continue
    _crc, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
    if kind == 0:
        pos += left
        continue
    chunk, pos = data[pos + 7:pos + 7 + length], pos + 7 + length
    if kind in (1, 2):
        pending = chunk
    else:
        pending += chunk
    if kind in (1, 4):
        record = pb.Record()
        record.ParseFromString(pending)
        out.append({"type": record.WhichOneof("record_type"), **MessageToDict(record)})
print(json.dumps(out))
'''


def available() -> bool:
    return PYTHON.exists()


def records(run_file: Path) -> list[dict[str, Any]]:
    """The run's records, in order, each as W&B's protobuf message reads as a dict (its ``type`` added)."""
    done = subprocess.run([str(PYTHON), "-c", READER, str(run_file)], capture_output=True, text=True, timeout=60,
                          check=True)
    return list(json.loads(done.stdout))


def history(records_: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each history row (one per step W&B committed) as {key: value}."""
    rows = []
    for record in records_:
        if record["type"] == "history":
            rows.append({"/".join(item.get("nestedKey") or [item.get("key")]): json.loads(item["valueJson"])
                         for item in record["history"]["item"]})
    return rows
