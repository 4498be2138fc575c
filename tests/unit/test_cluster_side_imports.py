"""What a process on the cluster may import: a stock `ray[default]` image has the stdlib, `requests` and rtjob's
contract package, not the CLI's libraries. Each module in CLUSTER_SIDE is imported in a fresh interpreter in which
importing any of those libraries fails, so a module-level import of one (direct or through another rtjob module)
is caught here, not on a cluster."""

from __future__ import annotations

import subprocess
import sys

import pytest
from support.cli import REPO

CLI = REPO / "cli"

# The modules a process on the cluster imports: the REST client, the retry rule, the record and its writers, the
# redactor, and the run lifecycle core of runs/ (submit and record, follow to the end, archive, memory, events).
CLUSTER_SIDE = (
    "rtjob.backends.ray.client",  # the Jobs API's REST client
    "rtjob.backends.ray.retries",  # the retry rule
    "rtjob.core.record",  # the run record
    "rtjob.storage.records",  # the record and log writers
    "rtjob.storage.index",  # the run index entry a run's end writes (write_run_entry)
    "rtjob.core.redact",
    "rtjob.runs.events",  # what the use cases report
    "rtjob.runs.submission",  # submit and record; follow to the end (Ctrl-C, retries, the archive)
    "rtjob.runs.follow",
    "rtjob.runs.patience",
    "rtjob.runs.stuck_watch",
    "rtjob.runs.archive",  # a run seen ended: its logs and final state saved
    "rtjob.runs.memory",  # the ledger and the run's storage
    "rtjob.runs.places",  # where a run's record, log and folder live
    "rtjob.runs.records",
    "rtjob.runs.steps",  # a pipeline's step loop
    "rtjob.runs.notify",  # a run's outcome to its notify targets
    "rtjob.storage.objects",  # a run's folder as objects with conditional writes
    "rtjob.storage.opening",  # objects_for: a location's objects (and its Store)
    "rtjob.storage.objects_s3",  # ... on S3: boto3, else stdlib SigV4, else pyarrow, imported when chosen
    "rtjob.runside.sync",  # RTJOB_RUN_DIR copied to RTJOB_RUN_URI
    "rtjob.runside.companion",  # the run's companion and its pieces
    "rtjob.runside.child",
    "rtjob.runside.logparts",
    "rtjob.runside.outcome",
    "rtjob.runside.supervisor",  # a run's supervisor: its retries carried on the cluster
    "rtjob.backends.ray.supervisor",
    "rtjob.backends.ray.pipeline_supervisor",  # a pipeline's steps carried on the cluster
    "rtjob.runside.carrier_side",
    "rtjob.runside.pipeline_side",
    "rtjob.runs.carried",
    "rtjob.backends.ray.backend",  # what the supervisor reaches through the registry (RayJobsBackend.carry)
)
# What a stock ray[default] image lacks (or what the CLI alone needs): blocked at import.
BLOCKED = ("click", "rich", "ruamel", "pydantic", "pathspec", "tomlkit", "croniter", "boto3")

_BLOCKER = """
import sys

class Blocked:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {blocked!r}:
            raise ImportError(f"{{name}} is not on the cluster")
        return None

sys.meta_path.insert(0, Blocked())
import {module}
"""


@pytest.mark.parametrize("module", CLUSTER_SIDE)
def test_a_cluster_side_module_imports_without_the_clis_libraries(module: str) -> None:
    code = _BLOCKER.format(blocked=set(BLOCKED), module=module)
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": f"{CLI}:{REPO}", "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_the_blocker_blocks() -> None:
    proc = subprocess.run([sys.executable, "-c", _BLOCKER.format(blocked=set(BLOCKED), module="click")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and "click is not on the cluster" in proc.stderr
