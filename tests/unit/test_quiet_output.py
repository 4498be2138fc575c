"""Ray's client, as rtjob's submit and uploads use it, says nothing below an error on the user's terminal (its
packaging INFO: "Ignoring upload to cluster ...", "Package gcs://... already exists, skipping upload"), unless
`rtjob --verbose` (or RTJOB_VERBOSE=1). Loggers are process-wide: each test puts back the levels it found."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator

import pytest
from rtjob.backends.ray.client import quiet_ray_client
from rtjob.core.verbosity import VERBOSE_ENV
from support.cli import in_process

PACKAGING = "ray._private.runtime_env.packaging"  # the logger of Ray's "Ignoring upload to cluster" lines


@pytest.fixture(autouse=True)
def levels(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv(VERBOSE_ENV, raising=False)
    names = ("ray", "ray.dashboard.modules.dashboard_sdk", PACKAGING)
    before = {name: logging.getLogger(name).level for name in names}
    yield
    for name, level in before.items():
        logging.getLogger(name).setLevel(level)


def test_rays_packaging_info_is_not_shown() -> None:
    logging.getLogger(PACKAGING).setLevel(logging.INFO)
    quiet_ray_client()
    assert not logging.getLogger(PACKAGING).isEnabledFor(logging.INFO)
    assert logging.getLogger(PACKAGING).isEnabledFor(logging.ERROR)


def test_verbose_leaves_rays_logging_as_ray_sets_it(monkeypatch: pytest.MonkeyPatch) -> None:
    logging.getLogger(PACKAGING).setLevel(logging.INFO)
    monkeypatch.setenv(VERBOSE_ENV, "1")
    quiet_ray_client()
    assert logging.getLogger(PACKAGING).isEnabledFor(logging.INFO)


def test_the_verbose_flag_holds_for_its_command_only(capsys: pytest.CaptureFixture[str],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """`rtjob --verbose CMD` sets RTJOB_VERBOSE while CMD runs (what the backend reads), and gives the caller's
    environment back: a caller that runs rtjob's main in its process is left as it was."""
    import rtjob.commands.project as project

    seen: list[str | None] = []
    real = project.validate.callback
    assert real is not None

    def spy(*args: object, **kwargs: object) -> object:
        seen.append(os.environ.get(VERBOSE_ENV))
        return real(*args, **kwargs)

    monkeypatch.setattr(project.validate, "callback", spy)
    in_process(capsys, "--verbose", "validate", "nowhere-job")
    in_process(capsys, "validate", "nowhere-job")
    assert seen == ["1", None] and VERBOSE_ENV not in os.environ
