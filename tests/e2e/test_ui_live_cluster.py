"""`rtjob ui` on a run that is running on the session's embedded cluster: the line the job prints next appears on
the open run page without a reload (the log parts its companion writes, streamed as server-sent events), and the
status card turns to the run's end by itself."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.browser import chromium, until
from support.browser import ui_server as serving
from support.cli import REPO, record, rtjob

ARTIFACTS = REPO / "tmp" / "artifacts" / "ui"


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium() as driver:
        yield driver


def test_a_printed_line_appears_without_reload(cluster_env: dict[str, str], browser: Any, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By

    run_id = f"ui-live-{uuid.uuid4().hex[:8]}"
    sub = rtjob("submit", "tests/support/jobs/count.yaml", "--submission-id", run_id, "--no-wait",
                "--set", "args.lines=30", "--set", "args.interval=0.4", "--env", "RTJOB_COMPANION_INTERVAL_S=1",
                env=cluster_env)
    assert sub.returncode == 0, sub.stderr
    try:
        with serving(cluster_env, log=tmp_path / "ui.log") as url:
            browser.get(f"{url}runs/{run_id}")
            assert browser.find_element(By.TAG_NAME, "body").get_attribute("data-live") == "1"
            browser.execute_script("window.notReloaded = true")
            log = browser.find_element(By.ID, "log")
            first = until(lambda: [ln for ln in log.text.splitlines() if ln.startswith("line ")], timeout=120,
                          what="the job's first lines")
            last_seen = int(first[-1].split()[1])
            until(lambda: f"line {last_seen + 2} of 30" in log.text, timeout=120, what="a line printed later")
            assert browser.execute_script("return window.notReloaded") is True
            until(lambda: browser.execute_script("return document.getElementById('status').textContent") == "SUCCEEDED",
                  timeout=120,
                  what="the status card turning to the run's end")
            assert "line 30 of 30" in log.text
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            browser.save_screenshot(str(ARTIFACTS / "live-cluster-run.png"))
            record(browser.page_source)
    finally:
        rtjob("wait", run_id, "--timeout", "120s", env=cluster_env, timeout=180)
