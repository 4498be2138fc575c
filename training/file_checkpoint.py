"""Checkpoints for entrypoints that run without Ray Train (torchrun): same layout, no Ray.

The folder layout is the one Ray Train writes for ``training.checkpoint``
(``<storage>/<run>/checkpoint_epoch_NNNN/{model.pt, optimizer.pt, state.json, metrics.json}``),
so ``rtjob pull`` / ``rtjob results`` and the tests read either the same way. Storage is a
local path or a URI that pyarrow understands (``s3://bucket/prefix``), like Ray's storage_path.

Only rank 0 writes (DDP replicas are identical). ``state.json`` is written last: a folder
without it is an interrupted write and is ignored on resume, so a run killed mid-save resumes
from the previous complete epoch.
"""

from __future__ import annotations

import io
import json
import os
import tempfile
from typing import Any

import torch
from torch import nn

from rtjob_contract import EPOCH_CHECKPOINT_PREFIX

from . import checkpoint

_PREFIX = EPOCH_CHECKPOINT_PREFIX


class RunStorage:
    """``<storage_path>/<run_name>`` on a local disk or an object store (via pyarrow.fs)."""

    def __init__(self, storage_path: str, run_name: str) -> None:
        import pyarrow.fs as pafs

        if "://" in storage_path:
            self.fs, base = pafs.FileSystem.from_uri(storage_path)
        else:
            self.fs, base = pafs.LocalFileSystem(), os.path.abspath(os.path.expanduser(storage_path))
        self.run_dir = f"{base.rstrip('/')}/{run_name}"
        self.display = f"{storage_path.rstrip('/')}/{run_name}"

    def _folders(self) -> list[str]:
        import pyarrow.fs as pafs

        try:
            infos = self.fs.get_file_info(pafs.FileSelector(self.run_dir, allow_not_found=True))
        except FileNotFoundError:
            return []
        names = [i.base_name for i in infos if i.type == pafs.FileType.Directory]
        return sorted(n for n in names if n.startswith(_PREFIX))

    def complete_checkpoints(self) -> list[str]:
        """Checkpoint folder names, oldest first, that were completely written."""
        import pyarrow.fs as pafs

        done = []
        for name in self._folders():
            info = self.fs.get_file_info(f"{self.run_dir}/{name}/{checkpoint.STATE_FILE}")
            if info.type == pafs.FileType.File:
                done.append(name)
        return done

    def write(self, name: str, files: dict[str, bytes]) -> str:
        """Write ``files`` into folder ``name``; ``state.json`` goes last (the completeness mark)."""
        folder = f"{self.run_dir}/{name}"
        self.fs.create_dir(folder, recursive=True)
        ordered = sorted(files, key=lambda f: f == checkpoint.STATE_FILE)
        for filename in ordered:
            with self.fs.open_output_stream(f"{folder}/{filename}") as out:
                out.write(files[filename])
        return f"{self.display}/{name}"

    def read(self, name: str, filename: str) -> bytes:
        with self.fs.open_input_stream(f"{self.run_dir}/{name}/{filename}") as f:
            return bytes(f.read())

    def has(self, name: str, filename: str) -> bool:
        import pyarrow.fs as pafs

        return bool(self.fs.get_file_info(f"{self.run_dir}/{name}/{filename}").type == pafs.FileType.File)

    def delete(self, name: str) -> None:
        self.fs.delete_dir(f"{self.run_dir}/{name}")


def _torch_bytes(obj: Any) -> bytes:
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return buffer.getvalue()


def save(
    storage: RunStorage,
    *,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    epoch: int,
    history: list[dict],
    world_size: int,
    keep: int,
    scaler: torch.amp.GradScaler | None = None,
) -> str:
    """Rank 0 only: write the checkpoint of ``epoch`` (with fp16, the GradScaler's state too) and keep the newest
    ``keep``. Returns its path."""
    files = {
        checkpoint.MODEL_FILE: _torch_bytes(checkpoint.unwrap(model).state_dict()),
        checkpoint.OPTIMIZER_FILE: _torch_bytes(optimizer.state_dict()),
        checkpoint.METRICS_FILE: json.dumps(history, indent=1).encode(),
        checkpoint.STATE_FILE: json.dumps(
            {"epoch": epoch, "written_by_rank": 0, "world_size": world_size}, indent=1
        ).encode(),
    }
    if scaler is not None:
        files[checkpoint.SCALER_FILE] = _torch_bytes(scaler.state_dict())
    path = storage.write(checkpoint.checkpoint_dir_name(epoch), files)
    for old in storage.complete_checkpoints()[:-keep]:
        storage.delete(old)
    # Printed by whichever process wrote: the log shows that only rank 0 ever does.
    print(f"CHECKPOINT: epoch {epoch} written by rank {os.environ.get('RANK', '0')} to {path}", flush=True)
    return path


def restore(
    storage: RunStorage, model: nn.Module, optimizer: torch.optim.Optimizer, device: torch.device,
    scaler: torch.amp.GradScaler | None = None,
) -> tuple[int, list[dict], str | None]:
    """Load the newest complete checkpoint into ``model``/``optimizer`` (and ``scaler``, where the checkpoint has
    its state) on every rank.

    Returns ``(last_epoch, history, path)``; ``(0, [], None)`` for a fresh run.
    """
    names = storage.complete_checkpoints()
    if not names:
        return 0, [], None
    name = names[-1]
    with tempfile.TemporaryDirectory(prefix="rtjob-restore-") as tmp:
        for filename in (checkpoint.MODEL_FILE, checkpoint.OPTIMIZER_FILE):
            with open(os.path.join(tmp, filename), "wb") as f:
                f.write(storage.read(name, filename))
        checkpoint.unwrap(model).load_state_dict(
            torch.load(os.path.join(tmp, checkpoint.MODEL_FILE), map_location=device)
        )
        optimizer.load_state_dict(torch.load(os.path.join(tmp, checkpoint.OPTIMIZER_FILE), map_location=device))
    if scaler is not None and storage.has(name, checkpoint.SCALER_FILE):
        scaler.load_state_dict(torch.load(io.BytesIO(storage.read(name, checkpoint.SCALER_FILE)), weights_only=True))
    state = json.loads(storage.read(name, checkpoint.STATE_FILE))
    history = json.loads(storage.read(name, checkpoint.METRICS_FILE))
    return int(state["epoch"]), history, f"{storage.display}/{name}"
