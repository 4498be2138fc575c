"""Runs as real runs leave them, for `rtjob ui`'s tests and benchmark: each run's record, log parts, metrics history,
samples and checkpoints written into a storage folder (the record planted with support/planted.plant_record,
Objects.put, the index entry), and the record remembered in the ledger as the submitting client does."""

from __future__ import annotations

import asyncio
import json
import struct
import zlib
from pathlib import Path
from typing import Any

from rtjob.core.record import RunRecord
from rtjob.storage.index import write_entry
from rtjob.storage.opening import objects_for

import rtjob_contract as contract
from support.planted import plant_record

from .cli import record as record_output

UI_PORT = 8765  # the port an app under test believes it serves on (its Host check)


def png(width: int, height: int, seed: int) -> bytes:
    """A small RGB PNG (a gradient that depends on ``seed``)."""
    raw = b"".join(b"\x00" + bytes((x * 16 + seed * 40) % 256 if c == 0 else (y * 16) % 256 if c == 1 else
                                   (seed * 70) % 256 for x in range(width) for c in range(3))
                   for y in range(height))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")


def wav(seconds: float = 0.25, rate: int = 8000) -> bytes:
    """A short 440 Hz tone as a 16-bit mono WAV (what a voice run's decoded samples are)."""
    import io
    import math
    import wave

    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(b"".join(struct.pack("<h", int(8000 * math.sin(2 * math.pi * 440 * n / rate)))
                               for n in range(int(seconds * rate))))
    return out.getvalue()


def metrics(epochs: int, scale: float = 1.0) -> list[dict[str, Any]]:
    return [{"epoch": e, "train_loss": round(scale * 2.0 / e, 4), "val_loss": round(scale * 2.2 / e, 4),
             "val_accuracy": round(1 - 0.5 / e, 4), "train_samples_per_s": 100.0 + 5 * e, "epoch_time_s": 1.5}
            for e in range(1, epochs + 1)]


def write_run(root: Path | str, run_id: str, job: str, *, status: str = "SUCCEEDED", user: str = "alice",
              epochs: int = 3, log_lines: list[str] | None = None, request: dict[str, Any] | None = None,
              samples: dict[str, bytes] | None = None, checkpoints: int = 0, start: str = "2026-11-20T10:00:00+00:00",
              steps: list[dict[str, Any]] | None = None, pipeline: str | None = None, raw_metrics: bytes | None = None,
              backend: str = "local", archived: bool | None = None, scale: float = 1.0,
              step_rows: list[dict[str, Any]] | None = None, system_rows: list[dict[str, Any]] | None = None,
              entry: dict[str, Any] | None = None, document: dict[str, Any] | None = None) -> RunRecord:
    """One run's folder ``root/job/run_id`` as a run leaves it, and its index entry; returns its record. ``root``: a
    folder, or an s3:// prefix (the environment's AWS_ENDPOINT_URL and keys reach it)."""
    if isinstance(root, str) and root.startswith("s3://"):
        uri = f"{root.rstrip('/')}/{job}/{run_id}"
    else:
        run_dir = Path(root) / job / run_id
        run_dir.mkdir(parents=True, exist_ok=True)
        uri = str(run_dir)
    ended = status in ("SUCCEEDED", "FAILED", "STOPPED")
    record = RunRecord(
        id=run_id, job=job, backend=backend, status=status, submitted_at=start, start_time=start,
        end_time=start.replace("10:00", "10:05") if ended else None, storage_uri=uri, user=user, host="laptop",
        git={"commit": "0123456789abcdef0123456789abcdef01234567", "dirty": run_id.endswith("dirty"), "branch": "main"},
        shape={"nodes": 1, "workers": 2, "compute_config": "cpu-small"},
        spec={"job": job, **({"document": document} if document else {})},
        request=request or {"entrypoint": f"python {job}.py --epochs {epochs}", "runtime_env": {"env_vars": {
            "RTJOB_JOB_NAME": job, "LR": "0.01"}}},
        cost={"estimated_usd": 0.0123} if ended else None, attempts=[{"id": run_id, "attempt": 1, "status": status,
                                                                     "exit_code": 0 if status == "SUCCEEDED" else None,
                                                                     "retry_reason": None}],
        metrics={"last": metrics(epochs, scale)[-1]} if ended and epochs and raw_metrics is None else None,
        archived=ended if archived is None else archived, carried_by="companion", completed_by="companion" if ended else None,
        timeline={"submitted": start, "accepted": start, "driver_started": start, "first_log_line": start},
        steps=steps or [], pipeline=pipeline,
    )
    plant_record(uri, record, None)
    with objects_for(uri) as objects:
        text = "".join(line + "\n" for line in (log_lines or [f"epoch {e} done" for e in range(1, epochs + 1)]))
        objects.put(f"{contract.RUN_LOGS_DIR}/{run_id}/{contract.LOG_PART_PREFIX}000000", text.encode())
        if raw_metrics is not None:
            objects.put(contract.METRICS_FILE, raw_metrics)
        elif epochs:
            objects.put(contract.METRICS_FILE, json.dumps(metrics(epochs, scale)).encode())
        for name, rows in ((contract.STEP_METRICS_FILE, step_rows), (contract.SYSTEM_METRICS_FILE, system_rows)):
            if rows is not None:
                objects.put(name, jsonl(rows))
        for name, data in (samples or {}).items():
            objects.put(f"{contract.SAMPLES_DIR}/{name}", data)
        for e in range(1, checkpoints + 1):
            ckpt = contract.checkpoint_dir_name(e)
            objects.put(f"{ckpt}/{contract.MODEL_FILE}", b"weights" * 10)
            objects.put(f"{ckpt}/{contract.STATE_FILE}", json.dumps({"epoch": e}).encode())
    write_entry(str(root), None, record)
    if entry:
        _entry_with(str(root), record, entry)
    return record


def jsonl(rows: list[dict[str, Any]]) -> bytes:
    return "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows).encode()


def _entry_with(root: str, record: RunRecord, fields: dict[str, Any]) -> None:
    """A newer index entry for ``record`` carrying ``fields`` besides today's (as the index writes them now)."""
    import datetime as dt
    import os

    from rtjob.core import clock
    from rtjob.storage import index

    stamp = index.index_stamp(clock.now() + dt.timedelta(seconds=1))
    key = index.index_entry_name(stamp, record.id, os.urandom(6).hex())
    data = json.dumps({"schema": contract.INDEX_SCHEMA, **index.entry_of(record), **fields}, ensure_ascii=False)
    with index.index_objects(root, None) as objects:
        objects.put(key, data.encode(), if_absent=True)


def append_rows(record: RunRecord, name: str, rows: list[dict[str, Any]]) -> None:
    """More live rows appended to the run's ``name`` (metrics.jsonl, system.jsonl), as the run's sync uploads them."""
    assert record.storage_uri is not None
    with objects_for(record.storage_uri) as objects:
        got = objects.get(name, 1 << 26)
        objects.put(name, (got.data if got else b"") + jsonl(rows))


def step_rows(first: int, last: int, start: float = 1_790_000_000.0) -> list[dict[str, Any]]:
    """Step rows ``first``..``last`` (every 10th step) as an entrypoint writes them: loss, lr, samples/s."""
    return [{"step": s, "time": start + s, "epoch": 1 + s // 100, "loss": round(2.5 / (1 + s / 50), 4),
             "lr": 0.001 * (1 - s / 1000), "samples_per_s": 400.0 + (s % 30)} for s in range(first, last + 1, 10)]


def system_rows(count: int, start: float = 1_790_000_000.0, gpus: int = 0) -> list[dict[str, Any]]:
    """System rows every 10 s of one node (CPU only unless ``gpus``)."""
    return [{"time": start + 10 * n, "node": "127.0.0.1", "cpu_percent": 35.0 + 10 * (n % 4),
             "mem_used_mb": 6000.0 + 50 * n, "mem_total_mb": 24000.0,
             "gpus": [{"index": g, "util_percent": 80.0 + n % 10, "mem_used_mb": 9000.0 + 10 * n,
                       "mem_total_mb": 81559.0} for g in range(gpus)]} for n in range(count)]


def append_log_part(record: RunRecord, index: int, lines: list[str]) -> None:
    """Another log part, as the run's companion writes one while the run goes."""
    assert record.storage_uri is not None
    with objects_for(record.storage_uri) as objects:
        objects.put(f"{contract.RUN_LOGS_DIR}/{record.id}/{contract.LOG_PART_PREFIX}{index:06d}",
                    "".join(line + "\n" for line in lines).encode())


def call(app: Any, path: str, *, method: str = "GET", host: str = f"127.0.0.1:{UI_PORT}",
         headers: dict[str, str] | None = None, body: bytes = b"") -> tuple[int, dict[str, str], str]:
    """One request to ``rtjob ui``'s ASGI app, called directly (no server, no socket): its status, headers and body
    (recorded for the suite's secret check)."""
    path, _, query = path.partition("?")
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method, "scheme": "http",
             "path": path, "raw_path": path.encode(), "query_string": query.encode(), "root_path": "",
             "headers": [(b"host", host.encode())] + [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()],
             "client": ("127.0.0.1", 5000), "server": ("127.0.0.1", UI_PORT)}
    sent: list[dict[str, Any]] = []
    fed = False

    async def receive() -> dict[str, Any]:
        nonlocal fed
        if not fed:
            fed = True
            return {"type": "http.request", "body": body, "more_body": False}
        await asyncio.sleep(3600)
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    asyncio.run(app(scope, receive, send))
    start = next(m for m in sent if m["type"] == "http.response.start")
    text = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body").decode(errors="replace")
    record_output(text)
    return start["status"], {k.decode(): v.decode() for k, v in start["headers"]}, text


def seed_run(server: Any, root: str, run_id: str) -> Any:
    """One run in ``server``'s bucket under ``root``, written with rtjob's own writers (its record, log and index
    entry), the server's AWS settings in the environment only while it is written. Returns ``server``."""
    import pytest

    from .s3_server import in_env

    with pytest.MonkeyPatch.context() as patch:
        in_env(server, patch)
        write_run(root, run_id, "train", log_lines=["hello from the run"])
    return server
