"""`rtjob ui` on a run that is running on the session's embedded cluster: the line the job prints next appears on
the open run page without a reload (the log parts its companion writes, streamed as server-sent events), and the
status card turns to the run's end by itself."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support import shared_runs
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
                "--set", "args.lines=600", "--set", "args.interval=0.3", "--env", "RTJOB_COMPANION_INTERVAL_S=1",
                env=cluster_env)
    assert sub.returncode == 0, sub.stderr
    try:
        with serving(cluster_env, log=tmp_path / "ui.log") as url:
            browser.get(f"{url}runs/{run_id}")
            assert browser.find_element(By.TAG_NAME, "body").get_attribute("data-live") == "1"
            browser.execute_script("window.notReloaded = true")
            def log() -> str:  # looked up on every check (until() looks a stale element up again)
                return str(browser.find_element(By.ID, "log").text)

            first = until(lambda: [ln for ln in log().splitlines() if ln.startswith("line ")], timeout=120,
                          what="the job's first lines")
            last_seen = int(first[-1].split()[1])
            until(lambda: f"line {last_seen + 2} of 600" in log(), timeout=120,
                  what=f"line {last_seen + 2} (the page first showed up to {first[-1]!r})")
            assert browser.execute_script("return window.notReloaded") is True
            stopped = rtjob("stop", run_id, env=cluster_env, timeout=120)  # the run ends while its page is open
            assert stopped.returncode == 0, stopped.stderr
            until(lambda: browser.execute_script("return document.getElementById('status').textContent") == "STOPPED",
                  timeout=120, what="the status card turning to the run's end")
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            browser.save_screenshot(str(ARTIFACTS / "live-cluster-run.png"))
            record(browser.page_source)
    finally:
        rtjob("wait", run_id, "--timeout", "120s", env=cluster_env, timeout=180)


def test_a_pipeline_run_shows_its_steps(cluster_env: dict[str, str], browser: Any, tmp_path: Path) -> None:
    """A real pipeline (tests/support/jobs/relay.yaml: three tiny steps; the session's run of it, which
    test_pipeline.py checks too) run to its end, then its page: every step a node of the graph with its state, each a
    link to its own run."""
    from selenium.webdriver.common.by import By

    relay = shared_runs.relay(cluster_env)
    pid, done = relay.pid, relay.waited
    assert relay.submitted.returncode == 0 and done.returncode == 0, (relay.submitted.stderr + done.stderr)[-2000:]
    assert json.loads(done.stdout)["status"] == "SUCCEEDED", done.stdout
    with serving(cluster_env, log=tmp_path / "ui.log") as url:
        browser.get(f"{url}runs/{pid}")
        nodes = browser.find_elements(By.CSS_SELECTOR, "#steps .node")
        assert [n.text.split("\n")[:2] for n in nodes] == [["first", "SUCCEEDED"], ["second", "SUCCEEDED"],
                                                           ["third", "SUCCEEDED"]]
        browser.save_screenshot(str(ARTIFACTS / "pipeline-cluster-run.png"))
        nodes[1].find_element(By.TAG_NAME, "a").click()
        until(lambda: f"{pid}-second" in browser.title, what="the step's own page")
        until(lambda: "step second wrote first,second" in browser.find_element(By.ID, "log").text, what="its log")
        record(browser.page_source)
