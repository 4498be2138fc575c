"""The run index under real concurrency: writer processes (entries at each run's submit and end, compacting every
few runs) and compactor processes at once against moto's S3 server in its own process, whose conditional writes
are not atomic. Afterwards every run is listed exactly once, in its last state, and one more compaction leaves one
index object and no entry."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from rtjob.storage.index import compact, index_objects, read_index
from support.cli import REPO
from support.s3_server import process_server

from rtjob_contract import INDEX_DIR

WRITERS, RUNS, COMPACTORS = 4, 40, 2


def test_writers_and_compactors_at_once_lose_and_duplicate_nothing(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    with process_server() as (server, _proc):
        server.client().create_bucket(Bucket="index-load")
        env = {**os.environ, **server.env(), "AWS_EC2_METADATA_DISABLED": "true",
               "PYTHONPATH": os.pathsep.join([str(REPO / "tests"), os.environ.get("PYTHONPATH", "")])}
        for name, value in server.env().items():
            monkeypatch.setenv(name, value)
        root = "s3://index-load/team"
        stop = tmp_path / "stop"
        worker = [sys.executable, "-m", "support.index_worker", root]
        compactors = [subprocess.Popen([*worker, "compactor", str(stop)], env=env) for _ in range(COMPACTORS)]
        writers = [subprocess.Popen([*worker, f"w{n}", str(RUNS)], env=env) for n in range(WRITERS)]
        try:
            assert [proc.wait(timeout=120) for proc in writers] == [0] * WRITERS
        finally:
            stop.touch()
            codes = [proc.wait(timeout=60) for proc in compactors]
        assert codes == [0] * COMPACTORS

        objects = index_objects(root)
        snapshot = read_index(objects)
        rows = list(snapshot.runs())
        expected = sorted(f"w{n}-{i:03d}" for n in range(WRITERS) for i in range(RUNS))
        assert sorted(row["id"] for row in rows) == expected  # nothing lost, nothing twice
        assert {row["status"] for row in rows} == {"SUCCEEDED"}  # each run's end won over its submit
        assert not snapshot.problems
        compact(objects, snapshot)
        left = [item.rel for item in objects.list(INDEX_DIR)]
        assert len(left) == 1 and "/index/" in left[0], left
        assert sorted(row["id"] for row in read_index(objects).runs()) == expected
