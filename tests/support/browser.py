"""Headless Debian Chromium through Selenium and Debian's chromedriver (make browser installs both), and a
`rtjob ui` server started as a subprocess, for the browser tests. Missing packages fail the tests, never skip."""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .cli import REPO, RTJOB, record
from .processes import stop

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--window-size=1400,1800")


# What chromedriver answers for an element of a document that a navigation or a re-render replaced, besides
# StaleElementReferenceException: a generic error with one of these messages (seen: "Node with given id does not
# belong to the document" while a form's submit loaded the next page).
_REPLACED_DOCUMENT = ("does not belong to the document", "No node with given id", "Could not find node with given id",
                      "Cannot find context with specified id", "Execution context was destroyed")


def _page_changed(err: Exception) -> bool:
    from selenium.common.exceptions import (
        NoSuchElementException,
        StaleElementReferenceException,
        WebDriverException,
    )

    if isinstance(err, (StaleElementReferenceException, NoSuchElementException)):
        return True
    return isinstance(err, WebDriverException) and any(text in str(err.msg) for text in _REPLACED_DOCUMENT)


def until(check: Callable[[], Any], timeout: float = 30.0, what: str = "condition") -> Any:
    """``check()`` once it is truthy. A page that navigates or re-renders while ``check`` reads it (an element gone
    stale or of a replaced document, or not there yet) counts as "not yet": ``check`` runs again and looks its
    elements up afresh, so a check must find its elements itself rather than hold one found before the wait.
    Any other error fails at once."""
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while True:
        try:
            got = check()
        except Exception as err:  # noqa: BLE001 (re-raised unless the page changed under the check)
            if not _page_changed(err):
                raise
            got, last = None, err
        if got:
            return got
        if time.monotonic() > deadline:
            seen = f" (last: {type(last).__name__})" if last else ""
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}{seen}")
        time.sleep(0.1)


@contextmanager
def chromium() -> Iterator[Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    assert Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists(), (
        "the browser tests need Debian's chromium and chromium-driver: make browser installs them")
    profile = tempfile.mkdtemp(prefix="rtjob-ui-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (*FLAGS, f"--user-data-dir={profile}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


@contextmanager
def ui_server(env: dict[str, str], *args: str, log: Path) -> Iterator[str]:
    """`rtjob ui --port 0 ARGS` running; yields its address. Its output goes to ``log`` (no pipe to fill)."""
    with open(log, "w") as out:
        proc = subprocess.Popen([*RTJOB, "ui", "--port", "0", *args], env=env, cwd=REPO, stdout=out,
                                stderr=subprocess.STDOUT, text=True)
    try:
        match = until(lambda: re.search(r"http://127\.0\.0\.1:\d+/", log.read_text()) or proc.poll() is not None,
                      timeout=60, what="the server's address")
        assert proc.poll() is None, f"rtjob ui exited: {log.read_text()}"
        yield match.group(0)
    finally:
        stop(proc)
        record(log.read_text())
