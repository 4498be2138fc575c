"""Shared fixtures: one real embedded Ray cluster per session (helpers live in tests/support/)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.cli import CAPTURED, PLANTED, base_env, rtjob
from support.s3_server import S3Server, threaded_server
from support.webhook import receiver  # noqa: F401 - a fixture for every test (a loopback webhook target)


@pytest.fixture(scope="session", autouse=True)
def private_user_config(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """In-process tests (and subprocesses that inherit os.environ) never see the developer's own rtjob contexts,
    nor write the developer's run ledger ($RTJOB_HOME/ledger.sqlite3)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_CONFIG_HOME", str(tmp_path_factory.mktemp("xdg-config")))
        patch.setenv("RTJOB_HOME", str(tmp_path_factory.mktemp("rtjob-home")))
        patch.delenv("RTJOB_CONTEXT", raising=False)
        yield


@pytest.fixture(autouse=True)
def fresh_redactor() -> Iterator[None]:
    """Each test starts with the process-wide redactor empty, as a new rtjob process does, and leaves it empty:
    a secret one test's in-process CLI learned from its (monkeypatched) environment never masks another's output."""
    from rtjob.core.redact import REDACTOR

    REDACTOR.clear()
    yield
    REDACTOR.clear()


@pytest.fixture(scope="session")
def cluster_env() -> Iterator[dict[str, str]]:
    """A real 2-node embedded Ray cluster (token auth on) in a private RTJOB_HOME; stopped at the end."""
    home = Path(tempfile.mkdtemp(prefix="rtjob-t-", dir="/tmp"))
    env = base_env(home)
    try:
        up = rtjob("local", "up", "--nodes", "2", env=env, timeout=240)
        assert up.returncode == 0, up.stderr
        yield env
    finally:
        rtjob("local", "down", env=env, timeout=120)
        shutil.rmtree(home, ignore_errors=True)


@pytest.fixture(scope="session")
def shared_s3() -> Iterator[S3Server]:
    """One real S3 server (moto, in a thread of this process) for the session's test modules, each in a bucket of
    its own (support.s3_server.bucket_fixture); stopped at the end."""
    with threaded_server() as server:
        yield server


@pytest.fixture(scope="session", autouse=True)
def no_planted_secret_in_any_output() -> Iterator[None]:
    """After the whole session (each xdist worker: its own share): grep every captured rtjob output for every
    secret the tests planted. A leak anywhere fails the run, even in a test that did not look for it."""
    yield
    leaks = sorted({secret for secret in PLANTED for out in CAPTURED if secret in out})
    assert not leaks, f"planted secrets found in rtjob output: {leaks}"
    assert not PLANTED or CAPTURED, "secrets were planted but no output was captured"


# The adoption test installs the wheel into a fresh venv, the Python 3.10 test its dependencies into a 3.10 venv
# (each about a minute of pip): start those as soon as the tests are collected, so they overlap the tests that run
# before them; the wheel's install is stopped (by pid) and removed at the end. Under pytest-xdist every worker
# collects every test: only the worker those files are scheduled to (BACKGROUND_WORKER, see the scheduler below)
# starts them.
ADOPTION_MODULE = "test_use_in_a_project.py"
PY310_MODULE = "test_python310.py"
BACKGROUND_MODULES = (ADOPTION_MODULE, PY310_MODULE)


def background_worker(workers: int) -> str:
    """The xdist worker that runs BACKGROUND_MODULES: the second one (the first takes the longest file first)."""
    return f"gw{min(1, workers - 1)}"


def _runs_background_modules(config: pytest.Config) -> bool:
    workerinput = getattr(config, "workerinput", None)
    if workerinput is None:  # no xdist: this process runs everything
        return True
    return bool(workerinput["workerid"] == background_worker(int(workerinput["workercount"])))


def pytest_collection_finish(session: pytest.Session) -> None:
    if session.config.option.collectonly:  # `pytest --collect-only` lists the tests: nothing will run them
        return
    if not _runs_background_modules(session.config):
        return
    modules = {item.path.name for item in session.items}
    if ADOPTION_MODULE in modules:
        from support import tool_venv

        tool_venv.start()
    if PY310_MODULE in modules:
        from support import py310

        py310.prepare()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    from support import py310, tool_venv

    tool_venv.stop()
    py310.finish()


# Under pytest-xdist, each worker's busy time (setup, call and teardown of its tests) at the end of the report:
# whether the workers ended about together, and what E2E_SECONDS should say.
WORKER_SECONDS: dict[str, float] = {}
WORKER_TESTS: dict[str, int] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    node = getattr(report, "node", None)  # set by xdist on the controller's copy of a worker's report
    if node is None:
        return
    worker = node.gateway.id
    WORKER_SECONDS[worker] = WORKER_SECONDS.get(worker, 0.0) + report.duration
    if report.when == "call":
        WORKER_TESTS[worker] = WORKER_TESTS.get(worker, 0) + 1


def pytest_terminal_summary(terminalreporter: Any) -> None:
    for worker in sorted(WORKER_SECONDS):
        terminalreporter.write_line(f"{worker}: {WORKER_TESTS.get(worker, 0)} tests, "
                                    f"{WORKER_SECONDS[worker]:.0f} s of setup, call and teardown")


# pytest-xdist, --dist loadfile: a file is one unit of work (its module fixtures run once), handed to whichever
# worker is free. The files whose tests import torch (and transformers, diffusers; all in the e2e tier, so the unit
# tier never imports them) go to one worker as one unit, so that only one worker spends the ~4 s of those imports.
TORCH_FILES = {"test_checkpoint_restore.py", "test_diffusion.py", "test_hf_sft.py", "test_precision.py",
               "test_synthetic_cache.py", "test_voice_audio.py", "test_voice_eval.py"}
# Files that look at the same run of the worker's session cluster (support/shared_runs.py) go as one unit too: on
# two workers each would submit it (the ddp-resnet run is ~150 s of a loaded CI).
SHARED_RUN_FILES = {"test_training.py": "ddp-resnet-run", "test_ddp_resnet_job.py": "ddp-resnet-run",
                    "test_pipeline.py": "relay-run", "test_ui_live_cluster.py": "relay-run"}
# The e2e tier (each worker with its own session cluster and S3 servers): the longest files go out first, so that
# the last units handed out are short ones and both workers end about together. Seconds of each file's tests
# (setup, call, teardown), measured in one 2-worker e2e run on a busy 2-core machine (2026-11-27; relative sizes are
# what count; a file not named here counts as short).
E2E_SECONDS = {
    "test_strategies_vit.py": 400, "test_strategies_resnet.py": 357, "test_voice_clone.py": 310,
    "test_fault_tolerance.py": 240, "test_sd_pretrain.py": 213, "test_cluster_safety.py": 207,
    "test_pipeline_supervisor.py": 167, "test_s3_job.py": 154, "test_training.py": 143, "test_supervisor.py": 131,
    "test_run_control.py": 119, "test_hf_sft_job.py": 100, "test_faults.py": 93, "test_foreign_script.py": 72,
    "test_queue_keeper_restart.py": 90, "test_queue_autoscaler.py": 60, "test_anyscale_pipeline.py": 55,
    "test_queue_keeper.py": 55,
    "test_plain_raytrain.py": 46, "test_run_side.py": 58, "test_companion_storage.py": 44,
    "test_run_history.py": 38, "test_voice_stages.py": 31, "test_pipeline.py": 29, "test_storage_pull.py": 26,
    "ddp-resnet-run": 330, "relay-run": 60,  # SHARED_RUN_FILES' units (2026-12-03 CI: 156 s + 185 s apart)
}
# A worker takes its pinned BACKGROUND_MODULES once it has had this many other units: their installs, started at
# collection, are done by then.
BACKGROUND_AFTER_UNITS = 3


def _file_of(scope: str) -> str:
    return scope.rsplit("/", 1)[-1]


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class FileUnits(LoadFileScheduling):
        def __init__(self, config: pytest.Config, log: Any = None) -> None:
            super().__init__(config, log)
            self.units_given: dict[str, int] = {}

        def _split_scope(self, nodeid: str) -> str:
            scope: str = super()._split_scope(nodeid)
            name = _file_of(scope)
            return "torch-files" if name in TORCH_FILES else SHARED_RUN_FILES.get(name, scope)

        def _pick(self, node: Any) -> str | None:
            """The next unit for ``node``: its pinned background files once it has had BACKGROUND_AFTER_UNITS
            others (or nothing else is left), else the longest unpinned one. None: nothing for this node."""
            me = node.gateway.id
            owner = background_worker(self.numnodes)
            owner_alive = any(n.gateway.id == owner for n in self.nodes)
            pinned = [s for s in self.workqueue if _file_of(s) in BACKGROUND_MODULES and owner_alive]
            free = [s for s in self.workqueue if s not in pinned]
            mine = pinned if me == owner else []
            if mine and (not free or self.units_given.get(me, 0) >= BACKGROUND_AFTER_UNITS):
                return mine[0]
            if free:
                return max(free, key=lambda s: E2E_SECONDS.get(_file_of(s), 0))  # ties: collection order
            return mine[0] if mine else None

        def _assign_work_unit(self, node: Any) -> None:
            scope = self._pick(node)
            if scope is None:
                node.shutdown()  # the rest is pinned to the other worker
                return
            work_unit = self.workqueue.pop(scope)
            self.units_given[node.gateway.id] = self.units_given.get(node.gateway.id, 0) + 1
            self.assigned_work.setdefault(node, {})[scope] = work_unit
            collection = self.registered_collections[node]
            node.send_runtest_some([collection.index(nodeid) for nodeid, done in work_unit.items() if not done])

        def _reschedule(self, node: Any) -> None:
            if node.shutting_down:
                return
            if self._pick(node) is None:
                node.shutdown()
                return
            if self._pending_of(self.assigned_work[node]) > 2:
                return
            self._assign_work_unit(node)

    return FileUnits(config, log)
