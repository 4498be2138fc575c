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
# before them; the wheel's install is stopped (by pid) and removed at the end.
ADOPTION_MODULE = "test_use_in_a_project.py"
PY310_MODULE = "test_python310.py"


def pytest_collection_finish(session: pytest.Session) -> None:
    if session.config.option.collectonly:  # `pytest --collect-only` lists the tests: nothing will run them
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


# pytest-xdist, --dist loadfile (make test-unit): the files whose tests import torch (and transformers, diffusers)
# go to one worker as one unit, so that only one worker spends the ~4 s of those imports.
TORCH_FILES = {"test_checkpoint_restore.py", "test_diffusion.py", "test_hf_sft.py", "test_precision.py",
               "test_synthetic_cache.py", "test_voice_audio.py", "test_voice_eval.py"}


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class TorchFilesTogether(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            scope: str = super()._split_scope(nodeid)
            return "torch-files" if scope.rsplit("/", 1)[-1] in TORCH_FILES else scope

    return TorchFilesTogether(config, log)
