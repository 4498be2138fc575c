"""This machine's NVIDIA GPUs, found without importing torch: ``nvidia-smi``'s list, narrowed to the
``CUDA_VISIBLE_DEVICES`` the user set (indices or ``GPU-…`` UUIDs; empty or ``-1``: none). The embedded cluster gives
each of its nodes its own slice of them (``slices``), so two nodes never share a GPU."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass

QUERY = ["--query-gpu=index,uuid,name,memory.total", "--format=csv,noheader,nounits"]


@dataclass(frozen=True)
class Gpu:
    index: str  # nvidia-smi's index: what CUDA_VISIBLE_DEVICES names for a raylet
    uuid: str
    name: str
    memory_mib: int

    def describe(self) -> str:
        return f"{self.index}: {self.name} ({self.memory_mib / 1024:.0f} GiB)"


def machine_gpus(env: Mapping[str, str] | None = None) -> tuple[Gpu, ...]:
    """The GPUs this machine lets rtjob use; () without nvidia-smi or when it fails (a machine without GPUs)."""
    env = os.environ if env is None else env
    return _visible(_listed(env.get("PATH", "")), env.get("CUDA_VISIBLE_DEVICES"))


@functools.cache
def _listed(path: str) -> tuple[Gpu, ...]:
    smi = shutil.which("nvidia-smi", path=path)
    if smi is None:
        return ()
    try:
        out = subprocess.run([smi, *QUERY], capture_output=True, text=True, timeout=15, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return ()
    gpus = []
    for line in out.splitlines():
        fields = [f.strip() for f in line.split(",")]
        if len(fields) == 4 and fields[0].isdigit():
            memory = fields[3].split()[0] if fields[3] else "0"
            gpus.append(Gpu(fields[0], fields[1], fields[2], int(memory) if memory.isdigit() else 0))
    return tuple(gpus)


def _visible(gpus: tuple[Gpu, ...], cuda_visible: str | None) -> tuple[Gpu, ...]:
    if cuda_visible is None:
        return gpus
    chosen = []
    for entry in (e.strip() for e in cuda_visible.split(",")):
        if not entry or entry == "-1":
            break  # CUDA stops at the first invalid entry
        match = next((g for g in gpus if entry in (g.index, g.uuid) or (len(entry) > 4 and g.uuid.startswith(entry))),
                     None)
        if match is None:
            break
        chosen.append(match)
    return tuple(chosen)


def inventory(gpus: tuple[Gpu, ...]) -> str:
    """How many GPUs this machine has and which, for a refusal: ``2 (0: NVIDIA A10G (22 GiB); 1: ...)``."""
    return f"{len(gpus)} ({'; '.join(g.describe() for g in gpus)})" if gpus else "0 (nvidia-smi found none)"


def slices(gpus: tuple[Gpu, ...], nodes: int, per_node: int) -> list[str]:
    """Each node's CUDA_VISIBLE_DEVICES (node 1 = the head): its own ``per_node`` GPUs, in order."""
    return [",".join(g.index for g in gpus[i * per_node:(i + 1) * per_node]) for i in range(nodes)]
