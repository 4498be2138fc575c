"""One process of the run-index concurrency test (tests/e2e/test_run_index_processes.py): a writer submits runs
(an entry each at submit and at the end, as runs/memory.py writes them) and compacts every few runs; a compactor
compacts until the stop file appears. Run as ``python -m support.index_worker ROOT ROLE N`` with the S3 server in
the environment."""

from __future__ import annotations

import os
import sys

from rtjob.core.record import RunRecord
from rtjob.storage.index import compact, index_objects, read_index, write_entry


def writer(root: str, name: str, runs: int) -> None:
    objects = index_objects(root)
    for i in range(runs):
        record = RunRecord(id=f"{name}-{i:03d}", job="load", backend="ray", status="RUNNING",
                           submitted_at=f"2026-11-20T10:{i % 60:02d}:00+00:00", user=name)
        write_entry(root, None, record, objects=objects)
        record.status = "SUCCEEDED"
        write_entry(root, None, record, objects=objects)
        if i % 7 == 6:
            compact(objects, read_index(objects))


def compactor(root: str, stop: str) -> None:
    objects = index_objects(root)
    while not os.path.exists(stop):
        compact(objects, read_index(objects))


if __name__ == "__main__":
    root, role, arg = sys.argv[1:4]
    if role == "compactor":
        compactor(root, arg)
    else:
        writer(root, role, int(arg))
