"""What a process on the cluster may import: a stock `ray[default]` image has the stdlib, `requests` and rtjob's
contract package, not the CLI's libraries.

The modules the run side loads are not a hand-kept list: they are every rtjob module reachable, by any import
(module level or inside a function, as import-linter's graph sees them), from the modules Ray runs (the companion,
the supervisor, and the Ray backend the supervisor reaches through the registry). All of them are imported in ONE
fresh interpreter in which importing any of the CLI's libraries fails, so a module-level import of one (direct or
through another rtjob module) is caught here, not on a cluster. The few modules the graph reaches only through a
function the run side never calls (CLI_ONLY) must be exactly the ones that fail, so the exception cannot go stale.
"""

from __future__ import annotations

import json
import subprocess
import sys

import grimp
from support.cli import REPO

import rtjob_contract as contract

CLI = REPO / "cli"

# What Ray runs: the companion wraps every entrypoint; the supervisor's process (its package's __main__), and the
# backend whose `cluster_jobs` its loop uses (the one every backend declares as its supervisor_backend).
ENTRY = ("rtjob.runside.companion", f"{contract.SUPERVISOR_MODULE}.__main__", "rtjob.backends.ray.backend",
         "rtjob.queue.keeper")  # a queue's keeper (backends/keepers.py starts it)
# Reached in the graph only through functions the run side never calls (a pull's destination resolving a project,
# a pipeline's planning): pydantic's job schema stays on the client.
CLI_ONLY = {"rtjob.jobspec.schema", "rtjob.jobspec.resolve", "rtjob.jobspec.tracking"}  # tracking: the schema's `tracking:`
# What a stock ray[default] image lacks (or what the CLI alone needs): blocked at import.
# mlflow too: the MLflow mirror talks to MLflow's REST API, so a job's image needs no mlflow (issue 46).
BLOCKED = ("click", "rich", "ruamel", "pydantic", "pathspec", "tomlkit", "croniter", "boto3", "mlflow")

_BLOCKER = """
import importlib, json, sys

class Blocked:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {blocked!r}:
            raise ImportError(f"{{name}} is not on the cluster")
        return None

sys.meta_path.insert(0, Blocked())
failed = {{}}
for module in {modules!r}:
    try:
        importlib.import_module(module)
    except ImportError as exc:
        failed[module] = str(exc)
print(json.dumps(failed))
"""


def run_side_modules() -> list[str]:
    graph = grimp.build_graph("rtjob", "rtjob_contract", exclude_type_checking_imports=True)
    found = set(ENTRY)
    for module in ENTRY:
        found |= graph.find_upstream_modules(module)
    return sorted(found)


def _import_blocked(modules: list[str]) -> subprocess.CompletedProcess[str]:
    code = _BLOCKER.format(blocked=set(BLOCKED), modules=modules)
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": f"{CLI}:{REPO}", "PATH": "/usr/bin:/bin"})


def test_every_module_the_run_side_loads_imports_without_the_clis_libraries() -> None:
    modules = run_side_modules()
    assert {"rtjob.core.lifecycle", "rtjob.core.retry_rule", "rtjob.storage.run_ports", "rtjob.runside.outcome",
            "rtjob.backends.ray.in_cluster", "rtjob.backends.ray.supervisor_jobs", "rtjob.backends.ray.run_info",
            "rtjob.runside.supervisor.loop", "rtjob.runside.supervisor.run_folder",
            "rtjob.runside.supervisor.pipeline_folder"} <= set(modules)
    proc = _import_blocked(modules)
    assert proc.returncode == 0, proc.stderr[-2000:]
    failed = json.loads(proc.stdout.strip().splitlines()[-1])
    assert set(failed) == CLI_ONLY, failed


def test_the_blocker_blocks() -> None:
    proc = _import_blocked(["click"])
    assert json.loads(proc.stdout)["click"] == "click is not on the cluster"
