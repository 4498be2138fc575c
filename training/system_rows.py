"""System rows of a node (rtjob_contract.SYSTEM_METRICS_FILE): CPU and memory from psutil, each GPU's utilisation
and memory from ``nvidia-smi`` (no GPU, or no nvidia-smi: ``gpus: []``).

Sources: ``sample()`` is called by a daemon thread in the training worker of local rank 0 on each node of a run
(``start_sampler``: it prints ``rtjob-event: system_row {...}`` every SYSTEM_SAMPLE_S), and by the run's companion
for the driver's node (rtjob.runside.live_rows, which imports this module as ``rtjob_training.system_rows``).
Torch-free; psutil and nvidia-smi only."""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from typing import Any

import rtjob_contract as contract

GPU_QUERY = ["--query-gpu=index,utilization.gpu,memory.used,memory.total", "--format=csv,noheader,nounits"]


def node_name() -> str:
    """The node a row is about: its host name (what the companion compares with its own)."""
    return socket.gethostname()


def gpus() -> list[dict[str, Any]]:
    """Every GPU nvidia-smi lists (all of the machine's: nvidia-smi ignores CUDA_VISIBLE_DEVICES); [] without it."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    try:
        out = subprocess.run([smi, *GPU_QUERY], capture_output=True, text=True, timeout=10, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    rows = []
    for line in out.splitlines():
        fields = [f.strip() for f in line.split(",")]
        if len(fields) == 4 and fields[0].isdigit():
            rows.append({"index": int(fields[0]), "util_percent": _number(fields[1]),
                         "mem_used_mb": _number(fields[2]), "mem_total_mb": _number(fields[3])})
    return rows


def _number(text: str) -> float | None:
    """A figure of nvidia-smi's (``[N/A]`` and the like: None)."""
    try:
        return float(text)
    except ValueError:
        return None


def sample() -> dict[str, Any]:
    """One system row of this node, now. CPU: the busy share since the last call of this process (the first call's
    is since psutil first looked, so a sampler calls it at a steady pace)."""
    import psutil

    memory = psutil.virtual_memory()
    return {contract.STEP_TIME: round(time.time(), 3), "node": node_name(),
            "cpu_percent": psutil.cpu_percent(interval=None),
            "mem_used_mb": round((memory.total - memory.available) / 2**20, 1),
            "mem_total_mb": round(memory.total / 2**20, 1), "gpus": gpus()}


_lock = threading.Lock()
_thread: threading.Thread | None = None
_stop = threading.Event()


def start_sampler(every_s: float = contract.SYSTEM_SAMPLE_S) -> None:
    """Once per process (until ``stop_sampler``): a daemon thread printing this node's system row every ``every_s``
    seconds as an event line (the first after ``every_s``, so its CPU figure covers a whole interval)."""
    global _thread
    with _lock:
        if _thread is not None and _thread.is_alive():
            return
        _stop.clear()
        _thread = threading.Thread(target=_sample_until_stopped, args=(every_s,), name="rtjob-system-rows",
                                   daemon=True)
        _thread.start()


def stop_sampler() -> None:
    """Ends the sampler thread (a process that trains more than once, or a test, leaves none behind)."""
    global _thread
    with _lock:
        _stop.set()
        thread, _thread = _thread, None
    if thread is not None:
        thread.join(timeout=5)


@contextlib.contextmanager
def sampling(every_s: float = contract.SYSTEM_SAMPLE_S) -> Iterator[None]:
    """The sampler for the body's duration."""
    start_sampler(every_s)
    try:
        yield
    finally:
        stop_sampler()


def _sample_until_stopped(every_s: float) -> None:
    from .events import write_row

    try:
        import psutil

        psutil.cpu_percent(interval=None)  # starts the CPU clock
    except ImportError:
        return  # no psutil: no system rows from this node (the run goes on)
    while not _stop.wait(every_s):
        try:
            write_row(contract.EVENT_SYSTEM_ROW, sample())
        except Exception:  # noqa: BLE001 - a sampler never disturbs the training it watches
            continue
